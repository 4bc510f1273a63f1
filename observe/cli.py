"""The ``observe`` command line: thin commands over the library, one clear line on bad input."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import polars as pl
import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from observe import rules
from observe.cli_base import OPENED, StoreOpt, app, err, existing_store, fail, open_store, out, when
from observe.ingest import InputError, Summary, ingest
from observe.ingest.pool import WorkerError
from observe.printable import printable
from observe.reader import input_files
from observe.schema import DESCRIPTIONS, FIELDS
from observe.timeparse import zone as tz_zone
from observe.store import Store, StoreBusy, UnsafeStore
from queries.search import expand_nodes, first_line, parse_span, parse_time, search

def _summary(s: Summary) -> None:
    mb = s.bytes / 1e6
    rate = mb / s.seconds if s.seconds else 0.0
    out.print(
        f"[bold]{s.files}[/bold] file(s), {mb:.1f} MB in {s.seconds:.1f}s ({rate:.1f} MB/s): "
        f"{s.records} records, {s.parsed_pct:.1f}% parsed, {s.unparsed} unparsed, "
        f"{s.stored} stored, {s.duplicates} already in the store, {s.blank} blank lines skipped",
        highlight=False,
    )
    table = Table("kind", "records", box=None, pad_edge=False)
    for kind, n in s.kinds.most_common():
        table.add_row(kind, str(n))
    out.print(table)


def _index_jobs(store: Store, summary: Summary) -> None:
    """Refresh the job index (where each job's records are) when the run stored job records."""
    from queries import jobs

    if any(summary.kinds.get(kind) for kind in jobs.RUN_KINDS):
        jobs.write_index(store)


def _waiting(store: Store) -> Callable[[], None]:
    return lambda: err.print(f"waiting for another ingest into {store.root} to finish ...", style="dim", highlight=False)


@app.command("ingest")
def ingest_cmd(
    paths: Annotated[list[str], typer.Argument(help="Files, directories (the store among them is skipped), globs, gzip, - for stdin, or a pipe such as <(journalctl -o short-iso).")],
    source: Annotated[str, typer.Option(help="Input format: auto, kernel, syslog, slurm, slurm_jobs, nccl, nvidia_smi, dcgm.")] = "auto",
    node: Annotated[Optional[str], typer.Option(help="Node the input came from (when lines do not name it, e.g. dmesg).")] = None,
    job: Annotated[Optional[str], typer.Option(help="Job id of job output (else taken from names like slurm-1234.out).")] = None,
    boot_time: Annotated[Optional[str], typer.Option(help="Boot time (ISO; without an offset, in --tz) to turn dmesg [seconds] stamps into wall-clock UTC.")] = None,
    tz: Annotated[str, typer.Option(help="Time zone of stamps that carry none (syslog, slurmctld).")] = "UTC",
    workers: Annotated[int, typer.Option(help="Parse processes: 0 = one per core when there is over 64 MB to read.", min=0, max=256)] = 0,
    store: StoreOpt = None,
) -> None:
    """Parse log files into the store; re-ingesting the same bytes adds nothing.

    Example: observe ingest /var/log/slurm/slurmctld.log --node ctl1; dmesg | observe ingest - --source kernel --node gpu001
    """
    st = open_store(store)
    try:
        missing: list[str] = []
        files = input_files(paths, skip=st.root, missing=missing)
        if missing and not files:
            fail(f"no such file: {missing[0]}")
        tz = tz_zone(tz)
        boot = parse_time(boot_time, tz=tz) if boot_time else None
        opts = dict(source=source, node=node, job=job, boot_time=boot, tz=tz)
        total = sum(Path(f).stat().st_size for f in files if f != "-")
        if sys.stderr.isatty() and total > 10_000_000:
            with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=err, transient=True) as bar:
                task = bar.add_task("ingesting", total=total)
                summary = ingest(files, st, progress=lambda n: bar.advance(task, n), workers=workers or None,
                                 waiting=_waiting(st), **opts)
        else:
            summary = ingest(files, st, workers=workers or None, waiting=_waiting(st), **opts)
    except (InputError, ValueError, FileNotFoundError, rules.RuleError, WorkerError, StoreBusy) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    summary.failed[:0] = [f"{p}: no such file" for p in missing]
    _summary(summary)
    _index_jobs(st, summary)
    for line in summary.failed:
        err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    if summary.failed:
        raise typer.Exit(2)


