"""explain accuracy on 300+ generated failures (observe.demo's BENCH scenario set: 24 seeds, clusters
of 8-24 nodes, every scenario type, clock skew up to 3 s, real corpus lines re-timed).

    python bench/explain_accuracy.py            # generate, ingest, explain every failed job
    python bench/explain_accuracy.py --wrong    # also list the jobs explain got wrong

Prints top-1 and top-3 accuracy per scenario type (goal: top-1 >= 95% overall, no type under 85%)
and the median explain latency.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from observe.demo import BENCH, scenarios
from observe.ingest import ingest_inputs
from observe.store import Store
from queries.accuracy import lines, score, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wrong", action="store_true", help="list the failures explain got wrong")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="observe-accuracy-"))
    try:
        t = time.perf_counter()
        manifests = scenarios(work / "logs", **BENCH)
        print(f"generated {sum(m.bytes for m in manifests) / 1e6:.0f} MB in {time.perf_counter() - t:.0f}s", flush=True)
        store = Store(work / "store")
        t = time.perf_counter()
        summ = ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job, "boot_time": f.boot_time})
                              for m in manifests for f in m.files], store)
        print(f"ingested {summ.stored:,} events in {time.perf_counter() - t:.0f}s", flush=True)
        incidents = [i for m in manifests for i in m.incidents]
        t = time.perf_counter()
        scored = score(store, incidents)
        took = time.perf_counter() - t
        print("\n" + "\n".join(lines(summary(scored), scored)))
        print(f"\n{len(incidents)} failures explained in {took:.1f}s ({1000 * took / len(incidents):.0f} ms each)")
        if args.wrong:
            for row in scored.filter(~scored["top1"]).iter_rows(named=True):
                print(f"  {row['type']:20} job {row['job_id']}: said {row['node']} {row['kind']}, expected {row['expected']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
