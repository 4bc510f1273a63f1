"""``observe health`` (checks and their policy), ``drain`` and ``resume``."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from observe.cli.base import StoreOpt, command_table, escape, fail, open_store, out, plain_table, when
from observe.health.checks import NAMES
from observe.hostname import this_node
from observe.spans import parse_span

NAME = "health"
GROUP = typer.Typer(help="Node health checks (GPU burn, all-reduce, GPU count, InfiniBand) and their policy.",
                         no_args_is_help=True)
COMMANDS, command = command_table()  # drain and resume, top-level commands


@GROUP.command("run")
def health_run_cmd(
    checks: Annotated[str, typer.Option(help=f"Comma-separated checks, in order, of: {', '.join(NAMES)} "
                                        "(explain needs the epilog's job).")] =
        "gpu_count,disk,nvml,fabric,ib,gpu_burn,allreduce",
    budget: Annotated[str, typer.Option(help="Time for all checks together (90s, 5m); a burn is shortened to fit.")] = "5m",
    policy: Annotated[Optional[str], typer.Option(help="Site policy TOML merged over the built-in one.")] = None,
    device: Annotated[str, typer.Option(help="auto (GPUs when present) or cpu.")] = "auto",
    seconds: Annotated[Optional[float], typer.Option(help="Override gpu_burn's seconds.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per check).")] = "table",
    record: Annotated[bool, typer.Option(help="Also store the results as health_check events in --store.")] = False,
    node: Annotated[Optional[str], typer.Option(help="Node name for recorded results (default: short host name).")] = None,
    store: StoreOpt = None,
) -> None:
    """Run health checks, each in its own process within the budget: PASS, FAIL (with the policy's
    action: drain, reset, reboot) or UNKNOWN (could not run: never a pass or a fail).

    Exit status: 0 when nothing failed, 1 when a check failed, 2 on bad usage.
    """
    from observe.health import policy as pol
    from observe.health.runner import CHECKS, as_events, run_checks

    names = [c.strip() for c in checks.split(",") if c.strip()]
    bad = [c for c in names if c not in CHECKS]
    if bad:
        fail(f"unknown check(s) {', '.join(bad)}: use {', '.join(CHECKS)}")
    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    if device not in ("auto", "cpu"):
        fail(f"--device {device!r}: use auto or cpu")
    try:
        budget_s = parse_span(budget).total_seconds()
        rules_ = pol.load(policy)
    except (ValueError, pol.PolicyError) as exc:
        fail(str(exc))
    overrides = {"device": device, **({"seconds": seconds} if seconds is not None else {})}
    results = run_checks(names, rules_, budget_s, overrides)
    if fmt == "json":
        for r in results:
            print(r.to_json())
    else:
        table = plain_table("check", "status", "seconds", "action", "summary")
        colour = {"PASS": "green", "FAIL": "red", "UNKNOWN": "yellow"}
        for r in results:
            table.add_row(r.check, f"[{colour[r.status.value]}]{r.status.value}[/]", f"{r.seconds:.1f}", r.action,
                          escape(r.summary))
        out.print(table)
    if record:
        open_store(store).write(as_events(results, node or this_node(), rules_.version))
    raise typer.Exit(1 if any(r.status.value == "FAIL" for r in results) else 0)


@GROUP.command("inject-fault")
def inject_fault_cmd(
    xid: Annotated[int, typer.Option(help="Xid code: 79 (fallen off the bus), 48 (double-bit ECC), 13 (application).")] = 79,
    gpu: Annotated[str, typer.Option(help="PCI bus id of the GPU it names.")] = "0000:3b:00",
    to: Annotated[str, typer.Option("--to", help="/dev/kmsg (needs root), or a kernel log file to append to.")] =
        "/dev/kmsg",
    node: Annotated[Optional[str], typer.Option(help="Node name for a log file's lines (default: short host name).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Really: the checks and hooks will take it for a real fault "
                                      "and may drain this node.")] = False,
) -> None:
    """Write a synthetic Xid line to the kernel log, for drills: the collector, xid_history and the
    Slurm hooks treat it as real (its process name, observe-drill, marks it in the evidence).

    \b
    Example: observe health inject-fault --xid 79 --yes   then watch: observe query --kind gpu_xid --since 5m
    """
    from observe.health.drill import inject

    if not yes:
        fail("a drill can drain this node: add --yes to write the fault")
    try:
        line = inject(xid, gpu, to, node or this_node())
    except ValueError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{to}: {exc.strerror or exc}")
    out.print(f"wrote to {escape(to)}: {escape(line.strip())}")


@GROUP.command("set-healthy")
def set_healthy_cmd(
    node: Annotated[str, typer.Argument(help="Slurm node name.")],
    did: Annotated[str, typer.Option(help="What was done: reset (GPU reset), reboot, replace (hardware swapped), "
                                     "or none (a false alarm: ends the faults, counts as no remediation).")],
    gpu: Annotated[Optional[str], typer.Option(help="Only this GPU's faults (PCI bus id); default: the whole node.")] = None,
    note: Annotated[str, typer.Option(help="Free text for the ledger (ticket, what was seen).")] = "",
    store: StoreOpt = None,
) -> None:
    """Record that a node's (or one GPU's) faults were dealt with (after a reset, reboot, swap).

    The fault policy then takes every earlier fault there as ended, so the next check passes and the
    healthcheck hook returns the node (or run `observe resume NODE`). A fault that comes back climbs
    the remedy ladder: reset -> reboot -> replace.

    \b
    Example: observe health set-healthy gpu017 --gpu 0000:3b:00 --did reset --note "nvidia-smi -r, INC-4411"
    """
    from observe.health.recovery import fault_cleared
    from observe.health.slurm import SlurmError

    try:
        event = fault_cleared(node, gpu, did, note)
    except (ValueError, SlurmError) as exc:
        fail(str(exc))
    open_store(store).write(event)
    out.print(f"recorded: {escape(event['message'][0])}")


@GROUP.command("breaker")
def breaker_cmd(
    reset: Annotated[bool, typer.Option("--reset", help="Close the breaker: drains may happen again. Faults that "
                                        "ended before now are not replayed.")] = False,
    note: Annotated[str, typer.Option(help="Why it is safe to reset (for the ledger).")] = "",
    store: StoreOpt = None,
) -> None:
    """The drain breaker: open once the drain budget is exhausted; then no drain until reset.

    Many nodes failing at once points to a shared cause (a switch, a driver roll-out), so once the
    budget is spent every drain is refused until a person has looked and resets it.

    Exit status: 0 closed (or just reset), 1 open.
    """
    import os

    from observe.health.drain import breaker, reset_breaker

    st = open_store(store)
    tripped, last_reset = breaker(st)
    if reset:
        reset_breaker(st, os.environ.get("SUDO_USER") or os.environ.get("USER") or "unknown", note)
        out.print("breaker reset: drains allowed again" + (f" (it was open since {tripped:%Y-%m-%d %H:%M:%S}Z)"
                                                           if tripped else " (it was closed)"))
        return
    if tripped is None:
        out.print("breaker closed" + (f" (last reset {last_reset:%Y-%m-%d %H:%M:%S}Z)" if last_reset else ""))
        return
    out.print(f"breaker OPEN since {tripped:%Y-%m-%d %H:%M:%S}Z: every drain is refused; look at "
              "`observe query --kind drain_budget_exhausted --since 1d`, then `observe health breaker --reset`")
    raise typer.Exit(1)


def _section_and_nodes(fmt: str, policy: str | None, section: str, node: str | None) -> tuple[dict, list[str] | None]:
    """A listing command's checked --format, its policy section and its --node list (one-line errors)."""
    from observe.health import policy as pol
    from observe.hostlists import expand_nodes

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    try:
        return getattr(pol.load(policy), section), expand_nodes(node) if node else None
    except (ValueError, pol.PolicyError) as exc:
        fail(str(exc))


