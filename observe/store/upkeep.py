"""The store's upkeep: retention, deleting what commits removed, damaged segments set aside."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import polars as pl

from observe.store.compaction import COMPACT_GRACE_S
from observe.store.copy_marks import bring_up_to_date, removed
from observe.store.layout import DAY_US, UNKNOWN_DATE, Partition, fresh_name, micros, period
from observe.store.table import LOG_DIR, partition_of

if TYPE_CHECKING:
    from observe.store import Store

RETENTION = "retention.json"  # the last retention's cutoff (expired_before)


class Upkeep:
    """One store's retention, vacuum and repair (each under the store's compaction lock)."""

    def __init__(self, store: Store):
        self.store = store
        self.cutoff: datetime | None | bool = False  # expired_before's, once read

    def vacuum(self, grace_s: float = COMPACT_GRACE_S) -> int:
        """Delete the files commits removed more than ``grace_s`` ago (a query planned before the
        commit may still read them until then), and files no commit names once they are a day old
        (a crash between writing and committing); how many went."""
        tables = [self.store.table, *(self.store.index(name) for name in self._index_names())]
        with self.store.lock("compact"):
            return sum(t.vacuum(grace_s) for t in tables)

    def _index_names(self) -> list[str]:
        """The derived tables the store holds (``index/<name>`` with a log)."""
        index = self.store.root / "index"
        if not self.store.place.local:
            return sorted({PurePosixPath(i.path).relative_to(index).parts[0]
                           for i in self.store.place.files(index, recursive=True) if f"/{LOG_DIR}/" in i.path})
        return [d.name for d in (index.iterdir() if index.is_dir() else ()) if (d / LOG_DIR).is_dir()]

    def expire(self, before: str, dry_run: bool = False) -> list[Partition]:
        """Delete every event older than ``before`` (``YYYY-MM-DD``, UTC): the dated partitions that
        end by then go whole, the files of the month it falls in that end before it too, and a file
        there that holds both is rewritten with its events from the cutoff on; and the files of undated
        partitions (job output's lines without a time) last written before it: such a line's age is
        its file's, and a file is rewritten only while it is small (:func:`settled`), so a store's
        undated part is bounded like the rest. Returns the partitions touched.

        One commit (readers stop seeing it all at once); the files are deleted by the next vacuum after
        the grace period, as compaction's are. The first day kept is marked again
        (:mod:`observe.store.copy_marks`): a copy there of a record the last day dropped kept is the
        record now.
        """
        cutoff = datetime.strptime(before, "%Y-%m-%d").replace(tzinfo=timezone.utc)  # a date, nothing else
        if dry_run:
            gone, cut = self._expired(cutoff)
            return self._partitions(gone + cut)
        with self.store.lock("compact"):  # a compaction removing the same files would conflict
            gone, cut = self._expired(cutoff)
            kept = [self.trimmed(f, cutoff, f.parent) for f in cut]
            self.store.table.remove(gone + cut, self.store.durable([f for f in kept if f is not None]))
            self.store.place.put(self.store.root / RETENTION, json.dumps({"before": cutoff.isoformat()}).encode())
            self.cutoff = cutoff
            # a record kept on the last day dropped may have its copy on the first day kept
            start = period(before)[0]
            bring_up_to_date(self.store, {(p.source, start, start + DAY_US - 1) for p in self._partitions(gone + cut)
                                          if p.date != UNKNOWN_DATE})
        if gone or cut:
            self.vacuum()
        return self._partitions(gone + cut)

    def _expired(self, cutoff: datetime) -> tuple[list[Path], list[Path]]:
        """The live files retention removes before ``cutoff`` (:meth:`expire`), and those it rewrites:
        the dated ones holding events on both sides of it (or whose commit gives no range)."""
        at, spans = micros(cutoff), self.store.spans()
        written = int(cutoff.timestamp() * 1000)
        mtimes = {self.store.events / rel: mtime for rel, _, _, mtime in self.store.table.files()}
        gone, cut = [], []
        for _, name, f in self.store.live():
            times, span = period(name), spans.get(f)
            if times is None:
                if mtimes.get(f, written) < written:
                    gone.append(f)
            elif times[1] <= at or (times[0] < at and span is not None and span[1] < at):
                gone.append(f)
            elif times[0] < at and (span is None or span[0] < at):
                cut.append(f)
        return gone, cut

    def trimmed(self, f: Path, cutoff: datetime, directory: Path) -> Path | None:
        """``f`` written anew in ``directory`` with its events from ``cutoff`` on (durable=False), or None
        where it has none."""
        df = self.store.scan_files([f]).filter(pl.col("ts") >= cutoff).collect()
        return (self.store.write_file(df, directory, fresh_name(f.name), compacted=f.name.startswith("c-"), durable=False)
                if df.height else None)

    def _partitions(self, files: list[Path]) -> list[Partition]:
        """The partitions ``files`` are in, in path order."""
        named = {f.parent: partition_of(f.relative_to(self.store.events).as_posix()) for f in files}
        return [Partition(p["source"], p["date"], path) for path, p in sorted(named.items())]

    def expired_before(self) -> datetime | None:
        """The cutoff of the store's last retention (:meth:`expire`), read once: ingest does not
        store again what it dropped (an old file read again, a rotated copy kept for months)."""
        if self.cutoff is False:
            try:
                self.cutoff = datetime.fromisoformat(json.loads(self.store.place.read_bytes(self.store.root / RETENTION))["before"])
            except (FileNotFoundError, ValueError, KeyError, TypeError):  # none, or damaged: store everything
                self.cutoff = None
        return self.cutoff

    def repair(self) -> list[Path]:
        """Set aside the live segments that are damaged (moved to ``<root>/damaged/``, kept for a
        person to look at) or gone, and drop them from the table in one commit; which they were.
        Their partitions' copy marks are brought up to date (a copy of a record they kept is kept now)."""
        with self.store.lock("compact"):
            spans, aside = self.store.spans(), []  # the dropped files' times, while they are live
            for f in self.damaged():
                target = self.store.root / "damaged" / f.relative_to(self.store.events)
                self.store.make_dirs(target.parent)
                self.store.place.move(f, target)
                aside.append(f)
            dropped = {self.store.events / rel for rel in self.store.table.drop_missing()} | set(aside)
            # the copies of the records those files kept are the records now
            bring_up_to_date(self.store, removed(self.store, dropped, spans))
            return sorted(dropped)

    def damaged(self) -> list[Path]:
        """Live segments that are not whole Parquet files (cut short or overwritten outside observe:
        segments are only ever written whole), found by their magic bytes."""
        bad = []
        for f in self.store.files(undated=True):
            try:
                with self.store.place.open_input(f) as fh:
                    head = fh.read(4)
                    fh.seek(-4, os.SEEK_END)
                    whole = head == b"PAR1" and fh.read(4) == b"PAR1"
            except (OSError, ValueError):  # shorter than 4 bytes, or unreadable
                whole = False
            if not whole:
                bad.append(f)
        return bad
