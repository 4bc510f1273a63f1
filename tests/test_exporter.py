"""The exporter: central counts kept incrementally (new segments, compactions, expiry), the node
role's collector and health metrics, the exposition checked by promtool, the CLI's errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from observe.collector import Context
from observe.exporter.central import StoreMetrics
from observe.exporter.node import NodeMetrics
from observe.exporter.serve import Exporter, parse_listen
from observe.health.drain import Decision, ledger, reset_breaker
from observe.health.result import Result, Status
from observe.health.runner import as_events
from observe.ingest import parse_bytes
from observe.store import Store

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "real"
PROMTOOL = shutil.which("promtool")
need_promtool = pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"), reason="promtool not installed")


def kernel(store: Store, node: str, text: str, booted_s: float = 1060.0) -> None:
    """Write dmesg lines (``[uptime] ...``) of ``node``, which booted ``booted_s`` seconds ago."""
    boot = datetime.now(timezone.utc) - timedelta(seconds=booted_s)
    store.write(parse_bytes(text.encode(), "kernel", Context(node=node, boot_time=boot, route="kmsg")))


def xid(code: int, text: str = "GPU has fallen off the bus.") -> str:
    return f"[ 1000.000000] NVRM: Xid (PCI:0000:3b:00): {code}, pid='<unknown>', name=<unknown>, {text}\n"


def slurm(store: Store, lines: list[str], source: str = "slurm") -> None:
    store.write(parse_bytes("".join(line + "\n" for line in lines).encode(), source, Context(node="ctl1")))


def stamp(ago_s: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%S")


def samples(metrics) -> dict[tuple, float]:
    """{(name, (label, value)...): value} of every sample a collector yields."""
    return {(s.name, *sorted(s.labels.items())): s.value for fam in metrics.collect() for s in fam.samples}


def fresh_counts(store: Store) -> dict[tuple, float]:
    m = StoreMetrics(store)
    m.refresh()
    return {k: v for k, v in samples(m).items() if k[0] in COUNTED}


COUNTED = {"observe_events_total", "observe_node_events_total", "observe_gpu_xid_total", "observe_job_failures_total",
           "observe_drain_decisions_total", "observe_health_checks_total"}


def test_counts_follow_new_segments_compaction_and_expiry(tmp_path):
    store = Store(tmp_path / "store")
    store.write(parse_bytes((CORPUS / "slurm.log").read_bytes(), "slurm", Context(node="ctl1")))
    kernel(store, "gpu001", (CORPUS / "xid.log").read_text(), booted_s=30 * 86400)
    m = StoreMetrics(store)
    assert m.refresh() == len(store.files()) > 2
    first = samples(m)
    assert first[("observe_gpu_xid_total", ("action", "investigate"), ("code", "32"), ("node", "gpu001"))] >= 1
    assert m.refresh() == 0  # nothing new is read

    kernel(store, "gpu002", xid(79) * 3)
    assert m.refresh() == 1
    now = samples(m)
    assert now[("observe_gpu_xid_total", ("action", "drain_node"), ("code", "79"), ("node", "gpu002"))] == 3
    assert now[("observe_node_events_total", ("kind", "gpu_xid"), ("node", "gpu002"), ("severity", "crit"))] == 3
    assert now[("observe_incidents_open", ("category", "gpu"))] == 1  # a fatal Xid a minute ago: open
    assert {k: v for k, v in now.items() if k[0] in COUNTED} == fresh_counts(store)

    # compaction: its commit adds no new data: nothing counted twice, no rescan
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1)
    assert m.refresh() == 0 and m.rescans == 0
    assert {k: v for k, v in samples(m).items() if k[0] in COUNTED} == fresh_counts(store)

    # a segment written and compacted away between two refreshes is still counted (it outlives the grace)
    kernel(store, "gpu003", xid(48, "An uncorrectable double bit error (DBE) has been detected."))
    for part in store.partitions(sources=["kernel"]):
        store.compactor.compact(part, min_segments=1)
    assert m.refresh() == 1 and m.rescans == 0
    got = samples(m)
    assert got[("observe_gpu_xid_total", ("action", "reset_gpu"), ("code", "48"), ("node", "gpu003"))] == 1
    assert {k: v for k, v in got.items() if k[0] in COUNTED} == fresh_counts(store)

    # ... unless it is already gone (the exporter was down past the grace period): count all again
    kernel(store, "gpu004", xid(79))
    for part in store.partitions(sources=["kernel"]):
        store.compactor.compact(part, min_segments=1)
    store.upkeep.vacuum(grace_s=0)
    m.refresh()
    assert m.rescans == 1
    assert {k: v for k, v in samples(m).items() if k[0] in COUNTED} == fresh_counts(store)

    # expiry: the store shrinks, counters keep what they counted
    before = samples(m)
    store.upkeep.expire("2100-01-01")
    m.refresh()
    after = samples(m)
    left = {p.source for p in store.partitions()}
    assert not left  # every file was written before the cutoff, undated ones too
    assert {k[1][1] for k in after if k[0] == "observe_store_bytes"} == left
    assert after[("observe_events_total", ("kind", "gpu_xid"), ("severity", "crit"), ("source", "kernel"))] == \
        before[("observe_events_total", ("kind", "gpu_xid"), ("severity", "crit"), ("source", "kernel"))]


def test_a_failed_refresh_is_followed_by_a_full_count(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    kernel(store, "gpu001", xid(79))
    m = StoreMetrics(store)
    m.refresh()
    kernel(store, "gpu001", xid(79))
    real = StoreMetrics._count
    monkeypatch.setattr(StoreMetrics, "_count", lambda self, *_: (_ for _ in ()).throw(OSError("file gone")))
    with pytest.raises(OSError):
        m.refresh()  # the new segment is listed but not counted
    monkeypatch.setattr(StoreMetrics, "_count", real)
    m.refresh()
    assert m.rescans == 1
    assert samples(m)[("observe_gpu_xid_total", ("action", "drain_node"), ("code", "79"), ("node", "gpu001"))] == 2


def test_job_failures_counted_once_across_sources_and_refreshes(tmp_path):
    store = Store(tmp_path / "store")
    m = StoreMetrics(store)
    slurm(store, [f"[{stamp(300)}.100] _job_complete: JobId=900 WTERMSIG 9", f"[{stamp(300)}.100] _job_complete: JobId=900 done",
                  f"[{stamp(200)}.000] _job_complete: JobId=901 WEXITSTATUS 0"])
    m.refresh()
    # the job record of the same end arrives later (jobcomp, its own clock a second off): same failure
    end = stamp(299)
    slurm(store, [f"JobId=900 UserId=u(1) GroupId=u(1) Name=train JobState=NODE_FAIL Partition=gpu TimeLimit=60 "
                  f"StartTime={stamp(900)} EndTime={end} NodeList=gpu001 NodeCnt=1 ExitCode=0:9"], source="slurm_jobs")
    m.refresh()
    got = samples(m)
    assert sum(v for k, v in got.items() if k[0] == "observe_job_failures_total") == 1
    assert got[("observe_job_failures_total", ("state", "FAILED"))] == 1  # the first report's state stays
    # the same job failing again later is a second failure
    slurm(store, [f"[{stamp(10)}.000] _job_complete: JobId=900 WTERMSIG 6"])
    m.refresh()
    assert samples(m)[("observe_job_failures_total", ("state", "FAILED"))] == 2


def test_failed_jobs_counted_by_explains_cause_once_settled(tmp_path):
    store = Store(tmp_path / "store")
    slurm(store, [f"[{stamp(600)}.000] sched: Allocate JobId=950 NodeList=gpu001 #CPUs=8 Partition=gpu",
                  f"[{stamp(600)}.000] sched: Allocate JobId=951 NodeList=gpu002 #CPUs=8 Partition=gpu",
                  f"[{stamp(59)}.000] _job_complete: JobId=950 WTERMSIG 9",
                  f"[{stamp(30)}.000] _job_complete: JobId=951 WEXITSTATUS 1"])
    kernel(store, "gpu001", xid(79), booted_s=1000 + 120)  # during job 950, on its node
    now = time.time()
    clock = [now]
    m = StoreMetrics(store, clock=lambda: clock[0])
    m.refresh()
    causes = lambda: {k[1][1]: v for k, v in samples(m).items() if k[0] == "observe_job_failure_causes_total"}  # noqa: E731
    assert sum(causes().values()) == 0  # their logs may still be arriving
    clock[0] = now + 300
    m.refresh()
    assert causes()["gpu"] == 1  # Xid 79 on the job's node
    assert causes()["unexplained"] == 1  # exit 1, nothing else in the store
    clock[0] = now + 600
    m.refresh()
    assert sum(causes().values()) == 2  # each once


def test_drain_ledger_and_health_checks(tmp_path):
    store = Store(tmp_path / "store")
    m = StoreMetrics(store)
    store.write(ledger([Decision("node_drain", "gpu001", "xid", "drained"),
                        Decision("node_drain_refused", "gpu002", "xid", "budget"),
                        Decision("drain_budget_exhausted", "gpu002", "xid", "2 of 2 drains in the last hour"),
                        Decision("node_drain", "gpu003", "xid", "would drain", dry_run=True)], "1"))
    store.write(as_events([Result("gpu_burn", Status.FAIL, "slow"), Result("nvml", Status.PASS, "ok")], "gpu001", "1"))
    m.refresh()
    got = samples(m)
    assert got[("observe_node_drained", ("node", "gpu001"))] == 1
    assert ("observe_node_drained", ("node", "gpu003")) not in got  # a dry run drains nothing
    assert got[("observe_drain_decisions_total", ("decision", "drain_budget_exhausted"), ("node", "gpu002"))] == 1
    assert got[("observe_health_checks_total", ("check", "gpu_burn"), ("status", "FAIL"))] == 1
    assert got[("observe_drain_breaker_open",)] == 1
    store.write(ledger([Decision("node_resume", "gpu001", "checks pass", "resumed")], "1"))
    reset_breaker(store, "ops", "switch replaced")
    m.refresh()
    assert samples(m)[("observe_node_drained", ("node", "gpu001"))] == 0
    assert samples(m)[("observe_drain_breaker_open",)] == 0


BURN = {"dtype": "bf16", "devices": {"cuda:0": {"tflops": 612.5, "model": "NVIDIA H100 80GB HBM3"},
                                     "cuda:1": {"tflops": 598.0, "model": "NVIDIA H100 80GB HBM3"}}}
ALLREDUCE = {"backend": "nccl", "ranks": 16, "sizes": [{"bytes": 1 << 20, "busbw_gbps": 40.0},
                                                        {"bytes": 1 << 30, "busbw_gbps": 182.5}]}


def collector_spool(tmp_path: Path) -> Path:
    """A real collector run over the corpus's kernel log: its spool's stats.json."""
    spool = tmp_path / "spool"
    (tmp_path / "collector.toml").write_text(f"""
