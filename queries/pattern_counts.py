"""The patterns' baseline, kept: per live segment and hour, the rows of each masked message.

``patterns`` compares a short window with a long baseline (two hours against seven days): counting a
fleet's week of messages again on every call is 11 million rows read and grouped, and 380,000
distinct strings masked, for a few thousand numbers that change only as the store does. Kept in the
derived table ``index/patterns``, a segment is counted once: a call reads the segments the index does
not cover yet (new since the last call, or rewritten: compacted, re-marked), adds them, and drops the
rows of segments no longer live, as the notable index does. Rows are whole hours (UTC), so a baseline
read from here starts on the hour; the hour before the window is read from the segments with it.

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
from observe.store.layout import segment_name
from queries.engine import Engine, Order
from queries.patterns import Config, load_config, masked, masked_counts
from queries.search import Match

NAME = "patterns"
SEGMENT = "_segment"  # the live segment (path below the events table) a row counts
HOUR = timedelta(hours=1)
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
    before it that ``match`` (from ``start - span``) finds, the baseline's span, and why its counts could
    not be kept (None when they were, or needed no counting). Its whole hours come from the index where
    they can: the copy marks current and every node asked for (the index counts all of them); then the
    baseline starts on the hour at or before ``start - span``. ``counting`` is told how many segments
    are counted first, when any are."""
    counted = partial(masked_counts, start=start)
    if not match.marked or match.copies or match.undated or match.nodes or match.kinds or match.job or match.grep:
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
    ``_b_first`` and ``_b_last``; and why the segments it counted could not be kept (None if kept). The
    segments not counted yet are counted where ``run`` reads shares of files (on Ray, all at once)."""
    config = config or load_config()
    index, covered = _index(store, config)
    wanted = {segment_name(store.events, f): f for f in store.files(sources, since, until - timedelta(microseconds=1))}
    new = [f for name, f in wanted.items() if name not in covered]
    if new:
        counting(len(new))
    counted = _counted(store, run, new, config)
    why = _keep(store, index, counted) if new else None
    kept = [index.filter(pl.col(SEGMENT).is_in(list(wanted))).collect()] if index is not None else []
    rows = pl.concat([*kept, counted], how="vertical_relaxed").filter(pl.col("hour") >= since, pl.col("hour") < until)
    return (rows.group_by("masked").agg(pl.col("n").sum().cast(pl.UInt32).alias("baseline_count"),
                                       pl.col("hour").min().alias("_b_first"),
                                       (pl.col("hour").max() + HOUR).alias("_b_last"))
            .sort("masked")), why


def refresh(store: Store, run: Engine) -> tuple[int, str | None]:
    """Count the live segments of the partitions the index counts (those a compaction wrote in place of
    counted ones), so that the next call finds them counted; returns the segments counted and why they
    could not be kept (None if kept). Nothing before a ``patterns`` call has made the index: a store no
    one asks for patterns costs nothing."""
    config = load_config()
    index, covered = _index(store, config)
    days = {name.rsplit("/", 1)[0] for name in covered}
    names = {segment_name(store.events, f): f for _, _, f in store.live()}
    new = [f for name, f in names.items() if name.rsplit("/", 1)[0] in days and name not in covered]
    return len(new), _keep(store, index, _counted(store, run, new, config)) if new else None


def _index(store: Store, config: Config) -> tuple[pl.LazyFrame | None, set[str]]:
    """The index's rows counted with ``config``'s masks, and the segments they cover (None, nothing: no
    index, or one of another layout, which the next write replaces)."""
    index = store.index(NAME).scan()
    if index is None or set(index.collect_schema().names()) != set(COLUMNS):
        return None, set()
    index = index.filter(pl.col("masks") == fingerprint(config))
    return index, set(index.filter(pl.col("hour").is_null()).select(SEGMENT).collect().get_column(SEGMENT).to_list())


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
                  .agg(pl.len().alias("n")).collect())
        fresh = counts.select(pl.col("message").unique()).join(seen, on="message", how="anti")
        seen = pl.concat([seen, fresh.with_columns(masked(pl.col("message"), config).alias("masked"))])
        parts.append(counts.join(seen, on="message").group_by("hour", "masked").agg(pl.col("n").sum())
                     .select(pl.lit(segment_name(store.events, f)).alias(SEGMENT), "hour", "masked", "n", mark).cast(COLUMNS))
    segments = pl.DataFrame({SEGMENT: [segment_name(store.events, f) for f in files]}, schema={SEGMENT: pl.String})
    return pl.concat([*parts, segments.with_columns(mark)], how="diagonal_relaxed")


def _keep(store: Store, index: pl.LazyFrame | None, counted: pl.DataFrame) -> str | None:
    """Write the index anew: its rows of segments still live, and ``counted``. Where the store cannot be
    written to, nothing is kept (the next call counts again: a stale index is slower, never wrong) and
    the reason is returned."""
    from deltalake.exceptions import DeltaError

    live = [segment_name(store.events, path) for _, _, path in store.live()]
    kept = index.filter(pl.col(SEGMENT).is_in(live)).collect().cast(COLUMNS) if index is not None else counted.clear()
    try:
        store.make_dirs(store.root / "index")
        store.index(NAME).overwrite(pl.concat([kept, counted]).sort(SEGMENT, "hour", "masked", nulls_last=True))
    except (OSError, DeltaError) as exc:
        return f"{store.name}: the baseline's counts could not be kept ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return None
