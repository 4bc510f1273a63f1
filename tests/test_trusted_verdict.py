"""What a user writes may add evidence to a verdict, never hide a fault from the node's drain: a trusted uncorrectable
memory error on gpu002 fails job 8, and each test adds what a user of the job's nodes can write (a ``logger`` line
rsyslog keeps in /var/log/syslog, the job's own output) that outweighed it before (the attack of 2026-11-29, S1-S7
in docs/security.md). explain may still weigh those lines for its verdict; the fault the trusted lines name on
their own (``node_fault``) stays the one the epilog's explain check drains the node for."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from observe.collector import Context
from observe.health.checks import explain as explain_check
from observe.ingest import parse_bytes
from observe.store import Store
from queries import node_past
from queries.explain import explain
from queries.report import report

CTL = """[2026-11-22T11:00:00.000] sched: Allocate JobId=8 NodeList=gpu[001-002] #CPUs=64 Partition=gpu
[2026-11-22T12:05:00.000] _job_complete: JobId=8 WEXITSTATUS 1
[2026-11-22T12:05:00.000] _job_complete: JobId=8 done
"""
# edac_mc.c edac_mc_handle_error: "%d %s error%s on %s (%s%s%s%s%s%s%s%s%s)" after the "EDAC MC%d: " prefix
UE = ("2026-11-22T12:03:00.000000+00:00 gpu002 kernel: EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 "
      "(channel:1 slot:0 page:0x12345 offset:0x0 grain:32 syndrome:0x0)\n")
# what every rank printed once the node's GPU process died: the job's own output
OUTPUT = """[2026-11-22 12:03:05] RuntimeError: NCCL communicator was aborted on rank 1.
"""


def _put(store: Store, text: str, source: str, node: str, route: str, file_id: str, job: str | None = None) -> None:
    df = parse_bytes(text.encode(), source, Context(node=node, job_id=job, route=route))
    store.write(df.with_columns(pl.lit(file_id).alias("file_id")))


@pytest.fixture
def ue_store(tmp_path) -> Store:
    store = Store(tmp_path / "store")
    _put(store, CTL, "slurm", "ctl1", "system_file", "ctl")
    _put(store, UE, "kernel", "gpu002", "kmsg", "kmsg2")
    _put(store, OUTPUT, "nccl", "gpu001", "job_output", "out8", job="8")
    return store


def _acts_on(store: Store) -> str:
    """What the epilog's explain check on gpu002 decides after job 8: PASS, FAIL or UNKNOWN."""
    from observe.health import policy as pol

    policy = pol.load()
    return explain_check.run({**policy.checks["explain"], "job": "8", "store": str(store.root), "node": "gpu002",
                              "policy": policy.doc}).status.name


def _drains(store: Store) -> dict:
    """The fault explain says to drain for: the verdict's, or the trusted lines' own."""
    e = explain(store, "8")
    fault = e.node_fault or e.root_cause
    assert fault and fault["node_action"] == "drain", (e.root_cause, e.node_fault)
    return fault


def test_the_trusted_fault_alone_drains(ue_store) -> None:
    e = explain(ue_store, "8")
    assert (e.root_cause["node"], e.root_cause["kind"], e.root_cause["node_action"]) == ("gpu002", "memory_ecc", "drain")
    assert e.node_fault is None  # the verdict names it already
    assert _acts_on(ue_store) == "FAIL"


def test_a_logger_time_limit_line_hides_no_fault(ue_store) -> None:
    """S1: ``logger -t slurmstepd`` on gpu001 writes slurmstepd's time-limit notice for job 8 into /var/log/syslog
    (and the same into a file named slurm-8.out): the verdict may read it, the drain does not."""
    forged = ("2026-11-22T12:02:30.000000+00:00 gpu001 slurmstepd[999]: error: *** JOB 8 ON gpu002 CANCELLED AT "
              "2026-11-22T12:02:30 DUE TO TIME LIMIT ***\n")
    _put(ue_store, forged, "syslog", "gpu001", "syslog_file", "syslog1")
    _put(ue_store, forged.split("slurmstepd[999]: ")[1], "nccl", "gpu001", "job_output", "out8b", job="8")
    fault = _drains(ue_store)
    assert (fault["node"], fault["kind"], fault["trusted"]) == ("gpu002", "memory_ecc", True)
    assert _acts_on(ue_store) == "FAIL"
    assert any(line.startswith("NODE FAULT  gpu002  memory_ecc") for line in report(explain(ue_store, "8")))


