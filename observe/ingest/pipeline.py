"""The in-process pipeline: inputs opened and read in pieces, parse units parsed on threads and stored
in order; one file, a batch of small files, or a planned step."""
from __future__ import annotations

import errno
import io
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl

from observe import collector as registry
from observe import provenance
from observe import timeparse as tp
from observe.collector import UNIT_INPUTS, Collector, Context
from observe.ingest.parse import ParseInput, Parsed, parse_unit
from observe.ingest.plan import SMALL_FILE_BYTES, Planned, Step, choose, identity, job_from_name
from observe.ingest.records import joined_records, record_pieces, sample_of
from observe.ingest.summary import InputError, Summary
from observe.reader import CHUNK_BYTES, FINGERPRINT_BYTES, READ_ERRORS, is_stream, open_input, read_error
from observe.store import SegmentWriter, Store

PARSE_THREADS = 4
MAX_DOCUMENT_BYTES = 64 << 20  # a whole document (nvidia-smi -q -x: about 25 KB a GPU) is read at most this big


def _open(summary: Summary, store: Store, pipe: Pipeline, mtime: float, file_id: str, job: str | None,
          node: str | None, known: pl.DataFrame | None = None, reference: datetime | None = None) -> ParseInput:
    """One input entering the run: ``known`` (its records already stored, as planned) is asked of
    the store when not given, and again when the same identity comes twice in one run; with the
    store's retention cutoff, and whether the input was last written (``mtime``) before it."""
    again = file_id in summary.file_ids
    if again:  # the same identity twice in one run: make the first one visible
        pipe.flush()
    summary.file_ids.add(file_id)
    summary.files += 1
    if known is None or again:
        known = store.known(file_id)
    store.ledger.note([file_id])  # marked with the next segment: one marker file for many inputs
    cutoff = store.upkeep.expired_before()
    return ParseInput(file_id, job, node, reference, known, cutoff, cutoff is not None and mtime < cutoff.timestamp())


def ingest_file(path: str, store: Store, source: str = "auto", node: str | None = None,
                job: str | None = None, boot_time: datetime | None = None, tz: str = "UTC",
                summary: Summary | None = None, progress: Callable[[int], None] | None = None,
                pipe: Pipeline | None = None, learned_boot_copies: pl.DataFrame | None = None,
                route: str | None = None, planned: Planned | None = None, year: int | None = None) -> Summary:
    """Ingest one file (or ``-``) into ``store``; re-ingesting the same bytes stores nothing new.

    With ``pipe`` (a run's shared pipeline) its records may still be in flight when this returns;
    without, they are written before it returns. ``boot_time`` is given (it is part of a kernel
    log's identity); ``learned_boot_copies``, the run's other inputs' copies of its records, date it
    otherwise (:mod:`observe.boot_copies`). ``route``: how the
    input reached observe (default: from the file's owner and mode, see :mod:`observe.provenance`).
    ``planned``: the input as the run's plan saw it (its identity and records already stored). ``year``: of stamps
    that carry none (else the file's modification time's).
    """
    summary = summary or Summary()
    if pipe is None:
        with store.writer() as writer, Pipeline(writer, summary) as own:
            return ingest_file(path, store, source, node, job, boot_time, tz, summary, progress, own, learned_boot_copies,
                               route, planned, year)
    try:
        stream = open_input(path)
    except READ_ERRORS as exc:
        raise InputError(read_error(path, exc)) from None
    with stream:
        try:
            head = stream.peek(64 * 1024)[: 64 * 1024] if hasattr(stream, "peek") else b""
        except READ_ERRORS as exc:
            raise InputError(read_error(path, exc)) from None
        if source == "auto" and not head.strip():  # empty or blank: nothing to store, no format to tell
            summary.files += 1
            summary.bytes += len(head)
            return summary
        sample = sample_of(head)
        route = route or provenance.path_route(path, job or job_from_name(path))
        if path != "-":  # what is read decides, not what the path named when listed
            route = provenance.read_route(stream.fileno(), route, job or job_from_name(path))
        c = choose(source, sample, path, route)
        if source == "auto":  # told from syslog-framed lines: a syslog daemon's file
            route = provenance.input_route(route, c.relayed_for(sample))
        copied = learned_boot_copies if learned_boot_copies is not None else summary.boot_copies.of(node)
        mtime = Path(path).stat().st_mtime if path != "-" else time.time()
        if planned is not None and planned.file_id:
            file_id, job, known = planned.file_id, job or job_from_name(path), planned.known
        else:
            (file_id, job), known = identity(path, head, node, job, boot_time if c.source == "kernel" else None), None
        one = _open(summary, store, pipe, mtime, file_id, job, node, known)
        ctx = Context(node=node, job_id=one.job, boot_time=boot_time, boot_copies=copied, reference_time=tp.reference_time(mtime, year),
                      year_given=year is not None, tz=tz, header=sample[0] if len(sample) else None, route=route)
        summary.sources[path] = c.name
        one_unit = isinstance(stream, io.BufferedReader) and not is_stream(path) and Path(path).stat().st_size <= CHUNK_BYTES
        holder = _Holder(ctx, learns=not one_unit)
        try:
            if c.whole_file:
                for recs in _whole(stream, summary, progress):
                    pipe.submit(lambda recs=recs: recs, [one], c, holder)
            else:
                for body, base in record_pieces(stream, c, summary, progress):
                    pipe.submit(lambda body=body, base=base: joined_records([body], c, [base]), [one], c, holder)
        except READ_ERRORS as exc:  # what was read before is stored (a truncated gzip keeps its readable part)
            raise InputError(read_error(path, exc)) from None
    return summary


