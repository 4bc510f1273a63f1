"""The stored layout: the columns' Parquet encodings and compression (ingest fast, compaction small),
partitions by source and UTC month, and rows split into the partitions they belong to.

A partition is a month, not a day: a cluster's sparse daemon logs hold a few thousand lines a day, and
a file per source and day stored a real-shaped syslog archive at 1.32x ``zstd -3`` in 360 files (per-file
dictionaries, footers and short zstd frames), a month's at 0.81x in 15 (docs/performance.md). Readers
skip within a month by each file's time range, which its commit gives (:mod:`observe.store.table`).
Stores written before keep their day partitions (``YYYY-MM-DD``) beside the months: every reader takes
both (:func:`period`)."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import polars as pl

from observe.schema import KEY, STORED_COLUMNS, arrow_schema, conform, stored_raw, to_stored

ROW_GROUP_ROWS = 128 * 1024


ZSTD_LEVEL = 3  # zstd 1 wrote the real-shaped syslog store 6% larger to save 0.07 CPU-s of 8; compaction goes further


# zstd level per column at ingest: 3, but where a higher level finds much more for little CPU. Measured on
# the real-shaped bench stores (syslog 754k rows, jobs 189k), every column at 3 as the base:
# - ts at 6: 0.39 MB less of 7.3 on syslog (the microsecond deltas of sparse second-stamped lines leave
#   repeats zstd 3's fast match finder misses), CPU within the noise (0.03 s);
# - attrs at 9: 0.11 MB less on syslog and 0.12 MB of 1.6 on jobs (a rule's JSON keys and values repeat
#   a few hundred bytes apart), 0.03-0.06 CPU-s.
# The dictionary-coded columns of few values are compressed too: their RLE indices change from line to
# line where kinds and severities interleave (job output: kind 58 KB less, store 18% smaller; syslog 1%),
# at no measurable CPU.
INGEST_LEVELS = {**{c: ZSTD_LEVEL for c in STORED_COLUMNS}, "ts": 6, "attrs": 9}


COMPACT_LEVEL = 6


COMPACT_TEXT_LEVEL = 9  # 16 stored the real-shaped syslog bench 4% smaller for 3x the CPU (twice the ingest's)


TEXT_COLUMNS = ("message", "header", "raw", "attrs")


COMPACT_LEVELS = {c: COMPACT_TEXT_LEVEL if c in TEXT_COLUMNS else COMPACT_LEVEL for c in STORED_COLUMNS}


# Rows of one input stay together, in file order: offsets and times then delta-encode to almost
# nothing and neighbouring lines compress together (smaller and faster than sorting by time);
# row groups still carry ts statistics, and the partition is one month.
SEGMENT_ORDER = ("file_id", "offset")


# Encodings measured on the bench's logs: times and offsets in input order are small deltas.
COLUMN_ENCODINGS = {"ts": "DELTA_BINARY_PACKED", "offset": "DELTA_BINARY_PACKED"}


# Dictionary-coded: columns of few values, and messages: a daemon's lines repeat (sshd, cron, ganglia;
# measured on a real-shaped syslog archive: segments 21% smaller at ingest, the writer no slower, and
# compacted files 9% smaller than zstd 9 alone finds); pyarrow falls back to plain pages where they do not.
# pids too: a process prints many lines, so a file holds far fewer pids than rows (syslog 0.18 MB and jobs
# 0.05 MB smaller than their bytes split into streams); and headers, which the rows of a job's output
# repeat ("gpu003:3034541:3034602 [1] ": jobs 0.08 MB smaller than their shared prefixes in
# DELTA_BYTE_ARRAY, syslog the same); route is one of a few values (11 MB of plain strings through zstd
# per syslog ingest otherwise).
DICTIONARY_COLUMNS = ["node", "source", "severity", "kind", "job_id", "gpu", "program", "file_id", "code", "rank", "shape",
                      "message", "pid", "route", "header"]


# min/max kept for what queries filter on (a partition holds one source; offsets are read, not filtered)
STATISTICS_COLUMNS = ["ts", "node", "kind", "job_id", "code", "file_id"]


WRITE_BATCH_ROWS = 64 * 1024  # rows the Parquet encoder takes at a time (its default, 1024, costs 4% more)


UNKNOWN_DATE = "unknown"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DAY_US = 86_400_000_000
PARTITION_NAME = re.compile(r"\d{4}-\d{2}(-\d{2})?")  # a dated partition's: a month, or a day in stores written before


@cache
def write_schema():
    """The stored columns as the encoder takes them from polars (strings as views), made once."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, pa.string_view() if f.type == pa.string() else f.type) for f in arrow_schema()])


def parquet():
    """pyarrow's Parquet module, imported where it is used (compaction, metadata): 0.2 s, with the TLS
    library it pulls in, that an ingest does not need."""
    import pyarrow.parquet

    return pyarrow.parquet


