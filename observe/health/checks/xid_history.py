"""xid_history: GPU faults on this node that are still open, from its kernel log (``/dev/kmsg``, or
a dmesg / kern.log file, since boot) and from the store (what the collector shipped, which outlives
a ring buffer that wrapped, and the faults of earlier boots within the policy's repeat window).
The fault policy (:mod:`observe.health.faults`, policy [faults]) decides: a reboot or
``observe health set-healthy`` ends a fault, a fault that comes back climbs the remedy ladder
(reset, reboot, replace), and an Xid is fatal when its catalog action calls for a remedy.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from observe.collect import boot_time
from observe import provenance
from observe.collector import Context
from observe.copies import one_per_record
from observe.health import faults
from observe.health.policy import from_doc
from observe.health.result import Result, Status, unknown
from observe.hostname import this_node
from observe.ingest import parse_bytes
from observe.schema import conform
from observe.streams import read_kmsg

NAME = "xid_history"
LOG_MAX = 64 << 20  # of a kernel log file, the last this many bytes are read


def run(opts: dict) -> Result:
    """FAIL when a GPU fault on this node is open and calls for a remedy; the action is the gravest."""
    node = opts.get("node") or this_node()
    boot = datetime.fromisoformat(opts["boot_time"]) if opts.get("boot_time") else boot_time()
    rules = from_doc(opts["policy"]).faults
    now = datetime.now(timezone.utc)
    log = str(opts["log"]).replace("%n", node)
    looked, frames, breaker_reset = [], [], None
    try:
        route = "kmsg" if _is_kmsg(log) else provenance.path_route(log, None)
        parsed = parse_bytes(_read_log(log), "kernel", Context(node=node, boot_time=boot, route=route))
        frames.append(parsed.with_columns(pl.lit(node).alias("node")))  # this node's log, whatever host it names
        looked.append(log)
    except OSError as exc:
        log_error = f"{log}: {exc.strerror or exc}"
    else:
        log_error = ""
    if opts["from_store"] and opts.get("store"):
        from observe.health.drain import breaker
        from observe.store import Store

        store = Store(opts["store"])
        since = now - max(rules.repeat_window, rules.remediation_window)
        frames.append(store.scan(sources=["kernel", "health"], since=since)
                      .filter((pl.col("node") == node)
                              & ((pl.col("source") == "kernel") | (pl.col("kind") == "fault_cleared")))
                      .collect())
        breaker_reset = breaker(store)[1]
        looked.append("the store")
    if not looked:
        return unknown(NAME, f"no kernel log to read ({log_error})")
    if boot is not None:  # the boot ended every fault before it, whether or not its first line is still logged
        frames.append(pl.DataFrame({"ts": [boot], "node": [node], "kind": ["kernel_boot"], "source": ["kernel"]}))
    events = pl.concat([conform(f) for f in frames])
    decided = faults.decide(one_per_record(events.lazy()), rules, now, breaker_reset)  # the log and the store share lines
    acting = decided.filter(pl.col("acting") & pl.col("kind").str.starts_with("gpu_"))
    since = boot.isoformat() if boot else "boot"
    evidence = {"looked_in": looked, "since": since, "xids": _rows(acting)[:20],
                **({"log_error": log_error} if log_error else {}),
                **({"breaker_reset": breaker_reset.isoformat()} if breaker_reset else {})}
    if not acting.height:
        ended = decided.filter(~pl.col("open")).height
        return Result(NAME, Status.PASS, f"no open GPU fault since {since} in {' and '.join(looked)}"
                      + (f" ({ended} ended by a recovery)" if ended else ""), evidence)
    worst = faults.verdict(acting).row(0, named=True)
    summary = "; ".join(worst["reasons"][:3]) + (f"; +{len(worst['reasons']) - 3} more" if len(worst["reasons"]) > 3 else "")
    return Result(NAME, Status.FAIL, summary, evidence, action=faults.CHECK_ACTION[worst["remedy"]],
                  category=worst["category"])


def _rows(decided: pl.DataFrame) -> list[dict]:
    """Decisions as plain JSON-able dicts for the evidence."""
    keep = decided.select(pl.col("first_ts").alias("ts"), "code", "gpu", "kind", "lines", "episodes", "remedy", "reason",
                          "message", "processes", "jobs")
    return [{**r, "ts": r["ts"].replace(tzinfo=timezone.utc).isoformat() if r["ts"] else None}
            for r in keep.iter_rows(named=True)]


def _is_kmsg(path: str) -> bool:
    return path == "/dev/kmsg" or Path(path).is_char_device()


def _read_log(path: str) -> bytes:
    if _is_kmsg(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return read_kmsg(fd, LOG_MAX)
        finally:
            os.close(fd)
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - LOG_MAX))
        data = f.read()
    return data if size <= LOG_MAX else data.split(b"\n", 1)[-1]
