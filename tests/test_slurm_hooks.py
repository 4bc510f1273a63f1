"""observe's Slurm hooks against a real slurmctld with four slurmd: an Xid on one node of a running
job drains that node and requeues the job, which resumes from its latest checkpoint on the others;
hooks that cannot work leave the node alone and exit 0; nothing from job data reaches a shell;
captured artifacts leak no secret; a HealthCheckProgram resumes a node only once its failed checks pass.

The fake nodes share this host's kernel, so each node's kernel log is a file (``<dir>/<node>/kern.log``,
the policy's ``xid_history.log = ".../%n/kern.log"``)."""
from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from observe.store import Store
from conftest import committed
from slurm_cluster import SlurmCluster, available

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(available() is not None, reason=f"real Slurm: {available()}")
XID = ("{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name={name}, GPU has fallen off the bus.\n")


def _wrapper(path: Path, kind: str, store: Path, policy: Path, log: Path, env: str = "") -> Path:
    """The hook as the README shows it: absolute paths (no PATH), a hard time limit, and exit 0 whatever happens;
    observe's own exit status is kept in ``<log>.rc`` (the wrapper's ``exit 0`` would hide it)."""
    path.write_text(f"#!/bin/sh\n{env}/usr/bin/timeout -s KILL 120 {Path(sys.executable).parent / 'observe'} slurm {kind} "
                    f"--store {store} --policy {policy} --log {log}\necho $? >> {log}.rc\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("hooks")
    for n in ("node1", "node2", "node3", "node4"):
        (d / "klog" / n).mkdir(parents=True)
        (d / "klog" / n / "kern.log").write_text("")
    policy = d / "policy.toml"
    policy.write_text(f'[xid_history]\nlog = "{d}/klog/%n/kern.log"\n\n[epilog]\nchecks = ["xid_history"]\n'
                      f'[prolog]\nchecks = []\n[healthcheck]\nchecks = ["xid_history"]\n'
                      f'[drain]\nreturn_checks = ["gpu_burn"]\nbug_report_dir = "{d}/bug-reports"\n'
                      f'bug_report_command = "{d}/nvidia-bug-report.sh"\n[gpu_burn]\nseconds = 1\n')
    report = d / "nvidia-bug-report.sh"  # stands in for NVIDIA's: writes its arguments where the report goes
    report.write_text('#!/bin/sh\nfor a; do [ "$prev" = --output-file ] && out=$a; prev=$a; done\n'
                      'echo "$@" | gzip > "$out.gz"\n')
    report.chmod(0o755)
    store, log = d / "store", d / "hooks.log"
    epilog = _wrapper(d / "epilog.sh", "epilog", store, policy, log)
    with SlurmCluster(d / "slurm", n=4, base_port=17200, extra=f"Epilog={epilog}\n").serving() as c:
        yield {"dir": d, "cluster": c, "store": Store(store), "policy": policy, "log": log, "epilog": epilog}


@pytest.fixture
def fresh(site):
    """Every node idle, every kernel log empty, the Epilog the normal one."""
    c: SlurmCluster = site["cluster"]
    for n in c.nodes:
        (site["dir"] / "klog" / n / "kern.log").write_text("")
        subprocess.run(["scontrol", "delete", f"ReservationName=observe_quarantine_{n}"], env=c.env, capture_output=True)
        if any(s in c.state(n)[0] for s in ("DRAIN", "DOWN")):
            c.scontrol("update", f"NodeName={n}", "State=RESUME")
    _wrapper(site["epilog"], "epilog", site["store"].root, site["policy"], site["log"])
    c.wait_idle(c.nodes)
    return site


def _xid(site, node: str, name: str = "python") -> None:
    ts = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    with open(site["dir"] / "klog" / node / "kern.log", "a") as f:
        f.write(XID.format(ts=ts, node=node, name=name))


def _sbatch(c: SlurmCluster, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], env=c.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _job(c: SlurmCluster, job: str) -> dict:
    line = c.scontrol("show", "job", job, "-o")
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def _wait(what, timeout: float = 60.0, every: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"waited {timeout}s")


def _events(site, kind: str, **eq) -> pl.DataFrame:
    df = committed(site["store"]).scan(sources=["health", "slurm"]).filter(pl.col("kind") == kind).collect()
    for k, v in eq.items():
        df = df.filter(pl.col(k) == v)
    return df.sort("ts")


def test_xid_on_a_node_drains_it_and_the_job_resumes_from_its_checkpoint(fresh) -> None:
    """3-node job; node2 logs Xid 79 and its rank dies: node2 drained with evidence, the job requeued,
    run again on node1, node3, node4 from its latest checkpoint (no step before it redone)."""
    site, c = fresh, fresh["cluster"]
    d = site["dir"]
    ckpt, steps_log, fault = d / "ckpt", d / "steps.log", d / "fault"
    ckpt.mkdir()
    port = _free_port()
    script = d / "train.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"#OBSERVE requeue checkpoints={ckpt}\n"
        f"export MASTER_PORT=$(({port} + ${{SLURM_RESTART_COUNT:-0}})) GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1\n"
        f"srun --kill-on-bad-exit=1 {sys.executable} {ROOT / 'tests' / 'slurm_train.py'} {ckpt} 20 5 {steps_log} {fault} node2\n")
    job = _sbatch(c, "-N3", "--ntasks-per-node=1", "--requeue", "-J", "train", "-o", str(d / "train-%j.out"), str(script))

    def steps() -> list[tuple[int, int]]:
        if not steps_log.exists():
            return []
        return [(int(r), int(s)) for r, s, *_ in (line.split() for line in steps_log.read_text().splitlines())]

    _wait(lambda: len(steps()) >= 12, timeout=120)
    assert _job(c, job)["NodeList"] == "node[1-3]"
    failed_at = time.time()
    _xid(site, "node2")
    fault.write_text("")
    running_again = _wait(lambda: _job(c, job)["JobState"] == "RUNNING" and _job(c, job)["Restarts"] == "1" and time.time(),
                          timeout=120)
    resumed = _wait(lambda: next((float(line.split()[2]) for line in steps_log.read_text().splitlines()
                                  if line.startswith("1 ")), None), timeout=120)
    _wait(lambda: _job(c, job)["JobState"] in ("COMPLETED", "FAILED"), timeout=120)
    info = _job(c, job)
    print(f"\nfailure -> job running again: {running_again - failed_at:.1f} s; -> training resumed: "
          f"{resumed - failed_at:.1f} s (cred_expire=10, sched_interval=2)")
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1" and "node2" not in info["NodeList"], info

    state, reason = c.state("node2")
    assert "DRAIN" in state and reason.startswith("observe: [hardware] xid_history (reboot): Xid 79 on 0000:3b:00"), reason
    assert all("DRAIN" not in c.state(n)[0] for n in ("node1", "node3", "node4"))

    first = [s for r, s in steps() if r == 0]
    second = [s for r, s in steps() if r == 1]
    last_ckpt = max(s for s in first if s % 5 == 0 and s < max(first))
    assert second[0] == last_ckpt + 1 and second[-1] == 20, (first, second)  # nothing before the checkpoint redone

    drains = _events(site, "node_drain", node="node2")
    assert drains.height == 1
    evidence = json.loads(drains["attrs"][0])["evidence"]
    assert evidence["job"] == job and evidence["checks"]["xid_history"]["evidence"]["xids"][0]["code"] == 79
    [requeue] = _events(site, "job_requeue", job_id=job).to_dicts()
    lost = json.loads(requeue["attrs"])["evidence"]
    assert lost["checkpoint"].endswith(f"step_{last_ckpt:06d}") and 0 < lost["lost_work_s"] < 120
    artifacts = _events(site, "job_artifacts", job_id=job)
    assert artifacts.height == 2  # the first run and the requeued one, each from its batch host
    assert "#OBSERVE requeue" in json.loads(artifacts["attrs"][0])["script"]


