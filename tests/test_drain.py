"""Draining against a real slurmctld with four slurmd (Debian's slurm-wlm): reasons set by people
are never overwritten, observe resumes only its own drains, the drain budget stops mass drains,
dry runs change nothing, and every decision is in the ledger."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from observe.health import policy as pol
from observe.health import slurm
from observe.health.drain import Drainer
from observe.store import Store
from slurm_cluster import SlurmCluster, available

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(available() is not None, reason=f"real Slurm: {available()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), n=4).serving() as c:
        yield c


@pytest.fixture
def fresh(cluster: SlurmCluster) -> SlurmCluster:
    """Every node back to idle before a test."""
    for n in cluster.nodes:
        if "DRAIN" in cluster.state(n)[0] or "DOWN" in cluster.state(n)[0]:
            cluster.scontrol("update", f"NodeName={n}", "State=RESUME")
    cluster.wait_idle(cluster.nodes)
    return cluster


def _policy(**drain) -> pol.Policy:
    p = pol.load()
    return replace(p, drain=replace(p.drain, **drain))


def _ledger(store: Store) -> pl.DataFrame:
    return store.scan(sources=["health"]).collect().sort("offset")


def test_drain_then_resume_own_drain(fresh: SlurmCluster, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    d = Drainer(_policy(max_fraction=0.5), store)
    [made] = d.drain("node2", "gpu_burn FAIL: cuda:3 1 product(s) differ", {"check": "gpu_burn"})
    assert made.kind == "node_drain" and made.done
    state, reason = fresh.state("node2")
    assert "DRAIN" in state and reason.startswith("observe: gpu_burn FAIL: cuda:3 1 product(s) differ")
    [again] = d.drain("node2", "gpu_burn FAIL")
    assert again.kind == "node_drain_refused" and "already drained by observe" in again.detail
    [back] = d.resume("node2", {"check": "gpu_burn", "status": "PASS"})
    assert back.kind == "node_resume"
    fresh.wait_idle(["node2"])
    kinds = _ledger(store).get_column("kind").to_list()
    assert kinds == ["node_drain", "node_resume"]
    attrs = _ledger(store).get_column("attrs")[0]
    assert '"policy":"' + pol.load().version + '"' in attrs and '"check":"gpu_burn"' in attrs


def test_a_persons_reason_is_never_overwritten_nor_resumed(fresh: SlurmCluster, tmp_path: Path) -> None:
    fresh.scontrol("update", "NodeName=node3", "State=DRAIN", "Reason=RMA ticket 4411 (alice)")
    store = Store(tmp_path / "store")
    d = Drainer(_policy(max_fraction=1.0), store)
    [refused] = d.drain("node3", "xid 79")
    assert refused.kind == "node_drain_refused" and "RMA ticket 4411" in refused.detail
    [kept] = d.resume("node3")
    assert kept.kind == "node_resume_refused"
    assert fresh.state("node3")[1].startswith("RMA ticket 4411 (alice)")
    assert _ledger(store).get_column("kind").to_list() == ["node_drain_refused", "node_resume_refused"]


def test_budget_stops_a_mass_drain_and_escalates(fresh: SlurmCluster, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    d = Drainer(_policy(max_fraction=0.5, max_per_hour=0), store)  # 2 of 4 nodes at most
    results = [d.drain(n, "nccl timeout on every rank") for n in fresh.nodes]
    assert [r[0].kind for r in results] == ["node_drain", "node_drain", "node_drain_refused", "node_drain_refused"]
    assert results[2][1].kind == "drain_budget_exhausted" and "2 of 4 nodes" in results[2][0].detail
    assert ["DRAIN" in fresh.state(n)[0] for n in fresh.nodes] == [True, True, False, False]
    assert _ledger(store).filter(pl.col("kind") == "drain_budget_exhausted").height == 1
    assert "breaker is open" in results[3][0].detail  # the breaker tripped: no second budget check


def test_the_breaker_holds_until_a_person_resets_it(fresh: SlurmCluster, tmp_path: Path) -> None:
    """Once the budget is exhausted, even a drain the budget would allow again is refused until
    `observe health breaker --reset`; the reset is in the ledger."""
    store = Store(tmp_path / "store")
    d = Drainer(_policy(max_fraction=0.25, max_per_hour=0), store)  # 1 of 4 nodes
    assert d.drain("node1", "xid 79")[0].kind == "node_drain"
    assert d.drain("node2", "xid 79")[1].kind == "drain_budget_exhausted"
    assert d.resume("node1")[0].kind == "node_resume"  # the budget has room again, the breaker does not
    held = d.drain("node3", "xid 79")
    assert held[0].kind == "node_drain_refused" and "breaker is open" in held[0].detail
    assert "DRAIN" not in fresh.state("node3")[0]
    cli = [sys.executable, "-m", "observe.cli", "health", "breaker", "--store", str(store.root)]
    status = subprocess.run(cli, capture_output=True, text=True)
    assert status.returncode == 1 and "OPEN since" in status.stdout
    reset = subprocess.run([*cli, "--reset", "--note", "switch ib-sw-7 replaced"], capture_output=True, text=True)
    assert reset.returncode == 0 and "drains allowed again" in reset.stdout, reset.stderr
    assert subprocess.run(cli, capture_output=True, text=True).returncode == 0
    assert d.drain("node3", "xid 79")[0].kind == "node_drain"
    (row,) = _ledger(store).filter(pl.col("kind") == "drain_breaker_reset").iter_rows(named=True)
    assert "switch ib-sw-7 replaced" in row["message"]


def test_the_share_counts_gpu_nodes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Login and CPU nodes in a partition do not widen the budget (recorded scontrol lines)."""
    lines = [f"NodeName=gpu{i} State=IDLE Partitions=batch Gres=gpu:8" for i in range(1, 11)] + \
            [f"NodeName=cpu{i} State=IDLE Partitions=batch Gres=(null)" for i in range(1, 31)]
    lines[0] = lines[0].replace("State=IDLE", "State=IDLE+DRAIN Reason=observe: [hardware] xid 79 [root@now]")
    found = [slurm._node(line) for line in lines]
    monkeypatch.setattr(slurm, "nodes", lambda names=None: [n for n in found if not names or n.name in names])
    d = Drainer(_policy(max_fraction=0.1, max_per_hour=0))  # 10% of 10 GPU nodes: 1, already used
    assert "1 of 10 GPU nodes in batch" in d._over_budget(found[1])
    wide = Drainer(_policy(max_fraction=0.1, max_per_hour=0, gpu_nodes_only=False))  # 10% of 40: 4
    assert wide._over_budget(found[1]) == ""


