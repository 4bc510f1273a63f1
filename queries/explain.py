"""Why did job N fail: the job's run (nodes, times, state), every event on its nodes around it, and
candidate root causes ranked by how probable the evidence makes them (the model in ``causes.toml``).

The ranking separates causes from symptoms: what every rank reports once a collective hangs (NCCL
timeouts, aborts) marks the onset of the failure; a hardware or kernel event on one node shortly
before it is the likely cause. Ranks whose collectives stalled behind the others (PyTorch watchdog
sequence numbers) and ranks that went silent point at their node when no event does. Clock skew up to
``skew_s`` seconds between nodes is tolerated in every comparison of times.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import polars as pl

from observe import provenance, sessions
from observe.frames import merge_attrs
from observe.hostlists import compact_nodes
from observe.store import Store
from observe.store.copy_marks import stale
from queries import base_rate, ib_retry, jobs, node_past, ranks
from queries.causes import Causes, load_causes
from queries.jobs import Run, failed_run, job_runs
from queries.search import search


class ExplainError(ValueError):
    """The job cannot be explained (no Slurm record of it); the message is one line."""


@dataclass
class Explanation:
    job_id: str
    state: str | None
    exit_code: str | None
    nodes: list[str]
    start: datetime | None
    end: datetime | None
    root_cause: dict | None
    candidates: list[dict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # evidence the store lacks (a node's logs in the window)
    onset: datetime | None = None  # when the failure began (its first symptom)
    unclassified: list[dict] = field(default_factory=list)  # error-looking lines no catalogued kind covers
    # the fault that takes a node out on the lines no user can write alone (:func:`node_fault`), where the root cause
    # (which weighs what users write, and whatever else failed the job) is no drain for it: what a node is drained for
    node_fault: dict | None = None

    def to_dict(self) -> dict:
        """Plain JSON-able dict (times as ISO 8601 strings)."""
        def conv(v):
            if isinstance(v, datetime):
                return v.isoformat()
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, float) and math.isnan(v):
                return None
            return v
        return conv(asdict(self))


# ------------------------------------------------------------------------------------- the job


# ------------------------------------------------------------------------------------- ranking


def candidates(events: pl.DataFrame, run: Run, causes: Causes, succeeded_with: base_rate.BaseRates | None = None
               ) -> pl.DataFrame:
    """Candidate root causes, best first: one row per (node, kind, code, gpu) with its score and the
    evidence for and against it (``evidence``: each scoring term that applied, its points first).

    ``events`` are the run's events with ranks placed on nodes (see :func:`place_ranks`);
    ``succeeded_with``: how many successful jobs the same event showed during, on the same node and
    fleet-wide (:func:`queries.base_rate.succeeded_with`): what healthy nodes log anyway.
    """
    sc = causes.scoring
    skew = timedelta(seconds=sc["skew_s"])
    # times placed from neighbouring lines (see run_events); the node's past (see _past)
    events = events.with_columns(pl.col(flag).fill_null(False) if flag in events.columns else pl.lit(False).alias(flag)
                                 for flag in ("approx", "past"))
    ev = causes.annotate(_traceback_ends(events.filter(pl.col("job_id").is_null() | (pl.col("job_id") == run.job_id))))
    ev = ev.filter(~pl.col("past") | (pl.col("node_action") == "drain"))  # of the past, only what takes a node out
    # a cause's line printed by a timeout: what it reports began its wait before (a symptom's wait is the onset)
    ev = ev.with_columns(*_cgroup(run.job_id, causes), pl.when(~pl.col("symptom")).then(_waited(ev)).alias("_waited"),
                         _everywhere(ev, run, timedelta(seconds=sc["late_s"])))
    if run.end is not None:
        ev = ev.filter(pl.col("ts").is_null() | (pl.col("ts") <= run.end + timedelta(minutes=10)))
    onset = _onset(ev, run)
    ran = max(0.0, (onset - run.start).total_seconds()) if onset is not None and run.start is not None else None
    if ran is not None and ran > sc["arrival_s"]:  # the run found its nodes working, as any run that long would
        # have: what they logged before it started had ended (read from their past or in the window before the start)
        before = (pl.col("ts") < _lit(run.start) - skew).fill_null(False)
        ev = ev.with_columns((pl.col("context") | pl.col("past") | before).alias("context"))
    if run.start is not None:  # a process that died before the run began was not the run's (an earlier job's OOM kill)
        gone = ((pl.col("ts") < _lit(run.start) - skew) & (pl.col("node_action") == "none") & ~pl.col("past")
                & pl.col("job_id").is_null()).fill_null(False)
        ev = ev.with_columns((pl.col("context") | gone).alias("context"))
    if run.end is not None:  # a line logged once the run was over (its detector's lag and wait taken back) cannot have failed it
        began = (pl.col("ts") - pl.duration(seconds=pl.col("lag_s").fill_null(0.0))
                 - pl.duration(milliseconds=pl.col("_waited").fill_null(0)))
        over = (began > _lit(run.end) + timedelta(seconds=sc["after_end_s"])).fill_null(False)
        ev = ev.with_columns((pl.col("context") | over).alias("context"))
    # a link back within NCCL's IB retries cannot fail a job: context, before "what the node logged" is decided
    own = events.filter(pl.col("job_id") == run.job_id)
    rides_out = ib_retry.retry_span(own.filter(pl.col("source") == "nccl"))
    flap_within = rides_out or timedelta(seconds=sc["flap_s"])
    ev = _flapped(ev, events, flap_within, run.start - skew if run.start else None)
    ev = ev.with_columns((pl.col("context") | pl.col("_flap")).alias("context"))
    # the peer other ranks lost, the ranks that stalled or fell silent: evidence for what their node logged
    # (an OOM kill of a rank, a peer's panic), else candidates of their own
    lost = ranks.lost_peers(events, run, sc)
    first = ranks.first_failed(own, skew, run.nodes)
    ev, placed_why = _placed(ev, lost, first, run.job_id, skew)
    stalled = ranks.stalls(events, run, sc)
    # a node whose ranks were alive and as far on as any while others' stalled or fell silent was working when the job
    # hung: a fault from its past did not leave it broken for this run
    alive = ranks.in_step(events) if stalled.filter(pl.col("node").is_not_null()).height else []
    worked = pl.col("past") & pl.col("node").is_in(alive)
    ev = ev.with_columns((pl.col("context") | worked).alias("context"), worked.alias("_worked"))
    # a node "logged" what could have stalled its ranks: not a line the job's own output contradicts (a link down
    # with no NCCL network error from any rank: had it cut the ranks off, NCCL would have said so)
    seen = own.get_column("kind").unique().to_list() if own.filter(pl.col("source") == "nccl").height else None
    unsaid = (pl.col("needs").list.len() > 0) & ~pl.col("needs").list.eval(pl.element().is_in(seen or [])).list.any()
    logged = list(set(ev.filter(~pl.col("symptom"), ~pl.col("context"), pl.col("_cg_mine") | pl.col("_cg").is_null(),
                                ~unsaid if seen is not None else pl.lit(True)).get_column("node").drop_nulls()))
    stuck = stalled.filter(pl.col("node").is_in(logged)).get_column("node").drop_nulls().unique().to_list()
    elsewhere = ~pl.col("node").is_in(logged).fill_null(False)
    derived = pl.concat([stalled.filter(elsewhere), lost.filter(elsewhere)], how="diagonal_relaxed").with_columns(
        pl.lit(True).alias("_derived"))
    if ev.is_empty() and not derived.height:
        return ranks.empty()
    # repeats of one event close together are one candidate; the same event an hour apart is two, and a link that
    # went down and came back (a flap) is over: a later outage of that link is an episode of its own
    same = ["node", "kind", "code", "gpu", "cause_id", "_flap"]
    episode = sessions.starts("ts", same, timedelta(seconds=sc["episode_gap_s"]), undated_starts=False)
    groups = (ev.sort("ts", nulls_last=True).with_columns(episode.cum_sum().over(same).alias("_episode"))
              .group_by(*same, "_episode", maintain_order=True)
              .agg(pl.col("ts").min(), pl.len().alias("count"), pl.col("message").first(),
                   pl.col("prior").first(), pl.col("category").first(), pl.col("action").first(),
                   pl.col("node_action").first(),
                   pl.col("symptom").first(), pl.col("context").all(), pl.col("lead_s").first(),
                   pl.col("lag_s").first(),
                   pl.col("needs").first(), pl.col("_waited").max(),
                   pl.col("approx").all(),
                   pl.col("past").any(), pl.col("says").first(),
                   pl.col("rank").drop_nulls().first(), provenance.trusted().any().alias("trusted"),
                   pl.col("_cg").drop_nulls().first(), (pl.col("_cg_mine").any() | pl.col("_cg").is_null().all()).alias("_mine"),
                   pl.col("_everywhere").any(), pl.col("shared").first(), pl.col("_by_peers").any(),
                   pl.col("xid_action").first(), pl.col("_worked").any()))
    groups = (pl.concat([groups.drop("_episode"), derived], how="diagonal_relaxed")
              .with_columns(pl.col("approx").fill_null(False), pl.col("trusted").fill_null(False),
                            pl.col("_everywhere").fill_null(False), pl.col("_derived").fill_null(False),
                            pl.col("_by_peers").fill_null(False), pl.col("_flap").fill_null(False),
                            pl.col("past").fill_null(False), pl.col("_mine").fill_null(True), pl.col("_worked").fill_null(False),
                            (pl.col("context").fill_null(False) | ~pl.col("_mine").fill_null(True)).alias("context")))
    spread = (groups.filter(pl.col("node").is_not_null()).group_by("kind", "code")
              .agg(pl.col("node").n_unique().alias("_nodes")))
    groups = _at_once(groups.join(spread, on=["kind", "code"], how="left", maintain_order="left", nulls_equal=True),
                      timedelta(seconds=sc["at_once_s"]))
    first_cause = (groups.filter(~pl.col("symptom"), ~pl.col("context"), ~pl.col("approx"), ~pl.col("past"),
                                 pl.col("ts").is_not_null())
                   .get_column("ts").min())
    if succeeded_with is not None:
        groups = (groups.join(succeeded_with.node, on=["node", *base_rate.EVENT, "trusted"], how="left",
                              maintain_order="left", nulls_equal=True)
                  .join(succeeded_with.fleet, on=[*base_rate.EVENT, "trusted"], how="left", maintain_order="left",
                        nulls_equal=True))
    ts = pl.col("ts")
    lr = causes.evidence
    # the cause's prior odds, then each piece of evidence that applied: its likelihood ratio and what it says
    says = pl.when(pl.col("says").fill_null("") != "").then(pl.format(" ({})", pl.col("says"))).otherwise(pl.lit(""))
    prior = pl.col("prior").clip(1e-6, 1 - 1e-6)
    terms = [(prior / (1 - prior), pl.format("prior of {}: {}{}", pl.col("kind"), pl.col("prior"), says)),
             (pl.when((pl.col("_nodes") == 1) & (len(run.nodes) > 1) & ~pl.col("past") & ~pl.col("_by_peers"))
              .then(lr["unique_node"]),
              pl.lit(f"on this node only, of the job's {len(run.nodes)}"))]
    if onset is not None:
        late = timedelta(seconds=sc["late_s"])
        lead = pl.duration(seconds=pl.col("lead_s").fill_null(sc["onset_window_s"]))
        # a detector's line comes after its fault: by its own wait (began), at most by lag_s
        began = ts - pl.duration(seconds=pl.col("lag_s").fill_null(0.0)) - pl.duration(milliseconds=pl.col("_waited").fill_null(0))
        terms += [(pl.when((began <= _lit(onset) + skew) & (ts >= _lit(onset) - lead)).then(lr["precedes_onset"]),
                   pl.lit("came before the failure began")),
                  (pl.when((ts < _lit(onset) - lead) & ~pl.col("past")).then(lr["stale"]),
                   pl.lit("long before the failure began")),
                  (pl.when((began > _lit(onset) + late) & ~pl.col("approx")).then(lr["after_onset"]),
                   pl.lit("after the failure began: a consequence"))]
    if run.start is not None:
        terms.append((pl.when((ts < _lit(run.start) - skew) & ~pl.col("past")).then(lr["before_start"]),
                      pl.lit("before the run started")))
    if ran is not None:  # a node left broken fails the next job as soon as it touches it
        doa = ran <= sc["arrival_s"]
        terms.append((pl.when(pl.col("past")).then(lr["unrecovered"] if doa else lr["worked_since"]),
                      pl.lit("a fault that takes the node out, logged before the run, with no recovery since, and the run "
                             f"failed {ran / 60:.0f} min after it started" if doa else
                             f"a fault logged before the run, but the run worked {ran / 60:.0f} min before it failed")))
    if seen is not None:  # the job logs NCCL/PyTorch output: it can corroborate
        terms.append((pl.when(pl.col("needs").list.len() > 0, ~pl.col("needs").list.eval(pl.element().is_in(seen)).list.any())
                      .then(lr["uncorroborated"]),
                      pl.format("the job's output shows none of {}", pl.col("needs").list.join(", "))))
    if first_cause is not None:
        terms.append((pl.when(~pl.col("symptom") & ~pl.col("context") & ~pl.col("approx") & ~pl.col("past")
                              & (ts <= _lit(first_cause) + skew))
                      .then(lr["earliest"]), pl.lit("the first cause logged")))
    if first:
        terms.append((pl.when((pl.col("node") == first[0]) & ~pl.col("symptom")).then(lr["first_to_fail"]),
                      pl.lit("the first of the job's processes to die ran on this node")))
    if ev.get_column("_everywhere").any():  # the job's own error on every node at once: the job's doing
        terms += [(pl.when(pl.col("_everywhere")).then(lr["same_error_everywhere"]),
                   pl.lit("every node's ranks died of this same error at once")),
                  (pl.when(pl.col("node_action") != "none").then(lr["not_one_node"]),
                   pl.lit("every node's ranks died of the same error of the job's own at once: a fault of one node "
                          "fails that node's ranks and leaves the others waiting"))]
    if groups.get_column("_others").max():  # a switch takes its ports down together; one node's fault, only its own
        terms.append((pl.when(pl.col("_others") > 0).then(pl.lit(lr["alone"]).pow(pl.col("_others"))),
                      pl.format("the same on {} other node(s) of the job within {} s: one node's own fault takes down "
                                "no other's, a component they share does", pl.col("_others"), pl.lit(sc["at_once_s"]))))
    died = _died_of_own_error(ev, skew)
    if died is not None:
        terms.append((pl.when(pl.col("_derived") & (pl.col("node_action") != "none") & (died <= ts)).then(lr["died_first"]),
                      pl.lit("a rank died of the job's own error first: its peers lost it, or waited for it, because it "
                             "died, not because its node failed")))
    if stuck:
        terms.append((pl.when(pl.col("node").is_in(stuck) & ~pl.col("symptom")).then(lr["stalled_here"]),
                      pl.lit("ranks on this node stalled or fell silent while the others waited")))
    if lost.height:
        gone = lost.get_column("node").to_list()
        terms += [(pl.when(pl.col("node").is_in(gone) & ~pl.col("symptom") & (pl.col("kind") != "nccl_peer_lost"))
                   .then(lr["peer_named"]), pl.lit("other ranks' NCCL errors name this node as the peer they lost")),
                  (pl.when((pl.col("kind") == "nccl_net_error") & ~pl.col("node").is_in(gone)).then(lr["names_another"]),
                   pl.lit(f"its ranks lost their peer on {compact_nodes(gone)}, as other nodes' did: they saw the failure "
                          "from here"))]
    if succeeded_with is not None:
        jobs_ok = pl.col("succeeded").fill_null(0)
        terms.append((pl.when(jobs_ok > 0).then(pl.max_horizontal(pl.lit(lr["succeeded_with"]) ** jobs_ok,
                                                                    pl.lit(lr["succeeded_with_min"]))),
                      pl.format("also seen on this node during {} successful job(s)", jobs_ok)))
        fleet_ok = pl.col("fleet").fill_null(0)
        terms.append((pl.when(fleet_ok > 0).then(pl.max_horizontal(pl.lit(lr["fleet_succeeded_with"]) ** fleet_ok,
                                                                    pl.lit(lr["fleet_succeeded_with_min"]))),
                      pl.format("seen fleet-wide during {} successful job(s)", fleet_ok)))
    ratios = [r.cast(pl.Float64).fill_null(1.0) for r, _ in terms]
    # what says a fault that takes a node out is real, whatever failed the job: its prior, from what the emitter's line
    # means (uncorrectable, fatal); not how often other runs completed beside such lines (a busy fleet's UEs make no
    # DIMM sound), nor the timeline and the job's other causes, which say only whether it failed this job
    real = [ratios[0]]
    shown = [pl.when(i == 0).then(pl.lit("odds ")).otherwise(pl.lit("x")) + _number(r) for i, r in enumerate(ratios)]
    notes = [pl.when((r != 1.0) | (i == 0)).then(pl.format("{} {}", text, why))
             for i, (r, text, (_, why)) in enumerate(zip(ratios, shown, terms))]
    if succeeded_with is not None:  # what shows in most hours shows near any failure: background, not a cause
        share = pl.max_horizontal(pl.col("hours_share").fill_null(0.0), pl.col("fleet_hours_share").fill_null(0.0))
        background = ~pl.col("symptom") & (share >= sc["background_share"])
        groups = groups.with_columns((pl.col("context") | background).alias("context"))
        notes.append(pl.when(background).then(pl.format("background: logged in {}% of the hours of the {} days before",
                                                        (share * 100).round(0).cast(pl.Int64), pl.lit(sc["base_rate_days"]))))
    within = f"{flap_within.total_seconds():.1f} s" + (
        ", as long as the job's NCCL retries a link" if rides_out else "")
    notes.append(pl.when(pl.col("_flap")).then(pl.lit(f"the link came back within {within}, or before the run "
                                                      "started: a flap, which cannot fail the job")))
    notes.append(pl.when(pl.col("_by_peers")).then(pl.format("its line names no node: it ran on {}, {}", pl.col("node"),
                                                              pl.lit(placed_why))))
    notes.append(pl.when(pl.col("_worked")).then(pl.lit("its ranks were alive and as far on as any when the job hung, "
                                                          "while other ranks stalled or fell silent: the node was working")))
    notes.append(pl.when(~pl.col("_mine")).then(pl.format("hit a process in {}, not in the job's cgroup: not the job's",
                                                           pl.col("_cg"))))
    evidence = pl.concat_list(notes).list.drop_nulls()
    unconfirmed = (pl.col("node_action") == "drain") & ~pl.col("trusted")  # a user could have written it: no trigger
    ranked = (groups.with_columns(pl.sum_horizontal(r.log() for r in ratios).alias("score"), evidence.alias("evidence"),
                                  pl.sum_horizontal(r.log() for r in real).alias("fault_score"),
                                  pl.when(unconfirmed).then(pl.lit("verify")).otherwise("node_action").alias("node_action"),
                                  pl.when(unconfirmed).then(_verify_first("action")).otherwise("action").alias("action"))
              .drop("_nodes", "lead_s", "lag_s", "needs", "says", "prior", "_cg", "_mine", "_waited", "_everywhere", "_derived",
                    "_by_peers", "_worked",
                    *(["succeeded", "fleet", "hours_share", "fleet_hours_share"] if succeeded_with else []),
                    "_flap"))
    ranked = (_shared(ranked, lr["alone"], timedelta(seconds=sc["at_once_s"])).drop("_others", "_burst")
              .sort(["context", "score", "ts"], descending=[False, True, False], nulls_last=True))  # context never leads
    return ranked.with_columns(probability(ranked, sc["unlogged"]))


def _traceback_ends(events: pl.DataFrame) -> pl.DataFrame:
    """A traceback whose next record in its file no rule read (``log``: no exception, CUDA or NCCL rule knows its
    last line, as ``class: message`` or a bare class name) ended in an exception the catalog does not name: its
    heading then stands for the failure (attrs ``ended``: ``unread``, its causes.toml entry), its message that
    line, then the traceback. One whose last line a rule read is context: that line says what happened."""
    if "file_id" not in events.columns or not (events.get_column("kind") == "python_traceback").any():
        return events
    after = (events.select("file_id", "offset", "kind", "message").unique(["file_id", "offset"], keep="first")
             .sort("file_id", "offset")
             .with_columns(pl.col("kind").shift(-1).over("file_id").alias("_next"),
                           pl.col("message").shift(-1).over("file_id").str.split("\n").list.first().alias("_last"))
             .filter(pl.col("kind") == "python_traceback", pl.col("_next").is_in(["log", "unparsed"]))
             .select("file_id", "offset", "_last"))
    if after.is_empty():
        return events
    unread = (pl.col("kind") == "python_traceback") & pl.col("_last").is_not_null()
    return (events.join(after, on=["file_id", "offset"], how="left", maintain_order="left")
            .with_columns(pl.when(unread).then(merge_attrs(pl.col("attrs"), pl.lit('{"ended":"unread"}'))).otherwise("attrs")
                          .alias("attrs"),
                          pl.when(unread).then(pl.format("{}\n{}", "_last", "message")).otherwise("message").alias("message"))
            .drop("_last"))


def _placed(annotated: pl.DataFrame, lost: pl.DataFrame, first: tuple[str, datetime | None] | None, job_id: str,
            skew: timedelta) -> tuple[pl.DataFrame, str]:
    """A cause the job printed on a line that names no node (no launcher label), by the time its peers lost
    their ranks on one node, ran on that node: the ranks that died are the ones the others lost (``_by_peers``).
    Where no one node was lost, by the time srun or torchrun saw the job's first process die of its own (an exit,
    not a kill: :func:`ranks.first_failed`), it ran on that process's node: a rank that raised dies of it. What a
    surviving rank printed after the loss may be its reaction, and two lost nodes place nothing. Also says why."""
    gone = lost.get_column("node").unique()
    if gone.len() == 1:
        node, noticed, why = gone[0], lost.get_column("ts").min(), "whose ranks the others lost"
    elif gone.len() == 0 and first is not None:
        (node, noticed), why = first, "where the job's first process to die ran"
    else:
        return annotated.with_columns(pl.lit(False).alias("_by_peers")), ""
    before = pl.col("ts").is_null() if noticed is None else pl.col("ts").is_null() | (pl.col("ts") <= _lit(noticed) + skew)
    here = (pl.col("node").is_null() & (pl.col("job_id") == job_id) & ~pl.col("symptom") & ~pl.col("context")
            & before).fill_null(False)
    return annotated.with_columns(here.alias("_by_peers"), pl.when(here).then(pl.lit(node)).otherwise("node").alias("node")), why


def _died_of_own_error(annotated: pl.DataFrame, skew: timedelta) -> pl.Expr | None:
    """When the first of the job's ranks to die of the job's own error (an exception, a CUDA OOM: a cause that calls
    for nothing on the node, in the job's cgroup) did so on the candidate's node, or on a node no line names
    (an unlabelled rank could be any), less ``skew``; None when no rank did."""
    died = annotated.filter(~pl.col("symptom"), ~pl.col("context"), pl.col("node_action") == "none",
                            pl.col("ts").is_not_null(), pl.col("_cg_mine") | pl.col("_cg").is_null())
    if died.is_empty():
        return None
    per_node = dict(died.filter(pl.col("node").is_not_null()).group_by("node").agg(pl.col("ts").min()).iter_rows())
    anywhere = died.filter(pl.col("node").is_null()).get_column("ts").min()
    here = pl.col("node").replace_strict(per_node, default=None, return_dtype=pl.Datetime("us", "UTC"))
    return pl.min_horizontal(here, pl.lit(anywhere, dtype=pl.Datetime("us", "UTC"))) - skew


def _flapped(ev: pl.DataFrame, events: pl.DataFrame, within: timedelta, start: datetime | None) -> pl.DataFrame:
    """``_flap``: an IB link that went down and came back up ``within`` seconds flapped (NCCL's IB retries ride out a
    link that short), and one back before the run started (``start``) was up for all of it; one that stayed down
    broke what used it. A link comes back by an up of the same HCA and port
    (attrs hca, port: a flap of mlx5_1 brings no mlx5_0 back; a down naming neither, such as a cable module's, by
    none), and a link down a trusted route carried only by a trusted route's line: a user's ``logger`` line saying
    "Link up" brings no link back."""
    link = pl.concat_str([pl.col("attrs").str.json_path_match("$.hca"), pl.col("attrs").str.json_path_match("$.port")],
                         separator=":", ignore_nulls=True).fill_null("")
    up = (events.filter(pl.col("kind") == "ib_link_up", pl.col("ts").is_not_null())
          .select("node", link.alias("_link"), pl.col("ts").alias("_back"), provenance.trusted().alias("_sure"))
          .filter(pl.col("_link") != "").sort("_back"))
    rows = ev.with_row_index("_i")
    down = (rows.filter(pl.col("kind") == "ib_link_down", pl.col("ts").is_not_null())
            .select("_i", "node", "ts", link.alias("_link"), provenance.trusted().alias("_sure")).sort("ts"))
    back = pl.concat([part.join_asof(ups.drop("_sure"), left_on="ts", right_on="_back", by=["node", "_link"],
                                     strategy="forward", check_sortedness=False).select("_i", "_back")
                      for part, ups in ((down.filter(pl.col("_sure")), up.filter(pl.col("_sure"))),
                                        (down.filter(~pl.col("_sure")), up))])
    return (rows.join(back, on="_i", how="left", maintain_order="left")
            .with_columns(((pl.col("_back") - pl.col("ts") <= within)
                           | (pl.col("_back") < (_lit(start) if start else pl.lit(None)))).fill_null(False).alias("_flap"))
            .drop("_i", "_back"))


def _at_once(groups: pl.DataFrame, within: timedelta) -> pl.DataFrame:
    """``_burst`` and ``_others``: the candidate's burst (each line within ``within`` of the one before), and how
    many other of the job's nodes logged its kind in it, for the kinds a component several nodes share can cause
    (their cause's ``shared``: a leaf switch's ports), a flap left out (a switch that failed keeps its ports down until it is back)."""
    rows = groups.with_columns(pl.col("shared").fill_null("")).with_row_index("_i")
    own = rows.filter(pl.col("shared") != "", ~pl.col("symptom"), ~pl.col("context"), ~pl.col("_flap"), pl.col("node").is_not_null(),
                      pl.col("ts").is_not_null()).select("_i", "kind", "node", "ts")
    burst = sessions.numbered("ts", "kind", within, undated_starts=True)  # sorted: linear in the lines, whatever they are
    near = (own.sort("kind", "ts").with_columns(burst.alias("_burst"))
            .select("_i", "_burst", (pl.col("node").n_unique().over("_burst") - 1).cast(pl.Int64).alias("_others")))
    return (rows.join(near, on="_i", how="left", maintain_order="left")
            .with_columns(pl.col("_others").fill_null(0)).drop("_i"))


def _shared(ranked: pl.DataFrame, alone: float, within: timedelta) -> pl.DataFrame:
    """Beside candidates of one kind on several nodes at once (``_others``), the component they share as a
    candidate of its own, without a node: the best member's evidence without the coincidence that member's
    own node needs (``alone`` per other node), and its cause's ``shared`` action (``_burst``: :func:`_at_once`'s;
    ``within`` for the message). ``shared`` then says whether a row is such a component; it rests on a
    trusted route when two of its nodes' lines do (a user's lines on other nodes are evidence, never the claim)."""
    members = ranked.filter(pl.col("_others") > 0)
    ranked = ranked.with_columns(pl.lit(False).alias("shared"))  # the members' action; now: a burst's component?
    if members.is_empty():
        return ranked
    best = pl.col("score").arg_max()
    coincidence = "the same on "
    bursts = (members.group_by("_burst", maintain_order=True)
              .agg(pl.all().exclude("node", "_burst").get(best), pl.col("ts").min().alias("_first"),
                   pl.col("node").unique().sort().alias("_nodes"), (pl.col("trusted").sum() > 1).alias("_trusted"))
              .filter(pl.col("_nodes").list.len() > 1))
    rows = []
    for b in bursts.iter_rows(named=True):
        hosts = compact_nodes(b["_nodes"])
        others = b["_others"]
        rows.append({**{k: b[k] for k in ranked.columns if k in b and k != "node"},
                     "node": None, "gpu": None, "ts": b["_first"], "count": len(b["_nodes"]), "trusted": b["_trusted"],
                     "rank": None, "node_action": "none", "action": b["shared"], "_others": 0, "shared": True,
                     "message": f"{b['kind']} on {hosts} within {within.total_seconds():.0f} s: {b['message']}",
                     "score": b["score"] - others * math.log(alone),
                     "evidence": [e for e in b["evidence"] if coincidence not in e]
                     + [f"on {len(b['_nodes'])} of the job's nodes at once ({hosts}): one component they share "
                        "explains every one"]})
    return pl.concat([ranked, pl.DataFrame(rows, schema=ranked.schema)]) if rows else ranked


def _cgroup(job_id: str, causes: Causes) -> list[pl.Expr]:
    """``_cg``: the cgroup the event's process was in (its cause's ``cgroup`` attr), and ``_cg_mine``: whether
    that is the job's (Slurm's ``job_<id>``; an array task's cgroup has a number of its own, so only a plain
    job id is compared). The OOM killer names the cgroup on one line and kills on the next, both naming the
    victim's pid: source: torvalds/linux mm/oom_kill.c (4.19+) dump_oom_summary pr_info("oom-kill:constraint=%s,
    ...") pr_cont(",task_memcg=...,task=%s,pid=%d,uid=%d"), __oom_kill_process pr_err("%s: Killed process %d (%s)
    total-vm:%lukB, ...") (message "Out of memory" or "Memory cgroup out of memory"): a line that names none takes
    the cgroup its node's line about the same pid names."""
    cg = pl.lit(None, dtype=pl.String)
    for name in causes.table.get_column("cgroup").drop_nulls().unique().to_list():
        cg = pl.when(pl.col("cgroup") == name).then(pl.col("attrs").str.json_path_match(f"$.{name}")).otherwise(cg)
    cg = pl.when(pl.col("cgroup").is_not_null() & pl.col("pid").is_not_null()).then(
        pl.coalesce(cg, cg.drop_nulls().first().over("node", "pid", "cgroup"))).otherwise(cg)
    mine = cg.str.contains(f"/job_{job_id}(?:/|$)") if job_id.isdigit() else pl.lit(True)
    return [cg.alias("_cg"), mine.fill_null(False).alias("_cg_mine")]


