"""Drain decisions with guardrails, and the drain ledger.

observe drains a node only when:
- no person (or other tool) has already set a reason on it: that reason is never overwritten;
- the drain budget allows it: at most ``max_fraction`` of the node's partition (and ``max_nodes``)
  drained by observe at once, and at most ``max_per_hour`` drains in the last hour. Past the budget
  it drains nothing more and raises ``drain_budget_exhausted``: many nodes failing together points
  to a shared cause (a switch, a bad driver roll-out), not to the nodes. The breaker then stays open
  (every drain refused) until a person resets it (``observe health breaker --reset``); faults that
  ended before the reset are not replayed.
- the share counts GPU nodes only (``gpu_nodes_only``): login and CPU nodes do not widen it.
With ``quarantine`` a drained node is also held in a reservation only root may use: a person's resume
does not return it to users; it is released once its checks (and the extended re-check) pass.
It resumes only its own drains. Every decision, taken or refused, dry run or not, is an event in
the store (source ``health``) with its evidence and the policy version: the drain ledger.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import polars as pl

from observe.health import slurm
from observe.health.events import health_events
from observe.health.policy import Policy
from observe.config import to_json
from observe.store import Store

LOCK_WAIT_S = 30.0
KINDS = ("node_drain", "node_drain_refused", "node_resume", "node_resume_refused", "drain_budget_exhausted",
         "drain_breaker_reset")


@dataclass
class Decision:
    """What was decided about one node, and why."""

    kind: str  # one of KINDS
    node: str
    reason: str
    detail: str
    dry_run: bool = False
    evidence: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.kind in ("node_drain", "node_resume") and not self.dry_run


class Drainer:
    """Drains and resumes nodes through :mod:`observe.health.slurm` under the policy's [drain] budget."""

    def __init__(self, policy: Policy, store: Store | None = None, dry_run: bool = False):
        self.rules = policy.drain
        self.version = policy.version
        self.store = store
        self.dry_run = dry_run
        self.prefix = self.rules.reason_prefix

    def drain(self, node: str, reason: str, evidence: dict | None = None) -> list[Decision]:
        """Drain ``node`` unless a guardrail refuses; the decisions made (also in the ledger).

        Decisions are taken one at a time across the cluster (the store's drain lock), so nodes
        failing at the same moment cannot all pass the budget check before any of them is drained."""
        if self.store is None:
            return self._drain(node, reason, evidence or {})
        with self.store.lock("drain", wait_s=LOCK_WAIT_S):
            return self._drain(node, reason, evidence or {})

    def _drain(self, node: str, reason: str, evidence: dict) -> list[Decision]:
        ours = f"{self.prefix} {slurm.clean_reason(reason)}"
        found = slurm.nodes([node])
        if not found:
            return self._record([Decision("node_drain_refused", node, ours, "Slurm does not know this node", self.dry_run, evidence)])
        target = found[0]
        if target.drained and target.reason and not target.reason.startswith(self.prefix):
            return self._record([Decision("node_drain_refused", node, ours,
                                          f"already {target.state} with a reason observe did not set: {target.reason}",
                                          self.dry_run, evidence)])
        if target.drained and target.reason.startswith(self.prefix):
            return [Decision("node_drain_refused", node, ours, f"already drained by observe: {target.reason}", self.dry_run, evidence)]
        tripped = breaker(self.store)[0] if self.store is not None and self.rules.budget_breaker else None
        if tripped is not None:
            return self._record([Decision("node_drain_refused", node, ours, f"the drain breaker is open since "
                                          f"{tripped:%Y-%m-%d %H:%M:%S}Z (budget exhausted): nothing is drained until a "
                                          "person runs `observe health breaker --reset`", self.dry_run, evidence)])
        over = self._over_budget(target)
        if over:
            return self._record([
                Decision("node_drain_refused", node, ours, f"drain budget exhausted: {over}", self.dry_run, evidence),
                Decision("drain_budget_exhausted", node, ours, f"{over}; many nodes failing together points to a shared "
                         "cause: nothing more is drained until a person looks", self.dry_run, evidence),
            ])
        detail = f"drained (was {target.state})"
        if not self.dry_run:
            slurm.drain(node, ours)
            detail += self._quarantine(node)
        return self._record([Decision("node_drain", node, ours, detail, self.dry_run, evidence)])

    def _quarantine(self, node: str) -> str:
        """Hold a drained node in its quarantine reservation ([drain] quarantine); what was done."""
        if not self.rules.quarantine:
            return ""
        try:
            slurm.quarantine(node)
        except slurm.SlurmError as exc:
            return f"; not quarantined: {exc}"
        return f"; quarantined in reservation {slurm.quarantine_name(node)} until its re-check passes"

    def resume(self, node: str, evidence: dict | None = None, force: bool = False) -> list[Decision]:
        """Resume ``node`` if observe drained it (a person's drain is left alone) and the checks it
        was drained for have passed since (unless ``force``: a person's call, recorded as such)."""
        evidence = {**(evidence or {}), **({"forced": True} if force else {})}
        found = slurm.nodes([node])
        if found and not found[0].drained and self.held(node):
            return self._release(node, evidence, force)
        if not found or not found[0].drained:
            return [Decision("node_resume_refused", node, "", "not drained", self.dry_run, evidence)]
        target = found[0]
        if not target.reason.startswith(self.prefix):
            return self._record([Decision("node_resume_refused", node, target.reason,
                                          f"drained by someone else ({target.reason}): observe resumes only its own drains",
                                          self.dry_run, evidence)])
        waiting = "" if force else self._not_passed(node, evidence)
        if waiting:
            return self._record([Decision("node_resume_refused", node, target.reason, waiting, self.dry_run, evidence)])
        if not self.dry_run:
            slurm.resume(node)
            if self.held(node):
                slurm.release(node)
        return self._record([Decision("node_resume", node, target.reason, "resumed", self.dry_run, evidence)])

    def held(self, node: str) -> bool:
        """Whether ``node`` is in observe's quarantine reservation ([drain] quarantine)."""
        return bool(self.rules.quarantine) and slurm.quarantined(node)

    def _release(self, node: str, evidence: dict, force: bool) -> list[Decision]:
        """A node someone resumed while observe held it in quarantine: released once its checks pass."""
        name = slurm.quarantine_name(node)
        waiting = "" if force else self._not_passed(node, evidence)
        if waiting:
            return self._record([Decision("node_resume_refused", node, name, f"resumed by someone else, kept in "
                                          f"reservation {name}: {waiting}", self.dry_run, evidence)])
        if not self.dry_run:
            slurm.release(node)
        return self._record([Decision("node_resume", node, name, f"released from reservation {name}", self.dry_run,
                                      evidence)])

    def drained_for_checks(self, node: str) -> list[str]:
        """The checks whose failure made observe drain ``node`` last (empty for a drain by hand)."""
        drain = self._last_drain(node)
        return sorted(drain["checks"]) if drain else []

    def _last_drain(self, node: str) -> dict | None:
        if self.store is None:
            return None
        drains = (self.store.scan(sources=["health"])
                  .filter((pl.col("kind") == "node_drain") & (pl.col("node") == node))
                  .filter(~(pl.col("attrs").str.json_path_match("$.dry_run") == "true").fill_null(False))
                  .sort("ts").select("ts", "attrs").collect())
        if not drains.height:
            return None
        ts, attrs = drains.row(-1)
        return {"ts": ts, "checks": (json.loads(attrs).get("evidence") or {}).get("checks") or {}}

    def _not_passed(self, node: str, evidence: dict) -> str:
        """Why the checks ``node`` was drained for, and the extended re-check (``return_checks``), do
        not allow a resume yet ('' when they do): their latest results in the store, or those just run
        (``evidence['checks']``: a hook's results reach the store at the next central commit)."""
        drain = self._last_drain(node)
        if not drain or not drain["checks"]:
            return ""
        needed = sorted({*drain["checks"], *self.rules.return_checks})
        results = (self.store.scan(sources=["health"], since=drain["ts"])
                   .filter((pl.col("kind") == "health_check") & (pl.col("node") == node) & (pl.col("ts") > drain["ts"]))
                   .with_columns(pl.col("attrs").str.json_path_match("$.check").alias("check"),
                                 pl.col("attrs").str.json_path_match("$.status").alias("status"))
                   .sort("ts").group_by("check").agg(pl.col("status").last()).collect())
        latest = dict(results.iter_rows()) | {c: r.get("status") for c, r in (evidence.get("checks") or {}).items()}
        waiting = [f"{c} ({latest.get(c) or 'not run'})" for c in needed if latest.get(c) != "PASS"]
        if waiting:
            return (f"checks that have not passed since the drain: {', '.join(waiting)}; run "
                    f"`observe health run --checks {','.join(needed)} --record` on the node, or --force")
        return ""

    def _over_budget(self, target: slurm.Node) -> str:
        """Why one more drain would break the budget ('' when it would not)."""
        everyone = slurm.nodes()
        mates = [n for n in everyone if set(n.partitions) & set(target.partitions)] or everyone
        if self.rules.gpu_nodes_only and _has_gpus(target):
            mates = [n for n in mates if _has_gpus(n)]
        ours = [n for n in mates if n.drained and n.reason.startswith(self.prefix)]
        limit = max(1, math.floor(self.rules.max_fraction * len(mates)))
        if self.rules.max_nodes:
            limit = min(limit, self.rules.max_nodes)
        if len(ours) + 1 > limit:
            what = "GPU nodes" if self.rules.gpu_nodes_only and _has_gpus(target) else "nodes"
            return (f"{len(ours)} of {len(mates)} {what} in {','.join(target.partitions) or 'the cluster'} already "
                    f"drained by observe (limit {limit})")
        per_hour = self.rules.max_per_hour
        if per_hour and self.store is not None:
            recent = self._recent_drains()
            if recent >= per_hour:
                return f"{recent} drains in the last hour (limit {per_hour})"
        return ""

    def _recent_drains(self) -> int:
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        lf = self.store.scan(sources=["health"], since=since).filter(pl.col("kind") == "node_drain")
        dry = pl.col("attrs").str.json_path_match("$.dry_run") == "true"
        return lf.filter(~dry.fill_null(False)).select(pl.len()).collect().item()

    def _record(self, decisions: list[Decision]) -> list[Decision]:
        if self.store is not None and decisions:
            self.store.write(ledger(decisions, self.version))
        return decisions


