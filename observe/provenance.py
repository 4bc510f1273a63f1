"""Provenance: the route each record took to observe, and whether that route may drive actions.

The collector and the hooks run as root, but users of the node write their job output, what they
send to syslog and the journal, and any file they own. Every event carries its ``route`` (see
``provenance.toml``); only trusted routes produce faults that drain a node, climb the remedy ladder
or count against the drain breaker, and a file users may write is read as job output only.
"""
from __future__ import annotations

import os
import stat
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from observe.config import rule_dirs
from observe.frames import attrs_json, merge_attrs, scatter_rows
from observe.memo import once

BUILTIN = Path(__file__).with_name("provenance.toml")
KEYS = {"trusted_routes", "system_uid_max", "job_output_sources", "future_tolerance_s"}


def policy() -> dict:
    """The built-in provenance policy with a site's keys (``$OBSERVE_RULES/provenance.toml``) over it: the
    directories the rules are read from now (:func:`observe.rules.load` follows them too)."""
    return _policy(tuple(rule_dirs()[1:]))


@once
def _policy(site_dirs: tuple[Path, ...]) -> dict:
    doc: dict = {}
    for path in [BUILTIN, *(d / "provenance.toml" for d in site_dirs)]:
        if path.is_file():
            site = tomllib.loads(path.read_text())
            unknown = set(site) - KEYS
            if unknown:
                raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KEYS))}")
            doc.update(site)
    return doc


def trusted_routes() -> list[str]:
    return list(policy()["trusted_routes"])


def is_trusted(route: str | None) -> bool:
    """Whether records of ``route`` may drive checks, drains and the ladder (unknown: no)."""
    return route in policy()["trusted_routes"]


def trusted() -> pl.Expr:
    """True for events whose route may drive actions (events stored before routes were kept: no)."""
    return pl.col("route").is_in(trusted_routes()).fill_null(False)


def job_output_sources() -> list[str]:
    """The collectors a file users may write is parsed with (the first when its lines match none)."""
    return list(policy()["job_output_sources"])


def system_account(uid: int) -> bool:
    return uid <= int(policy()["system_uid_max"])


def file_route(st: os.stat_result, job: str | None) -> str:
    """The route of a file from its ``fstat``: job output when it belongs to a job, a system file
    when root or a system account owns it and no one else may write it (a group other than root's
    is one users may be in: ``users``, ``adm``), else a user's file."""
    if job:
        return "job_output"
    others_write = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)  # users join groups
    return "system_file" if system_account(st.st_uid) and not others_write else "user_file"


def path_route(path: str, job: str | None) -> str:
    """:func:`file_route` of a path; standard input and pipes are the operator's."""
    if path == "-":
        return "operator"
    try:
        st = os.stat(path)
    except OSError:
        return "user_file"  # unreadable now: whatever it turns out to be, it earns no trust
    if stat.S_ISREG(st.st_mode):
        return file_route(st, job)
    return "operator" if system_account(st.st_uid) else "user_file"  # a pipe the operator made, or a user's FIFO


def read_route(fd: int, planned: str | None, job: str | None) -> str | None:
    """The route of what descriptor ``fd`` reads, where ``planned`` came from the path before it was
    opened: a path that named a root-owned file when listed and a user's file when opened (a
    link or rename swapped in between) keeps the route of what is read, never the listing's."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not is_trusted(planned):
        return planned
    read = file_route(st, job)
    return planned if is_trusted(read) else read


def input_route(route: str | None, relayed: bool) -> str | None:
    """The route of an input's lines: a system file that a syslog daemon writes for every local
    process (``relayed``) is ``syslog_file``: its lines say who sent them, no one vouches for it."""
    return "syslog_file" if relayed and route == "system_file" else route


def user_written(route: str | None) -> bool:
    """Whether an input's text is a user's: its lines claim nothing about other nodes or sources."""
    return route in ("user_file", "job_output")


def clamp_future(df: pl.DataFrame, now: datetime | None = None) -> pl.DataFrame:
    """Events stamped more than the policy's tolerance after ``now`` (default: the wall clock) get
    ``now`` as their time and their stamp in ``attrs.ts_claimed``: a line dated next year must not
    outlive every recovery recorded before it."""
    now = now or datetime.now(timezone.utc)
    late = (pl.col("ts") > now + timedelta(seconds=float(policy()["future_tolerance_s"]))).fill_null(False)
    rows = df.select(late).to_series().arg_true()
    if not len(rows):
        return df
    fixed = df.select("ts", "attrs").gather(rows).select(
        pl.lit(now, dtype=df.schema["ts"]).alias("ts"),
        merge_attrs(pl.col("attrs"), attrs_json([("ts_claimed", pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))])).alias("attrs"))
    return scatter_rows(df, rows, fixed)
