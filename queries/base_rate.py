"""Does this appear when things work? How many successful jobs an event showed during, on the same
node: healthy fleets log corrected errors, recovered link flaps and other alarming lines all day,
and a line that a node also logs while its jobs succeed explains little of a failure."""
from __future__ import annotations

from datetime import datetime

import polars as pl

from observe.store import Store
from queries import jobs
from queries.search import search

SCHEMA = {"node": pl.String, "kind": pl.String, "code": pl.Int32, "succeeded": pl.UInt32}


def succeeded_with(store: Store, nodes: list[str], kinds: list[str], since: datetime, until: datetime) -> pl.DataFrame:
    """(node, kind, code, succeeded): for each event of ``kinds`` on ``nodes`` between ``since`` and
    ``until``, the number of jobs that ran on that node when it was logged and completed. Jobs come
    from the store's job index (``observe compact`` or ingest writes it); none without one."""
    path = jobs.index_path(store)
    if not nodes or not kinds or not path.exists():
        return pl.DataFrame(schema=SCHEMA)
    ok = (pl.scan_parquet(path)
          .filter(pl.col("state").str.starts_with("COMPLETED"), pl.col("start") >= since, pl.col("end") <= until)
          .explode("nodes").filter(pl.col("nodes").is_in(nodes))
          .select(pl.col("nodes").alias("node"), "job_id", "start", "end").sort("start").collect())
    if ok.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    seen = (search(store, since=since, until=until, nodes=nodes, kinds=kinds)
            .select("node", "kind", "code", "ts").drop_nulls(["ts", "node"]).sort("ts").collect())
    during = (seen.join_asof(ok, left_on="ts", right_on="start", by="node", strategy="backward", check_sortedness=False)
              .filter(pl.col("ts") <= pl.col("end")))
    return (during.group_by("node", "kind", "code").agg(pl.col("job_id").n_unique().alias("succeeded"))
            .cast(SCHEMA))
