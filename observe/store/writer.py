"""The segment writer: rows of parse units buffered per partition, written as segments on threads and
published durably a batch at a time."""
from __future__ import annotations

from typing import TYPE_CHECKING

import threading
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
from observe.store.layout import buffered_parts

if TYPE_CHECKING:
    from observe.store import Store
    from observe.store.table import Written


SEGMENT_ROWS = 250_000  # a partition's waiting rows are written as a segment once there are this many


BUFFER_BYTES = 256 << 20  # input chunks whose rows may wait at once (rows are views into their chunk)


WRITE_THREADS = 2


PUBLISH_SEGMENTS = 16  # a writer's segments are made durable this many at a time


COMMIT_SEGMENTS = 256  # and committed to the table this many at a time (a commit costs ~15 ms of CPU)


class SegmentWriter:
    """Buffers rows by partition and writes each partition as few segments as memory allows.

    Each :meth:`add_parts` call is one unit (an input chunk) whose rows are polars string views into
    that chunk's buffers: the chunk (``nbytes``) lives while one of its rows waits. A partition is
    written when it holds ``max_rows`` rows; when the waiting rows hold chunks of more than
    ``budget_bytes``, every partition holding rows of the oldest chunk is written (freeing it); the
    rest at :meth:`flush` or :meth:`close`. So a run writes one segment per partition it touches,
    plus one per ``max_rows`` rows of a partition, plus, where its input is larger than the budget and
    its months sparse (every chunk touching many months), one per partition each time the budget fills.

    Segments are written on ``threads`` background threads while the caller parses the next input
    (as many writes in flight) under hidden names, made durable PUBLISH_SEGMENTS at a time and
    committed COMMIT_SEGMENTS at a time (:meth:`Store.publish`, on a thread of its own), all of them
    by :meth:`flush`; an error in a write or a publication is raised by a later ``add`` or by ``close``.
    """

    def __init__(self, store: Store, max_rows: int, budget_bytes: int = BUFFER_BYTES, threads: int = WRITE_THREADS):
        self.store = store
        self.max_rows = max_rows
        self.budget_bytes = budget_bytes
        self.threads = threads
        self.parts: dict[tuple[str, str], list[tuple[int, pl.DataFrame]]] = {}  # (unit, rows), oldest first
        self.sizes: Counter[tuple[str, str]] = Counter()  # rows waiting per partition
        self.waiting: Counter[int] = Counter()  # parts waiting per unit
        self.held: dict[int, int] = {}  # bytes of each unit with rows waiting
        self.unit = 0
        self.segments = 0  # written so far
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="observe-writer")
        self.pending: deque[Future] = deque()
        self.unpublished: list[Path] = []  # segments written, published PUBLISH_SEGMENTS at a time
        self.uncommitted: list[tuple[Path, Written]] = []  # durable, not yet committed (the publisher's alone)
        self.lock = threading.Lock()
        # publishing waits on the disk: a thread of its own, so that writes (and parsing) go on
        self.publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="observe-publish")
        self.published: deque[Future] = deque()

    def add(self, df: pl.DataFrame) -> None:
        """Buffer ``df`` (any schema-conformable frame); each input's rows must come in file order."""
        self.add_parts(buffered_parts(df), df.estimated_size())

    def add_parts(self, parts: dict[tuple[str, str], pl.DataFrame], nbytes: int) -> None:
        """Buffer one unit's frames, split by :func:`buffered_parts` (which may run on another thread);
        ``nbytes``: what the unit's rows keep alive (its chunk)."""
        self.unit += 1
        for key, part in parts.items():
            if part.height:
                self.parts.setdefault(key, []).append((self.unit, part))
                self.sizes[key] += part.height
                self.waiting[self.unit] += 1
        if self.waiting[self.unit]:
            self.held[self.unit] = nbytes
        for key in [k for k in parts if self.sizes[k] >= self.max_rows]:
            self._flush(key)
        while len(self.held) > 1 and sum(self.held.values()) > self.budget_bytes:
            oldest = min(self.held)
            for key in [k for k, waiting in self.parts.items() if any(u == oldest for u, _ in waiting)]:
                self._flush(key)

    def _flush(self, key: tuple[str, str]) -> None:
        waiting = self.parts.pop(key)
        del self.sizes[key]
        for unit, _ in waiting:
            self.waiting[unit] -= 1
            if not self.waiting[unit]:
                del self.waiting[unit], self.held[unit]
        df = pl.concat([part for _, part in waiting])
        self._wait(self.threads - 1)
        self.segments += 1
        self.pending.append(self.pool.submit(self._write, key, df))

    def _write(self, key: tuple[str, str], df: pl.DataFrame) -> None:
        """Write one segment (on a writer thread); publish the written ones once there are enough."""
        tmp = self.store.write_partition(*key, df, durable=False)
        with self.lock:
            self.unpublished.append(tmp)
            if len(self.unpublished) >= PUBLISH_SEGMENTS:
                self.published.append(self.publisher.submit(self._publish, self.unpublished, False))
                self.unpublished = []

    def _publish(self, temps: list[Path], commit: bool) -> None:
        """Make ``temps`` durable; commit what is durable once there is enough of it, or ``commit``."""
        self.uncommitted += self.store.publish(temps, commit=False)
        if commit or len(self.uncommitted) >= COMMIT_SEGMENTS:
            self.store.commit(self.uncommitted)
            self.uncommitted = []

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
        self.published.append(self.publisher.submit(self._publish, ready, True))
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
