"""The event table's Delta Lake log (``<root>/events/_delta_log``): which segment files are the table.

Every change to the events is one Delta commit, so any engine that reads Delta (Spark, DuckDB, Trino,
polars' ``scan_delta``, Ray's ``read_delta``) sees exactly the events observe sees: ingest appends
segments, compaction swaps a partition's segments for its outputs in one commit (marked as no data
change, which counters skip), retention removes whole partitions. A file a commit removed stays on
disk until :meth:`EventTable.vacuum` after the grace period, so a query planned before the commit
can still read it. The files are observe's own (its writer, layout and encodings); the log only says
which of them are live.
"""
from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import polars as pl

from observe.schema import arrow_schema
from observe.store.layout import PARTITION_NAME, UNKNOWN_DATE, micros
from observe.store.place import LocalPlace, Place

PARTITION_BY = ["source", "date"]
LOG_DIR = "_delta_log"
ORPHAN_HOURS = 24  # a file no commit names (a crash between writing and committing) goes after this
COMMIT_TRIES = 5  # a commit that loses to another writer (delta-rs retries most conflicts itself)
SETTLED_NS = 2 * 10**9  # a log directory changed this recently is listed again
NOTE = "observe.note"  # an index commit's note of what wrote it, in its commitInfo (IndexTable.notes)
DELTA_COLUMNS = ("ts", "offset", "hour")  # an index's times and offsets, a file's in order: small deltas (delta-rs's
# dictionary pages of distinct times held the real-shaped syslog's notable index 17% larger)
INDEX_LEVEL = 3  # a derived table's zstd level (delta-rs writes snappy otherwise: the notable index 1.7x larger)
INDEX_GROUP_ROWS = 65_536  # its row groups: a read of a few kinds skips the others' (the index is sorted by kind)
TABLE_NAME, TABLE_DESCRIPTION = "observe_events", "observe's events (observe schema for the columns)"
PARTITION_VALUE = re.compile(rf"{PARTITION_NAME.pattern}|{UNKNOWN_DATE}")  # a store's dates: what a derived table is partitioned by
PRIVATE_UMASK = 0o027  # delta-rs creates the log's files with 0666 less the umask: the store's 0640 / 0750


class LegacyLayout(RuntimeError):
    """A store written before the Delta table: ``observe convert`` makes it one."""


class Written(NamedTuple):
    """A segment as its commit describes it: its rows and the range of their times, which readers
    (observe's and every Delta engine's) skip the file by. ``first``/``last`` None: no row has a time,
    or the range is not known; ``undated`` None: not known."""
    rows: int
    first: datetime | None = None
    last: datetime | None = None
    undated: int | None = None


def written(df: pl.DataFrame) -> Written:
    """What a segment of ``df``'s rows says in its commit."""
    ts = df.get_column("ts")
    return Written(df.height, ts.min(), ts.max(), ts.null_count())


def written_in(footer) -> Written:
    """What a segment's commit says, from its Parquet footer (a segment a collector shipped, or one
    written before the table): the range from its row groups' ``ts`` statistics where every group has them."""
    at = footer.schema.names.index("ts") if "ts" in footer.schema.names else None
    stats = [footer.row_group(g).column(at).statistics for g in range(footer.num_row_groups)] if at is not None else []
    if not stats or any(st is None or not st.has_min_max or not st.has_null_count for st in stats):
        return Written(footer.num_rows)
    return Written(footer.num_rows, min(st.min for st in stats), max(st.max for st in stats),
                   sum(st.null_count for st in stats))


def _stats(w: Written) -> str:
    """An add action's statistics: the rows, which engines answer count(*) from, and the time range
    at the log's millisecond precision, widened to whole milliseconds so that no reader skips a row."""
    stats: dict = {"numRecords": w.rows}
    if w.undated is not None:
        stats["nullCount"] = {"ts": w.undated}
    if w.first is not None and w.last is not None:
        last = w.last + timedelta(microseconds=(-w.last.microsecond) % 1000)
        stats["minValues"] = {"ts": _millis(w.first)}
        stats["maxValues"] = {"ts": _millis(last)}
    return json.dumps(stats)


