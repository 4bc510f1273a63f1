"""Recovery events: a person (or a remediation script) says a fault was dealt with.

``observe health set-healthy NODE [--gpu ID] --did reset|reboot|replace|none`` writes a
``fault_cleared`` event to the store. The fault policy takes it as a recovery (earlier faults on that
GPU, or the whole node, end) and, unless ``none``, as a remediation that counts towards the ladder:
a fault that comes back after it climbs a rung, and too many remediations of one node call for
hardware inspection. The node returns to service once its checks pass again (the healthcheck hook,
or ``observe resume``).
"""
from __future__ import annotations

import os

import polars as pl

from observe.health import slurm
from observe.health.drill import GPU_ID
from observe.health.events import health_events
from observe.config import to_json

DONE = ("none", "reset", "reboot", "replace")


def fault_cleared(node: str, gpu: str | None, did: str, note: str = "", by: str | None = None) -> pl.DataFrame:
    """The ``fault_cleared`` event for ``node`` (and ``gpu``, else every GPU of the node)."""
    slurm.node_name(node)
    if did not in DONE:
        raise ValueError(f"--did {did!r}: use one of {', '.join(DONE)}")
    if gpu is not None and not (GPU_ID.match(gpu) or gpu.isdigit()):
        raise ValueError(f"GPU {gpu!r}: give a PCI bus id such as 0000:3b:00 (or an index)")
    by = by or os.environ.get("SUDO_USER") or os.environ.get("USER") or "unknown"
    what = f"{node}{' GPU ' + gpu if gpu else ''}"
    return health_events([{
        "node": node, "gpu": gpu, "kind": "fault_cleared", "severity": "notice",
        "message": f"fault cleared on {what} by {by}: {did}" + (f" ({note})" if note else ""),
        "attrs": to_json({"remedy": did, "by": by, "note": note}), "file_id": f"ledger:{node}",
    }])
