"""Ingest benchmark: `observe ingest` against the naive per-line baseline (bench/baseline.py) on the
same generated logs, side by side; also store bytes against `zstd -3` of the same raw text.

    python bench/ingest.py                      # ~1.1 GB of generated mixed logs in /tmp/observe-bench
    python bench/ingest.py --gb 0.2 --dir DIR   # a smaller run

Prints MB/s of each, the speed ratio, peak RSS of each, and store sizes (observe's also after
`observe compact`, which rewrites partitions with slower, tighter zstd levels).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(cmd: list[str]) -> tuple[float, int]:
    """Run ``cmd``; return wall seconds and peak RSS in bytes (from wait4's rusage)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}: {proc.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_maxrss * 1024


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
    args = ap.parse_args()
    logs = args.dir / "logs"
    marker = args.dir / f"generated-{args.gb}-{args.seed}"
    if not marker.exists():
        from observe.demo import generate

        shutil.rmtree(args.dir, ignore_errors=True)
        print(f"generating {args.gb} GB of logs in {logs} ...", flush=True)
        t = time.perf_counter()
        generate(logs, seed=args.seed, target_bytes=int(args.gb * 1e9))
        print(f"  generated in {time.perf_counter() - t:.0f}s", flush=True)
        marker.touch()
    raw = du(logs)
    files = sum(1 for f in logs.rglob("*") if f.is_file())
    results = {}
    for name, cmd in [
        ("observe", [sys.executable, "-m", "observe.cli", "ingest", str(logs), "--store", str(args.dir / "store-observe")]),
        ("baseline", [sys.executable, str(HERE / "baseline.py"), str(logs), str(args.dir / "store-baseline")]),
    ]:
        shutil.rmtree(args.dir / f"store-{name}", ignore_errors=True)
        print(f"running {name} ...", flush=True)
        seconds, rss = run(cmd)
        results[name] = (seconds, rss, du(args.dir / f"store-{name}"))
    print("compacting observe's store ...", flush=True)
    compact_s, compact_rss = run([sys.executable, "-m", "observe.cli", "compact", "--store", str(args.dir / "store-observe")])
    compacted = du(args.dir / "store-observe")
    z = zstd3(logs)
    print(f"\ninput: {raw / 1e6:.0f} MB in {files} files ({args.dir})")
    print(f"{'':10}{'seconds':>10}{'MB/s':>10}{'peak RSS MB':>14}{'store MB':>10}{'store/zstd-3':>14}")
    for name, (seconds, rss, size) in results.items():
        print(f"{name:10}{seconds:10.1f}{raw / 1e6 / seconds:10.1f}{rss / 1e6:14.0f}{size / 1e6:10.1f}{size / z:14.2f}")
    print(f"{'compacted':10}{compact_s:10.1f}{'':10}{compact_rss / 1e6:14.0f}{compacted / 1e6:10.1f}{compacted / z:14.2f}"
          "   (observe compact: text columns zstd 16, others 6)")
    print(f"{'zstd -3':10}{'':10}{'':10}{'':14}{z / 1e6:10.1f}{1:14.2f}")
    print(f"\nspeed ratio observe / baseline: {results['baseline'][0] / results['observe'][0]:.2f}x")


if __name__ == "__main__":
    main()