def _everywhere(annotated: pl.DataFrame, run: Run, within: timedelta) -> pl.Expr:
    """``_everywhere``: the event is an error of the job's own (its cause calls for nothing on the node, no
    symptom, no context) that the job's ranks printed on every one of its nodes, the first on each within
    ``within`` of the others: the same error (kind, text with its numbers masked) killed the job everywhere."""
    same = [pl.col("kind"), pl.col("message").str.replace_all(r"\d+", "#")]
    nodes = set(run.nodes or [])
    own = (pl.col("job_id") == run.job_id) & ~pl.col("symptom") & ~pl.col("context") & (pl.col("node_action") == "none") \
        & pl.col("node").is_in(list(nodes)) & pl.col("ts").is_not_null()
    first = pl.col("ts").filter(own).min().over([*same, "node"])
    spread = first.max().over(same) - first.min().over(same)
    everywhere = own & (pl.col("node").filter(own).n_unique().over(same) == len(nodes)) & (spread <= within)
    return (everywhere if len(nodes) > 1 else pl.lit(False)).fill_null(False).alias("_everywhere")


def _number(ratio: pl.Expr) -> pl.Expr:
    """A likelihood ratio or odds as people read it: 3, 0.05, 99."""
    return (pl.when(ratio >= 10).then(ratio.round(0).cast(pl.Int64).cast(pl.String))
            .otherwise(ratio.round_sig_figs(2).cast(pl.String)))