@app.command("demo")
def demo_cmd(
    directory: Annotated[Path, typer.Option("--dir", help="Where the logs (DIR/logs) and the store (DIR/store) go.")] = Path("observe-demo"),
    nodes: Annotated[int, typer.Option(help="Nodes in the cluster.")] = 16,
    hours: Annotated[float, typer.Option(help="Hours of logs.")] = 24,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same logs).")] = 0,
) -> None:
    """Generate a small GPU cluster's logs with injected incidents, ingest them, show what is there.

    Example: observe demo --nodes 16 --hours 24 && observe query --store observe-demo/store --kind gpu_xid
    """
    from observe.demo import generate
    from observe.ingest import ingest_inputs

    logs, store = directory / "logs", open_store(str(directory / "store"))
    err.print(f"generating {nodes} nodes x {hours:g} h of logs in {logs} ...", highlight=False)
    manifest = generate(logs, nodes=nodes, hours=hours, seed=seed)
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
    out.print(f"Try: observe query --store {store.root} --kind nccl_timeout --limit 5")


@app.command("query")
def query_cmd(
    since: Annotated[Optional[str], typer.Option(help="Start: ISO time or span before now (30m, 2h, 7d).")] = None,
    until: Annotated[Optional[str], typer.Option(help="End (exclusive): ISO time or span before now.")] = None,
    node: Annotated[Optional[str], typer.Option(help="Slurm hostlist, e.g. gpu[001-004,010].")] = None,
    source: Annotated[Optional[list[str]], typer.Option(help="Source (repeatable): slurm, syslog, kernel, nccl, gpu, health.")] = None,
    kind: Annotated[Optional[list[str]], typer.Option(help="Event kind (repeatable), e.g. gpu_xid.")] = None,
    job: Annotated[Optional[str], typer.Option(help="Job id.")] = None,
    grep: Annotated[Optional[str], typer.Option(help="Regex on the message (Rust syntax).")] = None,
    limit: Annotated[int, typer.Option(help="Most rows to print (0 = all); stderr says when more matched.", min=0, max=10**12)] = 100,
    fmt: Annotated[str, typer.Option("--format", help="table, json (one object per line) or csv.")] = "table",
    store: StoreOpt = None,
) -> None:
    """Search events.

    Example: observe query --since 2h --node 'gpu[001-016]' --kind gpu_xid --format json
    """
    if fmt not in ("table", "json", "csv"):
        fail(f"unknown format {fmt!r}: use table, json or csv")
    try:
        start, end, nodes = when(since), when(until), expand_nodes(node) if node else None
        if start and end and end <= start:
            fail(f"--until {until} is not after --since {since}")
        st = open_store(store)
        lf = search(st, since=start, until=end, nodes=nodes, sources=source, kinds=kind, job=job, grep=grep)
        existing_store(st)
        df = (lf.head(limit + 1) if limit else lf).collect()
    except ValueError as exc:
        fail(str(exc))
    more = bool(limit) and df.height > limit
    df = df.head(limit) if more else df
    if fmt == "json":
        for row in df.with_columns(pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")).iter_rows(named=True):
            row["attrs"] = json.loads(row["attrs"]) if row["attrs"] else None
            sys.stdout.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        sys.stdout.write(df.write_csv())
    else:
        width = out.width if sys.stdout.isatty() else None
        out.print(f"{'ts':19} {'node':10} {'kind':24} {'sev':7} {'job':>8} {'gpu':10} {'code':>5}  message", style="bold")
        for r in df.iter_rows(named=True):
            ts = r["ts"].strftime("%Y-%m-%d %H:%M:%S") if r["ts"] else "-"
            code = "" if r["code"] is None else str(r["code"])
            line = printable(f"{ts:19} {r['node'] or '-':10} {r['kind']:24} {r['severity']:7} {r['job_id'] or '':>8} "
                             f"{r['gpu'] or '':10} {code:>5}  {first_line(r['message'])}")  # escaped, then cut to width
            out.print(line[:width] if width else line, overflow="ignore", crop=False, markup=False)
    if more:
        err.print(f"the first {limit} rows; more match (raise --limit, 0 = all)", style="dim", highlight=False)
    elif fmt == "table":
        err.print(f"{df.height} row(s)", style="dim")


@app.command("explain")
def explain_cmd(
    job: Annotated[str, typer.Argument(help="Slurm job id, e.g. 1234 or 1234_7.")],
    at: Annotated[Optional[str], typer.Option(help="Explain the run that was running at this time (a requeued job has several).")] = None,
    before: Annotated[str, typer.Option(help="Look this far before the run started.")] = "15m",
    after: Annotated[str, typer.Option(help="Look this far after it ended.")] = "10m",
    fmt: Annotated[str, typer.Option("--format", help="table (a report) or json.")] = "table",
    plot: Annotated[Optional[Path], typer.Option(help="Also draw the per-node timeline to this file (.html).")] = None,
    store: StoreOpt = None,
) -> None:
    """Why did a job fail: ranked root causes across its nodes and sources, with the evidence.

    Reads the job's Slurm record (nodes, start, end, state), every event on its nodes around it and
    each node's unrecovered faults before it; hardware and kernel events before the first NCCL
    timeout outrank what every rank reports, and what the node or the fleet also logs while jobs
    succeed weighs less. Each candidate lists its evidence, for (+) and against (-).

    The verdict is UNDETERMINED when only symptoms or background remain or the call is close;
    confidence is the measured chance of being right (the calibration table of causes.toml). The weights are
    data: queries/causes.toml (override with a causes.toml in $OBSERVE_RULES).

    Examples: observe explain 127427 --format json;  observe explain 127427 --plot job.html
    """
    from queries.explain import explain
    from queries.report import report

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    if plot is not None and plot.suffix.lower() not in (".html", ".htm"):
        fail(f"--plot {plot}: only .html is supported")
    try:
        result = explain(existing_store(open_store(store)), job, at=when(at), before=parse_span(before), after=parse_span(after))
    except ValueError as exc:
        fail(str(exc))
    if plot is not None:
        from queries.plot import timeline_html

        try:
            plot.write_text(timeline_html(result))
        except OSError as exc:
            fail(f"--plot {plot}: {exc.strerror or exc}")
        err.print(f"timeline drawn to {plot}", style="dim")
    if fmt == "json":
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        for line in report(result):
            out.print(line, overflow="ignore", crop=False, markup=False)


def _print_frame(df: pl.DataFrame, fmt: str, columns: list[tuple[str, int]]) -> None:
    """A frame as fixed-width lines (``columns``: name and width, the last one unbounded) or JSON lines."""
    if fmt == "json":
        for row in df.iter_rows(named=True):
            sys.stdout.write(json.dumps({k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}) + "\n")
        return
    def cell(v: object) -> str:  # escaped before it is cut to its column's width
        if isinstance(v, datetime):
            return v.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(v, list):
            return printable(",".join(map(str, v))) or "-"
        return "-" if v is None else printable(str(v))
    out.print(" ".join(f"{n:{w}}" for n, w in columns[:-1]) + " " + columns[-1][0], style="bold")
    for row in df.iter_rows(named=True):
        out.print(" ".join(f"{cell(row[n])[:w]:{w}}" for n, w in columns[:-1]) + " " + cell(row[columns[-1][0]]),
                  overflow="ignore", crop=False, markup=False)


@app.command("incidents")
def incidents_cmd(
    since: Annotated[str, typer.Option(help="Start: ISO time or span before now (30m, 2h, 7d).")] = "1d",
    until: Annotated[Optional[str], typer.Option(help="End: ISO time or span before now (default now).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per line).")] = "table",
    store: StoreOpt = None,
) -> None:
    """Cluster incidents: faults that belong together across nodes, their blast radius and the jobs they hit.

    A node's repeated reports are one episode; episodes of one category (gpu, network, memory, node)
    on several nodes that begin within a minute are one incident, and three or more nodes at once
    suggest a shared cause (switch, power, fabric) rather than separate faults.

    Example: observe incidents --since 7d
    """
    from queries.incidents import incidents

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    found = incidents(search(existing_store(open_store(store)), since=when(since), until=when(until)))
    _print_frame(found.with_columns(pl.when("shared_cause").then(pl.lit("shared?")).otherwise(pl.lit("")).alias("note"))
                 if fmt == "table" else found, fmt,
                 [("incident", 8), ("start", 19), ("category", 8), ("nodes", 5), ("nodelist", 22), ("events", 6),
                  ("note", 7), ("kinds", 34), ("jobs", 0)])


@app.command("nodes")
def nodes_cmd(
    since: Annotated[str, typer.Option(help="Start: ISO time or span before now.")] = "7d",
    until: Annotated[Optional[str], typer.Option(help="End: ISO time or span before now (default now).")] = None,
    gpus: Annotated[bool, typer.Option("--gpus", help="Rank GPUs (node and PCI id) instead of nodes.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per line).")] = "table",
    store: StoreOpt = None,
) -> None:
    """Flaky nodes (or GPUs): fault history, repeat offenders flagged, advice watch / drain / rma,
    and how often each node was drained, by anyone (observe health drains lists them).

    Thresholds are in queries/causes.toml ([nodes]).

    Example: observe nodes --since 30d --gpus
    """
    from queries.nodes import rank_gpus, rank_nodes

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    lf = search(existing_store(open_store(store)), since=when(since), until=when(until))
    if gpus:
        _print_frame(rank_gpus(lf), fmt, [("node", 10), ("gpu", 12), ("episodes", 8), ("xids", 10), ("advice", 6),
                                           ("last", 19), ("kinds", 0)])
    else:
        _print_frame(rank_nodes(lf), fmt, [("node", 10), ("episodes", 8), ("events", 6), ("days", 4), ("advice", 6),
                                            ("drains", 6), ("drained_by", 12), ("last", 19), ("kinds", 30),
                                            ("last_message", 0)])


@app.command("patterns")
def patterns_cmd(
    since: Annotated[str, typer.Option(help="Window start: ISO time or span before now.")] = "1h",
    until: Annotated[Optional[str], typer.Option(help="Window end (default now).")] = None,
    baseline: Annotated[str, typer.Option(help="Compare with this span just before the window.")] = "24h",
    node: Annotated[Optional[str], typer.Option(help="Slurm hostlist, e.g. gpu[001-004,010].")] = None,
    source: Annotated[Optional[list[str]], typer.Option(help="Source (repeatable).")] = None,
    min_count: Annotated[int, typer.Option(help="Fewest lines in the window for a template to be reported.")] = 3,
    min_ratio: Annotated[float, typer.Option(help="How many times its baseline rate makes a template unusually frequent.")] = 5.0,
    all_: Annotated[bool, typer.Option("--all", help="List every template of the window, most frequent first (no baseline).")] = False,
    limit: Annotated[int, typer.Option(help="Most rows to print (0 = all).")] = 50,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per line).")] = "table",
    store: StoreOpt = None,
) -> None:
    """Message templates that are new or unusually frequent in a window against a baseline.

    Messages are masked (numbers, hex, addresses, ids; queries/patterns.toml) and clustered into
    templates the way Drain does; a template is new when the baseline never had it, frequent when
    its rate is --min-ratio times the baseline's.

    Example: observe patterns --since 2h --baseline 7d --node 'gpu[001-064]'
    """
    from datetime import timezone

    from queries.patterns import compare, mine

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    start, end = when(since), when(until) or datetime.now(timezone.utc)
    try:
        span = parse_span(baseline)
        nodes = expand_nodes(node) if node else None
    except ValueError as exc:
        fail(str(exc))
    st = existing_store(open_store(store))
    window = search(st, since=start, until=end, nodes=nodes, sources=source)
    if all_:
        found = mine(window)
        columns = [("count", 8), ("nodes", 5), ("last_ts", 19), ("template", 0)]
    else:
        found = compare(window, search(st, since=start - span, until=start, nodes=nodes, sources=source),
                        window_span=end - start, baseline_span=span, min_count=min_count, min_ratio=min_ratio)
        columns = [("status", 8), ("count", 7), ("baseline_count", 14), ("nodes", 5), ("last_ts", 19), ("template", 0)]
    _print_frame(found.head(limit) if limit else found, fmt, columns)


