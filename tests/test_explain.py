"""explain: ranking of root causes on hand-built incidents (table-driven), job runs, the CLI."""
from __future__ import annotations

import json
import re
import xml.dom.minidom
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.frames import attrs_json
from observe.schema import conform
from queries.causes import load_causes
from queries.explain import candidates, explain, run_events
from queries.jobs import Run, failed_run, job_runs
from queries.ranks import place_ranks
from queries.report import report

T = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]


def ev(kind: str, node: str | None = None, at: float = 0.0, source: str = "kernel", **fields) -> dict:
    """One event ``at`` seconds after T; ``attrs`` given as a dict."""
    attrs = fields.pop("attrs", None)
    return {"ts": T + timedelta(seconds=at) if at is not None else None, "node": node, "kind": kind,
            "source": source, "severity": "err", "message": fields.pop("message", kind),
            "attrs": json.dumps(attrs) if attrs else None, "file_id": "f", "offset": len(kind) + int((at or 0) * 10),
            **fields}


def frame(rows: list[dict]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, infer_schema_length=None))


def timeouts(at: float, ranks: range = range(32), seq: int = 100, lag: dict[int, int] | None = None) -> list[dict]:
    """Every rank's watchdog timeout (rank r on NODES[r // 8]); ``lag`` gives some ranks another SeqNum."""
    lag = lag or {}
    return [ev("nccl_timeout", None, at + r / 100, "nccl", rank=r, job_id="7",
               attrs={"seq": str(lag.get(r, seq)), "op": "ALLREDUCE", "timeout_ms": "600000"}) for r in ranks]