VERIFY_FIRST = "confirm on the node with an active check (observe health check) first, then: {}"


def _verify_first(action: str) -> pl.Expr:
    return pl.format(VERIFY_FIRST, action)


def _diagnosis() -> pl.Expr:
    """What a candidate says: its category, and its node where it calls for something on the node."""
    return pl.struct(pl.col("category"), pl.when(pl.col("node_action") != "none").then(pl.col("node")))


def _odds(ranked: pl.DataFrame) -> float:
    """The diagnoses' odds, summed: each diagnosis worth its best candidate's; context is no diagnosis."""
    return float(ranked.filter(~pl.col("context")).group_by(_diagnosis()).agg(pl.col("score").max().exp())
                 .get_column("score").sum())


def unlogged(ranked: pl.DataFrame, odds: float) -> float:
    """The probability that the cause left no line in the store (``odds``: that hypothesis's, causes.toml)."""
    return odds / (odds + _odds(ranked))


def probability(ranked: pl.DataFrame, odds: float) -> pl.Expr:
    """Each candidate's diagnosis's probability: candidates that say the same thing (one category, and one
    node where it calls for something on the node) are one diagnosis, worth its best candidate's odds;
    with the hypothesis that the cause left no line (``odds``), the diagnoses' odds normalised. Context
    (what cannot fail a job by itself) is no diagnosis: 0."""
    live = pl.when(~pl.col("context")).then(pl.col("score"))
    return (live.max().over(_diagnosis()).exp() / (_odds(ranked) + odds)).fill_null(0.0).alias("probability")