def test_a_hook_that_cannot_work_exits_0_and_leaves_the_node_alone(fresh, tmp_path: Path) -> None:
    """An unreachable store; a check that crashes (a broken rule file); a policy that does not parse."""
    site, c = fresh, fresh["cluster"]
    _xid(site, "node1")  # a real fault: still, no drain without a ledger or a working check
    log = tmp_path / "hooks.log"
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    bad_rules = tmp_path / "rules"
    bad_rules.mkdir()
    (bad_rules / "broken.toml").write_text("[[rule]]\nkind = 'x'\npattern = '(unclosed'\n")
    bad_policy = tmp_path / "bad.toml"
    bad_policy.write_text("[epilog\n")
    cases = [
        ("store unreachable", blocker / "store", site["policy"], ""),
        ("check crashes", site["store"].root, site["policy"], f"OBSERVE_RULES={bad_rules} "),
        ("policy unreadable", site["store"].root, bad_policy, ""),
    ]
    for name, store, policy, env in cases:
        _wrapper(site["epilog"], "epilog", store, policy, log, env)
        job = _sbatch(c, "-w", "node1", "-o", "/dev/null", "--wrap", "exit 3")
        _wait(lambda: _job(c, job)["JobState"] in ("FAILED", "COMPLETED"), timeout=60)
        assert _job(c, job)["JobState"] == "FAILED"  # the job's own exit 3, not an epilog failure
        assert c.state("node1")[0] == "IDLE", (name, c.state("node1"), log.read_text())
    text = log.read_text()
    assert Path(f"{log}.rc").read_text().split() == ["0"] * len(cases)  # observe's own status, not the wrapper's
    assert "not-a-dir" in text and "nothing done" in text
    assert "xid_history UNKNOWN" in text
    assert "not run: PolicyError" in text
    assert _events(site, "node_drain", node="node1").height == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _observe(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "observe"), *args], env=env, capture_output=True, text=True)