def inits(ranks: range = range(32)) -> list[dict]:
    return [ev("nccl_comm_init", NODES[r // 8], None, "nccl", rank=r, job_id="7", attrs={"nranks": "32"})
            for r in ranks]


RUN = Run("7", T - timedelta(hours=1), T + timedelta(minutes=15), "FAILED", "1:0", NODES)

CASES = {
    # name: (events, expected node, expected kind, expected category)
    "fatal xid then timeouts everywhere": (
        [ev("gpu_xid", "gpu003", 0, code=79, attrs={"category": "gpu", "action": "drain_node"})] + timeouts(600),
        "gpu003", "gpu_xid", "gpu"),
    "skewed clock: the xid logged after the first timeout": (
        [ev("gpu_xid", "gpu003", 601, code=79, attrs={"category": "gpu"})] + timeouts(600),
        "gpu003", "gpu_xid", "gpu"),
    "application xid is the job's fault": (
        [ev("gpu_xid", "gpu002", 0, code=13, attrs={"category": "application"}),
         ev("python_exception", None, 1, "nccl", rank=9, job_id="7")],
        "gpu002", "gpu_xid", "user"),
    "ib link down on one node": (
        [ev("ib_link_down", "gpu004", 0)] + [ev("nccl_net_error", None, 5, "nccl", rank=r, job_id="7") for r in (25, 3)],
        "gpu004", "ib_link_down", "network"),
    "oom kill beats the srun report": (
        [ev("oom_kill", "gpu001", 0), ev("slurm_oom", "gpu001", 2, "slurm", job_id="7")],
        "gpu001", "oom_kill", "memory"),
    "hung rank: its collective lags": (
        timeouts(600, lag={13: 99}), "gpu002", "nccl_timeout", "software"),
    "silent node: slurmctld says not responding": (
        inits() + [ev("slurm_node_not_responding", "gpu004", 0, "slurm")] + timeouts(600, ranks=range(24)),
        "gpu004", "slurm_node_not_responding", "node"),
    "user error without hardware": (
        [ev("python_exception", None, 0, "nccl", rank=17, job_id="7"), ev("memory_ecc", "gpu001", -600, attrs={"class": "CE"})],
        "gpu003", "python_exception", "user"),
    "an earlier job's oom on the node is not this job's cause": (
        [ev("oom_kill", "gpu001", -4000, job_id="6"), ev("oom_kill", "gpu002", -3500),
         ev("python_exception", None, 0, "nccl", rank=30, job_id="7")],
        "gpu004", "python_exception", "user"),
    "a corrected PCIe error minutes before does not outrank the exception a rank raised": (
        [ev("pcie_aer", "gpu001", 420, attrs={"aer": "corrected"}),
         ev("python_exception", None, 560, "nccl", rank=9, job_id="7")] + timeouts(600),
        "gpu002", "python_exception", "user"),
    "a corrected PCIe error on a healthy node does not outrank an OOM kill on another": (
        [ev("pcie_aer", "gpu001", 540, attrs={"aer": "corrected"}), ev("oom_kill", "gpu002", 560)] + timeouts(600),
        "gpu002", "oom_kill", "memory"),
    "an uncorrected fatal PCIe error is the node's": (
        [ev("pcie_aer", "gpu001", 540, attrs={"aer": "fatal"}), ev("python_exception", None, 560, "nccl", rank=9, job_id="7")]
        + timeouts(600), "gpu001", "pcie_aer", "gpu"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_root_cause(name: str) -> None:
    rows, node, kind, category = CASES[name]
    events = place_ranks(frame(rows), NODES)
    ranked = candidates(events, RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["category"]) == (node, kind, category), ranked.head(3)
    if category in ("user", "software"):  # the job's own fault, or a hang: nothing calls for a drain
        assert top["node_action"] != "drain", top


def test_place_ranks_prefers_nccl_init_over_block_order() -> None:
    rows = [ev("nccl_comm_init", "gpu004", None, "nccl", rank=0, attrs={"nranks": "16"}),
            ev("python_exception", None, 0, "nccl", rank=0), ev("python_exception", None, 0, "nccl", rank=9)]
    placed = place_ranks(frame(rows), NODES).filter(pl.col("kind") == "python_exception")
    # rank 0 where NCCL saw it; rank 9 by block order with 16 ranks over 4 nodes (4 each)
    assert placed.get_column("node").to_list() == ["gpu004", "gpu003"]


def test_job_runs_split_a_requeued_job() -> None:
    attrs = attrs_json([("nodes", pl.lit("gpu[001-002]")), ("state", pl.lit("NODE_FAIL"))])
    rows = [ev("slurm_job_start", "ctl1", 0, "slurm", job_id="7", attrs={"nodes": "gpu[001-002]"}),
            ev("slurm_job_requeue", "ctl1", 600, "slurm", job_id="7"),
            ev("slurm_job_end", "ctl1", 601, "slurm", job_id="7", attrs={"state": "NODE_FAIL", "nodes": "gpu[001-002]"}),
            ev("slurm_job_start", "ctl1", 900, "slurm", job_id="7", attrs={"nodes": "gpu[003-004]"}),
            ev("slurm_job_end", "ctl1", 1900, "slurm", job_id="7", attrs={"state": "COMPLETED"})]
    assert attrs is not None
    runs = job_runs(frame(rows).lazy(), "7")
    assert [(r.nodes, r.state) for r in runs] == [(["gpu001", "gpu002"], "NODE_FAIL"), (["gpu003", "gpu004"], "COMPLETED")]
    assert failed_run(runs).state == "NODE_FAIL"
    assert failed_run(runs, at=T + timedelta(seconds=1000)).nodes == ["gpu003", "gpu004"]


def test_explain_end_to_end_and_cli(store, tmp_path) -> None:
    rows = ([ev("slurm_job_start", "ctl1", -3600, "slurm", job_id="7", attrs={"nodes": "gpu[001-004]"}),
             ev("slurm_job_end", "ctl1", 900, "slurm", job_id="7", attrs={"state": "FAILED", "exit_code": "1:0"}),
             ev("gpu_xid", "gpu002", 0, code=79, gpu="0000:3b:00", attrs={"category": "gpu"})]
            + timeouts(600) + inits())
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows))
    result = explain(store, "7")
    assert (result.root_cause["node"], result.root_cause["code"], result.state) == ("gpu002", 79, "FAILED")
    assert result.root_cause["confidence"] >= 0.8
    assert any(t["kind"] == "gpu_xid" for t in result.timeline)

    runner = CliRunner()
    out = runner.invoke(app, ["explain", "7", "--store", str(store.root), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert {"job_id", "state", "nodes", "root_cause", "candidates", "timeline"} <= set(doc)
    assert set(doc["root_cause"]) >= {"node", "kind", "code", "ts", "message", "category", "action", "confidence"}
    text = runner.invoke(app, ["explain", "7", "--store", str(store.root)])
    assert text.exit_code == 0 and text.output.splitlines()[2].startswith("ROOT CAUSE  gpu002  GPU 0000:3b:00")
    page = tmp_path / "job7.html"
    drawn = runner.invoke(app, ["explain", "7", "--store", str(store.root), "--plot", str(page)])
    assert drawn.exit_code == 0, drawn.output
    svg = re.search(r"<svg.*</svg>", page.read_text(), re.S).group(0)
    assert xml.dom.minidom.parseString(svg).getElementsByTagName("circle").length >= 3  # marks + the ring
    missing = runner.invoke(app, ["explain", "8", "--store", str(store.root)])
    assert missing.exit_code == 2 and missing.output.count("\n") == 1 and "no Slurm record" in missing.output


def test_completed_job_has_no_root_cause(store) -> None:
    rows = [ev("slurm_job_start", "ctl1", -600, "slurm", job_id="9", attrs={"nodes": "gpu001"}),
            ev("slurm_job_end", "ctl1", 600, "slurm", job_id="9", attrs={"state": "COMPLETED", "exit_code": "0:0"}),
            ev("ib_link_down", "gpu001", 0)]
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows))
    result = explain(store, "9")
    assert result.state == "COMPLETED" and result.root_cause is None
    assert result.candidates and result.candidates[0]["kind"] == "ib_link_down"  # kept as context


def test_state_from_slurmctld_lines_alone() -> None:
    rows = [ev("slurm_job_start", "ctl1", 0, "slurm", job_id="5", attrs={"nodes": "gpu[001-002]"}),
            ev("slurm_job_end", "ctl1", 60, "slurm", job_id="5", code=1, attrs={"status": "WEXITSTATUS"})]
    (run,) = job_runs(frame(rows).lazy(), "5")
    assert (run.state, run.exit_code, run.nodes) == ("FAILED", "1", ["gpu001", "gpu002"])


def test_job_index_bounds_the_search_and_a_stale_one_is_not_wrong(store) -> None:
    from queries import jobs

    day = 86400
    rows = [ev("slurm_job_start", "ctl1", 0, "slurm", job_id="3", attrs={"nodes": "gpu001"}),
            ev("slurm_job_end", "ctl1", 600, "slurm", job_id="3", attrs={"state": "NODE_FAIL"})]
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows))
    assert jobs.write_index(store) == 1
    first, last = jobs.span(store, "3")
    assert (first, last) == (T, T + timedelta(seconds=600))
    assert jobs.span(store, "4") == (None, None)
    # a job the index has never seen is still found (by scanning everything)
    later = [ev("slurm_job_start", "ctl1", 3 * day, "slurm", job_id="4", attrs={"nodes": "gpu002"}),
             ev("slurm_job_end", "ctl1", 3 * day + 60, "slurm", job_id="4", attrs={"state": "FAILED"})]
    for i, row in enumerate(later):
        row["offset"] = 10 + i
    store.write(frame(later))
    assert explain(store, "4").nodes == ["gpu002"]


