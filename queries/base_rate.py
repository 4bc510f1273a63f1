"""Does this appear when things work? How many successful jobs an event showed during, and the share
of hours it is logged in, on the same node and anywhere in the fleet: healthy fleets log corrected
errors, recovered link flaps, monitoring agents' register reads and other alarming lines all day,
and a line logged whatever happens explains little of a failure."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from observe import provenance
from observe.store import Store
from observe.store.layout import day_of, period
from queries import jobs
from queries.causes import Causes
from queries.search import search

SCHEMA = {"node": pl.String, "kind": pl.String, "code": pl.Int32, "cause_id": pl.UInt32, "trusted": pl.Boolean,
          "succeeded": pl.UInt32, "hours_share": pl.Float64}
FLEET = {"kind": pl.String, "code": pl.Int32, "cause_id": pl.UInt32, "trusted": pl.Boolean, "fleet": pl.UInt32,
         "fleet_hours_share": pl.Float64}
EVENT = ["kind", "code", "cause_id"]  # what one event is: its kind, code and cause (a corrected error is no uncorrected one)


@dataclass(frozen=True)
class BaseRates:
    """``node`` (node, kind, code, cause_id, trusted, succeeded, hours_share): per node of the run, and ``fleet``
    (kind, code, cause_id, trusted, fleet, fleet_hours_share): on any node, how many jobs that completed each event
    was logged during, and the share of hours it was logged in (of the node's, of every node's)
    since the store's first such event: the chance it shows in any hour, failure or not. ``trusted`` true: counted
    over the lines of trusted routes only, the rates a trusted line is weighed by (what a node user writes with
    ``logger`` during their own jobs cannot make a real fault look like background); false: over every line."""

    node: pl.DataFrame
    fleet: pl.DataFrame


def succeeded_with(store: Store, nodes: list[str], kinds: list[str], since: datetime, until: datetime,
                   min_hours: float, causes: Causes) -> BaseRates:
    """For each event of ``kinds`` between ``since`` and ``until``, the jobs that ran on the node that
    logged it, when it was logged, and completed: per node of ``nodes`` and fleet-wide, over every line and over
    the trusted routes' lines. Jobs come from the store's job index (``observe compact`` or ingest writes it);
    none without one."""
    none = BaseRates(pl.DataFrame(schema=SCHEMA), pl.DataFrame(schema=FLEET))
    if not nodes or not kinds:
        return none
    seen = (search(store, since=since, until=until, kinds=kinds, copies=True)  # whether, not how often
            .select("node", "kind", "code", "ts", "attrs", provenance.trusted().alias("_sure")).drop_nulls(["ts", "node"])
            .sort("ts").collect())
    seen = causes.annotate(seen).select("node", *EVENT, "ts", "_sure")
    if seen.is_empty():
        return none
    first = _first_day(store, since, until)
    covered = max(since, first.replace(tzinfo=since.tzinfo)) if first else since
    completed = jobs.completed_on_nodes(store)
    ok = (completed.filter(pl.col("start") >= since, pl.col("end") <= until).sort("start").collect()
          if completed is not None else pl.DataFrame(schema={"node": pl.String, "job_id": pl.String,
                                                             "start": seen.schema["ts"], "end": seen.schema["ts"]}))
    fleet_nodes = pl.concat([seen.get_column("node"), ok.get_column("node"), pl.Series(nodes)]).n_unique()
    parts = [_rates(lines, ok, nodes, covered, until, fleet_nodes, min_hours, sure)
             for sure, lines in ((False, seen), (True, seen.filter(pl.col("_sure"))))]
    return BaseRates(pl.concat([p[0] for p in parts]).select(list(SCHEMA)).cast(SCHEMA),
                     pl.concat([p[1] for p in parts]).select(list(FLEET)).cast(FLEET))


def _first_day(store: Store, since: datetime, until: datetime) -> datetime | None:
    """The start of the UTC day the store's first event between ``since`` and ``until`` falls in (by
    its files' commits; a file committed before they gave ranges: its partition's start), or None."""
    spans = store.spans()
    starts = [spans[f][0] if f in spans else period(f.parent.name.removeprefix("date="))[0]
              for f in store.files(since=since, until=until)]
    return datetime.fromisoformat(day_of(min(starts))) if starts else None


def _rates(seen: pl.DataFrame, ok: pl.DataFrame, nodes: list[str], covered: datetime, until: datetime, fleet_nodes: int,
           min_hours: float, trusted: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`succeeded_with`'s two frames over the lines ``seen``, marked ``trusted``."""
    node_hours, fleet_hours = _hours_share(seen, covered, until, fleet_nodes, min_hours)
    during = (seen.join_asof(ok, left_on="ts", right_on="start", by="node", strategy="backward", check_sortedness=False)
              .filter(pl.col("ts") <= pl.col("end")))
    jobs_ = pl.col("job_id").n_unique()
    per_node = (node_hours.filter(pl.col("node").is_in(nodes))
                .join(during.group_by("node", *EVENT).agg(jobs_.alias("succeeded")), on=["node", *EVENT],
                      how="left", nulls_equal=True))
    fleet = fleet_hours.join(during.group_by(*EVENT).agg(jobs_.alias("fleet")), on=EVENT, how="left",
                             nulls_equal=True)
    mark = pl.lit(trusted).alias("trusted")
    return per_node.with_columns(mark), fleet.with_columns(mark)


def _hours_share(seen: pl.DataFrame, since: datetime, until: datetime, nodes: int,
                 min_hours: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The share of hours each event was logged in, per node (of that node's hours) and fleet-wide (of
    the hours of the ``nodes`` known: those that logged any of these kinds or ran a completed job),
    from ``since`` (the store's first day, if later) to ``until``: a line a node logs in most of its
    hours shows near any failure by chance, whatever broke."""
    hours = max(min_hours, (until - since).total_seconds() / 3600)  # a share of a few hours says little of the rate
    hourly = seen.select("node", *EVENT, pl.col("ts").dt.truncate("1h").alias("_h")).unique()
    per_node = hourly.group_by("node", *EVENT).agg((pl.len() / hours).clip(0, 1).alias("hours_share"))
    fleet = hourly.group_by(*EVENT).agg((pl.len() / (hours * nodes)).clip(0, 1).alias("fleet_hours_share"))
    return per_node, fleet
