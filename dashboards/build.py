"""Build observe's Grafana dashboards (``dashboards/*.json``) from the panel lists below.

    python dashboards/build.py          # rewrite the JSON files
    python dashboards/build.py --check  # exit 1 if a JSON file differs from what this builds

The JSON follows Grafana's dashboard schema (schemaVersion 41), checked against @grafana/schema's
types by tests/test_dashboards.py. Every query takes its data source from the ``datasource``
variable; ``node`` filters by node name (a label on every per-node metric, both exporter roles).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
DS = {"type": "prometheus", "uid": "${datasource}"}
BAD = 'severity=~"emerg|alert|crit|err"'
FATAL = 'action=~"drain_node|reset_gpu"'


def panel(kind: str, title: str, targets: list[tuple[str, str]], w: int = 12, h: int = 8, unit: str = "short",
          description: str = "", **options) -> dict:
    """One panel; ``targets`` are (PromQL, legend) pairs. Placed by :func:`dashboard`."""
    p = {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": 0, "y": 0},
        "targets": [{"refId": chr(65 + i), "datasource": DS, "expr": expr, "legendFormat": legend,
                     **({"instant": True, "format": "table"} if kind in ("table", "bargauge") else {})}
                    for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": options,
    }
    return p


def stat(title: str, expr: str, description: str, unit: str = "short", red_above: float = 0) -> dict:
    p = panel("stat", title, [(expr, "")], w=6, h=4, unit=unit, description=description,
              reduceOptions={"calcs": ["lastNotNull"], "fields": "", "values": False}, colorMode="background")
    p["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": [
        {"color": "green", "value": None}, {"color": "red", "value": red_above + 1e-9}]}
    return p


def variable(name: str, label: str, query: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DS, "refresh": 2, "sort": 1,
            "multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}


def dashboard(uid: str, title: str, description: str, panels: list[dict], variables: list[dict] = ()) -> dict:
    """A dashboard with ``panels`` laid out left to right, top to bottom on Grafana's 24-column grid."""
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p["id"], p["gridPos"] = i, {"h": h, "w": w, "x": x, "y": y}
        x, row_h = x + w, max(row_h, h)
    source = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "refresh": 1}
    return {
        "uid": uid, "title": title, "description": description, "tags": ["observe", "slurm", "gpu"],
        "editable": True, "graphTooltip": 1, "schemaVersion": 41, "version": 1,
        "time": {"from": "now-24h", "to": "now"}, "timepicker": {}, "timezone": "utc", "refresh": "1m",
        "annotations": {"list": []}, "links": [], "fiscalYearStartMonth": 0,
        "templating": {"list": [source, *variables]},
        "panels": panels,
    }


NODE = variable("node", "Node", "label_values(observe_node_last_event_timestamp_seconds, node)")


def cluster() -> dict:
    return dashboard("observe-cluster", "observe / Cluster overview",
                     "Faults, incidents, drains and job failures across the cluster (observe exporter central).", [
        stat("Drained by observe", "sum(observe_node_drained)", "Nodes observe drained and has not resumed."),
        stat("Open incidents", "sum(observe_incidents_open)",
             "Faults of one category across nodes with an event in the last 15 minutes (observe incidents)."),
        stat("Fatal Xids", f"sum(increase(observe_gpu_xid_total{{{FATAL}}}[$__range]))",
             "Xids NVIDIA's catalog answers with a GPU reset or a drain, in the time range."),
        stat("Job failures", "sum(increase(observe_job_failures_total[$__range]))",
             "Job runs that ended other than COMPLETED in the time range (observe explain JOB tells why)."),
        panel("timeseries", "Fault events by kind", [
            (f"sum by (kind) (rate(observe_node_events_total{{{BAD}}}[$__rate_interval]))", "{{kind}}")],
            unit="ops", description="Events of severity err or worse per second, all nodes."),
        panel("timeseries", "Open incidents by category", [
            ("observe_incidents_open > 0", "{{category}} incidents"), ("observe_incident_nodes > 0", "{{category}} nodes")],
            description="Incidents and the nodes they hit; many nodes at once points at a shared cause."),
        panel("bargauge", "Nodes with the most faults", [
            (f"topk(15, sum by (node) (increase(observe_node_events_total{{{BAD}}}[$__range])))", "{{node}}")],
            description="Events of severity err or worse per node in the time range.", displayMode="basic",
            orientation="horizontal", reduceOptions={"calcs": ["lastNotNull"], "fields": "", "values": False}),
        panel("table", "Fatal Xids by node and code", [
            (f"sum by (node, code, action) (increase(observe_gpu_xid_total{{{FATAL}}}[$__range])) > 0", "")],
            description="Drain or reset the GPU, per the Xid catalog."),
        panel("timeseries", "Events stored by severity", [
            ("sum by (severity) (rate(observe_events_total[$__rate_interval]))", "{{severity}}")], unit="ops"),
        panel("timeseries", "Drain decisions", [
            ("sum by (decision) (increase(observe_drain_decisions_total[$__rate_interval]))", "{{decision}}")],
            description="The drain ledger: drains, refusals (a person's reason, the budget), resumes."),
    ])