def test_a_requeued_jobs_earlier_output_stays_out(store) -> None:
    """Run 1 placed rank 0 on gpu009; run 2 (which failed) on gpu001: the exception is gpu001's."""
    out = [ev("nccl_comm_init", "gpu009", None, "nccl", rank=0, job_id="8", attrs={"nranks": "8"}),
           ev("log", None, -900, "nccl", job_id="8"),
           ev("nccl_comm_init", "gpu001", None, "nccl", rank=0, job_id="8", attrs={"nranks": "8"}),
           ev("python_exception", None, None, "nccl", rank=0, job_id="8"),
           ev("log", None, 30, "nccl", job_id="8")]
    for i, row in enumerate(out):
        row["offset"], row["file_id"] = i, "slurm-8.out"
    records = [ev("slurm_job_start", "ctl1", -1000, "slurm", job_id="8", attrs={"nodes": "gpu009"}),
               ev("slurm_job_requeue", "ctl1", -800, "slurm", job_id="8"),
               ev("slurm_job_start", "ctl1", -600, "slurm", job_id="8", attrs={"nodes": "gpu001"}),
               ev("slurm_job_end", "ctl1", 60, "slurm", job_id="8", attrs={"state": "FAILED"})]
    for i, row in enumerate(records):
        row["offset"], row["file_id"] = i, "slurmctld"
    store.write(frame(out + records))
    result = explain(store, "8")
    assert result.nodes == ["gpu001"]
    assert (result.root_cause["node"], result.root_cause["kind"]) == ("gpu001", "python_exception")