@app.command("stats")
def stats_cmd(store: StoreOpt = None) -> None:
    """What the store holds, per source and day (segments, rows, bytes)."""
    s = existing_store(open_store(store))
    df = s.stats()
    if df.is_empty():
        out.print(f"{s.root}: empty store")
        return
    table = Table("source", "date", "segments", "rows", "MB", box=None, pad_edge=False)
    for r in df.iter_rows(named=True):
        table.add_row(r["source"], r["date"], str(r["segments"]), str(r["rows"]), f"{r['bytes'] / 1e6:.2f}")
    out.print(table)
    out.print(f"{s.root}: {df['rows'].sum()} events, {df['segments'].sum()} segments, {df['bytes'].sum() / 1e6:.2f} MB")


@app.command("compact")
def compact_cmd(
    store: StoreOpt = None,
    grace: Annotated[str, typer.Option(help="Keep replaced segments this long for queries already running (10m, 0s).")] = "10m",
) -> None:
    """Merge each partition's segments into files sorted by time (atomic, duplicates dropped, memory
    bounded); delete segments replaced longer than --grace ago; refresh the job index."""
    try:
        grace_s = parse_span(grace).total_seconds()
    except ValueError as exc:
        fail(str(exc))
    s = open_store(store)
    merged = 0
    parts = s.partitions()
    try:
        for i, part in enumerate(parts, 1):
            done = s.compact(part, grace_s=grace_s)
            if done:
                merged += done[0]
                out.print(f"[{i}/{len(parts)}] {part.source}/{part.date}: {done[0]} segments, {done[1]} rows")
    except StoreBusy as exc:
        fail(str(exc))
    out.print(f"compacted {merged} segment(s)")
    from queries import jobs

    if s.partitions(sources=["slurm"]):
        out.print(f"job index: {jobs.write_index(s)} run(s)")