def _healthcheck(site, node: str, store: Path, policy: Path | None = None) -> None:
    """As slurmd runs HealthCheckProgram: only SLURMD_NODENAME and PWD (and SLURM_CONF, as this
    test cluster's slurm.conf is not at the default path)."""
    env = {"SLURMD_NODENAME": node, "PWD": "/", "SLURM_CONF": str(site["cluster"].conf)}
    done = _observe("slurm", "healthcheck", "--store", str(store), "--policy", str(policy or site["policy"]),
                    "--log", str(site["log"]), env=env)
    assert done.returncode == 0, done.stderr
    committed(store)  # the central compaction runs between health checks


def test_healthcheck_resumes_only_once_the_failed_check_passes(fresh, tmp_path: Path) -> None:
    site, c = fresh, fresh["cluster"]
    store = tmp_path / "store"
    _xid(site, "node3")
    _healthcheck(site, "node3", store)
    state, reason = c.state("node3")
    assert "DRAIN" in state and reason.startswith("observe: [hardware] xid_history"), reason
    refused = _observe("resume", "node3", "--store", str(store), "--policy", str(site["policy"]))
    assert refused.returncode == 1 and "not passed since the drain: gpu_burn (not run), xid_history (not run)" in refused.stdout, refused.stdout
    _healthcheck(site, "node3", store)  # still failing: stays drained
    assert "DRAIN" in c.state("node3")[0]
    refused = _observe("resume", "node3", "--store", str(store), "--policy", str(site["policy"]))
    assert refused.returncode == 1 and "xid_history (FAIL)" in refused.stdout, refused.stdout
    (site["dir"] / "klog" / "node3" / "kern.log").write_text("")  # the node rebooted: a fresh kernel log
    _healthcheck(site, "node3", store)
    c.wait_idle(["node3"], timeout=10)  # resumed (idle+not_responding for about a second first)
    c.scontrol("update", "NodeName=node4", "State=DRAIN", "Reason=fan replaced, burn-in pending")
    _healthcheck(site, "node4", store)  # a person's drain: checks pass, still not resumed
    assert c.state("node4") == ("IDLE+DRAIN", "fan replaced, burn-in pending [root@" + c.state("node4")[1].split("[root@")[1])
    ledger = committed(store).scan(sources=["health"]).collect()
    assert ledger.filter(pl.col("kind") == "node_resume")["node"].to_list() == ["node3"]
    burn = ledger.filter((pl.col("kind") == "health_check") & pl.col("message").str.starts_with("gpu_burn"))
    assert burn["node"].to_list() == ["node3"]  # the extended re-check ran once, on the drained node only