def _onset(annotated: pl.DataFrame, run: Run) -> datetime | None:
    """When the failure began: the first symptom, or the first error the job itself printed, or the
    run's end (``annotated``: events with their causes' columns). A symptom a timeout printed began
    when its wait did (:func:`_waited`), not at its line."""
    signs = annotated.filter(pl.col("symptom") | (pl.col("job_id") == run.job_id), pl.col("ts").is_not_null())
    if signs.is_empty():
        return run.end
    return signs.select((pl.col("ts") - pl.duration(milliseconds=_waited(signs))).min()).item()


def _waited(annotated: pl.DataFrame) -> pl.Expr:
    """How long before its line an event's wait began, in milliseconds: its cause's ``began`` attr
    (``*_ms`` milliseconds, else seconds: a watchdog's ``ran for N milliseconds``, the hung-task detector's
    ``blocked for more than N seconds``); 0 where it has none."""
    waited = pl.lit(None, dtype=pl.Int64)
    for name in annotated.get_column("began").drop_nulls().unique().to_list():
        ms = pl.col("attrs").str.json_path_match(f"$.{name}").cast(pl.Int64, strict=False) * (1 if name.endswith("_ms") else 1000)
        waited = pl.when(pl.col("began") == name).then(ms).otherwise(waited)
    return waited.fill_null(0)


