"""Ingest: inputs -> collector -> records -> rules -> store, streamed in bounded chunks."""
from __future__ import annotations

import io
import os
import re
import sys
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl

from observe import collector as registry
from observe import provenance, rules
from observe.collector import Collector, Context, per_value
from observe.reader import (CHUNK_BYTES, FINGERPRINT_BYTES, READ_ERRORS, fingerprint, is_stream, log_name, lines_of,
                            open_input, peek_head, read_error)
from observe.schema import FIELDS, POLARS_SCHEMA, conform
from observe.store import SegmentWriter, Store, buffered_parts, no_records

MAX_RECORD_LINES = 500
PARSE_THREADS = 4
SMALL_FILE_BYTES = 2 << 20
TAIL_BYTES = 1 << 20  # where a read's last record start is looked for
INPUT_BITS = 40
SAMPLE_LINES = 40
PLAN_HEAD_BYTES = 16 << 10  # what planning reads of each input: 40 lines of most logs, and its first line
JOB_FILE = re.compile(r"slurm-(\d+(?:_\d+)?(?:\+\d+)?)(?:\.\d+)?\.(?:out|err|log)$")
DETECT_MIN_SCORE = 0.3
INGEST_LOCK_WAIT_S = 24 * 3600.0  # how long a run waits for another run into the same store
PCI = r"^(?:[0-9a-f]*?)([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$"


class InputError(ValueError):
    """An input cannot be ingested (unknown format, unreadable); the message is one line."""


