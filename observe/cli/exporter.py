"""``observe exporter central`` and ``observe exporter node``: Prometheus metrics."""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from observe.cli.base import EngineOpt, RayAddressOpt, StoreOpt, err, fail, open_store
from observe.exporter import MAX_SERIES
from observe.hostname import this_node
from observe.spans import parse_span

NAME = "exporter"
GROUP = typer.Typer(
    help="Prometheus metrics over HTTP (/metrics) or as a node_exporter textfile. Scrape config and "
    "dashboards: docs/operating.md, 'Prometheus and Grafana'.", no_args_is_help=True)

ListenOpt = Annotated[str, typer.Option(help="HOST:PORT to serve /metrics on (:PORT = all interfaces).")]
IntervalOpt = Annotated[str, typer.Option(help="How often to refresh the numbers (10s, 1m); scrapes get the last ones.")]
TextfileOpt = Annotated[Optional[Path], typer.Option(
    help="Also write DIR/observe.prom (atomically) after each refresh, for node_exporter's textfile collector.")]
OnceOpt = Annotated[bool, typer.Option("--once", help="Refresh once, print the exposition (or write --textfile) and exit.")]


@GROUP.command("central")
def central_cmd(
    store: StoreOpt = None, listen: ListenOpt = ":9847", interval: IntervalOpt = "15s",
    textfile: TextfileOpt = None, once: OnceOpt = False,
    max_series: Annotated[int, typer.Option(help="Most series of one per-node metric; the rest, and nodes Slurm does "
                                            "not know, are shown as node=\"other\".", min=1)] = MAX_SERIES,
    engine_name: EngineOpt = None, ray_address: RayAddressOpt = None,
) -> None:
    """Cluster-wide metrics from the store (run one, next to the store).

    Events by kind, node and severity, Xids by code, drains and refusals,
    open incidents, job failures by Slurm state and by explain's cause
    category, store size and ingest lag. Start-up counts the whole store
    once (with --engine ray, on a Ray cluster: every share of the
    segments at once); after that each refresh reads only new segments.

    Node labels are for the nodes `scontrol show node` lists (any valid
    node name when Slurm cannot be asked from here), so made-up host names
    in logs cannot swell Prometheus; observe_exporter_series_folded counts
    what was shown as node="other".

    \b
    Example: observe exporter central --store /shared/observe --listen :9847
    """
    from observe.exporter.central import StoreMetrics
    from queries.engine import EngineError, engine

    try:
        run = engine(engine_name, ray_address)
    except EngineError as exc:
        fail(str(exc))
    serving = _serving(listen, interval)
    s = open_store(store)
    if not s.has_events():
        fail(f"{s.name}: no store here (no events/ directory); give --store or set $OBSERVE_STORE")
    err.print(f"reading {s.name} ...", highlight=False)
    _run(StoreMetrics(s, max_series=max_series, engine=run), serving, textfile, once)


@GROUP.command("node")
def node_cmd(
    config: Annotated[Optional[Path], typer.Option("--config", help="The collector's config: its spool and node name.")] = None,
    spool: Annotated[Optional[Path], typer.Option(help="The collector's spool (its stats.json), instead of --config.")] = None,
    store: Annotated[Optional[str], typer.Option("--store", help="Store holding this node's health_check results "
                                                 "(observe health run --record, the Slurm hooks).")] = None,
    node: Annotated[Optional[str], typer.Option(help="This node's name (default: --config's, else the short host name).")] = None,
    listen: ListenOpt = ":9848", interval: IntervalOpt = "30s", textfile: TextfileOpt = None, once: OnceOpt = False,
) -> None:
    """This node's metrics (run one per node, or write a textfile for node_exporter).

    Collector counters (lines, bytes, unparsed, lag, spool backlog, ship
    failures) and the latest health-check results with their age, burn
    FLOP/s per GPU and all-reduce bus bandwidth.

    As a textfile for node_exporter, from cron or a systemd timer:
    observe exporter node --config /etc/observe/collector.toml
    --store /shared/observe --textfile /var/lib/prometheus/node-exporter --once
    """
    from observe.collect_config import Config, ConfigError
    from observe.exporter.node import NodeMetrics

    serving = _serving(listen, interval)
    if config is not None:
        try:
            cfg = Config.load(config)
        except (ConfigError, OSError) as exc:
            fail(str(exc))
        spool, node = spool or cfg.spool, node or cfg.node
    if spool is None and store is None:
        fail("nothing to report: give --config or --spool (collector counters) and/or --store (health results)")
    metrics = NodeMetrics(node or this_node(), spool, open_store(store) if store else None)
    _run(metrics, serving, textfile, once)


def _serving(listen: str, interval: str) -> tuple[str, int, float]:
    """(host, port, refresh seconds) from the options, or a one-line error."""
    from observe.exporter.serve import parse_listen

    try:
        every = parse_span(interval).total_seconds()
        host, port = parse_listen(listen)
    except ValueError as exc:
        fail(str(exc))
    if every <= 0:
        fail(f"--interval {interval!r}: must be more than 0")
    return host, port, every


def _run(source, serving: tuple[str, int, float], textfile: Path | None, once: bool) -> None:
    from observe.exporter.serve import Exporter

    host, port, every = serving
    exporter = Exporter(source, textfile)
    ok = exporter.refresh()
    if once:
        if textfile is None:
            sys.stdout.buffer.write(exporter.body)
        raise typer.Exit(0 if ok else 1)
    try:
        httpd = exporter.server(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    refresher = threading.Thread(target=exporter.run, args=(every, stop), daemon=True)
    refresher.start()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    err.print(f"serving http://{host}:{port}/metrics (refresh every {every:g}s)", highlight=False)
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    httpd.shutdown()