def write_ingested(df: pl.DataFrame, f: BinaryIO) -> None:
    """An ingest segment (the stored layout) to ``f``: fast."""
    _write(df, f, INGEST_LEVELS)


def write_compacted(df: pl.DataFrame, f: BinaryIO) -> None:
    """A compaction output to ``f``: small."""
    _write(df, f, COMPACT_LEVELS)


def _write(df: pl.DataFrame, f: BinaryIO, levels: dict[str, int]) -> None:
    import pyarrow as pa  # what writes needs it; a command that only reads does without

    # polars' string views go to the encoder as they are (no conversion to Arrow's offsets layout);
    # the file records plain Parquet types, which every reader maps to strings. A segment's rows come
    # in one chunk per parse unit: made one first (the views alone are copied), the export and the
    # encoder take one array per column (real-shaped syslog, 360 segments: 9% less CPU)
    table = df.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
    if not table.schema.equals(write_schema()):  # a cast imports pyarrow.compute (0.15 s) the first time
        table = table.cast(write_schema())
    # encoded into memory, then written at once: a Python file object takes each page through the
    # interpreter, whose lock the parse threads hold (dozens of writes a segment, each waiting for it)
    encoded = pa.BufferOutputStream()
    parquet().write_table(
        table, encoded, compression="zstd", compression_level=levels, row_group_size=ROW_GROUP_ROWS,
        use_dictionary=DICTIONARY_COLUMNS, column_encoding=COLUMN_ENCODINGS, write_statistics=STATISTICS_COLUMNS, write_batch_size=WRITE_BATCH_ROWS,
        store_schema=False)
    f.write(encoded.getvalue())


@dataclass(frozen=True)
class Partition:
    source: str
    date: str
    path: Path




def scan_segments(paths: Iterable[Path | str], storage_options: dict[str, str] | None = None,
                  paths_as: str | None = None) -> pl.LazyFrame:
    """Segments (paths or URLs) in the stored layout; a column a segment predates (``route``, from
    before routes were kept) reads as null, which no check trusts. With ``paths_as``, a column of that
    name holds each row's file."""
    return pl.scan_parquet([str(p) for p in paths], schema=STORED_COLUMNS, missing_columns="insert",
                           hive_partitioning=False, storage_options=storage_options or None,
                           include_file_paths=paths_as)


def segment_name(events: Path | PurePosixPath | str, path: Path | PurePosixPath | str) -> str:
    """A live segment's name in the derived tables: its path below the events table ``events``
    (``source=…/date=…/file``), however the store names it."""
    root, text = f"{str(events).rstrip('/')}/", str(path)
    if not text.startswith(root):  # by text: a path's parts cost 70 µs, and explain names 500 segments
        raise ValueError(f"{text} is not a segment of {root}")
    return text[len(root):]


@cache
def no_records() -> pl.DataFrame:
    """What :meth:`Store.known` returns for an input with nothing stored (one shared empty frame)."""
    return pl.DataFrame(schema={"offset": pl.Int64, "text": pl.UInt64})