def node_health() -> dict:
    sel = 'node=~"$node"'
    return dashboard("observe-node", "observe / Node health",
                     "Health checks, GPU throughput, fabric bandwidth and faults of the chosen nodes.", [
        panel("table", "Latest check results", [
            (f"observe_health_check_status{{{sel}}} == 1", "")],
            w=12, description="The status of each check's latest run (observe exporter node)."),
        panel("table", "Age of the latest results", [
            (f"time() - observe_health_check_last_run_timestamp_seconds{{{sel}}}", "")],
            w=12, unit="s", description="A check that stopped running is as bad as one that fails."),
        panel("timeseries", "GPU burn throughput", [
            (f"observe_health_gpu_burn_flops_per_second{{{sel}}}", "{{node}} {{device}}")],
            unit="flops", description="Matmul FLOP/s per GPU in the latest gpu_burn; a slow GPU stands out."),
        panel("timeseries", "All-reduce bus bandwidth", [
            (f"observe_health_allreduce_busbw_bytes_per_second{{{sel}}}", "{{node}} {{backend}}")],
            unit="Bps", description="Bus bandwidth at the largest size of the latest all-reduce check."),
        panel("timeseries", "Faults on the node", [
            (f"sum by (node, kind) (increase(observe_node_events_total{{{sel},{BAD}}}[$__rate_interval]))",
             "{{node}} {{kind}}")], description="Events of severity err or worse."),
        panel("timeseries", "Xids by code", [
            (f"sum by (node, code) (increase(observe_gpu_xid_total{{{sel}}}[$__rate_interval]))", "{{node}} Xid {{code}}")]),
        panel("timeseries", "Drained", [(f"observe_node_drained{{{sel}}}", "{{node}}")],
              description="1 while observe's drain holds."),
        panel("timeseries", "Last event seen", [
            (f"time() - observe_node_last_event_timestamp_seconds{{{sel}}}", "{{node}}")],
            unit="s", description="Seconds since the node's newest event in the store."),
    ], [NODE])


