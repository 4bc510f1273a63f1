"""What an operator waits for at the terminal: the commands typed most, each a whole process (Python's
start-up, imports, reading the store), beside DuckDB answering the same question where it can.

    python bench/latency.py --demo                          # the demo's store (16 nodes, a day): a quick run
    python bench/scale.py --nodes 256 --days 28 --build-only            # a 53M-event store, once (~10 min)
    python bench/latency.py --store /var/tmp/observe-scale-256-28/store # the commands on it

Each command and its peer run alternately, --runs times; the figures are medians (and minimums) of wall
time, and observe's peak RSS. DuckDB reads the live files the table's Delta log lists (what its delta extension reads), with
``copy_of IS NULL``: each record once, as observe counts it (a kernel record kept by dmesg and by syslog).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

OBSERVE = [sys.executable, "-m", "observe.cli"]
DUCKDB = """
import sys, duckdb
from deltalake import DeltaTable
files = DeltaTable(sys.argv[1] + "/events").file_uris()
rows = duckdb.sql("SELECT * FROM read_parquet(?, hive_partitioning = true, union_by_name = true)", params=[files])
print(duckdb.sql(sys.argv[2]).fetchall()[:3])
"""


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the whole process, measured by GNU time: a child forked from this
    process would count the pages it shares with it (this process read the store to pick the questions)."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], capture_output=True, text=True,
                          env={**os.environ, "OBSERVE_ENGINE": "polars"})
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:6])} ...: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return took, int(done.stderr.strip().splitlines()[-1]) / 1024


def questions(store: Path) -> tuple[list[tuple[str, list[str], str | None]], int]:
    """(what, observe's command, DuckDB's SQL over ``rows`` or None), on the store's own last week; the rows stored."""
    import polars as pl

    from observe.hostlists import compact_nodes
    from observe.store import Store
    from queries import jobs

    st = Store(store)
    span = st.scan().select(pl.col("ts").max(), pl.col("node").drop_nulls().unique().sort().implode()).collect(engine="streaming")
    last, nodes = span.item(0, 0), span.item(0, 1).to_list()[:8]
    since = (last - timedelta(days=7)).isoformat()
    runs = jobs.runs_on_nodes(st)
    failed = [] if runs is None else (runs.filter(pl.col("state").str.starts_with("FAILED")).sort("end")
                                      .select("job_id").collect().get_column("job_id").to_list())
    listed = ", ".join(f"'{n}'" for n in nodes)
    asked = [
        ("start-up: --help", ["--help"], "SELECT 1"),
        ("a week, 8 nodes, one kind", ["query", "--since", since, "--node", compact_nodes(nodes), "--kind", "gpu_xid",
                                       "--format", "csv"],
         f"SELECT * FROM rows WHERE ts >= TIMESTAMPTZ '{since}' AND node IN ({listed}) AND kind = 'gpu_xid' "
         "AND copy_of IS NULL ORDER BY ts LIMIT 100"),
        ("events by node and kind", ["query", "--count-by", "node,kind", "--limit", "0", "--format", "csv"],
         "SELECT node, kind, count(*) AS events FROM rows WHERE copy_of IS NULL GROUP BY ALL ORDER BY events DESC"),
        ("flaky nodes, 7 days", ["nodes", "--since", since], None),
        ("incidents, 7 days", ["incidents", "--since", since], None),
        ("new patterns, 2 h against 7 days", ["patterns", "--since", (last - timedelta(hours=2)).isoformat(),
                                              "--until", last.isoformat(), "--baseline", "7d"], None),
        ("what the store holds", ["stats"], None),
    ]
    if failed:
        asked.insert(3, (f"explain a failed job ({failed[-1]})", ["explain", str(failed[-1]), "--format", "json"], None))
    return asked, st.scan().select(pl.len()).collect().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="a store to read (default: the demo's, built with --demo)")
    ap.add_argument("--demo", action="store_true", help="build the demo's store in /tmp/observe-bench-latency first")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    store = args.store
    if args.demo:
        where = Path("/tmp/observe-bench-latency")
        if not (where / "store").exists():
            subprocess.run([*OBSERVE, "demo", "--dir", str(where)], check=True, capture_output=True)
        store = where / "store"
    if store is None:
        sys.exit("give --store PATH or --demo")
    asked, events = questions(store)
    print(f"store {store}: {events:,} rows; medians (min) of {args.runs} whole-process runs, wall seconds")
    print(f"{'question':38} {'observe':>16} {'RSS MB':>7} {'DuckDB':>16} {'ratio':>6}")
    rows = []
    for what, argv, sql in asked:
        mine, peer, rss = [], [], 0.0
        for _ in range(args.runs):
            took, mb = timed([*OBSERVE, *argv] + ([] if argv == ["--help"] else ["--store", str(store)]))
            mine.append(took)
            rss = max(rss, mb)
            if sql:
                peer.append(timed([sys.executable, "-c", DUCKDB, str(store), sql])[0])
        m = statistics.median(mine)
        p = statistics.median(peer) if peer else None
        shown = f"{p:7.3f} ({min(peer):.3f})" if p else f"{'-':>16}"
        print(f"{what:38} {m:7.3f} ({min(mine):.3f}) {rss:7.0f} {shown} {(m / p if p else float('nan')):6.2f}")
        rows.append({"question": what, "observe_s": m, "observe_min_s": min(mine), "observe_rss_mb": rss, "duckdb_s": p})
    if args.json:
        args.json.write_text(json.dumps({"store": str(store), "events": events, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
