"""Archives as sites keep them: a node's logs in a directory named after it (``logs/<node>/dmesg``, a log
collector's ``<node>/kern.log``). The kernel's own log and nvidia-smi's output name no node in their lines;
in such an archive the path does, and without it their records are no node's (no boot time either)."""
from __future__ import annotations

import os
import re

import polars as pl

from observe import collector as registry
from observe import provenance
from observe.collector import Context
from observe.ingest.parse import fields_of, finalize, short_host
from observe.ingest.plan import job_from_name
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


def directory_nodes(files: dict[str, str], known: set[str]) -> dict[str, str]:
    """Each file's node from the nearest directory of its path below what was given (``files``: path -> that part)
    that names a node: one in ``known`` (the nodes Slurm's records in the store name), or one whose own files' lines
    name that host (a syslog file beside the dmesg: :func:`named_by_lines`)."""
    under: dict[str, list[str]] = {}
    for path, rel in files.items():
        for part in os.path.dirname(rel).replace(os.sep, "/").split("/"):
            if HOSTLIKE.match(part):
                under.setdefault(part, []).append(path)
    nodes = {d for d in under if d in known or named_by_lines(d, under[d])}
    found = {}
    for path, rel in files.items():
        for part in reversed(os.path.dirname(rel).replace(os.sep, "/").split("/")):
            if part in nodes:
                found[path] = part
                break
    return found


def named_by_lines(host: str, paths: list[str], tries: int = 4) -> bool:
    """Whether the first lines of one of the first ``tries`` readable ``paths`` that no user could have written
    (parsed as their format: a syslog file's host field, a Slurm log's node lists) name ``host``: a job's output
    or a user's file names its node only as a claim (attack-27 r2)."""
    left = tries
    for path in paths:
        if not left:
            break
        try:
            head, _, _, st = read_head(path, HEAD_BYTES)
        except READ_ERRORS:
            continue
        if st is None or provenance.user_written(provenance.file_route(st, job_from_name(path))):  # what was read
            continue  # nor does it use up a try
        left -= 1
        best = registry.detect(sample_of(head))[0]
        if best is None or best.whole_file:
            continue
        try:
            # the format's own fields first (a syslog header's host): the rules run only where they name no one
            fields = fields_of(head[:head.rfind(b"\n") + 1], best.name, Context())
            if fields is not None and (_names(fields, host) or _names(finalize(fields, best, Context(), "local"), host)):
                return True
        except (ValueError, pl.exceptions.PolarsError):  # a head its parser cannot read names no host: ingest says why
            continue
    return False


def _names(events: pl.DataFrame, host: str) -> bool:
    """Whether a row of ``events`` is ``host``'s (its short name)."""
    return "node" in events.columns and events.select((short_host(pl.col("node")) == host).any()).item() is True
