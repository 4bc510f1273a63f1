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
                recovered_by: list[str], worked: timedelta, slack: timedelta = timedelta(seconds=5)) -> pl.DataFrame:
    """Events of ``kinds`` on ``nodes`` between ``since`` and ``until`` that nothing ended by ``until``
    (give or take ``slack``: a node returned to service and given a job the same second, clocks that
    disagree): no event of ``recovered_by`` on the node after them (a reboot, a driver reload, an
    operator's all-clear), and no run Slurm's trusted records tell of that started on it after them and completed or
    ran longer than ``worked`` (a node left broken fails a run as soon as the run touches it; one that ran that long
    found the node working; a job already running when the fault came ends when its user's code says, whatever the node). The last such event
    per (node, kind, code, gpu) that a trusted route carried, where one did: a later copy a user wrote takes no trusted
    fault's place. From any route: a
    fault a user could have written is evidence (explain's verdict on it is to verify), never a trigger. A recovery a user
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
    ran = jobs.runs_on_nodes(store)
    if ran is not None:  # Slurm's own record that a job ran there to completion, or long enough to find it working
        # a run that started after a fault and completed, or ran longer than `worked`, found the node working: it ends
        # what came before its start (one already running when the fault came proves nothing: its user decides its end)
        working = pl.when(pl.col("state").str.starts_with("COMPLETED") | (
            (pl.col("end") - pl.col("start") > worked) & (pl.col("start") + worked < until))).then(pl.col("start"))
        ok = (ran.filter(pl.col("node").is_in(nodes), pl.col("trusted"))
              .select("node", working.alias("ts"), pl.lit(True).alias("_trusted"))
              .filter(pl.col("ts") >= since, pl.col("ts") < until + slack).collect())
        ends = pl.concat([ends, ok.cast(ends.schema)])
    last_end = ends.group_by("node").agg(pl.col("ts").filter("_trusted").max().alias("_ended"),
                                         pl.col("ts").max().alias("_ended_any"))
    ended = (pl.col("_ended") >= pl.col("ts")) | (~provenance.trusted() & (pl.col("_ended_any") >= pl.col("ts")))
    return (faults.join(last_end, on="node", how="left").filter(~ended.fill_null(False)).drop("_ended", "_ended_any")
            .sort(provenance.trusted(), "ts").unique(["node", "kind", "code", "gpu"], keep="last", maintain_order=True))