def test_drains_by_others_reach_the_ledger_once(fresh, tmp_path: Path) -> None:
    """A drain observe did not make (NHC's, an admin's) is recorded by the next healthcheck, once, with
    who set it; its end too. With slurmctld's own log ingested beside the ledger, each change is listed once."""
    site, c = fresh, fresh["cluster"]
    store = tmp_path / "store"
    # the log has earlier tests' changes: a second boundary between theirs and this test's (Slurm
    # stamps a drain reason to the second)
    time.sleep(1.0)
    start = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    c.scontrol("update", "NodeName=node1", "State=DRAIN", "Reason=NHC: check_fs_mount: /scratch not mounted")
    _healthcheck(site, "node1", store)
    _healthcheck(site, "node1", store)  # the same drain: not recorded again
    seen = committed(store).scan(sources=["health"]).filter(pl.col("kind") == "node_drain_seen").collect()
    assert seen.height == 1 and seen["message"][0].startswith("node1 IDLE+DRAIN by nhc (root): NHC: check_fs_mount")
    reason_time = datetime.fromisoformat(c.state("node1")[1].split("@")[1].rstrip("]")).astimezone(timezone.utc)
    assert seen["ts"][0] == reason_time  # when the drain was set, not when it was noticed
    c.scontrol("update", "NodeName=node1", "State=RESUME")
    c.wait_idle(["node1"], timeout=10)
    _healthcheck(site, "node1", store)
    _xid(site, "node3")
    _healthcheck(site, "node3", store)  # observe's own drain
    assert _observe("ingest", "--source", "slurm", "--store", str(store),
                    str(c.dir / "log" / "slurmctld.log")).returncode == 0
    logged = committed(store).scan(sources=["slurm"]).filter(pl.col("kind").str.starts_with("slurm_node_")).collect()
    assert {"slurm_node_drain", "slurm_node_reason", "slurm_node_resume"} <= set(logged["kind"]), logged["raw"].to_list()
    done = _observe("health", "drains", "--store", str(store), "--format", "json", "--since", start, "--node", "node[1,3]")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["node"], r["what"], r["by"]) for r in rows] == [
        ("node1", "drain", "nhc"), ("node1", "resume", "unknown"), ("node3", "drain", "observe")], done.stdout
    assert rows[0]["user"] == "root" and rows[2]["reason"].startswith("observe: [hardware] xid_history")
    table = _observe("health", "drains", "--store", str(store), "--since", start, "--node", "node[1,3]", "--by", "nhc")
    assert "1 drains on 1 nodes: 1 by nhc" in table.stdout, table.stdout


def test_quarantine_holds_a_node_a_person_resumed_until_its_recheck_passes(fresh, tmp_path: Path) -> None:
    """[drain] quarantine: the drained node is also held in a reservation only root may use. A person's
    resume does not return it to users; the next healthcheck's re-check (xid_history, then the burn)
    releases it, and the job waiting for it starts."""
    site, c = fresh, fresh["cluster"]
    store, policy = tmp_path / "store", tmp_path / "quarantine.toml"
    policy.write_text(site["policy"].read_text().replace("[drain]\n", "[drain]\nquarantine = true\n"))
    _xid(site, "node1")
    _healthcheck(site, "node1", store, policy)
    assert "DRAIN" in c.state("node1")[0]
    assert "ReservationName=observe_quarantine_node1 " in c.scontrol("show", "reservation", "-o")
    (site["dir"] / "klog" / "node1" / "kern.log").write_text("")  # repaired (the kernel log of a new boot)
    c.scontrol("update", "NodeName=node1", "State=RESUME")  # a person returns it before the re-check
    job = _sbatch(c, "-w", "node1", "-o", "/dev/null", "--wrap", "true")
    time.sleep(3)
    assert _job(c, job)["JobState"] == "PENDING"  # held: no job of a user lands on it
    _healthcheck(site, "node1", store, policy)  # xid_history passes, the burn passes: released
    assert "observe_quarantine_node1" not in c.scontrol("show", "reservation", "-o")
    _wait(lambda: _job(c, job)["JobState"] == "COMPLETED", timeout=30)
    ledger = committed(store).scan(sources=["health"]).filter(pl.col("kind") == "node_resume").collect()
    assert ledger["message"].to_list() == ["node_resume node1: released from reservation observe_quarantine_node1"]


