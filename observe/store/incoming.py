"""What collectors and Slurm hooks ship to ``<root>/incoming/events/source=*/date=*/``: segments
whole and durable, committed to the table by the central ``observe compact`` (:meth:`Incoming.adopt`),
so that what every node writes often does not contend for the table's log."""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from observe.store.files import regular_names, subdirs
from observe.store.table import written_in

if TYPE_CHECKING:
    from observe.store import Store


class Incoming:
    """The segments shipped to one store and not committed yet."""

    def __init__(self, store: Store):
        self.store = store
        self.directory = store.inbox

    def adopt(self) -> int:
        """Commit, in one commit, the segments collectors shipped (:mod:`observe.ship`): each is linked
        into the table's directory under its own name, committed, then unlinked from ``incoming``. A
        crash anywhere in between is finished by the next call (a name already live is not committed
        twice). What retention dropped is not stored again, as ingest does not store it: a segment of
        events before the store's cutoff is left out, and one holding both sides of it is written anew
        with the later ones (a collector knows no cutoff: attack-30 r3). Returns the segments committed."""
        store = self.store
        found = self.shipped()
        if not found:
            return 0
        cutoff = store.upkeep.expired_before()
        live, new, cut = {f for _, _, f in store.live()}, [], []
        for f in found:
            target = store.events / f.relative_to(self.directory)
            if target in live:
                continue
            held = written_in(store.footer(f))
            if cutoff is not None and held.first is not None and held.first < cutoff:
                if held.last is not None and held.last >= cutoff:
                    cut.append(store.upkeep.trimmed(f, cutoff, target.parent))
                continue
            store.make_dirs(target.parent)
            store.place.link(f, target)  # or linked by a run that crashed before its commit: the same bytes
            new.append((target, held))
        store.place.sync_dir(store.events)
        store.table.append(new + store.durable([f for f in cut if f is not None]))
        for f in found:
            store.place.delete(f)
        return len(new) + sum(f is not None for f in cut)

    def waiting(self) -> list[tuple[Path | PurePosixPath, int]]:
        """Segments delivered and not committed yet, with their modification times (ms)."""
        out = []
        for f in self.shipped():
            try:
                out.append((f, self.store.place.stat(f)[1]))
            except FileNotFoundError:  # committed meanwhile
                pass
        return out

    def shipped(self) -> list[Path | PurePosixPath]:
        """The segments shipped (``source=*/date=*/<name>.parquet``)."""
        place, inbox = self.store.place, self.directory
        if not place.local:
            return sorted(PurePosixPath(i.path) for i in place.files(inbox, recursive=True)
                          if i.base_name.endswith(".parquet") and PurePosixPath(i.path).parent.name.startswith("date=")
                          and PurePosixPath(i.path).parent.parent.name.startswith("source="))
        return [Path(d) / n for _, s in subdirs(inbox, "source=") for _, d in subdirs(Path(s), "date=")
                for n in regular_names(Path(d)) if n.endswith(".parquet") and not n.startswith(".")]