def _lit(ts: datetime) -> pl.Expr:
    return pl.lit(ts).dt.cast_time_unit("us")



# ------------------------------------------------------------------------------------- the query


def run_events(store: Store, run: Run, before: timedelta, after: timedelta, elsewhere: frozenset[str] = frozenset()
               ) -> pl.DataFrame:
    """Every event on the run's nodes from ``before`` its start to ``after`` its end, plus the job's
    own output and records (whatever their node). A line without a time of their own (NCCL INFO,
    a traceback) was printed after the stamped line before it in the same file (or the run's start)
    and before the next one (else the run's end): column ``approx`` says so, ``printed_after`` holds
    the first bound (what the timeline shows: the user's reading of the file), and ``ts`` the second,
    which the model weighs, so that a line is never taken for earlier than it may have been.
    It also keeps a requeued job's earlier runs out, and the lines of its output that name a node only its other runs
    had (``elsewhere``: srun's "Node failure on gpu009" of the run before, printed after that run's last stamp)."""
    marked = stale(store)  # each record once as the store marks it, decided again only where stale
    anchor_lo, anchor_hi = run.start or run.end, run.end or run.start
    since = anchor_lo - before if anchor_lo else None
    until = anchor_hi + after if anchor_hi else None
    end = pl.lit(run.end, dtype=pl.Datetime("us", "UTC"))
    placed = pl.coalesce("ts", pl.col("ts").backward_fill().over("file_id"), end, pl.col("ts").forward_fill().over("file_id"))
    start = pl.lit(run.start, dtype=pl.Datetime("us", "UTC"))
    printed_after = pl.when(pl.col("ts").is_null()).then(
        pl.min_horizontal(pl.max_horizontal(pl.col("ts").forward_fill().over("file_id"), start), placed))
    # the job's output: its stamped lines near the run, and its unstamped ones (placed between them)
    mine = (search(store, since=since, until=until, job=run.job_id, undated=True, marked=marked)
            .sort("file_id", "offset").with_columns(placed.alias("_at"), printed_after.alias("printed_after")))
    inside = pl.col("_at").is_null()
    own_since = (run.start - timedelta(minutes=1) if run.start else since) if since is not None else None
    if since is not None and until is not None:  # the job's own output starts with its run, not before
        inside = inside | pl.col("_at").is_between(own_since, until)
    # a job's output names its nodes only as claims: one the job ran on is taken (over the node a collector gave
    # the whole file, where its batch script ran), another is not
    claimed = pl.col("attrs").str.json_path_match("$.claimed_node")
    mine = mine.filter(inside, ~claimed.is_in(sorted(elsewhere)).fill_null(False)).with_columns(
        pl.col("ts").is_null().alias("approx"), pl.col("_at").alias("ts"),
        pl.coalesce(pl.when(claimed.is_in(run.nodes or [])).then(claimed), "node").alias("node")).drop("_at")
    earlier = (pl.col("job_id") == run.job_id) & (pl.col("ts") < own_since) if since is not None else pl.lit(False)
    on_nodes = (search(store, since=since, until=until, nodes=run.nodes or None, marked=marked)  # not earlier runs' lines
                .filter(~earlier.fill_null(False))
                .with_columns(pl.lit(False).alias("approx"), pl.lit(None, pl.Datetime("us", "UTC")).alias("printed_after")))
    return (pl.concat([on_nodes, mine], how="diagonal").unique(subset=["file_id", "offset", "kind"], keep="first", maintain_order=True)
            .collect())


