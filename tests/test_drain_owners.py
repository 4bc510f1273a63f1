"""Who drained a node, from its reason and user (policy [drain] owners), and every drain listed once
from slurmctld's log lines (as Slurm prints them), observe's ledger and the healthcheck's records."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from observe.collector import Context
from observe.health import policy
from observe.health.drain import Decision, ledger
from observe.health.drains import seen
from observe.health.slurm import Node
from observe.ingest import parse_bytes
from observe.schema import conform
from observe.store import Store
from queries.drains import history, owner

RULES = policy.load().drain


@pytest.mark.parametrize("reason, user, by", [
    ("NHC: check_fs_mount:  /scratch not mounted", "root", "nhc"),
    ("Not responding", "slurm", "slurm"),
    ("Kill task failed", "root", "slurm"),  # Slurm's own reason, whoever its SlurmUser is
    ("gres/gpu count reported lower than configured (0 < 8)", None, "slurm"),
    ("Prolog error", None, "slurm"),
    ("observe: [hardware] xid_history (reset): Xid 48 on 0000:3b:00", "root", "observe"),
    ("bad DIMM B3, ticket 4711", "alice", "admin"),
    ("maintenance", None, "unknown"),
])
def test_owner_from_reason_and_user(reason, user, by) -> None:
    got = pl.select(owner(pl.lit(reason), pl.lit(user, pl.String), RULES.owners, RULES.reason_prefix)).item()
    assert got == by


T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def _slurmctld(lines: list[tuple[int, str]]) -> pl.DataFrame:
    text = "".join(f"[{(T0 + timedelta(seconds=s)).replace(tzinfo=None):%Y-%m-%dT%H:%M:%S.%f}] {line}\n"
                   for s, line in lines)
    return conform(parse_bytes(text.encode(), "slurm", Context(node="ctl", tz="UTC")))


def test_history_lists_each_change_once_with_who() -> None:
    log = _slurmctld([
        (0, "update_node: node gpu007 reason set to: NHC: check_fs_mount:  /scratch not mounted"),
        (0, "update_node: node gpu007 state set to DRAINING"),
        (60, "error: slurmd error running JobId=6 on node(s)=gpu008: Plugin initialization failed"),
        (60, "drain_nodes: node gpu008 state set to DRAIN"),
        (120, "update_node: node gpu009 reason set to: observe: [hardware] xid_history (reset): Xid 48"),
        (120, "update_node: node gpu009 state set to DRAINED"),
        (3600, "update_node: node gpu007 state set to IDLE"),
    ])
    ours = ledger([Decision("node_drain", "gpu009", "observe: [hardware] xid_history (reset): Xid 48", "drained")], "1")
    ours = ours.with_columns(pl.lit(T0 + timedelta(seconds=121)).dt.cast_time_unit("us").alias("ts"))
    rows = history(pl.concat([log, conform(ours)], how="vertical_relaxed").lazy(), RULES).collect()
    assert rows.select("node", "what", "by", "record").rows() == [
        ("gpu007", "drain", "nhc", "slurm_node_drain"),
        ("gpu008", "drain", "slurm", "slurm_node_drain"),  # drain_nodes: slurmctld itself
        ("gpu009", "drain", "observe", "node_drain"),  # the ledger's record, not the log's copy
        ("gpu007", "resume", "unknown", "slurm_node_resume"),
    ]
    assert rows["reason"][0] == "NHC: check_fs_mount:  /scratch not mounted"


def test_seen_records_a_drain_once_and_its_end(tmp_path, monkeypatch) -> None:
    store = Store(tmp_path / "store")
    drained = Node("gpu007", "IDLE+DRAIN", "Kill task failed [root@2026-11-20T08:00:00]", ("gpu",), "gpu:8")
    first = seen(store, drained, RULES)
    assert first is not None and first["message"][0] == "gpu007 IDLE+DRAIN by slurm (root): Kill task failed"
    store.write(first)
    assert seen(store, drained, RULES) is None  # already recorded
    relabelled = Node("gpu007", "IDLE+DRAIN", "fan replaced [alice@2026-11-20T09:00:00]", ("gpu",), "gpu:8")
    again = seen(store, relabelled, RULES)
    assert again is not None and "by admin (alice)" in again["message"][0]
    store.write(again)
    back = seen(store, Node("gpu007", "IDLE", "", ("gpu",), "gpu:8"), RULES)
    assert back is not None and back["kind"][0] == "node_resume_seen"
    store.write(back)
    assert seen(store, Node("gpu007", "IDLE", "", ("gpu",), "gpu:8"), RULES) is None
    ours = Node("gpu007", "IDLE+DRAIN", "observe: [node] ib (drain): mlx5_0/1 DOWN [root@2026-11-20T10:00:00]", (), "")
    assert seen(store, ours, RULES) is None  # observe's own drain is in its ledger already
