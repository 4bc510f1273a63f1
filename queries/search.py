"""Search: events filtered by time, node (Slurm hostlist), source, kind, job and a message regex."""
from __future__ import annotations

from datetime import datetime

import polars as pl

from observe.schema import SOURCES
from observe.copies import one_per_record
from observe.store import Store

def first_line(text: str | None) -> str:
    """A message's first line, for one-line listings (the consoles show its control characters escaped)."""
    return (text or "").split("\n", 1)[0]


def check_regex(pattern: str) -> str:
    """Return ``pattern`` if polars (Rust regex) accepts it; ValueError with the reason otherwise."""
    try:
        pl.Series([""]).str.contains(pattern)
    except Exception as exc:  # polars raises ComputeError for a bad pattern
        detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ValueError(f"bad regex {pattern!r}: {detail}") from None
    return pattern


def search(store: Store, since: datetime | None = None, until: datetime | None = None,
           nodes: list[str] | None = None, sources: list[str] | None = None, kinds: list[str] | None = None,
           job: str | None = None, grep: str | None = None, undated: bool = False, copies: bool = False) -> pl.LazyFrame:
    """Matching events, oldest first, each record once (:func:`one_per_record`: a kernel line kept in
    both dmesg and the syslog is one event); partitions and row groups outside the filters are not read.

    With ``undated``, events without a time (NCCL INFO lines) match any time range. With ``copies``,
    a record two inputs hold is there twice: for what only asks whether something happened, which a
    copy does not change, and costs less to read.
    """
    unknown = sorted(set(sources or ()) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown source {unknown[0]!r}: stored sources are {', '.join(SOURCES)} "
                         "(nvidia-smi and DCGM output are stored as gpu, Slurm job records as slurm)")
    lf = store.scan(sources=sources, since=since, until=until, undated=undated)
    if nodes:
        lf = lf.filter(pl.col("node").is_in(nodes))
    if kinds:
        lf = lf.filter(pl.col("kind").is_in(kinds))
    if job:
        lf = lf.filter(pl.col("job_id") == job)
    if grep:
        lf = lf.filter(pl.col("message").str.contains(check_regex(grep)))
    return (lf if copies else one_per_record(lf)).sort("ts", "node", "offset", nulls_last=True)
