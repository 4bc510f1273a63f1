"""Provenance decides trust: what a user writes (job output, files they own) is parsed as job output
with the node the configuration gives, never as another node's kernel; far-future stamps are
clamped; only trusted routes open faults (see also test_faults and test_streams' journal test)."""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe import provenance
from observe.health import faults, policy
from observe.health.recovery import fault_cleared
from observe.ingest import ingest
from observe.schema import conform
from observe.store import Store
from observe.store.table import Written

USER = 1001  # an ordinary account's uid (no such user need exist)


def _stamp(t: datetime) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


def _xid_line(t: datetime, host: str = "gpu042") -> str:
    return f"{_stamp(t)} {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"


def _ingest(tmp: Path, name: str, text: str, owner: int | None = None, **opts) -> pl.DataFrame:
    path = tmp / "logs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if owner is not None:
        os.chown(path, owner, owner)
    store = Store(tmp / "store")
    summary = ingest([str(path)], store, workers=1, **opts)
    assert not summary.failed, summary.failed
    return store.scan().collect()


def test_a_jobs_output_forges_no_kernel_line_on_another_node(tmp_path: Path) -> None:
    """A job prints syslog-shaped lines naming gpu042's kernel: its output is still job output, on
    the node the configuration gives; gpu042 appears only as a claim."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    text = _xid_line(now - timedelta(minutes=5)) * 3 + "NCCL WARN forged\n"
    df = _ingest(tmp_path, "slurm-77.out", text, node="gpu001")
    assert set(df.get_column("route")) == {"job_output"}
    assert set(df.get_column("source")) == {"nccl"} and "gpu_xid" not in set(df.get_column("kind"))
    assert set(df.get_column("node")) == {"gpu001"} and set(df.get_column("job_id")) == {"77"}
    assert provenance.policy()["job_output_sources"] == ["nccl"]


def test_a_node_or_job_a_rule_reads_in_job_output_is_only_a_claim(tmp_path: Path) -> None:
    """srun's "gpu042: task 0: Exited" and a StepId of another job, printed in job 7's output collected on gpu001:
    a rule's node group is a claim like a header's, and the job is the file's (attack-20: a user's own output
    pointed another job's verdict at a node outside it)."""
    text = "srun: error: gpu042: task 0: Exited with exit code 1\nslurmstepd: error: *** STEP 8.0 ON gpu042 CANCELLED AT 2026-11-20T12:00:00 ***\n"
    df = _ingest(tmp_path, "slurm-7.out", text, node="gpu001")
    claimed = df.get_column("attrs").str.json_path_match("$.claimed_node").to_list()
    assert set(df.get_column("node")) == {"gpu001"} and claimed == ["gpu042", "gpu042"], df.select("node", "attrs")
    assert set(df.get_column("job_id")) == {"7"} and sorted(df.get_column("kind")) == ["slurm_job_cancelled", "slurm_task_exit"]


