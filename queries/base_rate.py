"""Does this appear when things work? How many successful jobs an event showed during, on the same
node and anywhere in the fleet: healthy fleets log corrected errors, recovered link flaps and other
alarming lines all day, and a line logged while jobs succeed explains little of a failure."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from observe.store import Store
from queries import jobs
from queries.search import search

SCHEMA = {"node": pl.String, "kind": pl.String, "code": pl.Int32, "succeeded": pl.UInt32}
FLEET = {"kind": pl.String, "code": pl.Int32, "fleet": pl.UInt32}


@dataclass(frozen=True)
class BaseRates:
    """``node`` (node, kind, code, succeeded): per node of the run, and ``fleet`` (kind, code,
    fleet): on any node, how many jobs that completed each event was logged during."""

    node: pl.DataFrame
    fleet: pl.DataFrame


def succeeded_with(store: Store, nodes: list[str], kinds: list[str], since: datetime, until: datetime) -> BaseRates:
    """For each event of ``kinds`` between ``since`` and ``until``, the jobs that ran on the node that
    logged it, when it was logged, and completed: per node of ``nodes`` and fleet-wide. Jobs come
    from the store's job index (``observe compact`` or ingest writes it); none without one."""
    none = BaseRates(pl.DataFrame(schema=SCHEMA), pl.DataFrame(schema=FLEET))
    completed = jobs.completed_on_nodes(store)
    if not nodes or not kinds or completed is None:
        return none
    ok = completed.filter(pl.col("start") >= since, pl.col("end") <= until).sort("start").collect()
    if ok.is_empty():
        return none
    seen = (search(store, since=since, until=until, kinds=kinds, copies=True)  # whether, not how often
            .select("node", "kind", "code", "ts").drop_nulls(["ts", "node"]).sort("ts").collect())
    during = (seen.join_asof(ok, left_on="ts", right_on="start", by="node", strategy="backward", check_sortedness=False)
              .filter(pl.col("ts") <= pl.col("end")))
    jobs_ = pl.col("job_id").n_unique()
    return BaseRates(during.filter(pl.col("node").is_in(nodes)).group_by("node", "kind", "code")
                     .agg(jobs_.alias("succeeded")).cast(SCHEMA),
                     during.group_by("kind", "code").agg(jobs_.alias("fleet")).cast(FLEET))
