"""How often ``explain`` names the injected root cause: top-1 and top-3 accuracy per scenario type,
drains recommended, and whether its confidence means the chance of being right (reliability by
confidence bin, expected calibration error), against the ground truth of the simulator's scenarios
(used by the tests and ``bench/explain_accuracy``)."""
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
            result = explain(store, inc["job_id"], at=datetime.fromisoformat(inc.get("run_ts") or inc["ts"]))
            ranked = result.candidates
        except ExplainError:
            ranked = []
        top = ranked[0] if ranked else {}
        root = result.root_cause if ranked else None
        if inc["kind"] is None and inc["category"] == "software":  # no node at fault: unsure, or no node blamed
            hits = [not root or root["verdict"] == "undetermined" or root.get("node_action") == "none"] * 3
        else:
            shared = bool(inc.get("switch_nodes"))  # the switch itself, no node, is right too
            hits = [(c.get("node") in right or (shared and c.get("node") is None)) and c.get("kind") == inc["kind"]
                    for c in ranked[:3]]
            if inc.get("unsure_ok") and root and root["verdict"] == "undetermined":  # no evidence could be had
                hits = [True] * 3
        rows.append({"type": inc["type"], "job_id": inc["job_id"], "top1": bool(hits[:1] and hits[0]),
                     "top3": any(hits), "node": top.get("node"), "kind": top.get("kind"),
                     "expected": f"{inc['node']} {inc['kind']}",
                     # a drain the verdict advises, or the one the trusted lines on their own call for
                     "drain": bool(root and root["verdict"] == "cause" and root.get("node_action") == "drain"
                                   or (ranked and result.node_fault)),
                     "undetermined": bool(root and root["verdict"] == "undetermined"),
                     "confidence": float(root["confidence"]) if root else 0.0})
    return pl.DataFrame(rows, schema={"type": pl.String, "job_id": pl.String, "top1": pl.Boolean, "top3": pl.Boolean,
                                      "node": pl.String, "kind": pl.String, "expected": pl.String,
                                      "drain": pl.Boolean, "undetermined": pl.Boolean, "confidence": pl.Float64})


def summary(scored: pl.DataFrame) -> pl.DataFrame:
    """Per scenario type and overall: failures, top-1 and top-3 accuracy (fractions), drains
    recommended and verdicts left undetermined."""
    aggs = [pl.len().alias("failures"), pl.col("top1").mean(), pl.col("top3").mean(), pl.col("drain").sum().alias("drains"),
            pl.col("undetermined").sum()]
    per = scored.group_by("type").agg(aggs).sort("type")
    return pl.concat([per, scored.select(pl.lit("all").alias("type"), *aggs)])


BINS = (0.5, 0.7, 0.9, 0.97)  # confidence bin edges: [0, 0.5), [0.5, 0.7), ... [0.97, 1]


def reliability(scored: pl.DataFrame) -> tuple[pl.DataFrame, float]:
    """Verdicts (not the undetermined ones: those claim nothing) by confidence bin (count, mean
    confidence, accuracy) and the expected calibration error: the count-weighted mean gap between a
    bin's accuracy and its confidence."""
    if "undetermined" in scored.columns:
        scored = scored.filter(~pl.col("undetermined"))
    labels = [f"<{BINS[0]}", *(f"{lo}-{hi}" for lo, hi in zip(BINS, BINS[1:])), f">={BINS[-1]}"]
    index = pl.sum_horizontal([(pl.col("confidence") >= edge).cast(pl.Int32) for edge in BINS])  # which bin
    table = (scored.with_columns(index.alias("_i"))
             .group_by("_i").agg(pl.len().alias("count"), pl.col("confidence").mean(), pl.col("top1").mean().alias("accuracy"))
             .sort("_i").with_columns(pl.col("_i").replace_strict(list(range(len(labels))), labels).alias("bin"))
             .select("bin", "count", "confidence", "accuracy"))
    ece = float((table["count"] * (table["accuracy"] - table["confidence"]).abs()).sum() / max(scored.height, 1))
    return table, ece


def lines(table: pl.DataFrame, scored: pl.DataFrame | None = None) -> list[str]:
    """The summary (and, given the scored verdicts, the reliability table) as printable lines."""
    out = [f"{'scenario':22} {'failures':>8} {'top-1':>7} {'top-3':>7} {'drains':>7} {'undetermined':>13}"]
    out += [f"{r['type']:22} {r['failures']:8d} {r['top1']:7.1%} {r['top3']:7.1%} {r['drains']:7d} {r['undetermined']:13d}"
            for r in table.iter_rows(named=True)]
    if scored is not None:
        bins, ece = reliability(scored)
        out += ["", f"{'confidence':22} {'count':>8} {'mean':>7} {'right':>7}"]
        out += [f"{r['bin']:22} {r['count']:8d} {r['confidence']:7.2f} {r['accuracy']:7.1%}" for r in bins.iter_rows(named=True)]
        out.append(f"expected calibration error {ece:.3f}")
    return out
