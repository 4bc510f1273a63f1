"""Drains of this node that observe did not make, as the healthcheck hook sees them in Slurm.

A node drained (or down) with a reason observe did not set becomes a ``node_drain_seen`` event,
stamped with the reason's ``[user@time]`` and its owner (policy ``[drain] owners``), once; its return
a ``node_resume_seen``. :func:`queries.drains.history` lists them with observe's own drains and
slurmctld's log.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl

from observe.health import slurm
from observe.health.events import health_events
from observe.health.policy import Drain
from observe.config import to_json
from observe.store import Store
from queries.drains import owner

REASON = r"^(.*?)(?: \[([^@\]]+)@([^\]]+)\])?$"  # Slurm's "text [user@2024-10-22T12:26:42]"


def _attr(name: str) -> pl.Expr:
    return pl.col("attrs").str.json_path_match(f"$.{name}")


def seen(store: Store, node: slurm.Node, drain_rules: Drain) -> pl.DataFrame | None:
    """The ``node_drain_seen`` / ``node_resume_seen`` event for a change of ``node``'s state that
    observe did not make and has not recorded yet (None when there is none)."""
    prefix = drain_rules.reason_prefix
    text, user, stamp = pl.Series([node.reason]).str.extract_groups(REASON).struct.unnest().row(0)
    text, at = text or "", _when(stamp)
    foreign = node.drained and not text.startswith(prefix)
    since = datetime.now(timezone.utc) - timedelta(days=drain_rules.seen_days)
    last = (store.scan(sources=["health"], since=min(since, at or since) - timedelta(days=1))
            .filter(pl.col("kind").is_in(["node_drain_seen", "node_resume_seen"]) & (pl.col("node") == node.name))
            .sort("ts").select("kind", _attr("reason").alias("reason")).last().collect())
    was_drained = bool(last.height) and last.item(0, "kind") == "node_drain_seen"
    if foreign and not (was_drained and last.item(0, "reason") == text):
        by = pl.select(owner(pl.lit(text), pl.lit(user, pl.String), drain_rules.owners, prefix)).item()
        what = "down" if "DOWN" in node.state and "DRAIN" not in node.state else "drain"
        return health_events([{
            "node": node.name, "kind": "node_drain_seen", "severity": "warning",
            "message": f"{node.name} {node.state} by {by}{' (' + user + ')' if user else ''}: {text or 'no reason'}",
            "attrs": to_json({"what": what, "by": by, "user": user, "reason": text, "state": node.state}),
            "file_id": f"ledger:{node.name}", **({"ts": at} if at else {})}])
    if not foreign and was_drained:
        return health_events([{
            "node": node.name, "kind": "node_resume_seen", "severity": "notice",
            "message": f"{node.name} no longer held by another's drain ({node.state})",
            "attrs": to_json({"what": "resume", "by": "unknown", "user": None, "reason": "", "state": node.state}),
            "file_id": f"ledger:{node.name}"}])
    return None


def _when(stamp: str | None) -> datetime | None:
    """Slurm's reason time (local time of slurmctld, no zone) as UTC; None when absent or odd."""
    try:
        return datetime.fromisoformat(stamp).astimezone(timezone.utc) if stamp else None
    except ValueError:
        return None
