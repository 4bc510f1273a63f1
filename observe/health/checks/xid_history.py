"""xid_history: fatal Xids on this node since it booted, from its kernel log (``/dev/kmsg``, or a
dmesg / kern.log file) and from the store (what the collector shipped, which outlives a ring buffer
that wrapped). Which Xids are fatal comes from the Xid catalog's action for the code
(``collectors/rules/xid.toml``): by default ``drain_node`` and ``reset_gpu``.
"""
from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from observe.collect import boot_time
from observe.collector import Context
from observe.health.result import Result, Status, unknown
from observe.ingest import parse_bytes
from observe.streams import read_kmsg

NAME = "xid_history"
ACTION = {"drain_node": "drain", "reset_gpu": "reset"}
LOG_MAX = 64 << 20  # of a kernel log file, the last this many bytes are read


def run(opts: dict) -> Result:
    """FAIL when a fatal Xid was logged since boot; the action is the catalog's (drain over reset)."""
    node = opts.get("node") or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    boot = datetime.fromisoformat(opts["boot_time"]) if opts.get("boot_time") else boot_time()
    log = str(opts.get("log", "/dev/kmsg")).replace("%n", node)
    looked, frames = [], []
    try:
        frames.append(parse_bytes(_read_log(log), "kernel", Context(node=node, boot_time=boot)))
        looked.append(log)
    except OSError as exc:
        log_error = f"{log}: {exc.strerror or exc}"
    else:
        log_error = ""
    if opts.get("from_store", True) and opts.get("store"):
        from observe.store import Store

        frames.append(Store(opts["store"]).scan(sources=["kernel"], since=boot).filter(pl.col("node") == node).collect())
        looked.append("the store")
    if not looked:
        return unknown(NAME, f"no kernel log to read ({log_error})")
    xids = _fatal(pl.concat([f.select(COLUMNS) for f in frames]), boot, set(opts.get("actions", ACTION)))
    since = boot.isoformat() if boot else "boot"
    evidence = {"looked_in": looked, "since": since, "xids": xids[:20], **({"log_error": log_error} if log_error else {})}
    if not xids:
        return Result(NAME, Status.PASS, f"no fatal Xid since {since} in {' and '.join(looked)}", evidence)
    action = "drain" if any(x["action"] == "drain_node" for x in xids) else "reset"
    codes = sorted({(x["code"], x["gpu"] or "?") for x in xids})
    first = xids[0]
    summary = (f"fatal Xid {', '.join(f'{c} on {g}' for c, g in codes)} since boot; first at {first['ts'] or '?'}: "
               f"{first['name'] or first['message'][:120]}")
    return Result(NAME, Status.FAIL, summary, evidence, action=action)


COLUMNS = ["ts", "node", "kind", "code", "gpu", "message", "attrs"]


def _read_log(path: str) -> bytes:
    if path == "/dev/kmsg" or Path(path).is_char_device():
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


def _fatal(events: pl.DataFrame, boot: datetime | None, actions: set[str]) -> list[dict]:
    """Fatal Xid events after ``boot`` (an undated one counts: a kernel log without times is this boot's)."""
    xid = events.filter(pl.col("kind") == "gpu_xid").with_columns(
        pl.col("attrs").str.json_path_match("$.action").alias("action"),
        pl.col("attrs").str.json_path_match("$.name").alias("name"))
    if boot is not None:
        xid = xid.filter(pl.col("ts").is_null() | (pl.col("ts") >= boot.astimezone(timezone.utc)))
    xid = xid.filter(pl.col("action").is_in(list(actions))).unique(["ts", "code", "gpu"], maintain_order=True).sort("ts")
    return [
        {"ts": r["ts"].isoformat() if r["ts"] else None, "code": r["code"], "gpu": r["gpu"], "action": r["action"],
         "name": r["name"], "message": r["message"]}
        for r in xid.select("ts", "code", "gpu", "action", "name", "message").iter_rows(named=True)]
