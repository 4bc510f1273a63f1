"""Fleet-scale benchmark: two fleet queries on a store of a month of a 1,024-node cluster (226
million events), run by the embedded polars engine and by Ray with 1 and 2 workers side by side;
`explain` on that Delta store against the layout before it (the code of the last commit before the
table, run on hard links to the same segments); and what a 10,000-GPU year would take.

    python bench/scale.py                        # builds the store once into --dir (about an hour), runs ~8 min
    python bench/scale.py --nodes 128 --days 7   # a quick run (its own store)
    python bench/scale.py --no-old               # without the old layout's explain
    python bench/scale.py --nodes 256 --days 28 --build-only   # a 53M-event store for bench/latency.py, ~10 min
    (a build stopped midway goes on where it stopped when run again: its state is in --dir's progress.json)

The store is built from observe.simulate's clusters, not from real logs (our own generator: the
figures are a regression bar, not a claim about a real fleet's data). Each of a few 16-node
simulated days is ingested once; the month is copies of them, one per 16 nodes and day, with node
names (in every text column), inputs, job ids and times moved, and the catalogued faults thinned to
a fleet's base rates: a node keeps a copied fault on 15% of its days, 2% of nodes (the flaky ones)
on 80%, but for the last day, whose failed jobs are the ones explained. Then it is compacted and the job index written, as a long-running store is.

The fleet query is `observe nodes` over the month (repeat offenders: episodes per node from every
catalogued fault and drain); a second, `observe query --grep` over every kernel and syslog message
of the month, is the scan-bound case. Each is run three times per engine; the median is reported,
Ray's start-up apart, in four configurations, each in its own process: embedded polars on one
thread and on two (this machine's cores), Ray with 1 and with 2 workers of one polars thread each
(a worker is one core: the per-worker figures and the scaling are per core). Every configuration
must give the same frame (checked).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from observe.store import Store, notable  # noqa: E402
from observe.store.copy_marks import MARKED, bring_up_to_date  # noqa: E402

GROUP = 16  # nodes of one simulated cluster (a copy)
TEMPLATES = 6  # simulated days the month is copied from
JOB_STRIDE = 10_000  # job ids of one copy apart from the next's
FLAKY_SHARE, FLAKY_KEEP, BASE_KEEP = 50, 800, 150  # 1 node in 50 flaky; per mille of faults kept
OLD_LAYOUT = "7dd8c53"  # the last commit before the Delta table
GREP = "(?i)fallen off the bus|uncorrectable|nvrm: xid"
GPUS_PER_NODE = 8
WRITE_GROUPS = 32  # copies written at once (512 nodes' day, about 4 million events)


def build(dir_: Path, nodes: int, days: int) -> dict:
    """Generate the store once (see the module's doc); returns what the runs need to know of it."""
    from observe.ingest import ingest_inputs
    from observe.simulate import generate
    from queries import jobs
    from queries.causes import load_causes

    progress = dir_ / "progress.json"  # a build stopped midway goes on from there: its templates, the parts written
    state = json.loads(progress.read_text()) if progress.exists() else None
    end = (datetime.fromisoformat(state["end"]) if state else
           datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0))
    start = end - timedelta(days=days)
    began = time.perf_counter()
    templates, failed = [], []
    for t in range(TEMPLATES):
        place = dir_ / "templates" / str(t)
        if state is None:
            manifest = generate(place / "logs", nodes=GROUP, hours=24, seed=t, start=start)
            ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files],
                          Store(place / "store"))
            failed.append([(inc["job_id"], inc["type"], inc["ts"]) for inc in manifest.incidents])
        templates.append(Store(place / "store").scan(undated=True).collect())
        print(f"  template {t}: {templates[-1].height:,} events", flush=True)
    state = state or {"end": end.isoformat(), "failed": failed, "written": 0}
    failed = state["failed"]
    store, groups, fault_kinds = Store(dir_ / "store"), nodes // GROUP, load_causes().kinds()
    part = 0
    for d in range(days):
        thin = d < days - 1  # the last day keeps every fault: its failed jobs are explained below
        for first in range(0, groups, WRITE_GROUPS):  # a day of a large fleet in parts: memory stays bounded
            if part >= state["written"]:
                store.write(pl.concat([_copy(templates[(d + g) % TEMPLATES], d, g, groups, fault_kinds if thin else [])
                                       for g in range(first, min(groups, first + WRITE_GROUPS))]))
                progress.write_text(json.dumps({**state, "written": part + 1}))
            part += 1
        print(f"  day {d + 1}/{days} written ({time.perf_counter() - began:.0f} s)", flush=True)
    store.compactor.compact_many(store.partitions(), min_segments=1)
    while json.loads((store.root / MARKED).read_text()).get("due"):  # what further compactions' passes catch up
        with store.lock("compact"):
            bring_up_to_date(store)
    store.upkeep.vacuum(grace_s=0)
    jobs.write_index(store)
    notable.refresh(store)  # what `observe compact` leaves
    last = days - 1  # jobs of the last day's copies, to explain
    picks = [(str(int(job) + (last * groups + g) * JOB_STRIDE), kind, str(datetime.fromisoformat(ts) + timedelta(days=last)))
             for g in range(groups) for job, kind, ts in failed[(last + g) % TEMPLATES]][:: max(1, groups // 2)][:6]
    meta = {"nodes": groups * GROUP, "days": days, "start": start.isoformat(), "end": end.isoformat(),
            "build_s": round(time.perf_counter() - began), "explain": picks}
    (dir_ / "meta.json").write_text(json.dumps(meta))
    return meta


def _copy(template: pl.DataFrame, d: int, g: int, groups: int, fault_kinds: list[str]) -> pl.DataFrame:
    """One 16-node simulated day as nodes ``g*16+1..`` on day ``d``, its ``fault_kinds`` thinned (a
    job's lines, without a node, by their job)."""
    prefix = f"r{g:03d}n"
    moved = [pl.col(c).str.replace_all(r"gpu(\d{3}|\[)", prefix + "$1") for c in ("message", "raw", "attrs")]
    node = pl.when(pl.col("node") == "ctl1").then(pl.lit(f"ctl{g:03d}")).otherwise(
        pl.col("node").str.replace(r"^gpu", prefix))
    job = pl.col("job_id").cast(pl.Int64, strict=False)
    df = template.with_columns(
        *moved, node.alias("node"), (pl.col("ts") + timedelta(days=d, seconds=3 * g)).alias("ts"),
        pl.concat_str(pl.col("file_id"), pl.lit(f"{d:03d}{g:03d}")).alias("file_id"),
        pl.when(job.is_not_null()).then((job + (d * groups + g) * JOB_STRIDE).cast(pl.String))
        .otherwise(pl.col("job_id")).alias("job_id"))
    where = pl.coalesce("node", "job_id")
    keep = pl.when(where.hash(seed=1) % FLAKY_SHARE == 0).then(FLAKY_KEEP).otherwise(BASE_KEEP)
    day_hash = pl.concat_str(where, pl.lit(f"/{d}")).hash(seed=2) % 1000
    return df.filter(~pl.col("kind").is_in(fault_kinds) | (day_hash < keep))


def timed(fn, runs: int = 3) -> tuple[float, object]:
    took, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        took.append(time.perf_counter() - t)
    return statistics.median(took), out


CONFIGS = [("polars", 1, 1), ("polars", 1, 2), ("ray", 1, 1), ("ray", 2, 1)]  # engine, workers, threads each


def measure(dir_: Path, engine: str, workers: int) -> None:
    """One configuration, in its own process (POLARS_MAX_THREADS is read when polars loads): the two
    fleet queries three times each; timings as JSON on stdout, results under dir_/results."""
    from queries.engine import Engine, Order
    from queries.nodes import NODE_ORDER, kinds_read, rank_nodes
    from queries.search import ORDER, Match, first

    meta, store = json.loads((dir_ / "meta.json").read_text()), Store(dir_ / "store")
    since, until = datetime.fromisoformat(meta["start"]), datetime.fromisoformat(meta["end"])
    queries = {"nodes": (Match(since, until, kinds=kinds_read()), rank_nodes, NODE_ORDER),
               "grep": (Match(since, until, sources=["kernel", "syslog"], grep=GREP), first, Order(ORDER))}
    started = 0.0
    if engine == "ray":
        import logging

        import ray

        t = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 runtime_env={"env_vars": {"POLARS_MAX_THREADS": os.environ["POLARS_MAX_THREADS"]}})
        started = time.perf_counter() - t
    rows = []
    for name, (match, analysis, order) in queries.items():
        took, out = timed(lambda: Engine(engine).by_node(store, match, analysis, order))
        out.write_parquet(dir_ / "results" / f"{name}-{engine}-{workers}-{os.environ['POLARS_MAX_THREADS']}.parquet")
        rows.append({"query": name, "s": took, "start_s": started, "rows": out.height})
    print(json.dumps(rows))


def fleet_queries(dir_: Path) -> list[dict]:
    """The two fleet queries in each configuration, side by side; each result checked against the first."""
    from polars.testing import assert_frame_equal

    (dir_ / "results").mkdir(exist_ok=True)
    rows = []
    for engine, workers, threads in CONFIGS:
        env = {**os.environ, "POLARS_MAX_THREADS": str(threads)}
        done = subprocess.run([sys.executable, __file__, "--dir", str(dir_), "--measure", engine, str(workers)],
                              capture_output=True, text=True, env=env)
        if done.returncode:
            sys.exit(f"{engine} with {workers} worker(s) failed:\n{done.stderr[-3000:]}")
        for row in json.loads(done.stdout.splitlines()[-1]):
            rows.append({**row, "engine": engine, "workers": workers, "threads": threads})
            result = pl.read_parquet(dir_ / "results" / f"{row['query']}-{engine}-{workers}-{threads}.parquet")
            assert_frame_equal(result, pl.read_parquet(dir_ / "results" / f"{row['query']}-polars-1-1.parquet"))
    return rows


EXPLAIN = """
import json, statistics, sys, time
from datetime import datetime
from observe.store import Store
from queries import jobs
from queries.explain import explain
store, picks = Store(sys.argv[1]), json.loads(sys.argv[2])
if sys.argv[3] == "index":
    jobs.write_index(store)
out = []
for job, kind, at in picks:
    took = []
    for _ in range(5):
        t = time.perf_counter()
        result = explain(store, job, at=datetime.fromisoformat(at))
        took.append(time.perf_counter() - t)
    out.append([job, kind, statistics.median(took), (result.root_cause or {}).get("kind")])
print(json.dumps(out))
"""


def explain_side_by_side(dir_: Path, store: Store, meta: dict, old: bool) -> None:
    """Median of 5 explains per job on the Delta store, and on the old layout by the old code."""
    def run(code_root: Path, store_root: Path, index: str) -> list:
        env = {**os.environ, "PYTHONPATH": str(code_root)}
        done = subprocess.run([sys.executable, "-c", EXPLAIN, str(store_root), json.dumps(meta["explain"]), index],
                              capture_output=True, text=True, env=env, cwd=code_root)
        if done.returncode:
            sys.exit(f"explain failed:\n{done.stderr[-2000:]}")
        return json.loads(done.stdout)

    new = run(ROOT, store.root, "")
    old_rows = None
    if old:
        code, layout = dir_ / "old-code", dir_ / "old-layout"
        if not code.exists():
            code.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_LAYOUT], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
        if not layout.exists():  # the same segments, without the table's log
            for f in store.files(undated=True):
                target = layout / f.relative_to(store.root)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(f, target)
        old_rows = run(code, layout, "index")
    print(f"\n{'job':>12} {'injected':20} {'Delta ms':>9} {'old ms':>8} {'ratio':>6}  found")
    for i, (job, kind, took, found) in enumerate(new):
        before = old_rows[i][2] if old_rows else None
        ratio = f"{took / before:5.2f}x" if before else "     -"
        print(f"{job:>12} {kind:20} {took * 1e3:9.0f} {before * 1e3 if before else float('nan'):8.0f} {ratio}  {found}")
    if old_rows:
        print(f"median Delta / old: {statistics.median(n[2] / o[2] for n, o in zip(new, old_rows)):.2f}x (goal: no slower)")


