"""Ingest: inputs -> collector -> records -> rules -> store, streamed in bounded chunks."""
from __future__ import annotations

import re
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from observe import collector as registry
from observe import rules
from observe.collector import Collector, Context
from observe.reader import fingerprint, open_input, peek_head, read_lines
from observe.schema import FIELDS, POLARS_SCHEMA, conform
from observe.store import SegmentWriter, Store

MAX_RECORD_LINES = 500
PARSE_THREADS = 2
JOB_FILE = re.compile(r"slurm-(\d+(?:_\d+)?(?:\+\d+)?)(?:\.\d+)?\.(?:out|err|log)$")
DETECT_MIN_SCORE = 0.3
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


def job_from_name(path: str) -> str | None:
    """Job id from a Slurm output file name such as ``slurm-1234.out`` or ``slurm-1234_7.out``."""
    m = JOB_FILE.search(Path(path).name)
    return m.group(1) if m else None


def short_host(expr: pl.Expr) -> pl.Expr:
    """Host names to short node names (``gpu001.cluster.local`` -> ``gpu001``); IPs kept."""
    return pl.when(expr.str.contains(r"^[0-9.:]+$")).then(expr).otherwise(expr.str.extract(r"^([^.]+)", 1))


def finalize(df: pl.DataFrame, c: Collector, ctx: Context, file_id: str) -> pl.DataFrame:
    """Fill defaults and hints, run the rules and catalogs, classify the rest as log/unparsed."""
    df = df.with_columns(pl.lit(None, dtype=POLARS_SCHEMA[n]).alias(n) for n in FIELDS if n not in df.columns)
    parsed = pl.col("message").is_not_null()
    df = df.with_columns(
        parsed.alias("_ok"),
        pl.coalesce("message", "raw").alias("message"),
        short_host(pl.coalesce(pl.col("node"), pl.lit(ctx.node, dtype=pl.String))).alias("node"),
        pl.coalesce(pl.col("job_id").cast(pl.String), pl.lit(ctx.job_id, dtype=pl.String)).alias("job_id"),
        pl.coalesce(pl.col("source"), pl.lit(c.source)).alias("source"),
        pl.lit(file_id).alias("file_id"),
    )
    df = rules.apply(df)
    df = df.with_columns(
        pl.when(pl.col("kind").is_not_null()).then("kind")
        .when("_ok").then(pl.lit("log")).otherwise(pl.lit("unparsed")).alias("kind"),
        pl.coalesce("severity", pl.lit("info")).alias("severity"),
        pl.col("gpu").str.to_lowercase().str.replace(PCI, "${1}:${2}:${3}").alias("gpu"),
    ).drop("_ok")
    return conform(rules.enrich(df))


def records(lines: Iterator[pl.DataFrame], c: Collector) -> Iterator[pl.DataFrame]:
    """Join continuation lines to their record, holding the last record back across chunks."""
    carry: pl.DataFrame | None = None
    for chunk in lines:
        if carry is not None:
            chunk = pl.concat([carry, chunk])
        rid = _record_ids(chunk, c)
        keep = rid < rid.max()
        carry = chunk.filter(~keep)
        yield _join(chunk.filter(keep), rid.filter(keep))
    if carry is not None and carry.height:
        yield _join(carry, _record_ids(carry, c))


def _record_ids(chunk: pl.DataFrame, c: Collector) -> pl.Series:
    """Record number of each line; a record holds at most MAX_RECORD_LINES lines."""
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    cont = c.continuation(pl.col("raw")).fill_null(False)
    first = pl.when(~cont).then(idx).forward_fill().fill_null(0)
    start = (~cont) | ((idx - first) % MAX_RECORD_LINES == 0)
    return chunk.select(start.cum_sum().alias("rid")).to_series()


def _join(lines: pl.DataFrame, rid: pl.Series) -> pl.DataFrame:
    if lines.height == rid.n_unique():
        return lines
    return (
        lines.with_columns(rid.alias("_r"))
        .group_by("_r", maintain_order=True)
        .agg(pl.col("raw").str.join("\n"), pl.col("offset").first())
        .drop("_r")
    )


def _whole(stream) -> Iterator[pl.DataFrame]:
    data = stream.read()
    if data:
        yield pl.DataFrame({"raw": [data.decode("utf-8", "replace")], "offset": [0]}, schema={"raw": pl.String, "offset": pl.Int64})


def choose(source: str, sample: pl.Series, path: str) -> Collector:
    """The collector for an input: the named one, or the best match for its first lines."""
    if source != "auto":
        return registry.get(source)
    best, score = registry.detect(sample)
    if best is None or score < DETECT_MIN_SCORE:
        if job_from_name(path):
            return registry.get("nccl")
        raise InputError(f"{path}: cannot tell the log format from its first lines; pass --source "
                         f"({', '.join(sorted(registry.collectors()))})")
    return best