def _span(stats: str | None) -> tuple[int, int] | None:
    """The time range (microseconds since the epoch) an add action's statistics give, or None."""
    try:
        values = json.loads(stats or "{}")
        first, last = values["minValues"]["ts"], values["maxValues"]["ts"]
        return tuple(micros(datetime.fromisoformat(t)) for t in (first, last))
    except (ValueError, KeyError, TypeError):
        return None


def _millis(t: datetime) -> str:
    """``t`` (UTC) as the log writes a time: ISO 8601, milliseconds (truncated), ``Z``."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@cache
def table_schema():
    """The Delta table's columns (a pyarrow schema): the stored layout's, and the partitions' ``date``
    (files hold ``source``)."""
    import pyarrow as pa

    return arrow_schema().append(pa.field("date", pa.string(), metadata={
        "description": "partition: the event's UTC month (YYYY-MM; a day, YYYY-MM-DD, in stores written before), "
                       "or unknown when it has no time"}))


def partition_of(rel: str) -> dict[str, str]:
    """``source=S/date=D/name`` -> {source: S, date: D}."""
    source, day = rel.split("/")[:2]
    return {"source": source.removeprefix("source="), "date": day.removeprefix("date=")}


def _adds(dt) -> pl.DataFrame:
    """The live files' add actions (polars reads delta-rs's Arrow table as it is; pyarrow's ``pa.table``
    would import pandas where it is installed, 0.3 s of every ingest worker's start)."""
    return pl.DataFrame(dt.get_add_actions(flatten=True))