@dataclass
class Summary:
    """What an ingest run did."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    stored: int = 0
    duplicates: int = 0
    unparsed: int = 0
    blank: int = 0
    seconds: float = 0.0
    kinds: Counter = field(default_factory=Counter)
    sources: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    boot_times: dict[str, datetime] = field(default_factory=dict)
    file_ids: set[str] = field(default_factory=set)

    @property
    def parsed_pct(self) -> float:
        return 100.0 * (self.records - self.unparsed) / self.records if self.records else 100.0

    def add(self, other: Summary) -> None:
        """Count ``other`` (another worker's part of the same run) in this one."""
        for name in ("files", "bytes", "records", "stored", "duplicates", "unparsed", "blank"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.kinds.update(other.kinds)
        self.sources.update(other.sources)
        self.failed.extend(other.failed)
        for node, boot in other.boot_times.items():
            self.boot_times.setdefault(node, boot)
        self.file_ids |= other.file_ids


def job_from_name(path: str) -> str | None:
    """Job id from a Slurm output file name such as ``slurm-1234.out`` or ``slurm-1234_7.out``."""
    m = JOB_FILE.search(os.path.basename(path))
    return m.group(1) if m else None


def short_host(expr: pl.Expr) -> pl.Expr:
    """Host names to short node names (``gpu001.cluster.local`` -> ``gpu001``); IPs kept."""
    return per_value(expr, lambda names: pl.when(names.str.contains(r"^[0-9.:]+$")).then(names)
                     .otherwise(names.str.extract(r"^([^.]+)", 1)))


def finalize(df: pl.DataFrame, c: Collector, ctx: Context, file_id: str | None = None) -> pl.DataFrame:
    """Fill defaults and hints, run the rules and catalogs, classify the rest as log/unparsed.

    ``file_id`` names the input; batches of inputs carry ``file_id`` and ``_job`` columns instead.
    """
    if "file_id" not in df.columns:
        df = df.with_columns(pl.lit(file_id, dtype=pl.String).alias("file_id"))
    job_hint = pl.col("_job") if "_job" in df.columns else pl.lit(ctx.job_id, dtype=pl.String)
    df = df.with_columns(pl.lit(None, dtype=POLARS_SCHEMA[n]).alias(n) for n in FIELDS if n not in df.columns)
    parsed = pl.col("message").is_not_null()
    given = pl.lit(ctx.node, dtype=pl.String)
    df = df.with_columns(
        parsed.alias("_ok"),
        pl.coalesce("message", "raw").alias("message"),
        short_host(pl.coalesce(pl.col("node"), given)).alias("node"),
        pl.coalesce(pl.col("job_id").cast(pl.String), job_hint).alias("job_id"),
        pl.coalesce(pl.col("source"), pl.lit(c.source)).alias("source"),
        pl.coalesce(pl.col("route"), pl.lit(provenance.input_route(ctx.route, c.relayed), dtype=pl.String)).alias("route"),
    )  # journald's entries have their own route
    if provenance.user_written(ctx.route):  # the node a user's text names is only a claim (attrs.claimed_node)
        claim = pl.when(pl.col("node") != given.fill_null("")).then(pl.col("node"))
        df = df.with_columns(given.alias("node"), rules.merge_attrs(pl.col("attrs"), rules.attrs_json([("claimed_node", claim)])).alias("attrs"))
    df = provenance.clamp_future(rules.apply(df))
    df = df.with_columns(
        pl.when(pl.col("kind").is_not_null()).then("kind")
        .when("_ok").then(pl.lit("log")).otherwise(pl.lit("unparsed")).alias("kind"),
        pl.coalesce("severity", pl.lit("info")).alias("severity"),
        per_value(pl.col("gpu"), lambda gpu: gpu.str.to_lowercase().str.replace(PCI, "${1}:${2}:${3}")).alias("gpu"),
    ).drop("_ok", *(["_job"] if "_job" in df.columns else []))
    return conform(rules.enrich(df))


def record_pieces(stream: BinaryIO, c: Collector, summary: Summary,
                  progress: Callable[[int], None] | None = None) -> Iterator[tuple[memoryview, int]]:
    """``(bytes, offset)`` pieces of a stream of about CHUNK_BYTES that hold whole records (each
    ending with a newline): each read's last record, which may go on in the next bytes, starts the
    next piece (at the end, it joins the last one). Pieces are views of the reads: a plain file is
    read again from where the last record starts (a few bytes read twice, no copy of the piece);
    other streams copy those bytes in front of the next read."""
    rewind = isinstance(stream, io.BufferedReader) and stream.seekable() and stream is not sys.stdin.buffer
    pending, base, ready, seen = b"", 0, None, 0
    while data := stream.read(CHUNK_BYTES):
        start = base + len(pending)  # where ``data`` starts in the input
        if start + len(data) > seen:  # count each byte once, though a rewind reads some twice
            new = start + len(data) - seen
            summary.bytes += new
            seen += new
            if progress:
                progress(new)
        end = data.rfind(b"\n") + 1
        cut = last_record_start(data, end, c) if end else None
        if not cut:  # no record starts after the first here (a long one): join the reads
            pending = pending + data
            if len(pending) <= 4 * CHUNK_BYTES:
                continue
            data, pending, cut = pending, b"", pending.rfind(b"\n") + 1  # a record longer than that is cut
        view = memoryview(data)
        piece = view[:cut] if not pending else memoryview(b"".join([pending, view[:cut]]))
        pending = b""
        if rewind:  # the next read starts with the record this one cut off
            stream.seek(base + len(piece))
        else:
            pending = bytes(view[cut:])
        if len(piece):
            if ready is not None:
                yield ready
            ready = piece, base
            base += len(piece)
    if pending:
        tail = pending if pending.endswith(b"\n") else pending + b"\n"
        ready = (memoryview(b"".join([ready[0], tail])), ready[1]) if ready is not None else (memoryview(tail), base)
    if ready is not None:
        yield ready


def last_record_start(data: bytes, end: int, c: Collector, window: int | None = None) -> int | None:
    """Where the last record in ``data[:end]`` (complete lines) starts, looking at its last
    ``window`` bytes (default TAIL_BYTES); None when none starts there. Formats without continuation
    lines: ``end``."""
    if type(c).continuation is Collector.continuation:
        return end
    window = TAIL_BYTES if window is None else window
    start = 0 if end <= window else data.rfind(b"\n", 0, end - window) + 1
    if start >= end:
        return None
    lines = lines_of(data[start:end], start)
    starts = lines.filter(~c.continuation(pl.col("raw")).fill_null(False)).get_column("offset")
    return int(starts[-1]) if len(starts) else None


def _record_ids(chunk: pl.DataFrame, c: Collector, first: pl.Expr | None = None) -> pl.Series:
    """Record number of each line; a record holds at most MAX_RECORD_LINES lines.

    ``first`` marks lines that start a record whatever they look like (a new file's first line).
    """
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    cont = c.continuation(pl.col("raw")).fill_null(False)
    if c.continuation_hint is not None:  # the full test on the lines that pass the cheap one
        raw = chunk.get_column("raw")
        rows = raw.str.contains(c.continuation_hint).fill_null(False).arg_true()
        tested = raw.gather(rows).to_frame().select(cont).to_series()
        cont = pl.lit(pl.Series(np.zeros(chunk.height, bool)).scatter(rows, tested))
    if first is not None:
        cont = cont & ~first.fill_null(True)
    first = pl.when(~cont).then(idx).forward_fill().fill_null(0)
    start = (~cont) | ((idx - first) % MAX_RECORD_LINES == 0)
    return chunk.select(start.cum_sum().alias("rid")).to_series()


def _join(lines: pl.DataFrame, rid: pl.Series) -> pl.DataFrame:
    """One row per record (``rid`` ascending, consecutive): each record's first line, its ``raw``
    replaced by all its lines joined where it has several (those few are grouped, nothing merged)."""
    if not lines.height or lines.height == int(rid[-1]) - int(rid[0]) + 1:
        return lines
    multi = ((rid == rid.shift(1)) | (rid == rid.shift(-1))).fill_null(False)
    joined = (pl.DataFrame({"_r": rid.filter(multi), "raw": lines.get_column("raw").filter(multi)})
              .group_by("_r", maintain_order=True).agg(pl.col("raw").str.join("\n")))
    out = lines.filter(rid.ne_missing(rid.shift(1)))
    at = joined.get_column("_r") - int(rid[0])  # records are numbered consecutively from rid[0]
    return out.with_columns(out.get_column("raw").scatter(at, joined.get_column("raw")))


def sample_of(head: bytes) -> list[str]:
    """The first lines of an input's first bytes, for format detection."""
    end = -1
    for _ in range(SAMPLE_LINES):  # decode only those lines
        end = head.find(b"\n", end + 1)
        if end < 0:
            end = len(head)
            break
    return head[:end].decode("utf-8", "replace").splitlines()[:SAMPLE_LINES]


def choose(source: str, sample: list[str], path: str, route: str | None) -> Collector:
    """The collector for an input: the named one, or the best match for its first lines (a file
    users may write: job output, whatever its lines look like)."""
    if source != "auto":
        return registry.get(source)
    return _chosen(*registry.detect(sample), path, route)


@dataclass(frozen=True)
class ParseInput:
    """One input inside a parse unit: its identity, job hint and offsets already stored."""

    file_id: str
    job: str | None
    known: pl.DataFrame = field(default_factory=no_records)  # offset, text (hash of raw) already stored


def _identity(path: str, head: bytes, node: str | None, job: str | None,
              boot: datetime | None = None) -> tuple[str, str | None]:
    """An input's file id and job (the one given, else from its name); ``boot``: a kernel log's
    given boot time (not one learned from other inputs, which a later run may not learn)."""
    job = job or job_from_name(path)
    return fingerprint(head, node, job, log_name(path), boot), job


def _open(path: str, summary: Summary, node: str | None, store: Store, pipe: _Pipeline,
          head: bytes, job: str | None, boot: datetime | None = None) -> ParseInput:
    file_id, job = _identity(path, head, node, job, boot)
    again = file_id in summary.file_ids
    if again:  # the same identity twice in one run: make the first one visible
        pipe.flush()
    summary.file_ids.add(file_id)
    summary.files += 1
    known = store.known(file_id, fresh=again)
    store.note_inputs([file_id])  # marked with the next segment: one marker file for many inputs
    return ParseInput(file_id, job, known)


def ingest_file(path: str, store: Store, source: str = "auto", node: str | None = None,
                job: str | None = None, boot_time: datetime | None = None, tz: str = "UTC",
                summary: Summary | None = None, progress: Callable[[int], None] | None = None,
                pipe: _Pipeline | None = None, learned_boot_time: datetime | None = None,
                route: str | None = None) -> Summary:
    """Ingest one file (or ``-``) into ``store``; re-ingesting the same bytes stores nothing new.

    With ``pipe`` (a run's shared pipeline) its records may still be in flight when this returns;
    without, they are written before it returns. ``boot_time`` is given (it is part of a kernel
    log's identity), ``learned_boot_time`` was told by the run's other inputs. ``route``: how the
    input reached observe (default: from the file's owner and mode, see :mod:`observe.provenance`).
    """
    summary = summary or Summary()
    if pipe is None:
        with store.writer() as writer, _Pipeline(writer, summary) as own:
            return ingest_file(path, store, source, node, job, boot_time, tz, summary, progress, own, learned_boot_time,
                               route)
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
        c = choose(source, sample, path, route)
        booted = boot_time or learned_boot_time or (summary.boot_times.get(node) if node else None)
        mtime = Path(path).stat().st_mtime if path != "-" else time.time()
        one = _open(path, summary, node, store, pipe, head, job, boot_time if c.source == "kernel" else None)
        ctx = Context(node=node, job_id=one.job, boot_time=booted,
                      reference_time=datetime.fromtimestamp(mtime, timezone.utc), tz=tz,
                      header=sample[0] if len(sample) else None, route=route)
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


def ingest_batch(paths: list[str], c: Collector, store: Store, pipe: _Pipeline, summary: Summary, route: str,
                 node: str | None = None, jobs: list[str | None] | None = None, tz: str = "UTC",
                 progress: Callable[[int], None] | None = None) -> None:
    """Ingest many small files of one format and route as a few large parse units (per-file cost
    amortised). ``jobs`` gives each file's job hint (default: from its name).
    """
    mtime = max(Path(p).stat().st_mtime for p in paths)
    holder = _Holder(Context(node=node, tz=tz, reference_time=datetime.fromtimestamp(mtime, timezone.utc), route=route))
    for buf, sizes, inputs in _batches(paths, jobs or [None] * len(paths), c, store, pipe, summary, node, progress):
        pipe.submit(lambda buf=buf, sizes=sizes: joined_records([buf], c, sizes=sizes), inputs, c, holder)


def _batches(paths: list[str], jobs: list[str | None], c: Collector, store: Store, pipe: _Pipeline,
             summary: Summary, node: str | None, progress: Callable[[int], None] | None):
    """Units of up to CHUNK_BYTES from many files: ``(buffer, sizes, inputs)``, the files read one
    after another straight into the unit's buffer (each ending with a newline), as the size each had
    when opened. One newline scan each, on a worker."""
    buf, used, sizes, inputs = None, 0, [], []
    for path, job in zip(paths, jobs):
        try:
            with open_input(path) as f:
                data = None if isinstance(f, io.BufferedReader) else f.read()  # compressed: size known once read
                size = os.fstat(f.fileno()).st_size if data is None else len(data)
                if buf is None or used + size + 1 > len(buf):
                    if sizes:
                        yield memoryview(buf)[:used], sizes, inputs
                    buf, used, sizes, inputs = _unit_buffer(size), 0, [], []
                view = memoryview(buf)[used:used + size]
                if data is None:
                    n = f.readinto(view)
                else:
                    view[:] = data
                    n = size
        except READ_ERRORS as exc:
            summary.failed.append(read_error(path, exc))
            continue
        summary.sources[path] = c.name
        summary.bytes += n
        if progress:
            progress(n)
        head = bytes(buf[used:used + min(n, FINGERPRINT_BYTES)])
        if sizes and _identity(path, head, node, job)[0] in summary.file_ids:
            # an input seen before in this run (a copy): what this unit holds is stored first, so
            # that the copy's records already there are recognised
            mine = bytes(buf[used:used + n])
            yield memoryview(buf)[:used], sizes, inputs
            buf, used, sizes, inputs = _unit_buffer(n), 0, [], []
            buf[:n] = np.frombuffer(mine, np.uint8)
        one = _open(path, summary, node, store, pipe, head, job)
        if n:
            if buf[used + n - 1] != 10:
                buf[used + n] = 10
                n += 1
            used += n
            sizes.append(n)
            inputs.append(one)
        if used >= CHUNK_BYTES:
            yield memoryview(buf)[:used], sizes, inputs
            buf, used, sizes, inputs = None, 0, [], []
    if sizes:
        yield memoryview(buf)[:used], sizes, inputs


def _unit_buffer(size: int) -> np.ndarray:
    """A batch unit's buffer: room for CHUNK_BYTES and one more small file (or a ``size``-byte one), and a newline."""
    return np.empty(max(CHUNK_BYTES + SMALL_FILE_BYTES, size + 1), np.uint8)


def joined_records(datas: list[bytes] | list[memoryview], c: Collector, bases: list[int] | None = None,
                   sizes: list[int] | None = None) -> pl.DataFrame:
    """Records of several inputs' bytes (each ending with a newline, starting at byte ``bases[i]``
    of its input, default 0), given one buffer each, or one holding them one after another
    (``sizes``); each offset carries its input's index in the high bits."""
    starts = np.cumsum([0] + (sizes or [len(d) for d in datas])[:-1])
    lines = lines_of(datas[0] if len(datas) == 1 else b"".join(datas))
    index = np.searchsorted(starts, lines.get_column("offset").to_numpy(), side="right") - 1
    shift = starts[index] - (np.asarray(bases, dtype=np.int64)[index] if bases is not None else 0)
    lines = lines.with_columns(
        pl.Series("_in", index, dtype=pl.Int64),
        (pl.col("offset") - pl.Series(shift, dtype=pl.Int64)).alias("offset"),
    )
    rid = _record_ids(lines, c, first=pl.col("_in") != pl.col("_in").shift(1))
    return _join(lines, rid).with_columns(pl.col("offset") + pl.col("_in") * (1 << INPUT_BITS)).drop("_in")


def parse_bytes(data: bytes, source: str, ctx: Context) -> pl.DataFrame:
    """Events of one input's bytes parsed as ``source``, without a store (what checks and hooks read)."""
    c = registry.get(source)
    if not data.strip():
        return conform(pl.DataFrame())
    recs = joined_records([data if data.endswith(b"\n") else data + b"\n"], c)
    recs = recs.filter(~blank_lines(recs.get_column("raw")))
    return finalize(c.parse(recs, ctx), c, ctx, "local")


def _whole(stream, summary: Summary, progress: Callable[[int], None] | None) -> Iterator[pl.DataFrame]:
    data = stream.read()
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


class _Pipeline:
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

    def __enter__(self) -> _Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.drain()
        finally:
            self.pool.shutdown(wait=True)


@dataclass
class Parsed:
    """A parsed unit, ready to store: its fresh records by partition and what the summary counts."""

    parts: dict[tuple[str, str], pl.DataFrame] = field(default_factory=dict)
    blank: int = 0
    records: int = 0
    unparsed: int = 0
    duplicates: int = 0
    stored: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    boots: dict[str, datetime] = field(default_factory=dict)


def _parse_made(make: Callable[[], pl.DataFrame], inputs: list[ParseInput], c: Collector, ctx: Context) -> Parsed:
    return parse_unit(make(), inputs, c, ctx)


def parse_unit(recs: pl.DataFrame, inputs: list[ParseInput], c: Collector, ctx: Context) -> Parsed:
    """Parse, classify, drop what the store already holds and split by partition (on a worker)."""
    blank = blank_lines(recs.get_column("raw"))
    if blank.any():
        recs = recs.filter(~blank)
    if not recs.height:
        return Parsed(blank=int(blank.sum()))
    out = c.parse(recs, ctx)
    order = out.get_column("offset")  # file order (a batch: input by input), restored when splitting
    if len(inputs) == 1:
        out = out.with_columns(pl.lit(inputs[0].file_id).alias("file_id"),
                               pl.lit(inputs[0].job, dtype=pl.String).alias("_job"))
    else:  # the input's index rides in the offset's high bits through the collector
        hints = pl.DataFrame({"_in": range(len(inputs)), "file_id": [i.file_id for i in inputs],
                              "_job": [i.job for i in inputs]}, schema={"_in": pl.Int64, "file_id": pl.String, "_job": pl.String})
        out = out.with_columns((pl.col("offset") // (1 << INPUT_BITS)).alias("_in"),
                               (pl.col("offset") % (1 << INPUT_BITS)).alias("offset"))
        out = out.join(hints, on="_in", how="left", maintain_order="left").drop("_in")
    out = finalize(out, c, ctx)
    kinds = out.get_column("kind").value_counts()
    done = Parsed(blank=int(blank.sum()), records=out.height, kinds=dict(kinds.iter_rows()))
    done.unparsed = done.kinds.get("unparsed", 0)
    known = [i.known.with_columns(pl.lit(i.file_id).alias("file_id")) for i in inputs if i.known.height]
    if known:  # a record is a duplicate only if the same input holds the same text at that offset
        keyed = out.with_columns(pl.col("raw").hash().alias("text"), order.alias("_order"))
        fresh = keyed.join(pl.concat(known), on=["file_id", "offset", "text"], how="anti", maintain_order="left")
        done.duplicates = out.height - fresh.height
        out, order = fresh.drop("text", "_order"), fresh.get_column("_order")
    done.stored = out.height
    learn_boot_times(out, done.boots)
    done.parts = buffered_parts(out, order)
    return done


def blank_lines(raw: pl.Series) -> pl.Series:
    """Lines of only white space (stripped only where the first character is white space)."""
    blank = raw.str.len_bytes() == 0
    maybe = raw.str.contains(r"^\s")
    if maybe.any():
        rows = maybe.arg_true()
        blank = blank.scatter(rows, raw.gather(rows).str.strip_chars() == "")
    return blank


def _store_unit(parsed: Parsed, c: Collector, ctx: Context, writer: SegmentWriter, summary: Summary) -> Context:
    summary.blank += parsed.blank
    summary.records += parsed.records
    summary.unparsed += parsed.unparsed
    summary.kinds.update(parsed.kinds)
    summary.duplicates += parsed.duplicates
    summary.stored += parsed.stored
    writer.add_parts(parsed.parts)
    for node, boot in parsed.boots.items():
        summary.boot_times.setdefault(node, boot)
    if ctx.boot_time is None and c.source == "kernel" and parsed.boots:  # later records of this file use it
        ctx = replace(ctx, boot_time=parsed.boots.get(ctx.node or "") or next(iter(parsed.boots.values())))
    return ctx


def learn_boot_times(events: pl.DataFrame, known: dict[str, datetime]) -> None:
    """Record each node's boot time from kernel events that carry both wall-clock time and uptime."""
    both = events.filter(pl.col("source") == "kernel", pl.col("ts").is_not_null(), pl.col("node").is_not_null(),
                         pl.col("attrs").str.contains('"uptime"', literal=True))
    if both.is_empty():
        return
    up = pl.col("attrs").str.json_path_match("$.uptime").cast(pl.Float64)
    boots = both.group_by("node").agg(
        (pl.col("ts") - pl.duration(microseconds=(up * 1e6).cast(pl.Int64))).median().alias("boot"))
    for node, boot in boots.iter_rows():
        known.setdefault(node, boot)


@dataclass(frozen=True)
class Planned:
    """One input of a run, as planned: its collector (by name; None when it cannot be told), size,
    identity and whether it is a kernel log with boot-relative stamps."""

    path: str
    opts: dict
    collector: str | None
    relative: bool
    size: int
    file_id: str | None
    known: pl.DataFrame = field(default_factory=no_records, compare=False)  # records of it already stored


@dataclass(frozen=True)
class Step:
    """One call into the pipeline: one input, or small files of one format parsed as a batch."""

    inputs: tuple[Planned, ...]
    batch: bool = False

    @property
    def size(self) -> int:
        return sum(p.size for p in self.inputs)


Task = list[Step]  # steps run in order by one pipeline


def file_size(path: str) -> int:
    """Bytes in ``path`` (0 for stdin or a file that cannot be read)."""
    try:
        return os.stat(path).st_size if path != "-" else 0
    except OSError:
        return 0


def plan(inputs: list[tuple[str, dict]], store: Store | None = None) -> list[Planned]:
    """Each input's collector, size, identity, whether it has boot-relative stamps, and (with
    ``store``) its records already stored, all inputs' read in one scan."""
    samples: list[list[str]] = []
    heads: list[bytes] = []
    for path, opts in inputs:
        try:
            head = peek_head(path, PLAN_HEAD_BYTES)
        except READ_ERRORS:  # the ingest says what is wrong with it
            head = b""
        samples.append(sample_of(head))
        heads.append(head[:FINGERPRINT_BYTES])  # only what the identity reads: thousands of heads add up
    chosen: list[tuple[Collector | None, dict[str, float]]] = []
    inputs = [(path, {**opts, "route": opts.get("route") or provenance.path_route(path, opts.get("job") or job_from_name(path))})
              for path, opts in inputs]
    for (path, opts), (best, score, scores) in zip(inputs, registry.detect_many(samples)):
        source = opts.get("source", "auto")
        try:
            chosen.append((registry.get(source) if source != "auto" else _chosen(best, score, path, opts["route"]), scores))
        except (InputError, ValueError):
            chosen.append((None, scores))
    ids = [_identity(path, head, opts.get("node"), opts.get("job"),
                     opts.get("boot_time") if c is not None and c.source == "kernel" else None)[0] if head else None
           for (path, opts), head, (c, _) in zip(inputs, heads, chosen)]
    known = store.known_many(ids) if store is not None else {}
    return [Planned(path, opts, c.name if c else None,
                    c is not None and c.name == "kernel" and scores.get("syslog", 0.0) < 0.5,
                    file_size(path), file_id, known.get(file_id, no_records()))
            for (path, opts), file_id, (c, scores) in zip(inputs, ids, chosen)]


def tasks(planned: list[Planned], task_bytes: float = float("inf")) -> tuple[list[Task], list[Task]]:
    """The run's tasks: the first list, then the second (kernel logs with boot-relative stamps,
    which wait for the boot times the first ones tell).

    Small files of a batchable format, node, time zone and route are batch steps of up to ``task_bytes``;
    inputs that share an identity (a file and its rotated copy) end up in one task, in order, so
    that the second sees what the first stored.
    """
    groups: dict[tuple, list[Planned]] = {}
    first: list[Task] = []
    last: list[Task] = []
    for p in planned:
        c = registry.get(p.collector) if p.collector else None
        if c is not None and c.batchable and not c.whole_file and not is_stream(p.path) and p.size < SMALL_FILE_BYTES:
            groups.setdefault((p.collector, p.opts.get("node"), p.opts.get("tz", "UTC"), p.opts["route"]), []).append(p)
        else:
            (last if p.relative else first).append([Step((p,))])
    batches: list[Task] = []
    for group in groups.values():
        part: list[Planned] = []
        size = 0
        for p in group:
            if part and size + p.size > task_bytes:
                batches.append([Step(tuple(part), batch=True)])
                part, size = [], 0
            part.append(p)
            size += p.size
        batches.append([Step(tuple(part), batch=True)])
    return _together(batches + first), _together(last)


def _together(tasks: list[Task]) -> list[Task]:
    """Tasks merged where they share an input identity (each merged task where its first part was)."""
    owner: dict[str, int] = {}
    merged: list[Task | None] = []
    for task in tasks:
        ids = {p.file_id for step in task for p in step.inputs if p.file_id}
        into = min((owner[i] for i in ids if i in owner), default=None)
        if into is None:
            into = len(merged)
            merged.append([])
        merged[into].extend(task)
        for i in ids:
            owner[i] = into
    return [t for t in merged if t]


def run_step(step: Step, store: Store, pipe: _Pipeline, summary: Summary,
             progress: Callable[[int], None] | None = None) -> None:
    """Feed one step into ``pipe``; an input that cannot be ingested goes to ``summary.failed``."""
    store.preload({p.file_id: p.known for p in step.inputs if p.file_id})
    head = step.inputs[0]
    if step.batch:
        ingest_batch([p.path for p in step.inputs], registry.get(head.collector), store, pipe, summary,
                     head.opts["route"], node=head.opts.get("node"), jobs=[p.opts.get("job") for p in step.inputs],
                     tz=head.opts.get("tz", "UTC"), progress=progress)
        return
    c = registry.get(head.collector) if head.collector else None
    if c is not None and c.source == "kernel" and head.opts.get("node") and not (
            head.opts.get("boot_time") or head.opts.get("learned_boot_time")):
        pipe.drain()  # boot times learned from the files before are known now
    try:
        ingest_file(head.path, store, summary=summary, progress=progress, pipe=pipe,
                    **{**head.opts, "source": head.collector or head.opts.get("source", "auto")})
    except InputError as exc:
        summary.failed.append(str(exc))


def _chosen(best: Collector | None, score: float, path: str, route: str | None) -> Collector:
    if provenance.user_written(route) and (best is None or best.name not in provenance.job_output_sources()):
        return registry.get(provenance.job_output_sources()[0])
    if best is None or score < DETECT_MIN_SCORE:
        if job_from_name(path):
            return registry.get("nccl")
        raise InputError(f"{path}: cannot tell the log format from its first lines; pass --source "
                         f"({', '.join(sorted(registry.collectors()))})")
    return best


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
    from observe import parallel

    with store.lock("ingest", wait_s=INGEST_LOCK_WAIT_S, waiting=waiting):
        start = time.perf_counter()
        workers = parallel.default_workers(sum(file_size(p) for p, _ in inputs)) if workers is None else workers
        if workers > 1 and not any(is_stream(p) for p, _ in inputs):  # a pipe is read where it was opened
            summary = parallel.ingest(inputs, store, workers, progress)
        else:
            summary = Summary()
            first, last = tasks(plan(inputs, store))
            with store.writer() as writer, _Pipeline(writer, summary) as pipe:
                for step in (step for task in first + last for step in task):
                    run_step(step, store, pipe, summary, progress)
        summary.seconds = time.perf_counter() - start
    return summary