def ingest_batch(planned: list[Planned], c: Collector, store: Store, pipe: Pipeline, summary: Summary, route: str,
                 tz: str = "UTC", progress: Callable[[int], None] | None = None, year: int | None = None) -> None:
    """Ingest many small files of one format and route as a few large parse units (per-file cost
    amortised: a unit's parse, rules and split cost about a tenth of a second however little it holds);
    each file's node, identity and records already stored are as ``planned``, and its stamps without a
    year are dated by its own last write (or ``year``).
    """
    mtime = max(p.mtime for p in planned)
    holder = _Holder(Context(tz=tz, reference_time=tp.reference_time(mtime, year), year_given=year is not None, route=route))
    for buf, sizes, inputs in _batches(planned, store, pipe, summary, progress, year):
        pipe.submit(lambda buf=buf, sizes=sizes: joined_records([buf], c, sizes=sizes), inputs, c, holder)


def _batches(planned: list[Planned], store: Store, pipe: Pipeline, summary: Summary,
             progress: Callable[[int], None] | None, year: int | None = None):
    """Units of up to CHUNK_BYTES from many files: ``(buffer, sizes, inputs)``, the files read one
    after another straight into the unit's buffer (each ending with a newline), as the size each had
    when opened, at most what it had when planned. One newline scan each, on a worker."""
    buf, used, sizes, inputs = None, 0, [], []
    for p in planned:
        path, job, node = p.path, p.opts.get("job"), p.opts.get("node")
        try:
            with _opened(p) as (f, data, damage):
                # the file opened (not the path), up to the size planned: what was appended since is read by the
                # next run, and a user who grows their small file after the plan (a sparse `truncate -s 6G`) never
                # makes a unit bigger than the plan (attack-31 r4)
                size = len(data) if data is not None else min(os.fstat(f.fileno()).st_size, p.size)
                if buf is None or used + size + 1 > len(buf):
                    if sizes:
                        yield memoryview(buf)[:used], sizes, inputs
                    buf, used, sizes, inputs = _unit_buffer(size), 0, [], []
                view = memoryview(buf)[used:used + size]
                if data is None:
                    n = f.readinto(view)
                else:
                    view[:] = np.frombuffer(data, np.uint8)
                    n = size
        except READ_ERRORS as exc:
            summary.failed.append(read_error(path, exc))
            continue
        if damage is not None:  # what came before it is stored
            summary.failed.append(read_error(path, damage))
        summary.sources[path] = p.collector
        summary.bytes += n
        if progress:
            progress(n)
        if p.file_id:
            (file_id, job), known = (p.file_id, job or job_from_name(path)), p.known
        else:  # empty when planned
            (file_id, job), known = identity(path, bytes(buf[used:used + min(n, FINGERPRINT_BYTES)]), node, job), None
        if sizes and file_id in summary.file_ids:
            # an input seen before in this run (a copy): what this unit holds is stored first, so
            # that the copy's records already there are recognised
            mine = bytes(buf[used:used + n])
            yield memoryview(buf)[:used], sizes, inputs
            buf, used, sizes, inputs = _unit_buffer(n), 0, [], []
            buf[:n] = np.frombuffer(mine, np.uint8)
        one = _open(summary, store, pipe, p.mtime, file_id, job, node, known, tp.reference_time(p.mtime, year))
        if n:
            if buf[used + n - 1] != 10:
                buf[used + n] = 10
                n += 1
            used += n
            sizes.append(n)
            inputs.append(one)
        if used >= CHUNK_BYTES or len(sizes) >= UNIT_INPUTS:  # many tiny files: a unit of 2-byte files held 2**23
            yield memoryview(buf)[:used], sizes, inputs
            buf, used, sizes, inputs = None, 0, [], []
    if sizes:
        yield memoryview(buf)[:used], sizes, inputs


@contextmanager
def _opened(p: Planned) -> Iterator[tuple[BinaryIO | None, bytes | None, BaseException | None]]:
    """A batched input: its bytes as planning kept them (nothing opened), or a plain file open to be
    read straight into its unit's buffer (compressed inputs are not batched: what they hold is not
    their size)."""
    if p.text is not None:
        yield None, p.text, None
        return
    with open_input(p.path) as f:
        if not isinstance(f, io.BufferedReader):
            raise OSError(errno.EINVAL, "compressed since it was listed, not read", p.path)
        if provenance.read_route(f.fileno(), p.opts["route"], p.opts.get("job") or job_from_name(p.path)) != p.opts["route"]:
            raise OSError(errno.EPERM, "owner or mode changed since it was listed, not read", p.path)
        yield f, None, None