@GROUP.command("faults")
def faults_cmd(
    since: Annotated[str, typer.Option(help="Look this far back (ISO time or span: 2h, 7d).")] = "7d",
    node: Annotated[Optional[str], typer.Option(help="Nodes (gpu[001-016]).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Also faults that ended (recovery, reboot, clearing event).")] = False,
    policy: Annotated[Optional[str], typer.Option(help="Site policy TOML ([faults]).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per fault episode).")] = "table",
    store: StoreOpt = None,
) -> None:
    """Fault episodes in the store and the remedy the fault policy calls for.

    One row per fault episode (repeated lines folded), open or ended, with its remedy on the ladder
    (reset, reboot, replace) and the reason. Faults that came only through a route users write (kernel
    lines in a syslog file) are listed too, act "verify": evidence for an active check, never acted on.

    \b
    Example: observe health faults --since 1d --node 'gpu[001-064]'
    """
    from datetime import datetime, timezone

    import polars as pl

    from observe.health import faults
    from observe.health.drain import breaker
    from observe.copies import one_per_record

    rules_, nodes = _section_and_nodes(fmt, policy, "faults", node)
    st = open_store(store)
    lf = st.scan(sources=["kernel", "health"], since=when(since))
    if nodes:
        lf = lf.filter(pl.col("node").is_in(nodes))
    lf, now, reset = one_per_record(lf).collect().lazy(), datetime.now(timezone.utc), breaker(st)[1]  # read once, decided twice
    decided = pl.concat([faults.decide(lf, rules_, now, reset), faults.decide(lf, rules_, now, reset, confirmed=False)])
    if not all_:
        decided = decided.filter("open")
    if fmt == "json":
        for row in decided.drop("message").iter_rows(named=True):
            print(json.dumps(row, default=str))
        return
    table = plain_table("node", "first", "last", "remedy", "act", "reason")
    for r in decided.iter_rows(named=True):
        act = "yes" if r["acting"] else ("ended" if not r["open"] else "verify" if not r["confirmed"] else
                                        "observe-only" if r["observe_only"] else "stale" if r["stale"] else "no")
        table.add_row(escape(r["node"] or ""), f"{r['first_ts']:%m-%d %H:%M}" if r["first_ts"] else "?",
                      f"{r['last_ts']:%m-%d %H:%M}" if r["last_ts"] else "?", r["remedy"], act, escape(r["reason"]))
    out.print(table)
    unconfirmed = decided.filter(~pl.col("confirmed")).height
    out.print(f"{decided.height} fault episodes{'' if all_ else ' open'}; "
              f"{decided.filter('acting').get_column('node').n_unique()} nodes call for a remedy"
              + (f"; {unconfirmed} unconfirmed (only a route users write carried them: verify with observe health "
                 "check, never acted on)" if unconfirmed else ""))


