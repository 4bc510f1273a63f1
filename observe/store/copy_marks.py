"""Each row's ``copy_of``, written into the table so that any engine counts each record once.

observe reads each record once (:func:`observe.copies.one_per_record`: a kernel line kept by dmesg
and by the syslog is one event); DuckDB, Spark or polars reading the Delta table see every row. So
the store writes the same decision into the rows: ``copy_of`` is null for the row kept and names the
kept row's input for each copy, and ``count(*) WHERE copy_of IS NULL`` is observe's count.

A new input can change what older rows are (a dmesg that arrives after its syslog wins over the
syslog's rows, which were kept until then; a row can join two clusters), so marks are brought up to
date after the table changes. What changed is a set of windows, a source and a time range: each file
added since the version last marked (``<root>/copies.json``) gives the times of its rows on each day it
has rows on, and callers name theirs (the files a compaction merged, whose dropped duplicates change an
input's count, and those retention or repair dropped, each with a day on either side; retention's first
day kept). The rows in a window take their marks, read with their source's rows within a day of them
and its rows without a time (every dated row of the source where those carry kernel uptime stamps,
which tie them to copies at any time); the other rows read change only in a cluster with a marked
row. A file whose marks change is rewritten and swapped for the old one in one commit that changes no
data, as compaction swaps files. A store that never had marks (an older observe's) is marked whole
the first time.

Windows, not partitions: a partition is a month (:mod:`observe.store.layout`), and an ingest every few
minutes that read its month again would read a fleet's month each time.

Runs under the store's compaction lock (only its holder removes files). A cluster that chains over
more than a day beyond the files read is marked from what was read: real copies never do, a user's
own job output can (its lines then count differently outside observe; docs/security.md, attack-24).
"""
from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple

import polars as pl

from observe.copies import (BUCKET_US, KEY, SOUGHT_ROWS, STREAM, UPTIME, marks_by_stream, near_another_input,
                            settled, sharing_a_stamp)
from observe.store.layout import DAY_US, UNKNOWN_DATE, fresh_name, period
from observe.store.table import partition_of

MARKED = "copies.json"  # the table version whose changes are marked, and the windows still due
REWRITE_ROWS = 2_000_000  # rows one pass rewrites at most (at least one file); the rest stays due for the next
NEAR_US = DAY_US  # a marked file is read with its source's files this close in time
NEAR_PAD_US = BUCKET_US  # how far past a time range the buckets of its rows reach (observe/copies.py)
CHUNK_ROWS = SOUGHT_ROWS  # rows sought for copies at a time
HOUR_US = 3_600_000_000
WITHIN_TERMS = 64  # time ranges a filter tests one by one (see _within)
READ_DAYS = 4096  # days a read around more ranges keeps to (see _within); a read of more keeps their merged ranges

# A source and a time range, microseconds since the epoch, both ends in; (source, None, None): its rows without a time
Window = tuple[str, "int | None", "int | None"]


def bring_up_to_date(store, also: Iterable[Window] = (), budget: int | None = None) -> int:
    """Mark the files added since the last marked version, ``also``, and, without a ``budget``, the windows a
    pass left due; the caller holds the store's compaction lock. Returns how many files were rewritten.

    A pass rewrites at most ``budget`` rows (an ingest's: a few times what it stored), else
    REWRITE_ROWS and at least one file (compaction, retention, repair: what makes progress). Lines
    that keep turning other rows into copies and back (a user's two copies of their own output, one
    growing, then the other) then cost an ingest little more than they are, a compaction at most
    REWRITE_ROWS; their marks lag meanwhile (observe's own reads do not use them)."""
    version, rels = store.table.snapshot()
    if version < 0:
        return 0
    last, due = _state(store)
    added = None if last is None or last > version else store.table.added(last, version)
    changed = {window(rel, None) for rel in rels} if added is None else _added(store, added)
    # an ingest's pass (a budget of its own rows) marks what it added and leaves what is due to a compaction's:
    # reading a month left due on every ingest cost each one-line ingest 7 s at 2,560 nodes
    kept_due = due if budget is not None else set()
    rewritten, left = mark(store, changed | set(also) | (due - kept_due), REWRITE_ROWS if budget is None else budget,
                           budget is None)
    state = {"version": version,
             "due": sorted(left | kept_due, key=lambda w: (w[0], w[1] is not None, w[1] or 0, w[2] or 0))}
    store.place.put(store.root / MARKED, json.dumps(state).encode())
    return rewritten


def window(rel: str, span: tuple[int, int] | None) -> Window:
    """The window of a file (``source=S/date=P/name`` below the table): its time range where its commit
    gives one, else its partition's (all of a day or a month; none for the undated one)."""
    part = partition_of(rel)
    return (part["source"], *(span or period(part["date"]) or (None, None)))


