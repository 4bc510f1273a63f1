"""``observe query``, ``explain``, ``incidents``, ``nodes``, ``patterns``: the analyses' commands."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Optional

import typer

from observe.cli.base import (EngineOpt, RayAddressOpt, StoreOpt, command_table, err, existing_store, fail, open_store,
                              out, when)
from observe.printable import printable
from observe.hostlists import expand_nodes
from observe.spans import parse_span

COMMANDS, command = command_table()


COUNTABLE = ("node", "kind", "source", "severity", "job_id", "gpu", "code", "program", "route")  # --count-by's columns


@command("query")
def query_cmd(
    since: Annotated[Optional[str], typer.Option(help="Start: ISO time or span before now (30m, 2h, 7d).")] = None,
    until: Annotated[Optional[str], typer.Option(help="End (exclusive): ISO time or span before now.")] = None,
    node: Annotated[Optional[str], typer.Option(help="Slurm hostlist, e.g. gpu[001-004,010].")] = None,
    source: Annotated[Optional[list[str]], typer.Option(help="Source (repeatable): slurm, syslog, kernel, nccl, gpu, health.")] = None,
    kind: Annotated[Optional[list[str]], typer.Option(help="Event kind (repeatable), e.g. gpu_xid.")] = None,
    job: Annotated[Optional[str], typer.Option(help="Job id.")] = None,
    grep: Annotated[Optional[str], typer.Option(help="Regex on the message (Rust syntax).")] = None,
    limit: Annotated[int, typer.Option(help="Most rows to print (0 = all); stderr says when more matched.", min=0, max=10**12)] = 100,
    count_by: Annotated[Optional[str], typer.Option(
        "--count-by", help=f"Count the matching events by these columns instead of listing them, most first, e.g. "
                           f"node,kind (columns: {', '.join(COUNTABLE)}).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json (one object per line) or csv.")] = "table",
    store: StoreOpt = None,
    engine_name: EngineOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Search events, or count them.

    \b
    Example: observe query --since 2h --node 'gpu[001-016]' --kind gpu_xid --format json
    Example: observe query --since 7d --source kernel --count-by node,kind
    """
    import polars as pl

    from observe.store.copy_marks import stale
    from queries.engine import Order, engine
    from queries.search import ORDER, Match, count, counts, first, first_line

    if fmt not in ("table", "json", "csv"):
        fail(f"unknown format {fmt!r}: use table, json or csv")
    by = _columns(count_by) if count_by is not None else None
    try:
        start, end, nodes = when(since), when(until), expand_nodes(node) if node else None
        if start and end and end <= start:
            fail(f"--until {until} is not after --since {since}")
        st = open_store(store)
        match = Match(since=start, until=end, nodes=nodes, sources=source, kinds=kind, job=job, grep=grep)
        # checked in the order a user's mistakes come; a count needs its events in no order
        match = replace(match, marked=stale(existing_store(st)), ordered=not by)
        rows = limit + 1 if limit else None
        if by:
            df = counts(engine(engine_name, ray_address).by_node(st, match, partial(count, by=by), Order(tuple(by))), by)
        else:
            df = engine(engine_name, ray_address).by_node(st, match, partial(first, rows=rows), Order(ORDER))
        df = df.head(rows) if rows else df
    except ValueError as exc:
        fail(str(exc))
    more = bool(limit) and df.height > limit
    df = df.head(limit) if more else df
    if by:
        _print_counts(df, fmt)
    elif fmt == "json":
        for row in df.with_columns(pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")).iter_rows(named=True):
            row["attrs"] = json.loads(row["attrs"]) if row["attrs"] else None
            sys.stdout.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        sys.stdout.write(_csv(df))
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


def _columns(spec: str) -> list[str]:
    """``--count-by``'s comma-separated columns, each one a column events can be counted by."""
    by = [c.strip() for c in spec.split(",") if c.strip()]
    bad = [c for c in by if c not in COUNTABLE]
    if not by or bad:
        fail(f"--count-by: {'unknown column ' + repr(bad[0]) if bad else 'no column given'}: use one or more of "
             f"{', '.join(COUNTABLE)}, separated by commas")
    if len(set(by)) != len(by):
        fail("--count-by: a column is named twice")
    return by


def _print_counts(df: pl.DataFrame, fmt: str) -> None:
    """Counts as a table (values escaped for the terminal), JSON lines or CSV."""
    import polars as pl

    if fmt == "json":
        for row in df.iter_rows(named=True):
            sys.stdout.write(json.dumps(row) + "\n")
    elif fmt == "csv":
        sys.stdout.write(_csv(df.with_columns(pl.col(c).cast(pl.String) for c in df.columns if c != "events")))
    else:
        shown = df.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in df.columns if c != "events")
        widths = {c: max([len(c)] + [len(v) for v in shown.get_column(c).to_list()]) for c in shown.columns if c != "events"}
        out.print(" ".join(f"{c:{w}}" for c, w in widths.items()) + f" {'events':>10}", style="bold", markup=False)
        for r in shown.iter_rows(named=True):
            out.print(printable(" ".join(f"{r[c]:{w}}" for c, w in widths.items()) + f" {r['events']:>10}"),
                      overflow="ignore", crop=False, markup=False, highlight=False)