def test_a_file_a_user_owns_is_read_as_job_output(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    text = _xid_line(now - timedelta(minutes=5)) * 3 + "gpu042:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN x\n"
    df = _ingest(tmp_path, "kern.log", text, owner=USER)
    assert set(df.get_column("route")) == {"user_file"} and "kernel" not in set(df.get_column("source"))
    assert df.get_column("node").is_null().all()  # no node was configured, and the text's is only claimed
    claimed = df.get_column("attrs").str.json_path_match("$.claimed_node")
    assert claimed.to_list() == [None, None, None, "gpu042"]


def test_a_root_owned_kernel_log_is_trusted(tmp_path: Path) -> None:
    """The control: the same lines in a system file named a kernel log are gpu042's kernel Xids."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    df = _ingest(tmp_path, "kern.log", _xid_line(now - timedelta(minutes=5)), source="kernel")
    row = df.row(0, named=True)
    assert (row["route"], row["source"], row["kind"], row["code"], row["node"]) == (
        "system_file", "kernel", "gpu_xid", 79, "gpu042")


def test_a_syslog_file_vouches_for_no_sender(tmp_path: Path) -> None:
    """/var/log/syslog holds what any local process sent (``logger -t kernel``): read as syslog, its
    kernel lines are still typed, for explain and queries, but they drive nothing."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    t = now - timedelta(minutes=5)
    text = (f"{_stamp(t)} gpu042 CRON[311]: (root) CMD (run-parts /etc/cron.hourly)\n"
            f"{_stamp(t)} gpu042 sshd[977]: Accepted publickey for alice from 10.0.0.1 port 50000 ssh2\n"
            + _xid_line(t))
    df = _ingest(tmp_path, "syslog", text).filter(pl.col("source") == "kernel")
    row = df.row(0, named=True)
    assert (row["route"], row["kind"], row["node"]) == ("syslog_file", "gpu_xid", "gpu042")
    assert faults.decide(df.drop("header", strict=False).pipe(conform).lazy(), policy.load().faults,
                         now + timedelta(minutes=1)).height == 0


def test_a_syslog_file_of_kernel_lines_only_is_still_a_syslog_file(tmp_path: Path) -> None:
    """A syslog file whose first lines are all ``host kernel: ...`` (after rotation, a user's flood of
    ``logger -t kernel``) is told to be kernel text: still a syslog daemon's file, untrusted, unless
    it is named a kernel log (``--source kernel``: kern.log, the kernel facility only)."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    text = _xid_line(now - timedelta(minutes=6)) + _xid_line(now - timedelta(minutes=5))
    told = _ingest(tmp_path / "told", "syslog", text).filter(pl.col("kind") == "gpu_xid")
    assert told.height and set(told.get_column("route")) == {"syslog_file"}, told.select("source", "route")
    named = _ingest(tmp_path / "named", "kern.log", text, source="kernel").filter(pl.col("kind") == "gpu_xid")
    assert set(named.get_column("route")) == {"system_file"}


def test_a_future_stamp_is_clamped_and_set_healthy_ends_its_fault(tmp_path: Path) -> None:
    """A fatal Xid dated next year would stay after every recovery: its time is clamped to when it
    was read (the stamp kept in attrs.ts_claimed), so a later set-healthy ends it."""
    now = datetime.now(timezone.utc)
    future = datetime(now.year + 1, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
    text = f"{future:%Y-%m-%dT%H:%M:%S}.000000+00:00 gpu042 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    df = _ingest(tmp_path, "kern.log", text, source="kernel")
    row = df.row(0, named=True)
    assert row["kind"] == "gpu_xid" and row["ts"] <= datetime.now(timezone.utc)
    assert provenance_claim(row) == f"{future:%Y-%m-%dT%H:%M:%S}.000000Z"
    rules = policy.load().faults
    cleared = fault_cleared("gpu042", None, "reset", by="admin").with_columns(
        pl.lit(datetime.now(timezone.utc) + timedelta(seconds=1)).dt.cast_time_unit("us").alias("ts"))
    both = pl.concat([df.drop("header", strict=False).pipe(conform), conform(cleared)])
    decided = faults.decide(both.lazy(), rules, datetime.now(timezone.utc) + timedelta(minutes=1))
    assert decided.select("open").rows() == [(False,)]


def provenance_claim(row: dict) -> str | None:
    import json

    return json.loads(row["attrs"]).get("ts_claimed")


@pytest.mark.parametrize("uid, gid, mode, job, route", [
    (0, 0, 0o640, None, "system_file"),
    (0, 4, 0o640, None, "system_file"),          # adm may read: Debian's /var/log/syslog
    (0, 4, 0o664, None, "user_file"),            # adm may write: its members are people
    (0, 100, 0o664, None, "user_file"),          # users (a gid under 1000) may write: every user is in it
    (0, 0, 0o666, None, "user_file"),            # anyone may write it
    (0, USER, 0o664, None, "user_file"),         # a user's group may write it
    (USER, USER, 0o644, None, "user_file"),
    (0, 0, 0o640, "12", "job_output"),           # a job's output, whoever owns it
])
def test_file_route(uid: int, gid: int, mode: int, job: str | None, route: str) -> None:
    st = os.stat_result((0o100000 | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))
    assert provenance.file_route(st, job) == route


def test_segments_from_before_routes_read_with_no_route(tmp_path: Path) -> None:
    """A store written before routes were kept still reads, beside new segments; its events have no
    route, so they drive nothing."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    df = _ingest(tmp_path, "kern.log", _xid_line(now - timedelta(minutes=5)), source="kernel")
    (seg,) = Store(tmp_path / "store").files()
    old = seg.with_name("old-" + seg.name)
    pl.read_parquet(seg).drop("route").with_columns(pl.col("offset") + 1).write_parquet(old)
    Store(tmp_path / "store").table.append([(old, Written(1))])  # as an older observe committed it: no time range
    both = Store(tmp_path / "store").scan().collect().sort("offset")
    assert both.get_column("route").to_list() == ["system_file", None]
    assert both.select(provenance.trusted()).to_series().to_list() == [True, False]
    assert df.height == 1


def test_the_collector_keeps_each_files_route(tmp_path: Path) -> None:
    """The collector as ingest: a job's output (even holding syslog-shaped kernel lines) is job
    output on the collector's node; a kernel log named as such is the kernel's."""
    from observe.collect_config import Config
    from observe.collect import NodeCollector

    now = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "slurm-12.out").write_text(_xid_line(now) * 2)
    (tmp_path / "kern.log").write_text(_xid_line(now, "gpu001"))
    for f in (tmp_path / "kern.log", tmp_path / "jobs" / "slurm-12.out"):  # written a while ago: its last record is whole
        os.utime(f, (now.timestamp(), now.timestamp()))
    doc = {"node": "gpu001", "spool": str(tmp_path / "spool"), "store": str(tmp_path / "central"),
           "input": [{"path": str(tmp_path / "jobs" / "slurm-*.out")},
                     {"path": str(tmp_path / "kern.log"), "source": "kernel"}]}
    node = NodeCollector(Config.from_dict(doc))
    try:
        node.run(once=True)
    finally:
        node.close()
    df = shipped(tmp_path / "central").scan().collect().filter(pl.col("source") != "health")
    got = sorted(df.select("route", "source", "node", "kind").unique().rows())
    assert got == [("job_output", "nccl", "gpu001", "log"), ("system_file", "kernel", "gpu001", "gpu_xid")]


def test_the_policy_follows_the_rules_directories_as_the_rules_do(tmp_path: Path, monkeypatch) -> None:
    """(attack-34 F5) The rules are read from ``$OBSERVE_RULES`` as it is when asked; the trusted routes of the
    same directories were read once a process, so a process that changed it ran the new rules under the old trust."""
    (tmp_path / "provenance.toml").write_text('trusted_routes = ["kmsg", "syslog_file"]\n')
    monkeypatch.delenv("OBSERVE_RULES", raising=False)
    assert not provenance.is_trusted("syslog_file")
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    assert provenance.is_trusted("syslog_file") and not provenance.is_trusted("system_file")
    monkeypatch.delenv("OBSERVE_RULES")
    assert not provenance.is_trusted("syslog_file") and provenance.is_trusted("system_file")