def _has_gpus(node: slurm.Node) -> bool:
    return "gpu" in node.gres


def breaker(store: Store) -> tuple[datetime | None, datetime | None]:
    """The drain breaker: when it tripped (a drain budget exhausted since the last reset; None: closed)
    and when a person last reset it."""
    marks = (store.scan(sources=["health"])
             .filter(pl.col("kind").is_in(["drain_budget_exhausted", "drain_breaker_reset"]))
             .filter(~(pl.col("attrs").str.json_path_match("$.dry_run") == "true").fill_null(False))
             .group_by("kind").agg(pl.col("ts").max()).collect())
    last = dict(marks.iter_rows())
    tripped, reset = last.get("drain_budget_exhausted"), last.get("drain_breaker_reset")
    return (tripped if tripped is not None and (reset is None or tripped > reset) else None), reset


def reset_breaker(store: Store, by: str, note: str) -> pl.DataFrame:
    """Close the drain breaker: a ``drain_breaker_reset`` event in the ledger. Faults that ended
    before it are stale: they are never acted on (no replay of what piled up while it was open)."""
    event = health_events([{"node": "", "kind": "drain_breaker_reset", "severity": "notice",
                            "message": f"drain breaker reset by {by}" + (f": {note}" if note else ""),
                            "attrs": to_json({"by": by, "note": note}), "file_id": "ledger:breaker"}])
    store.write(event)
    return event


def ledger(decisions: list[Decision], policy_version: str) -> pl.DataFrame:
    """Decisions as events of the drain ledger."""
    severity = {"node_drain": "warning", "drain_budget_exhausted": "crit"}
    return health_events([{
        "node": d.node, "kind": d.kind, "severity": severity.get(d.kind, "notice"),
        "message": f"{d.kind} {d.node}: {d.detail}" + (" (dry run)" if d.dry_run else ""),
        "attrs": to_json({"reason": d.reason, "detail": d.detail, "dry_run": d.dry_run, "policy": policy_version,
                          "evidence": d.evidence}),
        "file_id": f"ledger:{d.node}",
    } for d in decisions])
