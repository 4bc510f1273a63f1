"""The event store: a Delta Lake table of Parquet segments,
``<root>/events/source=<s>/date=<YYYY-MM|unknown>/<segment>.parquet`` (a UTC month; days in stores written before) and ``<root>/events/_delta_log``,
in a local or shared directory or in an object store (:mod:`observe.store.place`).

Every write is a new uniquely named segment written to a hidden temporary name, fsync'd and renamed
into place, then committed to the table's log (:mod:`observe.store.table`): a file is part of the
store from its commit on, so readers (observe or any engine that reads Delta) never see a partial
file or a half-shipped batch, and writers never collide. Compaction writes its outputs, then swaps
them for the segments they replace in one commit, so a query sees each record exactly once
throughout; replaced segments are deleted only after a grace period (vacuum), so a query that
listed them just before the switch can still read them. A crash before a commit leaves files no
commit names: invisible, and removed by a later vacuum.

The store holds every user's job output and root-only log lines, and root writes it: what it creates
is root's and its group's alone (directories DIR_MODE, files FILE_MODE, the group OBSERVE_STORE_GROUP
names); as root it refuses a store that anyone else can write, and it follows no symlink inside one
(a link planted there would have root write, read or ship whatever it points to).

In an object store a segment is written under its final name (an object appears whole when its
upload completes, so there is nothing to rename), and the table's log takes commits by conditional
writes (delta-rs): writers need no lock to keep the table right. The store's own locks (one ingest,
one compaction, the drain ledger at a time) are then this host's: run ingest and compaction of an
object store from one host, as a central committer does.
"""
from __future__ import annotations

import fcntl
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import polars as pl

from observe.schema import POLARS_SCHEMA, conform, from_stored, to_stored
from observe.store import copy_marks, notable
from observe.store.compaction import COMPACT_GRACE_S
from observe.store.compactor import Compactor
from observe.store.files import (DIR_MODE, FILE_MODE, UnsafeStore, atomic_file, check_dir, create_file, create_temp, fsync_path,
                                 open_nofollow, regular_names, store_group, subdirs, write_atomic)
from observe.store.incoming import Incoming
from observe.store.inputs import InputLedger
from observe.store.layout import (SEGMENT_ORDER, Partition, buffered_parts, no_records, pruned, scan_segments,
                                  split_partitions, write_compacted, write_ingested)
from observe.store.place import LocalPlace, Place, place_of
from observe.store.table import EventTable, IndexTable, LegacyLayout, Written, written
from observe.store.upkeep import Upkeep
from observe.store.writer import BUFFER_BYTES, SEGMENT_ROWS, WRITE_THREADS, SegmentWriter

# what the rest of observe uses; the package's modules hold the parts (files, layout, the input ledger,
# incoming segments, compaction, upkeep, the writer)
__all__ = ["LegacyLayout", "Partition", "SegmentWriter", "Store", "StoreBusy", "UnsafeStore", "atomic_file",
           "buffered_parts", "create_temp", "fsync_path", "no_records", "open_nofollow", "regular_names", "scan_segments",
           "subdirs", "write_atomic"]

# lock files of a store in an object store: on this host, root's own (see the module's docstring)
REMOTE_LOCKS = Path("~/.cache/observe/locks")


