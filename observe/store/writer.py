"""The segment writer: rows of parse units buffered per partition, written as segments on threads and
published durably a batch at a time."""
from __future__ import annotations

from typing import TYPE_CHECKING

import threading
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
from observe.store.layout import buffered_parts, own_strings

if TYPE_CHECKING:
    from observe.store import Store


SEGMENT_ROWS = 250_000


MAX_UNITS = 4  # input chunks whose rows may wait in a writer at once


WRITE_THREADS = 2


PUBLISH_SEGMENTS = 16  # a writer's segments are made durable and visible this many at a time


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
            copied = own_strings(pl.concat([part for _, _, part in held]))
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
