"""``observe slurm``: the Prolog, Epilog and HealthCheckProgram hooks."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from observe.spans import parse_span

NAME = "slurm"
GROUP = typer.Typer(help="Slurm hooks: Prolog, Epilog and HealthCheckProgram. They always exit 0 (Slurm "
                        "drains a node whose hook fails), keep to --budget and log to --log.", no_args_is_help=True)
HookStore = Annotated[Optional[str], typer.Option("--store", help="Store for results, artifacts and the ledger "
                      "(default $OBSERVE_STORE; Slurm's hook environment has neither PATH nor yours: pass it).")]
HookPolicy = Annotated[Optional[str], typer.Option(help="Site policy TOML ([prolog], [epilog], [healthcheck], [drain]).")]
HookBudget = Annotated[Optional[str], typer.Option(help="Time limit (default: the policy's); keep it under Slurm's "
                       "PrologEpilogTimeout.")]
HookDry = Annotated[bool, typer.Option("--dry-run", help="Decide and record; drain and requeue nothing.")]
HookLog = Annotated[Optional[str], typer.Option(help="Append what the hook did to this file (default stderr, i.e. slurmd's log).")]


def _hook(kind: str, store: str | None, policy: str | None, budget: str | None, dry_run: bool, log: str | None) -> None:
    import os
    import sys

    hook = None
    try:
        from observe.health import hooks
        from observe.health import policy as pol
        from observe.store import Store

        rules_ = pol.load(policy)
        budget_s = (parse_span(budget) if budget else rules_.hook(kind).budget).total_seconds()
        hook = hooks.Hook(kind, dict(os.environ), rules_, Store(store or os.environ.get("OBSERVE_STORE") or "observe-store"),
                          dry_run)
        hooks.run(hook, budget_s)
        hooks.write_log(hook.log, log)
    except Exception as exc:  # noqa: BLE001 - a hook never fails: Slurm would drain the node
        try:
            hooks.write_log([*(hook.log if hook else []), hooks.line(kind, f"not run: {type(exc).__name__}: {exc}")], log)
        except Exception:  # noqa: BLE001 - not even the hooks module imports: stderr is slurmd's log
            print(f"observe {kind}: not run: {type(exc).__name__}: {exc}", file=sys.stderr)
    raise typer.Exit(0)


@GROUP.command("epilog")
def slurm_epilog_cmd(store: HookStore = None, policy: HookPolicy = None, budget: HookBudget = None, dry_run: HookDry = False,
                     log: HookLog = None) -> None:
    """Slurm Epilog: record the job's GPUs released, capture its artifacts (secrets redacted), run the [epilog] checks, drain
    the node on a FAIL, requeue a failed job that opted in (sbatch --requeue and '#OBSERVE requeue'
    in its script). Always exits 0."""
    _hook("epilog", store, policy, budget, dry_run, log)


@GROUP.command("prolog")
def slurm_prolog_cmd(store: HookStore = None, policy: HookPolicy = None, budget: HookBudget = None, dry_run: HookDry = False,
                     log: HookLog = None) -> None:
    """Slurm Prolog: record which GPUs the job holds (SLURM_JOB_GPUS -> UUID, PCI id), run the
    [prolog] checks before the job; on a FAIL drain the node and requeue an opted-in job so it
    starts elsewhere. Always exits 0."""
    _hook("prolog", store, policy, budget, dry_run, log)


@GROUP.command("healthcheck")
def slurm_healthcheck_cmd(store: HookStore = None, policy: HookPolicy = None, budget: HookBudget = None,
                          dry_run: HookDry = False, log: HookLog = None) -> None:
    """Slurm HealthCheckProgram: run the [healthcheck] checks; drain on a FAIL; resume a node observe
    drained once the checks it was drained for pass again. Always exits 0."""
    _hook("healthcheck", store, policy, budget, dry_run, log)
