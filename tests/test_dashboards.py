"""Dashboards and alert rules, offline: the JSON is what dashboards/build.py builds, it type-checks
against Grafana's dashboard schema (@grafana/schema, with tsc), every metric a query names is one
the exporter defines, and the alert rules pass promtool's check and their unit tests."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
DASHBOARDS = ROOT / "dashboards"
GRAFANA = Path(__file__).parent / "grafana"
TSC = GRAFANA / "node_modules" / ".bin" / "tsc"
PROMTOOL = shutil.which("promtool")
CI = bool(os.environ.get("CI"))
need_tsc = pytest.mark.skipif(not TSC.exists() and not CI, reason="npm ci --prefix tests/grafana not run")
need_promtool = pytest.mark.skipif(PROMTOOL is None and not CI, reason="promtool not installed")
METRIC = re.compile(r"\bobserve_[a-z_]+\b")


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard panel target and alert rule."""
    found = [(f"{name}: {panel['title']}", t["expr"]) for name, d in dashboards().items()
             for panel in d["panels"] for t in panel["targets"]]
    rules = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())
    found += [(f"alerts.yaml: {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]
    return found


def test_json_is_what_the_builder_builds():
    proc = subprocess.run([sys.executable, str(DASHBOARDS / "build.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert set(dashboards()) == {"cluster.json", "node-health.json", "job-failures.json", "collectors.json"}


def typecheck(tmp_path: Path, dashboard: dict) -> subprocess.CompletedProcess:
    (tmp_path / "node_modules").symlink_to(GRAFANA / "node_modules")
    check = tmp_path / "check.ts"
    check.write_text((GRAFANA / "check.ts.head").read_text() + json.dumps(dashboard, indent=1) + ";\n")
    return subprocess.run([str(TSC), "--noEmit", "--strict", "--skipLibCheck", "--target", "es2020", "--module",
                           "preserve", "--moduleResolution", "bundler", str(check)], capture_output=True, text=True,
                          cwd=tmp_path)


@need_tsc
@pytest.mark.parametrize("name", ["cluster.json", "node-health.json", "job-failures.json", "collectors.json"])
def test_dashboard_matches_grafana_schema(tmp_path, name):
    proc = typecheck(tmp_path, dashboards()[name])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@need_tsc
def test_schema_check_catches_mistakes(tmp_path):
    bad = dashboards()["cluster.json"]
    bad["panels"][0]["fieldConfig"]["defaults"]["unitt"] = "s"  # unknown key
    bad["panels"][1]["gridPos"]["w"] = "12"  # wrong type
    bad["panels"][2]["fieldConfig"]["defaults"]["thresholds"]["mode"] = "absolutely"  # not an enum value
    proc = typecheck(tmp_path, bad)
    assert proc.returncode != 0
    for what in ("unitt", "not assignable to type 'number'", "absolutely"):
        assert what in proc.stdout, proc.stdout


def test_every_queried_metric_is_exported():
    """Names in queries against the names the exporter's code defines (the real Prometheus test
    runs every query; this one says which name is wrong, fast)."""
    code = "".join(p.read_text() for p in (ROOT / "observe" / "exporter").glob("*.py"))
    defined = set(re.findall(r'"(observe_[a-z_]+)"', code))
    defined |= {f"{n}_total" for n in defined}
    for where, expr in expressions():
        unknown = set(METRIC.findall(expr)) - defined
        assert not unknown, f"{where}: {sorted(unknown)} not exported"


@need_promtool
def test_alert_rules_check_and_unit_tests():
    check = subprocess.run([PROMTOOL, "check", "rules", str(DASHBOARDS / "alerts.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout
    unit = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, cwd=DASHBOARDS)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = set(re.findall(r"alertname: (\w+)", (DASHBOARDS / "alerts_test.yaml").read_text()))
    assert tested == {"ObserveFatalXid", "ObserveNodeDrained", "ObserveDrainBudgetExhausted", "ObserveCollectorSilent",
                      "ObserveIngestLag", "ObserveDrainBreakerOpen"}


@need_promtool
def test_alert_unit_tests_can_fail(tmp_path):
    """A rule that no longer fires where the unit test expects it makes promtool fail."""
    rules = (DASHBOARDS / "alerts.yaml").read_text().replace("> 300", "> 3000")
    (tmp_path / "alerts.yaml").write_text(rules)
    shutil.copy(DASHBOARDS / "alerts_test.yaml", tmp_path)
    unit = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, cwd=tmp_path)
    assert unit.returncode != 0 and "ObserveCollectorSilent" in unit.stdout + unit.stderr
