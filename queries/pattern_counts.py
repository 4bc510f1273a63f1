"""The patterns' baseline, kept: per live segment and hour, the rows of each masked message.

``patterns`` compares a short window with a long baseline (two hours against seven days): counting a
fleet's week of messages again on every call is 11 million rows read and grouped, and 380,000
distinct strings masked, for a few thousand numbers that change only as the store does. Kept in the
derived table ``index/patterns``, partitioned by day (a segment's: the UTC day of its first event), a
segment is counted once: a call counts the segments of its baseline's days the index does not cover
yet (new since the last call, or rewritten: compacted, re-marked) and writes those days anew, without the rows of segments no longer live, as the
notable index does. Rows are whole UTC hours, so a baseline read from here starts on the hour (see
:func:`pieces`); the hour before the window is read from the segments with it.

Counted as a search with current copy marks reads them: dated rows, each record once (``copy_of``
empty), every node. A count is only as good as the masks it was made with, so each row carries the
masks' fingerprint and a change of ``patterns.toml`` counts every segment again. A store this process
cannot write to (another user's, read-only credentials) still gets its answer, counted and not kept.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial

import polars as pl

from observe.store import Store
from observe.store.layout import day_of, segment_name
from observe.store.table import partition_of
from queries.engine import Engine, Order
from queries.patterns import Config, load_config, masked, masked_counts
from queries.search import Match

NAME = "patterns"
SEGMENT = "_segment"  # the live segment (path below the events table) a row counts
HOUR = timedelta(hours=1)
DATE = "date"  # the index's partition, a segment's day (:func:`_days`): a call writes anew only the days it counted
STATS = (DATE, SEGMENT, "hour")  # what the index's log keeps statistics of: never a masked message, which users write
COLUMNS = {SEGMENT: pl.String, "hour": pl.Datetime("us", "UTC"), "masked": pl.String, "n": pl.UInt32, "masks": pl.String}


def fingerprint(config: Config) -> str:
    """What the counts depend on: the masks, in order (16 hex digits)."""
    return hashlib.blake2b(repr(config.masks).encode(), digest_size=8).hexdigest()


def on_the_hour(ts: datetime) -> datetime:
    """``ts`` rounded down to its UTC hour (the index's; a zone half an hour off UTC has other hours):
    where a kept baseline can start or end. A time without a zone is UTC's."""
    utc = ts.astimezone(timezone.utc) if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    return utc.replace(minute=0, second=0, microsecond=0)


def pieces(store: Store, run: Engine, match: Match, start: datetime, span: timedelta,
           counting: Callable[[int], None] = lambda segments: None) -> tuple[list[pl.DataFrame], timedelta, str | None]:
    """:func:`~queries.patterns.masked_counts`' pieces of the window from ``start`` and the ``span``
    before it that ``match`` (from ``start - span``) finds, the baseline's span, and why its kept counts
    could not be read or kept (None when they were, or none were needed).

    A baseline of a day or more takes its whole UTC hours from the index, where the copy marks are
    current and every node is asked for (the index counts all of them); it then starts on the hour at
    or before ``start - span`` (at most an hour, a twenty-fourth, more than asked: a rate's estimate
    the same; reading the part hour instead costs a scan of its day, within whose files rows are not in
    time order), and the hour before the window is read from the segments with it. A shorter baseline
    is read from the segments: at most two days'. ``counting`` is told how many segments are counted
    first, when any are."""
    counted = partial(masked_counts, start=start)
    if (span < timedelta(days=1) or not match.current or match.copies or match.undated or match.nodes or match.kinds
            or match.job or match.grep):
        return [run.by_node(store, match, counted, Order(("masked",)))], span, None
    since, until = on_the_hour(start - span), on_the_hour(start)
    rest = run.by_node(store, replace(match, since=until), counted, Order(("masked",)))
    kept, why = baseline(store, run, match.sources, since, until, counting=counting)
    return [_like(kept, rest), rest], start - since, why


def _like(kept: pl.DataFrame, piece: pl.DataFrame) -> pl.DataFrame:
    """The kept counts as a piece of the baseline alone: no window rows, nodes or example."""
    return kept.select([pl.col(c).cast(t) if c in kept.columns else pl.lit(0 if c == "count" else None, dtype=t).alias(c)
                        for c, t in piece.schema.items()])


def baseline(store: Store, run: Engine, sources: list[str] | None, since: datetime, until: datetime,
             config: Config | None = None,
             counting: Callable[[int], None] = lambda segments: None) -> tuple[pl.DataFrame, str | None]:
    """Per masked message, its rows from ``since`` to ``until`` (both on the hour) in the live segments
    of ``sources`` (all without): ``masked``, ``baseline_count``, and the first and last hour's bounds
    ``_b_first`` and ``_b_last``; and why the index could not be read or kept (None if it was). The
    segments not counted yet are counted where ``run`` reads shares of files (on Ray, all at once), and
    their days of the index written anew."""
    config = config or load_config()
    # every segment of the days the hours fall in (a counted day is counted whole: what refresh keeps)
    days = store.files(sources, on_the_hour(since).replace(hour=0), on_the_hour(until - timedelta(microseconds=1)).replace(
        hour=23, minute=59, second=59, microsecond=999999))
    wanted = {segment_name(store.events, f): f for f in days}
    day = _day_of(store)
    rows, why = _rows(store, config, {day(name) for name in wanted})
    covered = set(rows.filter(pl.col("hour").is_null()).get_column(SEGMENT)) if rows is not None else set()
    new = {name: f for name, f in wanted.items() if name not in covered}
    if new:
        counting(len(new))
    counted = _counted(store, run, list(new.values()), config)
    if new:
        why = _keep(store, rows, counted, {day(name) for name in new}, day) or why
    kept = [rows.filter(pl.col(SEGMENT).is_in(list(wanted)))] if rows is not None else []
    hours = pl.concat([*kept, counted], how="vertical_relaxed").filter(pl.col("hour") >= since, pl.col("hour") < until)
    return (hours.group_by("masked").agg(pl.col("n").sum().cast(pl.UInt32).alias("baseline_count"),
                                        pl.col("hour").min().alias("_b_first"),
                                        (pl.col("hour").max() + HOUR).alias("_b_last"))
            .sort("masked")), why


def refresh(store: Store, run: Engine) -> tuple[int, str | None]:
    """Bring the days the index counts up to date with the live segments: count the segments a compaction
    wrote in place of counted ones, drop the rows of segments no longer live (whole days, after
    retention), so that the next call finds its days counted; returns the segments counted and why the
    index could not be read or kept (None if it was). Nothing before a ``patterns`` call has made the
    index: a store no one asks for patterns costs nothing."""
    config = load_config()
    markers, why = _rows(store, config, None, markers=True)
    if markers is None:
        return 0, why
    covered = dict(markers.select(SEGMENT, DATE).iter_rows())
    day = _day_of(store)
    names = {segment_name(store.events, f): f for _, _, f in store.live()}
    new = {name: f for name, f in names.items() if day(name) in set(covered.values()) and name not in covered}
    touched = {day(name) for name in new} | {covered[name] for name in covered.keys() - names.keys()}
    if not touched:
        return 0, why
    rows, why = _rows(store, config, touched)
    return len(new), _keep(store, rows, _counted(store, run, list(new.values()), config), touched, day) or why


def _day_of(store: Store) -> Callable[[str], str]:
    """A segment's day, the index's partition it is counted in: the UTC day of its first event (its
    commit's range), else its partition's name (undated; committed by an observe before ranges; or
    gone since the table was listed: the next call drops its rows)."""
    spans = {segment_name(store.events, f): span[0] for f, span in store.spans().items()}
    return lambda name: day_of(spans[name]) if name in spans else partition_of(name)["date"]


def _rows(store: Store, config: Config, days: set[str] | None,
          markers: bool = False) -> tuple[pl.DataFrame | None, str | None]:
    """The index's rows of ``days`` (all without) counted with ``config``'s masks (its rows without an hour
    alone: the segments it covers, and the day each is counted in, with ``markers``); None where there is no index of this layout
    (partitioned by day), or one that cannot be read (damaged: a file gone or cut short), then with why:
    the next write replaces it whole."""
    from deltalake.exceptions import DeltaError

    table = store.index(NAME)
    try:
        version, files = table.snapshot()
        if version < 0 or not files or not all(f.startswith(f"{DATE}=") for f in files):
            return None, None
        index = table.scan(None if days is None else [f"{DATE}={d}" for d in days], paths_as="_path")
        if index is None:
            return pl.DataFrame(schema={SEGMENT: pl.String, DATE: pl.String} if markers else COLUMNS), None
        mine = index.filter(pl.col("masks") == fingerprint(config))
        day = pl.col("_path").str.extract(f"/{DATE}=([^/]+)/").alias(DATE)
        read = (mine.filter(pl.col("hour").is_null()).select(SEGMENT, day) if markers else mine.select(list(COLUMNS))).collect()
        return read.cast({c: COLUMNS.get(c, pl.String) for c in read.columns}), None
    except (OSError, DeltaError, pl.exceptions.PolarsError) as exc:
        return None, (f"{store.name}: the baseline's kept counts could not be read ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); counted from the segments")


def _counted(store: Store, run: Engine, files: list, config: Config) -> pl.DataFrame:
    """:func:`_count` of ``files``, in the shares ``run`` reads."""
    return pl.concat([pl.DataFrame(schema=COLUMNS), *run.map_files(store, files, _count, config)], how="diagonal_relaxed")


def _count(store: Store, files: list, config: Config) -> pl.DataFrame:
    """Per segment, hour and masked message: the rows (``n``); and a row with no hour per segment,
    so that one with nothing dated is not read again. A segment at a time (memory: one segment's
    messages and every distinct one's mask); each distinct message masked once (the dear part: the
    masks' regexes run per string, and a fleet's days repeat most of their messages)."""
    mark = pl.lit(fingerprint(config)).alias("masks")
    seen = pl.DataFrame(schema={"message": pl.String, "masked": pl.String})
    parts = [pl.DataFrame(schema=COLUMNS)]
    for f in files:
        rows = store.events_in([f], kept=True).filter(pl.col("ts").is_not_null())
        counts = (rows.group_by(pl.col("ts").dt.truncate("1h").alias("hour"), pl.col("message").fill_null(""))
                  .agg(pl.len().alias("n")).collect(engine="streaming"))
        fresh = counts.select(pl.col("message").unique()).join(seen, on="message", how="anti")
        seen = pl.concat([seen, fresh.with_columns(masked(pl.col("message"), config).alias("masked"))])
        parts.append(counts.join(seen, on="message").group_by("hour", "masked").agg(pl.col("n").sum()).sort("hour", "masked")
                     .select(pl.lit(segment_name(store.events, f)).alias(SEGMENT), "hour", "masked", "n", mark).cast(COLUMNS))
    segments = pl.DataFrame({SEGMENT: [segment_name(store.events, f) for f in files]}, schema={SEGMENT: pl.String})
    return pl.concat([*parts, segments.with_columns(mark)], how="diagonal_relaxed")


def _keep(store: Store, rows: pl.DataFrame | None, counted: pl.DataFrame, days: set[str],
          day: Callable[[str], str]) -> str | None:
    """Write ``days`` of the index anew: the rows of ``rows`` (the index's, of those days at least) of
    segments still live, and ``counted``; the other days are not touched. Without ``rows`` (no index
    to go on) the index is written whole, of ``counted`` alone. Where the store cannot be written to,
    nothing is kept (the next call counts again: a stale index is slower, never wrong) and the reason is
    returned."""
    from deltalake.exceptions import DeltaError

    live = {name: day(name) for name in (segment_name(store.events, f) for _, _, f in store.live())}
    of = pl.col(SEGMENT).replace_strict(live, default=None, return_dtype=pl.String).alias(DATE)  # None: no longer live
    kept = [rows.with_columns(of).filter(pl.col(DATE).is_in(list(days)))] if rows is not None else []
    out = pl.concat([*kept, counted.with_columns(of).drop_nulls(DATE)])  # a segment's rows together, by hour and message
    try:
        store.make_dirs(store.root / "index")
        if rows is None:
            store.index(NAME).overwrite(out, STATS, partition=DATE)
        else:
            store.index(NAME).replace(out, STATS, DATE, days)
    except (OSError, ValueError, DeltaError) as exc:
        return f"{store.name}: the baseline's counts could not be kept ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return None
