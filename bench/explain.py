"""Explain benchmark: `observe explain` latency on a large generated store against `rg` over the same
raw logs (the operator's way today: search every log for the job's nodes and id).

    python bench/explain.py                   # ~1.1 GB of logs (about 10 million events)
    python bench/explain.py --gb 5.5          # about 50 million events (a month of a 256-node cluster)
    python bench/explain.py --gb 0.1 --jobs 3 # a quick run

Generates the logs with observe.simulate (kept in --dir for later runs), ingests, compacts and indexes
them once (as a long-running store is), then for
--jobs failed jobs of the ground truth prints the median of 5 explain runs (in process, warm) and of
`rg` searching all raw logs for the job's nodes and id, with the ratio and whether explain named
the injected root cause. Needs `rg` (apt-get install ripgrep).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.1, help="size of generated logs in GB (default 1.1)")
    ap.add_argument("--nodes", type=int, default=64, help="cluster size (default 64)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/observe-bench-explain"))
    ap.add_argument("--jobs", type=int, default=8, help="failed jobs to explain (default 8)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("rg") is None:
        sys.exit("needs rg (ripgrep): apt-get install ripgrep")
    from observe.ingest import ingest_inputs
    from observe.simulate import generate
    from observe.store import Store, notable
    from queries import jobs
    from queries.explain import explain

    logs, store_dir = args.dir / "logs", args.dir / "store"
    truth_file = args.dir / f"incidents-{args.gb}-{args.nodes}-{args.seed}.json"
    store = Store(store_dir)
    if not truth_file.exists():
        shutil.rmtree(args.dir, ignore_errors=True)
        print(f"generating {args.gb} GB of logs for {args.nodes} nodes in {logs} ...", flush=True)
        t = time.perf_counter()
        manifest = generate(logs, nodes=args.nodes, seed=args.seed, target_bytes=int(args.gb * 1e9))
        print(f"  generated in {time.perf_counter() - t:.0f}s; ingesting ...", flush=True)
        t = time.perf_counter()
        summary = ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job})
                                 for f in manifest.files], store)
        print(f"  {summary.stored:,} events stored in {time.perf_counter() - t:.0f}s; compacting ...", flush=True)
        t = time.perf_counter()
        for partition in store.partitions():  # what a long-running store looks like: compacted, indexed
            store.compactor.compact(partition)
        jobs.write_index(store)
        notable.refresh(store)
        print(f"  compacted and indexed in {time.perf_counter() - t:.0f}s", flush=True)
        truth_file.write_text(json.dumps(manifest.incidents))
    incidents = json.loads(truth_file.read_text())
    events = sum(row["rows"] for row in store.stats().iter_rows(named=True))
    files = [str(p) for p in sorted(logs.rglob("*")) if p.is_file()]
    raw = sum(Path(f).stat().st_size for f in files)
    print(f"\nstore: {events:,} events from {raw / 1e9:.2f} GB of logs in {len(files)} files ({args.dir})")
    print(f"{'job':>8} {'type':20} {'explain ms':>11} {'rg ms':>9} {'ratio':>7}  verdict")
    ratios = []
    for inc in incidents[: args.jobs]:
        at = datetime.fromisoformat(inc["ts"])
        result, took = None, []
        for _ in range(5):
            t = time.perf_counter()
            result = explain(store, inc["job_id"], at=at)
            took.append(time.perf_counter() - t)
        nodes = result.nodes or [inc["node"]]
        pattern = ["-e", inc["job_id"], *(x for n in nodes for x in ("-e", n))]
        rg = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run(["rg", "-c", "--no-messages", *pattern, *files], stdout=subprocess.DEVNULL, check=False)
            rg.append(time.perf_counter() - t)
        e_ms, r_ms = statistics.median(took) * 1e3, statistics.median(rg) * 1e3
        ratios.append(r_ms / e_ms)
        root = result.root_cause or {}
        hit = root.get("node") in inc.get("nodes", [inc["node"]]) and root.get("kind") == inc["kind"]
        print(f"{inc['job_id']:>8} {inc['type']:20} {e_ms:11.1f} {r_ms:9.1f} {r_ms / e_ms:6.1f}x  "
              f"{'right' if hit else 'WRONG'}: {root.get('node')} {root.get('kind')}")
    print(f"\nmedian ratio rg / explain: {statistics.median(ratios):.1f}x (goal: at least 20x)")


if __name__ == "__main__":
    main()
