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

import fcntl
import json
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import polars as pl

from observe.schema import EVENT_SCHEMA, KEY, conform, from_stored, to_stored
from observe.store.compaction import (COMPACT_FILE_ROWS, COMPACT_GRACE_S, COMPACT_SLICE_BYTES, file_slices, note_names,
                                      read_note, replaced_by, rows_in, settle)
from observe.store.files import (DIR_MODE, FILE_MODE, UnsafeStore, atomic_file, check_dir, create_file, create_temp,
                                 fsync_path, open_nofollow, regular_names, store_group, subdirs, write_atomic)
from observe.store.layout import (SEGMENT_ORDER, UNKNOWN_DATE, Partition, parquet, write_compacted, write_ingested,
                                  buffered_parts, no_records, scan_segments, split_partitions, superseded_dropped)
from observe.store.writer import BUFFER_BYTES, SEGMENT_ROWS, WRITE_THREADS, SegmentWriter

# what the rest of observe uses; the package's modules hold the parts (files, layout, compaction, writer)
__all__ = ["Partition", "SegmentWriter", "Store", "StoreBusy", "UnsafeStore", "atomic_file", "buffered_parts",
           "create_temp", "fsync_path", "no_records", "open_nofollow", "regular_names", "replaced_by", "scan_segments",
           "subdirs", "write_atomic"]

class Store:
    """A store rooted at a local directory (created on first write).

    Over 300 lines: it is the one object every reader and writer holds, and its methods (write,
    publish, scan, lock, compact, expire) each keep one of the guarantees above; the parts that need
    no store (files, layout, compaction's arithmetic, the writer) are in the package's modules."""

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
            check_dir(self.root, os.stat(self.root))
        except (FileNotFoundError, NotADirectoryError):
            pass  # created on first write; not a directory: writes fail, commands say so
        self.events = self.root / "events"
        self.inputs = self.root / "inputs"
        self._made: set[Path] = set()  # directories made or checked by this process
        self._marked: set[str] = set()  # inputs this process has marked
        self._noted: set[str] = set()  # inputs about to be written, marked with the next segment
        self._mark_lock = threading.Lock()
        self._listed: tuple[int, set[str], set[str]] = (-1, set(), set())  # inputs/ mtime, marker files read, ids

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- writing -------------------------------------------------------------------------------
    def make_dirs(self, directory: Path) -> None:
        """Create ``directory`` (the root or one inside it) and its missing parents in the store:
        DIR_MODE, the store's group, setgid where it is set (as the kernel does below a setgid
        directory) so that what is created below inherits the group. Existing ones are checked as
        they are passed (:func:`check_dir`); one made or checked before by this process only has to
        be a directory still (one lstat: expired meanwhile, it is made again)."""
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

    def writer(self, max_rows: int = SEGMENT_ROWS, budget_bytes: int = BUFFER_BYTES,
               threads: int = WRITE_THREADS) -> SegmentWriter:
        """A buffered writer: one segment per partition per ``max_rows`` rows, memory bounded by
        ``budget_bytes`` (see :class:`SegmentWriter`)."""
        return SegmentWriter(self, max_rows, budget_bytes, threads)

    def _write_file(self, df: pl.DataFrame, directory: Path, name: str, compacted: bool = False,
                    durable: bool = True) -> Path:
        self.make_dirs(directory)
        tmp = directory / f".{name}.tmp"
        with self.create(tmp) as f:
            (write_compacted if compacted else write_ingested)(df, f)
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
                for note in note_names(names):
                    replaces, outputs = read_note(directory / note)
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

    def known(self, file_id: str) -> pl.DataFrame:
        """Records already stored for one input: ``offset`` and ``text`` (a hash of ``raw``). Inputs
        never seen have no marker in ``<root>/inputs/`` and cost no scan."""
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
            for note in note_names(regular_names(directory)):  # oldest first: a later one may replace its outputs
                settle(directory / note, grace_s)
            segs = self.segments(directory)
            if not segs or (len(segs) < min_segments and all(s.name.startswith("c-") for s in segs)):
                return None  # already compacted (a lone ingest segment is still recompressed)
            scan = scan_segments(segs)
            slices = file_slices(scan, min(file_rows, rows_in(segs, COMPACT_SLICE_BYTES)))
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
                    self._write_file(df, directory, output, compacted=True)
                    written.append(output)
                    rows += df.height
            if written != planned:  # an empty slice: the note's rewrite is the switch
                write_atomic(note, json.dumps({"replaces": replaces, "outputs": written}).encode(), self)
            settle(directory / f"{name}.json", grace_s)
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
            meta = [parquet().read_metadata(s) for s in segs]
            rows.append({
                "source": p.source, "date": p.date, "segments": len(segs),
                "rows": sum(m.num_rows for m in meta), "bytes": sum(s.stat().st_size for s in segs),
            })
        return pl.DataFrame(rows, schema={"source": pl.String, "date": pl.String, "segments": pl.Int64,
                                          "rows": pl.Int64, "bytes": pl.Int64})


class StoreBusy(RuntimeError):
    """Another process holds one of the store's locks (compaction, drains)."""
