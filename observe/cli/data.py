"""``observe ingest``, ``demo``, ``stats``, ``compact``, ``retention``, ``collect``, ``rules``, ``schema``: the store's
commands."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from observe.cli.base import (EngineOpt, RayAddressOpt, StoreOpt, command_table, damaged_segments, err, escape, existing_store,
                              fail, one_line, open_store, out, plain_table, when)
from observe.printable import printable
from observe.spans import parse_span, parse_time

if TYPE_CHECKING:  # the library (polars, pyarrow) is imported by the commands that use it: --help needs none of it
    from observe.ingest import Summary
    from observe.store import Store

COMMANDS, command = command_table()
COMPACT_WAIT_S = 120.0  # how long compaction waits for the lock an ingest holds while it marks copies


def _summary(s: Summary) -> None:
    mb = s.bytes / 1e6
    rate = mb / s.seconds if s.seconds else 0.0
    out.print(
        f"[bold]{s.files}[/bold] file(s), {mb:.1f} MB in {s.seconds:.1f}s ({rate:.1f} MB/s): "
        f"{s.records} records, {s.parsed_pct:.1f}% parsed, {s.unparsed} unparsed, "
        f"{s.stored} stored, {s.duplicates} already in the store, {s.blank} blank lines skipped"
        + (f", {s.expired} older than the store's retention (not stored again)" if s.expired else ""),
        highlight=False,
    )
    if s.quarantined:
        err.print(f"{s.quarantined} record(s) could not be parsed and were stored unparsed (attrs.parse_error); "
                  f"the first: {printable(s.parse_error)}", highlight=False, markup=False)
    if s.yearless:
        years = ", ".join(str(y) for y in sorted(s.years))
        err.print(f"{s.yearless} record(s) carry no year in their stamps: dated {years} by their files' last "
                  "modification (say the year with --year)", highlight=False, markup=False)
    if s.no_node:
        err.print(f"{s.no_node} kernel or GPU record(s) stored with no node: their lines name none and no --node, "
                  "--layout (e.g. '{node}/dmesg') or directory named after a node gave one", highlight=False, markup=False)
    if s.marks_pending:
        err.print(f"rows that copy another input's record (copy_of) not marked yet: {printable(s.marks_pending)}; "
                  "observe's own commands count each record once meanwhile", highlight=False, markup=False)
    if s.index_pending:
        err.print(f"the notable index is behind the table: {printable(s.index_pending)}; commands read those "
                  "segments themselves meanwhile", highlight=False, markup=False)
    table = plain_table("kind", "records")
    for kind, n in sorted(s.kinds.items(), key=lambda kv: (-kv[1], kv[0])):  # most first, ties by name
        table.add_row(kind, str(n))
    out.print(table)


def _path_nodes(paths: list[str], files: list[str], layout: str | None, store: Store) -> dict[str, str]:
    """Each file's node from its path (:mod:`observe.ingest.archive`): by ``layout``, else the nearest directory below
    the one given (``paths``) named after a node that Slurm's records in the store, or the files' own lines, name."""
    import os

    import polars as pl

    from observe.ingest import archive
    from queries import jobs

    if layout:
        return archive.layout_nodes(files, layout)
    ran = jobs.runs_on_nodes(store)
    # nodes of runs Slurm's own records told (a user's `logger -t slurmctld` line names any host it likes)
    known = (set(ran.filter("trusted").select(pl.col("node").unique()).collect().get_column("node").drop_nulls())
             if ran is not None else set())
    roots = [os.path.abspath(p) for p in paths if os.path.isdir(p)]
    below = {}
    for f in files:
        root = next((r for r in roots if os.path.abspath(f).startswith(os.path.join(r, ""))), None)
        if root is not None:
            below[f] = os.path.relpath(os.path.abspath(f), root)
    return archive.directory_nodes(below, known)


def _index_jobs(store: Store, summary: Summary) -> None:
    """Refresh the job index (where each job's records are) when the run stored job records."""
    from queries import jobs

    if any(summary.kinds.get(kind) for kind in jobs.RUN_KINDS):
        jobs.write_index(store)


def _waiting(store: Store) -> Callable[[], None]:
    return lambda: err.print(f"waiting for another ingest into {store.name} to finish ...", style="dim", highlight=False)


@command("ingest")
def ingest_cmd(
    paths: Annotated[list[str], typer.Argument(help="Files, directories (the store among them is skipped), globs, gzip, - for stdin, or a pipe such as <(journalctl -o short-iso).")],
    source: Annotated[str, typer.Option(help="Input format: auto, kernel, syslog, slurm, slurm_jobs, nccl, nvidia_smi, dcgm.")] = "auto",
    node: Annotated[Optional[str], typer.Option(help="Node the input came from (when lines do not name it, e.g. dmesg).")] = None,
    job: Annotated[Optional[str], typer.Option(help="Job id of job output (else taken from names like slurm-1234.out).")] = None,
    layout: Annotated[Optional[str], typer.Option(help="Where an archive's paths name the node, for lines that name none: "
                                                  "'{node}/dmesg', 'nodes/{node}/*'. Without it, a directory named after a "
                                                  "node Slurm's records or the files' own lines name is taken.")] = None,
    boot_time: Annotated[Optional[str], typer.Option(help="Boot time (ISO; without an offset, in --tz) to turn dmesg [seconds] stamps into wall-clock UTC.")] = None,
    tz: Annotated[str, typer.Option(help="Time zone of stamps that carry none (syslog, slurmctld).")] = "UTC",
    year: Annotated[Optional[int], typer.Option(help="Year of stamps that carry none (syslog's 'Nov 22 10:00:00'); "
                                                "default: each file's last modification's (a copied archive may need it).",
                                                min=1970, max=9999)] = None,
    workers: Annotated[int, typer.Option(help="Parse processes: 0 = one per 1.5 cores when there is over 64 MB to read.", min=0, max=256)] = 0,
    store: StoreOpt = None,
) -> None:
    """Parse log files into the store; re-ingesting the same bytes adds nothing.

    \b
    Example: observe ingest /var/log/slurm/slurmctld.log --node ctl1; dmesg | observe ingest - --source kernel --node gpu001;
    observe ingest logs/ (an archive of logs/<node>/dmesg, logs/<node>/syslog, ...)
    """
    from observe import process_env

    process_env.own_threads(process_env.PROCESS_CORES)  # before polars is imported
    from observe import rules
    from observe.ingest import InputError, ingest_inputs
    from observe.ingest.pool import WorkerError
    from observe.reader import input_files
    from observe.store import StoreBusy
    from observe.timeparse import zone as tz_zone

    st = open_store(store)
    try:
        missing: list[str] = []
        files = input_files(paths, skip=st.root if st.place.local else None, missing=missing)
        if missing and not files:
            fail(f"no such file: {missing[0]}")
        tz = tz_zone(tz)
        boot = parse_time(boot_time, tz=tz) if boot_time else None
        opts = dict(source=source, node=node, job=job, boot_time=boot, tz=tz, year=year)
        nodes = {} if node else _path_nodes(paths, files, layout, st)
        inputs = [(f, {**opts, "node": node or nodes.get(f)}) for f in files]
        total = sum(Path(f).stat().st_size for f in files if f != "-") if sys.stderr.isatty() else 0
        if total > 10_000_000:  # a bar for a person watching a long run
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=err, transient=True) as bar:
                task = bar.add_task("ingesting", total=total)
                summary = ingest_inputs(inputs, st, progress=lambda n: bar.advance(task, n), workers=workers or None,
                                        waiting=_waiting(st))
        else:
            summary = ingest_inputs(inputs, st, workers=workers or None, waiting=_waiting(st))
    except (InputError, ValueError, FileNotFoundError, rules.RuleError, WorkerError, StoreBusy) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or st.name}: {one_line(exc.strerror or str(exc))}")
    summary.failed[:0] = [f"{p}: no such file" for p in missing]
    _summary(summary)
    _index_jobs(st, summary)
    for line in summary.failed:
        err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    if summary.failed:
        raise typer.Exit(2)


