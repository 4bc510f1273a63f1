"""Job runs from the store: one row per run of a job (a requeued job has several), with its nodes,
start, end, state and exit code, from job records (jobcomp, sacct) and slurmctld lines alike."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import hostlist
import polars as pl

from observe import provenance, sessions
from observe.job_states import BAD_ENDS
from observe.store import Store

RUN_KINDS = ["slurm_job_start", "slurm_job_end", "slurm_job_requeue"]
SAME_MOMENT = timedelta(minutes=2)  # a job record and the slurmctld line of the same start or end
RUN_SCHEMA = {"job_id": pl.String, "start": pl.Datetime("us", "UTC"), "end": pl.Datetime("us", "UTC"),
              "state": pl.String, "exit_code": pl.String, "nodes": pl.List(pl.String), "trusted": pl.Boolean}


def runs(events: pl.LazyFrame) -> pl.DataFrame:
    """Every run in ``events`` (any frame of the event schema), ordered by job and start.

    Starts and ends seen by several sources within two minutes are one start or end; each start
    is paired with the first end after it. ``end`` is null for a run still going when the logs end.
    A job some record of which a trusted route carried (slurmctld's own log, jobcomp, sacct) is told by those
    records alone (``trusted``): a user's ``logger`` copy of a slurmctld line moves no start or end and makes no run.
    One lazy query: a single collect however few the rows.
    """
    rec = _records(events)
    rec = rec.filter(pl.col("_tr") | ~pl.col("_tr").any().over("job_id")).cache()
    starts = _moments(rec.filter(pl.col("kind") == "slurm_job_start")
                      .with_columns(pl.coalesce("a_start", "ts").alias("at")))
    ended = _ends(rec).cache()
    right = ended.select("job_id", pl.col("at").alias("end"), pl.col("at").alias("_e"), "state", "exit_code",
                        pl.col("nodelist").alias("end_nodes")).sort("end")
    paired = (starts.select("job_id", pl.col("at").alias("start"), "nodelist").sort("start")
              .join_asof(right, left_on="start", right_on="end", by="job_id", strategy="forward",
                         check_sortedness=False)
              .with_columns(pl.coalesce("nodelist", "end_nodes").alias("nodelist"))).cache()
    # an end whose start is before the logs begin: a run with an unknown start
    orphans = (ended.join(paired.select("job_id", pl.col("_e").alias("at")), on=["job_id", "at"], how="anti")
               .select("job_id", pl.col("a_start").alias("start"), pl.col("at").alias("end"), "state",
                       "exit_code", "nodelist"))
    sure = rec.group_by("job_id").agg(pl.col("_tr").any().alias("trusted"))
    both = (pl.concat([paired.select("job_id", "start", "end", "state", "exit_code", "nodelist"), orphans],
                      how="diagonal_relaxed").join(sure, on="job_id", how="left").collect())
    # each distinct hostlist expanded once, into one Series (map_elements made a Series of every run's list)
    lists = both.get_column("nodelist").unique()
    expanded = pl.DataFrame({"nodelist": lists, "nodes": pl.Series([_hosts(x) for x in lists.to_list()],
                                                                    dtype=pl.List(pl.String))})
    return (both.join(expanded, on="nodelist", how="left", nulls_equal=True, maintain_order="left").drop("nodelist")
            .with_columns(pl.col(c).cast(t) for c, t in RUN_SCHEMA.items())
            .select(list(RUN_SCHEMA)).sort("job_id", "start", nulls_last=True))


def ends(events: pl.LazyFrame) -> pl.LazyFrame:
    """Every end of a job run in ``events`` (a requeue is an end with state REQUEUED), one row per
    moment however many sources saw it: job_id, at, state, exit_code, nodelist, a_start."""
    return _ends(_records(events))


def _records(events: pl.LazyFrame) -> pl.LazyFrame:
    attr = pl.col("attrs").str.json_path_match
    return (events.filter(pl.col("kind").is_in(RUN_KINDS), pl.col("job_id").is_not_null())
            .select("job_id", "kind", "ts", "code",
                    attr("$.nodes").alias("nodelist"), pl.coalesce(attr("$.state"), _state_from_status()).alias("state"),
                    # which state to believe: a job record's, then one derived from slurmctld, then a requeue
                    pl.when(attr("$.state").is_not_null()).then(0).when(pl.col("kind") == "slurm_job_requeue")
                    .then(2).otherwise(1).alias("_trust"),
                    pl.col("code").cast(pl.String).alias("exit_code"), _record_time(attr("$.start")).alias("a_start"),
                    _record_time(attr("$.end")).alias("a_end"), provenance.trusted().alias("_tr")))


def _ends(rec: pl.LazyFrame) -> pl.LazyFrame:
    return _moments(rec.filter(pl.col("kind") != "slurm_job_start").with_columns(
        pl.coalesce("a_end", "ts").alias("at"),
        pl.when(pl.col("kind") == "slurm_job_requeue").then(pl.lit("REQUEUED")).otherwise("state").alias("state")))


def _record_time(text: pl.Expr) -> pl.Expr:
    """A job record's ``StartTime``/``EndTime`` (``2024-10-22T12:26:42``, as jobcomp and sacct print it)."""
    return text.str.to_datetime("%Y-%m-%dT%H:%M:%S", time_unit="us", strict=False).dt.replace_time_zone("UTC")


def _state_from_status() -> pl.Expr:
    """slurmctld's ``_job_complete: JobId=N WEXITSTATUS 1`` / ``WTERMSIG 9`` as a job state."""
    status = pl.col("attrs").str.json_path_match("$.status")
    return (pl.when(status == "WTERMSIG").then(pl.lit("FAILED"))
            .when((status == "WEXITSTATUS") & (pl.col("code") == 0)).then(pl.lit("COMPLETED"))
            .when(status == "WEXITSTATUS").then(pl.lit("FAILED")))


def _moments(rec: pl.LazyFrame) -> pl.LazyFrame:
    """Rows within SAME_MOMENT of the previous one of the same job are one moment (first non-null
    value of each column wins, the most trusted first)."""
    return (rec.sort("job_id", "at")
            .with_columns(sessions.numbered("at", "job_id", SAME_MOMENT, undated_starts=True).alias("_m"))
            .sort("job_id", "_m", "_trust", maintain_order=True)
            .group_by("job_id", "_m", maintain_order=True)
            .agg(pl.col("at").min(), pl.col("state").drop_nulls().first(), pl.col("exit_code").drop_nulls().first(),
                 pl.col("nodelist").drop_nulls().first(), pl.col("a_start").drop_nulls().first())
            .drop("_m"))


def _hosts(expr: str | None) -> list[str]:
    if not expr:
        return []
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist:
        return [expr]


def on_nodes(runs_: pl.DataFrame, nodes: pl.Series | list[str], since, until) -> pl.DataFrame:
    """Runs that held any of ``nodes`` at some time between ``since`` and ``until``."""
    wanted = set(nodes)
    overlap = (pl.col("start").is_null() | (pl.col("start") <= until)) & (pl.col("end").is_null() | (pl.col("end") >= since))
    return runs_.filter(overlap, pl.col("nodes").list.eval(pl.element().is_in(list(wanted))).list.any())


def completed_on_nodes(store: Store) -> pl.LazyFrame | None:
    """(node, job_id, start, end) of every run the job index holds that completed, as Slurm's trusted records tell it,
    one row per node it ran on; None without an index. What a node does while its jobs succeed is its background."""
    runs_ = runs_on_nodes(store)
    return None if runs_ is None else (runs_.filter(pl.col("state").str.starts_with("COMPLETED"), pl.col("trusted"))
                                       .drop("state", "trusted"))


def runs_on_nodes(store: Store) -> pl.LazyFrame | None:
    """(node, job_id, start, end, state, trusted) of every run the job index holds, one row per node it ran on;
    None without an index. ``trusted``: told by records a trusted route carried (an index written before it said so:
    not trusted, until ingest or compaction writes it again)."""
    index = store.index("jobs").scan()
    if index is None:
        return None
    sure = pl.col("trusted") if "trusted" in index.collect_schema().names() else pl.lit(False)
    return index.explode("nodes").select(pl.col("nodes").alias("node"), "job_id", "start", "end", "state",
                                         sure.alias("trusted"))


def write_index(store: Store) -> int:
    """Write every run in the store to the job index ``index/jobs`` (a Delta table, one commit);
    returns the runs written.

    The index only tells where to start looking for a job's records: a job missing from it (or
    runs newer than it) are still found by scanning, so a stale index is never wrong, only slower.
    """
    table = runs(store.scan(sources=["slurm"]).filter(pl.col("kind").is_in(RUN_KINDS)))
    store.make_dirs(store.root / "index")
    store.index("jobs").overwrite(table, ("job_id", "start", "end"))
    return table.height


def span(store: Store, job_id: str) -> tuple[datetime | None, datetime | None]:
    """When the job's first run started and its last run ended, by the index: where its records
    are. (None, None) when the index does not know the job; the end is None while a run is going."""
    index = store.index("jobs").scan()
    if index is None:
        return None, None
    row = (index.filter(pl.col("job_id") == job_id)
           .select(pl.coalesce("start", "end").min().alias("first"), pl.col("end").max().alias("last"),
                   pl.col("end").is_null().any().alias("open"), pl.len().alias("n"))
           .collect().row(0, named=True))
    if not row["n"]:
        return None, None
    return row["first"], None if row["open"] else row["last"]


@dataclass
class Run:
    """One run of a job as Slurm recorded it (a row of :func:`runs`)."""

    job_id: str
    start: datetime | None
    end: datetime | None
    state: str | None
    exit_code: str | None
    nodes: list[str]
    trusted: bool = False  # told by records a trusted route carried


def job_runs(events: pl.LazyFrame, job_id: str) -> list[Run]:
    """The job's runs (a requeued job has several), oldest first."""
    table = runs(events.filter(pl.col("job_id") == job_id))
    return [Run(**row) for row in table.iter_rows(named=True)]


def failed_run(runs: list[Run], at: datetime | None = None) -> Run | None:
    """The run to explain: the one running at ``at`` if given, else the last one that failed (or was
    requeued), else the last one."""
    if at is not None:
        hit = [r for r in runs if (r.start is None or r.start - timedelta(minutes=5) <= at)
               and (r.end is None or at <= r.end + timedelta(minutes=5))]
        return hit[-1] if hit else None
    bad = [r for r in runs if r.state and r.state.split()[0] in BAD_ENDS]
    return (bad or runs or [None])[-1]