def test_a_printed_fatal_signal_in_the_jobs_output_hides_no_fault(ue_store) -> None:
    """S4: the job prints CPython faulthandler's "Fatal Python error: Segmentation fault" before the UE."""
    _put(ue_store, "[2026-11-22 12:02:50] Fatal Python error: Segmentation fault\n", "nccl", "gpu002", "job_output",
         "out8c", job="8")
    assert _drains(ue_store)["node"] == "gpu002"
    assert _acts_on(ue_store) == "FAIL"


def test_the_same_error_claimed_on_every_node_hides_no_fault(ue_store) -> None:
    """S2: the job's output heads one CUDA out-of-memory line with each node's name (pdsh's "host: " label, a claim):
    one user's lines counted as "the same error on every node at once" against the trusted fault."""
    text = "".join(f"{host}: [2026-11-22 12:02:55] RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
                   for host in ("gpu001", "gpu002"))
    _put(ue_store, "pdsh -w gpu[001-002] python train.py\n" + text, "nccl", "gpu001", "job_output", "out8d", job="8")
    assert _drains(ue_store)["node"] == "gpu002"
    assert _acts_on(ue_store) == "FAIL"


def test_a_forged_early_job_complete_moves_no_end(ue_store) -> None:
    """S7: a ``logger -t slurmctld`` "_job_complete" four minutes before the real one: the run ends when slurmctld's
    own log says, so the UE is no line "after the end" (context)."""
    _put(ue_store, "2026-11-22T12:00:50.000000+00:00 gpu001 slurmctld[1]: _job_complete: JobId=8 WEXITSTATUS 1\n",
         "syslog", "gpu001", "syslog_file", "syslog2")
    e = explain(ue_store, "8")
    assert e.end == datetime(2026, 11, 22, 12, 5, tzinfo=timezone.utc)
    assert (e.root_cause["node"], e.root_cause["kind"], e.root_cause["node_action"]) == ("gpu002", "memory_ecc", "drain")


def test_a_later_forged_copy_leaves_a_past_fault_trusted(tmp_path) -> None:
    """S5: the kernel logged gpu002's UE before the run; a ``logger`` copy of the same line minutes later is the last
    copy: the node's past keeps the kernel's (a trusted fault), not the user's."""
    store = Store(tmp_path / "store")
    _put(store, UE.replace("12:03:00", "10:00:00"), "kernel", "gpu002", "kmsg", "kmsg2")
    _put(store, UE.replace("12:03:00", "10:05:00"), "syslog", "gpu002", "syslog_file", "syslog2")
    past = node_past.unrecovered(store, ["gpu002"], ["memory_ecc"], datetime(2026, 11, 22, 9, tzinfo=timezone.utc),
                                 datetime(2026, 11, 22, 11, tzinfo=timezone.utc), ["kernel_boot"], timedelta(minutes=5))
    assert past.get_column("route").to_list() == ["kmsg"]


# attack-22 (2026-11-29): what a user makes their job do, and the trusted lines it makes Slurm or the kernel print,
# competed with a trusted fault for the drain: the fault's drain is now decided on its own (queries.explain.node_fault)
SLURMD = "[2026-11-22T{t}.000] {text}\n"


@pytest.mark.parametrize("what, text, source, node, route", [
    ("a step cancelled at the start (scancel 8.0): the trusted view's onset was then", SLURMD.format(
        t="11:00:05", text="error: *** STEP 8.0 ON gpu002 CANCELLED AT 2026-11-22T11:00:05 ***"), "slurm", "gpu002",
     "system_file"),
    ("scancel 8 after the UE: a trusted rival cause", SLURMD.format(
        t="12:04:30", text="_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=8 uid 1001"), "slurm", "ctl1", "system_file"),
    ("the job's own time limit", SLURMD.format(
        t="12:04:59", text="error: *** JOB 8 ON gpu002 CANCELLED AT 2026-11-22T12:04:59 DUE TO TIME LIMIT ***"), "slurm",
     "gpu002", "system_file"),
    ("an application Xid 31 the job's code caused", "2026-11-22T12:04:30.000000+00:00 gpu002 kernel: NVRM: Xid "
     "(PCI:0000:3b:00): 31, pid=4242, name=python, Ch 0000002e, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
     "faulted @ 0x7f32_67bb3000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n", "kernel", "gpu002", "kmsg"),
    ("a segfault of the job's own process", "2026-11-22T12:02:50.000000+00:00 gpu002 kernel: python[4242]: segfault at 0 "
     "ip 00007f0000000000 sp 00007ffd00000000 error 14 in libfoo.so[7f0000000000+1000]\n", "kernel", "gpu002", "kmsg"),
])
def test_what_the_job_made_slurm_or_the_kernel_say_hides_no_fault(ue_store, what, text, source, node, route) -> None:
    _put(ue_store, text, source, node, route, "extra")
    fault = _drains(ue_store)
    assert (fault["node"], fault["kind"], fault["trusted"]) == ("gpu002", "memory_ecc", True), what
    assert _acts_on(ue_store) == "FAIL", what


