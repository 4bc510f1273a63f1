"""Issue 39: lines a user can write are evidence, never triggers, and a user's own GPU faults are never
the node's. Each test replays an attack: ``logger -t kernel 'NVRM: Xid ...: 79'`` into /var/log/syslog
(read as syslog: route ``syslog_file``), a ``logger`` loop of 20,001 made-up Xid codes, forged ledger
records, and a job faulting its own GPU (Xid 31, three episodes seven minutes apart, through /dev/kmsg)."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import polars as pl

from observe.collector import Context
from observe.exporter.central import StoreMetrics
from observe.exporter.node import NodeMetrics
from observe.health.drain import Decision, ledger
from observe.health.result import Result, Status
from observe.health.runner import as_events
from observe.ingest import parse_bytes
from observe.rules import catalog
from observe.store import Store

NODE = "gpu001"
FATAL = ("drain_node", "reset_gpu")  # what ObserveFatalXid selects (dashboards/alerts.yaml)


def logger_xids(store: Store, codes, node: str = NODE, route: str = "system_file", source: str = "syslog",
                gpu: str = "0000:3b:00", minutes_apart: float = 0.0, ago: timedelta = timedelta(0)) -> None:
    """``logger -t kernel 'NVRM: Xid ...: CODE, ...'`` once per code, as rsyslog writes it to root's
    /var/log/syslog (a root-owned file read as syslog is route syslog_file); with ``route="kmsg"`` and
    source ``kernel``, the same lines as the kernel's own."""
    start = datetime.now(timezone.utc) - ago
    text = "".join(f"{start + timedelta(minutes=i * minutes_apart):%Y-%m-%dT%H:%M:%S.%f+00:00} {node} kernel: "
                   f"NVRM: Xid (PCI:{gpu}): {code}, pid=4242, name=python, GPU has fallen off the bus.\n"
                   for i, code in enumerate(codes))
    store.write(parse_bytes(text.encode(), source, Context(node=node, route=route)))


def series(metrics) -> dict[str, list[dict]]:
    """Each family's samples' labels, by sample name."""
    out: dict[str, list[dict]] = {}
    for fam in metrics.collect():
        for s in fam.samples:
            out.setdefault(s.name, []).append({**s.labels, "_value": s.value})
    return out


def fires_fatal_xid(got: dict[str, list[dict]]) -> list[dict]:
    """The series ObserveFatalXid's expression would select (an action that calls for a remedy)."""
    return [s for s in got.get("observe_gpu_xid_last_timestamp_seconds", []) if s["action"] in FATAL]


def test_a_forged_syslog_xid_is_evidence_not_an_alert(tmp_path):
    store = Store(tmp_path / "store")
    logger_xids(store, [79])
    assert store.scan().select("route").collect().item() == "syslog_file"
    m = StoreMetrics(store, known_nodes=lambda: {NODE})
    m.refresh()
    got = series(m)
    assert not fires_fatal_xid(got)
    assert not any("action" in s for name, rows in got.items() for s in rows), "an action from a forged line"
    assert [(s["node"], s["code"], s["_value"]) for s in got["observe_gpu_xid_untrusted_total"]] == [(NODE, "79", 1.0)]
    assert got["observe_node_events_total"][0]["kind"] == "gpu_xid"  # still counted as what it is, an event
    assert all(s["_value"] == 0 for s in got["observe_incidents_open"])
    # the kernel's own line of the same Xid is the fault it says
    logger_xids(store, [79], route="kmsg", source="kernel")
    m.refresh()
    assert [(s["node"], s["code"]) for s in fires_fatal_xid(series(m))] == [(NODE, "79")]


def test_20001_made_up_codes_make_bounded_series(tmp_path):
    """A logger loop of 20,001 codes, through syslog and (were the kernel to log them) /dev/kmsg: codes
    outside NVIDIA's catalog fold into code="other", and every label of every family stays bounded."""
    store = Store(tmp_path / "store")
    codes = range(1, 20_002)
    logger_xids(store, codes)
    logger_xids(store, codes, route="kmsg", source="kernel")
    m = StoreMetrics(store, known_nodes=lambda: {NODE})
    m.refresh()
    got = series(m)
    known = {str(c) for c in catalog("gpu_xid").get_column("code")}
    for name in ("observe_gpu_xid_total", "observe_gpu_xid_last_timestamp_seconds", "observe_gpu_xid_untrusted_total"):
        labels = {s["code"] for s in got[name]}
        assert labels <= known | {"other"} and "other" in labels, name
        assert len(got[name]) <= len(known) + 1, name
    for name in ("observe_gpu_xid_total", "observe_gpu_xid_untrusted_total"):
        assert sum(s["_value"] for s in got[name]) == len(codes), name  # nothing lost: folded, counted
    assert all(len(rows) <= 200 for rows in got.values()), {n: len(r) for n, r in got.items() if len(r) > 200}


