"""explain's evidence rules, one test each: each fails when its rule is taken out (a node's past,
a symptom alone, the first process to die, the lagging rank's GPU, an OOM kill the job's step did
not report, an Xid by its catalog action, one diagnosis on every node, calibrated confidence)."""
from __future__ import annotations

import json
import math
import re
from datetime import timedelta

import polars as pl
import pytest

from observe.simulate.accuracy import reliability
from queries.causes import load_causes
from queries.explain import candidates, explain
from queries.ranks import place_ranks
from queries.report import report
from queries.jobs import Run, write_index
from test_explain import NODES, RUN, T, ev, frame, inits, timeouts


def _top(rows: list[dict]) -> dict:
    return candidates(place_ranks(frame(rows), NODES), RUN, load_causes()).row(0, named=True)


def _job(job: str, start: float, end: float, state: str, nodes: str = "gpu[001-004]", exit_code: str = "1:0") -> list[dict]:
    return [ev("slurm_job_start", "ctl1", start, "slurm", job_id=job, attrs={"nodes": nodes}),
            ev("slurm_job_end", "ctl1", end, "slurm", job_id=job, attrs={"state": state, "exit_code": exit_code})]


def _write(store, rows: list[dict]) -> None:
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows))


# job 7 runs from -3600 to +900 (s after T); its rank 17 (gpu003) dies of a misleading CUDA error
FAILED_7 = _job("7", -3600, 900, "FAILED") + [ev("python_exception", None, 30, "nccl", rank=17, job_id="7",
                                                 message="RuntimeError: CUDA error: unknown error")] + inits()
# its restart, job 7 again from 0 s: its rank on gpu003 fails 30 s in (CUDA init on a broken GPU)
RESTART_7 = _job("7", 0, 900, "FAILED") + [ev("python_exception", None, 30, "nccl", rank=17, job_id="7",
                                              message="RuntimeError: CUDA error: unknown error")] + inits()
XID48 = ev("gpu_xid", "gpu003", -3 * 3600, code=48, gpu="0000:3b:00",
           attrs={"category": "memory", "action": "reset_gpu"}, message="NVRM: Xid (PCI:0000:3b:00): 48, DBE")


def test_an_unrecovered_fault_before_the_run_explains_its_failure(store) -> None:
    """The previous job's uncorrectable ECC error on gpu003, three hours before job 7 started there
    and nothing since that would have ended it; job 7's rank on gpu003 failed 30 s into the run: that
    Xid (a node left broken fails the next job as soon as it touches it)."""
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + RESTART_7)
    root = explain(store, "7").root_cause
    assert (root["node"], root["kind"], root["code"]) == ("gpu003", "gpu_xid", 48), root
    top = explain(store, "7").candidates[0]
    assert any("no recovery since" in e for e in top["evidence"])


def test_a_past_fault_a_trusted_route_carried_stays_trusted_beside_its_copy(store) -> None:
    """The same Xid 48 line came by the kernel (kmsg) and by a syslog file's copy of it (any user can write one):
    the node's past keeps the kernel's, so the verdict on it is a drain, not a verify."""
    copy = dict(XID48, route="syslog_file", file_id="g")
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [dict(XID48, route="kmsg"), copy] + RESTART_7)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["code"], root["trusted"], root["node_action"]) == ("gpu_xid", 48, True, "drain"), root


def test_a_past_fault_on_a_node_whose_ranks_kept_up_did_not_fail_the_run(store) -> None:
    """gpu003's unrecovered Xid 48 from the run before, and job 7 hanging 10 min in: gpu002's ranks fell silent while
    every other rank, gpu003's included, waited in the same collective (its watchdog's SeqNum). gpu003 was working when
    the job hung: its past is context, and the silent node is the lead (it read the past Xid, x5, over the silence)."""
    hung = ev("hung_task", "gpu002", 700, route="syslog_file", attrs={"process": "python", "seconds": "122"},
              message="INFO: task python:4242 blocked for more than 122 seconds.")
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + _job("7", 0, 1900, "FAILED") + inits()
           + [hung] + _waited_out(1200, [r for r in range(32) if r // 8 != 1]))
    e = explain(store, "7")
    assert e.root_cause["node"] == "gpu002", (e.root_cause, [(c["node"], c["kind"]) for c in e.candidates[:4]])
    xid = next(c for c in e.candidates if c["kind"] == "gpu_xid")
    assert xid["context"] and any("its ranks were alive and as far on as any" in x for x in xid["evidence"]), xid


def test_a_rendezvous_that_timed_out_began_at_the_start(store) -> None:
    """The restart's master waited 1801 s for ranks that never joined ("Timed out after 1801 seconds waiting
    for clients"): the failure began at the rendezvous, the run never worked, and gpu003's unrecovered Xid
    from the run before explains it."""
    stuck = ev("python_exception", "gpu001", 1801, "nccl", job_id="7", rank=0,
               attrs={"exception": "torch.distributed.DistStoreError", "waited_s": "1801", "joined": "24", "world": "32"},
               message="torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 24/32 clients joined.")
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + _job("7", 0, 1900, "FAILED") + [stuck])
    e = explain(store, "7")
    assert (e.root_cause["node"], e.root_cause["kind"], e.root_cause["code"]) == ("gpu003", "gpu_xid", 48), e.root_cause
    assert any("no recovery since, and the run failed 0 min after it started" in x for x in e.candidates[0]["evidence"])


def test_a_fault_read_before_the_start_of_a_run_that_worked_is_context() -> None:
    """gpu003 logged Xid 79 five minutes before job 7 started (in the window read, not only in its past); job 7 then
    ran an hour before gpu001's task hung: the run found gpu003 working, so that Xid cannot be what failed it."""
    rows = [ev("gpu_xid", "gpu003", -3600 - 300, code=79, gpu="0000:3b:00", route="kmsg",
               attrs={"category": "gpu", "action": "reset_gpu"}, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),
            ev("hung_task", "gpu001", 300, route="kmsg", attrs={"process": "python3", "seconds": "120"},
               message="INFO: task python3:4242 blocked for more than 120 seconds.")] + timeouts(600)
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    xid = ranked.filter(pl.col("kind") == "gpu_xid").row(0, named=True)
    assert xid["context"] and ranked.row(0, named=True)["kind"] == "hung_task", ranked.head(3)


def test_a_run_that_worked_an_hour_on_the_node_was_not_failed_by_its_past(store) -> None:
    """The same Xid, but job 7 ran an hour on gpu003 before its rank failed: the GPU worked, so the run
    ended the old fault as any run that long would have (context: no probability of its own) and the
    job's own error is the verdict."""
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + FAILED_7)
    e = explain(store, "7")
    assert e.root_cause["kind"] == "python_exception", e.root_cause
    xid = next(c for c in e.candidates if c["kind"] == "gpu_xid")
    assert any("the run worked 60 min before it failed" in x for x in xid["evidence"]), xid
    assert xid["context"] and xid["probability"] == 0.0, xid


def test_the_same_own_error_on_every_node_outweighs_a_nodes_past(store) -> None:
    """gpu003's unrecovered Xid 48 from the run before, and job 7 failing 30 s in, but with every rank on
    all four nodes raising the same ModuleNotFoundError at import: a fault of one node fails that node's
    ranks and leaves the others waiting; the same error of the job's own everywhere is the job's doing."""
    died = [ev("python_exception", None, 30 + r / 100, "nccl", rank=r, job_id="7",
               message="ModuleNotFoundError: No module named 'h5py'") for r in range(32)]
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + _job("7", 0, 40, "FAILED") + died + inits())
    e = explain(store, "7")
    assert (e.root_cause["kind"], e.root_cause["category"], e.root_cause["verdict"]) == ("python_exception", "user",
                                                                                        "cause"), e.root_cause
    assert e.root_cause["probability"] >= 0.8, e.candidates[:2]
    xid = next(c for c in e.candidates if c["kind"] == "gpu_xid")
    assert any("every node's ranks died of the same error" in x for x in xid["evidence"]), xid


def test_processes_dying_within_the_clock_skew_name_no_first() -> None:
    """srun saw tasks on gpu001 and gpu002 exit 2 s apart, within the clocks' skew: neither was first."""
    rows = [ev("pcie_aer", "gpu001", 500, attrs={"aer": "non_fatal"}), ev("pcie_aer", "gpu002", 500, attrs={"aer": "non_fatal"}),
            ev("slurm_task_exit", "gpu002", 561, "slurm", job_id="7", code=1),
            ev("slurm_task_exit", "gpu001", 563, "slurm", job_id="7", code=1)] + timeouts(600)
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    assert not any("first of the job's processes" in e for es in ranked.get_column("evidence") for e in es), ranked


@pytest.mark.parametrize("recovery", ["resumed", "completed job", "a run that worked an hour"])
def test_a_recovery_since_ends_the_past_fault(store, recovery: str) -> None:
    """Returned to service by an operator, a job that ran there and completed, or one that ran there an
    hour (a broken node fails a run at once): the old Xid no longer explains anything, the job's own
    error does."""
    later = {"resumed": [ev("slurm_node_resume", "gpu003", -2 * 3600, "slurm", message="update_node: node gpu003 state set to IDLE")],
             "completed job": _job("5", -2.5 * 3600, -2 * 3600, "COMPLETED", "gpu003", "0:0"),
             # it failed too, of its own cause, an hour in: the GPU worked for it
             "a run that worked an hour": _job("5", -2.5 * 3600, -1.5 * 3600, "FAILED", "gpu003", "1:0")}[recovery]
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + later + RESTART_7)
    write_index(store)
    root = explain(store, "7").root_cause
    assert root["kind"] == "python_exception", root