# A spreadsheet runs a cell that opens with one of these as a formula (=cmd|'/c calc'!A1, @SUM(...));
# OWASP's CSV injection advice adds tab and CR, ASVS NUL. ' is there so that the change can be undone.
FORMULA_LEAD = r"^[=+\-@\t\r\x00']"


def _csv(df: pl.DataFrame) -> str:
    """``df`` as CSV no spreadsheet runs: a text cell opening with a formula character (or ``'``) gets a
    leading ``'``, which spreadsheets show as text (OWASP's advice); drop it to have the exact text.
    Every other cell is as stored."""
    import polars as pl

    def inert(c: str) -> pl.Expr:
        return pl.when(pl.col(c).str.contains(FORMULA_LEAD)).then(pl.lit("'") + pl.col(c)).otherwise(pl.col(c)).alias(c)
    return df.with_columns(inert(c) for c, t in df.schema.items() if t == pl.String).write_csv()


@command("explain")
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
    each node's unrecovered faults before it. Each candidate (a fault on a node, the job's own error, a
    rank that stalled, a peer the others lost) starts at its cause's prior odds and is multiplied by the
    likelihood ratio of each piece of evidence: when it came against the failure's onset, whether it
    shows on one node only, what the node and the fleet log while jobs succeed. Each candidate lists
    its evidence (x3.0 for, x0.05 against) and its probability.

    The verdict is UNDETERMINED when only symptoms or background remain or it is less probable than
    undetermined_below; confidence is the verdict's probability (nothing fitted), and a drain is advised
    only above drain_above. The priors, likelihood ratios and thresholds are data: queries/causes.toml
    (override with a causes.toml in $OBSERVE_RULES).

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