def superseded_dropped(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (stored layout) without the rows another row of the same input at the same offset holds
    again (the same text and message, stored twice: inputs may share an identity) or extends (a last line stored
    while it was still being written, block-buffered job output, then stored whole by the next ingest
    of the grown file). Texts are compared as lines, whichever layout holds them (a header kept, or its
    shape), and only for the rows whose input and offset repeat."""
    same = df.select(pl.struct(*KEY).is_duplicated()).to_series()
    if not same.any():
        return df
    text = stored_raw().alias("_t")
    rows = df.with_row_index("_r").filter(same).select("_r", *KEY, text, "message")
    again = rows.filter(~pl.struct(*KEY, "_t", "message").is_first_distinct()).select("_r")  # one line's two events stay
    longer = rows.join(rows, on=list(KEY), suffix="_o").filter(
        (pl.col("_t_o").str.len_bytes() > pl.col("_t").str.len_bytes()) & pl.col("_t_o").str.starts_with(pl.col("_t")))
    dropped = pl.concat([again.get_column("_r"), longer.get_column("_r")])
    return df.filter(~pl.int_range(pl.len()).is_in(dropped.implode()))


_NO_MONTH = (1 << 31) - 1


def split_partitions(df: pl.DataFrame, order: pl.Series | None = None) -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` split by (source, month); each part's rows in ``order`` (a sort key, e.g. file offsets),
    else as they are.

    One gather puts the rows in partition order (skipped when they already are), then each part is
    a zero-copy slice: a log chunk spanning many months has dozens of parts, and gathering each one
    separately costs a pass over the columns per part.
    """
    if not df.height:
        return {}
    ts = pl.col("ts")
    month = (ts.dt.year().cast(pl.Int64) * 12 + ts.dt.month().cast(pl.Int64) - 1).fill_null(_NO_MONTH)
    code = pl.col("source").cast(pl.Categorical).to_physical().cast(pl.Int64).fill_null(-1)
    keys = df.select(code * (1 << 32) + month + (1 << 31)).to_series()  # < 2^35, non-negative
    first = order.arg_sort() if order is not None and not order.is_sorted() else None
    within = keys if first is None else keys.gather(first)
    if not within.is_sorted():  # a stable sort by key: the position breaks ties
        shift = 1 << max(1, len(keys).bit_length())
        rank = (within * shift + pl.Series(range(len(keys)), dtype=pl.Int64)).arg_sort()
        first = rank if first is None else first.gather(rank)
    if first is not None:
        df, keys = df[first], keys.gather(first)
    parts, start = {}, 0
    for n, key in keys.rle().struct.unnest().iter_rows():
        part = df.slice(start, n)
        start += n
        parts[(part.item(0, "source"), _month_name(key % (1 << 32) - (1 << 31)))] = part
    return parts


def utc_day(t: datetime) -> str:
    """The UTC day (YYYY-MM-DD) a time falls in, whatever zone it is given in (naive: UTC): its
    partition's name begins with it (a month's is its first seven characters)."""
    return (t.astimezone(timezone.utc) if t.tzinfo else t).strftime("%Y-%m-%d")


def period(name: str) -> tuple[int, int] | None:
    """The microseconds since the epoch a dated partition's events fall in, ``[start, end)``: a month
    (``YYYY-MM``) or, in a store written before months, a day (``YYYY-MM-DD``); None for ``unknown``
    (and a name neither: a directory observe did not name)."""
    try:
        year, month, *day = map(int, name.split("-")) if PARTITION_NAME.fullmatch(name) else ()
        start = datetime(year, month, day[0] if day else 1, tzinfo=timezone.utc)
    except ValueError:
        return None
    end = start + timedelta(days=1) if day else datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)
    return micros(start), micros(end)


def pruned(live: list[tuple[str, str, Path]], spans: dict[Path, tuple[int, int]],
           sources: Iterable[str] | None, since: datetime | None, until: datetime | None,
           undated: bool) -> list[tuple[str, str, Path]]:
    """The live segments (source, partition, path) that can hold events of ``sources`` between ``since``
    and ``until``: by their partitions (a month's or a day's name, compared with the days asked to its
    length), then by the time range their commits give (``spans``: first and last, microseconds since
    the epoch); undated partitions only with ``undated`` where a time range is asked."""
    wanted = set(sources) if sources else None
    lo, hi = (utc_day(t) if t else None for t in (since, until))
    since, until = (micros(t) if t else None for t in (since, until))
    out = []
    for source, name, f in live:
        if wanted is not None and source not in wanted:
            continue
        if name == UNKNOWN_DATE:
            if (lo or hi) and not undated:
                continue
        elif (lo and name < lo[:len(name)]) or (hi and name > hi[:len(name)]):
            continue
        elif (span := spans.get(f)) and ((since is not None and span[1] < since) or (until is not None and span[0] > until)):
            continue
        out.append((source, name, f))
    return out


def micros(t: datetime) -> int:
    """``t`` in microseconds since the epoch, as the log's times are compared (a naive time is UTC's)."""
    t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return (t - EPOCH) // timedelta(microseconds=1)


def day_of(us: int) -> str:
    """The UTC day (YYYY-MM-DD) of a time in microseconds since the epoch (a commit's range gives them)."""
    return utc_day(EPOCH + timedelta(microseconds=us))


def _month_name(month: int) -> str:
    """A partition's name (``YYYY-MM``, from months since year 0); ``unknown`` without a time, and for
    a month no date names (conformed rows have none: observe/schema.py keeps times within 1970..2200)."""
    if month == _NO_MONTH or not 12 <= month < 10_000 * 12:
        return UNKNOWN_DATE
    return f"{month // 12:04d}-{month % 12 + 1:02d}"


def fresh_name(name: str) -> str:
    """A new unique name for a file rewritten in place of ``name`` (new marks, retention's cut), of the
    same kind (and, for a compacted file, the same place in name order)."""
    parts = PurePosixPath(name).stem.split("-")
    if parts[0] == "c" and len(parts) == 4:
        return f"c-{parts[1]}-{uuid.uuid4().hex[:8]}-{parts[3]}.parquet"
    return f"{parts[0]}-{uuid.uuid4().hex}.parquet"


def buffered_parts(df: pl.DataFrame, order: pl.Series | None = None, zone: str = "UTC") -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` conformed, in the stored layout (headers' times in ``zone``: :func:`to_stored`) and split
    by partition (rows in ``order``, see :func:`split_partitions`), ready for a writer's buffer."""
    return split_partitions(to_stored(conform(df), zone), order)
