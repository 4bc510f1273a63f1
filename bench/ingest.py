"""Ingest benchmark: `observe ingest` against the naive per-line baseline (bench/baseline.py) on the
same generated logs, side by side; also store bytes against `zstd -3` of the same raw text.

    python bench/ingest.py                      # ~1.1 GB of generated mixed logs in /tmp/observe-bench
    python bench/ingest.py --gb 0.2 --dir DIR   # a smaller run
    python bench/ingest.py --runs 3             # alternate the two 3 times; medians (a noisy machine)

Prints MB/s of each, the speed ratio, CPU seconds and peak RSS of each (summed over the process
tree: observe parses in one worker process per core), and store sizes (observe's also after
`observe compact --grace 0s`, which rewrites partitions with slower, tighter zstd levels).

Each run writes a new store directory; all are removed at the end. Removing the last run's store
just before a run would slow that run down: for a minute or more after a thousand files are
deleted, ext4 steps over their inodes on every file it creates near them (measured here: 0.5 ms
of CPU per file created against 29 us; observe writes ~1,000 files for 77 days of logs, the
baseline one file). A second bench started within minutes of the first still meets this.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (observe parses in worker processes),
    found through /proc/<pid>/task/<tid>/children."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
        except OSError:
            pass
    return total


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Run ``cmd``; return wall seconds, CPU seconds (its whole process tree, from wait4) and the peak
    of the resident memory summed over its process tree (sampled every 50 ms)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.returncode is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}: {proc.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_utime + usage.ru_stime, peak


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def zstd3(logs: Path) -> int:
    """Bytes of `zstd -3` over all the raw text, concatenated."""
    files = sorted(str(f) for f in logs.rglob("*") if f.is_file())
    cat = subprocess.Popen(["cat", *files], stdout=subprocess.PIPE)
    out = subprocess.run(["zstd", "-3", "-q", "-c", "-T1"], stdin=cat.stdout, capture_output=True, check=True)
    cat.wait()
    return len(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.1, help="size of generated logs in GB (default 1.1)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/observe-bench"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1, help="runs of each, alternating; medians are reported")
    args = ap.parse_args()
    logs = args.dir / "logs"
    marker = args.dir / f"generated-{args.gb}-{args.seed}"
    if not marker.exists():
        from observe.simulate import generate

        shutil.rmtree(args.dir, ignore_errors=True)
        print(f"generating {args.gb} GB of logs in {logs} ...", flush=True)
        t = time.perf_counter()
        generate(logs, seed=args.seed, target_bytes=int(args.gb * 1e9))
        print(f"  generated in {time.perf_counter() - t:.0f}s", flush=True)
        marker.touch()
    raw = du(logs)
    files = sum(1 for f in logs.rglob("*") if f.is_file())
    stores = args.dir / "stores"
    shutil.rmtree(stores, ignore_errors=True)
    runs: dict[str, list[tuple[float, float, int, int]]] = {"observe": [], "baseline": []}
    for i in range(args.runs):
        for name, cmd in [
            ("observe", [sys.executable, "-m", "observe.cli", "ingest", str(logs), "--store"]),
            ("baseline", [sys.executable, str(HERE / "baseline.py"), str(logs)]),
        ]:
            store = stores / f"{name}-{i + 1}"
            seconds, cpu, rss = run([*cmd, str(store)])
            runs[name].append((seconds, cpu, rss, du(store)))
            print(f"run {i + 1} {name}: {seconds:.1f} s, {cpu:.1f} CPU-s, peak RSS {rss / 1e6:.0f} MB", flush=True)
    results = {name: tuple(statistics.median(r[k] for r in rs) for k in range(4)) for name, rs in runs.items()}
    print("compacting observe's store ...", flush=True)
    last = stores / f"observe-{args.runs}"
    compact_s, _, compact_rss = run([sys.executable, "-m", "observe.cli", "compact", "--grace", "0s", "--store", str(last)])
    compacted = du(last)
    shutil.rmtree(stores, ignore_errors=True)
    z = zstd3(logs)
    print(f"\ninput: {raw / 1e6:.0f} MB in {files} files ({args.dir}); medians of {args.runs} run(s)")
    print(f"{'':10}{'seconds':>10}{'MB/s':>10}{'CPU-s':>8}{'peak RSS MB':>14}{'store MB':>10}{'store/zstd-3':>14}")
    for name, (seconds, cpu, rss, size) in results.items():
        print(f"{name:10}{seconds:10.1f}{raw / 1e6 / seconds:10.1f}{cpu:8.1f}{rss / 1e6:14.0f}{size / 1e6:10.1f}{size / z:14.2f}")
    print(f"{'compacted':10}{compact_s:10.1f}{'':10}{'':8}{compact_rss / 1e6:14.0f}{compacted / 1e6:10.1f}{compacted / z:14.2f}"
          "   (observe compact: text columns zstd 16, others 6)")
    print(f"{'zstd -3':10}{'':10}{'':10}{'':8}{'':14}{z / 1e6:10.1f}{1:14.2f}")
    pairs = [b[0] / o[0] for o, b in zip(runs["observe"], runs["baseline"])]
    print(f"\nspeed ratio observe / baseline: {results['baseline'][0] / results['observe'][0]:.2f}x"
          f" (each run: {', '.join(f'{p:.2f}x' for p in pairs)})")


if __name__ == "__main__":
    main()