def _past(store: Store, run: Run, causes: Causes) -> pl.DataFrame:
    """Faults that take a node out, on the run's nodes in the ``base_rate_days`` before it started,
    that nothing recovered before it started (:mod:`queries.node_past`); ``past`` true. Not those
    Slurm itself set the node DOWN for: that it allocated the node to the run says it was back."""
    sc = causes.scoring
    if run.start is None:
        return pl.DataFrame()
    kinds = sorted({c.kind for c in causes.causes.values() if c.node == "drain" and not c.symptom}
                   - set(sc["back_when_allocated"]))  # Slurm gave the run the node: it was back
    found = node_past.unrecovered(store, run.nodes, kinds, run.start - timedelta(days=sc["base_rate_days"]),
                                  run.start, sc["recovered_by"], timedelta(seconds=sc["arrival_s"]),
                                  timedelta(seconds=sc["skew_s"]))
    return found.with_columns(pl.lit(False).alias("approx"), pl.lit(True).alias("past"))


def _succeeded_with(store: Store, run: Run, events: pl.DataFrame, causes: Causes) -> base_rate.BaseRates | None:
    """For the run's catalogued events on its nodes, the successful jobs they also showed during in
    the ``base_rate_days`` before it (see :mod:`queries.base_rate`). Not for symptoms, which every
    failure shows whatever its cause: they would only cost reading every job's watchdog lines."""
    anchor = run.start or run.end
    if anchor is None:
        return None
    causal = {c.kind for c in causes.causes.values() if not c.symptom}
    kinds = sorted(set(events.get_column("kind").unique().drop_nulls()) & causal)
    since = anchor - timedelta(days=causes.scoring["base_rate_days"])
    return base_rate.succeeded_with(store, run.nodes, kinds, since, anchor, causes.scoring["base_rate_min_hours"], causes)


