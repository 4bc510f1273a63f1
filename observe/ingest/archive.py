"""Archives as sites keep them: a node's logs in a directory named after it (``logs/<node>/dmesg``, a log
collector's ``<node>/kern.log``). The kernel's own log and nvidia-smi's output name no node in their lines;
in such an archive the path does, and without it their records are no node's (no boot time either)."""
from __future__ import annotations

import os
import re

import polars as pl

from observe import collector as registry
from observe import provenance
from observe.collector import Collector, Context, input_of
from observe.ingest.parse import finalize, short_host
from observe.ingest.plan import job_from_name
from observe.ingest.records import blank_lines, joined_records, sample_of
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
    named = lines_naming({d: paths for d, paths in under.items() if d not in known})
    nodes = {d for d in under if d in known or d in named}
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
    return host in lines_naming({host: paths}, tries)


def lines_naming(hosts: dict[str, list[str]], tries: int = 4) -> set[str]:
    """The ``hosts`` that :func:`named_by_lines` says their paths' lines name. In rounds: each host's next
    readable path's head, the heads of one format parsed together whatever their hosts (an archive of a
    directory per node: a parse per directory cost 17 ms, half a second for 32 nodes); a host its lines
    name is not read further."""
    left = {host: tries for host in hosts}
    rest = {host: iter(paths) for host, paths in hosts.items()}
    named: set[str] = set()
    while rest:
        heads: dict[str, list[tuple[str, bytes]]] = {}  # format -> (host, head)
        for host in list(rest):
            head = _next_head(rest[host]) if left[host] else None
            if head is None:
                del rest[host]
                continue
            left[host] -= 1
            best = registry.detect(sample_of(head))[0]
            head = head[:head.rfind(b"\n") + 1]
            if best is not None and not best.whole_file and head.strip():
                heads.setdefault(best.name, []).append((host, head))
        for name, some in heads.items():
            try:
                named |= _naming(registry.get(name), some)
            # one head its parser cannot read: each alone (any error, as ingest contains them: attack-31 r6)
            except (Exception, pl.exceptions.PanicException):
                for one in some:
                    try:
                        named |= _naming(registry.get(name), [one])
                    except (Exception, pl.exceptions.PanicException):  # names no host: ingest says why
                        continue
        for host in named & rest.keys():
            del rest[host]
    return named


def _next_head(paths) -> bytes | None:
    """The head of the next of ``paths`` that is readable and that no user could have written; None when none is left."""
    for path in paths:
        try:
            head, _, _, st = read_head(path, HEAD_BYTES)
        except READ_ERRORS:
            continue
        if st is None or provenance.user_written(provenance.file_route(st, job_from_name(path))):  # what was read
            continue  # nor does it use up a try
        return head
    return None


def _naming(c: Collector, heads: list[tuple[str, bytes]]) -> set[str]:
    """The hosts of ``heads`` (host, whole lines of one format) whose own lines name them: by the format's own
    fields first (a syslog header's host), by the rules only where those name no one."""
    recs = joined_records([h for _, h in heads], c, sizes=[len(h) for _, h in heads])
    fields = c.parse(recs.filter(~blank_lines(recs.get_column("raw"))), Context())
    owner = pl.Series("_host", [host for host, _ in heads], dtype=pl.String)
    named = _named(fields, owner)
    rest = fields.filter(~input_of(pl.col("offset")).is_in(named.keys()))  # the rules only on the others
    if rest.height:
        named |= _named(finalize(rest, c, Context(), "local"), owner)
    return set(named.values())


def _named(events: pl.DataFrame, owner: pl.Series) -> dict[int, str]:
    """Head index -> its host, for the heads a row of ``events`` (offsets carrying their head's index) is the host of."""
    if "node" not in events.columns or not events.height:
        return {}
    at = input_of(pl.col("offset")).cast(pl.Int64)
    hits = events.select(at.alias("_in"), short_host(pl.col("node")).alias("_node")).with_columns(
        pl.lit(owner).gather(pl.col("_in")).alias("_host")).filter(pl.col("_node") == pl.col("_host"))
    return dict(hits.select("_in", "_host").unique().iter_rows())
