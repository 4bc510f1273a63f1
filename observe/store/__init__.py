"""The event store: a Delta Lake table of Parquet segments,
``<root>/events/source=<s>/date=<YYYY-MM-DD|unknown>/<segment>.parquet`` and ``<root>/events/_delta_log``,
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
import json
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from itertools import repeat
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

import polars as pl

from observe.schema import EVENT_SCHEMA, KEY, conform, from_stored, to_stored
from observe.store.compaction import (COMPACT_FILE_ROWS, COMPACT_GRACE_S, COMPACT_SLICE_BYTES, batches, file_slices,
                                      rows_in, settled)
from observe.store import copy_marks
from observe.store.files import (DIR_MODE, FILE_MODE, UnsafeStore, atomic_file, check_dir, create_file, create_temp,
                                 fsync_path, open_nofollow, regular_names, store_group, subdirs, write_atomic)
from observe.store.place import LocalPlace, Place, place_of
from observe.store.table import LOG_DIR, EventTable, IndexTable, LegacyLayout
from observe.store.layout import (SEGMENT_ORDER, UNKNOWN_DATE, Partition, write_compacted, write_ingested,
                                  buffered_parts, no_records, scan_segments, split_partitions,
                                  superseded_dropped)
from observe.store.writer import BUFFER_BYTES, COMMIT_SEGMENTS, SEGMENT_ROWS, WRITE_THREADS, SegmentWriter

# what the rest of observe uses; the package's modules hold the parts (files, layout, compaction, writer)
__all__ = ["LegacyLayout", "Partition", "SegmentWriter", "Store", "StoreBusy", "UnsafeStore", "atomic_file",
           "buffered_parts", "create_temp", "fsync_path", "no_records", "open_nofollow", "regular_names", "scan_segments",
           "subdirs", "write_atomic"]

RETENTION = "retention.json"  # the last retention's cutoff (expired_before)
SETTLED_S = 2.0  # an object store's input markers are listed again after this long


# lock files of a store in an object store: on this host, root's own (see the module's docstring)
REMOTE_LOCKS = Path("~/.cache/observe/locks")


class Store:
    """A store rooted at a local directory (created on first write) or at a prefix of an object store.

    Over 300 lines: it is the one object every reader and writer holds, and its methods (write,
    publish, scan, lock, compact, expire) each keep one of the guarantees above; the parts that need
    no store (files, layout, compaction's arithmetic, the writer) are in the package's modules."""

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
        self._marked: set[str] = set()  # inputs this process has marked
        self._noted: set[str] = set()  # inputs about to be written, marked with the next segment
        self._mark_lock = threading.Lock()
        # inputs/ mtime (an object store's: when listed), marker files read, ids
        self._listed: tuple[float, set[str], set[str]] = (-1, set(), set())
        self._parsed: tuple[int, list[tuple[str, str, Path]]] = (-1, [])  # _live's, by table version
        self._rows: dict[Path, int] = {}  # rows of the segments written and not yet committed (the commit's statistics)
        self._cutoff: datetime | None | bool = False  # expired_before's, once read

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
        self._mark(set(df.get_column("file_id").unique().drop_nulls().to_list()))
        top = self.inbox if inbox else self.events
        return self._write_file(df, top / f"source={source}" / f"date={day}", f"{tag}-{uuid.uuid4().hex}.parquet",
                                durable=durable)

    def publish(self, temps: list[Path], commit: bool = True) -> list[tuple[Path, int]]:
        """Make segments written with ``durable=False`` durable (:meth:`durable`) and, with ``commit``,
        visible in one commit (else :meth:`commit` them later); the segments and their rows."""
        self.table.ensure()
        done = self.durable(temps)
        if commit:
            self.commit(done)
        return done

    def commit(self, segments: list[tuple[Path, int]]) -> None:
        """One commit adding durable segments (with their rows) to the table."""
        self.table.append(segments)

    def durable(self, temps: list[Path]) -> list[tuple[Path, int]]:
        """Segments written with ``durable=False`` durable under their final names (not committed: a
        spool's segments, a compaction's outputs), with their rows."""
        with self._mark_lock:
            rows = [self._rows.pop(t) for t in temps]
        return list(zip(self.place.durable(temps), rows))

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
                self.place.put(self.inputs / f"{uuid.uuid4().hex}.ids", "".join(f"{i}\n" for i in sorted(new)).encode())
                self._marked |= new
            self._noted.clear()

    def has_input(self, file_id: str) -> bool:
        """Whether records of the input ``file_id`` may be in the store (its marker exists)."""
        if file_id in self._marked:
            return True
        if not self.place.local:
            return file_id in self._remote_inputs()
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

    def _remote_inputs(self) -> set[str]:
        """The inputs marked in an object store, the new markers read: listed again once the last
        listing is SETTLED_S old (a run asks for each of its inputs at once; one listing serves them,
        and this process's own markers are known without one)."""
        listed, read, ids = self._listed
        if time.monotonic() - listed < SETTLED_S:
            return ids
        for info in self.place.files(self.inputs):
            if info.base_name.endswith(".ids") and info.base_name not in read:
                try:
                    ids.update(self.place.read_bytes(PurePosixPath(info.path)).decode().split())
                except FileNotFoundError:
                    continue
                read.add(info.base_name)
        self._listed = (time.monotonic(), read, ids)
        return ids

    def adopt(self) -> int:
        """Commit, in one commit, the segments collectors shipped to ``<root>/incoming/events/...``
        (:mod:`observe.ship`): each is linked into the table's directory under its own name,
        committed, then unlinked from ``incoming``. A crash anywhere in between is finished by the
        next call (a name already live is not committed twice). Returns the segments committed."""
        inbox = self.inbox
        found = self._shipped(inbox)
        if not found:
            return 0
        live, new = {f for _, _, f in self._live()}, []
        for f in found:
            target = self.events / f.relative_to(inbox)
            if target not in live:
                self.make_dirs(target.parent)
                self.place.link(f, target)  # or linked by a run that crashed before its commit: the same bytes
                new.append(target)
        self.place.sync_dir(self.events)
        self.table.append([(f, self.footer(f).num_rows) for f in new])
        for f in found:
            self.place.delete(f)
        return len(new)

    def waiting(self) -> list[tuple[Path | PurePosixPath, int]]:
        """Segments delivered to ``incoming/`` and not committed yet, with their modification times (ms)."""
        out = []
        for f in self._shipped(self.inbox):
            try:
                out.append((f, self.place.stat(f)[1]))
            except FileNotFoundError:  # committed meanwhile
                pass
        return out

    def _shipped(self, inbox: Path | PurePosixPath) -> list[Path | PurePosixPath]:
        """The segments collectors shipped to ``inbox`` (``source=*/date=*/<name>.parquet``)."""
        if not self.place.local:
            return sorted(PurePosixPath(i.path) for i in self.place.files(inbox, recursive=True)
                          if i.base_name.endswith(".parquet") and PurePosixPath(i.path).parent.name.startswith("date=")
                          and PurePosixPath(i.path).parent.parent.name.startswith("source="))
        return [Path(d) / n for _, s in subdirs(inbox, "source=") for _, d in subdirs(Path(s), "date=")
                for n in regular_names(Path(d)) if n.endswith(".parquet") and not n.startswith(".")]

    def writer(self, max_rows: int = SEGMENT_ROWS, budget_bytes: int = BUFFER_BYTES,
               threads: int = WRITE_THREADS) -> SegmentWriter:
        """A buffered writer: one segment per partition per ``max_rows`` rows, memory bounded by
        ``budget_bytes`` (see :class:`SegmentWriter`)."""
        return SegmentWriter(self, max_rows, budget_bytes, threads)

    def _write_file(self, df: pl.DataFrame, directory: Path, name: str, compacted: bool = False,
                    durable: bool = True) -> Path:
        self.make_dirs(directory)
        tmp = self.place.temp_name(directory, name)
        with self.create(tmp) as f:
            (write_compacted if compacted else write_ingested)(df, f)
        with self._mark_lock:
            self._rows[tmp] = df.height
        return self.publish([tmp])[0][0] if durable else tmp

    def _creating(self) -> AbstractContextManager:
        """Held while a table of the store is created or its index rewritten (across processes)."""
        return self.lock("table", wait_s=60)

    def index(self, name: str) -> IndexTable:
        """The derived table ``<root>/index/<name>`` (a Delta table, rewritten whole: the job index)."""
        if name not in self._indexes:
            self._indexes[name] = IndexTable(self.root / "index" / name, COMPACT_GRACE_S, self._creating, self.place)
        return self._indexes[name]

    def _live(self) -> list[tuple[str, str, Path]]:
        """The live segments as (source, date, path), in path order, parsed once per table version."""
        version, rels = self.table.snapshot()
        if self._parsed[0] != version or version < 0:
            parts = [rel.split("/", 2) for rel in sorted(rels)]
            self._parsed = version, [(source.removeprefix("source="), day.removeprefix("date="), self.events / rel)
                                     for rel, (source, day, _) in zip(sorted(rels), parts)]
        return self._parsed[1]

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, sources: Iterable[str] | None = None, since: datetime | None = None,
                   until: datetime | None = None, undated: bool = False) -> list[Partition]:
        """Partitions that can hold events of ``sources`` between ``since`` and ``until`` (and,
        with ``undated``, those of events without a time, which a time range otherwise leaves out)."""
        return sorted({Partition(source, day, self.events / f"source={source}" / f"date={day}")
                       for source, day, _ in self._files(sources, since, until, undated)}, key=lambda p: p.path)

    def segments(self, directory: Path) -> list[Path]:
        """The live segment files of one partition directory."""
        source, day = directory.parent.name.removeprefix("source="), directory.name.removeprefix("date=")
        return [f for s, d, f in self._live() if (s, d) == (source, day)]

    def files(self, sources: Iterable[str] | None = None, since: datetime | None = None,
              until: datetime | None = None, undated: bool = False) -> list[Path]:
        """Segment files to read for the given filters (partition pruning)."""
        return [f for _, _, f in self._files(sources, since, until, undated)]

    def _files(self, sources: Iterable[str] | None, since: datetime | None, until: datetime | None,
               undated: bool) -> list[tuple[str, str, Path]]:
        wanted = set(sources) if sources else None
        lo = since.strftime("%Y-%m-%d") if since else None
        hi = until.strftime("%Y-%m-%d") if until else None
        out = []
        for source, day, f in self._live():
            if wanted is not None and source not in wanted:
                continue
            if day == UNKNOWN_DATE:
                if (lo or hi) and not undated:
                    continue
            elif (lo and day < lo) or (hi and day > hi):
                continue
            out.append((source, day, f))
        return out

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
                  undated: bool = False) -> pl.LazyFrame:
        """:meth:`scan` of some of the live segments (:meth:`files` names them): a share of a scan."""
        if not files:
            return pl.LazyFrame(schema=pl.Schema(EVENT_SCHEMA))
        lf = from_stored(self.scan_files(files))
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
        lf = from_stored(self.scan_files(files).filter(pl.col("file_id").is_in(ids)))
        found = lf.select("file_id", "offset", pl.col("raw").hash().alias("text")).unique().collect()
        return {fid: part.drop("file_id") for (fid,), part in found.partition_by("file_id", as_dict=True).items()}

    # -- maintenance ---------------------------------------------------------------------------
    def compact(self, partition: Partition, min_segments: int = 2,
                file_rows: int = COMPACT_FILE_ROWS) -> tuple[int, int] | None:
        """Compact one partition (:meth:`compact_many`); (segments replaced, rows written), or None
        when there was nothing to do."""
        done = self.compact_many([partition], min_segments, file_rows)
        return done[0] if done else None

    def compact_many(self, partitions: list[Partition], min_segments: int = 2, file_rows: int = COMPACT_FILE_ROWS,
                     progress: Callable[[Partition, tuple[int, int]], None] | None = None,
                     pool: Pool | None = None, wait_s: float = 0.0) -> list[tuple[int, int]]:
        """Merge each partition's new segments and small compacted files (:meth:`_plan`) into files of
        at most about ``file_rows`` rows and COMPACT_SLICE_BYTES of data, dropping duplicate records,
        every column compressed harder than at ingest. Within a file, rows are in input order (each
        input's lines together, in file order: 15% smaller than in time order, as neighbouring lines
        share their text). A dated partition's merge is cut into consecutive time slices, so a time
        filter reads only the files it needs; an undated one's is read once, in batches of segments.
        Memory is bounded by the slice (or batch) and row-group pruning.

        Outputs replace their segments in commits of COMMIT_SEGMENTS outputs or more (a commit costs
        more than a small partition's rewrite; segments committed meanwhile are left for the next
        run); :meth:`vacuum` deletes the replaced ones after the grace period. Returns (files
        replaced, rows written) of each partition compacted; ``progress`` hears of each.

        Batches are rewritten one after another, or by ``pool`` (an executor's ``map``: Ray tasks)
        all at once, each by a store opened at this store's location; this process commits. Then the
        rows' copy marks are brought up to date (:mod:`observe.store.copy_marks`). StoreBusy when
        another process holds the compaction lock after ``wait_s``.
        """
        out: list[tuple[int, int]] = []
        with self.lock("compact", wait_s=wait_s):
            live: dict[tuple[str, str], list[Path]] = {}
            for source, day, f in self._live():  # one listing: only this lock's holder removes files
                live.setdefault((source, day), []).append(f)
            rows = {self.events / rel: n or 0 for rel, _, n, _ in self.table.files()}
            plans = [(p, *self._plan(p, live.get((p.source, p.date), []), rows, min_segments, file_rows))
                     for p in partitions]
            plans = [plan for plan in plans if plan[1]]
            dirs = [p.path for p, todo, _ in plans for _ in todo]
            work = [batch for _, todo, _ in plans for batch in todo]
            sizes = [slice_rows for _, todo, slice_rows in plans for _ in todo]
            if pool is None:
                done = iter(map(self._rewrite, dirs, work, sizes))
            else:
                done = iter(pool.map(rewrite, repeat(self.location), dirs, work, sizes))
            replaced: list[Path] = []
            outputs: list[tuple[Path, int]] = []
            for partition, todo, _ in plans:
                written = 0
                for batch in todo:
                    files, n = next(done)
                    replaced += batch
                    outputs += files
                    written += n
                out.append((sum(map(len, todo)), written))
                if progress is not None:
                    progress(partition, out[-1])
                if len(outputs) >= COMMIT_SEGMENTS:
                    self.table.replace(replaced, outputs)
                    replaced, outputs = [], []
            self.table.replace(replaced, outputs)
            copy_marks.bring_up_to_date(self, {(p.source, p.date) for p, _, _ in plans})
        return out

    def mark_copies(self, wait_s: float = 0.0) -> None:
        """Bring the rows' ``copy_of`` up to date with what was added (:mod:`observe.store.copy_marks`);
        StoreBusy while a compaction runs after ``wait_s`` (it marks them itself when it ends)."""
        with self.lock("compact", wait_s=wait_s):
            copy_marks.bring_up_to_date(self)

    def _plan(self, partition: Partition, segs: list[Path], rows: dict[Path, int], min_segments: int,
              file_rows: int) -> tuple[list[list[Path]], int]:
        """What one partition's compaction rewrites, as batches of files each read once, and the rows
        an output file holds at most: its ingest segments and the compacted files not :func:`settled`,
        with every file that shares a record with them (stored twice, or a last line stored while it
        was written), in one batch to be de-duplicated together. A dated partition is one batch (cut
        into time slices). Nothing when there is no ingest segment and fewer than ``min_segments``
        small files (a lone ingest segment is recompressed)."""
        small = [s for s in segs if s.name.startswith("c-") and not settled(rows.get(s, 0), file_rows)]
        fresh = [s for s in segs if not s.name.startswith("c-")]
        if not fresh and len(small) < min_segments:
            return [], file_rows
        file_rows = min(file_rows, rows_in([self.footer(s) for s in fresh + small], COMPACT_SLICE_BYTES))
        small = [s for s in small if not settled(rows.get(s, 0), file_rows)]
        if not fresh and len(small) < min_segments:
            return [], file_rows
        chosen = set(fresh + small)
        merge = [s for s in segs if s in chosen]  # in path order (compacted files first)
        kept = [s for s in segs if s not in chosen]
        dated = partition.date != UNKNOWN_DATE
        if not kept and (dated or sum(rows.get(s, 0) for s in merge) <= file_rows):
            return [merge], file_rows
        # which files share a record: keys hashed, files as codes (a key's collisions only join files)
        path = pl.col("_path").cast(pl.Categorical)
        keys = pl.struct(*KEY).hash().alias("_k")
        found, ids = pl.collect_all([self.scan_files(merge, paths_as="_path").select(keys, path),
                                     self.scan_files(merge).select(pl.col("file_id").unique())], engine="streaming")
        together = set(found.filter(pl.col("_k").is_duplicated()).get_column("_path").unique().to_list())
        if kept:  # row groups of other inputs are skipped by their file_id statistics
            hits = (self.scan_files(kept, paths_as="_path").filter(pl.col("file_id").is_in(ids.to_series().implode()))
                    .select(keys, path).join(found.lazy().select("_k").unique(), on="_k", how="semi").collect())
            if hits.height:
                shared = found.filter(pl.col("_k").is_in(hits.get_column("_k").implode()))
                together |= set(hits.get_column("_path").to_list()) | set(shared.get_column("_path").to_list())
                merge = [s for s in segs if s in chosen or self.uri(s) in together]
        if dated:
            return [merge], file_rows
        todo = batches([rows.get(s, 0) for s in merge], [self.uri(s) in together for s in merge], file_rows)
        return [[merge[i] for i in batch] for batch in todo], file_rows

    def _rewrite(self, directory: Path, segs: list[Path], file_rows: int) -> tuple[list[tuple[Path, int]], int]:
        """Files of one partition merged into compacted files of about ``file_rows`` rows at most, durable
        and not committed, with their rows; and all their rows."""
        scan = self.scan_files(segs)
        slices = file_slices(scan, file_rows)
        name = f"c-{time.time_ns():016x}-{uuid.uuid4().hex[:8]}"  # names sort in time order
        rows, written = 0, []
        for i, where in enumerate(slices):
            # a duplicate is the same input's same text at the same offset (inputs may share an identity)
            df = superseded_dropped(scan.filter(where).collect()
                                    .unique(subset=[*KEY, "raw", "header", "message"], keep="first", maintain_order=True)
                                    ).sort(*SEGMENT_ORDER)
            if df.height:
                written.append(self._write_file(df, directory, f"{name}-{i:04d}.parquet", compacted=True, durable=False))
                rows += df.height
        return self.durable(written), rows

    def vacuum(self, grace_s: float = COMPACT_GRACE_S) -> int:
        """Delete the files commits removed more than ``grace_s`` ago (a query planned before the
        commit may still read them until then), and files no commit names once they are a day old
        (a crash between writing and committing); how many went."""
        tables = [self.table, *(self.index(name) for name in self._index_names())]
        with self.lock("compact"):
            return sum(t.vacuum(grace_s) for t in tables)

    def _index_names(self) -> list[str]:
        """The derived tables the store holds (``index/<name>`` with a log)."""
        index = self.root / "index"
        if not self.place.local:
            return sorted({PurePosixPath(i.path).relative_to(index).parts[0]
                           for i in self.place.files(index, recursive=True) if f"/{LOG_DIR}/" in i.path})
        return [d.name for d in (index.iterdir() if index.is_dir() else ()) if (d / LOG_DIR).is_dir()]

    def expire(self, before: str, dry_run: bool = False) -> list[Partition]:
        """Delete every dated partition older than ``before`` (``YYYY-MM-DD``, UTC), and the files of
        undated partitions (job output's lines without a time) last written before it: such a line's
        age is its file's, and a file is rewritten only while it is small (:func:`settled`), so a
        store's undated part is bounded like the rest. Returns the partitions touched.

        Dated partitions go in one commit, undated files in a second (readers stop seeing each at
        once); their files are deleted by the next vacuum after the grace period, as compaction's are.
        """
        cutoff = datetime.strptime(before, "%Y-%m-%d").replace(tzinfo=timezone.utc)  # a date, nothing else
        parts = self.partitions()
        dated = [p for p in parts if p.date != UNKNOWN_DATE and p.date < before]
        written = int(cutoff.timestamp() * 1000)
        stale = [self.events / rel for rel, _, _, mtime in self.table.files()
                 if rel.split("/")[1] == f"date={UNKNOWN_DATE}" and mtime < written]
        undated = [p for p in parts if p.date == UNKNOWN_DATE and any(f.parent == p.path for f in stale)]
        if not dry_run:
            with self.lock("compact"):  # a compaction removing the same files would conflict
                if dated:
                    self.table.delete_before(before)
                if stale:
                    self.table.remove(stale)
                self.place.put(self.root / RETENTION, json.dumps({"before": cutoff.isoformat()}).encode())
                self._cutoff = cutoff
            if dated or stale:
                self.vacuum()
        return dated + undated

    def expired_before(self) -> datetime | None:
        """The cutoff of the store's last retention (:meth:`expire`), read once: ingest does not
        store again what it dropped (an old file read again, a rotated copy kept for months)."""
        if self._cutoff is False:
            try:
                self._cutoff = datetime.fromisoformat(json.loads(self.place.read_bytes(self.root / RETENTION))["before"])
            except (FileNotFoundError, ValueError, KeyError, TypeError):  # none, or damaged: store everything
                self._cutoff = None
        return self._cutoff

    def repair(self) -> list[Path]:
        """Set aside the live segments that are damaged (moved to ``<root>/damaged/``, kept for a
        person to look at) or gone, and drop them from the table in one commit; which they were."""
        with self.lock("compact"):
            aside = []
            for f in self.damaged():
                target = self.root / "damaged" / f.relative_to(self.events)
                self.make_dirs(target.parent)
                self.place.move(f, target)
                aside.append(f)
            dropped = {self.events / rel for rel in self.table.drop_missing()}
            return sorted(dropped | set(aside))

    def damaged(self) -> list[Path]:
        """Live segments that are not whole Parquet files (cut short or overwritten outside observe:
        segments are only ever written whole), found by their magic bytes."""
        bad = []
        for f in self.files(undated=True):
            try:
                with self.place.open_input(f) as fh:
                    head = fh.read(4)
                    fh.seek(-4, os.SEEK_END)
                    whole = head == b"PAR1" and fh.read(4) == b"PAR1"
            except (OSError, ValueError):  # shorter than 4 bytes, or unreadable
                whole = False
            if not whole:
                bad.append(f)
        return bad

    def stats(self) -> pl.DataFrame:
        """Per partition: segments, rows, bytes (from the table's log: no file is opened)."""
        files = pl.DataFrame(self.table.files(), schema={"path": pl.String, "bytes": pl.Int64, "rows": pl.Int64,
                                                         "mtime": pl.Int64}, orient="row")
        part = pl.col("path").str.extract_groups(r"^source=([^/]*)/date=([^/]*)/").struct
        return (files.group_by(part.field("1").alias("source"), part.field("2").alias("date"))
                .agg(pl.len().cast(pl.Int64).alias("segments"), pl.col("rows").sum(), pl.col("bytes").sum())
                .sort("source", "date"))


class Pool(Protocol):
    """What can rewrite partitions elsewhere: an executor's ``map`` (results in order)."""

    def map(self, fn: Callable, *iterables: Iterable) -> Iterator: ...


def rewrite(location: str, directory: Path, segs: list[Path], file_rows: int) -> tuple[list[tuple[Path, int]], int]:
    """A batch's compaction outputs written by a store opened at ``location`` (in a pool's worker)."""
    return Store(location)._rewrite(directory, segs, file_rows)


class StoreBusy(RuntimeError):
    """Another process holds one of the store's locks (compaction, drains)."""