def test_job_output_node_claims_and_untrusted_verdicts(store) -> None:
    """A job's output names its nodes only as claims (attrs.claimed_node): explain takes a claim of
    one of the job's nodes and leaves another node's alone; a verdict resting on lines a user sent
    says so (``trusted``: false), which the epilog's drain path requires."""
    claims = [{**row, "node": None, "route": "job_output",
               "attrs": json.dumps({"nranks": "32", "claimed_node": "gpu099" if row["rank"] == 5 else row["node"]})}
              for row in inits()]
    rows = ([ev("slurm_job_start", "ctl1", -3600, "slurm", job_id="7", attrs={"nodes": "gpu[001-004]"}),
             ev("slurm_job_end", "ctl1", 900, "slurm", job_id="7", attrs={"state": "FAILED", "exit_code": "1:0"}),
             {**ev("gpu_xid", "gpu002", 0, code=79, gpu="0000:3b:00", attrs={"category": "gpu"}), "route": "journal_user"}]
            + timeouts(600) + claims)
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows))
    run = job_runs(store.scan(), "7")[0]
    events = run_events(store, run, timedelta(minutes=15), timedelta(minutes=10))
    placed = dict(events.filter(pl.col("kind") == "nccl_comm_init").select("rank", "node").iter_rows())
    assert placed[5] is None and all(placed[r] == NODES[r // 8] for r in range(32) if r != 5)
    root = explain(store, "7").root_cause
    assert (root["node"], root["kind"], root["trusted"]) == ("gpu002", "gpu_xid", False)


def test_application_xids_on_every_node_are_the_jobs_fault_with_nothing_for_the_node() -> None:
    """Xid 13 on every node at once: the program faulted the GPUs; category user, no drain."""
    rows = [ev("gpu_xid", n, i, code=13, attrs={"category": "application", "action": "restart_app"})
            for i, n in enumerate(NODES)] + timeouts(600)
    top = candidates(place_ranks(frame(rows), NODES), RUN, load_causes()).row(0, named=True)
    assert (top["kind"], top["category"]) == ("gpu_xid", "user")
    assert top["action"].startswith("none for the node") and top["node_action"] == "none"


def test_what_a_node_logs_while_its_jobs_succeed_weighs_less(store) -> None:
    """Machine checks logged on gpu001 during six earlier jobs that completed are background there:
    the failed job's own exception wins, and the evidence says why."""
    rows = []
    for k in range(6):  # earlier jobs on gpu001, each completed with an MCE logged while it ran
        start = -86400 * (k + 1)
        rows += [ev("slurm_job_start", "ctl1", start, "slurm", job_id=f"10{k}", attrs={"nodes": "gpu001"}),
                 ev("mce", "gpu001", start + 600, message=f"mce {k}"),
                 ev("slurm_job_end", "ctl1", start + 3600, "slurm", job_id=f"10{k}", attrs={"state": "COMPLETED"})]
    rows += [ev("slurm_job_start", "ctl1", -3600, "slurm", job_id="7", attrs={"nodes": "gpu[001-004]"}),
             ev("mce", "gpu001", 540, message="mce now"),
             ev("python_exception", None, 560, "nccl", rank=17, job_id="7"),
             ev("slurm_job_end", "ctl1", 900, "slurm", job_id="7", attrs={"state": "FAILED", "exit_code": "1:0"})]
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows + timeouts(600) + inits()))
    from queries.jobs import write_index

    before = explain(store, "7").root_cause  # no job index yet: nothing known of earlier jobs
    assert before["kind"] == "mce"
    write_index(store)
    result = explain(store, "7")
    assert (result.root_cause["kind"], result.root_cause["category"]) == ("python_exception", "user")
    mce = next(c for c in result.candidates if c["kind"] == "mce")
    assert "x0.03 also seen on this node during 6 successful job(s)" in mce["evidence"]
    assert any(line.strip().startswith("why: ") and "successful job(s)" in line for line in report(result))