@app.command("retention")
def retention_cmd(
    keep: Annotated[str, typer.Option("--keep", help="How much to keep: 30d, 12h, 90m (whole days are dropped).")],
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be dropped; drop nothing.")] = False,
) -> None:
    """Drop partitions older than --keep (events without a time are kept)."""
    try:
        span = parse_span(keep)
    except ValueError as exc:
        fail(str(exc))
    cutoff = (datetime.now(timezone.utc) - span).strftime("%Y-%m-%d")
    dropped = open_store(store).expire(cutoff, dry_run=dry_run)
    for p in dropped:
        out.print(f"{'would drop' if dry_run else 'dropped'} {p.source}/{p.date}")
    out.print(f"{len(dropped)} partition(s) before {cutoff} {'would be ' if dry_run else ''}dropped")


@app.command("collect")
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
    from observe.collect import Config, ConfigError, NodeCollector

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


@app.command("rules")
def rules_cmd(check: Annotated[bool, typer.Option(help="Check every rule's examples; exit 1 on a failure.")] = False) -> None:
    """List the detection rules (built-in plus $OBSERVE_RULES directories), or check their examples."""
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
    table = Table("source", "kind", "severity", "defined in", box=None, pad_edge=False)
    for r in listed:
        table.add_row(r["source"], r["kind"], r["severity"], r["where"])
    out.print(table)