def test_drill_inject_drain_reset_recheck_return_then_the_ladder(fresh, tmp_path: Path) -> None:
    """The drill: `observe health inject-fault` -> the healthcheck drains the node ([hardware], reset)
    -> the reset is done (`observe health set-healthy --did reset`) -> the re-check (xid_history,
    then the extended burn on the idle node) returns it. The fault coming back climbs the ladder:
    reboot, then replace (hardware inspection)."""
    site, c = fresh, fresh["cluster"]
    store = tmp_path / "store"
    klog = site["dir"] / "klog" / "node2" / "kern.log"
    inject = ["health", "inject-fault", "--xid", "48", "--gpu", "0000:3b:00", "--to", str(klog), "--node", "node2", "--yes"]
    for rung, did in (("reset", "reset"), ("reboot", "reboot")):
        assert _observe(*inject).returncode == 0
        _healthcheck(site, "node2", store)
        state, reason = c.state("node2")
        assert "DRAIN" in state and reason.startswith(f"observe: [hardware] xid_history ({rung}): Xid 48 on 0000:3b:00"), reason
        _healthcheck(site, "node2", store)  # not fixed yet: stays drained, the burn is not run
        assert "DRAIN" in c.state("node2")[0]
        done = _observe("health", "set-healthy", "node2", "--gpu", "0000:3b:00", "--did", did, "--note", "drill",
                        "--store", str(store))
        assert done.returncode == 0 and "fault cleared on node2 GPU 0000:3b:00" in done.stdout, done.stderr
        _healthcheck(site, "node2", store)
        c.wait_idle(["node2"], timeout=10)  # returned
    assert _observe(*inject).returncode == 0
    _healthcheck(site, "node2", store)
    state, reason = c.state("node2")
    assert "DRAIN" in state and "Xid 48 on 0000:3b:00: replace 3 episodes" in reason, reason
    ledger = committed(store).scan(sources=["health"]).collect().sort("ts")
    steps = ledger.filter(pl.col("kind").is_in(["node_drain", "fault_cleared", "node_resume"]))["kind"].to_list()
    assert steps == ["node_drain", "fault_cleared", "node_resume"] * 2 + ["node_drain"]
    burns = ledger.filter((pl.col("kind") == "health_check") & pl.col("message").str.starts_with("gpu_burn PASS"))
    assert burns.height == 2  # the extended re-check before each return
    reports = ledger.filter(pl.col("kind") == "bug_report")["attrs"].map_elements(lambda a: json.loads(a)["file"],
                                                                                 return_dtype=pl.String).to_list()
    assert len(reports) == 3  # one per drain, collected before the remedy
    got = _wait(lambda: Path(reports[0]).exists() and gzip.decompress(Path(reports[0]).read_bytes()).decode())
    assert got.startswith("--safe-mode --output-file ") and "nvidia-bug-report-node2-" in got
    assert _observe("ingest", str(klog), "--store", str(store), "--node", "node2", "--source", "kernel").returncode == 0  # as the collector would
    faults = _observe("health", "faults", "--all", "--format", "json", "--store", str(store))
    rows = [json.loads(line) for line in faults.stdout.splitlines()]
    assert [(r["remedy"], r["open"]) for r in rows if r["node"] == "node2"] == [("reset", False), ("reboot", False),
                                                                                  ("replace", True)], faults.stdout