def test_the_nodes_that_logged_nothing_are_one_hostlist() -> None:
    """Three of four nodes logged no kernel or syslog line: one MISSING line naming gpu[002-004], not three."""
    from queries.explain import missing

    heard = frame([ev("log", "gpu001", 100, "syslog"), ev("nccl_timeout", None, 600, "nccl", rank=9, job_id="7")])
    assert missing(heard, RUN) == ["no kernel or syslog line from gpu[002-004] in the window read"]


def test_weak_evidence_is_undetermined_and_says_what_is_missing(store) -> None:
    """Two rivals on two nodes scoring alike, and a node that logged nothing: the verdict is
    undetermined, the report says so, and names the node whose logs are missing."""
    rows = [ev("slurm_job_start", "ctl1", -3600, "slurm", job_id="7", attrs={"nodes": "gpu[001-004]"}),
            ev("slurm_job_end", "ctl1", 900, "slurm", job_id="7", attrs={"state": "FAILED", "exit_code": "1:0"}),
            ev("ib_link_down", "gpu001", 540), ev("ib_link_down", "gpu002", 552),  # not at once: no switch
            ev("nccl_net_error", None, 560, "nccl", rank=3, job_id="7"),
            ev("log", "gpu003", 100, "syslog")]
    for i, row in enumerate(rows):
        row["offset"] = i
    store.write(frame(rows + timeouts(600)))
    result = explain(store, "7")
    assert result.root_cause["verdict"] == "undetermined" and result.root_cause["confidence"] <= 0.6  # rounded
    text = report(result)
    assert any(line.startswith("UNDETERMINED") for line in text)
    assert result.missing == ["no kernel or syslog line from gpu004 in the window read"]
    assert "MISSING     no kernel or syslog line from gpu004 in the window read" in text
    clear = explain(store, "7").to_dict()
    assert clear["missing"] and clear["root_cause"]["verdict"] == "undetermined"


