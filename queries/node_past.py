"""A node's recent past: a fault that takes a node out (a GPU's uncorrectable error, a fallen-off
GPU), logged before a job started there and with no recovery since, explains the job's failure on
that node however long ago it was logged. The restart that lands on the same bad node fails with a
misleading error; the previous job's kernel log holds the explanation."""
from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from observe import provenance
from observe.schema import POLARS_SCHEMA
from observe.store import Store
from queries import jobs
from queries.search import search


def unrecovered(store: Store, nodes: list[str], kinds: list[str], since: datetime, until: datetime,
                recovered_by: list[str], slack: timedelta = timedelta(seconds=5)) -> pl.DataFrame:
    """Events of ``kinds`` on ``nodes`` between ``since`` and ``until`` that nothing ended by ``until``
    (give or take ``slack``: a node returned to service and given a job the same second, clocks that
    disagree): no event of ``recovered_by`` on the node after them (a reboot, a driver reload, an
    operator's all-clear) and no job on the node that completed after them (the node worked through it,
    or again). The last such event per (node, kind, code, gpu). From any route: a fault a user could
    have written is evidence (explain's verdict on it is to verify), never a trigger. A recovery a user
    could have written (``logger -t kernel 'Linux version ...'``) ends only such faults: never one a
    trusted route carried, which the epilog acts on."""
    if not nodes or not kinds:
        return pl.DataFrame(schema=POLARS_SCHEMA)
    faults = (search(store, since=since, until=until, nodes=nodes, kinds=kinds, copies=True)  # whether
              .filter(pl.col("ts").is_not_null()).collect())
    if faults.is_empty():
        return faults
    ends = (search(store, since=since, until=until + slack, nodes=nodes, kinds=recovered_by, copies=True)
            .select("node", "ts", provenance.trusted().alias("_trusted")).drop_nulls().collect())
    completed = jobs.completed_on_nodes(store)
    if completed is not None:  # Slurm's own record that a job ran there to completion
        ok = (completed.filter(pl.col("end") >= since, pl.col("end") < until + slack, pl.col("node").is_in(nodes))
              .select("node", pl.col("end").alias("ts"), pl.lit(True).alias("_trusted")).collect())
        ends = pl.concat([ends, ok.cast(ends.schema)])
    last_end = ends.group_by("node").agg(pl.col("ts").filter("_trusted").max().alias("_ended"),
                                         pl.col("ts").max().alias("_ended_any"))
    ended = (pl.col("_ended") >= pl.col("ts")) | (~provenance.trusted() & (pl.col("_ended_any") >= pl.col("ts")))
    return (faults.join(last_end, on="node", how="left").filter(~ended.fill_null(False)).drop("_ended", "_ended_any")
            .sort("ts").unique(["node", "kind", "code", "gpu"], keep="last", maintain_order=True))
