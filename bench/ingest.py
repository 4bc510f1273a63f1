"""Ingest benchmark: `observe ingest` against what a user would run instead, side by side, on three layouts.

    python bench/ingest.py                       # all three layouts, under /tmp/observe-bench
    python bench/ingest.py --layouts syslog      # one of demo, syslog, jobs
    python bench/ingest.py --runs 3              # alternate the parsers 3 times; medians (a noisy machine)
    python bench/ingest.py --fair                # also bench/baseline.py (every rule of observe's, same kinds)
    python bench/ingest.py --profile             # also where observe's CPU goes, stage by stage (bench/ingest_profile.py)

Layouts (generated once, reused):
- ``demo``: ``observe.simulate``'s cluster (``--gb``, default 0.2 GB): Slurm, syslog, dmesg, nvidia-smi, job output.
- ``syslog``: a real-shaped syslog archive (``bench/fleet_logs.py``): 32 nodes over 120 days of real lines
  (loghub's Linux, OpenSSH and Thunderbird daemons, kernel lines of the corpora), 86 MB, and a slurmctld log.
- ``jobs``: 6,000 small job output files of real NCCL and PyTorch lines (``bench/fleet_logs.py``), 25 MB.

The peers (``bench/peers.py``) are what a user fluent in the tools would write: one columnar scan of every
line with one header regex and the Xid / rank / job fields, to zstd Parquet, in polars and in DuckDB: the
yardstick, CPU-s against CPU-s. ``+kinds`` is the polars peer also naming each line's kind with observe's
rules, as a polars user would write it (a ``when`` per rule): the same classification, not the floor. The naive parser (``bench/naive.py``) is what a new user would write: per line
one header match, a few searches for the main event kinds, pyarrow, one process. For each it prints wall
seconds, the ratio to the naive parser,
CPU seconds (the whole process tree, from wait4), MB/s per core of CPU, peak RSS (summed over the tree),
segments written, and store bytes against ``zstd -3`` of the input (observe's also after
``observe compact --grace 0s``).

Each run writes a new store directory; all are removed at the end. Removing the last run's store
just before a run would slow that run down: for a minute or more after a thousand files are
deleted, ext4 steps over their inodes on every file it creates near them (measured here: 0.5 ms
of CPU per file created against 29 us). A second bench started within minutes of the first still meets this.
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


LAYOUTS = ("demo", "syslog", "jobs")


def generated(layout: str, root: Path, gb: float, seed: int) -> Path:
    """The layout's logs under ``root`` (made once; a marker file says they are whole)."""
    logs = root / layout / "logs"
    marker = root / layout / f"generated-{gb if layout == 'demo' else ''}-{seed}"
    if not marker.exists():
        shutil.rmtree(root / layout, ignore_errors=True)
        print(f"generating {layout} logs in {logs} ...", flush=True)
        t = time.perf_counter()
        if layout == "demo":
            from observe.simulate import generate

            generate(logs, seed=seed, target_bytes=int(gb * 1e9))
        else:
            subprocess.run([sys.executable, str(HERE / "fleet_logs.py"), layout, str(logs), "--seed", str(seed)], check=True)
        print(f"  generated in {time.perf_counter() - t:.0f}s", flush=True)
        marker.touch()
    return logs


def segments(store: Path) -> int:
    return sum(1 for _ in (store / "events").rglob("*.parquet")) if (store / "events").is_dir() else 1