@command("incidents")
def incidents_cmd(
    since: Annotated[str, typer.Option(help="Start: ISO time or span before now (30m, 2h, 7d).")] = "1d",
    until: Annotated[Optional[str], typer.Option(help="End: ISO time or span before now (default now).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per line).")] = "table",
    store: StoreOpt = None,
    engine_name: EngineOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Cluster incidents: faults that belong together across nodes, their blast radius and the jobs they hit.

    A node's repeated reports are one episode; episodes of one category (gpu, network, memory, node)
    on several nodes that begin within a minute are one incident, and three or more nodes at once
    suggest a shared cause (switch, power, fabric) rather than separate faults. An incident none of whose
    lines came by a trusted route (kernel lines through a syslog file) is shown, noted unconfirmed.

    \b
    Example: observe incidents --since 7d
    """
    import polars as pl

    from queries.engine import EngineError, engine
    from queries.incidents import incidents, kinds_read
    from queries.search import Match

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    st, match = existing_store(open_store(store)), Match(since=when(since), until=when(until), kinds=kinds_read())
    try:
        found = engine(engine_name, ray_address).together(st, match, incidents)
    except EngineError as exc:
        fail(str(exc))
    note = (pl.when("shared_cause").then(pl.lit("shared? ")).otherwise(pl.lit(""))
            + pl.when("unconfirmed").then(pl.lit("unconfirmed")).otherwise(pl.lit("")))
    _print_frame(found.with_columns(note.str.strip_chars().alias("note"))
                 if fmt == "table" else found, fmt,
                 [("incident", 8), ("start", 19), ("category", 8), ("nodes", 5), ("nodelist", 22), ("events", 6),
                  ("note", 11), ("kinds", 34), ("jobs", 0)])


@command("nodes")
def nodes_cmd(
    since: Annotated[str, typer.Option(help="Start: ISO time or span before now.")] = "7d",
    until: Annotated[Optional[str], typer.Option(help="End: ISO time or span before now (default now).")] = None,
    gpus: Annotated[bool, typer.Option("--gpus", help="Rank GPUs (node and PCI id) instead of nodes.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table or json (one object per line).")] = "table",
    store: StoreOpt = None,
    engine_name: EngineOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Flaky nodes (or GPUs): fault history, repeat offenders flagged, advice watch / verify / drain / rma,
    and how often each node was drained, by anyone (observe health drains lists them). Faults that came
    only through routes users write (a syslog file, job output) count as evidence, in `unconfirmed`:
    they call for verify (an active check), never a drain or an RMA by themselves.

    Thresholds are in queries/causes.toml ([nodes]).

    \b
    Example: observe nodes --since 30d --gpus
    """
    from queries.engine import EngineError, engine
    from queries.nodes import GPU_ORDER, NODE_ORDER, kinds_read, rank_gpus, rank_nodes
    from queries.search import Match

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    st, match = existing_store(open_store(store)), Match(since=when(since), until=when(until), kinds=kinds_read())
    try:
        run = engine(engine_name, ray_address)
        ranked = run.by_node(st, match, rank_gpus, GPU_ORDER) if gpus else run.by_node(st, match, rank_nodes, NODE_ORDER)
    except EngineError as exc:
        fail(str(exc))
    if gpus:
        _print_frame(ranked, fmt, [("node", 10), ("gpu", 12), ("episodes", 8), ("unconfirmed", 11), ("xids", 10), ("advice", 6),
                                           ("last", 19), ("kinds", 0)])
    else:
        _print_frame(ranked, fmt, [("node", 10), ("episodes", 8), ("unconfirmed", 11), ("events", 6), ("days", 4), ("advice", 6),
                                            ("drains", 6), ("drained_by", 12), ("last", 19), ("kinds", 30),
                                            ("last_message", 0)])


@command("patterns")
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
    engine_name: EngineOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Message templates that are new or unusually frequent in a window against a baseline.

    Messages are masked (numbers, hex, addresses, ids; queries/patterns.toml) and clustered into
    templates the way Drain does; a template is new when the baseline never had it, frequent when
    its rate is --min-ratio times the baseline's.

    A baseline of a day or more is counted per UTC hour and kept in the store (index/patterns): the
    first call over a week of a fleet counts it, later ones count only what is new. It then starts on
    the hour at or before its span's start; with --node, it is counted each time.

    \b
    Example: observe patterns --since 2h --baseline 7d --node 'gpu[001-064]'
    """
    from datetime import timezone

    from observe.store.copy_marks import stale
    from queries import pattern_counts
    from queries.engine import EngineError, Order, engine
    from queries.patterns import compare, masked_counts, mine
    from queries.search import Match

    if fmt not in ("table", "json"):
        fail(f"unknown format {fmt!r}: use table or json")
    start, end = when(since), when(until) or datetime.now(timezone.utc)
    try:
        span = parse_span(baseline)
        nodes = expand_nodes(node) if node else None
        run = engine(engine_name, ray_address)
        # the window and its baseline read as one search; messages counted per node bucket, then added up
        match = Match(since=start if all_ else start - span, until=end, nodes=nodes, sources=source, ordered=False)
    except (ValueError, EngineError) as exc:
        fail(str(exc))
    st = existing_store(open_store(store))
    match = replace(match, marked=stale(st))
    try:
        if all_:
            pieces = [run.by_node(st, match, masked_counts, Order(("masked",)))]
        else:
            def counting(segments: int) -> None:
                if err.is_terminal:  # a wait of seconds on a week of a fleet, the first time
                    err.print(f"counting the baseline's messages in {segments} segment(s) (kept for the next call)")

            pieces, span, why = pattern_counts.pieces(st, run, match, start, span, counting)
            if why:
                err.print(f"{why}: each call counts them again", markup=False, highlight=False)
    except EngineError as exc:
        fail(str(exc))
    if all_:
        found = mine(pieces)
        columns = [("count", 8), ("nodes", 5), ("last_ts", 19), ("template", 0)]
    else:
        found = compare(pieces, window_span=end - start, baseline_span=span, min_count=min_count, min_ratio=min_ratio)
        columns = [("status", 8), ("count", 7), ("baseline_count", 14), ("nodes", 5), ("last_ts", 19), ("template", 0)]
    _print_frame(found.head(limit) if limit else found, fmt, columns)
