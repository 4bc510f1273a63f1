"""Every drain of a node, whoever made it: observe, NHC, an admin or Slurm itself.

Three records feed it:
- observe's own ledger (``node_drain`` / ``node_resume``, source health);
- what the healthcheck hook saw in Slurm (``node_drain_seen`` / ``node_resume_seen``, written by
  :func:`observe.health.drains.seen`): a drain observe did not make, stamped with its reason's
  ``[user@time]``, and its end;
- slurmctld's log when it is collected (``slurm_node_drain`` / ``_down`` / ``_resume`` with the
  ``slurm_node_reason`` logged beside it).

Who drained is read from the reason and its user by the policy's ``[drain] owners`` (first match
wins): NHC's reasons start ``NHC:``, Slurm's own come from its SlurmUser (``Not responding``, ``Kill
task failed``, ``Prolog error``...), any other named user is an admin.
"""
from __future__ import annotations

from datetime import timedelta

import polars as pl

from observe.health.policy import Drain

COLUMNS = ["ts", "node", "what", "by", "user", "reason", "record"]
SAME_MOMENT = timedelta(seconds=5)  # slurmctld logs a node's state and its reason as two lines
KINDS = ("node_drain", "node_resume", "node_drain_seen", "node_resume_seen",  # every kind :func:`history` reads
         "slurm_node_drain", "slurm_node_down", "slurm_node_resume", "slurm_node_reason")


def _attr(name: str) -> pl.Expr:
    return pl.col("attrs").str.json_path_match(f"$.{name}")


def owner(reason: pl.Expr, user: pl.Expr, owners: list[dict], prefix: str) -> pl.Expr:
    """Who set a drain reason: ``observe`` (its prefix), the first of ``owners`` whose ``reason`` /
    ``user`` regexes both match, else ``admin`` for a named user, else ``unknown``."""
    by = pl.when(reason.str.starts_with(prefix)).then(pl.lit("observe"))
    for rule in owners:
        hit = pl.lit(True)
        if rule.get("reason"):
            hit = hit & reason.str.contains(rule["reason"])
        if rule.get("user"):
            hit = hit & user.str.contains(rule["user"])
        by = by.when(hit.fill_null(False)).then(pl.lit(rule["by"]))
    return by.when(user.is_not_null() & (user != "")).then(pl.lit("admin")).otherwise(pl.lit("unknown"))


def history(events: pl.LazyFrame, drain_rules: Drain) -> pl.LazyFrame:
    """Drains and returns of every node, oldest first: ts, node, what (drain, down, resume), by,
    user, reason, record (the event kind it came from). One change recorded several ways (observe's
    ledger and slurmctld's log, or the hook's record and the log) is listed once, from the better record."""
    prefix = drain_rules.reason_prefix
    dry = (_attr("dry_run") == "true").fill_null(False)
    health = events.filter(pl.col("source") == "health")
    ours = (health.filter(pl.col("kind").is_in(["node_drain", "node_resume"]) & ~dry)
            .select("ts", "node", pl.when(pl.col("kind") == "node_drain").then(pl.lit("drain")).otherwise(pl.lit("resume"))
                    .alias("what"), pl.lit("observe").alias("by"), pl.lit(None, pl.String).alias("user"),
                    _attr("reason").alias("reason"), pl.col("kind").alias("record")))
    seen_ = (health.filter(pl.col("kind").is_in(["node_drain_seen", "node_resume_seen"]))
             .select("ts", "node", _attr("what").alias("what"), _attr("by").alias("by"), _attr("user").alias("user"),
                     _attr("reason").alias("reason"), pl.col("kind").alias("record")))
    logged = events.filter((pl.col("source") == "slurm") & pl.col("ts").is_not_null() & pl.col("node").is_not_null())
    states = (logged.filter(pl.col("kind").is_in(["slurm_node_drain", "slurm_node_down", "slurm_node_resume"]))
              .select("ts", "node", pl.col("kind").str.strip_prefix("slurm_node_").alias("what"),
                      _attr("by").alias("_caller"), pl.col("kind").alias("record")).sort("ts"))
    reasons = (logged.filter(pl.col("kind") == "slurm_node_reason")
               .select(pl.col("ts").alias("_rts"), "node", _attr("reason").alias("reason"),
                       _attr("reason_user").alias("user")).sort("_rts"))
    resume = pl.col("what") == "resume"
    by = owner(pl.col("reason").fill_null(""), pl.col("user"), drain_rules.owners, prefix)
    from_log = (states.join_asof(reasons, left_on="ts", right_on="_rts", by="node", strategy="nearest",
                                 tolerance=SAME_MOMENT, check_sortedness=False)
                .with_columns(pl.when(resume).then(None).otherwise(pl.col(c)).alias(c) for c in ("reason", "user"))
                .with_columns(pl.when(resume).then(pl.lit("unknown"))
                              .when(pl.col("reason").is_null() & (pl.col("_caller") == "drain_nodes")).then(pl.lit("slurm"))
                              .otherwise(by).alias("by")))
    from_log = from_log.select(COLUMNS)
    late = drain_rules.seen_late
    for better, within in ((ours, SAME_MOMENT), (seen_, late)):  # the log's copy of a change recorded better
        from_log = _unmatched(from_log, better, within)
    return pl.concat([ours, seen_, from_log], how="vertical_relaxed").sort("ts")


def _change(frame: pl.LazyFrame) -> pl.LazyFrame:
    return frame.with_columns(pl.when(pl.col("what") == "resume").then(pl.lit("resume")).otherwise(pl.lit("out"))
                              .alias("_change"))


def _unmatched(rows: pl.LazyFrame, better: pl.LazyFrame, within: timedelta) -> pl.LazyFrame:
    """``rows`` without those that ``better`` recorded too: the same node and kind of change, from
    SAME_MOMENT before to ``within`` after (a change the hook noticed later)."""
    marks = _change(better).select("node", "_change", pl.col("ts").alias("_b")).sort("_b")
    return (_change(rows).with_columns((pl.col("ts") - SAME_MOMENT).alias("_from")).sort("_from")
            .join_asof(marks, left_on="_from", right_on="_b", by=["node", "_change"], strategy="forward",
                       tolerance=within + SAME_MOMENT, check_sortedness=False)
            .filter(pl.col("_b").is_null()).select(COLUMNS))