def estimate(store: Store, meta: dict, rows: list[dict]) -> None:
    """What a 10,000-GPU year takes at the measured per-worker throughput."""
    stats = store.stats()
    events, size = int(stats["rows"].sum()), int(stats["bytes"].sum())
    node_days = meta["nodes"] * meta["days"]
    year = events / node_days * (10_000 / GPUS_PER_NODE) * 365
    print(f"\nstore: {events:,} events, {size / 1e9:.2f} GB, {events / node_days:,.0f} events per node-day, "
          f"{size / events:.1f} bytes per event")
    print(f"a 10,000-GPU year ({10_000 // GPUS_PER_NODE:,} nodes of {GPUS_PER_NODE} GPUs, at this density): "
          f"{year / 1e9:.1f} billion events, {year * size / events / 1e12:.2f} TB")
    for query in ("nodes", "grep"):
        best = max((r for r in rows if r["query"] == query and r["engine"] == "ray"), key=lambda r: r["workers"])
        per_worker = events / best["s"] / best["workers"]
        for workers in (1, 16, 64):
            print(f"  {query} over the year on {workers:>2} Ray workers: {year / per_worker / workers / 60:8.1f} min "
                  f"(at {per_worker / 1e6:.1f} M events/s per worker)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1024, help="cluster size, a multiple of 16 (default 1024)")
    ap.add_argument("--days", type=int, default=30, help="days of events (default 30)")
    ap.add_argument("--dir", type=Path, default=None, help="where the store is kept (default /var/tmp/observe-scale-N-D)")
    ap.add_argument("--no-old", action="store_true", help="skip explain on the old layout")
    ap.add_argument("--build-only", action="store_true",
                    help="build the store (once) and stop: for bench/latency.py --store DIR/store")
    ap.add_argument("--measure", nargs=2, metavar=("ENGINE", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.nodes % GROUP:
        sys.exit(f"--nodes must be a multiple of {GROUP}")
    dir_ = args.dir or Path(f"/var/tmp/observe-scale-{args.nodes}-{args.days}")
    if args.measure:
        return measure(dir_, args.measure[0], int(args.measure[1]))
    store = Store(dir_ / "store")
    if (dir_ / "meta.json").exists():
        meta = json.loads((dir_ / "meta.json").read_text())
    else:
        print(f"generating {args.nodes} nodes x {args.days} days into {dir_} (once) ...", flush=True)
        meta = build(dir_, args.nodes, args.days)
    print(f"store {store.root}: {meta['nodes']} nodes, {meta['days']} days (built in {meta['build_s']} s); "
          f"{os.cpu_count()} cores here")
    if args.build_only:
        return
    rows = fleet_queries(dir_)
    events = int(store.stats()["rows"].sum())
    base = {r["query"]: r["s"] for r in rows if r["engine"] == "polars" and r["threads"] == 1}
    one = {r["query"]: r["s"] for r in rows if r["engine"] == "ray" and r["workers"] == 1}
    print(f"\n{'query':6} {'engine':7} {'workers':>7} {'threads':>7} {'start s':>8} {'median s':>9} "
          f"{'M ev/s/core':>12} {'vs polars':>9} {'scaling':>8} {'rows':>6}")
    for r in rows:
        cores = r["workers"] * r["threads"]
        scaling = f"{one[r['query']] / r['s'] / r['workers']:7.0%}" if r["engine"] == "ray" else "       -"
        print(f"{r['query']:6} {r['engine']:7} {r['workers']:7} {r['threads']:7} {r['start_s']:8.1f} {r['s']:9.2f} "
              f"{events / r['s'] / cores / 1e6:12.1f} {r['s'] / base[r['query']]:8.2f}x {scaling} {r['rows']:6}")
    print("(every result equal to embedded polars' on one thread; goals: Ray at 1 worker within 1.5x of\n"
          " polars on one core; scaling = efficiency at 2 workers against 1; a worker is one core)")
    explain_side_by_side(dir_, store, meta, not args.no_old)
    estimate(store, meta, rows)


if __name__ == "__main__":
    main()