def test_drain_budget_holds_when_every_node_fails_at_once(fresh, tmp_path: Path) -> None:
    site, c = fresh, fresh["cluster"]
    store = tmp_path / "store"
    for n in c.nodes:
        _xid(site, n)
    env = {"PWD": "/", "SLURM_CONF": str(c.conf)}
    procs = [subprocess.Popen([str(Path(sys.executable).parent / "observe"), "slurm", "healthcheck", "--store", str(store),
                               "--policy", str(site["policy"]), "--log", str(site["log"])],
                              env={**env, "SLURMD_NODENAME": n}) for n in c.nodes]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    drained = [n for n in c.nodes if "DRAIN" in c.state(n)[0]]
    assert len(drained) == 1, [c.state(n) for n in c.nodes]  # 10% of 4 nodes, at least one
    ledger = committed(store).scan(sources=["health"]).collect()
    kinds = ledger["kind"].value_counts()
    count = dict(kinds.iter_rows())
    assert count["node_drain"] == 1 and count["node_drain_refused"] == 3 and count["drain_budget_exhausted"] == 1
    assert ledger.filter(pl.col("message").str.contains("breaker is open")).height == 2  # tripped once, then held
    forced = _observe("resume", drained[0], "--force", "--store", str(store))  # a person's call, on the record
    assert forced.returncode == 0, forced.stdout
    [resume] = committed(store).scan(sources=["health"]).filter(pl.col("kind") == "node_resume").collect()["attrs"]
    assert json.loads(resume)["evidence"]["forced"] is True


def test_names_reasons_and_job_names_never_reach_a_shell(fresh, tmp_path: Path) -> None:
    site, c = fresh, fresh["cluster"]
    evil = lambda tag: f'x; touch {tmp_path}/{tag}a $(touch {tmp_path}/{tag}b) `touch {tmp_path}/{tag}c` "q"'  # noqa: E731
    _xid(site, "node1", name=evil("xid") + "\\nState=RESUME")
    job = _sbatch(c, "-w", "node1", "-J", evil("job") + "\nline2", "-o", "/dev/null", "--wrap", "exit 1")
    _wait(lambda: _job(c, job)["JobState"] == "FAILED", timeout=60)
    state, reason = c.state("node1")
    assert "DRAIN" in state and reason.startswith("observe: [hardware] xid_history"), reason
    assert not any(ch in reason.split(" [root@")[0] for ch in ';$`"=\n'), reason
    bad_node = _observe("drain", f"node2;touch {tmp_path}/nodea", "--reason", "x", "--store", str(tmp_path / "s"))
    assert bad_node.returncode == 2 and "not a node name" in bad_node.stderr
    resumed = _observe("drain", "node2", "--reason", evil("reason") + "\nState=RESUME", "--store", str(tmp_path / "s"),
                       "--policy", str(_roomy(tmp_path)))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "DRAIN" in c.state("node2")[0]  # "State=RESUME" inside the reason did not resume it
    assert sorted(p.name for p in tmp_path.iterdir() if p.name[-1] in "abc" and p.name[:-1] in
                  ("xid", "job", "node", "reason")) == []


def test_a_job_named_like_a_field_is_captured_where_its_script_ran(fresh) -> None:
    """Issue 39: a job named ``train BatchHost=node2`` on node1 made node1's epilog read node2 as its
    batch host and capture nothing (its script hidden from audit): it is captured on node1."""
    site, c = fresh, fresh["cluster"]
    name = "train BatchHost=node2 ExitCode=0:0\nBatchHost=node2"
    job = _sbatch(c, "-w", "node1", "-J", name, "-o", "/dev/null", "--wrap", "echo audited; exit 2")
    [artifacts] = _wait(lambda: _events(site, "job_artifacts", job_id=job).to_dicts(), timeout=60)
    attrs = json.loads(artifacts["attrs"])
    assert artifacts["node"] == "node1"
    assert {k: attrs["job"][k] for k in ("BatchHost", "JobName", "ExitCode")} == {
        "BatchHost": "node1", "JobName": name, "ExitCode": "2:0"}
    assert "echo audited" in attrs["script"]


def _roomy(tmp_path: Path) -> Path:
    """A policy whose budget lets a second node drain."""
    p = tmp_path / "roomy.toml"
    p.write_text("[drain]\nmax_fraction = 0.5\n")
    return p


