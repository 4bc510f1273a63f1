"""The Parquet event store: ``<root>/events/source=<s>/date=<YYYY-MM-DD|unknown>/<segment>.parquet``.

Every write is a new uniquely named segment written to a hidden temporary name, fsync'd and renamed
into place, so readers never see a partial file and writers never collide. Compaction first writes
a small JSON note naming the segments it replaces and the files it will write, then writes those
files sorted by time; readers use the new files only once all of them exist, and the replaced ones
until then, so the switch happens at the last rename and a query sees each record exactly once
throughout. Replaced segments are deleted only after a grace period, so a query that listed them
just before the switch can still read them.

The store holds every user's job output and root-only log lines, and root writes it: what it creates
is root's and its group's alone (directories DIR_MODE, files FILE_MODE, the group OBSERVE_STORE_GROUP
names); as root it refuses a store that anyone else can write, and it follows no symlink inside one
(a link planted there would have root write, read or ship whatever it points to).
"""
from __future__ import annotations

import errno
import fcntl
import grp
import json
import os
import shutil
import stat
import threading
import time
import uuid
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from observe.schema import EVENT_SCHEMA, KEY, STORED_SCHEMA, conform, from_stored, stored_raw, to_stored

ROW_GROUP_ROWS = 128 * 1024
SEGMENT_ROWS = 250_000
MAX_UNITS = 4  # input chunks whose rows may wait in a writer at once
WRITE_THREADS = 2
PUBLISH_SEGMENTS = 16  # a writer's segments are made durable and visible this many at a time
ZSTD_LEVEL = 1  # ingest writes fast; compaction rewrites partitions smaller (slower zstd levels)
COMPACT_LEVEL = 6
COMPACT_TEXT_LEVEL = 16
TEXT_COLUMNS = ("message", "header", "raw", "attrs")
# Dictionary-coded columns of a few values (or none) are a few bytes a page already: left
# uncompressed, which spares a zstd context per page (measured: writes 14% faster, files 0.3% larger)
PLAIN_COLUMNS = ("node", "source", "severity", "kind", "job_id", "rank", "gpu", "code", "file_id")
# zstd level per column (columns not named are left uncompressed): ingest writes fast, compaction small
INGEST_LEVELS = {c: ZSTD_LEVEL for c in STORED_SCHEMA.names if c not in PLAIN_COLUMNS}
COMPACT_LEVELS = {c: COMPACT_TEXT_LEVEL if c in TEXT_COLUMNS else COMPACT_LEVEL for c in STORED_SCHEMA.names}
# Rows of one input stay together, in file order: offsets and times then delta-encode to almost
# nothing and neighbouring lines compress together (smaller and faster than sorting by time);
# row groups still carry ts statistics, and the partition is one day.
SEGMENT_ORDER = ("file_id", "offset")
# Encodings measured on the bench's logs: times and offsets in input order are small deltas; a pid's
# bytes split into streams leave zstd runs of zero high bytes; consecutive headers share prefixes
# ("Sep  5 23:00:0", "gpu003:3034541:3034602 [1] ") that DELTA_BYTE_ARRAY stores once.
COLUMN_ENCODINGS = {"ts": "DELTA_BINARY_PACKED", "offset": "DELTA_BINARY_PACKED", "pid": "BYTE_STREAM_SPLIT",
                    "header": "DELTA_BYTE_ARRAY"}
DICTIONARY_COLUMNS = ["node", "source", "severity", "kind", "job_id", "gpu", "program", "file_id", "code", "rank"]
# min/max kept for what queries filter on (a partition holds one source; offsets are read, not filtered)
STATISTICS_COLUMNS = ["ts", "node", "kind", "job_id", "code", "file_id"]
WRITE_BATCH_ROWS = 64 * 1024  # rows the Parquet encoder takes at a time (its default, 1024, costs 4% more)
UNKNOWN_DATE = "unknown"
COMPACT_FILE_ROWS = 1_000_000  # rows per compacted file at most
COMPACT_SLICE_BYTES = 32 << 20  # and at most this much uncompressed data: one step's memory (peak ~10x)
COMPACT_GRACE_S = 600.0  # replaced segments outlive a compaction this long, for queries already planned
DIR_MODE = 0o750  # root writes; the store's group (the people who may query) reads; nobody else
FILE_MODE = 0o640
_WRITE_SCHEMA = pa.schema([pa.field(f.name, pa.string_view() if f.type == pa.string() else f.type)
                           for f in STORED_SCHEMA])