class Table:
    """A Delta table of the store, in a local directory (its log read at most once per change) or
    in an object store (``place``; its log listed at each look: no directory time to go by)."""

    def __init__(self, root: Path | PurePosixPath, grace_s: float, creating: Callable[[], AbstractContextManager],
                 place: LocalPlace | Place):
        self.root = root
        self.place = place
        self.uri = place.uri(root)  # what delta-rs and polars open
        self.options = place.options
        self.grace_s = grace_s
        self.creating = creating  # held across processes while the table is created (the store's lock)
        self._dt = None
        self._snap: tuple[int, list[str]] | None = None  # the last snapshot, and the log's mtime then
        self._ranges: tuple[int, pl.DataFrame | None] = (-1, None)  # the snapshot's files' time ranges, as commits give them
        self._spans: tuple[int, dict[str, tuple[int, int]]] = (-1, {})  # the same by file, made when asked for
        self._seen = -1
        self._columns_checked = False  # the table's schema lists every column the files hold (_add_columns)
        self._lock = threading.Lock()  # the writer's publisher thread commits while readers list

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One table operation at a time in this process; what delta-rs creates meanwhile is the
        store's owner's and group's alone (the directories are setgid where the store has a group)."""
        with self._lock:
            old = os.umask(PRIVATE_UMASK)
            try:
                yield
            finally:
                os.umask(old)

    def exists(self) -> bool:
        return self.place.has_dir(self.root / LOG_DIR)

    def _load(self):
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.options)

    def _table(self, create: bool = False):
        """The table at its latest version (None: no table yet)."""
        if self._dt is None:
            if not self.exists():
                if not create:
                    self._without_log()
                    return None
                self._create_once()
            self._dt = self._load()
        else:
            self._dt.update_incremental()
        return self._dt

    def _without_log(self) -> None:
        """What a directory without a log means: nothing yet (a subclass may know better)."""

    def _create(self) -> None:
        raise NotImplementedError

    def _create_once(self) -> None:
        """Create the table unless another process did: two creators racing would both commit a
        protocol, and every writer that read the first would then fail its commit."""
        with self.creating():
            if not self.exists():
                self._create()

    def _properties(self) -> dict[str, str]:
        """The table's properties: a removed file is kept for the grace period."""
        return {"delta.deletedFileRetentionDuration": f"interval {math.ceil(self.grace_s)} seconds"}

    def _committing(self, commit: Callable[[], object]) -> None:
        """Run ``commit`` (its files are durable already); a commit that lost to another in a way
        delta-rs does not resolve itself is tried again on the table as it now is (it wrote nothing)."""
        from deltalake.exceptions import CommitFailedError

        for attempt in range(COMMIT_TRIES):
            try:
                commit()
                return
            except CommitFailedError:
                if attempt == COMMIT_TRIES - 1:
                    raise
                self._dt = None  # read the log again
                time.sleep(0.05 * (attempt + 1))

    def snapshot(self) -> tuple[int, list[str]]:
        """The latest version and its live files (relative paths); (-1, []) with no table yet.

        Kept while the log's directory is unchanged (a commit adds a file to it) and not changed in the
        last SETTLED_NS (a change within the file system's timestamp granularity would not show): an
        explain scans the store several times, and each listing costs 10 ms on a store of 1,000 files."""
        with self._lock:
            try:
                seen = os.stat(self.root / LOG_DIR).st_mtime_ns if self.place.local else -1
            except FileNotFoundError:
                seen = -1
            if self._snap is not None and seen == self._seen and seen >= 0 and time.time_ns() - seen > SETTLED_NS:
                return self._snap
            dt = self._table()
            if dt is None:
                return -1, []
            if self._snap is None or self._snap[0] != dt.version():
                adds = _adds(dt)
                self._snap = dt.version(), adds.get_column("path").to_list()
                self._ranges = dt.version(), (adds.select("path", "min.ts", "max.ts").drop_nulls()
                                              if "min.ts" in adds.columns else None)
            self._seen = seen
            return self._snap

    def files(self) -> list[tuple[str, int, int, int]]:
        """Each live file: (relative path, bytes, rows, modification time in ms), as its commit says."""
        with self._lock:
            dt = self._table()
            if dt is None:
                return []
            return _adds(dt).select("path", "size_bytes", "num_records", "modification_time").rows()

    def spans(self) -> tuple[int, dict[str, tuple[int, int]]]:
        """The latest version and the time range of each live file whose commit gives one (a file
        committed before commits did, or without a dated row, has none): its first and last time in
        microseconds since the epoch (made once a version, and only for a reader that asks)."""
        self.snapshot()
        version, ranges = self._ranges
        if self._spans[0] != version:
            found = {} if ranges is None else dict(zip(ranges.get_column("path").to_list(), zip(
                ranges.get_column("min.ts").dt.epoch("us").to_list(), ranges.get_column("max.ts").dt.epoch("us").to_list())))
            self._spans = version, found
        return self._spans

    def drop_missing(self) -> list[str]:
        """One commit removing every live file that is no longer on disk (delta-rs's repair); which."""
        with self._writing():
            dt = self._table()
            if dt is None:
                return []
            return list(dt.repair(dry_run=False).get("files_removed", []))

    def vacuum(self, grace_s: float | None = None) -> int:
        """Delete the files commits removed more than ``grace_s`` (the table's grace) ago, and files no
        commit names that are older than ORPHAN_HOURS; returns how many."""
        with self._writing():
            if self._table() is None:
                return 0
            dt = self._load()  # loaded afresh: a stale state would take live files for strays
            hours = None if grace_s is None else math.ceil(grace_s / 3600)
            done = dt.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
            stray = dt.vacuum(retention_hours=max(ORPHAN_HOURS, hours or 0), dry_run=True,
                              enforce_retention_duration=False, full=True)
            for rel in stray:  # not vacuum's own delete: a hidden name is a writer's file still being written
                if not PurePosixPath(rel).name.startswith("."):
                    self.place.delete(self.root / rel)
            return len(done) + len(stray)