@command("demo")
def demo_cmd(
    directory: Annotated[Path, typer.Option("--dir", help="Where the logs (DIR/logs) and the store (DIR/store) go.")] = Path("observe-demo"),
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster.")] = 16,
    hours: Annotated[float, typer.Option(help="Hours of logs.")] = 24,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same logs).")] = 0,
    end: Annotated[Optional[str], typer.Option(
        help="When the logs end: an ISO time (UTC) or a span before now (2h, 1d); default: the last whole hour. "
             "The same seed, nodes and hours give the same logs at any end, only shifted in time.")] = None,
) -> None:
    """Generate a small GPU cluster's logs with injected incidents, ingest them, show what is there.

    \b
    Example: observe demo --nodes 16 --hours 24 && observe query --store observe-demo/store --kind gpu_xid
    (--end 2026-11-20T00:00 gives everyone the same store, to compare with the README's tour)
    """
    from observe.ingest import ingest_inputs
    from observe.simulate import generate
    from queries.search import first_line, search

    start = when(end) - timedelta(hours=hours) if end else None
    logs, store = directory / "logs", open_store(str(directory / "store"))
    err.print(f"generating {nodes} nodes x {hours:g} h of logs in {logs} ...", highlight=False)
    manifest = generate(logs, nodes=nodes, hours=hours, seed=seed, start=start)
    summary = ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], store)
    _summary(summary)
    _index_jobs(store, summary)
    out.line()
    out.print(f"[bold]Injected incidents[/bold] (ground truth, {len(manifest.incidents)}):")
    for inc in manifest.incidents:
        out.print(f"  {inc['ts'][:19]}  job {inc['job_id']:>6}  {inc['type']:13} node={inc['node'] or '-'} gpu={inc['gpu'] or '-'}",
                  highlight=False)
    found = search(store, kinds=["gpu_xid", "gpu_fell_off_bus", "ib_link_down", "oom_kill", "slurm_node_not_responding"]).collect()
    out.line()
    out.print(f"[bold]What the store shows[/bold] (hardware and node events, {found.height}):")
    for r in found.head(30).iter_rows(named=True):
        ts = r["ts"].strftime("%Y-%m-%d %H:%M:%S") if r["ts"] else "-"
        out.print(f"  {ts}  {r['node'] or '-':8} {r['kind']:26} {first_line(r['message'])[:90]}", highlight=False, markup=False)
    out.line()
    out.print(f"Try: observe query --store {store.name} --kind nccl_timeout --limit 5")