def _added(store, added: dict[str, tuple[int, int] | None]) -> set[Window]:
    """The windows of the files added: of each one still live, the times of its rows on each UTC day
    it has rows on (a user's input with a line on the 1st and one on the 30th is two short windows,
    not a month), and its rows without a time; of one gone since (compacted), its commit's range."""
    live = {store.uri(f): (source, f) for source, _, f in store.live() if f.relative_to(store.events).as_posix() in added}
    out = {window(rel, span) for rel, span in added.items() if store.uri(store.events / rel) not in live}
    if live:
        at = pl.col("ts").dt.epoch("us")
        days = (store.scan_files([f for _, f in live.values()], paths_as="_p").group_by("_p", at // DAY_US)
                .agg(at.min().alias("lo"), at.max().alias("hi")).collect(engine="streaming"))
        out |= {(live[uri][0], lo, hi) for uri, _, lo, hi in days.iter_rows()}
    return out


def removed(store, files: Iterable[Path], spans: dict[Path, tuple[int, int]] | None = None) -> set[Window]:
    """What removing ``files`` (live until then: ``spans`` as :meth:`Store.spans` gave them before)
    leaves to mark: their windows (:func:`window`) and NEAR_US on either side, where the rows that
    were copies of theirs are (a copy is in no cluster with what is left: it is marked as its file's)."""
    spans = store.spans() if spans is None else spans
    out = set()
    for f in files:
        source, lo, hi = window(f.relative_to(store.events).as_posix(), spans.get(f))
        out.add((source, None, None) if lo is None else (source, lo - NEAR_US, hi + NEAR_US))
    return out


def mark(store, touched: set[Window], budget: int, one: bool) -> tuple[int, set[Window]]:
    """Set ``copy_of`` in the rows of the ``touched`` windows (and in the rows near them that share a
    cluster with one), reading their source's rows within NEAR_US of them and its rows without a time;
    the files whose marks change are swapped in one commit, until ``budget`` rows were rewritten (the
    first file whatever its rows, with ``one``). Returns the files rewritten and the windows left due."""
    if not touched:
        return 0, set()
    asked = reach(store, touched)
    groups = _scope(store.live(), store.spans(), asked)
    files = [f for _, group in groups for f in group]
    if not files:
        return 0, set()
    rows = dict((store.events / rel, n) for rel, _, n, _ in store.table.files())
    starts = dict(zip(files, accumulate((rows[f] for f in files), initial=0)))  # each file's first _row
    # each source's files, their rows numbered as in the whole scope, then only those near what changed
    scans = [store.scan_files(group).with_row_index("_row", offset=starts[group[0]]).filter(asked[source].read())
             for source, group in groups]
    scan = pl.concat(scans)
    mine = pl.any_horizontal([pl.col("source").eq(source) & asked[source].mine() for source, _ in groups])
    # the rows that may be copies, from narrow columns, some hours at a time (memory is theirs, not the scope's)
    narrow = scan.select("_row", "ts", *STREAM, "file_id")
    # each its own pass: collected together, the scope they share was held whole (16 GB at 2,560 nodes)
    untimed = scan.filter(pl.col("ts").is_null() & UPTIME.fill_null(False)).select("_row").collect(engine="streaming")
    marked = (scan.filter(pl.col("copy_of").is_not_null()).select("_row", "ts", "source", "copy_of", mine.alias("_mine"))
              .collect(engine="streaming"))
    stamped = sharing_a_stamp(scan).collect(engine="streaming")
    candidates = pl.concat([*_near(narrow, _chunks(files, store.spans(), rows)), untimed, stamped])
    if not candidates.height and not marked.height:
        return 0, set()
    some = candidates.get_column("_row").implode()
    full = scan.filter(pl.col("_row").is_in(some)).select("_row", "ts", *KEY, "attrs", "route", "file_id", "copy_of",
                                                          mine.alias("_mine")).collect(engine="streaming")
    # where marks change: the rows of the touched windows, and the rows of clusters one of them is in
    first = pl.Series([starts[f] for f in files], dtype=pl.Int64)
    base = (pl.concat([full.select("_row", "ts", "source", "copy_of", "_mine"), marked]).unique("_row")
            .with_columns((pl.lit(first).search_sorted(pl.col("_row").cast(pl.Int64), side="right") - 1).alias("_file")))
    found = marks_by_stream(full).lazy().join(full.lazy().select("_row", "_mine"), on="_row")
    changed = (settled(base.lazy(), found).filter(pl.col("copy_of").ne_missing(pl.col("_want")))
               .select("_file", "_row", "ts", "source", "_want").collect())
    replaced, temps, left, spent = [], [], set(), 0
    for (i,), here in sorted(changed.partition_by("_file", as_dict=True).items()):
        old = files[i]
        if spent + rows[old] > budget and (spent or not one):
            at = here.get_column("ts").dt.epoch("us")
            left.add((here.item(0, "source"), at.min(), at.max()))  # both None: rows without a time
            continue
        spent += rows[old]
        lo = starts[old]
        df = store.scan_files([old]).collect()
        copy_of = df.get_column("copy_of").scatter(here.get_column("_row") - lo, here.get_column("_want"))
        temps.append(store.write_file(df.with_columns(copy_of), old.parent, fresh_name(old.name),
                                      compacted=old.name.startswith("c-"), durable=False))
        replaced.append(old)
    store.table.replace(replaced, store.durable(temps))
    return len(replaced), left


def _chunks(files: list[Path], spans: dict[Path, tuple[int, int]], rows: dict[Path, int]) -> list[tuple[int, int]]:
    """Time ranges (microseconds, ``[lo, hi)``) of whole hours that hold the dated rows of ``files``, about
    CHUNK_ROWS each (at least an hour): each file's rows spread evenly over the hours of its range (else its
    partition's). A few lines in each of many months make one range, not one a month."""
    per_hour: dict[int, float] = {}
    for f in files:
        r = spans.get(f) or period(f.parent.name.removeprefix("date="))
        if r is not None:
            first, last = r[0] // HOUR_US, r[1] // HOUR_US
            for hour in range(first, last + 1):
                per_hour[hour] = per_hour.get(hour, 0.0) + rows.get(f, 0) / (last - first + 1)
    out: list[tuple[int, int]] = []
    held = 0.0
    for hour in sorted(per_hour):
        if out and held + per_hour[hour] <= CHUNK_ROWS:
            out[-1] = (out[-1][0], (hour + 1) * HOUR_US)
            held += per_hour[hour]
        else:
            out.append((hour * HOUR_US, (hour + 1) * HOUR_US))
            held = per_hour[hour]
    return out


def _near(narrow: pl.LazyFrame, chunks: list[tuple[int, int]]) -> list[pl.DataFrame]:
    """:func:`~observe.copies.near_another_input`'s rows (``_row``) of each time range of ``chunks``, one
    range at a time, each read with the seconds either side its buckets reach: a month's partition of a
    2,560-node fleet, 265 million rows, grouped at once held 19 GB."""
    at = pl.col("ts").dt.epoch("us")
    return [near_another_input(narrow.filter(at >= lo - NEAR_PAD_US, at < hi + NEAR_PAD_US))
            .filter(at >= lo, at < hi).select("_row").collect(engine="streaming") for lo, hi in chunks]


class Reach(NamedTuple):
    """What marking one source's windows reaches: the times it reads (``near``: the windows and NEAR_US on
    either side; all of them where its rows without a time were touched and carry kernel uptime stamps,
    which tie them to copies at any time), the windows' own (``times``) and whether its rows without a
    time were touched (``undated``). Plain data, so that a search that carries it travels to Ray's workers."""
    source: str
    near: tuple[tuple[int, int], ...]
    times: tuple[tuple[int, int], ...]
    undated: bool

    def read(self) -> pl.Expr:
        """Of the source's rows, those read: ``near``'s, and the rows without a time."""
        return _within(list(self.near), exact=False) | pl.col("ts").is_null()

    def mine(self) -> pl.Expr:
        """Of the source's rows, those marked: the windows', and the rows without a time where those were touched."""
        return _within(list(self.times)) | (pl.col("ts").is_null() if self.undated else pl.lit(False))


def reach(store, touched: set[Window]) -> dict[str, Reach]:
    """:class:`Reach` of each source of the ``touched`` windows."""
    by_source: dict[str, list[tuple[int, int]]] = {}
    undated = set()
    for source, lo, hi in touched:
        by_source.setdefault(source, [])
        if lo is None or hi is None:
            undated.add(source)
        else:
            by_source[source].append((lo, hi))
    stamped = _stamped(store, undated)
    out = {}
    for source, ranges in by_source.items():
        times = _merged(ranges)
        near = [(-1, 1 << 62)] if source in stamped else _merged([(lo - NEAR_US, hi + NEAR_US) for lo, hi in times])
        out[source] = Reach(source, tuple(near), tuple(times), source in undated)
    return out


def _stamped(store, sources: set[str]) -> set[str]:
    """Those of ``sources`` whose rows without a time include kernel uptime stamps (a dmesg read
    without its boot time): only theirs tie to dated copies at any time."""
    undated = [f for source, name, f in store.live() if source in sources and period(name) is None]
    if not undated:
        return set()
    found = store.scan_files(undated).filter(pl.col("ts").is_null() & UPTIME.fill_null(False)).select("source").unique()
    return set(found.collect(engine="streaming").get_column("source").to_list())


def _within(ranges: list[tuple[int, int]], exact: bool = True) -> pl.Expr:
    """Rows whose time lies in one of the sorted, disjoint ``ranges`` (microseconds, both ends in). Up to
    WITHIN_TERMS ranges are tested one by one, which polars streams and prunes row groups by; more are looked
    up, which it cannot stream (a month's scope held whole: 3 GB at 53 million rows), or, not ``exact``,
    merged into WITHIN_TERMS ranges that hold them all (what a pass reads around its windows), kept to the
    days the ranges are on where those are at most READ_DAYS (a user's lines every third day for years
    merged into ranges that held all of their source)."""
    if not ranges:
        return pl.lit(False)
    at = pl.col("ts").dt.epoch("us")
    if len(ranges) <= WITHIN_TERMS:
        return pl.any_horizontal([at.is_between(lo, hi) for lo, hi in ranges]).fill_null(False)
    if not exact:  # merged ranges prune row groups; the days the ranges are on keep what is read to them
        coarse = _within(_fewer(ranges, WITHIN_TERMS))
        if sum(hi // DAY_US - lo // DAY_US + 1 for lo, hi in ranges) > READ_DAYS:
            return coarse
        days = sorted({d for lo, hi in ranges for d in range(lo // DAY_US, hi // DAY_US + 1)})
        return coarse & at.floordiv(DAY_US).is_in(days).fill_null(False)
    i = pl.lit(pl.Series([lo for lo, _ in ranges], dtype=pl.Int64)).search_sorted(at, side="right").cast(pl.Int64) - 1
    end = pl.lit(pl.Series([hi for _, hi in ranges], dtype=pl.Int64)).gather(i.clip(0))
    return ((i >= 0) & (at <= end)).fill_null(False)


def _fewer(ranges: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The sorted, disjoint ``ranges`` as ``n``, the narrowest gaps between them closed."""
    kept = sorted(sorted(range(1, len(ranges)), key=lambda i: ranges[i][0] - ranges[i - 1][1])[len(ranges) - n:])
    starts = [0, *kept]
    return [(ranges[a][0], ranges[b - 1][1]) for a, b in zip(starts, [*kept, len(ranges)])]


def _scope(live: list[tuple[str, str, Path]], spans: dict[Path, tuple[int, int]],
           asked: dict[str, Reach]) -> list[tuple[str, list[Path]]]:
    """The files a pass reads, by source: those whose range meets what it reads of the source
    (:class:`Reach`), and all of the source's files without a time."""
    groups: dict[str, list[Path]] = {}
    for source, name, f in live:
        if source in asked and ((r := spans.get(f) or period(name)) is None or _meets(asked[source].near, r)):
            groups.setdefault(source, []).append(f)
    return [(source, sorted(files, key=lambda f: f.parent.name == f"date={UNKNOWN_DATE}")) for source, files in groups.items()]


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` (both ends in) as sorted, disjoint ranges covering the same times."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _meets(merged: list[tuple[int, int]], r: tuple[int, int]) -> bool:
    """Whether the range ``r`` (both ends in) meets one of the sorted, disjoint ``merged``."""
    i = bisect_left(merged, (r[0],)) - 1  # the last range starting before r, then the ones after
    return any(lo <= r[1] and r[0] <= hi for lo, hi in merged[max(i, 0):i + 2])


def stale(store) -> tuple[Reach, ...] | None:
    """Where rows' marks may be out of date, as what marking it would reach (:class:`Reach`): the windows a
    pass left due and those of the files added since the version last marked (an ingest whose budget ran
    out, one that ended meanwhile, a compaction between its commit and its pass); () where every mark is
    current, None where the store was never marked or its log no longer holds what came since. A reader
    reads the marks elsewhere and decides again here (:func:`observe.copies.one_per_record`), which costs
    what is stale, not the store."""
    version, _ = store.table.snapshot()
    if version < 0:
        return ()
    last, due = _state(store)
    if last is None or last > version:
        return None
    added = store.table.added(last, version)
    if added is None:  # the log no longer holds what came since: every row's mark may be stale
        return None
    return tuple(reach(store, _added(store, added) | due).values()) if added or due else ()


def _state(store) -> tuple[int | None, set[Window]]:
    """The version last marked (None: never, or a damaged record: mark everything) and the windows due
    (an older observe's due partitions as their days')."""
    try:
        state = json.loads(store.place.read_bytes(store.root / MARKED))
        due = {(str(w[0]), *((w[1], w[2]) if len(w) == 3 else (period(str(w[1])) or (None, None)))) for w in state.get("due", [])}
        if not all(lo is None or (isinstance(lo, int) and isinstance(hi, int)) for _, lo, hi in due):
            raise ValueError("a window's times are not integers")
        return int(state["version"]), due
    except (FileNotFoundError, ValueError, KeyError, TypeError, IndexError):
        return None, set()
