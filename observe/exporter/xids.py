"""The Xid counter (``observe_gpu_xid_total``): each Xid record once, though a node may keep it in dmesg and
the syslog, or the journal and /dev/kmsg, and its copies reach the store in different refreshes.

The Xid rows of the last COPY_HORIZON are kept; each refresh counts, per series, the records
(:func:`observe.copies.one_per_record`) of the kept rows with the new ones minus those of the kept rows
alone. A copy that arrives later than COPY_HORIZON after its record is counted again.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import polars as pl

from observe.copies import one_per_record

COPY_HORIZON = timedelta(days=1)
SERIES = ("node", "code", "action")


class XidCounter:
    """Xid records per (node, code, action) and the newest time of each."""

    def __init__(self) -> None:
        self.counts: dict[tuple, int] = defaultdict(int)
        self.newest: dict[tuple, float] = {}
        self.recent: pl.DataFrame | None = None  # rows of the last COPY_HORIZON, already counted

    def add(self, rows: pl.DataFrame) -> None:
        """Count new ``gpu_xid`` rows (events with a node)."""
        if rows.is_empty():
            return
        rows = rows.with_columns(pl.col("code").cast(pl.String).fill_null("unknown").alias("_code"),
                                 pl.col("attrs").str.json_path_match("$.action").fill_null("unknown").alias("_action"))
        both = rows if self.recent is None else pl.concat([self.recent, rows], how="vertical_relaxed")
        before, after = _records(self.recent), _records(both)
        grown = after.join(before, on=list(SERIES), how="left").select(
            *SERIES, (pl.col("n") - pl.col("n_right").fill_null(0)).clip(0).alias("n"))
        for *key, n in grown.iter_rows():
            self.counts[tuple(key)] += n
        for *key, ts in rows.group_by("node", "_code", "_action").agg(pl.col("ts").max()).iter_rows():
            if ts is not None:
                self.newest[tuple(key)] = max(ts.timestamp(), self.newest.get(tuple(key), 0.0))
        horizon = both.get_column("ts").max()
        self.recent = both if horizon is None else both.filter(pl.col("ts").is_null()
                                                                | (pl.col("ts") >= horizon - COPY_HORIZON))


def _records(rows: pl.DataFrame | None) -> pl.DataFrame:
    if rows is None:
        return pl.DataFrame(schema={"node": pl.String, "code": pl.String, "action": pl.String, "n": pl.UInt32})
    return (one_per_record(rows.lazy()).group_by(pl.col("node"), pl.col("_code").alias("code"),
                                                pl.col("_action").alias("action"))
            .agg(pl.len().alias("n")).collect())