SECRETS = {  # 20 kinds: variable name -> value; names that say secret, and innocuous names holding token-like values
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLQ",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEQ",
    "GH_CLONE_URL_TOKEN": "ghp_Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789",
    "REPO_CRED": "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
    "CI_GITLAB": "glpat-xYz12345AbCdEfGhIjKl",
    "SLACK_BOT": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "NOTIFY_URL": "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "OPENAI_API_KEY": "sk-proj-Abcdefghijklmnop1234567890QRSTUVWX",
    "CLAUDE": "sk-ant-api03-Abcdefghijklmnopqrstuvwxyz0123456789-_ABCDEFGH",
    "HF_HOME_TOK": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "MAPS": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "BILLING": "sk_live_51AbCdEfGhIjKlMnOpQrStUv",
    "SESSION_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "DATABASE_URL": "postgresql://trainer:Sup3rS3cretPw@db.internal:5432/runs",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "SSH_PRIVATE": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----",
    "NPM_RC": "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "TWINE": "pypi-AgEIcHlwaS5vcmcCJGI1YjU5ZmQ0LTYyN2MtNDFlNi05ZmNhLWQ0ZDljYjFhYmY5ZgACKlsz",
    "AZURE_STORAGE": "DefaultEndpointsProtocol=https;AccountName=runs;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFy==",
    "DB_PASSWORD": "correct horse battery staple",
}


def test_captured_artifacts_leak_no_secret(fresh, tmp_path: Path) -> None:
    """The batch script exports 20 kinds of secrets and passes some on command lines; the epilog's
    environment holds them too. Nothing stored (any column of any event) or logged contains one."""
    site, c = fresh, fresh["cluster"]
    def quoted(v: str) -> str:
        return "'" + v.replace("'", "'\\''") + "'"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + "".join(f"export {k}={quoted(v)}\n" for k, v in SECRETS.items())
                      + f"python train.py --db-password {quoted(SECRETS['DB_PASSWORD'])} "
                      f"--hub-token {SECRETS['HF_HOME_TOK']}\ncurl -H 'Authorization: Bearer {SECRETS['SESSION_JWT']}' x\n"
                      "exit 0\n")
    job = _sbatch(c, "-w", "node1", "-o", "/dev/null", "--hold", str(script))
    store, log = tmp_path / "store", tmp_path / "hooks.log"
    env = {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": job, "SLURM_JOB_EXIT_CODE": "0", "SLURM_CONF": str(c.conf),
           "PWD": "/", **SECRETS}
    done = _observe("slurm", "epilog", "--store", str(store), "--policy", str(site["policy"]), "--log", str(log), env=env)
    subprocess.run(["scancel", job], env=c.env, check=True)
    assert done.returncode == 0
    events = committed(store).scan().collect()
    artifacts = events.filter(pl.col("kind") == "job_artifacts")
    assert artifacts.height == 1
    attrs = json.loads(artifacts["attrs"][0])
    assert attrs["script"].count("[REDACTED]") >= 20 and "export AWS_ACCESS_KEY_ID=" in attrs["script"]
    assert set(SECRETS) <= set(attrs["env"]) and attrs["env"]["SLURM_JOB_ID"] == job
    assert all("[REDACTED]" in attrs["env"][k] for k in SECRETS)
    everything = "\n".join(str(v) for row in events.iter_rows() for v in row) + log.read_text()
    leaked = {k for k, v in SECRETS.items() if any(part in everything for part in _parts(v))}
    assert not leaked, leaked


def _parts(secret: str) -> list[str]:
    """The distinctive pieces of a secret (a leak of its core is a leak, whatever was masked around it)."""
    return [p for p in secret.replace("\n", " ").split() if len(p) >= 12 and "PRIVATE" not in p] or [secret]


