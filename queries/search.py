"""Search: events filtered by time, node (Slurm hostlist), source, kind, job and a message regex."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from observe.schema import SOURCES
from observe.copies import BUCKET_US, one_per_record
from observe.store import MARK, Store
from observe.store.copy_marks import Reach

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


@dataclass(frozen=True)
class Match:
    """What a search asks for: the filters and whether copies of a record are kept (``marked``: as the
    store's marks say, each record at its kept row's time, and decided from the rows read where the marks
    are stale; None: decided from the rows read everywhere). Split in two so
    that an engine can read a share of the store at a time (:meth:`rows`) and put a node's rows
    together before the rest (:meth:`events`)."""

    since: datetime | None = None
    until: datetime | None = None
    nodes: list[str] | None = None
    sources: list[str] | None = None
    kinds: list[str] | None = None
    job: str | None = None
    grep: str | None = None
    undated: bool = False
    copies: bool = False
    marked: tuple[Reach, ...] | None = None  # where the store's copy marks are stale (copy_marks.stale; (): nowhere)
    ordered: bool = True  # events oldest first; an analysis whose result no order changes (counts) skips the sort

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sources or ()) - set(SOURCES))
        if unknown:
            raise ValueError(f"unknown source {unknown[0]!r}: stored sources are {', '.join(SOURCES)} "
                             "(nvidia-smi and DCGM output are stored as gpu, Slurm job records as slurm)")
        if self.grep:
            check_regex(self.grep)

    def files(self, store: Store) -> list:
        """The live segments that can hold matching events (partition pruning), or the rows read with them."""
        since, until = self._read_from()
        return store.files(self.sources, since, until, self.undated)

    def rows(self, store: Store, files: list) -> pl.LazyFrame:
        """The matching rows of ``files`` (row groups outside the filters are not read), copies and all;
        where copies are decided, those rows a bucket past the time range too (:meth:`_read_from`)."""
        hybrid = bool(self.marked) and not self.copies
        since, until = self._read_from()
        lf = store.events_in(files, since, until, self.undated, kept=self.marked is not None and not self.copies,
                             kinds=self.kinds, stale=self._stale() if hybrid else None)
        if hybrid and (since, until) != (self.since, self.until):
            lf = lf.filter(self._timed() | self._stale())  # past the range, only what is decided
        if self.nodes:
            lf = lf.filter(pl.col("node").is_in(self.nodes))
        if self.kinds:
            lf = lf.filter(pl.col("kind").is_in(self.kinds))
        if self.job:
            lf = lf.filter(pl.col("job_id") == self.job)
        if self.grep:
            lf = lf.filter(pl.col("message").str.contains(self.grep))
        return lf

    def events(self, rows: pl.LazyFrame) -> pl.LazyFrame:
        """Matching rows as events, oldest first (unless not ``ordered``), each record once unless ``copies``
        (a node's copies are all among its own rows: rows of whole nodes give the events of those nodes)."""
        if self.copies or self.current:
            events = rows
        elif self.marked is None:
            events = one_per_record(rows).filter(self._timed())
        else:  # the marks read where current, decided again where stale
            stale = self._stale()
            marked = rows.filter(stale).rename({MARK: "copy_of"})
            events = pl.concat([rows.filter(~stale).drop(MARK),
                                one_per_record(marked, mine=self._stale(mine=True)).drop("copy_of").filter(self._timed())])
        return events.sort(*ORDER, nulls_last=True) if self.ordered else events

    def _read_from(self) -> tuple[datetime | None, datetime | None]:
        """The time range read: where copies are decided from the rows read, a bucket either side of the one
        asked for, so that a record whose copies a bound falls between counts where its kept row lies, as
        the store's marks count it (:data:`observe.copies.BUCKET_US`)."""
        if self.copies or self.current:
            return self.since, self.until
        pad = timedelta(microseconds=BUCKET_US)
        return (self.since and self.since - pad), (self.until and self.until + pad)

    def _timed(self) -> pl.Expr:
        """Rows within the time range asked for (and those without a time, with ``undated``)."""
        keep, ts = pl.col("ts").is_null() if self.undated else pl.lit(False), pl.col("ts")
        after = keep | (ts >= self.since) if self.since else pl.lit(True)
        return after & (keep | (ts < self.until) if self.until else pl.lit(True))

    @property
    def current(self) -> bool:
        """Whether the store's copy marks are read everywhere (none is stale)."""
        return self.marked == ()

    def _stale(self, mine: bool = False) -> pl.Expr:
        """The rows read to decide the stale marks again, or (``mine``) those whose marks are stale."""
        return pl.any_horizontal([pl.col("source").eq(r.source) & (r.mine() if mine else r.read())
                                  for r in self.marked or ()])


ORDER = ("ts", "node", "offset", "file_id", "kind")  # events' order: oldest first, and total (rows of one
# node at one time from several inputs, or two events of one line, come out the same way whichever engine read them)


def search(store: Store, since: datetime | None = None, until: datetime | None = None,
           nodes: list[str] | None = None, sources: list[str] | None = None, kinds: list[str] | None = None,
           job: str | None = None, grep: str | None = None, undated: bool = False, copies: bool = False,
           marked: tuple[Reach, ...] | None = None) -> pl.LazyFrame:
    """Matching events, oldest first, each record once (:func:`one_per_record`: a kernel line kept in
    both dmesg and the syslog is one event); partitions and row groups outside the filters are not read.

    With ``undated``, events without a time (NCCL INFO lines) match any time range. With ``copies``,
    a record two inputs hold is there twice: for what only asks whether something happened, which a
    copy does not change, and costs less to read. With ``marked`` (:func:`copy_marks.stale`), the
    store's copy marks are read where they are current instead of deciding again (:class:`Match`).
    """
    match = Match(since, until, nodes, sources, kinds, job, grep, undated, copies, marked)
    return match.events(match.rows(store, match.files(store)))


def first(events: pl.LazyFrame, rows: int | None = None) -> pl.DataFrame:
    """The first ``rows`` events (all with None): a search as an analysis an engine runs."""
    return (events.head(rows) if rows else events).collect()


def count(events: pl.LazyFrame, by: list[str]) -> pl.DataFrame:
    """How many events of each ``by`` value: a count as an analysis an engine runs (on node buckets, a bucket's)."""
    return events.group_by(by).agg(pl.len().alias("events")).collect()


def counts(buckets: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The buckets' counts summed (on Ray each bucket counted its own nodes), most first, then by ``by``."""
    return (buckets.group_by(by).agg(pl.col("events").sum().cast(pl.Int64))
            .sort(["events", *by], descending=[True, *[False] * len(by)], nulls_last=True))
