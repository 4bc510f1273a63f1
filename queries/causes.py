"""The cause catalog: how probable each event kind is as the root cause of a failed job, its
category and recommended action, the likelihood ratios of the evidence, and the scoring constants (``causes.toml``, then a ``causes.toml`` in
each directory of ``OBSERVE_RULES``). Used by explain, incidents and nodes."""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import polars as pl

from observe import rules
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
    prior: float  # the chance that an event of this kind in a failed job's window is what failed it
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
    cgroup: str | None = None  # the attr naming the cgroup of the process the event hit
    shared: str = ""  # the action when the kind shows on several nodes at once: a component they share failed


@dataclass(frozen=True)
class Causes:
    """The cause catalog, the evidence's likelihood ratios and the scoring constants (``causes.toml``,
    then site overrides)."""

    causes: dict[tuple[str, tuple], Cause]
    scoring: dict
    nodes: dict
    evidence: dict  # name -> likelihood ratio

    def kinds(self) -> list[str]:
        return sorted({c.kind for c in self.causes.values()})

    @cached_property
    def table(self) -> pl.DataFrame:
        """The entries as a frame: kind, the attrs condition (``cond``, JSON or null) and the values."""
        rows = [{"kind": c.kind, "cond": json.dumps(dict(c.attrs)) if c.attrs else None, "prior": c.prior,
                 "category": c.category, "action": c.action, "node_action": c.node, "symptom": c.symptom,
                 "lead_s": c.lead_s, "needs": list(c.needs), "says": c.says, "began": c.began, "context": c.context,
                 "lag_s": c.lag_s, "cgroup": c.cgroup, "shared": c.shared}
                for c in self.causes.values()]
        return pl.DataFrame(rows, schema={"kind": pl.String, "cond": pl.String, "prior": pl.Float64,
                                          "category": pl.String, "action": pl.String, "node_action": pl.String,
                                          "symptom": pl.Boolean, "lead_s": pl.Float64, "needs": pl.List(pl.String),
                                          "says": pl.String, "began": pl.String, "context": pl.Boolean,
                                          "lag_s": pl.Float64, "cgroup": pl.String, "shared": pl.String})

    def annotate(self, events: pl.DataFrame) -> pl.DataFrame:
        """Events of catalogued kinds with their entry (``cause_id``: a corrected and an uncorrected memory error are
        two causes of one kind), prior, category, action, node_action, symptom, lead_s, needs, says, began, context,
        lag_s, cgroup, shared and xid_action (a gpu_xid's catalog action, as its line makes it) (the most specific
        entry wins: one whose attrs condition matches over the plain one)."""
        table = self.table.with_row_index("_entry")
        ev = events.join(table.filter(pl.col("cond").is_null()).select("kind", "_entry"), on="kind", how="inner",
                         maintain_order="left")
        conds = table.filter(pl.col("cond").is_not_null())
        # each row's entry: the last whose attrs condition it meets, else its kind's plain one. Each attrs key is
        # read once, on the rows of kinds some condition is about (a flood of other lines costs no JSON parsing)
        wanted = [(row["_entry"], row["kind"], json.loads(row["cond"])) for row in conds.iter_rows(named=True)]
        keys = sorted({key for _, _, cond in wanted for key in cond})
        about = pl.when(pl.col("kind").is_in(conds.get_column("kind").unique().implode())).then(pl.col("attrs"))
        ev = ev.with_columns(about.str.json_path_match(f"$.{key}").alias(f"_attr{i}") for i, key in enumerate(keys))
        entry = pl.col("_entry")
        for index, kind, cond in wanted:
            match = pl.col("kind") == kind
            for key, value in cond.items():
                match = match & (pl.col(f"_attr{keys.index(key)}") == value)
            entry = pl.when(match.fill_null(False)).then(pl.lit(index, dtype=pl.UInt32)).otherwise(entry)
        ev = (ev.with_columns(entry.alias("_entry")).drop(f"_attr{i}" for i in range(len(keys)))
              .join(table.drop("kind", "cond"), on="_entry", how="left", maintain_order="left")
              .rename({"_entry": "cause_id"}))
        # gpu_xid: the Xid catalog (merged into attrs at ingest) tells whose fault it is
        xid = pl.col("kind") == "gpu_xid"
        xid_cat = pl.col("attrs").str.json_path_match("$.category")
        xid_action = rules.xid_action()  # a Fatal NVLink5 Xid's is the catalog's fatal_action
        return ev.with_columns(
            pl.when(xid).then(xid_cat.replace_strict(XID_CATEGORY, default="gpu")).otherwise("category").alias("category"),
            pl.when(xid & xid_action.is_not_null()).then(pl.format("{} (Xid catalog: {})", pl.col("action"), xid_action))
            .otherwise("action").alias("action"),
            pl.when(xid).then(xid_action).alias("xid_action"),
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
    evidence: dict = {}
    for path in paths:
        try:
            doc = tomllib.loads(path.read_text())
            scoring.update(doc.get("scoring", {}))
            nodes.update(doc.get("nodes", {}))
            evidence.update(doc.get("evidence", {}))
            for entry in doc.get("cause", []):
                cause = Cause(entry["kind"], float(entry["prior"]), entry.get("category", "unknown"),
                              entry.get("action", ""), entry["node"], bool(entry.get("symptom", False)), entry.get("lead_s"),
                              tuple(entry.get("needs", [])),
                              tuple(sorted((k, str(v)) for k, v in entry.get("attrs", {}).items())), entry.get("says", ""),
                              entry.get("began"), bool(entry.get("context", False)), float(entry.get("lag_s", 0.0)),
                              entry.get("cgroup"), entry.get("shared", ""))
                if not 0 < cause.prior < 1:
                    raise ValueError(f"{cause.kind}: prior {cause.prior} is not a probability between 0 and 1")
                if cause.category not in CATEGORIES:
                    raise ValueError(f"category {cause.category!r} not one of {', '.join(CATEGORIES)}")
                if cause.node not in NODE_ACTIONS:
                    raise ValueError(f"{cause.kind}: node {cause.node!r} not one of {', '.join(NODE_ACTIONS)}")
                causes[(cause.kind, cause.attrs)] = cause
            bad = [k for k, v in evidence.items() if not isinstance(v, (int, float)) or v <= 0]
            if bad:
                raise ValueError(f"[evidence] {', '.join(bad)}: a likelihood ratio is a number above 0")
        except KeyError as exc:
            raise CauseError(f"{path}: a [[cause]] without {exc} (every cause needs kind, prior and node)") from None
        except (tomllib.TOMLDecodeError, TypeError, ValueError) as exc:
            raise CauseError(f"{path}: {exc}") from None
    return Causes(causes, scoring, nodes, evidence)