@pytest.mark.parametrize("peer", ["10.0.0.4<43521>", "gpu004-ib.cluster.local<51159>"])
def test_the_peer_nccl_errors_name_is_placed_on_its_node(peer: str) -> None:
    """gpu004 went quiet in its kernel log; ranks elsewhere lost their NCCL peer, which they name by
    the address gpu004's own ranks printed at init (or by its host name): gpu004 is the candidate."""
    boot = [ev("log", NODES[r // 8], None, "nccl", rank=r, job_id="7",
               message=f"NCCL INFO Bootstrap : Using [0]ib0:10.0.0.{r // 8 + 1}<0>") for r in range(0, 32, 8)]
    lost = [ev("nccl_net_error", None, 590 + r / 10, "nccl", rank=r, job_id="7",
               attrs={"peer": peer}) for r in (1, 9, 17)]
    ranked = candidates(place_ranks(frame(inits() + boot + lost + timeouts(600)), NODES), RUN, load_causes())
    top = ranked.row(0, named=True)
    assert (top["node"], top["kind"], top["category"], top["node_action"]) == ("gpu004", "nccl_peer_lost", "network", "watch")
    assert "3 rank(s) lost their NCCL peer on gpu004" in top["message"] and top["evidence"]


def test_a_lost_peers_own_fault_stays_the_verdict_with_the_peers_as_evidence() -> None:
    """When the node the ranks lost logged its own fault (a panic), that fault is the verdict, and
    the peers' errors count for it."""
    boot = [ev("log", NODES[r // 8], None, "nccl", rank=r, job_id="7",
               message=f"NCCL INFO Bootstrap : Using ib0:10.0.0.{r // 8 + 1}<0>") for r in range(0, 32, 8)]
    lost = [ev("nccl_net_error", None, 590 + r / 10, "nccl", rank=r, job_id="7", attrs={"peer": "10.0.0.4<1>"})
            for r in (1, 9, 17)]
    rows = inits() + boot + lost + timeouts(600) + [ev("kernel_panic", "gpu004", 585)]
    top = candidates(place_ranks(frame(rows), NODES), RUN, load_causes()).row(0, named=True)
    assert (top["node"], top["kind"]) == ("gpu004", "kernel_panic")
    assert "x3.0 other ranks' NCCL errors name this node as the peer they lost" in top["evidence"]


def test_one_silent_rank_of_eight_names_its_node() -> None:
    """31 of 32 ranks print the watchdog's timeout; rank 19 (gpu003, the fourth of its node's eight) prints nothing:
    one silent rank is enough to point at its node (a single hung process, a GPU that stopped answering)."""
    ranked = candidates(place_ranks(frame(inits() + timeouts(600, ranks=[r for r in range(32) if r != 19])), NODES),
                        RUN, load_causes())
    silent = ranked.filter(pl.col("message").str.contains("never reported")).row(0, named=True)
    assert (silent["node"], silent["rank"]) == ("gpu003", 19), ranked.head(3)
    assert "1 rank(s) on gpu003 never reported the timeout that 31 other ranks reported" == silent["message"]


def test_a_line_without_a_time_is_shown_after_the_stamped_line_before_it(store) -> None:
    """A job's output: a stamped step log at -600 s, then an exception with no time of its own and nothing stamped
    after it; the job ended at +60 s. The timeline shows the exception at -600 s, marked as printed after then
    (``approx``; ``~`` in text), where the user reading the file sees it; the model still weighs it at the latest
    time it may have had (the job's end), so it is never taken for earlier than it may have been."""
    out = [ev("log", None, -600, "nccl", job_id="9", message="step 4200 loss 1.93"),
           ev("python_exception", None, None, "nccl", rank=0, job_id="9",
              message="RuntimeError: CUDA error: an illegal memory access was encountered")]
    for i, row in enumerate(out):
        row["offset"], row["file_id"] = i, "slurm-9.out"
    records = [ev("slurm_job_start", "ctl1", -1000, "slurm", job_id="9", attrs={"nodes": "gpu001"}),
               ev("slurm_job_end", "ctl1", 60, "slurm", job_id="9", attrs={"state": "FAILED"})]
    for i, row in enumerate(records):
        row["offset"], row["file_id"] = i, "slurmctld"
    store.write(frame(out + records))
    result = explain(store, "9")
    [shown] = [t for t in result.timeline if t["kind"] == "python_exception"]
    assert shown["ts"] == T - timedelta(seconds=600) and shown["approx"] is True
    [weighed] = [c for c in result.candidates if c["kind"] == "python_exception"]
    assert weighed["ts"] == T + timedelta(seconds=60)
    text = "\n".join(report(result))
    assert re.search(r"11-22 11:50:00~ .*python_exception", text), text