def _unit_buffer(size: int) -> np.ndarray:
    """A batch unit's buffer: room for CHUNK_BYTES and one more small file (or a ``size``-byte one), and a newline."""
    return np.empty(max(CHUNK_BYTES + SMALL_FILE_BYTES, size + 1), np.uint8)


def _whole(stream, summary: Summary, progress: Callable[[int], None] | None) -> Iterator[pl.DataFrame]:
    data = stream.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise OSError(errno.EFBIG, f"a document of over {MAX_DOCUMENT_BYTES >> 20} MiB, not read")
    summary.bytes += len(data)
    if progress:
        progress(len(data))
    if data:
        yield pl.DataFrame({"raw": [data.decode("utf-8", "replace")], "offset": [0]}, schema={"raw": pl.String, "offset": pl.Int64})


@dataclass
class _Holder:
    """The parse context of one input or batch; updated when a boot time is learned (``learns``:
    an input of more than one unit, whose first units may date the later ones)."""

    ctx: Context
    learns: bool = False


class Pipeline:
    """Parses units on worker threads (polars releases the GIL) and stores them in order.

    Units of consecutive files overlap. A kernel unit whose boot time is still unknown waits for
    everything before it and is stored before the next one is parsed, so that a boot time learned
    from one unit dates the next.
    """

    def __init__(self, writer: SegmentWriter, summary: Summary, threads: int = PARSE_THREADS):
        self.writer = writer
        self.summary = summary
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="observe-parse")
        self.window: deque[tuple[Future, Collector, _Holder]] = deque()

    def submit(self, make: Callable[[], pl.DataFrame], inputs: list[ParseInput], c: Collector, holder: _Holder) -> None:
        """Queue one unit (``make`` gives its records, on the worker); stores the oldest when the window is full."""
        sequential = c.source == "kernel" and holder.learns and holder.ctx.boot_time is None
        if sequential:
            self.drain()
        self.window.append((self.pool.submit(_parse_made, make, inputs, c, holder.ctx), c, holder))
        if sequential or len(self.window) >= self.threads:
            self._store_oldest()

    def _store_oldest(self) -> None:
        future, c, holder = self.window.popleft()
        holder.ctx = _store_unit(future.result(), c, holder.ctx, self.writer, self.summary)

    def drain(self) -> None:
        """Store every unit in flight."""
        while self.window:
            self._store_oldest()

    def flush(self) -> None:
        """Store and write everything so far (it is then visible to readers)."""
        self.drain()
        self.writer.flush()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.drain()
        finally:
            self.pool.shutdown(wait=True)


def _parse_made(make: Callable[[], pl.DataFrame], inputs: list[ParseInput], c: Collector, ctx: Context) -> Parsed:
    return parse_unit(make(), inputs, c, ctx)


def _store_unit(parsed: Parsed, c: Collector, ctx: Context, writer: SegmentWriter, summary: Summary) -> Context:
    summary.blank += parsed.blank
    summary.records += parsed.records
    summary.unparsed += parsed.unparsed
    summary.quarantined += parsed.quarantined
    summary.no_node += parsed.no_node
    if parsed.yearless:
        summary.yearless += parsed.yearless
        summary.years |= parsed.years
    summary.parse_error = summary.parse_error or parsed.error
    summary.kinds.update(parsed.kinds)
    summary.duplicates += parsed.duplicates
    summary.expired += parsed.expired
    summary.stored += parsed.stored
    writer.add_parts(parsed.parts, parsed.nbytes)
    summary.boot_copies.add(parsed.copies)
    if ctx.boot_time is None and c.source == "kernel" and parsed.boots:  # later records of this file use it
        ctx = replace(ctx, boot_time=parsed.boots.get(ctx.node or "") or next(iter(parsed.boots.values())))
    return ctx


def run_step(step: Step, store: Store, pipe: Pipeline, summary: Summary,
             progress: Callable[[int], None] | None = None) -> None:
    """Feed one step into ``pipe``; an input that cannot be ingested goes to ``summary.failed``."""
    head = step.inputs[0]
    if step.batch:
        ingest_batch(list(step.inputs), registry.get(head.collector), store, pipe, summary, head.opts["route"],
                     tz=head.opts.get("tz", "UTC"), progress=progress, year=head.opts.get("year"))
        return
    c = registry.get(head.collector) if head.collector else None
    if c is not None and c.source == "kernel" and head.opts.get("node") and not (
            head.opts.get("boot_time") or head.opts.get("learned_boot_copies") is not None):
        pipe.drain()  # boot times learned from the files before are known now
    try:
        ingest_file(head.path, store, summary=summary, progress=progress, pipe=pipe, planned=head,
                    **{**head.opts, "source": head.collector or head.opts.get("source", "auto")})
    except InputError as exc:
        summary.failed.append(str(exc))
