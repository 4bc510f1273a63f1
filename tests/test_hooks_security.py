"""The Slurm hooks against what users control on a node, without a Slurm: ``hooks.run`` and the
``observe slurm`` entry point with ``slurm``'s calls replaced (the drain recorded, not made). The
checks are real (``disk``, failing on a floor no file system meets), run by the real runner.

- a slow artifact capture (redaction) cannot keep the epilog's checks, drain and requeue from running;
- a requeue reads the job's checkpoint directory as the job's user, within a time bound;
- links planted where a hook writes (the store's probe, its log, the bug report's directory) are not followed;
- an internal error exits 0, is logged, and drains nothing;
- what every node's hooks record at every job (check results, GPUs, artifacts) waits in ``incoming/``
  for the central commit; the drain ledger is committed at once."""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from observe import redact
from observe.cli import app
from observe.health import bugreport, hooks, policy, requeue, slurm
from observe.store import Store
from conftest import committed
from test_checkpoint_security import NOBODY, as_root, dense, safetensors, within


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A policy whose epilog runs one check that fails (``disk``) and drains; Slurm's calls replaced."""
    path = tmp_path / "policy.toml"
    path.write_text(f'[disk]\npaths = ["{tmp_path}"]\nmin_free_gb = 1e12\n'
                    '[epilog]\nchecks = ["disk"]\nexplain = false\n[prolog]\nchecks = []\n'
                    '[drain]\nbug_report_dir = ""\n')
    calls: dict[str, list] = {"drain": [], "requeue": []}
    job = {"JobState": "FAILED", "BatchHost": "node1", "Requeue": "1", "Restarts": "0"}
    script = {"text": "#!/bin/sh\nexit 1\n"}
    node = slurm.Node("node1", "ALLOCATED", "", ("gpu",), "gpu:8")
    monkeypatch.setattr(slurm, "nodes", lambda names=None: [node])
    monkeypatch.setattr(slurm, "drain", lambda name, reason: calls["drain"].append((name, reason)))
    monkeypatch.setattr(slurm, "requeue", lambda job_id: calls["requeue"].append(job_id))
    monkeypatch.setattr(slurm, "job", lambda job_id: dict(job))
    monkeypatch.setattr(slurm, "batch_script", lambda job_id: script["text"])
    env = {"SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "42", "SLURM_JOB_EXIT_CODE": "256",
           "SLURM_JOB_UID": str(NOBODY[0]), "SLURM_JOB_GID": str(NOBODY[1])}
    return {"policy": path, "calls": calls, "script": script, "env": env,
            "store": Store(tmp_path / "store")}


def epilog(site: dict, budget_s: float = 30, **rules) -> hooks.Hook:
    rules_ = policy.load(site["policy"])
    rules_ = replace(rules_, epilog=replace(rules_.epilog, **rules))
    hook = hooks.Hook("epilog", site["env"], rules_, site["store"])
    assert hooks.run(hook, budget_s) == 0
    return hook


def ledger(site: dict, kind: str) -> list[dict]:
    found = committed(site["store"]).scan(sources=["health"]).filter(pl.col("kind") == kind).collect()
    return [json.loads(a) for a in found["attrs"]]


def test_a_slow_capture_does_not_keep_the_checks_from_running(site: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redaction of the job's artifacts takes longer than the whole budget: the check still runs, the
    node is drained, the job requeued; then the budget stops the capture."""
    monkeypatch.setattr(redact, "text", lambda value: time.sleep(60))
    site["script"]["text"] = "#!/bin/sh\n#OBSERVE requeue\nexit 1\n"
    started = time.monotonic()
    hook = epilog(site, budget_s=8)
    assert time.monotonic() - started < 12
    assert [name for name, _ in site["calls"]["drain"]] == ["node1"], hook.log
    assert site["calls"]["requeue"] == ["42"]
    assert [a["status"] for a in ledger(site, "health_check")] == ["FAIL"]
    assert "stopped: the 8s budget ran out" in hook.log[-1]


def test_check_results_wait_for_the_central_commit_and_the_drain_ledger_does_not(site: dict) -> None:
    """A commit per node and job would have thousands of nodes contend for the table's log: the
    results go to ``incoming/`` as a collector's segments do; a drain is in the table at once (the
    budget and the breaker read it)."""
    store = site["store"]
    epilog(site)
    version = store.table.snapshot()[0]
    kinds = store.scan(sources=["health"]).collect().get_column("kind").to_list()
    assert "node_drain" in kinds and "health_check" not in kinds and "job_artifacts" not in kinds
    assert len(list(store.inbox.rglob("*.parquet"))) == 2  # the check's result, the job's artifacts
    stats = CliRunner().invoke(app, ["stats", "--store", str(store.root)])
    assert "2 segment(s) in incoming/ not committed yet" in stats.output, stats.output
    assert [a["status"] for a in ledger(site, "health_check")] == ["FAIL"]
    assert store.table.snapshot()[0] == version + 1 and not list(store.inbox.rglob("*.parquet"))  # one commit
    assert "incoming" not in CliRunner().invoke(app, ["stats", "--store", str(store.root)]).output


@as_root
def test_a_requeue_reads_the_checkpoints_as_the_jobs_user(site: dict, shared: Path, tmp_path: Path) -> None:
    """Root's directory inside the user's holds a newer checkpoint: the ledger names the user's own."""
    safetensors(shared / "step-50" / "model.safetensors")
    safetensors(shared / "step-100" / "model.safetensors").parent.chmod(0o700)
    site["script"]["text"] = f"#!/bin/sh\n#OBSERVE requeue checkpoints={shared}\nexit 1\n"
    epilog(site)
    [requeue] = ledger(site, "job_requeue")
    assert Path(requeue["evidence"]["checkpoint"]).name == "step-50", requeue


