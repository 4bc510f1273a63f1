"""Ingest: inputs -> collector -> records -> rules -> store, streamed in bounded chunks.

The package reads one way: ``records`` (bytes to records), ``parse`` (records to events, pure
functions), ``plan`` (each input's format and identity, decided once, and the run's tasks),
``pipeline`` (the in-process pipeline) and ``pool`` (worker processes running the same pipeline).
This module is the entry (``ingest``, ``ingest_inputs``) and names what callers outside use.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from polars.exceptions import PolarsError

from observe.ingest import pool
from observe.ingest.parse import ParseInput, finalize, parse_bytes, parse_unit
from observe.ingest.pipeline import Pipeline, run_step
from observe.ingest.plan import choose, file_size, job_from_name, plan, tasks
from observe.ingest.records import blank_lines, joined_records, last_record_start, record_pieces, sample_of
from observe.ingest.summary import InputError, Summary
from observe.reader import is_stream
from observe.store import Store, StoreBusy, notable

__all__ = ["InputError", "ParseInput", "Summary", "blank_lines", "choose", "finalize", "ingest", "ingest_inputs",
           "job_from_name", "joined_records", "last_record_start", "parse_bytes", "parse_unit", "record_pieces",
           "sample_of"]

INGEST_LOCK_WAIT_S = 24 * 3600.0  # how long a run waits for another run into the same store
MARK_WAIT_S = 30.0  # how long a run waits for a compaction to mark its copies (else the compaction does)
MARK_REWRITE_FACTOR = 4  # a run rewrites at most this many rows per row it stored to mark copies (the rest: compaction)


def ingest(paths: list[str], store: Store, progress: Callable[[int], None] | None = None,
           workers: int | None = None, waiting: Callable[[], None] | None = None, **opts) -> Summary:
    """Ingest every file in ``paths``, all with the same ``opts`` (see :func:`ingest_file`)."""
    return ingest_inputs([(p, opts) for p in paths], store, progress, workers, waiting)


def ingest_inputs(inputs: list[tuple[str, dict]], store: Store, progress: Callable[[int], None] | None = None,
                  workers: int | None = None, waiting: Callable[[], None] | None = None) -> Summary:
    """Ingest files, each with its own options (source, node, job, boot_time, tz), in one run.

    Small files of a batchable format and the same node are parsed together; kernel logs with
    boot-relative stamps go last, once other files have told the nodes' boot times. An input that
    cannot be ingested is recorded in ``summary.failed`` and the others go on. ``workers``: how
    many processes parse (default: one per core for big runs, this process alone for small ones).

    Runs into one store take turns (its ``ingest`` lock; ``waiting`` is called if another holds
    it): a run learns what the store holds before it stores, so two at once would both store the
    same records.
    """
    with store.lock("ingest", wait_s=INGEST_LOCK_WAIT_S, waiting=waiting):
        start = time.perf_counter()
        workers = pool.default_workers(sum(file_size(p) for p, _ in inputs)) if workers is None else workers
        if workers > 1 and not any(is_stream(p) for p, _ in inputs):  # a pipe is read where it was opened
            summary = pool.ingest(inputs, store, workers, progress)
        else:
            summary = Summary()
            first, last = tasks(plan(inputs, store))
            with store.writer() as writer, Pipeline(writer, summary) as pipe:
                for step in (step for task in first + last for step in task):
                    run_step(step, store, pipe, summary, progress)
        if summary.stored:
            try:
                store.compactor.mark_copies(MARK_WAIT_S, budget=MARK_REWRITE_FACTOR * summary.stored)
            except StoreBusy:
                summary.marks_pending = "a compaction held the store (it marks them when it ends)"
            except (OSError, PolarsError) as exc:  # the records are stored: a damaged segment stops only the marks
                summary.marks_pending = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]} (observe repair, then observe compact)"
            _refresh_notable(store, summary)
        summary.seconds = time.perf_counter() - start
    return summary


def _refresh_notable(store: Store, summary: Summary) -> None:
    """Add the run's segments to the notable index; one that fails leaves it behind the table (reads
    are then slower, never wrong) and says why."""
    from deltalake.exceptions import DeltaError

    try:
        notable.refresh(store)
    except (OSError, PolarsError, DeltaError, StoreBusy) as exc:
        summary.index_pending = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]} (observe compact writes it again)"