def job_failures() -> dict:
    return dashboard("observe-jobs", "observe / Job failures",
                     "Why jobs fail: Slurm end states, requeues, the faults behind them.", [
        stat("Job failures", "sum(increase(observe_job_failures_total[$__range]))", "Runs that did not complete."),
        stat("Node failures", 'sum(increase(observe_job_failures_total{state="NODE_FAIL"}[$__range]))',
             "Runs Slurm ended because a node failed."),
        stat("Requeued by observe", 'sum(increase(observe_job_requeues_total{outcome="requeue"}[$__range]))',
             "Failed jobs observe requeued from their checkpoint (opted in with #OBSERVE requeue)."),
        stat("Requeues declined", 'sum(increase(observe_job_requeues_total{outcome="requeue_skipped"}[$__range]))',
             "Requeues observe declined (limit reached, no checkpoint, not opted in)."),
        panel("timeseries", "Job failures by cause", [
            ("sum by (category) (increase(observe_job_failure_causes_total[$__rate_interval]))", "{{category}}")],
            description="The category of explain's root cause of each failed run (gpu, network, memory, node, "
                        "software, user), counted two minutes after the run ended."),
        panel("timeseries", "Job failures by state", [
            ("sum by (state) (increase(observe_job_failures_total[$__rate_interval]))", "{{state}}")]),
        panel("piechart", "Failures by state in the range", [
            ("sum by (state) (increase(observe_job_failures_total[$__range])) > 0", "{{state}}")],
            reduceOptions={"calcs": ["lastNotNull"], "fields": "", "values": False}, pieType="donut"),
        panel("timeseries", "NCCL and PyTorch errors", [
            (f'sum by (kind) (rate(observe_events_total{{source="nccl",{BAD}}}[$__rate_interval]))', "{{kind}}")],
            unit="ops", description="What the ranks reported: timeouts, network errors, CUDA OOM, tracebacks."),
        panel("timeseries", "Hardware and node faults", [
            (f'sum by (source, kind) (rate(observe_events_total{{source=~"kernel|gpu|syslog",{BAD}}}[$__rate_interval]))',
             "{{source}} {{kind}}")], unit="ops"),
    ])


def collectors() -> dict:
    return dashboard("observe-collectors", "observe / Collector and store health",
                     "Are the logs getting in: collectors on the nodes, the store, the exporter.", [
        panel("timeseries", "Since the collector's last cycle", [
            ('time() - observe_collector_last_cycle_timestamp_seconds{node=~"$node"}', "{{node}}")], unit="s",
            description="Above a few flush intervals the collector is stuck or dead (alert ObserveCollectorSilent)."),
        panel("timeseries", "Lines read", [
            ('sum by (node) (rate(observe_collector_lines_total{node=~"$node"}[$__rate_interval]))', "{{node}}")],
            unit="ops"),
        panel("timeseries", "Unparsed share", [
            ('sum by (node) (rate(observe_collector_unparsed_records_total{node=~"$node"}[$__rate_interval]))'
             ' / sum by (node) (rate(observe_collector_records_total{node=~"$node"}[$__rate_interval]))', "{{node}}")],
            unit="percentunit", description="Records no rule parsed (kept raw): a new log format shows here."),
        panel("timeseries", "Behind and waiting", [
            ('observe_collector_lag_bytes{node=~"$node"}', "{{node}} unread"),
            ('observe_collector_spool_bytes{node=~"$node"}', "{{node}} spooled")], unit="bytes"),
        panel("timeseries", "Ship failures and drops", [
            ('sum by (node) (increase(observe_collector_ship_failures_total{node=~"$node"}[$__rate_interval]))',
             "{{node}} ship failures"),
            ('sum by (node) (increase(observe_collector_dropped_records_total{node=~"$node"}[$__rate_interval]))',
             "{{node}} dropped records")]),
        panel("timeseries", "Ingest lag", [("observe_store_ingest_lag_seconds", "{{source}}")], unit="s",
              description="How much older than its last write a source's newest event is (alert ObserveIngestLag)."),
        panel("timeseries", "Store size", [("observe_store_bytes", "{{source}}")], unit="bytes"),
        panel("timeseries", "Events stored", [("sum by (source) (rate(observe_events_total[$__rate_interval]))",
                                               "{{source}}")], unit="ops"),
        panel("timeseries", "Exporter refresh", [("observe_exporter_refresh_duration_seconds", "{{instance}}")],
              unit="s", description="Time to read what is new in the store (scrapes send the last result)."),
    ], [NODE])


DASHBOARDS = {"cluster.json": cluster, "node-health.json": node_health, "job-failures.json": job_failures,
              "collectors.json": collectors}


def render(build) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name, build in DASHBOARDS.items():
        path, text = HERE / name, render(build)
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python dashboards/build.py): {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