class Store:
    """A store rooted at a local directory (created on first write) or at a prefix of an object store.

    It writes, lists and reads segments and holds the locks; what else a store does has a class of
    its own, reached from here: ``ledger`` (which inputs are stored, :mod:`observe.store.inputs`),
    ``incoming`` (what collectors shipped, :mod:`observe.store.incoming`), ``compactor``
    (:mod:`observe.store.compactor`) and ``upkeep`` (retention, vacuum, repair,
    :mod:`observe.store.upkeep`)."""

    def __init__(self, root: str | os.PathLike[str]):
        text = str(root)
        self.location = text  # as given: what a worker process opens
        placed = place_of(text)
        self.place: LocalPlace | Place
        self.root: Path | PurePosixPath
        if placed is not None:
            (self.place, self.root), self.gid = placed, None
        else:
            # resolved once: an admin may link /var/lib/observe elsewhere; nothing inside is followed
            self.root = Path(text.removeprefix("file://")).expanduser().resolve()
            self.gid = store_group()
            self.place = LocalPlace(self.gid)
            try:
                check_dir(self.root, os.stat(self.root))
            except (FileNotFoundError, NotADirectoryError):
                pass  # created on first write; not a directory: writes fail, commands say so
        self.name = self.place.uri(self.root)  # an object store's without the query string's options
        self.events = self.root / "events"
        self.inbox = self.root / "incoming" / "events"  # shipped segments, committed by adopt
        self.inputs = self.root / "inputs"
        self.table = EventTable(self.events, COMPACT_GRACE_S, self._creating, self.place)
        self._indexes: dict[str, IndexTable] = {}
        self._made: set[Path] = set()  # directories made or checked by this process
        self._parsed: tuple[int, list[tuple[str, str, Path]]] = (-1, [])  # live's, by table version
        self._rels: list[str] = []  # the live files' relative paths, in live's order
        self._spanned: tuple[tuple[int, int], dict[Path, tuple[int, int]]] = ((-1, -1), {})  # their time ranges (us), by versions
        self.notable_covered: tuple[int, set[str]] | None = None  # the notable index's segments, by its version
        self._rows: dict[Path, Written] = {}  # what the segments written and not yet committed hold (their commits' statistics)
        self._rows_lock = threading.Lock()
        self.ledger = InputLedger(self.place, self.inputs, self.make_dirs)
        self.incoming = Incoming(self)
        self.compactor = Compactor(self, rewrite)
        self.upkeep = Upkeep(self)

    def __repr__(self) -> str:
        return f"Store({self.name!r})"

    def exists(self) -> bool:
        """Whether anything is stored here yet (a mistyped location reads as an empty store)."""
        return self.place.exists(self.root) if self.place.local else self.place.has_dir(self.root)

    def has_events(self) -> bool:
        """Whether events were written here (a table, or the directory of a store from before one)."""
        return self.place.has_dir(self.events)

    def uri(self, path: Path | PurePosixPath) -> str:
        """A file of the store as polars and delta-rs open it."""
        return self.place.uri(path)

    def scan_files(self, files: list[Path], paths_as: str | None = None) -> pl.LazyFrame:
        """Segment files of this store, in the stored layout (:func:`scan_segments`); with
        ``paths_as``, a column of that name holds each row's file (as :meth:`uri` names it)."""
        return scan_segments([self.uri(f) for f in files], self.table.options, paths_as)

    def has_file(self, path: Path | PurePosixPath) -> bool:
        return self.place.exists(path)

    def footer(self, path: Path | PurePosixPath):
        """A segment's Parquet metadata."""
        return self.place.footer(path)

    # -- writing -------------------------------------------------------------------------------
    def make_dirs(self, directory: Path) -> None:
        """Create ``directory`` (the root or one inside it) and its missing parents in the store:
        DIR_MODE, the store's group, setgid where it is set (as the kernel does below a setgid
        directory) so that what is created below inherits the group. Existing ones are checked as
        they are passed (:func:`check_dir`); one made or checked before by this process only has to
        be a directory still (one lstat: expired meanwhile, it is made again). An object store has
        no directories."""
        if not self.place.local:
            return
        if directory in self._made:
            try:
                if stat.S_ISDIR(os.lstat(directory).st_mode):
                    return
            except FileNotFoundError:
                pass
        self.root.parent.mkdir(parents=True, exist_ok=True)  # outside the store: the admin's
        rel = directory.relative_to(self.root).parts
        for path in [self.root.joinpath(*rel[:i]) for i in range(len(rel) + 1)]:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                check_dir(path, os.lstat(path))
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if self.gid is not None:
                    os.fchown(fd, -1, self.gid)
                setgid = self.gid is not None or os.fstat(fd).st_mode & stat.S_ISGID
                os.fchmod(fd, DIR_MODE | (stat.S_ISGID if setgid else 0))
            finally:
                os.close(fd)
        self._made.add(directory)

    def create(self, path: Path) -> BinaryIO:
        """A new file of the store (FILE_MODE, its group), open for writing: see :func:`create_file`."""
        return self.place.create(path)

    def write(self, df: pl.DataFrame, deliver: bool = False) -> list[Path]:
        """Write ``df`` (conformed to the schema) as one new segment per partition it touches, each
        committed. With ``deliver`` they go to ``incoming/`` instead, as a collector ships, and the
        central ``observe compact`` commits them (:meth:`adopt`): what every node writes often (its
        hooks' check results) does not contend for the table's log, and is seen once committed."""
        parts = split_partitions(conform(df))
        written = [self.write_partition(source, day, part.sort(*SEGMENT_ORDER), durable=not deliver, inbox=deliver)
                   for (source, day), part in parts.items()]
        return [f for f, _ in self.durable(written)] if deliver else written

    def write_partition(self, source: str, day: str, df: pl.DataFrame, tag: str = "s", durable: bool = True,
                        inbox: bool = False) -> Path:
        """Write the rows of one partition (conformed, or as :func:`buffered_parts` gives them), in
        their order, as a new segment named ``<tag>-<uuid>.parquet`` (with ``inbox``, under
        ``incoming/``). With ``durable=False`` the segment stays under its hidden temporary name,
        which is returned: :meth:`publish` it."""
        if "header" not in df.columns:
            df = to_stored(df)
        self.ledger.mark(set(df.get_column("file_id").unique().drop_nulls().to_list()))
        top = self.inbox if inbox else self.events
        return self.write_file(df, top / f"source={source}" / f"date={day}", f"{tag}-{uuid.uuid4().hex}.parquet",
                                durable=durable)

    def publish(self, temps: list[Path], commit: bool = True) -> list[tuple[Path, Written]]:
        """Make segments written with ``durable=False`` durable (:meth:`durable`) and, with ``commit``,
        visible in one commit (else :meth:`commit` them later); the segments and what they hold."""
        self.table.ensure()
        done = self.durable(temps)
        if commit:
            self.commit(done)
        return done

    def commit(self, segments: list[tuple[Path, Written]]) -> None:
        """One commit adding durable segments (with what they hold) to the table."""
        self.table.append(segments)

    def durable(self, temps: list[Path]) -> list[tuple[Path, Written]]:
        """Segments written with ``durable=False`` durable under their final names (not committed: a
        spool's segments, a compaction's outputs), with what they hold."""
        with self._rows_lock:
            rows = [self._rows.pop(t) for t in temps]
        return list(zip(self.place.durable(temps), rows))

    def writer(self, max_rows: int = SEGMENT_ROWS, budget_bytes: int = BUFFER_BYTES,
               threads: int = WRITE_THREADS) -> SegmentWriter:
        """A buffered writer: one segment per partition per ``max_rows`` rows, memory bounded by
        ``budget_bytes`` (see :class:`SegmentWriter`)."""
        return SegmentWriter(self, max_rows, budget_bytes, threads)

    def write_file(self, df: pl.DataFrame, directory: Path, name: str, compacted: bool = False,
                    durable: bool = True) -> Path:
        self.make_dirs(directory)
        tmp = self.place.temp_name(directory, name)
        with self.create(tmp) as f:
            (write_compacted if compacted else write_ingested)(df, f)
        with self._rows_lock:
            self._rows[tmp] = written(df)
        return self.publish([tmp])[0][0] if durable else tmp

    def _creating(self) -> AbstractContextManager:
        """Held while a table of the store is created or its index rewritten (across processes)."""
        return self.lock("table", wait_s=60)

    def index(self, name: str) -> IndexTable:
        """The derived table ``<root>/index/<name>`` (a Delta table, rewritten whole: the job index)."""
        if name not in self._indexes:
            self._indexes[name] = IndexTable(self.root / "index" / name, COMPACT_GRACE_S, self._creating, self.place)
        return self._indexes[name]

    def live(self) -> list[tuple[str, str, Path]]:
        """The live segments as (source, date, path), in path order, parsed once per table version."""
        version, rels = self.table.snapshot()
        if self._parsed[0] != version or version < 0:
            self._rels = sorted(rels)
            parts = [rel.split("/", 2) for rel in self._rels]
            self._parsed = version, [(source.removeprefix("source="), day.removeprefix("date="), self.events / rel)
                                     for rel, (source, day, _) in zip(self._rels, parts)]
        return self._parsed[1]

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, sources: Iterable[str] | None = None, since: datetime | None = None,
                   until: datetime | None = None, undated: bool = False) -> list[Partition]:
        """Partitions of ``sources`` whose months (or days) meet those of ``since`` and ``until`` (and, with
        ``undated``, those of events without a time, which a time range otherwise leaves out)."""
        return sorted({Partition(source, day, self.events / f"source={source}" / f"date={day}")
                       for source, day, _ in pruned(self.live(), {}, sources, since, until, undated)}, key=lambda p: p.path)

    def segments(self, directory: Path) -> list[Path]:
        """The live segment files of one partition directory."""
        source, day = directory.parent.name.removeprefix("source="), directory.name.removeprefix("date=")
        return [f for s, d, f in self.live() if (s, d) == (source, day)]

    def files(self, sources: Iterable[str] | None = None, since: datetime | None = None,
              until: datetime | None = None, undated: bool = False) -> list[Path]:
        """Segment files to read for the given filters: by their partitions, then by the time range
        their commits give."""
        return [f for _, _, f in self._files(sources, since, until, undated)]

    def _files(self, sources: Iterable[str] | None, since: datetime | None, until: datetime | None,
               undated: bool) -> list[tuple[str, str, Path]]:
        return pruned(self.live(), {} if since is None and until is None else self.spans(), sources, since, until, undated)

    def spans(self) -> dict[Path, tuple[int, int]]:
        """The live files' time ranges (first and last event, microseconds since the epoch) as their
        commits give them; a file with no dated row, or committed by an observe before ranges, has none."""
        live = self.live()
        version, spans = self.table.spans()
        if self._spanned[0] != (version, self._parsed[0]):
            self._spanned = (version, self._parsed[0]), {f: spans[rel] for rel, (_, _, f) in zip(self._rels, live) if rel in spans}
        return self._spanned[1]

    @contextmanager
    def lock(self, name: str, wait_s: float = 0.0, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the advisory lock ``<root>/.<name>.lock`` (flock; across hosts where the shared file
        system supports it, as NFSv4 and Lustre with -o flock do); StoreBusy if still held after
        ``wait_s``. ``waiting`` is called once if the lock is held when asked for. A store in an object
        store is locked on this host only (the module's docstring says why that is enough)."""
        if not self.place.local:
            locks = REMOTE_LOCKS.expanduser()
            locks.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = locks / f"{uuid.uuid5(uuid.NAMESPACE_URL, self.name).hex}.{name}.lock"
        else:
            self.make_dirs(self.root)
            path = self.root / f".{name}.lock"
        end = time.monotonic() + wait_s
        try:
            f = self.create(path) if self.place.local else create_file(path, FILE_MODE)
        except FileExistsError:
            f = open_nofollow(path, write=True)  # for writing: NFS locks only files open for writing
        with f:
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= end:
                        raise StoreBusy(f"{self.name}: another process holds the {name} lock") from None
                    if waiting is not None:
                        waiting()
                        waiting = None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def scan(self, sources: Iterable[str] | None = None, since: datetime | None = None,
             until: datetime | None = None, undated: bool = False) -> pl.LazyFrame:
        """A LazyFrame of events; ``since``/``until`` prune partitions here and row groups in polars.

        With ``undated``, events without a time pass the time filter too.
        """
        return self.events_in(self.files(sources, since, until, undated), since, until, undated)

    def events_in(self, files: list[Path], since: datetime | None = None, until: datetime | None = None,
                  undated: bool = False, kept: bool = False, kinds: list[str] | None = None,
                  stale: pl.Expr | None = None) -> pl.LazyFrame:
        """:meth:`scan` of some of the live segments (:meth:`files` names them): a share of a scan. With
        ``kept``, rows marked as copies (``copy_of``, :func:`copy_marks.stale`) are left out, but for those
        ``stale`` selects, where the marks are to be decided again: every row then carries its mark
        (:data:`MARK`). With ``kinds``,
        only rows of those kinds are asked for: rare ones are read from the notable index where it
        covers a segment (:mod:`observe.store.notable`); the caller still filters on kind."""
        if not files:
            return pl.LazyFrame(schema=POLARS_SCHEMA | ({} if stale is None else {MARK: pl.String}))
        scan = notable.scan(self, files, kinds) if notable.wanted(kinds) else self.scan_files(files)
        scan = scan.filter(pl.col("copy_of").is_null() | (pl.lit(False) if stale is None else stale)) if kept else scan
        lf = from_stored(scan if stale is None else scan.with_columns(pl.col("copy_of").alias(MARK)))
        keep = pl.col("ts").is_null() if undated else pl.lit(False)
        if since is not None:
            lf = lf.filter(keep | (pl.col("ts") >= since))
        if until is not None:
            lf = lf.filter(keep | (pl.col("ts") < until))
        return lf

    def known(self, file_id: str) -> pl.DataFrame:
        """Records already stored for one input: ``offset`` and ``text`` (a hash of ``raw``). Inputs
        never seen have no marker in ``<root>/inputs/`` and cost no scan."""
        return self.known_many([file_id]).get(file_id, no_records())

    def known_many(self, file_ids: Iterable[str]) -> dict[str, pl.DataFrame]:
        """:meth:`known` for many inputs in one scan of the store (a run's inputs: a scan per input
        made re-ingesting thousands of files ten times slower than ingesting them); inputs with
        nothing stored are left out."""
        ids = sorted({i for i in file_ids if i and self.ledger.has(i)})
        files = self.files() if ids else []
        if not files:
            return {}
        lf = from_stored(self.scan_files(files).filter(pl.col("file_id").is_in(ids)))
        found = lf.select("file_id", "offset", pl.col("raw").hash().alias("text")).unique().collect()
        return {fid: part.drop("file_id") for (fid,), part in found.partition_by("file_id", as_dict=True).items()}

    # -- maintenance ---------------------------------------------------------------------------
    def stats(self) -> pl.DataFrame:
        """Per partition: segments, rows, bytes (from the table's log: no file is opened)."""
        files = pl.DataFrame(self.table.files(), schema={"path": pl.String, "bytes": pl.Int64, "rows": pl.Int64,
                                                         "mtime": pl.Int64}, orient="row")
        part = pl.col("path").str.extract_groups(r"^source=([^/]*)/date=([^/]*)/").struct
        return (files.group_by(part.field("1").alias("source"), part.field("2").alias("date"))
                .agg(pl.len().cast(pl.Int64).alias("segments"), pl.col("rows").sum(), pl.col("bytes").sum())
                .sort("source", "date"))


def rewrite(location: str, directory: Path, segs: list[Path], file_rows: int,
            held: int | None = None) -> tuple[list[tuple[Path, Written]], int]:
    """A batch's compaction outputs written by a store opened at ``location`` (in a pool's worker)."""
    return Store(location).compactor.rewrite(directory, segs, file_rows, held)


MARK = "_copy_of"  # a row's stored copy mark, where a reader decides stale marks again (events have no copy_of)


class StoreBusy(RuntimeError):
    """Another process holds one of the store's locks (compaction, drains)."""