def explain(store: Store, job_id: str, at: datetime | None = None, before: timedelta = timedelta(minutes=15),
            after: timedelta = timedelta(minutes=10), timeline_rows: int = 60) -> Explanation:
    """Explain why job ``job_id`` failed: its run at ``at``, else its last failed run.

    ExplainError when the store has no Slurm record of the job (or of a run at ``at``).
    """
    first, last = jobs.span(store, job_id)  # the job index (refreshed by ingest) says where to read
    day = timedelta(days=1)
    records = search(store, kinds=jobs.RUN_KINDS, sources=["slurm"], since=first - day if first else None,
                     until=last + day if last else None, copies=True)  # a job's runs are told apart by time
    # a run as Slurm's own records tell it, where a trusted route carried any: a user's `logger` copy of a
    # slurmctld line (an early `_job_complete`) moves no end
    runs = job_runs(records.filter(provenance.trusted()), job_id) or job_runs(records, job_id)
    run = failed_run(runs, at)
    if run is None:
        when = f" running at {at.isoformat()}" if at and runs else ""
        raise ExplainError(f"job {job_id}: no Slurm record of a run{when} in {store.name} (ingest slurmctld "
                           "logs, jobcomp or sacct output)")
    causes = load_causes()
    others = frozenset(n for r in runs if r is not run for n in r.nodes) - set(run.nodes)
    events = run_events(store, run, before, after, others)
    past = _past(store, run, causes)
    if past.height:  # the node's past, also where the window read overlaps it
        events = (pl.concat([past, events], how="diagonal_relaxed")
                  .unique(subset=["file_id", "offset", "kind"], keep="first", maintain_order=True))
    events = ranks.place_ranks(events, run.nodes, run.job_id)
    base = _succeeded_with(store, run, events, causes)
    ranked = candidates(events, run, causes, base)
    done = (run.state or "").split()[:1] == ["COMPLETED"]
    root = None if done else verdict(ranked, causes)
    acts = node_fault(candidates(events.filter(provenance.trusted()), run, causes, base), causes)
    if root and root["node_action"] == "drain" and (acts is None or not _same(acts, root)):
        root["node_action"], root["action"] = "verify", VERIFY_FIRST.format(root["action"])
    if root and acts and _same(acts, root):  # the fault is real whether or not it is sure to be the cause
        root["node_action"], root["action"] = "drain", acts["action"]
    mine = events.filter(pl.col("job_id").is_null() | (pl.col("job_id") == run.job_id))
    return Explanation(run.job_id, run.state, run.exit_code, run.nodes, run.start, run.end, root,
                       ranked.head(10).to_dicts(), timeline(events, causes, timeline_rows), missing(events, run),
                       _onset(causes.annotate(mine), run), unclassified(mine, causes),
                       None if acts is None or _names(root, acts, causes.scoring["drain_above"]) else acts)