def test_a_job_that_exits_0_hides_no_fault(tmp_path) -> None:
    """attack-22 S1: the job catches everything and exits 0. A completed run's fault still takes its node out, and the
    run, which was already going when the fault came, is no proof the node worked: the next job's past keeps it."""
    store = Store(tmp_path / "store")
    _put(store, CTL.replace("WEXITSTATUS 1", "WEXITSTATUS 0"), "slurm", "ctl1", "system_file", "ctl")
    _put(store, UE, "kernel", "gpu002", "kmsg", "kmsg2")
    from queries.jobs import write_index
    write_index(store)
    e = explain(store, "8")
    assert e.root_cause is None and e.node_fault and e.node_fault["node"] == "gpu002"
    past = node_past.unrecovered(store, ["gpu002"], ["memory_ecc"], datetime(2026, 11, 22, 9, tzinfo=timezone.utc),
                                 datetime(2026, 11, 22, 13, tzinfo=timezone.utc), ["kernel_boot"], timedelta(minutes=15))
    assert past.get_column("kind").to_list() == ["memory_ecc"]


@pytest.mark.parametrize("ce_first_s", [60, 300])
def test_a_corrected_error_before_an_uncorrected_one_is_another_fault(ue_store, ce_first_s: int) -> None:
    """attack-22 S6/S8: a trusted corrected error on the same DIMM shortly before the UE: two causes of one kind, two
    candidates (the CE's prior and "context" no longer stand for the UE)."""
    at = (datetime(2026, 11, 22, 12, 3, tzinfo=timezone.utc) - timedelta(seconds=ce_first_s)).strftime("%H:%M:%S")
    _put(ue_store, UE.replace("12:03:00", at).replace(" 1 UE ", " 1 CE "), "kernel", "gpu002", "kmsg", "kmsg2b")
    assert _drains(ue_store)["kind"] == "memory_ecc" and _acts_on(ue_store) == "FAIL"


def test_a_forged_uncorrected_error_beside_a_trusted_corrected_one_drains_nothing(tmp_path) -> None:
    """attack-22 S6: the kernel's corrected error and a ``logger -t kernel`` uncorrected one a minute later: the UE is
    the user's (verify), the CE is context: nothing takes the node out."""
    store = Store(tmp_path / "store")
    _put(store, CTL, "slurm", "ctl1", "system_file", "ctl")
    _put(store, UE.replace("12:03:00", "12:02:00").replace(" 1 UE ", " 1 CE "), "kernel", "gpu002", "kmsg", "kmsg2")
    _put(store, UE, "syslog", "gpu002", "syslog_file", "syslog2")
    _put(store, OUTPUT, "nccl", "gpu001", "job_output", "out8", job="8")
    e = explain(store, "8")
    assert e.node_fault is None and (e.root_cause or {}).get("node_action") != "drain", (e.root_cause, e.node_fault)
    assert _acts_on(store) != "FAIL"


