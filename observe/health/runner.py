"""Run health checks, each in its own process with a time limit, within an overall budget.

A check that crashes, hangs past its time or cannot import what it needs is UNKNOWN: an internal
error never becomes a FAIL (which could drain a node).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import polars as pl

from observe.health.checks import NAMES
from observe.health.events import health_events
from observe.health.policy import Policy
from observe.health.result import Result, Status, unknown
from observe.config import to_json

CHECKS = NAMES
SETUP_S = 15.0  # what a check needs beyond its own seconds (interpreter, torch import, spawn)


def run_checks(names: list[str], policy: Policy, budget_s: float, overrides: dict | None = None) -> list[Result]:
    """Run ``names`` in order; each gets the budget left, and a burn is shortened to fit it."""
    deadline = time.monotonic() + budget_s
    results = []
    for name in names:
        left = deadline - time.monotonic()
        opts = {**policy.checks[name], **(overrides or {}), "policy": policy.doc}
        if left < 1:
            results.append(unknown(name, f"the {budget_s:g}s budget was spent before it could run"))
            continue
        if "seconds" in opts:
            opts["seconds"] = max(1.0, min(float(opts["seconds"]), left - SETUP_S))
        started = time.monotonic()
        result = _in_child(name, opts, left)
        result.seconds = time.monotonic() - started
        if result.status is Status.FAIL:
            result.action = result.action or opts["on_fail"]  # a check may name a graver one
            result.category = result.category or opts["category"]
        results.append(result)
    return results


def _in_child(name: str, opts: dict, timeout: float) -> Result:
    proc = subprocess.Popen([sys.executable, "-m", "observe.health.worker", name], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(json.dumps(opts), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the check and anything it spawned
        proc.communicate()
        return unknown(name, f"did not finish within {timeout:.0f}s (a hung GPU or fabric is worth a look)")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return unknown(name, f"the check failed to run: {tail[:300]}")
    return Result.from_dict(json.loads(lines[-1]))


def as_events(results: list[Result], node: str, policy_version: str) -> pl.DataFrame:
    """Results as ``health_check`` events (source health) for the store."""
    return health_events([{
        "node": node, "kind": "health_check",
        "severity": {"FAIL": "err", "UNKNOWN": "warning"}.get(r.status.value, "info"),
        "message": f"{r.check} {r.status.value}: {r.summary}",
        "attrs": to_json({"check": r.check, "status": r.status.value, "action": r.action, "seconds": r.seconds,
                          "policy": policy_version, "evidence": r.evidence}),
        "file_id": f"health:{node}",
    } for r in results])