@dataclass(frozen=True)
class Partition:
    source: str
    date: str
    path: Path


STORED_COLUMNS = pl.Schema(pl.from_arrow(STORED_SCHEMA.empty_table()).schema)


def scan_segments(paths: Iterable[Path]) -> pl.LazyFrame:
    """Segments in the stored layout; a column a segment predates (``route``, from before routes
    were kept) reads as null, which no check trusts."""
    return pl.scan_parquet([str(p) for p in paths], schema=STORED_COLUMNS, missing_columns="insert",
                           hive_partitioning=False)


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory (a rename or a new file in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class UnsafeStore(ValueError):
    """A store that others can write, or a symlink inside one: refused (a ValueError, so commands
    report it as their one-line error)."""


def store_group() -> int | None:
    """The group that may read what the store creates: $OBSERVE_STORE_GROUP (a name or a number), or
    None (the creator's, or that of a setgid directory, which the kernel passes on)."""
    name = os.environ.get("OBSERVE_STORE_GROUP", "")
    if not name:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"OBSERVE_STORE_GROUP={name}: no such group") from None


def _check_dir(path: Path, st: os.stat_result) -> None:
    """Refuse a store directory that is a symlink or, when running as root, one that another user
    could write (they could plant there what root then follows, reads and ships)."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeStore(f"{path}: a symlink inside the store; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
        who = f"owned by uid {st.st_uid}" if st.st_uid != 0 else \
            f"writable by {'everyone' if st.st_mode & stat.S_IWOTH else 'its group'}"
        raise UnsafeStore(f"store {path}: {who}; as root, observe uses a store only if root alone can write it "
                          f"(chown root and chmod go-w it)")


def create_file(path: Path, mode: int | None = None, gid: int | None = None) -> BinaryIO:
    """A new file at ``path`` open for writing, never through a symlink (O_EXCL, O_NOFOLLOW: nothing
    may be there yet). With ``mode``, exactly that mode (whatever the umask) and the group ``gid``,
    both set before a byte is written; without, 0666 less the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666 if mode is None else 0o600)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        if mode is not None:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def open_nofollow(path: Path, write: bool = False) -> BinaryIO:
    """An existing file opened for reading (or writing, to lock it) unless it is a symlink."""
    try:
        fd = os.open(path, (os.O_WRONLY if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStore(f"{path}: a symlink inside the store; refusing to follow it") from None
        raise
    return os.fdopen(fd, "wb" if write else "rb")


def regular_names(directory: Path) -> list[str]:
    """The names of the regular files in ``directory`` (none if it is missing), hidden ones
    (temporaries, locks) left out. Symlinks are left out too: one named like a segment would have
    queries read, and the collector ship, whatever it points to."""
    try:
        with os.scandir(directory) as it:
            return [e.name for e in it if not e.name.startswith(".") and e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


class Store:
    """A store rooted at a local directory (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]):
        text = str(root)
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif "://" in text:
            raise ValueError(f"store {text!r}: only local paths and file:// URLs are supported so far")
        # resolved once: an admin may link /var/lib/observe elsewhere; nothing inside is followed
        self.root = Path(text).expanduser().resolve()
        self.gid = store_group()
        try:
            _check_dir(self.root, os.stat(self.root))
        except (FileNotFoundError, NotADirectoryError):
            pass  # created on first write; not a directory: writes fail, commands say so
        self.events = self.root / "events"
        self.inputs = self.root / "inputs"
        self._marked: set[str] = set()  # inputs this process has marked
        self._noted: set[str] = set()  # inputs about to be written, marked with the next segment
        self._mark_lock = threading.Lock()
        self._listed: tuple[int, set[str], set[str]] = (-1, set(), set())  # inputs/ mtime, marker files read, ids
        self._preloaded: dict[str, pl.DataFrame] = {}

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- writing -------------------------------------------------------------------------------
    def make_dirs(self, directory: Path) -> None:
        """Create ``directory`` (the root or one inside it) and its missing parents in the store:
        DIR_MODE, the store's group, setgid where it is set (as the kernel does below a setgid
        directory) so that what is created below inherits the group. Existing ones are checked as
        they are passed (:func:`_check_dir`), every time: a directory may be expired meanwhile."""
        self.root.parent.mkdir(parents=True, exist_ok=True)  # outside the store: the admin's
        rel = directory.relative_to(self.root).parts
        for path in [self.root.joinpath(*rel[:i]) for i in range(len(rel) + 1)]:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                _check_dir(path, os.lstat(path))
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                if self.gid is not None:
                    os.fchown(fd, -1, self.gid)
                setgid = self.gid is not None or os.fstat(fd).st_mode & stat.S_ISGID
                os.fchmod(fd, DIR_MODE | (stat.S_ISGID if setgid else 0))
            finally:
                os.close(fd)

    def create(self, path: Path) -> BinaryIO:
        """A new file of the store (FILE_MODE, its group), open for writing: see :func:`create_file`."""
        return create_file(path, FILE_MODE, self.gid)

    def write(self, df: pl.DataFrame) -> list[Path]:
        """Write ``df`` (conformed to the schema) as one new segment per partition it touches."""
        parts = split_partitions(conform(df))
        return [self.write_partition(source, day, part.sort(*SEGMENT_ORDER)) for (source, day), part in parts.items()]

    def write_partition(self, source: str, day: str, df: pl.DataFrame, tag: str = "s", durable: bool = True) -> Path:
        """Write the rows of one partition (conformed, or as :func:`buffered_parts` gives them), in
        their order, as a new segment named ``<tag>-<uuid>.parquet``. With ``durable=False`` the
        segment stays under its hidden temporary name, which is returned: :meth:`publish` it."""
        if "header" not in df.columns:
            df = to_stored(df)
        self._mark(set(df.get_column("file_id").unique().drop_nulls().to_list()))
        return self._write_file(df, self.events / f"source={source}" / f"date={day}", f"{tag}-{uuid.uuid4().hex}.parquet",
                                durable=durable)

    @staticmethod
    def publish(temps: list[Path]) -> list[Path]:
        """Make segments written with ``durable=False`` durable and visible: each fsync'd, then
        renamed into place, then each directory fsync'd once. One journal commit serves many files
        (measured: 0.8 s of a 9 s ingest went to a commit per segment)."""
        for tmp in temps:
            fsync_path(tmp)
        finals = [tmp.with_name(tmp.name[1:-len(".tmp")]) for tmp in temps]
        for tmp, final in zip(temps, finals):
            os.replace(tmp, final)
        for directory in {f.parent for f in finals}:
            fsync_path(directory)
        return finals

    def note_inputs(self, file_ids: Iterable[str]) -> None:
        """Inputs whose records are about to be written: marked together with the next segment."""
        with self._mark_lock:
            self._noted.update(file_ids)

    def _mark(self, file_ids: set[str]) -> None:
        """Record, before their records are written, that these inputs have records in the store:
        one file ``inputs/<uuid>.ids`` (one id a line) for them and every input noted so far."""
        if file_ids <= self._marked:
            return
        with self._mark_lock:
            new = (file_ids | self._noted) - self._marked
            if new:
                self.make_dirs(self.inputs)
                write_atomic(self.inputs / f"{uuid.uuid4().hex}.ids", "".join(f"{i}\n" for i in sorted(new)).encode(), self)
                self._marked |= new
            self._noted.clear()

    def has_input(self, file_id: str) -> bool:
        """Whether records of the input ``file_id`` may be in the store (its marker exists)."""
        if file_id in self._marked:
            return True
        try:
            mtime = os.stat(self.inputs).st_mtime_ns
        except FileNotFoundError:
            return False
        seen, read, ids = self._listed
        if mtime != seen:  # a marker was added since the last listing: read the new ones
            for name in regular_names(self.inputs):
                if name.endswith(".ids") and name not in read:
                    try:
                        with open_nofollow(self.inputs / name) as f:
                            ids.update(f.read().decode().split())
                    except FileNotFoundError:
                        continue
                    read.add(name)
                elif not name.endswith(".ids"):
                    ids.add(name)  # one empty file per input (stores written before .ids files)
            self._listed = (mtime, read, ids)
        return file_id in ids

    def writer(self, max_rows: int = SEGMENT_ROWS, max_units: int = MAX_UNITS,
               threads: int = WRITE_THREADS) -> SegmentWriter:
        """A buffered writer: one segment per partition per ``max_rows`` rows (bounded memory; see
        :class:`SegmentWriter`)."""
        return SegmentWriter(self, max_rows, max_units, threads)

    def _write_file(self, df: pl.DataFrame, directory: Path, name: str, levels: dict[str, int] = INGEST_LEVELS,
                    durable: bool = True) -> Path:
        self.make_dirs(directory)
        tmp = directory / f".{name}.tmp"
        # polars' string views go to the encoder as they are (no conversion to Arrow's offsets
        # layout); the file records plain Parquet types, which every reader maps to strings
        table = df.to_arrow(compat_level=pl.CompatLevel.newest())
        if not table.schema.equals(_WRITE_SCHEMA):  # a cast imports pyarrow.compute (0.15 s) the first time
            table = table.cast(_WRITE_SCHEMA)
        with self.create(tmp) as f:
            pq.write_table(
                table, f, compression={c: "zstd" if c in levels else "none" for c in STORED_SCHEMA.names},
                row_group_size=ROW_GROUP_ROWS, compression_level=levels,
                use_dictionary=DICTIONARY_COLUMNS, column_encoding=COLUMN_ENCODINGS, write_statistics=STATISTICS_COLUMNS,
                write_batch_size=WRITE_BATCH_ROWS,
                store_schema=False,
            )
        return self.publish([tmp])[0] if durable else tmp

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, sources: Iterable[str] | None = None, since: datetime | None = None,
                   until: datetime | None = None, undated: bool = False) -> list[Partition]:
        """Partitions that can hold events of ``sources`` between ``since`` and ``until`` (and,
        with ``undated``, those of events without a time, which a time range otherwise leaves out)."""
        wanted = set(sources) if sources else None
        lo = since.strftime("%Y-%m-%d") if since else None
        hi = until.strftime("%Y-%m-%d") if until else None
        out = []
        for source, sdir in subdirs(self.events, "source="):
            if wanted is not None and source not in wanted:
                continue
            for day, ddir in subdirs(sdir, "date="):
                if day == UNKNOWN_DATE:
                    if (lo or hi) and not undated:
                        continue
                elif (lo and day < lo) or (hi and day > hi):
                    continue
                out.append(Partition(source, day, Path(ddir)))
        return out

    @staticmethod
    def segments(directory: Path) -> list[Path]:
        """The live segment files of one partition directory (replaced ones, and the files of a
        compaction not yet complete, left out)."""
        for _ in range(10):  # a note deleted while we read: list again
            names = regular_names(directory)
            listed = {n for n in names if n.endswith(".parquet")}
            files = set(listed)
            try:
                for note in _notes(names):
                    replaces, outputs = _read_note(directory / note)
                    files.difference_update(replaces if outputs <= listed else outputs)
            except FileNotFoundError:
                continue
            return [directory / n for n in sorted(files)]
        raise RuntimeError(f"{directory}: its compaction notes keep changing; is a compaction looping?")

    def files(self, sources: Iterable[str] | None = None, since: datetime | None = None,
              until: datetime | None = None, undated: bool = False) -> list[Path]:
        """Segment files to read for the given filters (partition pruning)."""
        return [f for p in self.partitions(sources, since, until, undated) for f in self.segments(p.path)]

    @contextmanager
    def lock(self, name: str, wait_s: float = 0.0, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the advisory lock ``<root>/.<name>.lock`` (flock; across hosts where the shared file
        system supports it, as NFSv4 and Lustre with -o flock do); StoreBusy if still held after
        ``wait_s``. ``waiting`` is called once if the lock is held when asked for."""
        self.make_dirs(self.root)
        end = time.monotonic() + wait_s
        path = self.root / f".{name}.lock"
        try:
            f = self.create(path)
        except FileExistsError:
            f = open_nofollow(path, write=True)  # for writing: NFS locks only files open for writing
        with f:
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= end:
                        raise StoreBusy(f"{self.root}: another process holds the {name} lock") from None
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
        files = self.files(sources, since, until, undated)
        if not files:
            return pl.LazyFrame(schema=pl.from_arrow(EVENT_SCHEMA.empty_table()).schema)
        lf = from_stored(scan_segments(files))
        keep = pl.col("ts").is_null() if undated else pl.lit(False)
        if since is not None:
            lf = lf.filter(keep | (pl.col("ts") >= since))
        if until is not None:
            lf = lf.filter(keep | (pl.col("ts") < until))
        return lf

    def known(self, file_id: str, fresh: bool = False) -> pl.DataFrame:
        """Records already stored for one input: ``offset`` and ``text`` (a hash of ``raw``); from
        :meth:`preload` unless ``fresh`` (then read from the store now).

        Inputs never seen have no marker in ``<root>/inputs/`` and cost no scan.
        """
        if not fresh and file_id in self._preloaded:
            return self._preloaded.pop(file_id)
        return self.known_many([file_id]).get(file_id, no_records())

    def known_many(self, file_ids: Iterable[str]) -> dict[str, pl.DataFrame]:
        """:meth:`known` for many inputs in one scan of the store (a run's inputs: a scan per input
        made re-ingesting thousands of files ten times slower than ingesting them); inputs with
        nothing stored are left out."""
        ids = sorted({i for i in file_ids if i and self.has_input(i)})
        files = self.files() if ids else []
        if not files:
            return {}
        lf = from_stored(scan_segments(files).filter(pl.col("file_id").is_in(ids)))
        found = lf.select("file_id", "offset", pl.col("raw").hash().alias("text")).unique().collect()
        return {fid: part.drop("file_id") for (fid,), part in found.partition_by("file_id", as_dict=True).items()}

    def preload(self, known: dict[str, pl.DataFrame]) -> None:
        """Records already stored for inputs about to be ingested (from :meth:`known_many`)."""
        self._preloaded.update(known)

    # -- maintenance ---------------------------------------------------------------------------
    def compact(self, partition: Partition, min_segments: int = 2, grace_s: float = COMPACT_GRACE_S,
                file_rows: int = COMPACT_FILE_ROWS) -> tuple[int, int] | None:
        """Merge a partition's segments into files of consecutive time slices, dropping duplicate
        records, every column compressed harder than at ingest. Within a file, rows are in input order
        (each input's lines together, in file order: 15% smaller than in time order, as neighbouring
        lines share their text); the files' time ranges do not overlap, so a time filter reads only
        the files it needs. Memory is bounded: each file is one time slice of at most about
        ``file_rows`` rows and COMPACT_SLICE_BYTES of data, read with row-group pruning.

        Segments replaced by a compaction more than ``grace_s`` ago are deleted first. Returns
        (segments replaced, rows written), or None when there was nothing to do.
        """
        directory = partition.path
        with self.lock("compact"):
            for note in _notes(regular_names(directory)):  # oldest first: a later one may replace its outputs
                _settle(directory / note, grace_s)
            segs = self.segments(directory)
            if not segs or (len(segs) < min_segments and all(s.name.startswith("c-") for s in segs)):
                return None  # already compacted (a lone ingest segment is still recompressed)
            scan = scan_segments(segs)
            slices = _slices(scan, min(file_rows, _rows_in(segs, COMPACT_SLICE_BYTES)))
            name = f"c-{time.time_ns():016x}-{uuid.uuid4().hex[:8]}"  # names sort in time order
            planned = [f"{name}-{i:04d}.parquet" for i in range(len(slices))]
            note = directory / f"{name}.json"
            replaces = [s.name for s in segs]
            write_atomic(note, json.dumps({"replaces": replaces, "outputs": planned}).encode(), self)
            rows, written = 0, []
            for output, where in zip(planned, slices):
                # a duplicate is the same input's same text at the same offset (inputs may share an identity)
                df = superseded_dropped(scan.filter(where).collect()
                                        .unique(subset=[*KEY, "raw", "header", "message"], keep="first", maintain_order=True)
                                        ).sort(*SEGMENT_ORDER)
                if df.height:
                    self._write_file(df, directory, output, levels=COMPACT_LEVELS)
                    written.append(output)
                    rows += df.height
            if written != planned:  # an empty slice: the note's rewrite is the switch
                write_atomic(note, json.dumps({"replaces": replaces, "outputs": written}).encode(), self)
            _settle(directory / f"{name}.json", grace_s)
            return len(segs), rows

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

    def damaged(self) -> list[Path]:
        """Live segments that are not whole Parquet files (cut short or overwritten outside observe:
        segments are only ever written whole), found by their magic bytes."""
        bad = []
        for f in self.files(undated=True):
            try:
                with open(f, "rb") as fh:
                    head = fh.read(4)
                    fh.seek(-4, os.SEEK_END)
                    whole = head == b"PAR1" and fh.read(4) == b"PAR1"
            except OSError:  # shorter than 4 bytes, or unreadable
                whole = False
            if not whole:
                bad.append(f)
        return bad

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


def create_temp(path: Path, store: Store | None = None) -> BinaryIO:
    """A temporary file at ``path`` made as ``store`` makes its files (else as :func:`create_file`
    does), whatever had the name removed first: a crash's leftover, or a planted link, never followed."""
    path.unlink(missing_ok=True)
    return store.create(path) if store else create_file(path)


@contextmanager
def atomic_file(path: Path, store: Store | None = None) -> Iterator[BinaryIO]:
    """A file that replaces ``path`` whole or not at all: written to a hidden temporary beside it (this
    process's own name), fsync'd, renamed onto ``path``, the directory fsync'd; removed if the writing
    fails. The temporary is made as ``store`` makes its files (mode, group) when given, never through a
    symlink. Every atomic write of observe goes through here."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with create_temp(tmp, store) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_atomic(path: Path, data: bytes, store: Store | None = None) -> None:
    """Write ``data`` to ``path`` whole or not at all (:func:`atomic_file`)."""
    with atomic_file(path, store) as f:
        f.write(data)


def replaced_by(output: Path) -> set[str] | None:
    """The segments a compaction output replaced (names in its directory); None when ``output`` is
    not a compaction's or its note is gone (settled after the grace period)."""
    stem = output.stem
    for name in ((stem.rsplit("-", 1)[0], stem) if stem.count("-") == 3 else (stem,)):
        note = output.with_name(f"{name}.json")
        try:
            replaces, outputs = _read_note(note)
        except FileNotFoundError:
            continue
        if output.name in outputs:
            return replaces
    return None


def _read_note(note: Path) -> tuple[set[str], set[str]]:
    """A compaction note's replaced segments and output files (FileNotFoundError once it is gone)."""
    try:
        with open_nofollow(note) as f:
            doc = json.loads(f.read())
        return set(doc["replaces"]), set(doc.get("outputs") or [note.stem + ".parquet"])
    except (ValueError, KeyError, TypeError):
        return set(), set()  # not a note this version wrote: ignored


def _settle(note: Path, grace_s: float) -> None:
    """Tidy up after a compaction: once complete and ``grace_s`` old, delete the replaced segments,
    then the note; if it never completed (a crash), delete its outputs, then the note."""
    replaces, outputs = _read_note(note)
    present = [note.parent / o for o in outputs if (note.parent / o).exists()]
    if len(present) == len(outputs):
        if time.time() - max(p.stat().st_mtime for p in [note, *present]) < grace_s:
            return
        doomed = replaces
    else:
        doomed = {p.name for p in present}
    for name in doomed:
        (note.parent / name).unlink(missing_ok=True)
    note.unlink(missing_ok=True)


def _notes(names: Iterable[str]) -> list[str]:
    """The compaction notes among a partition's file names, oldest first."""
    return sorted(n for n in names if n.startswith("c-") and n.endswith(".json"))


class StoreBusy(RuntimeError):
    """Another process holds one of the store's locks (compaction, drains)."""


def _rows_in(segs: list[Path], nbytes: int) -> int:
    """How many of ``segs``' rows hold about ``nbytes`` uncompressed (Parquet metadata; at least 10,000)."""
    rows = size = 0
    for seg in segs:
        md = pq.read_metadata(seg)
        rows += md.num_rows
        size += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    return max(10_000, int(nbytes * rows / size)) if size else nbytes


def _slices(scan: pl.LazyFrame, file_rows: int) -> list[pl.Expr]:
    """Filters cutting ``scan``'s rows into consecutive time slices of about ``file_rows`` rows
    (more only when one second holds more), from a per-second count of the ``ts`` column alone;
    rows without a time go with the first slice. An undated partition is cut by input instead."""
    per_second = (scan.group_by(pl.col("ts").dt.truncate("1s").alias("key")).len()
                  .sort("key", nulls_last=False).collect(engine="streaming"))
    total = int(per_second.get_column("len").sum())
    if total <= file_rows:
        return [pl.lit(True)]
    if per_second.get_column("key").null_count() == per_second.height:
        per_input = scan.group_by(pl.col("file_id").alias("key")).len().sort("key").collect(engine="streaming")
        return _ranges(pl.col("file_id"), _cuts(per_input, file_rows), with_nulls=False)
    return _ranges(pl.col("ts"), _cuts(per_second.drop_nulls("key"), file_rows), with_nulls=True)


def _cuts(counts: pl.DataFrame, file_rows: int) -> list:
    """The keys that start a new slice, from (key, len) rows sorted by key."""
    slice_no = ((pl.col("len").cum_sum() - pl.col("len")) // file_rows).alias("slice")
    starts = counts.with_columns(slice_no).group_by("slice", maintain_order=True).agg(pl.col("key").first())
    return starts.get_column("key").to_list()[1:]


def _ranges(key: pl.Expr, cuts: list, with_nulls: bool) -> list[pl.Expr]:
    """``[-inf, c1), [c1, c2), ..., [cn, +inf)`` over ``key`` as filters (nulls in the first)."""
    bounds = [None, *cuts, None]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        where = pl.lit(True) if lo is None else key >= lo
        if hi is not None:
            where = where & (key < hi)
        out.append(where | key.is_null() if lo is None and with_nulls else where)
    return out


def superseded_dropped(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (stored layout) without the rows that a longer text of the same input at the same
    offset extends: a last line stored while it was still being written (block-buffered job
    output), then stored whole by the next ingest of the grown file."""
    same = df.select(pl.struct(*KEY).is_duplicated()).to_series()
    if not same.any():
        return df
    text = stored_raw().alias("_t")
    rows = df.with_row_index("_r").filter(same).select("_r", *KEY, text)
    longer = rows.join(rows, on=list(KEY), suffix="_o").filter(
        (pl.col("_t_o").str.len_bytes() > pl.col("_t").str.len_bytes()) & pl.col("_t_o").str.starts_with(pl.col("_t")))
    return df.filter(~pl.int_range(pl.len()).is_in(longer.get_column("_r").implode()))


@cache
def no_records() -> pl.DataFrame:
    """What :meth:`Store.known` returns for an input with nothing stored (one shared empty frame)."""
    return pl.DataFrame(schema={"offset": pl.Int64, "text": pl.UInt64})


_NO_DAY = (1 << 31) - 1


def split_partitions(df: pl.DataFrame, order: pl.Series | None = None) -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` split by (source, date); each part's rows in ``order`` (a sort key, e.g. file offsets),
    else as they are.

    One gather puts the rows in partition order (skipped when they already are), then each part is
    a zero-copy slice: a log chunk spanning many days has a hundred parts, and gathering each one
    separately costs a pass over the columns per part.
    """
    if not df.height:
        return {}
    day = (pl.col("ts").cast(pl.Int64) // 86_400_000_000).fill_null(_NO_DAY)
    code = pl.col("source").cast(pl.Categorical).to_physical().cast(pl.Int64).fill_null(-1)
    keys = df.select(code * (1 << 32) + day + (1 << 31)).to_series()  # < 2^35, non-negative
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
        parts[(part.item(0, "source"), _day_name(key % (1 << 32) - (1 << 31)))] = part
    return parts


def _day_name(day: int) -> str:
    return (date(1970, 1, 1) + timedelta(days=day)).isoformat() if day != _NO_DAY else UNKNOWN_DATE


def subdirs(directory: Path, prefix: str) -> list[tuple[str, str]]:
    """(value, path) of the ``prefix<value>`` subdirectories of ``directory``, sorted; none if it is
    missing. Symlinks are left out (:func:`regular_names` says why)."""
    try:
        with os.scandir(directory) as it:
            return sorted((e.name[len(prefix):], e.path) for e in it
                          if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def buffered_parts(df: pl.DataFrame, order: pl.Series | None = None) -> dict[tuple[str, str], pl.DataFrame]:
    """``df`` conformed, in the stored layout and split by partition (rows in ``order``, see
    :func:`split_partitions`), ready for a writer's buffer."""
    return split_partitions(to_stored(conform(df)), order)


def _own_strings(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its string columns copied into new buffers (concatenation always allocates)."""
    return df.with_columns(pl.col(pl.String) + "")


class SegmentWriter:
    """Collects frames and writes them as few, large segments; ``close`` writes the rest.

    At most ``max_rows`` rows wait (past that, the largest partition holding rows of the oldest
    unit is written: units are let go without copies where possible). Each
    :meth:`add_parts` call is one unit (an input chunk) whose rows are polars string views into
    that chunk's buffers; past ``max_units`` units, the oldest unit's rows still waiting are copied
    into buffers of their own so that its chunk is freed (copying only what lingers, not every row).
    Segments are written on ``threads`` background threads while the caller parses the next input
    (as many writes in flight) under hidden names, and made durable and visible PUBLISH_SEGMENTS at
    a time (:meth:`Store.publish`, on a thread of its own), all of them by :meth:`flush`; an error
    in a write or a publication is raised by a later ``add`` or by ``close``.
    """

    def __init__(self, store: Store, max_rows: int, max_units: int = MAX_UNITS, threads: int = WRITE_THREADS):
        self.store = store
        self.max_rows = max_rows
        self.max_units = max_units
        self.threads = threads
        self.parts: dict[tuple[str, str], list[tuple[int, pl.DataFrame]]] = {}  # (unit, rows), oldest first
        self.sizes: Counter[tuple[str, str]] = Counter()  # rows waiting per partition
        self.units: Counter[int] = Counter()  # parts waiting per unit
        self.unit = 0
        self.rows = 0
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="observe-writer")
        self.pending: deque[Future] = deque()
        self.unpublished: list[Path] = []  # segments written, published PUBLISH_SEGMENTS at a time
        self.lock = threading.Lock()
        # publishing waits on the disk: a thread of its own, so that writes (and parsing) go on
        self.publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="observe-publish")
        self.published: deque[Future] = deque()

    def add(self, df: pl.DataFrame) -> None:
        """Buffer ``df`` (any schema-conformable frame); each input's rows must come in file order."""
        self.add_parts(buffered_parts(df))

    def add_parts(self, parts: dict[tuple[str, str], pl.DataFrame]) -> None:
        """Buffer one unit's frames, split by :func:`buffered_parts` (which may run on another thread)."""
        self.unit += 1
        for key, part in parts.items():
            if part.height:
                self.parts.setdefault(key, []).append((self.unit, part))
                self.units[self.unit] += 1
                self.sizes[key] += part.height
                self.rows += part.height
        while self.rows > self.max_rows:  # the largest partition holding rows of the oldest unit
            oldest = min(self.units)
            self._flush(max((k for k, w in self.parts.items() if w[0][0] in (0, oldest)), key=self.sizes.__getitem__))
        while len(self.units) > self.max_units:
            self._release(min(self.units))

    def _release(self, unit: int) -> None:
        """Copy the rows of ``unit`` still waiting into buffers of their own (the unit's are freed):
        all its parts in one copy (a chunk spanning many days leaves a hundred small parts)."""
        held = [(key, i, part) for key, waiting in self.parts.items() for i, (u, part) in enumerate(waiting) if u == unit]
        if held:
            copied = _own_strings(pl.concat([part for _, _, part in held]))
            start = 0
            for key, i, part in held:
                self.parts[key][i] = (0, copied.slice(start, part.height))
                start += part.height
        del self.units[unit]

    def _flush(self, key: tuple[str, str]) -> None:
        waiting = self.parts.pop(key)
        del self.sizes[key]
        for unit, _ in waiting:
            if unit:
                self.units[unit] -= 1
                if not self.units[unit]:
                    del self.units[unit]
        df = pl.concat([part for _, part in waiting])
        self.rows -= df.height
        self._wait(self.threads - 1)
        self.pending.append(self.pool.submit(self._write, key, df))

    def _write(self, key: tuple[str, str], df: pl.DataFrame) -> None:
        """Write one segment (on a writer thread); publish the written ones once there are enough."""
        tmp = self.store.write_partition(*key, df, durable=False)
        with self.lock:
            self.unpublished.append(tmp)
            if len(self.unpublished) >= PUBLISH_SEGMENTS:
                self.published.append(self.publisher.submit(self.store.publish, self.unpublished))
                self.unpublished = []

    def _wait(self, in_flight: int = 0) -> None:
        """Wait until at most ``in_flight`` writes are still going (oldest first); raise a failed
        publication's error."""
        while len(self.pending) > in_flight:
            self.pending.popleft().result()
        while self.published and self.published[0].done():
            self.published.popleft().result()

    def flush(self) -> None:
        """Write everything buffered so far and wait until it is durable and visible."""
        for key in list(self.parts):
            self._flush(key)
        self._wait()
        with self.lock:
            ready, self.unpublished = self.unpublished, []
        self.published.append(self.publisher.submit(self.store.publish, ready))
        while self.published:
            self.published.popleft().result()

    def close(self) -> None:
        """Write everything still buffered and stop the writer's threads."""
        try:
            self.flush()
        finally:
            self._stop()

    def _stop(self) -> None:
        self.pool.shutdown(wait=True)
        self.publisher.shutdown(wait=True)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._stop()