@as_root
def test_a_checkpoint_scan_past_its_time_is_cut_and_the_requeue_goes_on(site: dict, shared: Path) -> None:
    dense(shared / "model_step100.safetensors", 500_000)
    site["script"]["text"] = f"#!/bin/sh\n#OBSERVE requeue checkpoints={shared}\nexit 1\n"
    started = time.monotonic()
    epilog(site, checkpoint_timeout=timedelta(seconds=1))
    assert time.monotonic() - started < 20
    [requeue] = ledger(site, "job_requeue")
    assert "did not finish within 1s" in requeue["evidence"]["checkpoint_error"] and site["calls"]["requeue"] == ["42"]


def test_the_jobs_user_from_the_job_record_when_slurm_does_not_say() -> None:
    record = {"UserId": "alice(1000)", "GroupId": "ml(2000)"}
    assert requeue.job_owner({}, record) == (1000, 2000)
    assert requeue.job_owner({"SLURM_JOB_UID": "7", "SLURM_JOB_GID": "8"}, record) == (7, 8)
    assert requeue.job_owner({}, {"UserId": "alice"}) is None


def test_a_link_planted_at_the_probes_name_is_not_followed(site: dict, tmp_path: Path) -> None:
    victim = tmp_path / "precious"
    victim.write_text("root's data\n")
    site["store"].root.mkdir()
    (site["store"].root / f".probe-{os.getpid()}").symlink_to(victim)
    hook = hooks.Hook("prolog", site["env"], policy.load(site["policy"]), site["store"])
    assert hooks.run(hook, 10) == 0
    assert victim.read_text() == "root's data\n"
    assert not any("unreachable" in line for line in hook.log), hook.log


def test_the_log_is_never_written_through_a_link_nor_waits_on_a_fifo(tmp_path: Path) -> None:
    victim = tmp_path / "precious"
    victim.write_text("root's data\n")
    (tmp_path / "hooks.log").symlink_to(victim)
    hooks.write_log(["a line"], str(tmp_path / "hooks.log"))
    assert victim.read_text() == "root's data\n"
    os.mkfifo(tmp_path / "fifo.log")
    within(5, lambda: hooks.write_log(["a line"], str(tmp_path / "fifo.log")))
    hooks.write_log(["a line"], str(tmp_path / "real.log"))
    assert (tmp_path / "real.log").read_text().endswith("a line\n")


def test_no_bug_report_into_a_directory_others_can_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-bug-report writes as root to a name anyone can guess: in a directory others can write, a
    link planted there would redirect it."""
    started: list[list[str]] = []
    monkeypatch.setattr(bugreport.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    tool = tmp_path / "nvidia-bug-report.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    rules = replace(policy.load().drain, bug_report_dir=str(tmp_path / "reports"), bug_report_command=str(tool))
    (tmp_path / "reports").mkdir(mode=0o755)
    (tmp_path / "reports").chmod(0o777)
    assert "no one else can write" in bugreport.start("node1", rules) and started == []
    (tmp_path / "reports").chmod(0o755)
    assert bugreport.start("node1", rules).endswith(".log.gz") and len(started) == 1


def test_an_internal_error_exits_0_is_logged_and_drains_nothing(site: dict, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's hook, a check failing, and an error deep in the drain path (building the reason
    scontrol would get): exit 0, the error in the log, no drain."""
    def boom(reason: str) -> str:
        raise RuntimeError("injected")

    monkeypatch.setattr(slurm, "clean_reason", boom)
    log = tmp_path / "hooks.log"
    done = CliRunner().invoke(app, ["slurm", "epilog", "--store", str(site["store"].root), "--policy",
                                    str(site["policy"]), "--log", str(log)], env=site["env"])
    assert done.exit_code == 0, done.output
    text = log.read_text()
    assert "disk FAIL (drain)" in text, text
    assert "internal error, node and job left alone: RuntimeError: injected" in text, text
    assert site["calls"]["drain"] == [] and site["calls"]["requeue"] == []


def test_a_job_that_exits_0_after_its_nodes_fault_still_has_the_node_drained(site: dict,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """attack-22 S1: job 42's code catches the CUDA error and exits 0 after node1's kernel logged an uncorrectable
    memory error: the epilog's explain check runs on every job's end, and node1 is drained for the fault."""
    from datetime import datetime, timezone

    from observe.collector import Context
    from observe.ingest import parse_bytes

    now = datetime.now(timezone.utc).replace(microsecond=0)
    at = lambda minutes: f"{now - timedelta(minutes=minutes):%Y-%m-%dT%H:%M:%S}"  # noqa: E731
    for text, source, node, route, file_id in [
            (f"[{at(30)}.000] sched: Allocate JobId=42 NodeList=node1 #CPUs=8 Partition=gpu\n"
             f"[{at(1)}.000] _job_complete: JobId=42 WEXITSTATUS 0\n", "slurm", "ctl1", "system_file", "ctl"),
            (f"{at(10)}.000000+00:00 node1 kernel: EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 "
             "(channel:1 slot:0 page:0x12345 offset:0x0 grain:32 syndrome:0x0)\n", "kernel", "node1", "kmsg", "k")]:
        df = parse_bytes(text.encode(), source, Context(node=node, route=route))
        site["store"].write(df.with_columns(pl.lit(file_id).alias("file_id")))
    site["env"] = {**site["env"], "SLURM_JOB_EXIT_CODE": "0"}
    monkeypatch.setattr(slurm, "job", lambda job_id: {"JobState": "COMPLETED", "BatchHost": "node1"})
    epilog(site, checks=(), explain=True)
    assert [name for name, _ in site["calls"]["drain"]] == ["node1"], site["calls"]