def test_hourly_budget_counts_the_ledger(fresh: SlurmCluster, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    d = Drainer(_policy(max_fraction=1.0, max_per_hour=1), store)
    assert d.drain("node1", "xid 79")[0].kind == "node_drain"
    d.resume("node1")
    over = d.drain("node4", "xid 79")
    assert over[0].kind == "node_drain_refused" and "1 drains in the last hour" in over[0].detail
    assert "DRAIN" not in fresh.state("node4")[0]


def test_dry_run_changes_nothing_but_is_recorded(fresh: SlurmCluster, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    [dry] = Drainer(_policy(max_fraction=1.0), store, dry_run=True).drain("node1", "xid 48")
    assert dry.kind == "node_drain" and dry.dry_run and not dry.done
    assert fresh.state("node1")[0] == "IDLE"
    assert '"dry_run":true' in _ledger(store).get_column("attrs")[0]


def test_names_and_reasons_never_reach_a_shell(fresh: SlurmCluster) -> None:
    with pytest.raises(slurm.SlurmError, match="is not a node name"):
        slurm.drain("node1;reboot", "x")
    with pytest.raises(slurm.SlurmError, match="is not a job id"):
        slurm.requeue("12 && rm -rf /")
    assert slurm.clean_reason("xid 79\nState=RESUME $(reboot) 'a\"\x00") == "xid 79 State RESUME (reboot) a"
    slurm.drain("node1", "observe: xid 79 State=RESUME Reason=x")  # scontrol re-parses Key=value inside an argument
    state, reason = fresh.state("node1")
    assert "DRAIN" in state and reason.startswith("observe: xid 79 State RESUME Reason x")


def test_cli_drain_and_resume(fresh: SlurmCluster, tmp_path: Path) -> None:
    env = {**fresh.env, "PYTHONPATH": str(ROOT)}
    store = str(tmp_path / "store")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "observe.cli", *args, "--store", store], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=60)

    ok = cli("drain", "node4", "--reason", "ib mlx5_0 down")
    assert ok.returncode == 0 and "node_drain node4" in ok.stdout
    assert "observe: ib mlx5_0 down" in fresh.state("node4")[1]
    assert cli("resume", "node4").returncode == 0
    bad = cli("drain", "no such node", "--reason", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
