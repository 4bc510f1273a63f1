"""The store's upkeep: retention, deleting what commits removed, damaged segments set aside."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from observe.store.compaction import COMPACT_GRACE_S
from observe.store.copy_marks import bring_up_to_date
from observe.store.layout import UNKNOWN_DATE, Partition
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
        """Delete every dated partition older than ``before`` (``YYYY-MM-DD``, UTC), and the files of
        undated partitions (job output's lines without a time) last written before it: such a line's
        age is its file's, and a file is rewritten only while it is small (:func:`settled`), so a
        store's undated part is bounded like the rest. Returns the partitions touched.

        Dated partitions go in one commit, undated files in a second (readers stop seeing each at
        once); their files are deleted by the next vacuum after the grace period, as compaction's are.
        The first day kept is marked again (:mod:`observe.store.copy_marks`): a copy there of a record
        the last day dropped kept is the record now.
        """
        cutoff = datetime.strptime(before, "%Y-%m-%d").replace(tzinfo=timezone.utc)  # a date, nothing else
        parts = self.store.partitions()
        dated = [p for p in parts if p.date != UNKNOWN_DATE and p.date < before]
        written = int(cutoff.timestamp() * 1000)
        stale = [self.store.events / rel for rel, _, _, mtime in self.store.table.files()
                 if rel.split("/")[1] == f"date={UNKNOWN_DATE}" and mtime < written]
        undated = [p for p in parts if p.date == UNKNOWN_DATE and any(f.parent == p.path for f in stale)]
        if not dry_run:
            with self.store.lock("compact"):  # a compaction removing the same files would conflict
                if dated:
                    self.store.table.delete_before(before)
                if stale:
                    self.store.table.remove(stale)
                self.store.place.put(self.store.root / RETENTION, json.dumps({"before": cutoff.isoformat()}).encode())
                self.cutoff = cutoff
                # a record kept on the last day dropped may have its copy on the first day kept
                bring_up_to_date(self.store, {(p.source, before) for p in dated})
            if dated or stale:
                self.vacuum()
        return dated + undated

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
            aside = []
            for f in self.damaged():
                target = self.store.root / "damaged" / f.relative_to(self.store.events)
                self.store.make_dirs(target.parent)
                self.store.place.move(f, target)
                aside.append(f)
            dropped = {self.store.events / rel for rel in self.store.table.drop_missing()} | set(aside)
            # the copies of the records those files kept are the records now
            parts = (partition_of(f.relative_to(self.store.events).as_posix()) for f in dropped)
            bring_up_to_date(self.store, {(p["source"], p["date"]) for p in parts})
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