def test_forged_runs_of_the_job_make_no_run_and_no_recovery(tmp_path) -> None:
    """attack-22 S5: ``logger -t slurmctld`` lines of a job (its own, and a made-up one) in /var/log/syslog: the job
    index tells a run by Slurm's trusted records where any exist, and marks a run told only by a user's lines
    untrusted, which ends no fault in the node's past and counts as no successful job."""
    from queries import jobs

    store = Store(tmp_path / "store")
    _put(store, CTL, "slurm", "ctl1", "system_file", "ctl")
    forged = ("2026-11-22T12:30:00.000000+00:00 gpu002 slurmctld[1]: sched: Allocate JobId={j} NodeList=gpu002 #CPUs=8 "
              "Partition=gpu\n2026-11-22T12:50:00.000000+00:00 gpu002 slurmctld[1]: _job_complete: JobId={j} WEXITSTATUS 0\n")
    _put(store, forged.format(j=8) + forged.format(j=99), "syslog", "gpu002", "syslog_file", "syslog2")
    jobs.write_index(store)
    index = jobs.runs_on_nodes(store).collect()
    assert index.filter(pl.col("job_id") == "8").get_column("end").to_list() == [datetime(2026, 11, 22, 12, 5, tzinfo=timezone.utc)] * 2
    assert index.filter(pl.col("job_id") == "99").get_column("trusted").to_list() == [False]
    assert jobs.completed_on_nodes(store).collect().is_empty()


@pytest.mark.parametrize("status, drains", [("bad parameter(0x3)", False), ("bad QP state(0x10)", False),
                                            ("internal error(0x1)", True)])
def test_a_command_the_hca_refused_is_its_callers_unless_the_hca_failed(tmp_path, status: str, drains: bool) -> None:
    """attack-22 S9: a user's verbs program can make the kernel log an mlx5 command the firmware refused ("failed,
    status bad parameter"): the caller's request, context; "internal error" is the HCA's own failure."""
    store = Store(tmp_path / "store")
    _put(store, CTL, "slurm", "ctl1", "system_file", "ctl")
    _put(store, f"2026-11-22T12:03:00.000000+00:00 gpu002 kernel: mlx5_core 0000:ab:00.0: mlx5_cmd_out_err:838:(pid 4242): "
                f"RTR2RTS_QP(0x504) op_mod(0x0) uid(0) failed, status {status}, syndrome (0x11ed7d), err(-22)\n",
         "kernel", "gpu002", "kmsg", "kmsg2")
    _put(store, OUTPUT, "nccl", "gpu001", "job_output", "out8", job="8")
    e = explain(store, "8")
    fault = e.node_fault or (e.root_cause if (e.root_cause or {}).get("node_action") == "drain" else None)
    assert bool(fault) is drains, (e.root_cause, e.node_fault)


@pytest.mark.parametrize("status, acting", [("bad parameter(0x3)", False), ("internal error(0x1)", True)])
def test_the_fault_engine_drains_for_the_hcas_failure_not_its_callers(tmp_path, status: str, acting: bool) -> None:
    """attack-22 S9, the fault engine's side: [faults.kinds] ib_hca_error `unless` the firmware refused the caller's
    command: a user's bad verbs call (a trusted kernel line) drains nothing; the HCA's internal error does."""
    from observe.health import faults
    from observe.health import policy as pol

    store = Store(tmp_path / "store")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    _put(store, f"{now - timedelta(minutes=5):%Y-%m-%dT%H:%M:%S}.000000+00:00 gpu002 kernel: mlx5_core 0000:ab:00.0: "
                f"mlx5_cmd_out_err:838:(pid 4242): RTR2RTS_QP(0x504) op_mod(0x0) uid(0) failed, status {status}, "
                "syndrome (0x11ed7d), err(-22)\n", "kernel", "gpu002", "kmsg", "kmsg2")
    rows = faults.decide(store.scan(), pol.load().faults, now).filter(pl.col("kind") == "ib_hca_error")
    assert bool(rows.height and rows.get_column("acting").any()) is acting, rows


