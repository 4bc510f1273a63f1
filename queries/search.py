"""Search: events filtered by time, node (Slurm hostlist), source, kind, job and a message regex."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import hostlist
import polars as pl

from observe.schema import SOURCES
from observe.store import Store

RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_span(text: str) -> timedelta:
    """A span like ``90s``, ``30m``, ``2h``, ``7d`` or ``1w``."""
    m = RELATIVE.match(text.strip())
    if not m:
        raise ValueError(f"bad span {text!r}: use a number and a unit, like 90s, 30m, 2h, 7d")
    return timedelta(**{UNITS[m.group(2)]: float(m.group(1))})


def parse_time(text: str, now: datetime | None = None, tz: str = "UTC") -> datetime:
    """An ISO time (in ``tz`` unless it says otherwise) or a relative one like ``2h``/``7d`` (before now)."""
    now = now or datetime.now(timezone.utc)
    if RELATIVE.match(text.strip()):
        return now - parse_span(text)
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"bad time {text!r}: use ISO 8601 (2026-11-22T10:00) or a span like 30m, 2h, 7d") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=ZoneInfo(tz))


def first_line(text: str | None) -> str:
    """A message's first line, for one-line listings (the consoles show its control characters escaped)."""
    return (text or "").split("\n", 1)[0]


def expand_nodes(expr: str) -> list[str]:
    """Expand a Slurm hostlist (``gpu[001-004,010],login1``) into node names."""
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"bad node list {expr!r}: {exc}") from None


def compact_nodes(nodes: list[str]) -> str:
    """Node names as one Slurm hostlist (``gpu[001-004]``); names a hostlist cannot hold (a log's
    host field may carry ``[``, ``]`` or ``,``) are listed as they are, comma separated."""
    try:
        return hostlist.collect_hostlist(nodes)
    except hostlist.BadHostlist:
        return ",".join(sorted(set(nodes)))


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
           job: str | None = None, grep: str | None = None, undated: bool = False) -> pl.LazyFrame:
    """Matching events, oldest first; partitions and row groups outside the filters are not read.

    With ``undated``, events without a time (NCCL INFO lines) match any time range.
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
    return lf.sort("ts", "node", "offset", nulls_last=True)