def test_the_heartbeat_monitors_hang_began_stuck_s_before_its_line(store) -> None:
    """"watchdog got stuck for 480 seconds": the hang began eight minutes before the line, when a
    GPU fell off the bus on gpu002; without the wait, the Xid would be 'long before' a 5-minute lead."""
    stuck = [ev("nccl_heartbeat_timeout", None, 1200, "nccl", rank=r, job_id="7", attrs={"stuck_s": "480"},
                message=f"[PG 0 Rank {r}] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress")
             for r in range(32)]
    xid = ev("gpu_fell_off_bus", "gpu002", 720, route="kmsg", message="NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    _write(store, _job("7", -3600, 1300, "FAILED") + stuck + inits() + [xid])
    e = explain(store, "7")
    assert e.onset is not None and abs((e.onset - T).total_seconds() - 720) < 1, e.onset
    assert (e.root_cause["kind"], e.root_cause["node"]) == ("gpu_fell_off_bus", "gpu002"), e.candidates[:2]
    assert any("came before" in why for why in e.candidates[0]["evidence"]), e.candidates[0]


def test_a_hung_task_began_its_timeout_before_its_line() -> None:
    """"INFO: task ... blocked for more than 120 seconds." comes 120 s after the task blocked (kernel/hung_task.c):
    printed 100 s after the ranks' collective began, it came before the failure, on the node whose ranks stalled."""
    rows = timeouts(600, ranks=range(8, 32)) + [
        ev("hung_task", "gpu001", 100, attrs={"process": "kworker/u:3", "seconds": "120"}, message="INFO: task blocked")]
    rows = [dict(r, attrs=r["attrs"].replace('"timeout_ms"', '"ran_ms": "600000", "timeout_ms"')) if r["kind"] == "nccl_timeout"
            else r for r in rows]
    top = _top(rows + inits())
    assert (top["node"], top["kind"]) == ("gpu001", "hung_task"), top
    assert "x3.0 came before the failure began" in top["evidence"], top["evidence"]


def test_the_silent_half_of_a_two_node_job_is_found() -> None:
    """Two nodes, eight ranks each: gpu002's print the watchdog timeout, gpu001's print nothing. The silent
    node is the one to look at, though it holds half the ranks."""
    run = Run("7", RUN.start, RUN.end, "FAILED", "1:0", ["gpu001", "gpu002"])
    rows = [ev("nccl_timeout", None, 600 + r / 100, "nccl", rank=r, job_id="7",
               attrs={"seq": "100", "op": "ALLREDUCE", "timeout_ms": "600000"}) for r in range(8, 16)]
    top = candidates(place_ranks(frame(rows), run.nodes), run, load_causes()).row(0, named=True)
    assert (top["node"], top["kind"], top["symptom"]) == ("gpu001", "nccl_timeout", False), top


def test_a_node_whose_ranks_all_hung_is_found_by_the_jobs_gpus() -> None:
    """Two nodes and 16 GPUs (Slurm's record): ranks 0-7 print the watchdog timeout, ranks 8-15 (gpu002's,
    the highest) print nothing at all. Counting only the ranks seen, the world would be 8 with all of
    them present; one rank per allocated GPU makes gpu002's silence the lead. Another job's record ending in
    the window (a collector reads every job's) counts for nothing."""
    run = Run("7", RUN.start, RUN.end, "FAILED", "1:0", ["gpu001", "gpu002"])
    rows = [ev("nccl_timeout", None, 600 + r / 100, "nccl", rank=r, job_id="7",
               attrs={"seq": "100", "op": "ALLREDUCE", "timeout_ms": "600000"}) for r in range(8)]
    rows.append(ev("slurm_job_end", "ctl1", 900, "slurm", job_id="7", attrs={"state": "FAILED", "gpus": "16"}))
    other = [ev("slurm_job_end", "ctl1", 800, "slurm", job_id="8", attrs={"state": "COMPLETED", "gpus": "64"})]
    top = candidates(place_ranks(frame(rows + other), run.nodes, "7"), run, load_causes()).row(0, named=True)
    assert (top["node"], top["kind"], top["category"], top["symptom"]) == ("gpu002", "nccl_timeout", "node", False), top


def test_a_silent_last_node_is_found_by_the_ranks_a_label_placed_on_each_node() -> None:
    """pdsh labels each line with its host: ranks 0-23 print the watchdog timeout from gpu001-gpu003, eight on each,
    and gpu004 prints nothing; Slurm's record gives no GPU count and no init line says nranks. Counting the ranks
    seen, the world would be 24 (six a node, none silent); eight a node puts 24-31 on the silent gpu004."""
    rows = [dict(r, node=NODES[r["rank"] // 8], attrs=json.dumps({**json.loads(r["attrs"]), "claimed_node": NODES[r["rank"] // 8]}))
            for r in timeouts(600, ranks=range(24))]
    top = candidates(place_ranks(frame(rows), NODES, "7"), RUN, load_causes()).row(0, named=True)
    assert (top["node"], top["kind"], top["symptom"]) == ("gpu004", "nccl_timeout", False), top


def test_ranks_a_collector_filed_under_its_own_node_size_no_world() -> None:
    """A node's collector ingests job output with its own --node: all eight ranks' lines carry gpu001, no launcher
    label. That is no sign of eight ranks a node: every rank of the two-node run reported, none fell silent."""
    run = Run("7", RUN.start, RUN.end, "FAILED", "1:0", ["gpu001", "gpu002"])
    rows = [dict(r, node="gpu001") for r in timeouts(600, ranks=range(8))]
    ranked = candidates(place_ranks(frame(rows), run.nodes, "7"), run, load_causes())
    assert not [m for m in ranked.get_column("message").to_list() if "never reported" in m], ranked.head(3)


@pytest.mark.parametrize("route, node", [("syslog_file", "gpu002"), ("job_output", "gpu042")])
def test_the_first_to_die_is_said_by_the_jobs_output_on_its_nodes(route: str, node: str) -> None:
    """srun's "task N: Exited" names the first process to die only from the job's own output (a ``logger`` line
    naming the job's step says nothing of it) and only on one of the run's nodes."""
    rows = [ev("slurm_task_exit", node, 561, "slurm", job_id="7", code=1, route=route),
            ev("python_exception", None, 560, "nccl", job_id="7", route="job_output", message="RuntimeError: boom")]
    ranked = candidates(place_ranks(frame(rows + timeouts(600)), NODES), RUN, load_causes())
    assert not any("first of the job's processes" in e for ev_ in ranked.get_column("evidence").to_list() for e in ev_)
    assert ranked.filter(pl.col("kind") == "python_exception").row(0, named=True)["node"] is None


def test_slurmctld_notices_a_dead_node_a_slurmd_timeout_late() -> None:
    """slurmctld says "not responding" only after SlurmdTimeout (300 s): a line 4 minutes after the
    peers' timeouts still came before the failure, it is no consequence of it."""
    rows = timeouts(600) + [ev("slurm_node_not_responding", "gpu003", 840, "slurm",
                               message="error: Nodes gpu003 not responding")]
    top = _top(rows)
    assert (top["kind"], top["node"]) == ("slurm_node_not_responding", "gpu003"), top
    assert not any("consequence" in why for why in top["evidence"]), top["evidence"]


def test_slurm_allocating_the_node_ends_its_not_responding(store) -> None:
    """slurmctld set gpu003 DOWN as not responding two hours before job 7; it allocates only nodes
    that are back, so job 7's allocation of gpu003 ends that fault: the job's own error explains it."""
    down = ev("slurm_node_not_responding", "gpu003", -2 * 3600, "slurm", message="error: Nodes gpu003 not responding, setting DOWN")
    _write(store, _job("6", -4 * 3600, -2 * 3600 + 60, "FAILED") + [down] + RESTART_7)
    root = explain(store, "7").root_cause
    assert root["kind"] == "python_exception", root


def test_the_rank_that_never_timed_out_is_found_without_init_lines() -> None:
    """Ranks 1-31 print the watchdog timeout, rank 0 prints nothing, and no NCCL init line says how
    many ranks there are: the world is the ranks seen, whole nodes of them, and its silent rank 0
    (gpu001 under Slurm's block distribution) leads."""
    top = _top(timeouts(600, ranks=range(1, 32)))
    assert (top["node"], top["rank"], top["kind"]) == ("gpu001", 0, "nccl_timeout"), top
    assert "never reported" in top["message"]


@pytest.mark.parametrize("route, node_action", [("kmsg", "drain"), ("syslog_file", "verify"), ("job_output", "verify")])
def test_a_fault_from_a_route_users_write_is_verified_not_drained(store, route: str, node_action: str) -> None:
    """The same Xid 79 from the kernel's own buffer calls for a drain; through a syslog file (any
    local process can log as ``kernel``) or job output it is the verdict still, to verify with an
    active check: evidence, never a trigger."""
    xid = ev("gpu_xid", "gpu003", 500, code=79, route=route, attrs={"category": "gpu", "action": "drain_node"},
             message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    _write(store, _job("7", -3600, 900, "FAILED") + [xid] + timeouts(600) + inits())
    e = explain(store, "7")
    root = e.root_cause
    assert (root["node"], root["code"], root["node_action"]) == ("gpu003", 79, node_action), root
    assert any(line.startswith("  unconfirmed:") for line in report(e)) == (node_action == "verify")
    assert e.candidates[0]["node_action"] == node_action  # the JSON's candidates say the same
    assert root["action"].startswith("confirm on the node") == (node_action == "verify"), root["action"]


def test_the_programs_cuda_error_names_the_gpu_for_a_check(store, tmp_path) -> None:
    """PyTorch prints the CUDA runtime's own string for an uncorrectable ECC error (c10's "CUDA error:
    " + cudaGetErrorString). It is not the user's exception: the verdict is the GPU of rank 17's node,
    to verify with an active check (job output is a route users write: no drain from it)."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text("[rank17]: Traceback (most recent call last):\n[rank17]:   File \"train.py\", line 3, in <module>\n"
                   "[rank17]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    _write(store, _job("7", -3600, 900, "FAILED") + inits())
    ingest([str(out)], store, node="gpu003", job="7", workers=1)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["node"], root["category"]) == ("cuda_hw_error", "gpu003", "gpu"), root
    assert root["node_action"] != "drain", root


@pytest.mark.parametrize("line", ["[rank17]: RuntimeError: CUDA error: unknown error",
                                  "gpu003:4242:4250 [1] include/alloc.h:103 NCCL WARN Cuda failure 'unknown error'"])
def test_the_device_the_program_lost_names_the_gpu_for_a_check(store, tmp_path, line: str) -> None:
    """The CUDA runtime's "unknown error" (cudaErrorUnknown, 999: what a program sees once its GPU fell off
    the bus) on rank 17 alone, and no kernel log: not the user's exception but gpu003's GPU, to verify."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text(line + "\n")
    _write(store, _job("7", -3600, 900, "FAILED") + inits() + timeouts(600, ranks=[r for r in range(32) if r // 8 != 2]))
    ingest([str(out)], store, job="7", workers=1)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["node"], root["category"], root["node_action"]) == ("cuda_device_error", "gpu003", "gpu",
                                                                                   "watch"), root


def test_the_programs_own_kernel_fault_is_the_jobs_bug(store, tmp_path) -> None:
    """The watchdog thread reports the CUDA runtime's "an illegal memory access was encountered"
    (cudaErrorIllegalAddress, the program's kernel faulted) on one rank while the others time out: the
    job's own bug, nothing for its node, not undetermined."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text("[rank17]:[E1122 12:05:00.000000000 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0 Rank 17] Process group "
                   "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n")
    _write(store, _job("7", -3600, 900, "FAILED") + inits() + timeouts(600, ranks=range(32)))
    ingest([str(out)], store, job="7", workers=1)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["category"], root["node_action"], root["verdict"]) == ("cuda_app_error", "user", "none",
                                                                                     "cause"), root


def test_the_node_every_other_node_lost_is_the_peer_not_the_ones_it_lost() -> None:
    """gpu004's HCA failed: ranks on gpu001-003 each name gpu004 as the peer they lost, and gpu004's own
    ranks name each of the others once. The node named from the most other nodes is the one they lost."""
    boot = [ev("log", NODES[r // 8], None, "nccl", rank=r, job_id="7",
               message=f"NCCL INFO Bootstrap : Using ib0:10.0.0.{r // 8 + 1}<0>") for r in range(0, 32, 8)]
    lost = ([ev("nccl_net_error", None, 590 + r / 10, "nccl", rank=r, job_id="7", attrs={"peer": "10.0.0.4<1>"})
             for r in (1, 9, 17)]
            + [ev("nccl_net_error", None, 591 + r / 10, "nccl", rank=25, job_id="7", attrs={"peer": f"10.0.0.{r}<1>"})
               for r in (1, 2, 3)])
    ranked = candidates(place_ranks(frame(inits() + boot + lost + timeouts(600)), NODES), RUN, load_causes())
    named = ranked.filter(pl.col("kind") == "nccl_peer_lost").get_column("node").to_list()
    assert named == ["gpu004"], ranked.select("node", "kind", "probability")


def test_a_line_a_node_logs_most_hours_is_background(store) -> None:
    """A monitoring agent's register reads make gpu002 log mlx5 ACCESS_REG errors every hour for two
    days before job 7, as on the hour job 7 hung: as likely near a failure as not, it is background
    (never the verdict, no drain), whatever the catalog says of an HCA error."""
    hca = "mlx5_core 0000:3b:00.0: mlx5_cmd_out_err:803:(pid 1234): ACCESS_REG(0x805) op_mod(0x1) failed, status bad parameter(0x3)"
    hourly = [ev("ib_hca_error", "gpu002", -h * 3600 + 120, route="kmsg", message=hca) for h in range(48)]
    _write(store, _job("7", -3600, 900, "FAILED") + hourly + [ev("ib_hca_error", "gpu002", 300, route="kmsg", message=hca)]
           + timeouts(600) + inits())
    e = explain(store, "7")
    assert e.root_cause["kind"] != "ib_hca_error" and e.root_cause["node_action"] != "drain", e.root_cause
    hca_row = next(c for c in e.candidates if c["kind"] == "ib_hca_error")
    assert hca_row["context"] and any(why.startswith("background: logged in") for why in hca_row["evidence"]), hca_row


def test_what_a_user_writes_every_hour_makes_no_trusted_line_background(store) -> None:
    """A node user's ``logger`` writes the same ACCESS_REG error into gpu002's syslog every hour for two days (a
    syslog file: untrusted); the kernel logs it once (kmsg) as job 7 hangs. The trusted line is weighed by how often
    trusted routes log it: not background, whatever the user wrote."""
    hca = "mlx5_core 0000:3b:00.0: mlx5_cmd_out_err:803:(pid 1234): ACCESS_REG(0x805) op_mod(0x1) failed, status bad parameter(0x3)"
    forged = [ev("ib_hca_error", "gpu002", -h * 3600 + 120, route="syslog_file", message=hca) for h in range(48)]
    _write(store, _job("7", -3600, 900, "FAILED") + forged + [ev("ib_hca_error", "gpu002", 300, route="kmsg", message=hca)]
           + timeouts(600) + inits())
    row = next(c for c in explain(store, "7").candidates if c["kind"] == "ib_hca_error" and c["trusted"])
    assert not any(why.startswith("background: logged in") for why in row["evidence"]), row


def test_a_store_hours_old_calls_nothing_background(store) -> None:
    """The store holds two hours: the previous run's Xid 79 on gpu003 is in one of them, which is no rate
    at all (base_rate_min_hours). It is the restart's cause, not background."""
    day = -12 * 3600  # T is noon: the store's first day began twelve hours before
    xid = ev("gpu_xid", "gpu003", day + 1200, code=79, gpu="0000:3b:00", route="kmsg",
             attrs={"category": "gpu", "action": "drain_node"}, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    restart = _job("7", day + 3600, day + 4500, "FAILED") + [
        ev("python_exception", None, day + 3630, "nccl", rank=17, job_id="7", message="RuntimeError: CUDA error: unknown error")]
    _write(store, _job("6", day + 600, day + 1800, "FAILED") + [xid] + restart + inits())
    write_index(store)
    root = explain(store, "7").root_cause
    assert (root["node"], root["kind"], root["verdict"]) == ("gpu003", "gpu_xid", "cause"), root


@pytest.mark.parametrize("exception", ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                                       "torch.distributed.DistStoreError", "torch.distributed.DistBackendError",
                                       "torch.distributed.DistNetworkError"])
def test_an_exception_reporting_other_processes_is_a_symptom(exception: str) -> None:
    """torchrun's ChildFailedError (a worker died), the store's DistStoreError (ranks never came), the
    backend's DistBackendError (NCCL failed under the rank) and DistNetworkError (a peer's socket went
    away) report someone else's failure: symptoms, not the user's own code; nor is the traceback heading
    them (context: its exception says what happened)."""
    rows = timeouts(600) + [ev("python_traceback", None, 590, "nccl", rank=0, job_id="7",
                               message="Traceback (most recent call last):"),
                            ev("python_exception", None, 591, "nccl", rank=0, job_id="7", attrs={"exception": exception},
                               message=f"{exception}: see above")]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert top["symptom"] and top["category"] != "user", ranked.head(3)


def test_never_none_found_while_error_lines_exist(store) -> None:
    """No line of a catalogued kind, but the node logged an error no rule names and the job printed
    one: explain shows them as unclassified evidence, folded by template, not "none found"."""
    lines = [ev("log", "gpu002", 100 + i, "syslog", severity="info", message=f"mlx5_core 0000:{i}:00.0: wait_func:1154 "
                f"failed, cmd 0x{i}f, status bad resource") for i in range(3)]
    lines += [ev("log", None, 200, "nccl", job_id="7", severity=None, message="torch.distributed.DistStoreError: stuck"),
              ev("log", "gpu001", 150, "syslog", severity="info", message="systemd[1]: Started Session 4 of user alice.")]
    _write(store, _job("7", -3600, 900, "FAILED") + lines)
    e = explain(store, "7")
    assert e.root_cause is None
    assert [(u["count"], u["nodes"]) for u in e.unclassified] == [(3, ["gpu002"]), (1, [])], e.unclassified
    text = report(e)
    assert any(t.startswith("ROOT CAUSE  unclassified") for t in text) and not any("none found" in t for t in text)
    assert any("wait_func" in t for t in text) and not any("Started Session" in t for t in text)


def test_only_symptoms_is_undetermined(store) -> None:
    """Every rank timed out on the same collective and nothing else was logged: the best candidate
    is a symptom, so the verdict is undetermined whatever its margin."""
    _write(store, _job("7", -3600, 900, "FAILED") + timeouts(600) + inits())
    root = explain(store, "7").root_cause
    assert root["kind"] == "nccl_timeout" and root["verdict"] == "undetermined", root


def test_the_first_process_to_die_tips_two_equal_candidates() -> None:
    """Two non-fatal PCIe errors, one a second earlier: torchrun's root cause names gpu002's rank."""
    rows = [ev("pcie_aer", "gpu001", 500, attrs={"aer": "non_fatal"}), ev("pcie_aer", "gpu002", 501, attrs={"aer": "non_fatal"}),
            ev("torch_elastic_root_cause", "gpu002", 560, "nccl", rank=9, job_id="7", code=-6)] + timeouts(600)
    top = _top(rows)
    assert top["node"] == "gpu002" and any("first of the job's processes to die" in e for e in top["evidence"]), top


def test_srun_first_exit_other_than_killed_is_the_first_to_die() -> None:
    rows = [ev("pcie_aer", "gpu001", 500, attrs={"aer": "non_fatal"}), ev("pcie_aer", "gpu002", 501, attrs={"aer": "non_fatal"}),
            ev("slurm_task_exit", "gpu001", 560, "slurm", job_id="7", attrs={"signal": "Killed"}, route="job_output"),
            ev("slurm_task_exit", "gpu002", 561, "slurm", job_id="7", code=1, route="job_output")] + timeouts(600)
    assert _top(rows)["node"] == "gpu002"


def _explain_output(store, tmp_path, text: str) -> dict:
    """Job 7's root cause, its output ``text`` ingested as slurm-7.out."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text(text)
    _write(store, _job("7", -3600, 900, "FAILED"))
    ingest([str(out)], store, job="7", workers=1)
    return explain(store, "7").root_cause


def test_an_unlabelled_exception_ran_where_srun_saw_the_first_task_exit(store, tmp_path) -> None:
    """Plain srun (no -l): one rank's exception names no node; srun then says task 9 on gpu003 exited with code 1
    and killed the others (src/srun/step_launch.c "%s: task %s: Exited with exit code %d", "...: Killed"). The rank
    that raised is the task that exited first: the exception ran on gpu003, and no NCCL error of a surviving
    rank outweighs it."""
    root = _explain_output(store, tmp_path, "Traceback (most recent call last):\n"
                           '  File "/home/u/fit.py", line 90, in <module>\n'
                           "    step(batch)\n"
                           "KeyError: 'labels'\n"
                           "srun: error: gpu003: task 9: Exited with exit code 1\n"
                           "srun: Terminating StepId=7.0\n"
                           "gpu001:3301:3390 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
                           "10.9.0.3<4711> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n"
                           "srun: error: gpu001: tasks 0-7: Killed\n")
    assert (root["kind"], root["node"], root["verdict"]) == ("python_exception", "gpu003", "cause"), root


def test_a_traceback_whose_last_line_no_rule_reads_is_the_jobs_failure(store, tmp_path) -> None:
    """A traceback ending in an exception whose class no rule names (not *Error / *Exception): its heading stands for
    the job's own failure, with that last line; not "undetermined, 1.0" as if the cause had left no line."""
    root = _explain_output(store, tmp_path, "Traceback (most recent call last):\n"
                           '  File "/home/u/fit.py", line 90, in <module>\n'
                           "    guard(loss)\n"
                           "fit.TrainingDiverged: loss is nan at step 4410\n")
    assert (root["kind"], root["category"], root["context"]) == ("python_traceback", "user", False), root
    assert root["message"].startswith("fit.TrainingDiverged: loss is nan at step 4410\nTraceback"), root["message"]
    assert root["confidence"] < 0.9, root


def test_a_job_killed_at_its_time_limit_is_told_so(store, tmp_path) -> None:
    """slurmstepd's "CANCELLED AT ... DUE TO TIME LIMIT" (src/slurmd/slurmstepd/req.c): the job ran out of its
    --time, the user's to change; not "see who cancelled it", undetermined."""
    root = _explain_output(store, tmp_path, "step 9000 loss 1.92\n"
                           "slurmstepd: error: *** JOB 7 ON gpu001 CANCELLED AT 2026-11-22T12:15:00 DUE TO TIME LIMIT ***\n")
    assert (root["kind"], root["category"], root["verdict"], root["node_action"]) == (
        "slurm_job_cancelled", "user", "cause", "none"), root


def test_a_job_someone_cancelled_is_told_who() -> None:
    """slurmctld logged scancel's RPC for job 7 with the requesting uid (proc_req.c _slurm_rpc_kill_job), and
    slurmstepd then cancelled its step: cancelled on request, the uid says by whom; not "the cause left no line"."""
    rows = [ev("slurm_job_kill_request", "ctl1", 880, "slurm", job_id="7", route="system_file", attrs={"uid": "1001"},
               message="_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=7 uid 1001"),
            ev("slurm_job_cancelled", "gpu001", 881, "slurm", job_id="7", route="job_output", attrs={"step": "0"},
               message="slurmstepd: error: *** STEP 7.0 ON gpu001 CANCELLED AT 2026-11-22T12:14:41 ***")]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["kind"], top["category"], top["node_action"]) == ("slurm_job_kill_request", "user", "none"), ranked.head(3)
    assert top["probability"] >= 0.9, top


def test_a_preempted_job_is_told_so(store, tmp_path) -> None:
    """slurmstepd's "DUE TO PREEMPTION" (req.c): Slurm gave the nodes to a job of higher priority."""
    root = _explain_output(store, tmp_path, "step 900 loss 2.1\n"
                           "slurmstepd: error: *** JOB 7 ON gpu001 CANCELLED AT 2026-11-22T12:15:00 DUE TO PREEMPTION ***\n")
    assert (root["kind"], root["category"], root["verdict"], root["node_action"]) == (
        "slurm_job_cancelled", "user", "cause", "none"), root


def test_a_rank_that_died_of_a_segfault_is_the_jobs_native_code() -> None:
    """The kernel says python[4242] on gpu003 died of a segfault in the job's extension, and srun saw task 17 die of
    it: the job's native code crashed (software, nothing for the node), not the silent ranks' node or network."""
    rows = [ev("segfault", "gpu003", 500, route="kmsg", pid=4242, attrs={"process": "python", "detail": " in libext.so[7f00+1000]"},
               message="python[4242]: segfault at 0 ip 00007f2a1c0a1b2c sp 00007ffd5b2c1d30 error 4 in libext.so[7f00+1000]"),
            ev("slurm_task_exit", "gpu003", 501, "slurm", job_id="7", route="job_output", attrs={"signal": "Segmentation fault"})]
    top = _top(rows + timeouts(600, ranks=[r for r in range(32) if r // 8 != 2]) + inits())
    assert (top["kind"], top["node"], top["category"], top["node_action"]) == ("segfault", "gpu003", "software", "none"), top


def test_a_fault_logged_after_the_job_ended_did_not_fail_it() -> None:
    """An Xid 79 on gpu003 7.5 minutes after job 7's end (Slurm's record): the node broke later, idle or in another
    job; it cannot have failed job 7, whose ranks all timed out (a silent hang: undetermined), and no drain."""
    rows = timeouts(600) + [ev("gpu_xid", "gpu003", 900 + 450, code=79, gpu="0000:3b:00", route="kmsg",
                                attrs={"category": "gpu", "action": "reset_gpu"}, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")]
    ranked = candidates(place_ranks(frame(rows + inits()), NODES), RUN, load_causes())
    assert ranked.filter(pl.col("kind") == "gpu_xid").row(0, named=True)["context"], ranked.head(3)


def test_the_report_bounds_a_root_line_a_job_printed(store, tmp_path) -> None:
    """A 200,000-character exception line is the verdict's line: the report shows its first 400 characters and says
    how many more there were, not a 200 KB line on the on-call's terminal."""
    _explain_output(store, tmp_path, "ValueError: " + "x" * 200_000 + "\n")
    text = report(explain(store, "7"))
    assert max(len(line) for line in text) < 1000 and any("more characters)" in line for line in text), text[:6]


def test_the_lagging_rank_is_named_with_its_gpu() -> None:
    """NCCL's init line gives each rank's busId (3b000: 0000:3b:00.0); the hung rank's GPU is named."""
    rows = timeouts(600, lag={13: 99}) + [
        ev("nccl_comm_init", NODES[r // 8], None, "nccl", rank=r, job_id="7",
           attrs={"nranks": "32", "bus_id": "3b000" if r == 13 else "18000"}) for r in range(32)]
    top = _top(rows)
    assert (top["node"], top["rank"], top["gpu"]) == ("gpu002", 13, "0000:3b:00"), top


def test_an_oom_kill_the_jobs_step_did_not_report_is_not_its_cause() -> None:
    """The OOM killer took some process on gpu001 (no slurmstepd 'Detected ... oom_kill event' for
    the job): the rank whose collective lagged explains the hang."""
    rows = [ev("oom_kill", "gpu001", 300, pid=4242, attrs={"process": "dcgm-exporter"})] + timeouts(600, lag={13: 99})
    top = _top(rows)
    assert (top["node"], top["kind"]) == ("gpu002", "nccl_timeout"), top


@pytest.mark.parametrize("memcg, the_jobs", [("/system.slice/mnt-data.mount", False), ("/slurm/uid_1000/job_7/step_0", True),
                                              ("/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", True),
                                              ("/system.slice/slurmstepd.scope/job_71/step_0/user/task_0", False)])
def test_an_oom_kill_in_another_cgroup_is_not_the_jobs(memcg: str, the_jobs: bool) -> None:
    """The kernel's oom-kill summary names the killed task's cgroup (mm/oom_kill.c dump_oom_summary:
    task_memcg=); Slurm runs job 7's processes under job_7 (cgroup v1 and v2 layouts): a kill anywhere else
    cannot have failed it, whatever the job's output holds."""
    rows = [ev("oom_kill", "gpu001", 300, attrs={"process": "mount", "memcg": memcg}),
            ev("python_exception", None, 400, "job", rank=3, job_id="7", message="RuntimeError: boom")]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    oom = ranked.filter(pl.col("kind") == "oom_kill").row(0, named=True)
    assert oom["context"] is not the_jobs and (ranked.row(0, named=True)["kind"] == "oom_kill") is the_jobs, ranked
    assert any("not in the job's cgroup" in e for e in oom["evidence"]) is not the_jobs


def test_the_oom_killers_kill_line_is_in_the_cgroup_its_summary_names() -> None:
    """The OOM killer's summary names the victim's cgroup and pid; its next line, "Memory cgroup out of memory:
    Killed process <pid>", names the pid alone: the same kill of a node daemon, not the job's. gpu004's ranks fell
    silent (ranks 0-23 timed out, init lines name 32): the daemon's kill there does not stand in for them."""
    oom = [ev("oom_kill", "gpu004", -600, pid=4242, attrs={"process": "dcgm-exporter", "memcg": "/system.slice/dcgm.service"}),
           ev("oom_kill", "gpu004", -600, pid=4242, attrs={"process": "dcgm-exporter", "scope": "Memory cgroup"})]
    top = _top(oom + timeouts(600, ranks=range(24)) + inits())
    assert (top["node"], top["kind"], top["symptom"]) == ("gpu004", "nccl_timeout", False), top


def test_a_contained_memory_error_is_the_jobs_cause_but_no_drain() -> None:
    """Xid 94: NVIDIA's catalog says restart the application; the GPU stays usable."""
    top = _top([ev("gpu_xid", "gpu003", 0, code=94, attrs={"category": "memory", "action": "application_error"})]
               + timeouts(600))
    assert (top["node"], top["kind"], top["category"], top["node_action"]) == ("gpu003", "gpu_xid", "gpu", "watch"), top


def test_the_same_user_error_on_every_node_is_one_confident_diagnosis() -> None:
    """Every rank raised the same exception: the node does not matter, so the exceptions on the job's
    four nodes are one diagnosis, not four rivals that split its probability."""
    rows = [ev("python_exception", None, 5 + r / 100, "nccl", rank=r, job_id="7") for r in range(32)] + timeouts(600)
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["kind"], top["category"], top["node_action"]) == ("python_exception", "user", "none")
    assert top["probability"] >= 0.9, ranked.select("node", "kind", "score", "probability")


def test_confidence_is_the_diagnoses_odds_normalised() -> None:
    """Two diagnoses at odds 9 and 3 beside the cause that left no line (odds 1): 9/13 and 3/13; a
    second candidate of the first diagnosis (the same category and node) adds no odds; context is
    no diagnosis."""
    from queries.explain import probability
    ranked = pl.DataFrame({"category": ["gpu", "gpu", "user", "gpu"], "node": ["a", "a", "b", "c"],
                           "node_action": ["drain", "drain", "none", "watch"], "context": [False, False, False, True],
                           "score": [math.log(9), math.log(2), math.log(3), math.log(50)]})
    got = ranked.select(probability(ranked, 1.0)).get_column("probability").round(3).to_list()
    assert got == [round(9 / 13, 3), round(9 / 13, 3), round(3 / 13, 3), 0.0]


def test_reliability_leaves_the_undetermined_out() -> None:
    scored = pl.DataFrame({"top1": [True, False, True], "undetermined": [False, False, True],
                           "confidence": [0.8, 0.8, 0.3]})
    bins, ece = reliability(scored)
    assert bins.get_column("count").sum() == 2 and ece == pytest.approx(0.3)


def test_the_plot_opens_on_the_window_around_the_onset(store) -> None:
    """An event hours before the failure is counted, not drawn; a root cause from the node's past is
    marked at the left edge with its age; the window starts before the onset."""
    from queries.plot import timeline_html

    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [XID48] + RESTART_7
           + [ev("pcie_aer", "gpu001", -890, attrs={"aer": "corrected"}), ev("pcie_aer", "gpu002", 20, attrs={"aer": "corrected"})])
    result = explain(store, "7")
    assert result.onset == T + timedelta(seconds=30)
    page = timeline_html(result)
    drawn = re.findall(r"<circle [^>]*><title>([^<]*)</title>", page)
    assert any("gpu002 pcie_aer" in t for t in drawn) and not any("gpu001 pcie_aer" in t for t in drawn), drawn
    assert "root cause 3h 00m before" in page and "more event(s) of the timeline outside this window" in page


def test_what_the_fleet_logs_while_its_jobs_succeed_weighs_less(store) -> None:
    """Non-fatal PCIe errors logged on ten other nodes during ten jobs that completed: on gpu001 they
    are weaker evidence than where nothing is known of other jobs (likelihood ratio 0.9 per job)."""
    rows = []
    for k in range(10):  # jobs elsewhere, each completed with the same AER logged while it ran
        node = f"gpu{10 + k:03d}"
        rows += _job(f"10{k}", -86400 * (k + 1), -86400 * (k + 1) + 3600, "COMPLETED", node, "0:0")
        rows.append(ev("pcie_aer", node, -86400 * (k + 1) + 600, attrs={"aer": "non_fatal"}))
    rows += _job("7", -3600, 900, "FAILED") + [ev("pcie_aer", "gpu001", 540, attrs={"aer": "non_fatal"}),
                                               ev("python_exception", None, 560, "nccl", rank=17, job_id="7")]
    _write(store, rows + timeouts(600) + inits())

    def aer() -> dict:
        return next(c for c in explain(store, "7").candidates if c["kind"] == "pcie_aer")

    alone = aer()  # no job index: nothing known of other jobs
    write_index(store)
    known = aer()
    assert known["probability"] < alone["probability"] * 0.5, (alone, known)
    assert "x0.35 seen fleet-wide during 10 successful job(s)" in known["evidence"]
    assert any("uncorrected but not fatal" in e for e in known["evidence"])


MLX0 = {"hca": "mlx5_0", "port": "1"}


def _link(kind: str, node: str, at: float, hca: dict = MLX0, **fields) -> dict:
    return ev(kind, node, at, attrs=hca, message=f"mlx5_core 0000:0c:00.0 {hca['hca']}: Port: {hca['port']} Link "
              + ("DOWN" if kind == "ib_link_down" else "ACTIVE"), **fields)


def test_a_link_that_came_back_within_seconds_is_a_flap() -> None:
    """gpu004's link went down and came back 3 s later; gpu002's stayed down: both show NCCL errors,
    gpu002's broke the job; gpu004's flap is context, which cannot fail it."""
    rows = [_link("ib_link_down", "gpu004", 0), _link("ib_link_up", "gpu004", 3), _link("ib_link_down", "gpu002", 2),
            _link("ib_link_up", "gpu002", 200)] + [ev("nccl_net_error", None, 8, "nccl", rank=r, job_id="7") for r in (9, 25)]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    assert ranked.row(0, named=True)["node"] == "gpu002", ranked.head(3)
    flap = ranked.filter(pl.col("node") == "gpu004", pl.col("kind") == "ib_link_down").row(0, named=True)
    assert flap["context"] and any("came back within 10.0 s" in e for e in flap["evidence"]), flap


def test_another_hcas_flap_brings_no_link_back() -> None:
    """gpu002's mlx5_0 went down and stayed down; its mlx5_1 flapped 2 s later (down, up 3 s after): the up is
    mlx5_1's, and mlx5_0's outage stays the cause."""
    mlx1 = {"hca": "mlx5_1", "port": "1"}
    rows = [_link("ib_link_down", "gpu002", 0), _link("ib_link_down", "gpu002", 2, mlx1), _link("ib_link_up", "gpu002", 5, mlx1)] \
        + [ev("nccl_net_error", None, 8, "nccl", rank=r, job_id="7") for r in (9, 25)]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["context"]) == ("gpu002", "ib_link_down", False), ranked.head(3)
    assert not any("came back" in e for e in top["evidence"]), top["evidence"]


@pytest.mark.parametrize("version, flap", [("2.12.12", False), ("2.21.5", True)])
def test_a_flap_is_what_the_jobs_nccl_rides_out(version: str, flap: bool) -> None:
    """gpu004's link was down 5 s. NCCL before 2.15 retries an IB link 0.5 s (NCCL_IB_TIMEOUT 14, 8 tries of
    4.096 us x 2^14), 2.15-2.24 8.6 s (18): under 2.12 the outage failed the job, under 2.21 NCCL rode it out."""
    rows = [_link("ib_link_down", "gpu004", 0), _link("ib_link_up", "gpu004", 5),
            ev("log", None, None, "nccl", job_id="7", message=f"NCCL version {version}+cuda12.2")] \
        + [ev("nccl_net_error", None, 8, "nccl", rank=r, job_id="7") for r in (9, 25)]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    link = ranked.filter(pl.col("kind") == "ib_link_down").row(0, named=True)
    assert link["context"] is flap, link


@pytest.mark.parametrize("up_route, flap", [("kmsg", True), ("syslog_file", False)])
def test_only_a_trusted_line_brings_a_trusted_link_back(up_route: str, flap: bool) -> None:
    """gpu002's kernel (kmsg) logged its link down; 3 s later a "Link up" came: from the kernel it is a flap, from a
    syslog file any node user can write with ``logger`` it brings nothing back and the link stays the cause."""
    rows = [_link("ib_link_down", "gpu002", 0, route="kmsg"), _link("ib_link_up", "gpu002", 3, route=up_route)] \
        + [ev("nccl_net_error", None, 8, "nccl", rank=r, job_id="7") for r in (9, 25)]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    link = ranked.filter(pl.col("kind") == "ib_link_down").row(0, named=True)
    assert any("came back within" in e for e in link["evidence"]) is flap, link["evidence"]


def test_a_flap_before_a_switchs_outage_is_an_episode_of_its_own() -> None:
    """gpu001's link flapped (down, back 2 s later) three minutes before its leaf switch failed: gpu001's and gpu002's
    links then went down together and stayed down. The flap is over when the link is back, so gpu001's outage is
    an episode of its own, at once with gpu002's: the switch they share (it read as gpu001's one episode from the
    flap's time, minutes before gpu002's, and no switch)."""
    rows = [_link("ib_link_down", "gpu001", 300), _link("ib_link_up", "gpu001", 302),
            _link("ib_link_down", "gpu001", 480), _link("ib_link_down", "gpu002", 480.5)] \
        + [ev("nccl_net_error", None, 500 + r / 100, "nccl", rank=r, job_id="7") for r in range(32)]
    ranked = candidates(place_ranks(frame(rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["shared"]) == (None, "ib_link_down", True), \
        ranked.select("node", "kind", "ts", "context", "shared", "probability").head(5)


def test_what_died_or_came_back_before_the_run_started_did_not_fail_it() -> None:
    """Two lines from before job 7 started (at T, to hang 100 s in): an OOM kill of an earlier job's process on gpu003, 20 s before,
    and gpu004's link, down and back up 2 min before the start. Neither can have failed the run (a process of another
    job; a link up all through it), so rank 19 on gpu003, which never reported the timeout the other 31 did, is the
    lead (the OOM kill stood for gpu003's silence, and the link down was the verdict)."""
    rows = [ev("oom_kill", "gpu003", -20, attrs={"pid": "57995", "process": "python"},
               message="Killed process 57995 (python) total-vm:146328kB, anon-rss:0kB"),
            _link("ib_link_down", "gpu004", -800), _link("ib_link_up", "gpu004", -120)]
    soon = Run("7", T, T + timedelta(minutes=15), "FAILED", "1:0", NODES)  # it hung 100 s in: a broken node would do that
    ranked = candidates(place_ranks(frame(inits() + rows + _waited_out(700, [r for r in range(32) if r != 19])), NODES),
                        soon, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["rank"]) == ("gpu003", "nccl_timeout", 19), ranked.head(4)
    assert ranked.filter(pl.col("kind").is_in(["oom_kill", "ib_link_down"])).get_column("context").all()


def test_a_link_down_the_jobs_nccl_never_noticed_does_not_stand_for_a_hung_rank() -> None:
    """Rank 11's collectives stalled on gpu002 (its SeqNum behind the others'); 30 s after its wait began gpu002's
    link went down, and stayed down. Had the link cut the ranks off, NCCL would have reported network errors; the
    job's output shows none: the link down does not stand for the stall, and the stalled rank is the lead."""
    rows = [_link("ib_link_down", "gpu002", 630), _link("ib_link_up", "gpu002", 1800)]
    rows_lag = inits() + rows + _waited_out(1200, [r for r in range(32) if r != 11]) + [
        ev("nccl_timeout", None, 1190, "nccl", rank=11, job_id="7",
           attrs={"seq": "99", "op": "ALLREDUCE", "timeout_ms": "600000", "ran_ms": "600500"})]
    ranked = candidates(place_ranks(frame(rows_lag), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["rank"]) == ("gpu002", "nccl_timeout", 11), ranked.head(4)


def _waited_out(at: float, ranks) -> list[dict]:
    """The ranks' watchdog timeouts printed ``at``, each collective having run 600 s: the hang began 600 s before."""
    return [ev("nccl_timeout", None, at + r / 100, "nccl", rank=r, job_id="7",
               attrs={"seq": "100", "op": "ALLREDUCE", "timeout_ms": "600000", "ran_ms": "600041"}) for r in ranks]


@pytest.mark.parametrize("severity, code, action", [("fatal", 149, "none"), ("nonfatal", 149, "none"),
                                                     ("nonfatal", 145, "application_error")])
def test_an_nvlink_xid_is_what_its_line_says_it_is(severity: str, code: int, action: str) -> None:
    """NVIDIA's catalog gives NVLink5 Xids (144-150) two actions, by the word the line states: Fatal resets the GPU,
    Nonfatal needs none (145's: follow Xid 154 if logged). gpu003's Xid 149 "Fatal" is the cause, its catalog action
    reset_gpu (it read "drain ... (Xid catalog: none)"); a "Nonfatal" one, 149 or 145, is context (both were drains)."""
    attrs = {"category": "nvlink", "action": action, "fatal_action": "reset_gpu", "nvlink_severity": severity}
    word = severity.capitalize()
    rows = [ev("gpu_xid", "gpu003", 0, code=code, gpu="0000:1b:00", attrs=attrs,
               message=f"NVRM: Xid (PCI:0000:1b:00): {code}, NETIR_LINK_EVT {word} XC0 i0 Link 08 (0x021a6001 0x00000000)")] \
        + _waited_out(600, [r for r in range(32) if r // 8 != 2])
    ranked = candidates(place_ranks(frame(inits() + rows), NODES), RUN, load_causes())
    xid = ranked.filter(pl.col("kind") == "gpu_xid").row(0, named=True)
    if severity == "fatal":
        assert ranked.row(0, named=True)["kind"] == "gpu_xid" and xid["node_action"] != "none", xid
        assert xid["action"].endswith("(Xid catalog: reset_gpu)"), xid["action"]
    else:
        assert xid["context"] and xid["probability"] == 0, xid


@pytest.mark.parametrize("severity, status", [("fatal", "FAIL"), ("nonfatal", "PASS")])
def test_the_epilogs_explain_check_reads_an_nvlink_xid_as_its_line_says(store, severity: str, status: str) -> None:
    """The kernel (kmsg) logged gpu003's Xid 149 "Fatal": the epilog's explain check on gpu003 fails with the
    catalog's fatal_action's remedy, as the fault engine acts (it took the catalog's "none" by code: a pass); a
    "Nonfatal" one passes."""
    from observe.health import policy as pol
    from observe.health.checks import explain as check

    attrs = {"category": "nvlink", "action": "none", "fatal_action": "reset_gpu", "nvlink_severity": severity}
    xid = ev("gpu_xid", "gpu003", 500, code=149, gpu="0000:1b:00", route="kmsg", attrs=attrs,
             message=f"NVRM: Xid (PCI:0000:1b:00): 149, NETIR_LINK_EVT {severity.capitalize()} XC0 i0 Link 08 (0x021a6001)")
    _write(store, _job("7", -3600, 900, "FAILED") + inits() + [xid] + _waited_out(1100, [r for r in range(32) if r // 8 != 2]))
    policy = pol.load()
    result = check.run({**policy.checks["explain"], "job": "7", "store": str(store.root), "node": "gpu003",
                        "policy": policy.doc})
    assert result.status.value == status, result.summary


def test_a_panic_from_a_fatal_machine_check_and_its_record_are_one_fault() -> None:
    """gpu003 logged an uncorrectable machine check and panicked on it ("Fatal machine check"): one fault of the
    host, not two rival diagnoses splitting the probability (the record read "memory", the panic "node": 0.84)."""
    rows = [ev("mce", "gpu003", 0, message="mce: [Hardware Error]: CPU 40: Machine Check Exception: 5 Bank 0: "
                                           "b200000000070005"),
            ev("kernel_panic", "gpu003", 1, message="Kernel panic - not syncing: Fatal machine check",
               attrs={"detail": "Fatal machine check"})] + _waited_out(600, [r for r in range(32) if r // 8 != 2])
    ranked = candidates(place_ranks(frame(inits() + rows), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["node_action"]) == ("gpu003", "drain") and top["probability"] >= 0.9, \
        ranked.select("node", "kind", "category", "probability").head(4)
    assert ranked.filter(pl.col("node") == "gpu003", pl.col("kind").is_in(["mce", "kernel_panic"])) \
        .get_column("category").unique().to_list() == [top["category"]]


def test_a_hung_task_reported_at_the_detectors_next_check_began_with_the_hang() -> None:
    """gpu003's ranks hung at 0 (the others' collectives ran 600 s from then); khungtaskd reported a task
    "blocked for more than 120 seconds" at 150 s: it checks once per 120 s interval, so the block may have begun
    up to 240 s before its line, with the hang (without the detector's interval: "after the failure began")."""
    rows = [ev("hung_task", "gpu003", 150, message="INFO: task python3:3751 blocked for more than 120 seconds.",
               attrs={"task": "python3", "seconds": "120"})] + _waited_out(600, [r for r in range(32) if r // 8 != 2])
    ranked = candidates(place_ranks(frame(inits() + rows), NODES), RUN, load_causes())
    hung = ranked.filter(pl.col("kind") == "hung_task").row(0, named=True)
    assert ranked.row(0, named=True)["kind"] == "hung_task", ranked.select("node", "kind", "probability").head(3)
    assert "x3.0 came before the failure began" in hung["evidence"], hung["evidence"]


def test_ranks_in_different_collectives_are_the_jobs_own_bug() -> None:
    """Rank 0 waits in a BROADCAST while the others wait in ALLREDUCE at the same step: a code path
    some ranks skipped; the job's fault, nothing for a node."""
    rows = timeouts(600, ranks=range(1, 32)) + [ev("nccl_timeout", None, 600, "nccl", rank=0, job_id="7",
                                                   attrs={"seq": "100", "op": "BROADCAST", "timeout_ms": "600000"})]
    top = _top(rows)
    assert (top["kind"], top["category"], top["node_action"]) == ("collective_mismatch", "user", "none"), top
    assert "BROADCAST on 1 rank(s)" in top["message"]


def test_ranks_in_different_collectives_were_so_when_the_collectives_began() -> None:
    """The watchdog prints the mismatch ten minutes after the ranks entered their collectives (`ran for
    600041 milliseconds`): the mismatch was there then, at the failure's onset, no consequence of it."""
    rows = timeouts(600, ranks=range(1, 32)) + [ev("nccl_timeout", None, 600, "nccl", rank=0, job_id="7",
                                                   attrs={"seq": "100", "op": "BROADCAST", "timeout_ms": "600000"})]
    rows = [dict(r, attrs=r["attrs"].replace('"timeout_ms"', '"ran_ms": "600041", "timeout_ms"')) for r in rows]
    top = _top(rows)
    assert top["kind"] == "collective_mismatch" and top["probability"] >= 0.9, top
    assert not any("after the failure began" in e for e in top["evidence"]), top["evidence"]


@pytest.mark.parametrize("kind,attrs,message", [
    ("memory_ecc", {"class": "CE"}, "EDAC MC0: 1 CE memory read error"),
    ("mce", {"mce": "logged"}, "mce: [Hardware Error]: Machine check events logged"),
    ("mce", {"mce": "corrected"}, "mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 6: cc59dec000041152"),
])
def test_a_corrected_error_alone_is_no_verdict(store, kind: str, attrs: dict, message: str) -> None:
    """A corrected memory error (EDAC's CE, a machine check with MCi_STATUS.UC clear, or the notice that
    machine-check records were logged) minutes before a hang outscores the timeouts every rank reports,
    but it cannot fail a job (its cause is ``context``): it is listed as evidence, never the likeliest
    cause, and the verdict is undetermined."""
    _write(store, _job("7", -3600, 900, "FAILED") + timeouts(600) + inits()
           + [ev(kind, "gpu002", 300, attrs=attrs, message=message)])
    e = explain(store, "7")
    assert e.root_cause["kind"] != kind and e.root_cause["verdict"] == "undetermined", e.root_cause
    corrected = [c for c in e.candidates if c["kind"] == kind]
    assert corrected and corrected[0]["context"] and corrected[0]["probability"] == 0, e.candidates


def test_the_drivers_cleanup_after_a_fatal_xid_is_no_rival_diagnosis() -> None:
    """Xid 48 on gpu003, then Xid 45 (NVIDIA: "preemptive cleanup, due to previous errors": the driver tears
    down the killed process's channels; follow the other Xid): the cleanup is context, not the job's own
    fault splitting the verdict's probability."""
    rows = [ev("gpu_xid", "gpu003", 500, code=48, gpu="0000:3b:00", attrs={"category": "memory", "action": "reset_gpu"}),
            ev("gpu_xid", "gpu003", 501, code=45, gpu="0000:3b:00", attrs={"category": "driver", "action": "none"})]
    ranked = candidates(place_ranks(frame(rows + timeouts(600) + inits()), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["code"], top["node"]) == (48, "gpu003") and top["probability"] >= 0.9, ranked.head(3)
    assert ranked.filter(pl.col("code") == 45).get_column("context").all(), ranked


def test_a_line_with_no_time_of_its_own_is_no_consequence() -> None:
    """An unlabelled "CUDA out of memory" line with no stamp takes the next stamped line's time, the
    job's end: only a bound, so it is not weighed as coming after the failure began."""
    rows = [ev("cuda_oom", None, 890, "nccl", job_id="7", message="RuntimeError: CUDA out of memory.")]
    events = frame(rows + timeouts(600, ranks=range(8, 32)) + inits())
    events = events.with_columns((pl.col("kind") == "cuda_oom").alias("approx"))  # as run_events marks it
    top = candidates(place_ranks(events, NODES), RUN, load_causes()).row(0, named=True)
    assert top["kind"] == "cuda_oom" and not any("after the failure began" in e for e in top["evidence"]), top


def test_a_timeout_began_when_its_wait_did(store) -> None:
    """The watchdog prints its timeout ``ran for`` 600 s after the collective began: an OOM kill of a
    rank at that start is the onset, not an event 'long before the first symptom'."""
    watchdog = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=100, OpType=ALLREDUCE, Timeout(ms)=600000)"
    rows = [ev("nccl_timeout", None, 1200, "nccl", rank=r, job_id="7", message=f"[Rank {r}] {watchdog} ran for 600041 ms",
               attrs={"seq": "100", "op": "ALLREDUCE", "timeout_ms": "600000", "ran_ms": "600041"}) for r in range(8, 32)]
    _write(store, _job("7", -3600, 1300, "FAILED") + rows + inits()
           + [ev("oom_kill", "gpu001", 600, message="Out of memory: Killed process 4242 (python)")])
    e = explain(store, "7")
    assert e.onset is not None and abs((e.onset - T).total_seconds() - 600) < 1, e.onset
    assert e.root_cause["kind"] == "oom_kill" and e.root_cause["node"] == "gpu001", e.candidates[:2]
    assert not any("long before" in why for why in e.candidates[0]["evidence"]), e.candidates[0]


def test_the_epilog_check_fails_on_a_trusted_fault_with_no_xid_remedy(store) -> None:
    """A trusted uncorrectable memory error explains the job: the epilog's explain check FAILs with the
    policy's on_fail action (the kinds without an Xid remedy once made it raise)."""
    from observe.health.policy import load
    from observe.health.result import Status
    from observe.health.runner import run_checks

    ue = ev("memory_ecc", "gpu001", 0, route="system_file", attrs={"class": "UE"},
            message="EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0")
    _write(store, RESTART_7 + [ue])
    policy = load()
    [result] = run_checks(["explain"], policy, 60, {"job": "7", "store": str(store.root), "node": "gpu001"})
    assert result.status == Status.FAIL and result.action == policy.checks["explain"]["on_fail"], result


@pytest.mark.parametrize("fault_route, ended", [("system_file", False), ("syslog_file", True)])
def test_a_forged_recovery_ends_no_trusted_fault(store, fault_route: str, ended: bool) -> None:
    """A boot line in a syslog file (what `logger -t kernel 'Linux version ...'` writes) after the previous
    run's Xid: it ends an Xid that came the same untrusted way, never one the kernel's own log carried
    (the epilog acts on that one: a user must not hide it)."""
    boot = ev("kernel_boot", "gpu003", -2 * 3600, route="syslog_file", message="Linux version 6.1.0")
    xid = dict(XID48, route=fault_route)
    _write(store, _job("6", -4 * 3600, -3 * 3600 + 60, "FAILED") + [xid, boot] + RESTART_7)
    root = explain(store, "7").root_cause
    assert (root["kind"] == "gpu_xid") is not ended, root


@pytest.mark.parametrize("apart, switch", [(2, True), (15, False)])
def test_links_down_on_several_nodes_at_once_are_the_switch_they_share(store, tmp_path, apart: int, switch: bool) -> None:
    """A leaf switch failed: the mlx5 ports of gpu001-003 went down within seconds of each other (the
    kernel's lines as mlx5_core prints them) and the ranks lost their peers. One node's own link takes no
    other node's down: the verdict is the switch they share, no node, nothing to drain. The same links
    going down 15 s apart are no burst: each is its node's own."""
    from observe.ingest import ingest

    for i, node in enumerate(NODES[:3]):
        at = (T + timedelta(seconds=540 + i * apart)).isoformat()
        (tmp_path / f"{node}.log").write_text(f"{at} {node} kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN\n")
    _write(store, _job("7", -3600, 900, "FAILED") + inits() + timeouts(600)
           + [ev("nccl_net_error", None, 560, "nccl", rank=r, job_id="7") for r in (1, 9, 25)])
    ingest([str(p) for p in sorted(tmp_path.glob("*.log"))], store, workers=1)
    e = explain(store, "7")
    links = [c for c in e.candidates if c["kind"] == "ib_link_down" and c["node"]]
    assert len(links) == 3, e.candidates
    if switch:
        assert (e.root_cause["node"], e.root_cause["category"], e.root_cause["node_action"], e.root_cause["verdict"]) \
            == (None, "network", "none", "cause"), e.root_cause
        assert e.root_cause["confidence"] >= 0.9 and "gpu[001-003]" in e.root_cause["message"], e.root_cause
        assert e.root_cause["shared"] and any(x.startswith("ROOT CAUSE  (what the nodes share)") for x in report(e))
        assert all(any("2 other node(s) of the job within 10 s" in x for x in c["evidence"]) for c in links), links
    else:
        assert e.root_cause["node"] in NODES[:3] and all(c["node"] for c in e.candidates if c["kind"] == "ib_link_down")


def test_the_programs_refused_command_line_on_every_rank_is_the_jobs(store, tmp_path) -> None:
    """torchrun passed --local-rank to a script whose argparse does not take it: every rank printed
    argparse's usage and "main.py: error: unrecognized arguments" and exited 2. The job's own doing,
    confidently, nothing for a node (without the rule: no catalogued line, undetermined)."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text("".join(f"[rank{r}]: usage: main.py [-h] [--epochs EPOCHS]\n"
                           f"[rank{r}]: main.py: error: unrecognized arguments: --local-rank={r % 8}\n" for r in range(32)))
    _write(store, _job("7", -3600, 60, "FAILED", exit_code="2:0") + inits())
    ingest([str(out)], store, job="7", workers=1)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["category"], root["node_action"], root["verdict"]) == ("usage_error", "user", "none",
                                                                                     "cause"), root
    assert root["confidence"] >= 0.9, root


@pytest.mark.parametrize("lost", [True, False])
def test_a_rank_that_died_of_the_jobs_own_error_is_why_its_peers_lost_it(lost: bool) -> None:
    """A rank (its line carries no label) ran out of GPU memory; a minute later the other nodes' ranks lost
    their NCCL peer on gpu003 (or, without NCCL network errors, gpu003's ranks never reported the timeout the
    others did), and gpu003 logged nothing. That death is why, not gpu003's network or a hang there: the job's
    own OOM, confidently; the nodes whose ranks reported the loss only saw it."""
    boot = [ev("log", NODES[r // 8], None, "nccl", rank=r, job_id="7",
               message=f"NCCL INFO Bootstrap : Using ib0:10.0.0.{r // 8 + 1}<0>") for r in range(0, 32, 8)]
    oom = ev("cuda_oom", None, 500, "nccl", job_id="7",
             message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
                     "capacity of 79.15 GiB of which 1.02 GiB is free.")
    peers = [ev("nccl_net_error", None, 560 + r / 10, "nccl", rank=r, job_id="7", attrs={"peer": "10.0.0.3<1>"})
             for r in (1, 9, 25)] if lost else []
    waited = timeouts(600, ranks=range(32) if lost else [r for r in range(32) if r // 8 != 2])
    ranked = candidates(place_ranks(frame(inits() + boot + [oom] + peers + waited), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["kind"], top["category"], top["node_action"]) == ("cuda_oom", "user", "none"), ranked.head(4)
    assert top["probability"] >= 0.9, ranked.select("node", "kind", "probability", "evidence").head(4)
    if lost:  # its line names no node: it ran where the peers lost their ranks
        assert top["node"] == "gpu003" and not ranked.filter(pl.col("kind") == "nccl_peer_lost").height, ranked.head(4)
        saw = ranked.filter(pl.col("kind") == "nccl_net_error", pl.col("node") == "gpu001").row(0, named=True)
        assert any("lost their peer on gpu003, as other nodes' did" in x for x in saw["evidence"]), saw
    else:
        silent = ranked.filter(pl.col("node") == "gpu003", pl.col("kind") != "cuda_oom").row(0, named=True)
        assert any("died of the job's own error first" in x for x in silent["evidence"]), silent


@pytest.mark.parametrize("at, placed", [(540, True), (620, False)])
def test_an_unlabelled_ranks_gpu_error_ran_on_the_node_its_peers_lost(at: float, placed: bool) -> None:
    """A rank's "CUDA error: unknown error" (srun without -l: no node on the line), then the other nodes' ranks
    lost their peer on gpu003: the rank that died of the GPU error is the one they lost, so its GPU is gpu003's
    (without the placement: a GPU fault on no node against gpu003's network). A line printed after the loss may
    be a survivor's reaction: placed nowhere."""
    boot = [ev("log", NODES[r // 8], None, "nccl", rank=r, job_id="7",
               message=f"NCCL INFO Bootstrap : Using ib0:10.0.0.{r // 8 + 1}<0>") for r in range(0, 32, 8)]
    dead = ev("cuda_device_error", None, at, "nccl", job_id="7", message="RuntimeError: CUDA error: unknown error",
              attrs={"detail": "unknown error"})
    lost = [ev("nccl_net_error", NODES[r // 8], 560 + r / 10, "nccl", rank=r, job_id="7", attrs={"peer": "10.0.0.3<1>"})
            for r in (1, 9, 25)]
    ranked = candidates(place_ranks(frame(inits() + boot + [dead] + lost + timeouts(600)), NODES), RUN, load_causes())
    gpu = ranked.filter(pl.col("kind") == "cuda_device_error").row(0, named=True)
    assert (gpu["node"] == "gpu003") is placed, ranked.select("node", "kind", "probability", "evidence").head(4)
    if placed:
        assert ranked.row(0, named=True)["kind"] == "cuda_device_error" and gpu["probability"] >= 0.9, gpu
        assert any("it ran on gpu003, whose ranks the others lost" in x for x in gpu["evidence"]), gpu
        assert not ranked.filter(pl.col("kind") == "nccl_peer_lost").height, ranked


def test_a_bare_assert_that_ended_a_rank_is_why_its_peers_lost_it(store, tmp_path) -> None:
    """An unlabelled rank failed a bare ``assert`` (its traceback ends with the name alone, no message), and the
    other nodes' ranks then found their socket to gpu003 closed; the output carries no times. The job's own
    error explains the lost peer (without the bare-name rule: no exception, gpu003's network at 0.96)."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text("Traceback (most recent call last):\n  File \"/app/train.py\", line 80, in <module>\n"
                   "    assert batch.shape[0] == cfg.micro_batch\nAssertionError\n"
                   + "".join(f"{n}:4242:4300 [1] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote "
                             f"peer gpu003<{40000 + i}>\n" for i, n in enumerate(("gpu001", "gpu002", "gpu004"))))
    _write(store, _job("7", -3600, 60, "FAILED") + inits())
    ingest([str(out)], store, job="7", workers=1)
    root = explain(store, "7").root_cause
    assert (root["kind"], root["category"], root["node_action"], root["verdict"]) == ("python_exception", "user", "none",
                                                                                     "cause"), root


@pytest.mark.parametrize("agents, node", [(True, "gpu003"), (False, "gpu001")])
def test_srun_labels_torchruns_agents_not_ranks(store, tmp_path, agents: bool, node: str) -> None:
    """srun -l torchrun: srun labels each task's lines, and each task is a node's torchrun agent (its
    "failed (exitcode: ...)" line says so); "2: RuntimeError: CUDA error: uncorrectable ECC ..." came from the
    third node, not from rank 2 on the first. Under srun -l python the tasks are the ranks: rank 2 is on gpu001."""
    from observe.ingest import ingest

    agent = "".join(f"{t}: E1122 12:05:01.000000 139783066310464 torch/distributed/elastic/multiprocessing/api.py:833] failed "
                    f"(exitcode: 1) local_rank: 0 (pid: 12{t}) of binary: /usr/bin/python\n" for t in range(4))
    out = tmp_path / "slurm-7.out"
    out.write_text("2: RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + (agent if agents else ""))
    _write(store, _job("7", -3600, 900, "FAILED", nodes="gpu[001-004]") + timeouts(600, ranks=range(16)))
    ingest([str(out)], store, job="7", workers=1)
    hw = next(c for c in explain(store, "7").candidates if c["kind"] == "cuda_hw_error")
    assert hw["node"] == node, hw


def test_a_users_flood_of_link_downs_costs_what_its_lines_cost() -> None:
    """20,000 link-down candidates (a user's logger lines, each with its own made-up PCI id) are weighed in one
    pass over them sorted, not against each other (a pairwise join of 4*10^8 rows ran explain out of memory)."""
    from queries.explain import _at_once
    n = 20_000
    groups = pl.DataFrame({"kind": ["ib_link_down"] * n, "node": [NODES[i % 4] for i in range(n)],
                           "ts": [T + timedelta(seconds=i) for i in range(n)], "shared": ["a switch"] * n,
                           "symptom": [False] * n, "context": [False] * n, "_flap": [False] * n})
    got = _at_once(groups, timedelta(seconds=10))
    assert got.height == n and got.get_column("_others").max() == 3


def test_the_switch_rests_on_a_trusted_route_only_where_two_nodes_lines_do() -> None:
    """gpu002's link went down (its kernel's line, trusted); a user wrote the same line through logger on
    gpu001 and gpu004 within seconds: the switch is a candidate, but not one a trusted route claims."""
    rows = [ev("ib_link_down", "gpu002", 540, route="kmsg")] + [ev("ib_link_down", n, 542, route="syslog_file")
                                                               for n in ("gpu001", "gpu004")]
    ranked = candidates(place_ranks(frame(rows + timeouts(600)), NODES), RUN, load_causes())
    switch = ranked.filter(pl.col("shared")).row(0, named=True)
    assert switch["node"] is None and not switch["trusted"], switch


def test_a_world_no_node_could_run_is_no_world() -> None:
    """NCCL's init line says nranks 3000000000 (a job prints what it likes): no world of that size is built."""
    from queries.ranks import expected_ranks
    rows = [ev("nccl_comm_init", NODES[r], None, "nccl", rank=None, job_id="7", attrs={"nranks": "3000000000"})
            for r in range(4)]  # their ranks taken (srun's task labels): the world is what sizes the ranks
    assert expected_ranks(frame(rows + timeouts(600, ranks=range(4))), NODES, "7").height <= 4 * 256


def test_a_line_under_srun_torchrun_keeps_the_rank_it_states(store, tmp_path) -> None:
    """srun -l torchrun: "1: [E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught ..." is task 1's (the second
    node's), and its rank is the one the watchdog states, even where it equals the task: every rank reported the
    timeout, so none fell silent."""
    from observe.ingest import ingest

    out = tmp_path / "slurm-7.out"
    out.write_text("".join(f"{r // 4}: [E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
                           "WorkNCCL(SeqNum=100, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600041 milliseconds before "
                           "timing out.\n" for r in range(16))
                   + "".join(f"{t}: E1122 12:05:01.000000 139783066310464 torch/distributed/elastic/multiprocessing/api.py:833] "
                             f"failed (exitcode: 1) local_rank: 0 (pid: 12{t}) of binary: /usr/bin/python\n" for t in range(4)))
    _write(store, _job("7", -3600, 900, "FAILED", nodes="gpu[001-004]"))
    ingest([str(out)], store, job="7", workers=1)
    e = explain(store, "7")
    assert not [c for c in e.candidates if "never reported the timeout" in c["message"]], e.candidates[:3]