def test_a_requeued_jobs_first_run_stays_out_of_its_second(tmp_path) -> None:
    """Job 5 ran on gpu[003,009] until gpu009 failed, was requeued onto gpu[003,014], and died of gpu014's Xid 79.
    One output file holds both runs; the first run's last lines carry no stamp of their own: slurmstepd's cancel
    states its time ("CANCELLED AT 13:18:30"), and srun's "Node failure on gpu009" names a node only the first run
    had. Both stay the first run's: the second run's verdict is the Xid (they read as its onset and its lead)."""
    store = Store(tmp_path / "store")
    _put(store, "[2026-11-19T05:13:06.000] sched: Allocate JobId=5 NodeList=gpu[003,009] #CPUs=16 Partition=gpu\n"
                "[2026-11-19T13:18:30.000] Requeuing JobId=5\n"
                "[2026-11-19T13:20:30.000] sched: Allocate JobId=5 NodeList=gpu[003,014] #CPUs=16 Partition=gpu\n"
                "[2026-11-19T19:44:54.000] _job_complete: JobId=5 WEXITSTATUS 1\n", "slurm", "ctl1", "system_file", "ctl")
    _put(store, "2026-11-19T19:34:19.000000+00:00 gpu014 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=3075103, "
                "name=python, GPU has fallen off the bus.\n", "kernel", "gpu014", "kmsg", "kmsg14")
    _put(store, "[2026-11-19 13:10:00] step 1000 loss 2.1\n"
                "slurmstepd: error: *** JOB 5 ON gpu003 CANCELLED AT 2026-11-19T13:18:30 DUE TO NODE FAILURE, SEE "
                "SLURMCTLD LOG FOR DETAILS ***\n"
                "srun: error: Node failure on gpu009\n"
                "[2026-11-19 13:21:00] step 1000 loss 2.1\n"
                "[2026-11-19 19:44:17] RuntimeError: NCCL communicator was aborted on rank 3.\n",
         "nccl", "gpu003", "job_output", "out5", job="5")
    e = explain(store, "5")
    assert (e.root_cause["node"], e.root_cause["kind"], e.root_cause["verdict"]) == ("gpu014", "gpu_xid", "cause"), \
        [(c["node"], c["kind"], c["probability"]) for c in e.candidates[:4]]
    assert not [c for c in e.candidates if c["kind"] in ("slurm_node_down", "slurm_job_cancelled")], e.candidates[:4]


def test_other_nodes_uncorrectable_errors_during_completed_jobs_make_no_dimm_sound(tmp_path) -> None:
    """attack-23 R1: eight earlier UEs on gpu005, each during a job of a busy fleet that went on to complete. How often
    other runs completed beside such lines is no evidence that gpu002's uncorrectable error is not one: the UE is
    still drained (it went under drain_above, 0.89, and hid every UE for the base-rate window)."""
    from queries.jobs import write_index

    store = Store(tmp_path / "store")
    ctl, kern = CTL, ""
    for i in range(8):
        ctl = (f"[2026-11-19T{10 + i:02d}:00:00.000] sched: Allocate JobId={500 + i} NodeList=gpu005 #CPUs=1 Partition=gpu\n"
               f"[2026-11-19T{10 + i:02d}:30:00.000] _job_complete: JobId={500 + i} WEXITSTATUS 0\n") + ctl
        kern += UE.replace("2026-11-22T12:03:00", f"2026-11-19T{10 + i:02d}:10:00").replace("gpu002", "gpu005")
    _put(store, ctl, "slurm", "ctl1", "system_file", "ctl")
    _put(store, kern, "kernel", "gpu005", "kmsg", "kmsg5")
    _put(store, UE, "kernel", "gpu002", "kmsg", "kmsg2")
    _put(store, OUTPUT, "nccl", "gpu001", "job_output", "out8", job="8")
    write_index(store)
    assert _drains(store)["node"] == "gpu002" and _acts_on(store) == "FAIL"


@pytest.mark.parametrize("line, acting", [
    (UE, True),
    (UE.replace(" 1 UE ", " 1 CE "), False),
    ("2026-11-22T12:03:00.000000+00:00 gpu002 kernel: mce: [Hardware Error]: CPU 2: Machine Check Exception: 5 Bank 6: "
     "be00000000800400\n", True),
    ("2026-11-22T12:03:00.000000+00:00 gpu002 kernel: mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 6: "
     "cc59dec000041152\n", False),
])
def test_the_fault_engine_takes_a_node_out_for_an_uncorrected_memory_or_machine_check_error(tmp_path, line: str,
                                                                                           acting: bool) -> None:
    """attack-23 R2: a UE logged between two jobs (after one's end, before a long next one that then works) is no
    job's verdict: the fault engine, which reads the node's trusted lines whatever ran, drains for it; a corrected one
    it leaves alone."""
    from observe.health import faults
    from observe.health import policy as pol

    store = Store(tmp_path / "store")
    now = datetime(2026, 11, 22, 12, 10, tzinfo=timezone.utc)
    _put(store, line, "kernel", "gpu002", "kmsg", "kmsg2")
    rows = faults.decide(store.scan(), pol.load().faults, now).filter(pl.col("node") == "gpu002")
    assert bool(rows.height and rows.get_column("acting").any()) is acting, rows