class EventTable(Table):
    """The events: observe's segments, partitioned by source and date."""

    def _without_log(self) -> None:
        """Segments and no log: a store from before the table. Not directories alone, nor hidden
        files: a first writer makes those before it creates the table (ahead of its first rename)."""
        if self.place.local and any(not f.name.startswith(".") for f in Path(self.root).glob("source=*/date=*/*.parquet")):
            raise LegacyLayout(f"{self.root.parent}: a store written before observe kept a Delta table; "
                               f"convert it once with: observe convert --store {self.root.parent}")

    def _properties(self) -> dict[str, str]:
        """The table's properties: also that commits give statistics of ``ts`` alone (:func:`_stats`):
        without it delta-rs's Arrow dataset reads a column without statistics as bounded by null, and
        DuckDB over it found no row where ``copy_of IS NULL``."""
        return {**super()._properties(), "delta.dataSkippingStatsColumns": "ts"}

    def ensure(self) -> None:
        """Create the (empty) table if there is none: before the first segment is made durable, so
        that a crash before the first commit cannot leave segments that look like an old store's."""
        if self._dt is None and not self.exists():
            with self._writing():
                self._create_once()

    def _create(self) -> None:
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        create_table_with_add_actions(
            self.uri, Schema.from_arrow(table_schema()), [], mode="ignore", partition_by=PARTITION_BY,
            name=TABLE_NAME, description=TABLE_DESCRIPTION, configuration=self._properties(),
            storage_options=self.options)

    def _add_columns(self, dt) -> None:
        """Add the columns observe's files hold that the table's schema does not list yet (a table
        written by an older observe: ``copy_of``), so that engines reading the table see them, and
        set the table's properties where an older observe set others; the table's name and description
        are set again (delta-rs's ALTER drops them). Once per process: neither goes away."""
        from deltalake import Schema

        if self._columns_checked:
            return
        have = {f.name for f in dt.schema().fields}
        missing = [f for f in Schema.from_arrow(table_schema()).fields if f.name not in have]
        if missing or not self._properties().items() <= dt.metadata().configuration.items():
            if missing:
                dt.alter.add_columns(missing)
            dt.alter.set_table_name(TABLE_NAME)
            dt.alter.set_table_description(TABLE_DESCRIPTION)
            dt.alter.set_table_properties(self._properties())
        self._columns_checked = True

    def added(self, after: int, upto: int) -> dict[str, tuple[int, int] | None] | None:
        """Files the commits after version ``after`` up to ``upto`` added as new data (a compaction's
        outputs are no new data), each with its time range where its commit gives one (as
        :meth:`spans`); None when the log no longer holds one of those commits (cleaned up: count
        again from a :meth:`snapshot`)."""
        out: dict[str, tuple[int, int] | None] = {}
        for v in range(after + 1, upto + 1):
            try:
                text = self.place.read_bytes(self.root / LOG_DIR / f"{v:020d}.json").decode()
            except FileNotFoundError:
                return None
            for line in filter(None, text.splitlines()):
                add = json.loads(line).get("add")
                if add and add.get("dataChange"):
                    out[add["path"]] = _span(add.get("stats"))
        return out

    # -- writing -------------------------------------------------------------------------------
    def append(self, files: list[tuple[Path, Written]]) -> None:
        """Commit new segment files (already durable under their final names), with what they hold, as new data."""
        self._commit([self._add(f, w, True) for f, w in files], [], True)

    def replace(self, removed: list[Path], added: list[tuple[Path, Written]]) -> None:
        """Swap ``removed`` for ``added`` (with what they hold) in one commit that changes no data (a compaction)."""
        self._commit([self._add(f, w, False) for f, w in added], removed, False)

    def remove(self, files: list[Path], kept: list[tuple[Path, Written]] = ()) -> None:
        """Remove ``files`` (their data goes: retention) in one commit, adding ``kept`` (with what they
        hold): files rewritten with some of the removed ones' rows, which are no new data."""
        self._commit([self._add(f, w, False) for f, w in kept], files, True)

    def _add(self, path: Path | PurePosixPath, w: Written, data_change: bool):
        """An add action, with the file's statistics (:func:`_stats`)."""
        from deltalake.transaction import AddAction

        rel = path.relative_to(self.root).as_posix()
        size, mtime = self.place.stat(path)
        return AddAction(rel, size, partition_of(rel), mtime, data_change, _stats(w))

    def _commit(self, adds: list, removed: list[Path], data_change: bool) -> None:
        from deltalake.transaction import RemoveAction

        if not adds and not removed:
            return
        now = int(time.time() * 1000)
        removes = []
        for path in removed:
            rel = path.relative_to(self.root).as_posix()
            removes.append(RemoveAction(rel, data_change, now, self.place.stat(path)[0], partition_of(rel)))
        def commit() -> None:
            dt = self._dt or self._table(create=True)  # as it is: the commit itself resolves what came since
            self._add_columns(dt)
            dt.create_write_transaction([*adds, *removes], mode="append", schema=table_schema(),
                                        partition_by=PARTITION_BY)

        with self._writing():
            self._committing(commit)


