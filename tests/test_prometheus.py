"""End to end with a real Prometheus (Debian's package): it scrapes a central exporter over a demo
store and a node exporter over a real collector's spool, evaluates dashboards/alerts.yaml, and
answers every PromQL expression of every dashboard panel and alert rule with at least one series.

Events written while it runs (a fatal Xid, a user's forged one, a spent drain budget, a failed job)
reach Prometheus through the exporter's incremental refresh, as in production.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from observe.health.drain import Decision, ledger
from observe.health.result import Result, Status
from observe.health.runner import as_events
from observe.ingest import ingest_inputs
from observe.simulate import generate
from observe.store import Store
from tests.test_dashboards import DASHBOARDS, expressions
from tests.test_exporter import ALLREDUCE, BURN, kernel, slurm, stamp, xid
from tests.test_untrusted_triggers import logger_xids

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None and not os.environ.get("CI"), reason="prometheus not installed")
GRAFANA_VARS = {"$__range": "1h", "$__rate_interval": "15s", "$node": ".*"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def until(what: str, check, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture
def demo_store(tmp_path) -> tuple[Store, Path]:
    """A demo cluster whose logs end about an hour ago, a drained node, gpu001's health results, and
    a collector spool (a real run over gpu001's syslog) whose collector stopped an hour ago."""
    start = (datetime.now(timezone.utc) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    manifest = generate(tmp_path / "logs", nodes=4, hours=2, seed=3, start=start)
    store = Store(tmp_path / "store")
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], store)
    store.write(ledger([Decision("node_drain", "gpu002", "xid_history", "drained: fatal Xid 79")], "1"))
    store.write(as_events([Result("gpu_burn", Status.PASS, "ok", BURN, 30.5),
                           Result("allreduce", Status.PASS, "ok", ALLREDUCE, 12.0),
                           Result("nvml", Status.FAIL, "row remap pending", {}, 0.2, "reset")], "gpu001", "1"))
    spool = tmp_path / "spool"
    (tmp_path / "collector.toml").write_text(
        f'node = "gpu001"\nspool = "{spool}"\nstore = "{tmp_path / "shipped"}"\n'
        f'[[input]]\npath = "{tmp_path / "logs" / "nodes" / "gpu001" / "syslog"}"\nsource = "syslog"\n')
    subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(tmp_path / "collector.toml"), "--once"],
                   check=True, capture_output=True)
    stats = json.loads((spool / "stats.json").read_text())
    (spool / "stats.json").write_text(json.dumps({**stats, "updated": stats["updated"] - 3600}))
    return store, spool


def test_every_dashboard_and_alert_query_returns_series(tmp_path, demo_store):
    store, spool = demo_store
    central, node, prom = free_port(), free_port(), free_port()
    cli = [sys.executable, "-m", "observe.cli", "exporter"]
    procs = [subprocess.Popen([*cli, "central", "--store", str(store.root), "--listen", f"127.0.0.1:{central}",
                               "--interval", "1s"], stderr=subprocess.PIPE),
             subprocess.Popen([*cli, "node", "--spool", str(spool), "--store", str(store.root), "--node", "gpu001",
                               "--listen", f"127.0.0.1:{node}", "--interval", "1s"], stderr=subprocess.PIPE)]
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{DASHBOARDS / 'alerts.yaml'}"]
scrape_configs:
  - job_name: observe-central
    static_configs: [{{targets: ['127.0.0.1:{central}']}}]
  - job_name: observe-node
    static_configs: [{{targets: ['127.0.0.1:{node}']}}]
""")
    subprocess.run(["promtool", "check", "config", str(config)], check=True, capture_output=True)
    log = open(tmp_path / "prometheus.log", "w")
    procs.append(subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{prom}", "--log.level=warn"],
                                  stdout=log, stderr=subprocess.STDOUT))
    try:
        until("both exporters up", lambda: len([r for r in query(prom, "up == 1")]) == 2, 90)
        # live events, in two steps so that increase() sees the Xid counter go up
        kernel(store, "gpu003", xid(79), booted_s=1001)
        logger_xids(store, [79], node="gpu001")  # a user's `logger -t kernel` in gpu001's /var/log/syslog
        until("gpu003's Xid scraped", lambda: query(prom, 'observe_gpu_xid_total{node="gpu003"}'))
        until("gpu001's forged Xid scraped", lambda: query(prom, 'observe_gpu_xid_untrusted_total{node="gpu001"}'))
        kernel(store, "gpu003", xid(79), booted_s=1000.5)
        store.write(ledger([Decision("node_drain_refused", "gpu004", "xid_history", "budget"),
                            Decision("drain_budget_exhausted", "gpu004", "xid_history", "1 of 1 drains used")], "1"))
        slurm(store, [f"[{stamp(5)}.000] _job_complete: JobId=990001 WTERMSIG 9"])
        until("the second Xid scraped", lambda: [r for r in query(prom, 'observe_gpu_xid_total{node="gpu003"}')
                                                 if r["value"][1] == "2"])
        empty = []
        for where, expr in expressions():
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            try:
                until(where, lambda: query(prom, expr), timeout_s=20)
            except AssertionError:
                empty.append(f"{where}: {expr}")
        assert not empty, "queries without a series:\n" + "\n".join(empty)
        # every alert's condition holds in Prometheus's own rule evaluation (pending until its `for`)
        def alert_rules() -> list[dict] | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{prom}/api/v1/rules?type=alert", timeout=10) as r:
                rules = json.load(r)["data"]["groups"][0]["rules"]
            return rules if all(rule["state"] in ("pending", "firing") for rule in rules) else None

        def settled() -> list[dict] | None:  # kernel's and slurm's live lines end their lag once a rule evaluation saw them
            rules = alert_rules()
            lagging = {a["labels"]["source"] for r in rules or () if r["name"] == "ObserveIngestLag" for a in r["alerts"]}
            return rules if lagging == {"gpu", "nccl", "syslog"} else None

        try:
            rules = until("every alert pending or firing, ingest lag only where no line is live", settled, timeout_s=30)
        except AssertionError as exc:
            lags = {r["metric"]["source"]: r["value"][1] for r in query(prom, "observe_store_ingest_lag_seconds")}
            raise AssertionError(f"{exc}; ingest lag by source: {lags}") from None
        assert {rule["name"] for rule in rules} == {"ObserveFatalXid", "ObserveNodeDrained", "ObserveDrainBudgetExhausted",
                                                     "ObserveCollectorSilent", "ObserveIngestLag", "ObserveDrainBreakerOpen"}
        alerts = {rule["name"]: [a["labels"] for a in rule["alerts"]] for rule in rules}
        assert [(a["node"], a["code"]) for a in alerts["ObserveFatalXid"]] == [("gpu003", "79")]  # not gpu001's forgery
        assert [a["node"] for a in alerts["ObserveDrainBudgetExhausted"]] == ["gpu004"]
        assert [a["node"] for a in alerts["ObserveNodeDrained"]] == ["gpu002"]
        assert len(alerts["ObserveDrainBreakerOpen"]) == 1  # gpu004's exhausted budget opened it
        assert [a["node"] for a in alerts["ObserveCollectorSilent"]] == ["gpu001"]
        assert {a["source"] for a in alerts["ObserveIngestLag"]} == {"gpu", "nccl", "syslog"}  # kernel, slurm: live
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
    for p in procs[:2]:
        err = p.stderr.read().decode()
        assert "refresh failed" not in err and "Traceback" not in err, err