@app.command("schema")
def schema_cmd() -> None:
    """The event schema: every stored field and what it holds."""
    for name in FIELDS:
        out.print(f"[bold]{name:10}[/bold] {DESCRIPTIONS[name]}", highlight=False)


import observe.cli_health  # noqa: E402,F401 - registers the health, drain, slurm and checkpoint commands
import observe.cli_exporter  # noqa: E402,F401 - registers the exporter commands


def main() -> None:
    """Console-script entry point; an unexpected error is one line (OBSERVE_DEBUG=1 shows the traceback)."""
    try:
        app()
    except UnsafeStore as exc:  # found where a command meets it (a link planted inside the store): refused
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except Exception as exc:  # a bug, not bad input: say so in one line and exit non-zero
        if os.environ.get("OBSERVE_DEBUG"):
            raise
        damaged = [f for s in OPENED for f in s.damaged()]  # the likeliest cause: a segment cut short outside observe
        if damaged:
            more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
            err.print(f"[red]error:[/red] the store holds a damaged segment, {escape(str(damaged[0]))}{more}: move "
                      f"{'them' if more else 'it'} out of the store and run again", highlight=False, soft_wrap=True)
            sys.exit(2)
        err.print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} (set OBSERVE_DEBUG=1 for the traceback)")
        sys.exit(1)


if __name__ == "__main__":
    main()
