"""What every ``observe`` command shares: the app, the consoles, the store option, one-line errors."""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer

from observe.printable import printable
from observe.spans import parse_time

if TYPE_CHECKING:  # the store (polars, pyarrow) is imported by the commands that open one: --help needs neither
    from rich.console import Console
    from rich.table import Table

    from observe.store import Store

APP = dict(  # the app's settings, also those of a command run alone (observe/cli/__init__.py)
    help="Log aggregation and failure analysis for GPU training clusters run by Slurm.\n\n"
    "The store is --store, else $OBSERVE_STORE, else ./observe-store.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
)
app = typer.Typer(**APP)


def _safe_console(**options: object) -> Console:
    """A console that shows control characters escaped in every string it renders (print
    arguments and table cells alike): log text reaches the terminal as text, never as commands
    to it, whichever command or column shows it. Markup is still parsed after, so log text in
    markup strings still needs :func:`escape`."""
    from rich.console import Console
    from rich.text import Text

    class SafeConsole(Console):
        def render_str(self, text: str, **kwargs: object) -> Text:
            return super().render_str(printable(text), **kwargs)

    return SafeConsole(**options)


class _Console:
    """A safe console made when first printed to: importing rich is a fifth of a command's start-up, and
    ``--help`` or a query's CSV never prints through it."""

    def __init__(self, **options: object) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> object:
        if self._console is None:
            self._console = _safe_console(**self._options)
        return getattr(self._console, name)


out = _Console(emoji=False, highlight=False, soft_wrap=True)
err = _Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)


def escape(text: str) -> str:
    """``text`` with what rich would read as markup escaped (rich.markup.escape)."""
    from rich.markup import escape as escaped

    return escaped(text)


def plain_table(*columns: str) -> Table:
    """A plain table of ``columns`` for the consoles (no box, no padding at its edges)."""
    from rich.table import Table

    return Table(*columns, box=None, pad_edge=False)

StoreOpt = Annotated[Optional[str], typer.Option("--store", help="Store: a directory or an object store URL, s3://bucket/prefix (default $OBSERVE_STORE or ./observe-store).")]


EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", help="polars (here, the default) or ray (a Ray cluster; needs observe[ray]); default $OBSERVE_ENGINE.")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", help="A running Ray cluster (ray://head:10001, or auto); default $RAY_ADDRESS, else a local one.")]


COLOUR = re.compile(r"\x1b\[[0-9;]*m")


OPENED: list[Store] = []  # the stores this command opened (what an unreadable file is looked for in)


def command_table() -> tuple[dict[str, Callable], Callable[[str], Callable]]:
    """A command module's own table of top-level commands (``observe.cli`` registers them on the app,
    in order) and the decorator that fills it."""
    table: dict[str, Callable] = {}

    def command(name: str) -> Callable[[Callable], Callable]:
        def add(fn: Callable) -> Callable:
            table[name] = fn
            return fn
        return add

    return table, command


def open_store(path: str | None) -> Store:
    """The store named by ``--store``, $OBSERVE_STORE or ./observe-store; a one-line error if it cannot be one."""
    from observe.store import Store

    try:
        store = Store(path or os.environ.get("OBSERVE_STORE") or "observe-store")
    except ValueError as exc:
        fail(str(exc))
        raise
    if store.place.local and store.root.exists() and not store.root.is_dir():
        fail(f"store {store.root}: not a directory")
    if all(s.root != store.root for s in OPENED):
        OPENED.append(store)
    return store


def damaged_segments(damaged: list[Path]) -> NoReturn:
    """The one-line error for live segments that are not whole Parquet files, and exit 2."""
    more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
    err.print(f"[red]error:[/red] the store holds a damaged segment, {escape(str(damaged[0]))}{more}: `observe "
              f"repair` sets {'them' if more else 'it'} aside (their events are lost to queries until a good copy is "
              "restored)", highlight=False, soft_wrap=True)
    sys.exit(2)


def existing_store(store: Store) -> Store:
    """``store``, or a one-line error if it is not there (a mistyped path would read as empty)."""
    if not store.exists():
        what = "no such directory" if store.place.local else "nothing stored there"
        fail(f"store {store.name}: {what} (nothing ingested there yet? --store or $OBSERVE_STORE names it)")
    return store


def one_line(message: str) -> str:
    """An object store client's error (delta-rs and polars nest causes on coloured lines, each
    behind an arrow) as one line: its causes joined by colons."""
    lines = [COLOUR.sub("", line).strip(" \t↳") for line in message.splitlines()]
    return ": ".join(line for line in lines if line)


def fail(message: str) -> None:
    """The one-line error every command ends with on bad input (exit status 2, never a traceback)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def when(text: str | None) -> datetime | None:
    """A time the user gave (--since, --until, ...); a one-line error if it is not one."""
    try:
        return parse_time(text) if text else None
    except ValueError as exc:
        fail(str(exc))
    return None
