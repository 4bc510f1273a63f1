"""Planning a run: each input's format, identity and size decided once (one read of each input's head, one
store scan for what is already stored), and the steps the pipeline runs, in tasks."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from observe import collector as registry
from observe import provenance
from observe.collector import Collector
from observe.ingest.records import sample_of
from observe.ingest.summary import InputError
from observe.reader import FINGERPRINT_BYTES, READ_ERRORS, fingerprint, is_stream, log_name, read_head
from observe.store import Store, no_records

SMALL_FILE_BYTES = 16 << 20
PLAN_HEAD_BYTES = 16 << 10  # what planning reads of each input: 40 lines of most logs, and its first line
KEPT_BYTES = 256 << 20  # plain files that short are kept whole as planned, up to this much in all (read once)
JOB_FILE = re.compile(r"slurm-(\d+(?:_\d+)?(?:\+\d+)?)(?:\.\d+)?\.(?:out|err|log)$")
DETECT_MIN_SCORE = 0.3


def job_from_name(path: str) -> str | None:
    """Job id from a Slurm output file name such as ``slurm-1234.out`` or ``slurm-1234_7.out``."""
    m = JOB_FILE.search(os.path.basename(path))
    return m.group(1) if m else None


def choose(source: str, sample: list[str], path: str, route: str | None) -> Collector:
    """The collector for an input: the named one, or the best match for its first lines (a file
    users may write: job output, whatever its lines look like)."""
    if source != "auto":
        return registry.get(source)
    return _chosen(*registry.detect(sample), path, route)


def _chosen(best: Collector | None, score: float, path: str, route: str | None) -> Collector:
    if provenance.user_written(route) and (best is None or best.name not in provenance.job_output_sources()):
        return registry.get(provenance.job_output_sources()[0])
    if best is None or score < DETECT_MIN_SCORE:
        if job_from_name(path):
            return registry.get("nccl")
        raise InputError(f"{path}: cannot tell the log format from its first lines; pass --source "
                         f"({', '.join(sorted(registry.collectors()))})")
    return best


def identity(path: str, head: bytes, node: str | None, job: str | None,
              boot: datetime | None = None) -> tuple[str, str | None]:
    """An input's file id and job (the one given, else from its name); ``boot``: a kernel log's
    given boot time (not one learned from other inputs, which a later run may not learn)."""
    job = job or job_from_name(path)
    return fingerprint(head, node, job, log_name(path), boot), job


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
    mtime: float = 0.0
    text: bytes | None = field(default=None, compare=False, repr=False)  # all of it, as planning read it
    compressed: bool = False  # its size says nothing of what it holds: never batched, read as a stream


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
    # a file users may write is read as job output whatever it looks like: with one job output
    # format, nothing to tell (thousands of slurm-*.out cost no sniffing)
    only = provenance.job_output_sources()
    routed: list[tuple[str, dict]] = []
    told: list[bool] = []
    samples: list[list[str]] = []
    heads: list[bytes] = []
    texts: list[bytes | None] = []
    compressed: list[bool] = []
    stats: list[os.stat_result] = []
    kept = 0
    for path, opts in inputs:
        try:
            head, whole, packed, st = read_head(path, PLAN_HEAD_BYTES)
        except READ_ERRORS:  # the ingest says what is wrong with it
            head, whole, packed, st = b"", False, False, None
        job = opts.get("job") or job_from_name(path)
        # the route of what was read (its fstat), not of what the path named before it was opened
        route = opts.get("route") or (provenance.file_route(st, job) if st is not None and stat.S_ISREG(st.st_mode)
                                      else provenance.path_route(path, job))
        routed.append((path, {**opts, "route": route}))
        stats.append(st if st is not None else _stat((path, opts)))
        told.append(len(only) == 1 and opts.get("source", "auto") == "auto" and provenance.user_written(route))
        compressed.append(packed)
        samples.append([] if told[-1] else sample_of(head))
        heads.append(head[:FINGERPRINT_BYTES])  # only what the identity reads: thousands of heads add up
        texts.append(head if whole and kept + len(head) <= KEPT_BYTES else None)
        kept += len(head) if texts[-1] is not None else 0
    inputs = routed
    detected = iter(registry.detect_many([s for s, t in zip(samples, told) if not t]))
    chosen: list[tuple[Collector | None, dict[str, float]]] = []
    for (path, opts), known_format in zip(inputs, told):
        if known_format:
            chosen.append((registry.get(only[0]), {}))
            continue
        best, score, scores = next(detected)
        source = opts.get("source", "auto")
        try:
            chosen.append((registry.get(source) if source != "auto" else _chosen(best, score, path, opts["route"]), scores))
        except (InputError, ValueError):
            chosen.append((None, scores))
    # a format told from a sample of syslog-framed lines is a syslog daemon's file, whatever its name
    inputs = [(path, {**opts, "route": provenance.input_route(opts["route"], c.relayed_for(sample))})
              if c is not None and opts.get("source", "auto") == "auto" else (path, opts)
              for (path, opts), (c, _), sample in zip(inputs, chosen, samples)]
    ids = [identity(path, head, opts.get("node"), opts.get("job"),
                     opts.get("boot_time") if c is not None and c.source == "kernel" else None)[0] if head else None
           for (path, opts), head, (c, _) in zip(inputs, heads, chosen)]
    known = store.known_many(ids) if store is not None else {}
    return [Planned(path, opts, c.name if c else None,
                    c is not None and c.name == "kernel" and scores.get("syslog", 0.0) < 0.5,
                    st.st_size, file_id, known.get(file_id, no_records()), st.st_mtime, text, packed)
            for (path, opts), file_id, (c, scores), text, st, packed
            in zip(inputs, ids, chosen, texts, stats, compressed)]


def _stat(item: tuple[str, dict]) -> os.stat_result:
    """An input's size and modification time (zero for stdin or a file that cannot be read), where
    nothing was opened to ``fstat``."""
    try:
        return os.stat(item[0]) if item[0] != "-" else os.stat_result((0,) * 10)
    except OSError:
        return os.stat_result((0,) * 10)


def tasks(planned: list[Planned], task_bytes: float = float("inf")) -> tuple[list[Task], list[Task]]:
    """The run's tasks: the first list, then the second (kernel logs with boot-relative stamps,
    which wait for the boot times the first ones tell).

    Small files of a batchable format, time zone and route are batch steps of up to ``task_bytes``,
    whatever their nodes and last writes (each row keeps its input's node, and its stamps without a year
    are dated by its input's last write: a syslog archive of a file per node is parsed as a few units,
    not one per node); inputs that share an identity (a file and its rotated copy) end up in one task, in order, so
    that the second sees what the first stored.
    """
    groups: dict[tuple, list[Planned]] = {}
    first: list[Task] = []
    last: list[Task] = []
    for p in planned:
        c = registry.get(p.collector) if p.collector else None
        if (c is not None and c.batchable and not c.whole_file and not is_stream(p.path) and p.size < SMALL_FILE_BYTES
                and not p.compressed):
            groups.setdefault((p.collector, p.opts.get("tz", "UTC"), p.opts["route"], p.opts.get("year")), []).append(p)
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