def test_allreduce_across_nodes_under_srun_names_the_slowest(fresh) -> None:
    """`observe health run --checks allreduce` as one task per node of a 3-node step (gloo here):
    every rank checks its sums; rank 0 reports busbw and each node's time."""
    c = fresh["cluster"]
    observe = Path(sys.executable).parent / "observe"
    env = {**c.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["srun", "-N3", "--ntasks-per-node=1", str(observe), "health", "run", "--checks", "allreduce",
                           "--device", "cpu", "--format", "json", "--budget", "90s"],
                          env=env, capture_output=True, text=True, timeout=150)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    [report] = [r for r in results if r["status"] != "UNKNOWN"]
    assert report["status"] == "PASS", report
    ev = report["evidence"]
    assert ev["ranks"] == 3 and ev["backend"] == "gloo" and len(set(ev["node_seconds"]) & set(c.nodes)) == 3
    assert ev["slowest_node"] in ev["node_seconds"] and all(s["wrong"] == 0 for s in ev["sizes"])
    print(f"\nallreduce over 3 nodes (gloo, loopback): busbw {ev['sizes'][-1]['busbw_gbps']:.2f} GB/s at "
          f"{ev['sizes'][-1]['bytes'] >> 20} MB; slowest {ev['slowest_node']}")


def test_epilog_drains_the_node_explain_blames(fresh, tmp_path: Path) -> None:
    """No local check finds anything, but the store holds the job's Slurm record and an Xid 79 on
    node2 before it failed: explain's verdict drains node2 (and only node2)."""
    site, c = fresh, fresh["cluster"]
    store = tmp_path / "store"
    now = datetime.now(timezone.utc).timestamp()
    stamp = lambda ago, fmt: datetime.fromtimestamp(now - ago, timezone.utc).strftime(fmt)  # noqa: E731
    ctld, kern = tmp_path / "slurmctld.log", tmp_path / "kern.log"
    ctld.write_text(f"[{stamp(600, '%Y-%m-%dT%H:%M:%S.000')}] sched: Allocate JobId=9001 NodeList=node[1-3] #CPUs=3 Partition=gpu\n"
                    f"[{stamp(60, '%Y-%m-%dT%H:%M:%S.100')}] _job_complete: JobId=9001 WEXITSTATUS 1\n"
                    f"[{stamp(60, '%Y-%m-%dT%H:%M:%S.101')}] _job_complete: JobId=9001 done\n")
    kern.write_text(XID.format(ts=stamp(120, "%Y-%m-%dT%H:%M:%S.123456+00:00"), node="node2", name="python"))
    for path, extra in ((ctld, ["--node", "ctl"]), (kern, ["--source", "kernel"])):  # a kernel log named as such
        assert _observe("ingest", str(path), "--store", str(store), *extra).returncode == 0
    policy = tmp_path / "policy.toml"
    policy.write_text(site["policy"].read_text().replace('[epilog]\nchecks = ["xid_history"]', "[epilog]\nchecks = []"))
    for node in ("node1", "node2", "node3"):
        env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "9001", "SLURM_JOB_EXIT_CODE": "256", "SLURM_CONF": str(c.conf)}
        done = _observe("slurm", "epilog", "--store", str(store), "--policy", str(policy), "--log", str(tmp_path / "log"),
                        env=env)
        assert done.returncode == 0
    states = {n: c.state(n) for n in ("node1", "node2", "node3")}
    assert [n for n, (s, _) in states.items() if "DRAIN" in s] == ["node2"], states
    assert states["node2"][1].startswith("observe: [hardware] explain (reboot): root cause of the failure: gpu_xid 79 on "
                                        "0000:3b:00 on this node")
    assert "job_requeue_skipped 9001: slurmctld no longer knows the job" in (tmp_path / "log").read_text()


def test_prolog_drains_a_node_with_a_fatal_xid_before_the_job_uses_it(fresh, tmp_path: Path) -> None:
    site, c = fresh, fresh["cluster"]
    _xid(site, "node4")
    policy = tmp_path / "policy.toml"
    policy.write_text(site["policy"].read_text().replace("[prolog]\nchecks = []", '[prolog]\nchecks = ["xid_history"]'))
    log = tmp_path / "log"
    for node in ("node3", "node4"):
        env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": "424242", "SLURM_CONF": str(c.conf), "PWD": "/"}
        assert _observe("slurm", "prolog", "--store", str(tmp_path / "store"), "--policy", str(policy), "--log", str(log),
                        env=env).returncode == 0
    assert "DRAIN" in c.state("node4")[0] and c.state("node3")[0] == "IDLE"
    text = log.read_text()
    assert "node_drain node4" in text and "job_requeue_skipped 424242: slurmctld no longer knows the job" in text