class IndexTable(Table):
    """A small table the store derives from its events (the job index, the notable index), rewritten
    whole or a partition at a time. Its log keeps statistics of the ``stats`` columns alone: delta-rs
    writes every column's minimum and maximum into each commit, so a long line a user logged would be
    copied into every commit after it (a megabyte each, kept for the log's retention). No time travel
    is asked of a derived table: its log is kept a day."""

    def overwrite(self, df: pl.DataFrame, stats: tuple[str, ...], partition: str | None = None,
                  note: str | None = None) -> None:
        """Replace the table's rows with ``df`` in one commit (creating it the first time, or again
        with ``df``'s columns and partitioned by ``partition`` where it was otherwise); ``note``: what
        :meth:`notes` gives of the commit."""
        self._write(df, stats, note, mode="overwrite", schema_mode="overwrite",
                    partition_by=[partition] if partition else None)

    def append(self, df: pl.DataFrame, stats: tuple[str, ...], note: str | None = None) -> None:
        """Add ``df``'s rows (the table's columns) in one commit (``note``: see :meth:`overwrite`)."""
        self._write(df, stats, note, mode="append")

    def notes(self, commits: int) -> list[str | None]:
        """The notes of the last ``commits`` commits, the latest first (fewer where the log holds fewer;
        None for a commit without one): what wrote them, read from the log's last entries alone."""
        with self._lock:
            dt = self._table()
            return [] if dt is None else [entry.get(NOTE) for entry in dt.history(limit=commits)]

    def replace(self, df: pl.DataFrame, stats: tuple[str, ...], partition: str, values: Iterable[str]) -> None:
        """Replace the rows of the partitions ``partition`` = each of ``values`` with ``df`` (which holds
        that column) in one commit; the other partitions stay as they are. Values are a store's partition
        names (checked: they go into the commit's predicate)."""
        values = sorted(set(values))
        if not values or not all(PARTITION_VALUE.fullmatch(v) for v in values):
            raise ValueError(f"{self.uri}: not partition names: {values}")
        where = f"{partition} IN ({', '.join(repr(v) for v in values)})"
        self._write(df, stats, None, mode="overwrite", partition_by=[partition], predicate=where)

    def _write(self, df: pl.DataFrame, stats: tuple[str, ...], note: str | None, **how) -> None:
        import pyarrow as pa
        from deltalake import ColumnProperties, CommitProperties, WriterProperties, write_deltalake

        def rows() -> pa.RecordBatchReader:  # some rows converted at a time (anew for each try of the commit):
            # Arrow's copy of the whole frame held 0.3 GB more for 0.2 GB of rows
            return pa.RecordBatchReader.from_batches(df.head(0).to_arrow().schema, (
                batch for some in df.iter_slices(INDEX_GROUP_ROWS) for batch in some.to_arrow().to_batches()))

        deltas = ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
        packed = WriterProperties(compression="ZSTD", compression_level=INDEX_LEVEL, max_row_group_size=INDEX_GROUP_ROWS,
                                  column_properties={c: deltas for c in DELTA_COLUMNS if c in df.columns})
        properties = {**self._properties(), "delta.dataSkippingStatsColumns": ",".join(stats),
                      "delta.logRetentionDuration": "interval 1 days"}
        with self._writing(), self.creating():  # the first write creates the table
            dt = self._table()
            if dt is not None and any(dt.metadata().configuration.get(k) != v for k, v in properties.items()):
                dt.alter.set_table_properties(properties)  # a table written before these properties
            noted = CommitProperties(custom_metadata={NOTE: note}) if note else None
            self._committing(lambda: write_deltalake(
                self.uri, rows(), storage_options=self.options, configuration=properties, writer_properties=packed,
                commit_properties=noted, **how))

    def scan(self, partitions: Iterable[str] | None = None, paths_as: str | None = None,
             snapshot: tuple[int, list[str]] | None = None) -> pl.LazyFrame | None:
        """The rows (of the partitions named ``column=value`` alone, with ``partitions``); None while
        there is no table (or no file of those partitions). Partition columns are not in the files: with
        ``paths_as``, a column of that name holds each row's file. ``snapshot``: the version and files to read
        (:meth:`snapshot`'s), else the latest."""
        version, rels = snapshot or self.snapshot()
        if partitions is not None:
            prefixes = tuple(f"{p}/" for p in partitions)
            rels = [rel for rel in rels if rel.startswith(prefixes)]
        return (pl.scan_parquet([f"{self.uri}/{rel}" for rel in rels], storage_options=self.options,
                                include_file_paths=paths_as) if version >= 0 and rels else None)
