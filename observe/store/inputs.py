"""Which inputs have records in the store: ``<root>/inputs/<uuid>.ids``, one input's id a line.

A marker is written before the first segment holding records of the inputs it names, so an input
without one has nothing stored and its idempotence check costs no scan of the store."""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from observe.store.files import open_nofollow, regular_names
from observe.store.place import LocalPlace, Place

SETTLED_S = 2.0  # an object store's input markers are listed again after this long


class InputLedger:
    """The markers of one store's ``inputs/`` directory (``make_dirs`` creates it as the store's own)."""

    def __init__(self, place: LocalPlace | Place, directory: Path | PurePosixPath,
                 make_dirs: Callable[[Path], None]):
        self.place = place
        self.directory = directory
        self.make_dirs = make_dirs
        self._marked: set[str] = set()  # inputs this process has marked
        self._noted: set[str] = set()  # inputs about to be written, marked with the next segment
        self._lock = threading.Lock()
        # inputs/ mtime (an object store's: when listed), marker files read, ids
        self._listed: tuple[float, set[str], set[str]] = (-1, set(), set())

    def note(self, file_ids: Iterable[str]) -> None:
        """Inputs whose records are about to be written: marked together with the next segment."""
        with self._lock:
            self._noted.update(file_ids)

    def mark(self, file_ids: set[str]) -> None:
        """Record, before their records are written, that these inputs have records in the store:
        one file ``inputs/<uuid>.ids`` (one id a line) for them and every input noted so far."""
        if file_ids <= self._marked:
            return
        with self._lock:
            new = (file_ids | self._noted) - self._marked
            if new:
                self.make_dirs(self.directory)
                self.place.put(self.directory / f"{uuid.uuid4().hex}.ids", "".join(f"{i}\n" for i in sorted(new)).encode())
                self._marked |= new
            self._noted.clear()

    def has(self, file_id: str) -> bool:
        """Whether records of the input ``file_id`` may be in the store (its marker exists)."""
        if file_id in self._marked:
            return True
        if not self.place.local:
            return file_id in self._remote()
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except FileNotFoundError:
            return False
        seen, read, ids = self._listed
        if mtime != seen:  # a marker was added since the last listing: read the new ones
            for name in regular_names(self.directory):
                if name.endswith(".ids") and name not in read:
                    try:
                        with open_nofollow(self.directory / name) as f:
                            ids.update(f.read().decode().split())
                    except FileNotFoundError:
                        continue
                    read.add(name)
                elif not name.endswith(".ids"):
                    ids.add(name)  # one empty file per input (stores written before .ids files)
            self._listed = (mtime, read, ids)
        return file_id in ids

    def _remote(self) -> set[str]:
        """The inputs marked in an object store, the new markers read: listed again once the last
        listing is SETTLED_S old (a run asks for each of its inputs at once; one listing serves them,
        and this process's own markers are known without one)."""
        listed, read, ids = self._listed
        if time.monotonic() - listed < SETTLED_S:
            return ids
        for info in self.place.files(self.directory):
            if info.base_name.endswith(".ids") and info.base_name not in read:
                try:
                    ids.update(self.place.read_bytes(PurePosixPath(info.path)).decode().split())
                except FileNotFoundError:
                    continue
                read.add(info.base_name)
        self._listed = (time.monotonic(), read, ids)
        return ids