def ingest_file(path: str, store: Store, source: str = "auto", node: str | None = None,
                job: str | None = None, boot_time: datetime | None = None, tz: str = "UTC",
                summary: Summary | None = None, progress: Callable[[int], None] | None = None,
                writer: SegmentWriter | None = None) -> Summary:
    """Ingest one file (or ``-``) into ``store``; re-ingesting the same bytes stores nothing new.

    With ``writer``, records join that writer's buffers (the caller closes it); else they are
    written before this returns.
    """
    summary = summary or Summary()
    if writer is None:
        with store.writer() as own:
            return ingest_file(path, store, source, node, job, boot_time, tz, summary, progress, own)
    try:
        stream = open_input(path)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    with stream:
        try:
            head = stream.peek(64 * 1024)[: 64 * 1024] if hasattr(stream, "peek") else b""
        except OSError as exc:
            raise InputError(f"{path}: {exc.strerror or exc}") from None
        sample = pl.Series(head.decode("utf-8", "replace").splitlines()[:200], dtype=pl.String)
        c = choose(source, sample, path)
        boot_time = boot_time or (summary.boot_times.get(node) if node else None)
        mtime = Path(path).stat().st_mtime if path != "-" else time.time()
        ctx = Context(node=node, job_id=job or job_from_name(path), boot_time=boot_time,
                      reference_time=datetime.fromtimestamp(mtime, timezone.utc), tz=tz,
                      header=sample[0] if len(sample) else None)
        file_id = fingerprint(head, node)
        if file_id in summary.file_ids:  # the same input twice in one run: make the first one visible
            writer.flush()
        summary.file_ids.add(file_id)
        known = store.offsets(file_id).unique()
        summary.files += 1
        summary.sources[path] = c.name
        chunks = _whole(stream) if c.whole_file else read_lines(stream)
        _ingest_records(records(_counted(chunks, summary, progress), c) if not c.whole_file else chunks,
                        c, ctx, file_id, known, writer, summary)
        if c.whole_file and path != "-":
            summary.bytes += Path(path).stat().st_size
            if progress:
                progress(Path(path).stat().st_size)
    return summary


def _ingest_records(chunks: Iterator[pl.DataFrame], c: Collector, ctx: Context, file_id: str, known: pl.Series,
                    writer: SegmentWriter, summary: Summary) -> None:
    """Parse chunks two at a time on worker threads (polars releases the GIL), store them in order.

    A kernel log whose boot time is still unknown goes one chunk at a time, so that a boot time
    learned from one chunk dates the next.
    """
    threads = 1 if c.source == "kernel" and ctx.boot_time is None else PARSE_THREADS
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="observe-parse") as pool:
        window: deque[Future] = deque()
        for recs in chunks:
            window.append(pool.submit(_parse_chunk, recs, c, ctx, file_id))
            if len(window) >= threads:
                ctx = _store_chunk(window.popleft().result(), c, ctx, known, writer, summary)
        while window:
            ctx = _store_chunk(window.popleft().result(), c, ctx, known, writer, summary)


def _parse_chunk(recs: pl.DataFrame, c: Collector, ctx: Context, file_id: str) -> tuple[pl.DataFrame, int]:
    blank = recs.get_column("raw").str.strip_chars() == ""
    recs = recs.filter(~blank)
    out = finalize(c.parse(recs, ctx), c, ctx, file_id) if recs.height else None
    return out, int(blank.sum())


def _store_chunk(parsed: tuple[pl.DataFrame | None, int], c: Collector, ctx: Context, known: pl.Series,
                 writer: SegmentWriter, summary: Summary) -> Context:
    out, blank = parsed
    summary.blank += blank
    if out is None:
        return ctx
    summary.records += out.height
    summary.unparsed += int((out.get_column("kind") == "unparsed").sum())
    summary.kinds.update(dict(out.get_column("kind").value_counts().iter_rows()))
    if known.len():
        fresh = out.join(known.to_frame(), on="offset", how="anti")
        summary.duplicates += out.height - fresh.height
        out = fresh
    writer.add(out)
    summary.stored += out.height
    learn_boot_times(out, summary.boot_times)
    if ctx.boot_time is None and c.source == "kernel":  # later records of this file use it too
        mine: dict[str, datetime] = {}
        learn_boot_times(out, mine)
        if mine:
            ctx = replace(ctx, boot_time=mine.get(ctx.node or "") or next(iter(mine.values())))
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


def _boot_relative(path: str, source: str) -> bool:
    """True for kernel logs: ingested last, once other files have told the nodes' boot times."""
    if path == "-":
        return False
    if source != "auto":
        return source == "kernel"
    try:
        sample = pl.Series(peek_head(path).decode("utf-8", "replace").splitlines()[:200], dtype=pl.String)
    except OSError:
        return False
    best, score = registry.detect(sample)
    framed = registry.get("syslog").score(sample)
    return best is not None and best.name == "kernel" and score >= DETECT_MIN_SCORE and framed < 0.5


def _counted(chunks: Iterator[pl.DataFrame], summary: Summary,
             progress: Callable[[int], None] | None) -> Iterator[pl.DataFrame]:
    for chunk in chunks:
        n = int(chunk.get_column("raw").str.len_bytes().sum()) + chunk.height
        summary.bytes += n
        if progress:
            progress(n)
        yield chunk


def ingest(paths: list[str], store: Store, progress: Callable[[int], None] | None = None, **opts) -> Summary:
    """Ingest every file in ``paths`` (see :func:`ingest_file` for ``opts``).

    An input that cannot be ingested is recorded in ``summary.failed`` and the others go on.
    """
    summary = Summary()
    start = time.perf_counter()
    with store.writer() as writer:
        for path in sorted(paths, key=lambda p: _boot_relative(p, opts.get("source", "auto"))):
            try:
                ingest_file(path, store, summary=summary, progress=progress, writer=writer, **opts)
            except InputError as exc:
                summary.failed.append(str(exc))
    summary.seconds = time.perf_counter() - start
    return summary