@command("stats")
def stats_cmd(store: StoreOpt = None) -> None:
    """What the store holds, per source and month (segments, rows, bytes), and what collectors and
    Slurm hooks delivered that `observe compact` has not committed yet."""
    s = existing_store(open_store(store))
    df = s.stats()
    if damaged := s.upkeep.damaged():  # stats reads the log alone: look at the files too
        damaged_segments(damaged)
    if waiting := s.incoming.waiting():
        age = (time.time() * 1000 - min(ms for _, ms in waiting)) / 60_000
        out.print(f"{len(waiting)} segment(s) in incoming/ not committed yet, the oldest {age:.0f} min old: "
                  "they are seen once `observe compact` (central, every few minutes) commits them")
    if df.is_empty():
        out.print(f"{s.name}: empty store")
        return
    table = plain_table("source", "date", "segments", "rows", "MB")
    for r in df.iter_rows(named=True):
        table.add_row(r["source"], r["date"], str(r["segments"]), str(r["rows"]), f"{r['bytes'] / 1e6:.2f}")
    out.print(table)
    out.print(f"{s.name}: {df['rows'].sum()} events, {df['segments'].sum()} segments, {df['bytes'].sum() / 1e6:.2f} MB")


@command("compact")
def compact_cmd(
    store: StoreOpt = None,
    grace: Annotated[str, typer.Option(help="Keep replaced segments this long for queries already running (10m, 0s).")] = "10m",
    engine_name: EngineOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Commit the segments collectors and Slurm hooks delivered; merge each partition's new segments
    and small files into files sorted by time (committed in batches, duplicates dropped, memory
    bounded); delete segments replaced longer than --grace ago; refresh the job index. Run it
    centrally every few minutes (cron or a timer).

    With --engine ray the partitions are rewritten by Ray tasks at once (every worker must reach the
    store at the same location); this process commits."""
    from observe import process_env

    threads = min(process_env.cores(), process_env.COMPACT_THREADS)  # rewriting the batches
    process_env.own_threads(threads)  # before polars is imported
    from observe.store import StoreBusy, notable
    from queries import pattern_counts
    from queries.engine import EngineError, engine

    try:
        grace_s = parse_span(grace).total_seconds()
        run = engine(engine_name, ray_address)
    except (ValueError, EngineError) as exc:
        fail(str(exc))
    s = open_store(store)

    def busy() -> None:
        err.print(f"waiting up to {COMPACT_WAIT_S:.0f}s for the store's compaction lock (an ingest marking copies, "
                  "or another compaction)", highlight=False)

    try:
        with s.lock("compact", wait_s=COMPACT_WAIT_S, waiting=busy):
            adopted = s.incoming.adopt()
        if adopted:
            out.print(f"committed {adopted} segment(s) collectors and hooks delivered")
        parts = s.partitions()
        order = {p: i for i, p in enumerate(parts, 1)}

        def said(part, done: tuple[int, int]) -> None:
            out.print(f"[{order[part]}/{len(parts)}] {part.source}/{part.date}: {done[0]} segments, {done[1]} rows",
                      markup=False, highlight=False)

        merged = sum(n for n, _ in s.compactor.compact_many(parts, progress=said, pool=run.pool(), wait_s=COMPACT_WAIT_S,
                                                                threads=threads))
        indexed = notable.refresh(s)  # before the vacuum, which then deletes the index's replaced file too
        counted, why = pattern_counts.refresh(s, run)
        gone = s.upkeep.vacuum(grace_s)
    except (StoreBusy, EngineError) as exc:
        fail(str(exc))
    out.print(f"compacted {merged} segment(s); deleted {gone} file(s) replaced over {grace} ago or never committed")
    out.print(f"notable index: {indexed} segment(s) read")
    if counted or why:
        out.print(f"patterns' baseline: {counted} segment(s) counted" + (f"; {why}" if why else ""), markup=False,
                  highlight=False)
    from queries import jobs

    if s.partitions(sources=["slurm"]):
        out.print(f"job index: {jobs.write_index(s)} run(s)")


@command("retention")
def retention_cmd(
    keep: Annotated[str, typer.Option("--keep", help="How much to keep: 30d, 12h, 90m (whole days are dropped).")],
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be dropped; drop nothing.")] = False,
) -> None:
    """Drop the events older than --keep (from the start of that UTC day): the months before it whole, the
    files of its month that end before it, and the files holding events on both sides of it rewritten with
    the later ones; and events without a time (job output's NCCL lines) whose file was written before
    then; all in one commit. Dropped files are deleted after the grace period, as compaction's are. The
    store keeps the cutoff: a later ingest of old files stores none of it again."""
    from observe.store import StoreBusy
    from observe.store.layout import period

    try:
        span = parse_span(keep)
    except ValueError as exc:
        fail(str(exc))
    cutoff = (datetime.now(timezone.utc) - span).strftime("%Y-%m-%d")
    try:
        dropped = open_store(store).upkeep.expire(cutoff, dry_run=dry_run)
    except StoreBusy as exc:
        fail(f"{exc} (a compaction is running: try again when it is done)")
    for p in dropped:
        times = period(p.date)
        how = (" (its files written before the cutoff)" if times is None else
               f" (its events before {cutoff})" if times[1] > period(cutoff)[0] else "")
        out.print(f"{'would drop' if dry_run else 'dropped'} {p.source}/{p.date}{how}")
    out.print(f"{len(dropped)} partition(s) with events before {cutoff} {'would be ' if dry_run else ''}dropped or cut")


@command("convert")
def convert_cmd(store: StoreOpt = None) -> None:
    """Make a store written before observe kept a Delta table into one, in place: finish or undo its
    compaction notes, commit every live segment in one commit, and check that the events counted
    before and after are the same. Run it once, with no ingest or compaction running."""
    from observe.store import StoreBusy

    from observe.store.convert import ConvertError, convert

    s = existing_store(open_store(store))
    try:
        segments, events = convert(s)
    except (ConvertError, StoreBusy) as exc:
        fail(str(exc))
    out.print(f"{s.root}: {segments} segment(s), {events} events, now a Delta table ({s.events}); the next "
              "`observe compact` writes the job index again")


@command("repair")
def repair_cmd(store: StoreOpt = None) -> None:
    """Set aside the segments the table names that are damaged (cut short or overwritten outside
    observe) or gone: damaged files move to <store>/damaged/, and one commit drops them from the table,
    so every query runs again. Their events are lost to queries until a good copy is restored (put it
    in <store>/incoming/events/ with its partition path, and `observe compact` commits it)."""
    from observe.store import StoreBusy

    s = existing_store(open_store(store))
    try:
        gone = s.upkeep.repair()
    except StoreBusy as exc:
        fail(str(exc))
    for f in gone:
        out.print(f"set aside {escape(str(f))}")
    out.print(f"{len(gone)} segment(s) dropped from the table")


@command("collect")
def collect_cmd(
    config: Annotated[Path, typer.Option("--config", help="Collector config (TOML): inputs, spool, central store.")],
    once: Annotated[bool, typer.Option("--once", help="Collect what is there now, ship it and exit (tests, cron).")] = False,
) -> None:
    """Follow log files, /dev/kmsg and the journal, and poll commands (nvidia-smi, sacct), on this
    node into a local spool, and ship them to the central store.

    Positions survive kills and reboots; rotation (rename or copytruncate) and truncation are
    handled; every line is stored exactly once. Stops cleanly on SIGTERM. Counters:
    <spool>/stats.json. See docs/collector.toml for every setting.
    """
    from observe.collect_config import Config, ConfigError
    from observe.collect import NodeCollector

    try:
        node = NodeCollector(Config.load(config))
    except (ConfigError, ValueError, OSError) as exc:
        fail(str(exc))
    node.handle_signals()
    try:
        counters = node.run(once=once)
    finally:
        node.close()
    out.print(f"{counters.lines} lines, {counters.stored} events spooled, {counters.shipped_files} file(s) shipped, "
              f"{counters.spool_files} waiting, {counters.ship_failures} ship failure(s), {counters.dropped_records} dropped")


@command("rules")
def rules_cmd(check: Annotated[bool, typer.Option(help="Check every rule's examples; exit 1 on a failure.")] = False) -> None:
    """List the detection rules (built-in plus $OBSERVE_RULES directories), or check their examples."""
    from observe import rules

    try:
        listed = rules.describe()
        problems = rules.examples_report() if check else []
    except rules.RuleError as exc:
        fail(str(exc))
    if check:
        for p in problems:
            err.print(p, highlight=False)
        out.print(f"{len(listed)} rules, {len(problems)} problem(s)")
        raise typer.Exit(1 if problems else 0)
    table = plain_table("source", "kind", "severity", "defined in")
    for r in listed:
        table.add_row(r["source"], r["kind"], r["severity"], r["where"])
    out.print(table)


@command("schema")
def schema_cmd() -> None:
    """The event schema: every stored field and what it holds."""
    from observe.schema import DESCRIPTIONS, FIELDS

    for name in FIELDS:
        out.print(f"[bold]{name:10}[/bold] {DESCRIPTIONS[name]}", highlight=False)