def verdict(ranked: pl.DataFrame, causes: Causes) -> dict | None:
    """The likeliest candidate as a verdict: ``cause``, or ``undetermined`` when it is only a symptom every rank
    reports whatever broke (a watchdog timeout) or background (a corrected error): then as probable as that the
    cause left no line; else when its probability is under ``undetermined_below``. A drain it is not sure enough
    of (``drain_above``) is a ``verify``. None without candidates."""
    if ranked.is_empty():
        return None
    top = ranked.row(0, named=True)
    root = {k: top[k] for k in ("node", "kind", "code", "gpu", "ts", "message", "category", "action", "node_action",
                                "rank", "score", "trusted", "symptom", "context", "shared", "xid_action")}
    sc = causes.scoring
    nothing = top["symptom"] or top["context"]
    probable = float(top["probability"])
    root["confidence"] = round(unlogged(ranked, sc["unlogged"]) if nothing else probable, 2)
    root["probability"] = round(probable, 2)
    unsure = nothing or probable < sc["undetermined_below"]
    root["verdict"] = "undetermined" if unsure else "cause"
    if top["node_action"] == "drain" and (unsure or probable < sc["drain_above"]):  # not sure enough to act
        root["node_action"], root["action"] = "verify", VERIFY_FIRST.format(top["action"])
    return root


def node_fault(trusted: pl.DataFrame, causes: Causes) -> dict | None:
    """The fault that takes a node out, on the lines no user can write alone (``trusted``: :func:`candidates` of them):
    a candidate that calls for a drain and is no context (a flap, background, a past the run worked through, a line
    after the run), as probable as its prior makes it (``fault_score``), not as
    probable as it is the cause: what else the job did (cancelled itself, ran out of time or memory, faulted its own
    GPU), which its user decides, never competes with a fault of the node. The likeliest, when at least
    ``drain_above``; else None."""
    faults = trusted.filter(pl.col("node_action") == "drain", pl.col("trusted"), ~pl.col("context"), ~pl.col("symptom"),
                            pl.col("node").is_not_null(), ~pl.col("shared").fill_null(False))
    if faults.is_empty():
        return None
    top = faults.sort("fault_score", "ts", descending=[True, False], nulls_last=True).row(0, named=True)
    sure = round(1 / (1 + math.exp(-top["fault_score"])), 2)
    if sure < causes.scoring["drain_above"]:
        return None
    fault = {k: top[k] for k in ("node", "kind", "code", "gpu", "ts", "message", "category", "action", "node_action",
                                 "rank", "score", "trusted", "symptom", "context", "shared", "xid_action")}
    return {**fault, "confidence": sure, "probability": sure, "verdict": "cause"}


def _names(root: dict | None, fault: dict, sure: float) -> bool:
    """Whether the root cause already says to take the node out for ``fault``, as surely as a drain needs."""
    return bool(root) and root["verdict"] == "cause" and root["confidence"] >= sure and _same(root, fault)


def _same(a: dict, b: dict) -> bool:
    """Whether two verdicts name the same fault: its node and kind."""
    return (a["node"], a["kind"]) == (b["node"], b["kind"])


def unclassified(events: pl.DataFrame, causes: Causes) -> list[dict]:
    """Lines no rule classified (``log``, ``unparsed``) that look like trouble (a level of warning or worse, or a word
    of ``unclassified_words``), folded by template (digits and hex masked), first seen first: what
    an on-call reads when nothing classified explains the job, instead of "none found"."""
    sc = causes.scoring
    bad = (pl.col("severity").is_in(["emerg", "alert", "crit", "err", "warning"])
           | pl.col("message").str.contains(sc["unclassified_words"]))
    lines = events.filter(pl.col("kind").is_in(["log", "unparsed"]), pl.col("message").is_not_null(), bad)
    if lines.is_empty():
        return []
    first = pl.col("message").str.split("\n").list.first()
    template = first.str.replace_all(r"0x[0-9a-fA-F]+|\d+", "#")
    return (lines.sort("ts", nulls_last=True).with_columns(template.alias("template"))
            .group_by("template", maintain_order=True)
            .agg(pl.col("ts").first(), pl.col("node").drop_nulls().unique(maintain_order=True).alias("nodes"),
                 pl.col("source").first(), pl.len().alias("count"), first.first().alias("message"))
            .head(int(sc["unclassified_rows"])).drop("template").to_dicts())


def missing(events: pl.DataFrame, run: Run) -> list[str]:
    """The run's nodes that logged no kernel or syslog line in the window read: a verdict cannot
    rest on what is not there (a crashed node's last lines, a collector that stopped). One line, the nodes
    as a hostlist: a 128-node job whose logs were never shipped is one fact, not 128."""
    heard = set(events.filter(pl.col("source").is_in(["kernel", "syslog"])).get_column("node").drop_nulls().unique())
    silent = [n for n in run.nodes if n not in heard]
    return [f"no kernel or syslog line from {compact_nodes(silent)} in the window read"] if silent else []


def timeline(events: pl.DataFrame, causes: Causes, rows: int = 60) -> list[dict]:
    """The evidence, oldest first: every non-``log`` event, repeats of a kind on a node within a
    second folded into one row with a count. A line without a time of its own is shown at the stamped
    line before it (``approx``: printed after then, and before the next stamped line)."""
    ev = events.filter(~pl.col("kind").is_in(["log", "unparsed", "nccl_comm_init"]), pl.col("ts").is_not_null())
    if ev.is_empty():
        return []
    ev = (ev.with_columns(pl.coalesce("printed_after", "ts").alias("ts"), pl.col("approx").fill_null(False)).sort("ts")
          .with_columns(pl.col("ts").dt.truncate("1s").alias("_sec")))
    folded = (ev.group_by("_sec", "node", "kind", "approx", maintain_order=True)
              .agg(pl.col("ts").first(), pl.col("source").first(), pl.col("severity").first(),
                   pl.col("code").first(), pl.col("gpu").first(), pl.col("rank").n_unique().alias("ranks"),
                   pl.len().alias("count"), pl.col("message").first().str.split("\n").list.first().alias("message"))
              .drop("_sec"))
    causal = set(causes.kinds())
    folded = folded.with_columns(pl.col("kind").is_in(list(causal)).alias("_key"))
    if folded.height > rows:  # keep the cause-catalog kinds first, then the rest by time
        folded = pl.concat([folded.filter("_key"), folded.filter(~pl.col("_key"))]).head(rows).sort("ts")
    return folded.drop("_key").to_dicts()



