"""The Xid counters: each Xid record once, though a node may keep it in dmesg and the syslog, or the
journal and /dev/kmsg, and its copies reach the store in different refreshes.

Only records of a trusted route (:mod:`observe.provenance`) are counted with the catalog's action
(``observe_gpu_xid_total``, and the newest time that ``ObserveFatalXid`` reads): a user's ``logger -t
kernel 'NVRM: Xid ...'`` lands in the syslog and is counted apart, without an action, as evidence. A
code outside NVIDIA's catalog (collectors/rules/xid.toml, with a site's entries) is ``other``, so
made-up codes cannot make series; the action is one the catalog gives, or ``unknown``.

The Xid rows of the last COPY_HORIZON are kept; each refresh counts, per series, the records
(:func:`observe.copies.one_per_record`, where a trusted copy wins) of the kept rows with the new ones
minus those of the kept rows alone. A copy that arrives later than COPY_HORIZON after its record is
counted again; a record first seen through an untrusted copy stays counted there, and its trusted copy,
when it arrives, is counted with its action.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import polars as pl

from observe import provenance
from observe.copies import one_per_record
from observe.rules import catalog

COPY_HORIZON = timedelta(days=1)
SERIES = ("node", "code", "action", "trusted")


def labels() -> list[pl.Expr]:
    """The ``code`` label (a catalog code, ``other`` or ``unknown``), the ``action`` (the catalog's, which
    ingest attached), and whether the route is ``trusted``."""
    codes = catalog("gpu_xid").get_column("code").cast(pl.String).to_list()
    code = pl.col("code").cast(pl.String)
    return [pl.when(code.is_null()).then(pl.lit("unknown")).when(code.is_in(codes)).then(code)
            .otherwise(pl.lit("other")).alias("_code"),
            pl.col("attrs").str.json_path_match("$.action").fill_null("unknown").alias("_action"),
            provenance.trusted().alias("_trusted")]


class XidCounter:
    """Xid records of trusted routes per (node, code, action) and the newest time of each; those of
    untrusted routes per (node, code)."""

    def __init__(self) -> None:
        self.counts: dict[tuple, int] = defaultdict(int)
        self.newest: dict[tuple, float] = {}
        self.untrusted: dict[tuple, int] = defaultdict(int)
        self.recent: pl.DataFrame | None = None  # rows of the last COPY_HORIZON, already counted
        self.labels = labels()

    def add(self, rows: pl.DataFrame) -> None:
        """Count new ``gpu_xid`` rows (events with a node)."""
        if rows.is_empty():
            return
        rows = rows.with_columns(self.labels)
        both = rows if self.recent is None else pl.concat([self.recent, rows], how="vertical_relaxed")
        before, after = _records(self.recent), _records(both)
        grown = after.join(before, on=list(SERIES), how="left").select(
            *SERIES, (pl.col("n") - pl.col("n_right").fill_null(0)).clip(0).alias("n"))
        for node, code, action, trusted, n in grown.iter_rows():
            if trusted:
                self.counts[(node, code, action)] += n
            else:
                self.untrusted[(node, code)] += n
        for *key, ts in rows.filter("_trusted").group_by("node", "_code", "_action").agg(pl.col("ts").max()).iter_rows():
            if ts is not None:
                self.newest[tuple(key)] = max(ts.timestamp(), self.newest.get(tuple(key), 0.0))
        horizon = both.get_column("ts").max()
        self.recent = both if horizon is None else both.filter(pl.col("ts").is_null()
                                                                | (pl.col("ts") >= horizon - COPY_HORIZON))


def _records(rows: pl.DataFrame | None) -> pl.DataFrame:
    if rows is None:
        return pl.DataFrame(schema={"node": pl.String, "code": pl.String, "action": pl.String, "trusted": pl.Boolean,
                                    "n": pl.UInt32})
    return (one_per_record(rows.lazy()).group_by(pl.col("node"), pl.col("_code").alias("code"),
                                                pl.col("_action").alias("action"), pl.col("_trusted").alias("trusted"))
            .agg(pl.len().alias("n")).collect())
