"""Exporter benchmark: scrape time of `observe exporter central` over a store of 10+ million events,
against a baseline exporter that counts the store on each scrape (what "incremental" saves).

    python bench/exporter.py                      # ~1.4 GB of demo logs, 256 nodes (11+ million events)
    python bench/exporter.py --gb 0.1 --scrapes 20  # a quick run

Generates the logs with observe.simulate and ingests them once (kept in --dir for later runs). Then, in
this process: the exporter's start-up (one count of the whole store), an HTTP server, and --scrapes
GETs of /metrics (gzip, as Prometheus asks) while a writer adds a segment of fresh events and the
exporter refreshes every --interval seconds, as in production. The baseline counts the whole store
and renders it for each of 3 scrapes. Prints medians and the ratio; exits 1 if the median scrape is
over the 100 ms goal.
"""
from __future__ import annotations

import argparse
import resource
import socket
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

GOAL_MS = 100.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.4, help="size of generated logs in GB (default 1.4)")
    ap.add_argument("--nodes", type=int, default=256, help="cluster size (default 256)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/observe-bench-exporter"))
    ap.add_argument("--scrapes", type=int, default=100)
    ap.add_argument("--interval", type=float, default=5.0, help="exporter refresh interval, seconds (default 5)")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()

    from prometheus_client.exposition import generate_latest

    from observe.collector import Context
    from observe.exporter.central import StoreMetrics
    from observe.exporter.serve import Exporter
    from observe.ingest import parse_bytes

    store = prepare(args)
    rows = int(store.stats()["rows"].sum())
    print(f"store: {rows:,} events in {len(store.files())} segments ({args.dir / 'store'})")

    t0 = time.perf_counter()
    exporter = Exporter(StoreMetrics(store))
    exporter.refresh()
    startup = time.perf_counter() - t0
    series = sum(1 for line in exporter.body.splitlines() if not line.startswith(b"#"))
    print(f"start-up (count the whole store once): {startup:.1f} s; {series:,} series, "
          f"{len(exporter.body) / 1e6:.2f} MB ({len(exporter.gzipped) / 1e3:.0f} kB gzip)")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    httpd = exporter.server("127.0.0.1", port)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    stop = threading.Event()
    threading.Thread(target=exporter.run, args=(args.interval, stop), daemon=True).start()

    def write_live() -> None:  # a collector shipping a small segment now and then
        n = 0
        while not stop.wait(args.interval / 2):
            n += 1
            line = f"[2026-01-01T00:00:{n % 60:02d}.000] _job_complete: JobId={900000 + n} WTERMSIG 9\n"
            store.write(parse_bytes(line.encode() * 100, "slurm", Context(node="ctl1")))
    threading.Thread(target=write_live, daemon=True).start()

    url = f"http://127.0.0.1:{port}/metrics"
    times = []
    for _ in range(args.scrapes):
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        t = time.perf_counter()
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        times.append((time.perf_counter() - t) * 1000)
        time.sleep(0.1)
    stop.set()
    httpd.shutdown()
    refreshes = exporter.source.segments_read
    print(f"observe: {args.scrapes} scrapes over {args.scrapes * 0.1:.0f}+ s with refreshes every {args.interval:g} s "
          f"and live writes: median {statistics.median(times):.1f} ms, p95 {pct(times, 95):.1f} ms, "
          f"max {max(times):.1f} ms; last refresh {exporter.refresh_seconds * 1000:.0f} ms "
          f"({refreshes} segments read in all)")

    base = []
    for _ in range(3):
        t = time.perf_counter()
        m = StoreMetrics(store)
        m.refresh()
        generate_latest(m)  # type: ignore[arg-type]
        base.append((time.perf_counter() - t) * 1000)
    ours = statistics.median(times)
    print(f"baseline (count the store on each scrape): median {statistics.median(base):.0f} ms")
    print(f"ratio baseline/observe: {statistics.median(base) / ours:.0f}x; goal < {GOAL_MS:.0f} ms per scrape: "
          f"{'met' if ours < GOAL_MS else 'MISSED'}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    sys.exit(0 if ours < GOAL_MS else 1)


def prepare(args):
    """The store under --dir, generated and ingested on the first run."""
    from observe.ingest import ingest_inputs
    from observe.simulate import generate
    from observe.store import Store

    store = Store(args.dir / "store")
    marker = args.dir / f"generated-{args.gb}-{args.nodes}-{args.seed}"
    if not marker.exists():
        import shutil

        shutil.rmtree(args.dir, ignore_errors=True)
        t = time.perf_counter()
        manifest = generate(args.dir / "logs", nodes=args.nodes, seed=args.seed, target_bytes=int(args.gb * 1e9))
        print(f"generated {args.gb} GB of logs in {time.perf_counter() - t:.0f} s", flush=True)
        t = time.perf_counter()
        ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], store)
        print(f"ingested in {time.perf_counter() - t:.0f} s", flush=True)
        marker.touch()
    return store


def pct(values: list[float], q: int) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q / 100))]


if __name__ == "__main__":
    main()
