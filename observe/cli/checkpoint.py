"""``observe checkpoint``: the checkpoint a requeued job resumes from."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from observe.cli.base import err, escape, fail

NAME = "checkpoint"
GROUP = typer.Typer(help="Checkpoints a requeued job resumes from.", no_args_is_help=True)


@GROUP.command("latest")
def checkpoint_latest_cmd(
    directory: Annotated[str, typer.Argument(help="Where the job writes its checkpoints.")],
    fmt: Annotated[str, typer.Option("--format", help="path (just the path) or json (with what was skipped and why).")] =
        "path",
    trust: Annotated[Optional[bool], typer.Option("--trust/--no-trust", help="Read torch.distributed.checkpoint "
                     "metadata (it is a pickle: runs code) to check every shard; default: for your own files only.")] = None,
) -> None:
    """The newest complete checkpoint in DIRECTORY (a torch.distributed.checkpoint directory, a
    torch.save or safetensors file, or a directory of them); incomplete ones are skipped.

    In a job script:  CKPT=$(observe checkpoint latest /ckpt/run1) && python train.py --resume "$CKPT"

    Exit status: 0 found, 1 none complete, 2 error.
    """
    from observe import checkpoint

    if fmt not in ("path", "json"):
        fail(f"unknown format {fmt!r}: use path or json")
    try:
        best, skipped = checkpoint.latest(directory, trust)
    except OSError as exc:
        fail(str(exc))
    if fmt == "json":
        print(json.dumps(checkpoint.to_dict(best, skipped)))
    elif best is not None:
        print(best.path)
    if best is None:
        err.print(f"no complete checkpoint in {escape(directory)}" + (f" ({len(skipped)} incomplete skipped)" if skipped else ""))
        raise typer.Exit(1)
