"""The central exporter's state: what the whole store holds, kept up to date by reading only the
segments the table's commits added as new data since the last refresh. A compaction's commit adds
no new data (its outputs replace segments already counted), so it is not counted again; if the log
no longer holds a commit the exporter has not read (it was down past the log's retention) or a
segment went before it was read, it counts the whole store again and says so in
``observe_exporter_rescans_total``.

Counters count events since the exporter started reading the store (all of it at start-up), so
they are Prometheus counters: a restart is a reset, which ``rate`` and ``increase`` handle.

Node names come from log lines that users of the nodes write, so a job printing 20,000 made-up
host names must not make 20,000 series: per-node metrics label only the nodes Slurm knows (any
valid node name while Slurm cannot be asked), at most ``max_series`` series per metric, and fold
the rest into node="other" (``observe_exporter_series_folded`` says how many). Every other label
takes values from a closed set: sources and kinds the collectors and rules define, syslog
severities, Xid codes and actions of the catalog (xids.py), ledger decisions, check names.

Users also write lines that look like the kernel's or Slurm's (``logger -t kernel``), so what alerts
read comes from trusted routes only (:mod:`observe.provenance`): the Xid series with an action, drain
decisions, health results and requeues. Events of every route are counted as events.
"""
from __future__ import annotations

import math
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from observe import provenance
from observe.exporter import MAX_SERIES
from observe.exporter.xids import XidCounter
from observe.health import slurm
from observe.health.drain import KINDS as DRAIN_KINDS
from observe.job_states import BAD_ENDS, FAULT_ENDS
from observe.schema import FIELDS, POLARS_SCHEMA, SEVERITIES
from observe.store import Store
from queries import jobs
from queries.causes import CATEGORIES, load_causes
from queries.engine import Engine
from queries.explain import ExplainError, explain
from queries.incidents import LINGER, incidents

PROBLEMS = SEVERITIES[:5]  # emerg .. warning: per-node counts only for these (bounded cardinality)
PLAIN_KINDS = ("log", "unparsed")  # never counted per node
WINDOW = timedelta(hours=2)  # fault events kept in memory for open incidents
REQUEUE_KINDS = ("job_requeue", "job_requeue_skipped")  # what the epilog decided about a failed job
READ_FILES = 256  # segments read at once (bounds memory at start-up)
SETTLE = timedelta(minutes=2)
EXPLAIN_BUDGET_S = 5.0  # per refresh; the rest wait for the next one
EXPLAIN_HISTORY = timedelta(hours=1)  # when counting starts, failures this recent are explained too
COLUMNS = [f for f in FIELDS if f not in ("raw",)]  # what the special rows keep (no raw text)
OTHER = "other"  # the node label of what was folded
NODES_TTL_S = 300.0  # how often Slurm's node list is read again


def slurm_nodes() -> set[str] | None:
    """The nodes Slurm knows; None when it cannot be asked (no scontrol here, slurmctld down)."""
    try:
        return {n.name for n in slurm.nodes()}
    except slurm.SlurmError:
        return None


@dataclass(frozen=True)
class Segment:
    """What the exporter knows of one live segment file."""

    bytes: int
    rows: int
    mtime: float


