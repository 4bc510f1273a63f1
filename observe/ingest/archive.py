"""Archives as sites keep them: a node's logs in a directory named after it (``logs/<node>/dmesg``, a log
collector's ``<node>/kern.log``). The kernel's own log and nvidia-smi's output name no node in their lines;
in such an archive the path does, and without it their records are no node's (no boot time either)."""
from __future__ import annotations

import os
import re

import polars as pl

from observe import collector as registry
from observe.collector import Context
from observe.ingest.parse import parse_bytes
from observe.ingest.records import sample_of
from observe.reader import READ_ERRORS, read_head

HEAD_BYTES = 8 << 10  # what is read of a file to learn the hosts its lines name
HOSTLIKE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9.-]*$")  # a directory that may be a node: a name with a digit


def layout_nodes(files: list[str], layout: str) -> dict[str, str]:
    """Each file's node by ``layout``: a path pattern whose ``{node}`` is one directory or file name (``*``: any one
    name), matched against the end of the path: ``{node}/dmesg``, ``nodes/{node}/*``, ``{node}-kern.log``."""
    if layout.count("{node}") != 1:
        raise ValueError(f"--layout {layout!r}: say where the node is with one {{node}}, e.g. '{{node}}/dmesg'")
    pattern = re.compile("(?:^|/)" + "".join(
        "(?P<node>[^/]+?)" if part == "{node}" else "[^/]*" if part == "*" else re.escape(part)
        for part in re.split(r"(\{node\}|\*)", layout.strip("/")) if part) + "$")
    found = {}
    for path in files:
        m = pattern.search(path.replace(os.sep, "/"))
        if m:
            found[path] = m.group("node")
    return found


def directory_nodes(files: list[str], known: set[str]) -> dict[str, str]:
    """Each file's node from the nearest directory of its path that names a known node (``known``: the nodes Slurm's
    records in the store name, and the hosts the run's own lines name: :func:`named_hosts`)."""
    found = {}
    for path in files:
        for part in reversed(os.path.dirname(path).replace(os.sep, "/").split("/")):
            if part in known:
                found[path] = part
                break
    return found


def named_hosts(files: list[str]) -> set[str]:
    """Hosts the first lines of the files under a node-like directory name, parsed as their format (a syslog
    file's host field, a Slurm log's node lists): which of those directories are nodes."""
    hosts: set[str] = set()
    for path in files:
        if not any(HOSTLIKE.match(p) for p in os.path.dirname(path).replace(os.sep, "/").split("/")):
            continue
        try:
            head = read_head(path, HEAD_BYTES)[0]
        except READ_ERRORS:
            continue
        best = registry.detect(sample_of(head))[0]
        if best is None or best.whole_file:
            continue
        lines = head[:head.rfind(b"\n") + 1]
        try:
            hosts.update(parse_bytes(lines, best.name, Context()).get_column("node").drop_nulls().unique().to_list())
        except (ValueError, pl.exceptions.PolarsError):  # a head its parser cannot read names no host: ingest says why
            continue
    return hosts
