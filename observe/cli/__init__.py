"""The ``observe`` command line: thin commands over the library, one clear line on bad input.

One module per command group, registered here explicitly: ``data`` (the store's commands),
``analyses``, ``health`` (health checks, drain, resume), ``checkpoint``, ``slurm`` (the hooks) and
``exporter``; ``base`` holds what they share (the app, consoles, opening the store, errors).
"""
from __future__ import annotations

import os
import re
import signal
import sys

import typer

from observe.cli import analyses, checkpoint, data, exporter, health, slurm
from observe.cli.base import APP, OPENED, app, damaged_segments, err, escape, one_line

# the order `observe --help` lists them in: the main job first
TOP = ["ingest", "demo", "query", "explain", "incidents", "nodes", "patterns", "stats", "compact", "retention",
       "convert", "repair", "collect", "rules", "schema", "drain", "resume"]
COMMANDS = {**data.COMMANDS, **analyses.COMMANDS, **health.COMMANDS}
assert sorted(COMMANDS) == sorted(TOP), "every top-level command is listed in TOP"
for _name in TOP:
    app.command(_name)(COMMANDS[_name])
for _group in (health, checkpoint, slurm, exporter):
    app.add_typer(_group.GROUP, name=_group.NAME)


def main() -> None:
    """Console-script entry point; an unexpected error is one line (OBSERVE_DEBUG=1 shows the traceback).
    A SIGTERM (a `timeout`, systemd, a job's time limit) ends a command as an error does, its temporary
    files removed and its locks let go on the way out; the daemons put handlers of their own in its place."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        _asked(sys.argv[1:])()
    except Exception as exc:  # a bug, not bad input: say so in one line and exit non-zero
        _fail_store(exc)
        if os.environ.get("OBSERVE_DEBUG"):
            raise
        try:
            damaged = [f for s in OPENED for f in s.upkeep.damaged()]  # the likeliest cause: a segment cut short outside observe
        except Exception:  # noqa: BLE001 - the store cannot even be listed: said below
            damaged = []
        if damaged:
            damaged_segments(damaged)
        polars = sys.modules.get("polars")  # an error of polars' comes from a command that imported it
        remote = [s for s in OPENED if not s.place.local]
        if remote and isinstance(exc, (OSError, *([polars.exceptions.PolarsError] if polars else []))):  # the object store
            err.print(f"[red]error:[/red] store {escape(remote[0].name)}: {escape(one_line(str(exc)))}",
                      highlight=False, soft_wrap=True)
            sys.exit(2)
        err.print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} (set OBSERVE_DEBUG=1 for the traceback)")
        sys.exit(1)


def _terminated(signum: int, _frame: object) -> None:
    """Python runs this once the main thread is back from native code (a long polars query finishes first):
    a second SIGTERM, or SIGKILL, ends the process at once."""
    signal.signal(signum, signal.SIG_DFL)
    raise SystemExit(128 + signum)


def _asked(args: list[str]) -> typer.Typer:
    """The app to run ``args``: where they start with a top-level command, an app of that command alone.
    Typer reads every command's signature to build any one of them (36 ms of each call, a sixth of a small
    query's); the one asked for is the same command, with the same options and help."""
    if not args or args[0] not in COMMANDS:
        return app
    one = typer.Typer(**APP)
    one.callback()(lambda: None)  # a group still: `observe query ...`, not `observe ...`
    one.command(args[0])(COMMANDS[args[0]])
    return one


def _fail_store(exc: Exception) -> None:
    """A store that is not safe to use, of an old layout or holding files of a newer one, found where a command
    met it (a planted link, an old store, an upgraded collector's files), or a temporary folder too full to decide
    copies in: bad input, one line and exit 2. Only a command that opened a store can raise them."""
    if "observe.store" not in sys.modules:
        return
    from observe.store import LegacyLayout, UnsafeStore

    copies = sys.modules.get("observe.copies")
    if isinstance(exc, (UnsafeStore, LegacyLayout, *((copies.SpillFailed,) if copies else ()))):
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    newer = re.search(r"extra column in file outside of expected schema: (\w+)", str(exc))
    if newer:  # read as it is, a file of a later layout would give wrong lines, not an error
        err.print(f"[red]error:[/red] the store holds files a newer observe wrote (column {escape(newer.group(1))!r}): "
                  "read it with that version or a later one", highlight=False, soft_wrap=True)
        sys.exit(2)
