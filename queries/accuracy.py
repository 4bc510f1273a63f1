"""How often ``explain`` names the injected root cause: top-1 and top-3 accuracy per scenario type,
against the ground truth of :mod:`observe.demo` (used by the tests and ``bench/explain_accuracy``)."""
from __future__ import annotations

from datetime import datetime

import polars as pl

from observe.store import Store
from queries.explain import ExplainError, explain


def score(store: Store, incidents: list[dict]) -> pl.DataFrame:
    """One row per incident: type, job, whether the verdict (top 1) and the top 3 name the right
    node (any of ``nodes``) and kind, and the verdict itself."""
    rows = []
    for inc in incidents:
        right = set(inc.get("nodes") or [inc["node"]])
        try:
            result = explain(store, inc["job_id"], at=datetime.fromisoformat(inc["ts"]))
            ranked = result.candidates
        except ExplainError:
            ranked = []
        hits = [c.get("node") in right and c.get("kind") == inc["kind"] for c in ranked[:3]]
        top = ranked[0] if ranked else {}
        rows.append({"type": inc["type"], "job_id": inc["job_id"], "top1": bool(hits[:1] and hits[0]),
                     "top3": any(hits), "node": top.get("node"), "kind": top.get("kind"),
                     "expected": f"{inc['node']} {inc['kind']}"})
    return pl.DataFrame(rows, schema={"type": pl.String, "job_id": pl.String, "top1": pl.Boolean, "top3": pl.Boolean,
                                      "node": pl.String, "kind": pl.String, "expected": pl.String})


def summary(scored: pl.DataFrame) -> pl.DataFrame:
    """Per scenario type and overall: failures, top-1 and top-3 accuracy (fractions)."""
    per = (scored.group_by("type").agg(pl.len().alias("failures"), pl.col("top1").mean(), pl.col("top3").mean())
           .sort("type"))
    total = scored.select(pl.lit("all").alias("type"), pl.len().alias("failures"), pl.col("top1").mean(),
                          pl.col("top3").mean())
    return pl.concat([per, total])


def lines(table: pl.DataFrame) -> list[str]:
    """The summary as printable lines."""
    out = [f"{'scenario':22} {'failures':>8} {'top-1':>7} {'top-3':>7}"]
    out += [f"{r['type']:22} {r['failures']:8d} {r['top1']:7.1%} {r['top3']:7.1%}" for r in table.iter_rows(named=True)]
    return out