def bench(layout: str, logs: Path, stores: Path, runs: int, fair: bool) -> None:
    raw = du(logs)
    files = sum(1 for f in logs.rglob("*") if f.is_file())
    parsers = [("observe", [sys.executable, "-m", "observe.cli", "ingest", str(logs), "--store"]),
               ("polars", [sys.executable, str(HERE / "peers.py"), "polars", str(logs)]),
               ("duckdb", [sys.executable, str(HERE / "peers.py"), "duckdb", str(logs)]),
               ("+kinds", [sys.executable, str(HERE / "peers.py"), "polars-kinds", str(logs)]),
               ("naive", [sys.executable, str(HERE / "naive.py"), str(logs)])]
    if fair:
        parsers.append(("baseline", [sys.executable, str(HERE / "baseline.py"), str(logs)]))
    results: dict[str, list[tuple[float, float, int, int, int]]] = {name: [] for name, _ in parsers}
    for i in range(runs):
        for name, cmd in parsers:
            store = stores / f"{layout}-{name}-{i + 1}"
            seconds, cpu, rss = run([*cmd, str(store)])
            results[name].append((seconds, cpu, rss, du(store), segments(store)))
            print(f"  {layout} run {i + 1} {name}: {seconds:.1f} s, {cpu:.1f} CPU-s, peak RSS {rss / 1e6:.0f} MB",
                  flush=True)
    last = stores / f"{layout}-observe-{runs}"
    compact_s, _, _ = run([sys.executable, "-m", "observe.cli", "compact", "--grace", "0s", "--store", str(last)])
    compacted = du(last)
    z = zstd3(logs)
    med = {name: tuple(statistics.median(r[k] for r in rs) for k in range(5)) for name, rs in results.items()}
    print(f"\n{layout}: {raw / 1e6:.0f} MB in {files} files; medians of {runs} run(s)")
    print(f"{'':10}{'seconds':>9}{'ratio':>7}{'CPU-s':>7}{'MB/s/core':>10}{'RSS MB':>8}{'segments':>9}{'store MB':>9}"
          f"{'/zstd-3':>8}")
    naive = med["naive"][0]
    for name, (seconds, cpu, rss, size, segs) in med.items():
        print(f"{name:10}{seconds:9.2f}{naive / seconds:7.2f}{cpu:7.1f}{raw / 1e6 / cpu:10.1f}{rss / 1e6:8.0f}"
              f"{segs:9.0f}{size / 1e6:9.1f}{size / z:8.2f}")
    print(f"{'compacted':10}{compact_s:9.2f}{'':7}{'':7}{'':10}{'':8}{segments(last):9d}{compacted / 1e6:9.1f}"
          f"{compacted / z:8.2f}")
    pairs = [n[0] / o[0] for o, n in zip(results["observe"], results["naive"])]
    print(f"observe is {naive / med['observe'][0]:.2f}x the naive parser's speed (each run: "
          f"{', '.join(f'{p:.2f}x' for p in pairs)})", flush=True)
    for peer in ("polars", "duckdb", "+kinds"):
        cpu = [o[1] / p[1] for o, p in zip(results["observe"], results[peer])]
        print(f"observe takes {med['observe'][1] / med[peer][1]:.2f}x the CPU of the {peer} peer (each run: "
              f"{', '.join(f'{c:.2f}x' for c in cpu)})", flush=True)
    print(flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    ap.add_argument("--gb", type=float, default=0.2, help="size of the demo layout's logs in GB (default 0.2)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/observe-bench"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1, help="runs of each, alternating; medians are reported")
    ap.add_argument("--fair", action="store_true", help="also run bench/baseline.py (observe's rules, per line)")
    ap.add_argument("--profile", action="store_true",
                    help="also print where observe's CPU goes on each layout, stage by stage (one worker)")
    args = ap.parse_args()
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        sys.exit(f"error: unknown layout {unknown[0]!r}: use {', '.join(LAYOUTS)}")
    stores = args.dir / "stores"
    for layout in layouts:
        logs = generated(layout, args.dir, args.gb, args.seed)
        shutil.rmtree(stores, ignore_errors=True)
        bench(layout, logs, stores, args.runs, args.fair)
        if args.profile:
            subprocess.run([sys.executable, str(HERE / "ingest_profile.py"), str(logs)], check=True)
            print(flush=True)
    shutil.rmtree(stores, ignore_errors=True)


if __name__ == "__main__":
    main()
