"""The cause catalog: how much each event kind weighs as the root cause of a failed job, its
category and recommended action, and the scoring constants (``causes.toml``, then a ``causes.toml`` in
each directory of ``OBSERVE_RULES``). Used by explain, incidents and nodes."""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import polars as pl

from observe.config import rule_dirs

CAUSES = Path(__file__).with_name("causes.toml")
CATEGORIES = ("gpu", "network", "memory", "node", "software", "user", "unknown")
NODE_ACTIONS = ("drain", "watch", "none")  # what a verdict calls for on the node
XID_CATEGORY = {"application": "user", "memory": "gpu", "nvlink": "gpu", "driver": "gpu", "gpu": "gpu"}


class CauseError(ValueError):
    """A cause file is invalid; the message is one line."""


@dataclass(frozen=True)
class Cause:
    kind: str
    weight: float
    category: str
    action: str
    node: str  # one of NODE_ACTIONS
    symptom: bool = False
    lead_s: float | None = None  # how long before the onset it can cause it (default: onset_window_s)
    needs: tuple[str, ...] = ()  # kinds in the job's own output that must corroborate it
    attrs: tuple[tuple[str, str], ...] = ()  # only events whose attrs have these values
    says: str = ""  # what the line means, in the evidence ("corrected: the hardware fixed it")
    began: str | None = None  # the attr (``*_ms`` or ``*_s``) with how long a timeout waited before its line
    context: bool = False  # cannot fail a job by itself (a corrected error): evidence, never the verdict
    lag_s: float = 0.0  # how long after the fault its detector prints the line, at most (a daemon's timeout)


@dataclass(frozen=True)
class Causes:
    """The cause catalog and scoring constants (``causes.toml``, then site overrides)."""

    causes: dict[tuple[str, tuple], Cause]
    scoring: dict
    nodes: dict
    calibration: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # margin -> chance of being right

    def kinds(self) -> list[str]:
        return sorted({c.kind for c in self.causes.values()})

    @cached_property
    def table(self) -> pl.DataFrame:
        """The entries as a frame: kind, the attrs condition (``cond``, JSON or null) and the values."""
        rows = [{"kind": c.kind, "cond": json.dumps(dict(c.attrs)) if c.attrs else None, "weight": c.weight,
                 "category": c.category, "action": c.action, "node_action": c.node, "symptom": c.symptom,
                 "lead_s": c.lead_s, "needs": list(c.needs), "says": c.says, "began": c.began, "context": c.context,
                 "lag_s": c.lag_s}
                for c in self.causes.values()]
        return pl.DataFrame(rows, schema={"kind": pl.String, "cond": pl.String, "weight": pl.Float64,
                                          "category": pl.String, "action": pl.String, "node_action": pl.String,
                                          "symptom": pl.Boolean, "lead_s": pl.Float64, "needs": pl.List(pl.String),
                                          "says": pl.String, "began": pl.String, "context": pl.Boolean,
                                          "lag_s": pl.Float64})

    def annotate(self, events: pl.DataFrame) -> pl.DataFrame:
        """Events of catalogued kinds with weight, category, action, node_action, symptom, lead_s, needs, says, began,
        context and lag_s (the most specific entry wins: one whose attrs condition matches over the plain one)."""
        table = self.table
        plain = table.filter(pl.col("cond").is_null()).drop("cond")
        ev = events.join(plain, on="kind", how="inner", maintain_order="left")
        for row in table.filter(pl.col("cond").is_not_null()).iter_rows(named=True):
            match = pl.col("kind") == row["kind"]
            for key, value in json.loads(row["cond"]).items():
                match = match & (pl.col("attrs").str.json_path_match(f"$.{key}") == value)
            ev = ev.with_columns(pl.when(match).then(pl.lit(row[name], dtype=table.schema[name])).otherwise(name).alias(name)
                                 for name in plain.columns if name != "kind")
        # gpu_xid: the Xid catalog (merged into attrs at ingest) tells whose fault it is
        xid = pl.col("kind") == "gpu_xid"
        xid_cat = pl.col("attrs").str.json_path_match("$.category")
        xid_action = pl.col("attrs").str.json_path_match("$.action")
        return ev.with_columns(
            pl.when(xid).then(xid_cat.replace_strict(XID_CATEGORY, default="gpu")).otherwise("category").alias("category"),
            pl.when(xid & xid_action.is_not_null()).then(pl.format("{} (Xid catalog: {})", pl.col("action"), xid_action))
            .otherwise("action").alias("action"),
        )


def load_causes() -> Causes:
    """``queries/causes.toml`` plus any ``causes.toml`` in the directories of ``OBSERVE_RULES``."""
    extra = [d / "causes.toml" for d in rule_dirs()[1:]]
    return _load_causes(tuple(p for p in [CAUSES, *extra] if p.is_file()))


@cache
def _load_causes(paths: tuple[Path, ...]) -> Causes:
    causes: dict[tuple[str, tuple], Cause] = {}
    scoring: dict = {}
    nodes: dict = {}
    calibration = {}
    for path in paths:
        try:
            doc = tomllib.loads(path.read_text())
            scoring.update(doc.get("scoring", {}))
            nodes.update(doc.get("nodes", {}))
            calibration.update(doc.get("calibration", {}))
            for entry in doc.get("cause", []):
                cause = Cause(entry["kind"], float(entry["weight"]), entry.get("category", "unknown"),
                              entry.get("action", ""), entry["node"], bool(entry.get("symptom", False)), entry.get("lead_s"),
                              tuple(entry.get("needs", [])),
                              tuple(sorted((k, str(v)) for k, v in entry.get("attrs", {}).items())), entry.get("says", ""),
                              entry.get("began"), bool(entry.get("context", False)), float(entry.get("lag_s", 0.0)))
                if cause.category not in CATEGORIES:
                    raise ValueError(f"category {cause.category!r} not one of {', '.join(CATEGORIES)}")
                if cause.node not in NODE_ACTIONS:
                    raise ValueError(f"{cause.kind}: node {cause.node!r} not one of {', '.join(NODE_ACTIONS)}")
                causes[(cause.kind, cause.attrs)] = cause
        except KeyError as exc:
            raise CauseError(f"{path}: a [[cause]] without {exc} (every cause needs kind, weight and node)") from None
        except (tomllib.TOMLDecodeError, TypeError, ValueError) as exc:
            raise CauseError(f"{path}: {exc}") from None
    return Causes(causes, scoring, nodes, _calibration(calibration, paths[-1] if paths else CAUSES))


def _calibration(table: dict, where: Path) -> tuple[tuple[float, ...], tuple[float, ...]]:
    margin, right = table.get("margin", []), table.get("right", [])
    ok = (len(margin) == len(right) >= 2 and all(isinstance(v, (int, float)) for v in [*margin, *right])
          and all(a < b for a, b in zip(margin, margin[1:])) and all(a <= b for a, b in zip(right, right[1:]))
          and all(0 <= v <= 1 for v in right))
    if not ok:
        raise CauseError(f"{where}: [calibration] needs margin (increasing) and right (non-decreasing, 0-1) "
                         "lists of the same length, at least two points")
    return tuple(map(float, margin)), tuple(map(float, right))
