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


# ---- kernel text a user picks, on /dev/kmsg (trusted) ----
# A process name (comm: at most 15 bytes, TASK_COMM_LEN 16) begins some kernel messages, and a file or
# directory name a user picks sits inside others; neither may complete a hardware rule (collectors/rules/
# kernel.toml and nvrm.toml match from the start of the kernel's own text, and follow its format string).
# Each test replays one such line as /dev/kmsg delivers it ("<prio>,<seq>,<usec>,<flags>;<text>") and as a
# syslog daemon relays it, both read on route kmsg.
HARDWARE = {"gpu_xid", "gpu_fell_off_bus", "gpu_reset_required", "gpu_init_failed", "gpu_gsp_error", "gpu_nvlink",
            "pcie_aer", "ib_hca_error", "ib_link_down", "ib_link_up", "mce", "memory_ecc", "kernel_panic",
            "kernel_boot", "gpu_driver_loaded", "soft_lockup", "hung_task"}  # policy.toml's faults, recoveries, acts_on


def kmsg_kinds(text: str) -> list[str]:
    """The kind of ``text`` as the kernel's own line, read from a /dev/kmsg record and from a syslog relay."""
    now = datetime.now(timezone.utc)
    kinds = []
    for line in (f"4,1842,{123_456_789},-;{text}\n", f"{now:%Y-%m-%dT%H:%M:%S.%f+00:00} {NODE} kernel: {text}\n"):
        out = parse_bytes(line.encode(), "kernel", Context(node=NODE, route="kmsg"))
        assert out.height == 1 and out.item(0, "message").endswith(text[-20:]), out
        kinds.append(out.item(0, "kind"))
    return kinds


def _not_hardware(text: str) -> None:
    kinds = kmsg_kinds(text)
    assert not HARDWARE & set(kinds), (text, kinds)


def test_a_process_named_like_an_edac_ue_in_a_bad_frame_line_is_no_memory_error():
    # arch/x86/kernel/signal.c: "%s[%d] bad frame in %s frame:%px ip:%lx sp:%lx orax:%lx\n" (comm first)
    _not_hardware("EDAC x: UE y[31337] bad frame in rt_sigreturn frame:000000004e6f3c21 ip:7f3a2b1c0d4e "
                  "sp:7ffd5b2c1d30 orax:ffffffffffffffff")


def test_a_process_named_ib0_link_down_taking_a_split_lock_trap_is_no_link_down():
    # arch/x86/kernel/cpu/bus_lock.c: "x86/split lock detection: #AC: %s/%d took a split_lock trap at address: 0x%lx\n"
    _not_hardware("x86/split lock detection: #AC: ib0 link down/31337 took a split_lock trap at address: 0x401136")


def test_a_process_named_ib0_link_down_killed_by_a_signal_is_no_link_down():
    # kernel/signal.c print_fatal_signal (print-fatal-signals=1): "%s/%d: potentially unexpected fatal signal %d.\n"
    assert kmsg_kinds("ib0 link down/31337: potentially unexpected fatal signal 11.") == ["segfault", "segfault"]


def test_a_process_named_mlx5_core_error_failing_an_allocation_is_no_hca_error():
    # mm/page_alloc.c warn_alloc: "%s: %pV, mode:%#x(%pGg), nodemask=%*pbl" (+ ",cpuset=%s,mems_allowed=%*pbl")
    _not_hardware("mlx5_core Error: page allocation failure: order:10, mode:0x40cc0(GFP_KERNEL|__GFP_COMP), "
                  "nodemask=(null),cpuset=/,mems_allowed=0")


def test_a_process_named_linux_version_using_its_deepest_stack_is_no_boot():
    # kernel/exit.c check_stack_usage: "%s (%d) used greatest stack depth: %lu bytes left\n"; a boot would end
    # every earlier fault of the node
    _not_hardware("Linux version x (31337) used greatest stack depth: 10744 bytes left")


def test_an_executable_stack_under_a_directory_named_like_an_xid_79_is_no_xid():
    # fs/exec.c setup_arg_pages: pr_warn_once("process '%pD4' started with executable stack\n", bprm->file)
    _not_hardware("process 'u/NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus./x' started with "
                  "executable stack")


def test_an_executable_stack_under_a_directory_named_like_a_panic_is_no_panic():
    _not_hardware("process 'u/Kernel panic - not syncing: x/x' started with executable stack")


def test_a_process_named_nvrm_nvlink_failing_an_allocation_is_no_nvlink_error():
    # warn_alloc again: "NVRM: nvlink" (12 bytes) read as NV_PRINTF's "NVRM: <function>: <message>"
    _not_hardware("NVRM: nvlink: page allocation failure: order:10, mode:0x40cc0(GFP_KERNEL|__GFP_COMP), "
                  "nodemask=(null),cpuset=/,mems_allowed=0")


def test_a_process_named_error_asking_an_hca_netdev_for_its_dev_id_is_no_hca_error():
    # net/core/net-sysfs.c (and ipoib) dev_id_show: netdev_info_once(ndev, "\"%s\" wants to know my dev_id. ...",
    # current->comm) after the netdev prefix "mlx5_core <pci> ib0: "
    _not_hardware('mlx5_core 0000:18:00.0 ib0: "Error" wants to know my dev_id. Should it look at dev_port instead? '
                  "See Documentation/ABI/testing/sysfs-class-net for more info.")


def test_an_executable_named_like_an_xid_killed_by_a_signal_is_a_crash():
    # print_fatal_signal in some v6.x trees names the executable file first: "%pD: %s: potentially unexpected
    # fatal signal %d.\n" (a file name of up to 255 bytes, ahead of any anchor)
    assert kmsg_kinds("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.: x: potentially unexpected "
                      "fatal signal 11.") == ["segfault", "segfault"]


GENUINE = [  # the kernel's own wording of each, as cited in the rule files
    ("EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0x12345 offset:0x0 "
     "grain:32 - err_code:0x0000:0x009f)", "memory_ecc"),
    ("ib0: link down", "ib_link_down"),
    ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN", "ib_link_down"),
    ("mlx5_core 0000:03:00.0: mlx5_load_one failed with error code -22", "ib_hca_error"),
    ("Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP "
     "PREEMPT_DYNAMIC Debian 6.1.112-1 (2024-09-30)", "kernel_boot"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "gpu_xid"),
    ("Kernel panic - not syncing: Fatal exception", "kernel_panic"),
    ("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!", "gpu_nvlink"),
]


def test_the_kernels_own_lines_still_are_what_they_say():
    assert {text: kmsg_kinds(text) for text, _ in GENUINE} == {text: [kind, kind] for text, kind in GENUINE}


def test_a_kmsg_record_with_its_dictionary_keeps_its_link_state():
    """A dev_printk line read from /dev/kmsg goes on with its dictionary (" SUBSYSTEM=...", " DEVICE=..."): the
    rules that read a whole line end it at the line's end, not the record's."""
    records = ("6,339,5140900,-;mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN\n SUBSYSTEM=pci\n DEVICE=+pci:0000:ab:00.0\n"
               "6,340,5140901,-;infiniband rxe0: set down\n SUBSYSTEM=infiniband\n DEVICE=+infiniband:rxe0\n"
               "6,341,5140902,-;mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE\n SUBSYSTEM=pci\n DEVICE=+pci:0000:ab:00.0\n")
    out = parse_bytes(records.encode(), "kernel", Context(node=NODE, route="kmsg"))
    assert out.get_column("kind").to_list() == ["ib_link_down", "ib_link_down", "ib_link_up"]