node = "gpu001"
spool = "{spool}"
store = "{tmp_path / 'central'}"
[[input]]
path = "{CORPUS / 'xid.log'}"
source = "kernel"
""")
    subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(tmp_path / "collector.toml"), "--once"],
                   check=True, capture_output=True)
    return spool


def test_node_role_reports_collector_and_latest_health(tmp_path):
    spool = collector_spool(tmp_path)
    store = Store(tmp_path / "central")
    store.write(as_events([Result("gpu_burn", Status.FAIL, "slow", BURN, 31.0, "drain")], "gpu001", "1"))
    store.write(as_events([Result("gpu_burn", Status.PASS, "ok", BURN, 30.5),
                           Result("allreduce", Status.PASS, "ok", ALLREDUCE, 12.0),
                           Result("ib", Status.UNKNOWN, "no IB devices")], "gpu001", "1"))
    store.write(as_events([Result("gpu_burn", Status.FAIL, "other node")], "gpu002", "1"))
    m = NodeMetrics("gpu001", spool, store)
    m.refresh()
    got = samples(m)
    N = ("node", "gpu001")
    stats = json.loads((spool / "stats.json").read_text())
    assert got[("observe_collector_lines_total", N)] == stats["lines"] > 0
    assert got[("observe_collector_last_cycle_timestamp_seconds", N)] == stats["updated"]
    assert got[("observe_health_check_status", ("check", "gpu_burn"), N, ("status", "PASS"))] == 1  # the latest
    assert got[("observe_health_check_status", ("check", "gpu_burn"), N, ("status", "FAIL"))] == 0
    assert got[("observe_health_check_status", ("check", "ib"), N, ("status", "UNKNOWN"))] == 1
    assert got[("observe_health_gpu_burn_flops_per_second", ("device", "cuda:0"), ("model", "NVIDIA H100 80GB HBM3"), N)] == 612.5e12
    assert got[("observe_health_allreduce_busbw_bytes_per_second", ("backend", "nccl"), N)] == 182.5e9
    assert got[("observe_health_check_duration_seconds", ("check", "gpu_burn"), N)] == 30.5

    textfile = tmp_path / "textfile"
    exporter = Exporter(m, textfile)
    assert exporter.refresh()
    assert (textfile / "observe.prom").read_bytes() == exporter.body
    assert b'observe_health_check_status{check="gpu_burn",node="gpu001",status="PASS"} 1.0' in exporter.body


@need_promtool
def test_exposition_passes_promtool(tmp_path):
    store = Store(tmp_path / "store")
    slurm(store, [line for line in (CORPUS / "slurm.log").read_text().splitlines()])
    kernel(store, "gpu001", (CORPUS / "xid.log").read_text(), booted_s=30 * 86400)
    store.write(ledger([Decision("node_drain", "gpu001", "xid", "drained")], "1"))
    spool = collector_spool(tmp_path)
    store.write(as_events([Result("gpu_burn", Status.PASS, "ok", BURN, 30.5),
                           Result("allreduce", Status.PASS, "ok", ALLREDUCE, 12.0)], "gpu001", "1"))
    for role in (["central", "--store", str(store.root)],
                 ["node", "--spool", str(spool), "--store", str(store.root), "--node", "gpu001"]):
        body = subprocess.run([sys.executable, "-m", "observe.cli", "exporter", *role, "--once"],
                              check=True, capture_output=True).stdout
        assert b"observe_" in body
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
        assert check.returncode == 0, (role[0], check.stdout.decode() + check.stderr.decode())


def test_refresh_failure_keeps_last_numbers(tmp_path, capsys):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "stats.json").write_text(json.dumps({"lines": 5, "updated": 1.0}))
    exporter = Exporter(NodeMetrics("n1", spool))
    assert exporter.refresh()
    (spool / "stats.json").write_text("{not json")
    assert not exporter.refresh()
    assert b'observe_collector_lines_total{node="n1"} 5.0' in exporter.body
    assert b"observe_exporter_refresh_errors_total 1.0" in exporter.body
    assert "refresh failed" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["central", "--store", "{tmp}/none"], "no store here"),
    (["central", "--store", "{tmp}/store", "--listen", "nonsense"], "use HOST:PORT"),
    (["central", "--store", "{tmp}/store", "--interval", "0s"], "more than 0"),
    (["node"], "nothing to report"),
    (["node", "--config", "{tmp}/missing.toml"], "missing.toml"),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
    Store(tmp_path / "store").write(parse_bytes(b"[2024-10-22T12:26:42.994] sched: x\n", "slurm", Context()))
    proc = subprocess.run([sys.executable, "-m", "observe.cli", "exporter", *[a.format(tmp=tmp_path) for a in args]],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_parse_listen():
    assert parse_listen(":9847") == ("0.0.0.0", 9847)
    assert parse_listen("127.0.0.1:1") == ("127.0.0.1", 1)
    with pytest.raises(ValueError):
        parse_listen("9847")