class StoreMetrics:
    """Counts over a store, refreshed incrementally by :meth:`refresh`, rendered by :meth:`collect`.

    Over 200 lines: the counts carried from refresh to refresh (what each partition held when last
    listed, the series, the recent faults and job ends) are one state that reading and rendering share;
    the Xid counter's own memory is in xids.py, what needs no state is in the module's functions."""

    def __init__(self, store: Store, clock=time.time, max_series: int = MAX_SERIES,
                 known_nodes: Callable[[], set[str] | None] = slurm_nodes, engine: Engine = Engine()):
        self.store = store
        self.engine = engine  # what reads the segments (on Ray: the whole store's count at start-up)
        self.clock = clock
        self.max_series = max_series
        self.known_nodes = known_nodes
        self.known: set[str] | None = None  # Slurm's nodes when last asked successfully
        self.known_at = -math.inf
        self.fault_kinds = load_causes().kinds()
        # kinds read whatever their age; fault kinds only within WINDOW (for open incidents)
        self.always = [*DRAIN_KINDS, *jobs.RUN_KINDS, *REQUEUE_KINDS, "gpu_xid", "health_check"]
        self.rescans = 0
        self.segments_read = 0
        self.dirty = False
        self._reset()

    def _reset(self) -> None:
        self.version = -1  # the table's version read up to (-1: none yet)
        self.files: dict[Path, Segment] = {}  # the live segments
        self.events: dict[tuple, int] = defaultdict(int)  # (source, kind, severity)
        self.node_events: dict[tuple, int] = defaultdict(int)  # (node, kind, severity)
        self.node_last: dict[str, float] = {}
        self.newest: dict[str, float] = {}  # source -> newest event time
        self.written: dict[str, float] = {}  # source -> when an ingest (not a compaction) last wrote a segment
        self.xids = XidCounter()  # (node, code, action): each record once, whichever routes brought it
        self.decisions: dict[tuple, int] = defaultdict(int)  # (node, decision)
        self.last: dict[str, dict[tuple, float]] = {"decision": {}}  # newest event time of each series
        self.drained: dict[str, tuple[datetime, bool]] = {}
        self.health: dict[tuple, int] = defaultdict(int)  # (check, status)
        self.requeues: dict[tuple, int] = defaultdict(int)  # (kind,)
        self.failures: dict[tuple, int] = defaultdict(int)  # (job state,)
        self.ends = pl.DataFrame(schema={"job_id": pl.String, "at": pl.Datetime("us", "UTC")})
        self.faults = pl.DataFrame(schema={c: POLARS_SCHEMA[c] for c in COLUMNS})
        self.open: dict[str, tuple[int, int]] = {}  # category -> (open incidents, nodes in them)
        self.causes: dict[tuple, int] = defaultdict(int)  # (category,): failures explained since the count began
        self.pending: list[tuple[datetime, str]] = []  # (end, job id) of failed runs to explain
        self.explain_since = datetime.fromtimestamp(self.clock(), timezone.utc) - EXPLAIN_HISTORY

    # -- reading --------------------------------------------------------------------------------
    def refresh(self) -> int:
        """Read what is new in the store; returns the segments read. After a failure (a file gone
        mid-read) the next refresh counts the whole store again: nothing is half counted."""
        if time.monotonic() - self.known_at >= NODES_TTL_S:
            self.known = self.known_nodes() or self.known  # Slurm not answering: the last list it gave
            self.known_at = time.monotonic()
        if self.dirty:
            self.rescans += 1
            self._reset()
        self.dirty = True
        try:
            read = self._refresh()
        except _Missed:
            self.rescans += 1
            self._reset()
            read = self._refresh()
        self.dirty = False
        self._incidents()
        self._explain()
        self.segments_read += read
        return read

    def _refresh(self) -> int:
        version, live = self.store.table.snapshot()
        paths = [self.store.events / rel for rel in live]
        if self.version < 0:
            new = paths  # everything is new at the start
        else:
            added = self.store.table.added(self.version, version)
            if added is None:
                raise _Missed(f"{self.store.events}: the log no longer holds the commits after version {self.version}")
            new = [self.store.events / rel for rel in added]
            if not all(self.store.has_file(p) for p in new):  # added and vacuumed away while the exporter was down
                raise _Missed(f"{self.store.events}: a segment went before the exporter read it")
        current = set(paths)
        for gone in set(self.files) - current:  # compacted or expired
            del self.files[gone]
        if current - set(self.files):
            committed = {self.store.events / rel: Segment(size, rows, mtime / 1000)
                         for rel, size, rows, mtime in self.store.table.files()}
        for path in paths:
            if path not in self.files and path in committed:  # else a commit since the snapshot removed it
                seg = self.files[path] = committed[path]
                if not path.name.startswith("c-"):
                    source = _source(path)
                    self.written[source] = max(seg.mtime, self.written.get(source, 0.0))
        cutoff = datetime.fromtimestamp(self.clock(), timezone.utc) - WINDOW
        engine = self.engine if len(new) > READ_FILES else Engine()  # a refresh's few new segments: here
        for groups, special in engine.map_files(self.store, new, read_counts, cutoff, self.always, self.fault_kinds,
                                                share=READ_FILES):
            self._count(groups, special, cutoff)
        self.version = version
        return len(new)

    def _count(self, groups: pl.DataFrame, special: pl.DataFrame, cutoff: datetime) -> None:
        _add(self.events, groups.group_by("source", "kind", "severity").agg(pl.col("n").sum()))
        problems = groups.filter(pl.col("node").is_not_null(), pl.col("severity").is_in(PROBLEMS),
                                 ~pl.col("kind").is_in(PLAIN_KINDS))
        _add(self.node_events, problems.group_by("node", "kind", "severity").agg(pl.col("n").sum()))
        for node, last in _latest(groups.filter(pl.col("node").is_not_null()), "node"):
            self.node_last[node] = max(last, self.node_last.get(node, 0.0))
        for source, last in _latest(groups, "source"):
            self.newest[source] = max(last, self.newest.get(source, 0.0))
        self._special(special, cutoff)

    def _special(self, rows: pl.DataFrame, cutoff: datetime) -> None:
        attr = pl.col("attrs").str.json_path_match
        self.xids.add(rows.filter(pl.col("kind") == "gpu_xid", pl.col("node").is_not_null()))
        own = rows.filter(provenance.trusted())  # observe's own records, never a user's look-alike
        timed = [pl.len(), pl.col("ts").max().alias("newest")]
        ledger = own.filter(pl.col("kind").is_in(DRAIN_KINDS), (attr("$.dry_run") != "true").fill_null(True),
                             pl.col("node").is_not_null())
        decisions = ledger.group_by("node", "kind").agg(timed)
        _add(self.decisions, decisions.drop("newest"))
        _newest(self.last["decision"], decisions.drop("len"))
        for node, ts, kind in ledger.filter(pl.col("kind").is_in(["node_drain", "node_resume"])).sort("ts").select(
                "node", "ts", "kind").iter_rows():
            if node not in self.drained or ts >= self.drained[node][0]:
                self.drained[node] = (ts, kind == "node_drain")
        checks = own.filter(pl.col("kind") == "health_check")
        _add(self.health, checks.group_by(attr("$.check").alias("check"), attr("$.status").alias("status")).len())
        _add(self.requeues, own.filter(pl.col("kind").is_in(REQUEUE_KINDS)).group_by("kind").len())
        self._job_ends(rows)
        fresh = rows.filter(pl.col("kind").is_in(self.fault_kinds), pl.col("ts") >= cutoff)
        self.faults = pl.concat([self.faults.filter(pl.col("ts") >= cutoff), fresh.select(self.faults.columns)])

    def _job_ends(self, rows: pl.DataFrame) -> None:
        """Count failed job ends once, though slurmctld and the job record both report them, maybe in
        different refreshes."""
        ended = jobs.ends(rows.lazy()).select("job_id", "at", "state").collect().sort("at")
        if ended.is_empty():
            return
        seen = self.ends.sort("at").with_columns(pl.col("at").alias("_seen"))
        fresh = (ended.join_asof(seen, on="at", by="job_id", strategy="nearest", tolerance=jobs.SAME_MOMENT,
                                 check_sortedness=False)
                 .filter(pl.col("_seen").is_null()))
        _add(self.failures, fresh.filter(pl.col("state").is_in(BAD_ENDS)).group_by("state").len())
        due = fresh.filter(pl.col("state").is_in(FAULT_ENDS),  # counted once their logs had time to arrive
                           pl.col("at") >= self.explain_since)
        self.pending += due.select("at", "job_id").iter_rows()
        keep = ended.get_column("at").max() - timedelta(days=1)
        self.ends = pl.concat([self.ends, fresh.select("job_id", "at")]).filter(pl.col("at") >= keep)

    def _explain(self) -> None:
        """Count the cause category of failed runs whose logs have settled (explain's verdict;
        ``unexplained`` without one), within EXPLAIN_BUDGET_S; the rest wait."""
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        deadline = time.monotonic() + EXPLAIN_BUDGET_S
        self.pending.sort()
        while self.pending and self.pending[0][0] + SETTLE <= now and time.monotonic() < deadline:
            at, job_id = self.pending.pop(0)
            try:
                root = explain(self.store, job_id, at=at).root_cause
            except ExplainError:
                root = None
            self.causes[(root["category"] if root else "unexplained",)] += 1

    def _incidents(self) -> None:
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        self.faults = self.faults.filter(pl.col("ts") >= now - WINDOW)
        found = incidents(self.faults.with_columns(pl.lit(None, pl.String).alias("raw")).lazy(), trusted_only=True)
        current = found.filter(pl.col("end") >= now - LINGER)
        self.open = {r["category"]: (r["len"], r["nodes"]) for r in
                     current.group_by("category").agg(pl.len(), pl.col("nodes").sum()).iter_rows(named=True)}

    # -- rendering ------------------------------------------------------------------------------
    def _fold(self, values: dict[tuple, float],
              combine: Callable[[float, float], float]) -> tuple[dict[tuple, float], int]:
        """``values`` (keyed by node first): the series of each node that may have a label of its own
        while they fit in ``max_series``, first seen first (which nodes have one stays stable as nodes
        come), every other series merged by ``combine`` into node OTHER; and how many were merged."""
        by_node: dict[str, list[tuple]] = defaultdict(list)
        for key in values:
            by_node[key[0]].append(key)
        kept: dict[tuple, float] = {}
        room, folded = self.max_series, 0
        for node, keys in by_node.items():
            if len(keys) <= room and self._nameable(node):
                room -= len(keys)
                kept.update((k, values[k]) for k in keys)
                continue
            folded += len(keys)
            for k in keys:
                other = (OTHER, *k[1:])
                kept[other] = combine(kept[other], values[k]) if other in kept else values[k]
        return kept, folded

    def _nameable(self, node: str) -> bool:
        """A node Slurm knows; while Slurm cannot be asked, any valid node name (the cap still holds)."""
        return node in self.known if self.known is not None else bool(slurm.NODE_NAME.match(node))

    def collect(self) -> Iterator[Metric]:
        """The metric families (prometheus_client's collector protocol)."""
        folded: dict[tuple, int] = {}

        def per_node(cls, name: str, doc: str, labels: tuple[str, ...], values: dict) -> Metric:
            """A family labelled by node first, folded (counters summed, gauges their largest)."""
            kept, folded[(name,)] = self._fold(values, operator.add if cls is CounterMetricFamily else max)
            return family(cls, name, doc, labels, kept)

        yield family(CounterMetricFamily, "observe_events", "Events in the store, by source, kind and severity.",
                      ("source", "kind", "severity"), self.events)
        yield per_node(CounterMetricFamily, "observe_node_events",
                        "Events of severity warning or worse per node and kind (log and unparsed lines left out).",
                        ("node", "kind", "severity"), self.node_events)
        yield per_node(CounterMetricFamily, "observe_gpu_xid",
                        "GPU Xid events per node and code from trusted routes (the kernel's own log); action is the "
                        "Xid catalog's (drain_node, reset_gpu, ...); codes outside the catalog are 'other'.",
                        ("node", "code", "action"), self.xids.counts)
        yield per_node(GaugeMetricFamily, "observe_gpu_xid_last_timestamp_seconds",
                        "Time of the newest Xid of each node, code and action (alerts: a fatal one in the last minutes).",
                        ("node", "code", "action"), self.xids.newest)
        yield per_node(CounterMetricFamily, "observe_gpu_xid_untrusted",
                        "Xid lines per node and code that came by a route users can write (a syslog file, job output, "
                        "a user's journal entries): evidence, or a forgery, never a fault; no action label, no alert.",
                        ("node", "code"), self.xids.untrusted)
        yield per_node(CounterMetricFamily, "observe_drain_decisions",
                        "Drain-ledger decisions per node: node_drain, node_drain_refused, node_resume, "
                        "node_resume_refused, drain_budget_exhausted (dry runs left out).",
                        ("node", "decision"), self.decisions)
        yield per_node(GaugeMetricFamily, "observe_drain_decision_last_timestamp_seconds",
                        "Time of the newest drain-ledger decision of each kind per node.",
                        ("node", "decision"), self.last["decision"])
        yield per_node(GaugeMetricFamily, "observe_node_drained",
                        "1 while observe's ledger says the node is drained (its last drain not yet followed by a "
                        f"resume); for node {OTHER!r}, while one of them is.",
                        ("node",), {(n,): int(d) for n, (_, d) in self.drained.items()})
        tripped, reset = (max((t for (_, d), t in self.last["decision"].items() if d == mark), default=0.0)
                          for mark in ("drain_budget_exhausted", "drain_breaker_reset"))
        yield family(GaugeMetricFamily, "observe_drain_breaker_open",
                      "1 while the drain breaker is open (a budget exhausted since the last `observe health breaker "
                      "--reset`): observe drains nothing.", (), {(): int(tripped > reset)})
        yield family(CounterMetricFamily, "observe_health_checks", "Health-check results recorded, by check and status.",
                      ("check", "status"), self.health)
        yield family(CounterMetricFamily, "observe_job_requeues",
                      "Failed jobs observe requeued (job_requeue) or declined to (job_requeue_skipped).",
                      ("outcome",), {(k.removeprefix("job_"),): self.requeues.get((k,), 0) for k in REQUEUE_KINDS})
        yield family(CounterMetricFamily, "observe_job_failures",
                      "Job runs that ended other than COMPLETED, by Slurm state (one per run, whichever sources saw it).",
                      ("state",), {(s,): self.failures.get((s,), 0) for s in BAD_ENDS})
        yield family(CounterMetricFamily, "observe_job_failure_causes",
                      "Failed runs (FAILED, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, TIMEOUT, requeued) by the category of "
                      "explain's root cause, counted once their logs settled; since the exporter started.",
                      ("category",), {(c,): self.causes.get((c,), 0) for c in (*CATEGORIES, "unexplained")})
        yield family(GaugeMetricFamily, "observe_incidents_open",
                      f"Incidents (faults of one category across nodes) with an event in the last {LINGER.seconds // 60} minutes.",
                      ("category",), {(c,): self.open.get(c, (0, 0))[0] for c in CATEGORIES})
        yield family(GaugeMetricFamily, "observe_incident_nodes",
                      "Nodes hit by the open incidents of a category (the blast radius).",
                      ("category",), {(c,): self.open.get(c, (0, 0))[1] for c in CATEGORIES})
        yield per_node(GaugeMetricFamily, "observe_node_last_event_timestamp_seconds",
                        "Time of the newest event from each node.", ("node",), {(n,): t for n, t in self.node_last.items()})
        per_source: dict[str, list[Segment]] = defaultdict(list)
        for path, seg in self.files.items():
            per_source[_source(path)].append(seg)
        yield family(GaugeMetricFamily, "observe_store_bytes", "Bytes of live segment files per source.",
                      ("source",), {(s,): sum(x.bytes for x in v) for s, v in per_source.items()})
        yield family(GaugeMetricFamily, "observe_store_segments", "Live segment files per source.",
                      ("source",), {(s,): len(v) for s, v in per_source.items()})
        yield family(GaugeMetricFamily, "observe_store_rows", "Rows in live segment files per source.",
                      ("source",), {(s,): sum(x.rows for x in v) for s, v in per_source.items()})
        yield family(GaugeMetricFamily, "observe_store_last_write_timestamp_seconds",
                      "When an ingest or a collector last wrote a segment of the source (compactions left out).",
                      ("source",), {(s,): t for s, t in self.written.items()})
        yield family(GaugeMetricFamily, "observe_store_newest_event_timestamp_seconds",
                      "Time of the newest event of each source.", ("source",), {(s,): t for s, t in self.newest.items()})
        yield family(GaugeMetricFamily, "observe_store_ingest_lag_seconds",
                      "How much older than the source's last write its newest event is: how far behind the "
                      "logs the store was when data last arrived (a backfill of old logs shows here too).",
                      ("source",), {(s,): max(0.0, t - self.newest[s]) for s, t in self.written.items() if s in self.newest})
        yield family(CounterMetricFamily, "observe_exporter_segments_read", "Segment files read since start.",
                      (), {(): self.segments_read})
        yield family(CounterMetricFamily, "observe_exporter_rescans",
                      "Times the whole store was counted again (a compaction replaced segments never read).",
                      (), {(): self.rescans})
        yield family(GaugeMetricFamily, "observe_exporter_series_folded",
                      f"Series of each per-node metric shown as node {OTHER!r}: nodes Slurm does not know (any valid "
                      "node name while it cannot be asked) and nodes past the --max-series cap.",
                      ("metric",), folded)


