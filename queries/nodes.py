"""Flaky nodes and GPUs: fault history per node and per GPU, repeat offenders flagged, with a
recommendation (watch / verify / drain / rma: a drain or an RMA rests on episodes a trusted route carried;
those that only came through routes users write, counted in ``unconfirmed``, call for verify). Thresholds are in ``causes.toml`` (``[nodes]``)."""
from __future__ import annotations

import polars as pl

from observe.health.policy import Drain, load
from queries.causes import load_causes
from queries.drains import KINDS as DRAIN_KINDS, history
from queries.engine import Order
from queries.incidents import LINGER, faults, grouped_sessions


# worst first; ties by name, so that the order is total (the same whichever engine computed it)
NODE_ORDER = Order(("episodes", "events", "drains", "last", "node"), (True, True, True, True, False))
GPU_ORDER = Order(("episodes", "last", "node", "gpu"), (True, True, False, False))


def kinds_read() -> list[str]:
    """The only kinds :func:`rank_nodes` and :func:`rank_gpus` look at (catalogued causes, drains):
    a search for them ranks the same, and reads a few rows in ten thousand of a fleet's store."""
    return sorted(set(load_causes().kinds()) | set(DRAIN_KINDS))


def _episodes(events: pl.LazyFrame, by: list[str]) -> pl.DataFrame:
    limits = load_causes().nodes
    found = faults(events).collect().filter(
        ~pl.col("kind").is_in(limits["ignore_kinds"]))
    if by == ["node", "gpu"]:
        found = found.filter(pl.col("gpu").is_not_null())
    # episodes of trusted lines and of untrusted ones apart: forged lines neither merge, stretch nor hide a trusted one
    return (grouped_sessions(found, [*by, "trusted"], "ts", LINGER)
            .agg(pl.col("ts").min().alias("start"), pl.col("kind").first(), pl.col("code").drop_nulls().first(),
                 pl.col("category").first(), pl.col("message").first(), pl.len().alias("events")))


def rank_nodes(events: pl.LazyFrame, drain_rules: Drain | None = None) -> pl.DataFrame:
    """Nodes with faults or drains, worst first: episodes, days, kinds, last fault, repeat flag,
    advice, and drains by anyone (``drained_by``: observe, nhc, slurm, admin; [drain] owners of
    ``drain_rules``, the built-in health policy's by default)."""
    if drain_rules is None:
        drain_rules = load().drain
    limits = load_causes().nodes
    drained = (history(events, drain_rules).filter(pl.col("what") != "resume").group_by("node")
               .agg(pl.len().cast(pl.UInt32).alias("drains"), pl.col("by").unique().sort().str.join(",").alias("drained_by"))
               .collect())
    ep = _episodes(events, ["node"])
    out = (ep.group_by("node")
           .agg(pl.len().cast(pl.UInt32).alias("episodes"), pl.col("events").sum().cast(pl.UInt32),
                pl.col("start").dt.date().n_unique().cast(pl.UInt32).alias("days"),
                pl.col("kind").unique().sort().str.join(",").alias("kinds"),
                pl.col("start").max().alias("last"), pl.col("message").last().alias("last_message"),
                (~pl.col("trusted")).sum().cast(pl.UInt32).alias("unconfirmed"),
                pl.col("trusted").sum().cast(pl.UInt32).alias("_confirmed"),
                pl.col("start").filter("trusted").dt.date().n_unique().cast(pl.UInt32).alias("_confirmed_days")))
    repeat = (pl.col("episodes") >= limits["repeat_episodes"]) & (pl.col("days") >= 2)
    # a drain rests on episodes a trusted route carried; those only a user could have written call for a check
    drain = ((pl.col("_confirmed") >= limits["drain_episodes"])
             | ((pl.col("_confirmed") >= limits["repeat_episodes"]) & (pl.col("_confirmed_days") >= 2)))
    advice = (pl.when(drain).then(pl.lit("drain"))
              .when((pl.col("episodes") >= limits["drain_episodes"]) | repeat).then(pl.lit("verify"))
              .otherwise(pl.lit("watch")))
    return (out.with_columns(repeat.alias("repeat"), advice.alias("advice")).drop("_confirmed", "_confirmed_days")
            .join(drained, on="node", how="full", coalesce=True)
            .with_columns(pl.col("episodes", "events", "days", "drains", "unconfirmed").fill_null(0),
                          pl.col("repeat").fill_null(False),
                          pl.col("advice").fill_null("watch"))
            .pipe(NODE_ORDER.apply))


def rank_gpus(events: pl.LazyFrame) -> pl.DataFrame:
    """GPUs (node and PCI id) with GPU faults, worst first, with Xid codes seen and advice."""
    limits = load_causes().nodes
    ep = _episodes(events, ["node", "gpu"]).filter(pl.col("category") == "gpu")
    out = (ep.group_by("node", "gpu")
           .agg(pl.len().cast(pl.UInt32).alias("episodes"),
                pl.col("code").drop_nulls().unique().sort().cast(pl.String).str.join(",").alias("xids"),
                pl.col("kind").unique().sort().str.join(",").alias("kinds"), pl.col("start").max().alias("last"),
                (~pl.col("trusted")).sum().cast(pl.UInt32).alias("unconfirmed")))
    rma = pl.col("episodes") >= limits["rma_gpu_episodes"]
    confirmed = pl.col("episodes") - pl.col("unconfirmed") >= limits["rma_gpu_episodes"]
    advice = pl.when(confirmed).then(pl.lit("rma")).when(rma).then(pl.lit("verify")).otherwise(pl.lit("watch"))
    return out.with_columns(rma.alias("repeat"), advice.alias("advice")).pipe(GPU_ORDER.apply)