def test_forged_ledger_and_health_records_drive_no_metric(tmp_path):
    """Drain decisions, the breaker and health results are observe's own records: the same kinds by any
    route users can write (should a rule ever yield them) move no gauge an alert reads."""
    store = Store(tmp_path / "store")
    decisions = ledger([Decision("node_drain", NODE, "xid_history", "drained"),
                        Decision("drain_budget_exhausted", NODE, "xid_history", "1 of 1")], "1")
    checks = as_events([Result("gpu_burn", Status.FAIL, "slow")], NODE, "1")
    for frame in (decisions, checks):
        store.write(frame.with_columns(pl.lit("job_output").alias("route")))
    m = StoreMetrics(store, known_nodes=lambda: {NODE})
    m.refresh()
    got = series(m)
    assert not got.get("observe_node_drained") and not got.get("observe_drain_decisions_total")
    assert got["observe_drain_breaker_open"][0]["_value"] == 0
    assert not got.get("observe_health_checks_total")
    node = NodeMetrics(NODE, store=store)
    node.refresh()
    assert not series(node).get("observe_health_check_status")


def test_a_users_own_xid_31_never_drains_the_node(tmp_path):
    """Application Xid 31 from one job, three episodes seven minutes apart on one GPU, through the
    kernel's own log: the job's fault, however often it repeats (``observe health faults``)."""
    store = Store(tmp_path / "store")
    logger_xids(store, [31] * 3, route="kmsg", source="kernel", minutes_apart=7, ago=timedelta(minutes=20))
    proc = subprocess.run([sys.executable, "-m", "observe.cli", "health", "faults", "--store", str(store.root),
                           "--since", "1h", "--format", "json"], check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 3 and {r["code"] for r in rows} == {31}
    assert [(r["remedy"], r["category"], r["acting"]) for r in rows] == [("app", "user", False)] * 3


def test_a_syslog_carried_xid_79_is_an_unconfirmed_fault_to_verify(tmp_path):
    """Kernel lines that reach the store only through a syslog file (the common central-syslog setup) are
    listed by ``observe health faults`` as unconfirmed, to verify with an active check: never acting (no
    drain), and not lost either (it used to say "0 fault episodes")."""
    store = Store(tmp_path / "store")
    logger_xids(store, [79], ago=timedelta(minutes=5))
    proc = subprocess.run([sys.executable, "-m", "observe.cli", "health", "faults", "--store", str(store.root),
                           "--since", "1h", "--format", "json"], check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["code"], r["confirmed"], r["acting"], r["open"]) for r in rows] == [(79, False, False, True)], rows
    text = subprocess.run([sys.executable, "-m", "observe.cli", "health", "faults", "--store", str(store.root),
                           "--since", "1h"], check=True, capture_output=True, text=True).stdout
    assert "verify" in text and "1 unconfirmed" in text and "0 nodes call for a remedy" in text, text


def test_a_segfault_in_a_file_named_like_an_xid_is_a_segfault(tmp_path):
    """An unprivileged process that jumps into a file it named "NVRM: Xid (PCI:...): 79, ..." makes the kernel
    itself print that name after its segfault line (arch/x86/mm/fault.c show_signal_msg + print_vma_addr) on
    /dev/kmsg, a trusted route: the line is the crash, never an Xid, and nothing acts on it."""
    store = Store(tmp_path / "store")
    now = datetime.now(timezone.utc) - timedelta(minutes=5)
    line = (f"{now:%Y-%m-%dT%H:%M:%S.%f+00:00} {NODE} kernel: x[31337]: segfault at 0 ip 0000000000000000 sp "
            f"00007ffd5b2c1d30 error 14 in NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.[400000+1000]\n")
    store.write(parse_bytes(line.encode(), "kernel", Context(node=NODE, route="kmsg")))
    assert store.scan().collect().get_column("kind").to_list() == ["segfault"]
    proc = subprocess.run([sys.executable, "-m", "observe.cli", "health", "faults", "--store", str(store.root),
                           "--since", "1h", "--format", "json"], check=True, capture_output=True, text=True)
    assert proc.stdout.strip() == "", proc.stdout