@GROUP.command("drains")
def drains_cmd(
    since: Annotated[str, typer.Option(help="Look this far back (ISO time or span: 2h, 7d).")] = "7d",
    node: Annotated[Optional[str], typer.Option(help="Nodes (gpu[001-016]).")] = None,
    by: Annotated[Optional[str], typer.Option(help="Only drains by observe, nhc, slurm, admin or unknown.")] = None,
    policy: Annotated[Optional[str], typer.Option(help="Site policy TOML ([drain] owners).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per drain or return).")] = "table",
    store: StoreOpt = None,
) -> None:
    """Every drain and return of a node, whoever made it: observe, NHC, an admin or Slurm itself.

    From observe's ledger, the drains the healthcheck hook saw set by others (their reason and
    [user@time]), and slurmctld's log when it is collected. Who drained is read from the reason by
    the policy's [drain] owners.

    \b
    Example: observe health drains --since 30d --by nhc
    """
    import polars as pl

    from queries import drains

    rules_, nodes = _section_and_nodes(fmt, policy, "drain", node)
    lf = drains.history(open_store(store).scan(sources=["health", "slurm"], since=when(since)), rules_)
    if nodes:
        lf = lf.filter(pl.col("node").is_in(nodes))
    if by:
        lf = lf.filter(pl.col("by") == by)
    found = lf.collect()
    if fmt == "json":
        for row in found.iter_rows(named=True):
            print(json.dumps(row, default=str))
        return
    table = plain_table("time", "node", "what", "by", "user", "reason")
    for r in found.iter_rows(named=True):
        table.add_row(f"{r['ts']:%Y-%m-%d %H:%M:%S}" if r["ts"] else "?", escape(r["node"] or ""), r["what"] or "",
                      r["by"] or "", escape(r["user"] or ""), escape(r["reason"] or ""))
    out.print(table)
    drained = found.filter(pl.col("what") != "resume")
    counts = drained.group_by("by").len().sort("len", descending=True)
    who = ", ".join(f"{n} by {b}" for b, n in counts.iter_rows())
    out.print(f"{drained.height} drains on {found.get_column('node').n_unique()} nodes" + (f": {who}" if who else ""))


def _drain_or_resume(node: str, reason: str | None, policy: str | None, store: str | None, dry_run: bool,
                     force: bool = False) -> None:
    from observe.health import policy as pol
    from observe.health.drain import Drainer
    from observe.health.slurm import SlurmError

    try:
        drainer = Drainer(pol.load(policy), open_store(store), dry_run=dry_run)
        decisions = drainer.drain(node, reason) if reason is not None else drainer.resume(node, force=force)
    except (pol.PolicyError, SlurmError) as exc:
        fail(str(exc))
    for d in decisions:
        out.print(f"{d.kind} {escape(d.node)}: {escape(d.detail)}{' (dry run)' if d.dry_run else ''}")
    if not any(d.kind in ("node_drain", "node_resume") for d in decisions):
        raise typer.Exit(1)


@command("drain")
def drain_cmd(
    node: Annotated[str, typer.Argument(help="Slurm node name.")],
    reason: Annotated[str, typer.Option(help="Why (stored as 'observe: <reason>').")],
    policy: Annotated[Optional[str], typer.Option(help="Site policy TOML ([drain] budget).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide and record, drain nothing.")] = False,
    store: StoreOpt = None,
) -> None:
    """Drain a node in Slurm, within the drain budget; never over a reason someone else set.

    Every decision (drained, refused, budget exhausted) goes to the store's drain ledger.
    Exit status: 0 drained, 1 refused, 2 error.
    """
    _drain_or_resume(node, reason, policy, store, dry_run)


@command("resume")
def resume_cmd(
    node: Annotated[str, typer.Argument(help="Slurm node name.")],
    policy: Annotated[Optional[str], typer.Option(help="Site policy TOML.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide and record, resume nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Resume although the checks it was drained for have not "
                                        "passed since (recorded as forced).")] = False,
    store: StoreOpt = None,
) -> None:
    """Return a node observe drained to service once the checks it was drained for have passed
    since (recorded results in the store); a drain set by someone else is left alone.
    Exit status: 0 resumed, 1 refused, 2 error."""
    _drain_or_resume(node, None, policy, store, dry_run, force)
