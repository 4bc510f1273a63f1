"""Turning a store written before the Delta table into one, in place and losing nothing.

Such a store named its live segments by directory listing and compaction notes
(``c-<id>.json``: the segments a compaction replaced, the files it wrote). Conversion finishes or
undoes every note as that layout's own reader would have (a complete compaction's replaced segments
go, an incomplete one's outputs go), commits every segment left in one Delta commit, and counts the
events before and after: a difference is an error, and the table is not created.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from observe.store import Store
from observe.store.files import open_nofollow, regular_names, subdirs
from observe.store.layout import parquet, scan_segments
from observe.store.table import written_in


class ConvertError(RuntimeError):
    """The store cannot be converted as it is (nothing was changed in the table)."""


def convert(store: Store) -> tuple[int, int]:
    """Convert ``store``; returns (segments, events) committed. A store that already has its table:
    ConvertError."""
    if not store.place.local:
        raise ConvertError(f"{store.name}: a store in an object store has always been a Delta table")
    if store.table.exists():
        raise ConvertError(f"{store.root}: already a Delta table")
    dirs = [Path(d) for _, s in subdirs(store.events, "source=") for _, d in subdirs(Path(s), "date=")]
    with store.lock("compact"):
        live = [f for d in dirs for f in _live(d)]
        before = _count(live)
        for d in dirs:
            for note in _notes(regular_names(d)):
                _settle(d / note)
        live = [f for d in dirs for f in _live(d)]
        if _count(live) != before:
            raise ConvertError(f"{store.root}: {before} events before settling its compaction notes, "
                               f"{_count(live)} after; nothing converted")
        store.table.append([(f, written_in(parquet().read_metadata(f))) for f in live])
        (store.root / "index" / "jobs.parquet").unlink(missing_ok=True)  # the old job index: rewritten as a table
        after = store.scan(undated=True).select(pl.len()).collect().item()
    if after != before:
        raise ConvertError(f"{store.root}: {before} events in the old layout, {after} in the table")
    return len(live), after


def _count(files: list[Path]) -> int:
    return scan_segments(files).select(pl.len()).collect().item() if files else 0


def _live(directory: Path) -> list[Path]:
    """A partition's live segments as the old layout's reader chose them."""
    names = regular_names(directory)
    listed = {n for n in names if n.endswith(".parquet") and not n.startswith(".")}
    files = set(listed)
    for note in _notes(names):
        replaces, outputs = _read_note(directory / note)
        files.difference_update(replaces if outputs <= listed else outputs)
    return [directory / n for n in sorted(files)]


def _notes(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith("c-") and n.endswith(".json"))


def _read_note(note: Path) -> tuple[set[str], set[str]]:
    try:
        with open_nofollow(note) as f:
            doc = json.loads(f.read())
        return set(doc["replaces"]), set(doc.get("outputs") or [note.stem + ".parquet"])
    except (ValueError, KeyError, TypeError):
        return set(), set()  # not a note that layout wrote: ignored, as its reader did


def _settle(note: Path) -> None:
    """A complete compaction's replaced segments go, an incomplete one's outputs go; then the note."""
    replaces, outputs = _read_note(note)
    present = [note.parent / o for o in outputs if (note.parent / o).exists()]
    doomed = replaces if len(present) == len(outputs) else {p.name for p in present}
    for name in doomed:
        (note.parent / name).unlink(missing_ok=True)
    note.unlink(missing_ok=True)
