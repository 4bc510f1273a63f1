"""Compaction: a partition's new segments and small files merged into files of bounded rows and
memory, swapped for them in commits that change no data (the arithmetic is in
:mod:`observe.store.compaction`)."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import polars as pl

from observe.schema import KEY, shaped
from observe.store.copy_marks import bring_up_to_date, removed
from observe.store.compaction import (COMPACT_FILE_ROWS, COMPACT_SLICE_BYTES, batches, file_slices, rows_in, settled,
                                      tiered)
from observe.store.layout import SEGMENT_ORDER, UNKNOWN_DATE, Partition, superseded_dropped
from observe.store.table import Written
from observe.store.writer import COMMIT_SEGMENTS

if TYPE_CHECKING:
    from observe.store import Store

Rewrite = Callable[[str, Path, list[Path], int, "int | None"], tuple[list[tuple[Path, Written]], int]]


class Pool(Protocol):
    """What can rewrite partitions elsewhere: an executor's ``map`` (results in order)."""

    def map(self, fn: Callable, *iterables: Iterable) -> Iterator: ...


class Compactor:
    """One store's compaction. ``remote`` is what a pool's worker runs for a batch: a store opened at
    the location given rewrites it (:meth:`rewrite`)."""

    def __init__(self, store: Store, remote: Rewrite):
        self.store = store
        self.remote = remote

    def mark_copies(self, wait_s: float = 0.0, budget: int | None = None) -> None:
        """Bring the rows' ``copy_of`` up to date with what was added, rewriting at most ``budget``
        rows (:func:`observe.store.copy_marks.bring_up_to_date`); StoreBusy while a compaction runs
        after ``wait_s`` (it marks them itself when it ends)."""
        with self.store.lock("compact", wait_s=wait_s):
            bring_up_to_date(self.store, budget=budget)

    def compact(self, partition: Partition, min_segments: int = 2,
                file_rows: int = COMPACT_FILE_ROWS) -> tuple[int, int] | None:
        """Compact one partition (:meth:`compact_many`); (segments replaced, rows written), or None
        when there was nothing to do."""
        done = self.compact_many([partition], min_segments, file_rows)
        return done[0] if done else None

    def compact_many(self, partitions: list[Partition], min_segments: int = 2, file_rows: int = COMPACT_FILE_ROWS,
                     progress: Callable[[Partition, tuple[int, int]], None] | None = None,
                     pool: Pool | None = None, wait_s: float = 0.0, threads: int = 1) -> list[tuple[int, int]]:
        """Merge each partition's new segments and small compacted files (:meth:`_plan`) into files of
        at most about ``file_rows`` rows and COMPACT_SLICE_BYTES of data, dropping duplicate records,
        every column compressed harder than at ingest. Within a file, rows are in input order (each
        input's lines together, in file order: 15% smaller than in time order, as neighbouring lines
        share their text). A dated partition's merge is cut into consecutive time slices, so a time
        filter reads only the files it needs; an undated one's is read once, in batches of segments.

        Outputs replace their segments in commits of COMMIT_SEGMENTS outputs or more (a commit costs
        more than a small partition's rewrite; segments committed meanwhile are left for the next
        run); :meth:`vacuum` deletes the replaced ones after the grace period. Returns (files
        replaced, rows written) of each partition compacted; ``progress`` hears of each.

        Batches are rewritten by ``threads`` threads of this process (polars and the Parquet writer leave
        the interpreter while they work: the syslog bench's store in 4.5-5.0 s on two cores, 5.8-7.4 s
        on one), or by ``pool`` (an executor's ``map``: Ray tasks) all at once, each by a store opened at this store's location;
        this process commits. Memory is bounded by a slice (or batch) per thread, and row-group pruning. Then the
        rows' copy marks are brought up to date (:mod:`observe.store.copy_marks`). StoreBusy when
        another process holds the compaction lock after ``wait_s``.
        """
        with self.store.lock("compact", wait_s=wait_s):
            live: dict[tuple[str, str], list[Path]] = {}
            for source, name, f in self.store.live():  # one listing: only this lock's holder removes files
                live.setdefault((source, name), []).append(f)
            rows = {self.store.events / rel: n or 0 for rel, _, n, _ in self.store.table.files()}
            plans = [(p, *self._plan(p, live.get((p.source, p.date), []), rows, min_segments, file_rows))
                     for p in partitions]
            plans = [plan for plan in plans if plan[1]]
            dirs = [p.path for p, todo, _ in plans for _ in todo]
            work = [batch for _, todo, _ in plans for batch in todo]
            sizes = [slice_rows for _, todo, slice_rows in plans for _ in todo]
            held = [sum(rows[s] for s in batch) if all(rows.get(s) for s in batch) else None for batch in work]
            merged = removed(self.store, [s for batch in work for s in batch])  # where duplicates may go
            here = ThreadPoolExecutor(max(1, threads)) if pool is None else None
            try:
                done = (here.map(self.rewrite, dirs, work, sizes, held) if here is not None
                        else iter(pool.map(self.remote, repeat(self.store.location), dirs, work, sizes, held)))
                out = self._commit(plans, done, progress)
            finally:
                if here is not None:  # after a failed batch, the ones not started are not
                    here.shutdown(cancel_futures=True)
            bring_up_to_date(self.store, merged)
        return out

    def _commit(self, plans: list, done: Iterator[tuple[list[tuple[Path, Written]], int]],
                progress: Callable[[Partition, tuple[int, int]], None] | None) -> list[tuple[int, int]]:
        """Commit the rewritten batches (``done``, in the plans' order) in commits of COMMIT_SEGMENTS outputs or
        more; (files replaced, rows written) of each partition."""
        out: list[tuple[int, int]] = []
        replaced: list[Path] = []
        outputs: list[tuple[Path, Written]] = []
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
                self.store.table.replace(replaced, outputs)
                replaced, outputs = [], []
        self.store.table.replace(replaced, outputs)
        return out

    def _plan(self, partition: Partition, segs: list[Path], rows: dict[Path, int], min_segments: int,
              file_rows: int) -> tuple[list[list[Path]], int]:
        """What one partition's compaction rewrites, as batches of files each read once, and the rows
        an output file holds at most: its ingest segments and the small compacted files they take (:meth:`_small`),
        with every file that shares a record with them (stored twice, or a last line stored while it
        was written), in one batch to be de-duplicated together. A dated partition is one batch (cut
        into time slices). Nothing when there is no ingest segment and fewer than ``min_segments``
        small files (a lone ingest segment is recompressed)."""
        fresh = [s for s in segs if not s.name.startswith("c-")]
        small = self._small(segs, fresh, rows, file_rows)
        if not fresh and len(small) < min_segments:
            return [], file_rows
        file_rows = min(file_rows, rows_in([self.store.footer(s) for s in fresh + small], COMPACT_SLICE_BYTES))
        small = self._small(small, fresh, rows, file_rows)
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
        found, ids = pl.collect_all([self.store.scan_files(merge, paths_as="_path").select(keys, path),
                                     self.store.scan_files(merge).select(pl.col("file_id").unique())], engine="streaming")
        together = set(found.filter(pl.col("_k").is_duplicated()).get_column("_path").unique().to_list())
        if kept:  # row groups of other inputs are skipped by their file_id statistics
            hits = (self.store.scan_files(kept, paths_as="_path").filter(pl.col("file_id").is_in(ids.to_series().implode()))
                    .select(keys, path).join(found.lazy().select("_k").unique(), on="_k", how="semi").collect())
            if hits.height:
                shared = found.filter(pl.col("_k").is_in(hits.get_column("_k").implode()))
                together |= set(hits.get_column("_path").to_list()) | set(shared.get_column("_path").to_list())
                merge = [s for s in segs if s in chosen or self.store.uri(s) in together]
        if dated:
            return [merge], file_rows
        todo = batches([rows.get(s, 0) for s in merge], [self.store.uri(s) in together for s in merge], file_rows)
        return [[merge[i] for i in batch] for batch in todo], file_rows

    @staticmethod
    def _small(segs: list[Path], fresh: list[Path], rows: dict[Path, int], file_rows: int) -> list[Path]:
        """The compacted files of ``segs`` not :func:`settled` that a merge of ``fresh`` takes (:func:`tiered`)."""
        small = [s for s in segs if s.name.startswith("c-") and not settled(rows.get(s, 0), file_rows)]
        return [small[i] for i in sorted(tiered(sum(rows.get(s, 0) for s in fresh), [rows.get(s, 0) for s in small]))]

    def rewrite(self, directory: Path, segs: list[Path], file_rows: int,
                held: int | None = None) -> tuple[list[tuple[Path, Written]], int]:
        """Files of one partition merged into compacted files of about ``file_rows`` rows at most, durable
        and not committed, with what they hold; and all their rows. ``held``: the rows the files hold, where the
        table's log says (a batch of no more than ``file_rows`` is one file, without a pass to cut it)."""
        scan = self.store.scan_files(segs)
        slices = [pl.lit(True)] if held is not None and held <= file_rows else file_slices(scan, file_rows)
        name = f"c-{time.time_ns():016x}-{uuid.uuid4().hex[:8]}"  # names sort in time order
        rows, written = 0, []
        for i, where in enumerate(slices):
            df = scan.filter(where).collect()
            if df.get_column("shape").null_count() == df.height:  # files written before shapes: headers a shape
                df = shaped(df, "UTC")  # renders in UTC are kept as it (ingest tried its own zone's on the others)
            df = superseded_dropped(df).sort(*SEGMENT_ORDER)
            if df.height:
                written.append(self.store.write_file(df, directory, f"{name}-{i:04d}.parquet", compacted=True, durable=False))
                rows += df.height
        return self.store.durable(written), rows
