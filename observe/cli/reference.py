"""The CLI reference page (docs/cli-reference.md), written from the commands themselves so that it cannot drift
from them: each command's help, its arguments and options with their help and defaults.
``python -m observe.cli.reference > docs/cli-reference.md`` rewrites it; a test checks it is current."""
from __future__ import annotations

import click
import typer.main

from observe.cli import app

HEAD = ("# CLI reference\n\nWritten from the commands themselves (`python -m observe.cli.reference > "
        "docs/cli-reference.md`); `observe COMMAND --help` says the same. [cli.md](cli.md) has the overview.\n")


def _walk(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    """Every command under ``group``, in the order ``observe --help`` lists them."""
    found = []
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        if isinstance(cmd, click.Group):
            found += _walk(cmd, f"{prefix} {name}")
        else:
            found.append((f"{prefix} {name}", cmd))
    return found


def _param(p: click.Parameter) -> str:
    """One row of a command's parameter table."""
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    if isinstance(p, click.Argument):
        names = f"`{p.human_readable_name}`" + (" ..." if p.nargs == -1 else "")
    text = " ".join(((getattr(p, "help", None) or "")).split()).replace("|", "\\|")
    shown = p.default not in (None, False, (), []) and not callable(p.default) and not getattr(p, "is_flag", False)
    default = f" (default: `{p.default}`)" if shown else ""
    return f"| {names} | {text}{default}{' (required)' if p.required else ''} |"


def render() -> str:
    """The whole page, as markdown."""
    out = [HEAD]
    for name, cmd in _walk(typer.main.get_command(app), "observe"):
        lines = [line for line in (cmd.help or "").strip().splitlines() if line != "\b"]  # click's "keep these lines"
        examples = [line.removeprefix("Example:").strip() for line in lines if line.startswith("Example:")]
        out += [f"## `{name}`", "", "\n".join(line for line in lines if not line.startswith("Example:")).strip(), ""]
        if examples:
            out += ["```sh", *examples, "```", ""]
        params = [p for p in cmd.params if p.name != "help"]
        if params:
            out += ["| argument or option | what it is |", "|---|---|", *(_param(p) for p in params), ""]
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(render(), end="")
