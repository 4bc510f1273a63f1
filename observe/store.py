"""The Parquet event store: ``<root>/events/source=<s>/date=<YYYY-MM-DD|unknown>/<segment>.parquet``.

Every write is a new uniquely named segment written to a hidden temporary name, fsync'd and renamed
into place, so readers never see a partial file and writers never collide. Compaction writes one
file per partition plus a small JSON note naming the segments it replaces; readers skip
replaced segments while the note exists, so a query sees each record exactly once throughout.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from observe.schema import EVENT_SCHEMA, KEY, STORED_SCHEMA, conform, from_stored, to_stored

ROW_GROUP_ROWS = 128 * 1024
SEGMENT_ROWS = 250_000
WRITE_THREADS = 2
ZSTD_LEVEL = 1  # ingest writes fast; compaction rewrites partitions smaller (slower zstd levels)
COMPACT_LEVEL = 6
COMPACT_TEXT_LEVEL = 16
TEXT_COLUMNS = ("message", "header", "raw", "attrs")
# Rows of one input stay together, in file order: offsets and times then delta-encode to almost
# nothing and neighbouring lines compress together (smaller and faster than sorting by time);
# row groups still carry ts statistics, and the partition is one day.
SEGMENT_ORDER = ("file_id", "offset")
DELTA_COLUMNS = {"ts": "DELTA_BINARY_PACKED", "offset": "DELTA_BINARY_PACKED"}
DICTIONARY_COLUMNS = ["node", "source", "severity", "kind", "job_id", "gpu", "program", "file_id", "code", "rank"]
STATISTICS_COLUMNS = ["ts", "node", "source", "severity", "kind", "job_id", "code", "offset", "file_id"]
UNKNOWN_DATE = "unknown"


@dataclass(frozen=True)
class Partition:
    source: str
    date: str
    path: Path


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Store:
    """A store rooted at a local directory (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]):
        text = str(root)
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif "://" in text:
            raise ValueError(f"store {text!r}: only local paths and file:// URLs are supported so far")
        self.root = Path(text).expanduser()
        self.events = self.root / "events"
        self.inputs = self.root / "inputs"

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- writing -------------------------------------------------------------------------------
    def write(self, df: pl.DataFrame) -> list[Path]:
        """Write ``df`` (conformed to the schema) as one new segment per partition it touches."""
        parts = split_partitions(conform(df))
        return [self.write_partition(source, day, part.sort(*SEGMENT_ORDER)) for (source, day), part in parts.items()]

    def write_partition(self, source: str, day: str, df: pl.DataFrame, tag: str = "s") -> Path:
        """Write the conformed rows of one partition, in their order, as a new segment named
        ``<tag>-<uuid>.parquet``."""
        df = to_stored(df)
        self.inputs.mkdir(parents=True, exist_ok=True)
        for file_id in df.get_column("file_id").unique().drop_nulls():
            (self.inputs / file_id).touch()  # before the data: a marker never lags its records
        return self._write_file(df, self.events / f"source={source}" / f"date={day}", f"{tag}-{uuid.uuid4().hex}.parquet")

    def writer(self, max_rows: int = SEGMENT_ROWS) -> SegmentWriter:
        """A buffered writer: one segment per partition per ``max_rows`` rows (bounded memory)."""
        return SegmentWriter(self, max_rows)

    def _write_file(self, df: pl.DataFrame, directory: Path, name: str, level: int = ZSTD_LEVEL,
                    text_level: int = ZSTD_LEVEL) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / name
        tmp = directory / f".{name}.tmp"
        table = df.to_arrow().cast(STORED_SCHEMA)
        with open(tmp, "wb") as f:
            pq.write_table(
                table, f, compression="zstd", row_group_size=ROW_GROUP_ROWS,
                compression_level={c: text_level if c in TEXT_COLUMNS else level for c in STORED_SCHEMA.names},
                use_dictionary=DICTIONARY_COLUMNS, column_encoding=DELTA_COLUMNS, write_statistics=STATISTICS_COLUMNS,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(directory)
        return final

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, sources: Iterable[str] | None = None, since: datetime | None = None,
                   until: datetime | None = None, undated: bool = False) -> list[Partition]:
        """Partitions that can hold events of ``sources`` between ``since`` and ``until`` (and,
        with ``undated``, those of events without a time, which a time range otherwise leaves out)."""
        wanted = set(sources) if sources else None
        lo = since.strftime("%Y-%m-%d") if since else None
        hi = until.strftime("%Y-%m-%d") if until else None
        out = []
        for source, sdir in _entries(self.events, "source="):
            if wanted is not None and source not in wanted:
                continue
            for day, ddir in _entries(sdir, "date="):
                if day == UNKNOWN_DATE:
                    if (lo or hi) and not undated:
                        continue
                elif (lo and day < lo) or (hi and day > hi):
                    continue
                out.append(Partition(source, day, Path(ddir)))
        return out

    @staticmethod
    def segments(directory: Path) -> list[Path]:
        """The live segment files of one partition directory (replaced ones left out)."""
        with os.scandir(directory) as it:
            names = [e.name for e in it]
        files = {n for n in names if n.endswith(".parquet") and not n.startswith(".")}
        for note in (n for n in names if n.startswith("c-") and n.endswith(".json")):
            if note[:-5] + ".parquet" in files:
                try:
                    replaced = json.loads((directory / note).read_text())["replaces"]
                except (OSError, ValueError, KeyError):
                    continue
                files.difference_update(replaced)
        return [directory / n for n in sorted(files)]

    def files(self, sources: Iterable[str] | None = None, since: datetime | None = None,
              until: datetime | None = None, undated: bool = False) -> list[Path]:
        """Segment files to read for the given filters (partition pruning)."""
        return [f for p in self.partitions(sources, since, until, undated) for f in self.segments(p.path)]

    def scan(self, sources: Iterable[str] | None = None, since: datetime | None = None,
             until: datetime | None = None, undated: bool = False) -> pl.LazyFrame:
        """A LazyFrame of events; ``since``/``until`` prune partitions here and row groups in polars.

        With ``undated``, events without a time pass the time filter too.
        """
        files = self.files(sources, since, until, undated)
        if not files:
            return pl.LazyFrame(schema=pl.from_arrow(EVENT_SCHEMA.empty_table()).schema)
        lf = from_stored(pl.scan_parquet([str(f) for f in files], hive_partitioning=False))
        keep = pl.col("ts").is_null() if undated else pl.lit(False)
        if since is not None:
            lf = lf.filter(keep | (pl.col("ts") >= since))
        if until is not None:
            lf = lf.filter(keep | (pl.col("ts") < until))
        return lf

    def known(self, file_id: str) -> pl.DataFrame:
        """Records already stored for one input: ``offset`` and ``text`` (a hash of ``raw``).

        Inputs never seen have no marker in ``<root>/inputs/`` and cost no scan.
        """
        files = self.files() if (self.inputs / file_id).exists() else []
        if not files:
            return no_records()
        lf = from_stored(pl.scan_parquet([str(f) for f in files]).filter(pl.col("file_id") == file_id))
        return lf.select("offset", pl.col("raw").hash().alias("text")).unique().collect()

    # -- maintenance ---------------------------------------------------------------------------
    def compact(self, partition: Partition, min_segments: int = 2) -> tuple[int, int] | None:
        """Merge a partition's segments into one file, dropping duplicate records, its text columns
        compressed harder than at ingest.

        Returns (segments replaced, rows written), or None when there was nothing to do.
        """
        directory = partition.path
        for note in directory.glob("c-*.json"):  # finish a compaction that was interrupted
            self._finish(note)
        segs = self.segments(directory)
        if not segs or (len(segs) < min_segments and all(s.name.startswith("c-") for s in segs)):
            return None  # already one compacted file (a lone ingest segment is still recompressed)
        # a duplicate is the same input's same text at the same offset (inputs may share an identity)
        df = pl.read_parquet([str(s) for s in segs]).unique(
            subset=[*KEY, "raw", "header", "message"], keep="first", maintain_order=True)
        df = df.sort(*SEGMENT_ORDER)
        name = f"c-{uuid.uuid4().hex}"
        note = directory / f"{name}.json"
        tmp = directory / f".{name}.json.tmp"
        tmp.write_text(json.dumps({"replaces": [s.name for s in segs]}))
        os.replace(tmp, note)
        self._write_file(df, directory, f"{name}.parquet", level=COMPACT_LEVEL, text_level=COMPACT_TEXT_LEVEL)
        self._finish(note)
        return len(segs), df.height

    @staticmethod
    def _finish(note: Path) -> None:
        """Delete the segments a compaction replaced, then its note (or the note alone if it failed)."""
        if note.with_suffix(".parquet").exists():
            for name in json.loads(note.read_text())["replaces"]:
                (note.parent / name).unlink(missing_ok=True)
        note.unlink(missing_ok=True)

    def expire(self, before: str, dry_run: bool = False) -> list[Partition]:
        """Delete every dated partition older than ``before`` (``YYYY-MM-DD``); undated ones stay.

        Each goes in one rename out of the listing (readers stop seeing it at once), then is removed.
        """
        old = [p for p in self.partitions() if p.date != UNKNOWN_DATE and p.date < before]
        if not dry_run:
            for p in old:
                doomed = p.path.with_name(f".expired-{p.path.name}-{uuid.uuid4().hex}")
                os.replace(p.path, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
        return old

    def stats(self) -> pl.DataFrame:
        """Per partition: segments, rows, bytes, first and last event time."""
        rows = []
        for p in self.partitions():
            segs = self.segments(p.path)
            meta = [pq.read_metadata(s) for s in segs]
            rows.append({
                "source": p.source, "date": p.date, "segments": len(segs),
                "rows": sum(m.num_rows for m in meta), "bytes": sum(s.stat().st_size for s in segs),
            })
        return pl.DataFrame(rows, schema={"source": pl.String, "date": pl.String, "segments": pl.Int64,
                                          "rows": pl.Int64, "bytes": pl.Int64})


def no_records() -> pl.DataFrame:
    """What :meth:`Store.known` returns for an input with nothing stored."""
    return pl.DataFrame(schema={"offset": pl.Int64, "text": pl.UInt64})


def split_partitions(df: pl.DataFrame) -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` split by (source, date), each part keeping its rows' order."""
    keyed = df.with_columns(pl.col("ts").dt.date().alias("_day"))
    parts = keyed.partition_by("source", "_day", as_dict=True, maintain_order=True)
    return {(source, day.isoformat() if day else UNKNOWN_DATE): part.drop("_day") for (source, day), part in parts.items()}


def _entries(directory: Path, prefix: str) -> list[tuple[str, str]]:
    """(value, path) of the ``prefix<value>`` subdirectories of ``directory``, sorted; none if it is missing."""
    try:
        with os.scandir(directory) as it:
            return sorted((e.name[len(prefix):], e.path) for e in it if e.name.startswith(prefix) and e.is_dir())
    except FileNotFoundError:
        return []


def buffered_parts(df: pl.DataFrame) -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` conformed and split by partition, ready to wait in a writer's buffer.

    A small part gets its own string buffers: polars strings are views into the whole input
    chunk, which would otherwise stay in memory as long as any of its rows waits.
    """
    df = conform(df)
    parts = split_partitions(df)
    return {key: _own_strings(part) if part.height * 4 < df.height else part for key, part in parts.items()}


def _own_strings(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its string columns copied into new buffers (concatenation always allocates;
    several times cheaper than a round trip through Arrow)."""
    return df.with_columns(pl.col(pl.String) + "")


class SegmentWriter:
    """Collects frames and writes them as few, large segments; ``close`` writes the rest.

    At most ``max_rows`` rows wait in memory (the largest partition is written first). Segments are
    written on background threads while the caller parses the next input (at most WRITE_THREADS
    writes in flight); an error in a write is raised by the next ``add`` or by ``close``.
    """

    def __init__(self, store: Store, max_rows: int):
        self.store = store
        self.max_rows = max_rows
        self.parts: dict[tuple[str, str], list[pl.DataFrame]] = {}
        self.rows = 0
        self.pool = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="observe-writer")
        self.pending: deque[Future] = deque()

    def add(self, df: pl.DataFrame) -> None:
        """Buffer ``df`` (any schema-conformable frame); each input's rows must come in file order."""
        self.add_parts(buffered_parts(df))

    def add_parts(self, parts: dict[tuple[str, str], pl.DataFrame]) -> None:
        """Buffer frames already split by :func:`buffered_parts` (which may run on another thread)."""
        for key, part in parts.items():
            self.parts.setdefault(key, []).append(part)
            self.rows += part.height
        while self.rows > self.max_rows:
            key = max(self.parts, key=lambda k: sum(f.height for f in self.parts[k]))
            self._flush(key)

    def _flush(self, key: tuple[str, str]) -> None:
        df = pl.concat(self.parts.pop(key))
        self.rows -= df.height
        self._wait(WRITE_THREADS - 1)
        self.pending.append(self.pool.submit(self.store.write_partition, *key, df))

    def _wait(self, in_flight: int = 0) -> None:
        """Wait until at most ``in_flight`` writes are still going (oldest first)."""
        while len(self.pending) > in_flight:
            self.pending.popleft().result()

    def flush(self) -> None:
        """Write everything buffered so far and wait until it is durable."""
        for key in list(self.parts):
            self._flush(key)
        self._wait()

    def close(self) -> None:
        """Write everything still buffered and stop the writer thread."""
        try:
            self.flush()
        finally:
            self.pool.shutdown(wait=True)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.pool.shutdown(wait=True)
