"""Slurm hostlists (``gpu[001-004,010],login1``) to node names and back, for every command and report."""
from __future__ import annotations

import hostlist


def expand_nodes(expr: str) -> list[str]:
    """Expand a Slurm hostlist (``gpu[001-004,010],login1``) into node names."""
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"bad node list {expr!r}: {exc}") from None


def compact_nodes(nodes: list[str]) -> str:
    """Node names as one Slurm hostlist (``gpu[001-004]``); names a hostlist cannot hold (a log's
    host field may carry ``[``, ``]`` or ``,``) are listed as they are, comma separated."""
    try:
        return hostlist.collect_hostlist(nodes)
    except hostlist.BadHostlist:
        return ",".join(sorted(set(nodes)))