def read_counts(store: Store, files: list[Path], cutoff: datetime, always: list[str],
                fault_kinds: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Some segments' events counted per source, node, kind and severity (with the newest time), and
    the rows kept whole (``always`` kinds; ``fault_kinds`` from ``cutoff``): what adds up across shares."""
    lf = store.scan_files(files)
    groups = (lf.group_by("source", "node", "kind", "severity")
              .agg(pl.len().alias("n"), pl.col("ts").max().alias("last"))
              .collect(engine="streaming"))
    special = (lf.filter(pl.col("kind").is_in(always) | (pl.col("kind").is_in(fault_kinds) & (pl.col("ts") >= cutoff)))
               .select(COLUMNS).collect(engine="streaming"))
    return groups, special


class _Missed(Exception):
    """The exporter cannot tell what changed: count the store again."""


def family(cls, name: str, doc: str, labels: tuple[str, ...], values: dict) -> Metric:
    fam = cls(name, doc, labels=list(labels))
    for key, value in values.items():
        fam.add_metric(["" if k is None else str(k) for k in key], value)
    return fam


def _add(into: dict, df: pl.DataFrame) -> None:
    """Add a grouped frame's last column to ``into``, keyed by a tuple of the other columns."""
    for *key, n in df.iter_rows():
        into[tuple(key)] += n


def _newest(into: dict, df: pl.DataFrame) -> None:
    """Keep in ``into`` the newest time (the last column) of each key (the other columns)."""
    for *key, ts in df.iter_rows():
        if ts is not None:
            into[tuple(key)] = max(ts.timestamp(), into.get(tuple(key), 0.0))


def _latest(groups: pl.DataFrame, by: str) -> list[tuple[str, float]]:
    per = groups.group_by(by).agg(pl.col("last").max()).filter(pl.col("last").is_not_null())
    return list(zip(per.get_column(by).to_list(), (per.get_column("last").dt.epoch("us") / 1e6).to_list()))


def _source(segment: Path) -> str:
    return segment.parent.parent.name.removeprefix("source=")

