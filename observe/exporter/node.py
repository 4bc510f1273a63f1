"""The node exporter's state: this node's collector counters (``<spool>/stats.json``) and its latest
health-check results (``health_check`` events in a store), with the burn's FLOP/s per GPU and the
all-reduce bus bandwidth from their evidence."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from observe import provenance
from observe.exporter.central import family
from observe.health.result import Status
from observe.store import Store

HEALTH_WINDOW = timedelta(days=7)  # results older than this are not this node's latest any more
# stats.json field -> (metric, help); counters count since the collector started
COUNTERS = {
    "cycles": ("observe_collector_cycles", "Read-parse-spool cycles."),
    "lines": ("observe_collector_lines", "Lines read from inputs."),
    "bytes": ("observe_collector_read_bytes", "Bytes read from inputs."),
    "records": ("observe_collector_records", "Records parsed (multi-line records are one)."),
    "unparsed": ("observe_collector_unparsed_records", "Records no rule parsed (kept raw as kind unparsed)."),
    "stored": ("observe_collector_spooled_records", "Records written to the spool."),
    "shipped_files": ("observe_collector_shipped_files", "Spool segments shipped to the central store."),
    "ship_failures": ("observe_collector_ship_failures", "Shipping attempts that failed (retried later)."),
    "dropped_files": ("observe_collector_dropped_files", "Spool segments dropped because the spool was over its limit."),
    "dropped_records": ("observe_collector_dropped_records", "Records in dropped spool segments."),
    "dropped_bytes": ("observe_collector_dropped_bytes", "Bytes of dropped spool segments."),
    "source_lost": ("observe_collector_source_lost_records", "Records a source overwrote before they were read (kmsg)."),
    "command_failures": ("observe_collector_command_failures", "Polled commands (nvidia-smi, sacct) that failed."),
}
GAUGES = {
    "lag_bytes": ("observe_collector_lag_bytes", "Bytes in followed files not read yet."),
    "spool_files": ("observe_collector_spool_files", "Segments waiting in the spool to be shipped."),
    "spool_bytes": ("observe_collector_spool_bytes", "Bytes waiting in the spool to be shipped."),
    "updated": ("observe_collector_last_cycle_timestamp_seconds", "When the collector last finished a cycle."),
}


class NodeMetrics:
    """This node's collector and health metrics, refreshed by :meth:`refresh`."""

    def __init__(self, node: str, spool: Path | None = None, store: Store | None = None):
        self.node, self.spool, self.store = node, spool, store
        self.stats: dict = {}
        self.results: list[dict] = []

    def refresh(self) -> None:
        """Read the collector's stats.json and the latest result of each health check."""
        if self.spool is not None:
            path = self.spool / "stats.json"
            try:
                self.stats = json.loads(path.read_text())
            except FileNotFoundError:
                self.stats = {}
            except ValueError as exc:
                raise ValueError(f"{path}: not JSON ({exc})") from None
        if self.store is not None:
            self.results = latest_results(self.store, self.node)

    def collect(self) -> Iterator[Metric]:
        """The metric families (prometheus_client's collector protocol); every one labelled ``node``."""
        def fam(cls, name: str, doc: str, labels: tuple[str, ...], values: dict) -> Metric:
            return family(cls, name, doc, ("node", *labels), {(self.node, *k): v for k, v in values.items()})

        for key, (name, doc) in COUNTERS.items():
            if key in self.stats:
                yield fam(CounterMetricFamily, name, doc, (), {(): self.stats[key]})
        for key, (name, doc) in GAUGES.items():
            if key in self.stats:
                yield fam(GaugeMetricFamily, name, doc, (), {(): self.stats[key]})
        if not self.results:
            return
        status = {(r["check"], s.value): int(r["status"] == s.value) for r in self.results for s in Status}
        yield fam(GaugeMetricFamily, "observe_health_check_status",
                  "1 for the status of each check's latest result (PASS, FAIL or UNKNOWN), 0 for the others.",
                  ("check", "status"), status)
        yield fam(GaugeMetricFamily, "observe_health_check_last_run_timestamp_seconds",
                  "When each check's latest result was recorded (its age: time() minus this).",
                  ("check",), {(r["check"],): r["ts"].timestamp() for r in self.results})
        yield fam(GaugeMetricFamily, "observe_health_check_duration_seconds", "How long each check's latest run took.",
                  ("check",), {(r["check"],): float(r.get("seconds") or 0) for r in self.results})
        by_check = {r["check"]: r.get("evidence") or {} for r in self.results}
        devices = by_check.get("gpu_burn", {}).get("devices") or {}
        yield fam(GaugeMetricFamily, "observe_health_gpu_burn_flops_per_second",
                  "Matmul throughput of each device in the latest gpu_burn.", ("device", "model"),
                  {(d, s.get("model", "")): float(s["tflops"]) * 1e12 for d, s in devices.items() if "tflops" in s})
        sizes = by_check.get("allreduce", {}).get("sizes") or []
        if sizes:
            yield fam(GaugeMetricFamily, "observe_health_allreduce_busbw_bytes_per_second",
                      "Bus bandwidth of the latest all-reduce check at its largest size.", ("backend",),
                      {(by_check["allreduce"].get("backend", ""),): float(sizes[-1]["busbw_gbps"]) * 1e9})


def latest_results(store: Store, node: str, window: timedelta = HEALTH_WINDOW) -> list[dict]:
    """The newest ``health_check`` result of each check on ``node`` within ``window``: check, ts,
    status, seconds, action and evidence (observe's own records: trusted routes only)."""
    since = datetime.now(timezone.utc) - window
    rows = (store.scan(sources=["health"], since=since)
            .filter(pl.col("kind") == "health_check", pl.col("node") == node, provenance.trusted())
            .select("ts", "attrs").sort("ts").collect())
    latest: dict[str, dict] = {}
    for ts, attrs in rows.iter_rows():
        doc = json.loads(attrs or "{}")
        if "check" in doc and "status" in doc:
            latest[doc["check"]] = {**doc, "ts": ts}
    return list(latest.values())
