"""Collector benchmark: CPU of a live `observe collect` sustaining a line rate, and its lag; with
`--kills N`, N SIGKILLs at random moments, then a check that every line was stored exactly once.

    python bench/collector.py                    # 10,000 lines/s for 30 s
    python bench/collector.py --rate 20000 --seconds 60
    python bench/collector.py --kills 300        # fault injection (about 1.5 s per kill)

Prints the collector's CPU (cores busy, from /proc/<pid>/stat, start-up excluded), the lag behind
the file's end (from its stats.json), and the time from the last line written to that line being
in the central store. Goal: at most 0.2 of a core at 10,000 lines/s.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from observe.store import Store  # noqa: E402

PROGRAMS = ["kernel", "slurmd", "systemd", "sshd", "nv-fabricmanager", "dcgm"]


def line(i: int, t: float) -> str:
    stamp = time.strftime("%b %d %H:%M:%S", time.gmtime(t))
    prog = PROGRAMS[i % len(PROGRAMS)]
    return f"{stamp} gpu001 {prog}[{1000 + i % 97}]: bench line {i} value={i * 7 % 1000} status=ok\n"


def writer(log: Path, rate: int, seconds: float, done: threading.Event, rotate_every: int = 0) -> int:
    """Append ``rate`` lines/s for ``seconds`` in 20 ms bursts; returns how many were written."""
    i = 0
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        if due > i:
            with open(log, "a") as fh:
                fh.write("".join(line(k, time.time()) for k in range(i, due)))
            if rotate_every and i // rotate_every != due // rotate_every:
                os.rename(log, log.with_name(f"syslog.{due // rotate_every}"))
                log.touch()
            i = due
        time.sleep(0.02)
    done.set()
    return i


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def config(tmp: Path, interval: str) -> Path:
    path = tmp / "collector.toml"
    path.write_text(f'node = "gpu001"\nspool = "{tmp / "spool"}"\nstore = "{tmp / "central"}"\n'
                    f'flush_interval = "{interval}"\npartial_timeout = "1s"\n'
                    f'[[input]]\npath = "{tmp / "logs" / "syslog"}"\nsource = "syslog"\n')
    (tmp / "logs").mkdir()
    (tmp / "logs" / "syslog").touch()
    return path


def stored(tmp: Path) -> pl.Series:
    """The bench lines in the central store, once it committed what was shipped (as `observe compact`
    does every few minutes in a fleet; here at once, so the latency is the collector's alone)."""
    central = Store(tmp / "central")
    central.incoming.adopt()
    df = central.scan().select("message").collect()
    return df.get_column("message").str.extract(r"bench line (\d+) ").drop_nulls().cast(pl.Int64)


def sustained(args: argparse.Namespace, tmp: Path) -> None:
    cfg = config(tmp, args.interval)
    proc = subprocess.Popen([sys.executable, "-m", "observe.cli", "collect", "--config", str(cfg)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(3)  # start-up (imports) is not part of the steady state
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    done = threading.Event()
    result: list[int] = []
    w = threading.Thread(target=lambda: result.append(writer(tmp / "logs" / "syslog", args.rate, args.seconds, done)))
    w.start()
    lags = []
    while not done.is_set():
        time.sleep(1)
        try:
            lags.append(json.loads((tmp / "spool" / "stats.json").read_text())["lag_bytes"])
        except (OSError, ValueError, KeyError):
            pass
    w.join()
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    written = result[0]
    while True:  # until the last line is in the central store
        nums = stored(tmp)
        if len(nums) >= written or time.monotonic() - t1 > 120:
            break
        time.sleep(0.2)
    caught_up = time.monotonic() - t1
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    cores = (cpu1 - cpu0) / (t1 - t0)
    print(f"lines written       {written} at {args.rate}/s for {args.seconds:.0f} s (flush every {args.interval})")
    print(f"lines stored        {len(nums)} ({nums.n_unique()} distinct)")
    print(f"collector CPU       {cpu1 - cpu0:.2f} s over {t1 - t0:.1f} s = {cores:.3f} cores "
          f"({cores * 10_000 / args.rate:.3f} cores per 10,000 lines/s; goal 0.2)")
    if lags:
        print(f"lag behind file end median {sorted(lags)[len(lags) // 2] / 1e3:.0f} kB, max {max(lags) / 1e3:.0f} kB")
    print(f"last line stored    {caught_up:.1f} s after it was written")


def kills(args: argparse.Namespace, tmp: Path) -> None:
    cfg = config(tmp, "0.1s")
    done = threading.Event()
    result: list[int] = []
    seconds = args.kills * 1.5
    w = threading.Thread(target=lambda: result.append(
        writer(tmp / "logs" / "syslog", 2000, seconds, done, rotate_every=5000)))
    w.start()
    rng = random.Random(args.seed)
    n = 0
    while not done.is_set() and n < args.kills:
        proc = subprocess.Popen([sys.executable, "-m", "observe.cli", "collect", "--config", str(cfg)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.6, 2.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        n += 1
    w.join()
    time.sleep(1.2)
    subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(cfg), "--once"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    nums = stored(tmp)
    written = result[0]
    counts = nums.value_counts()
    twice = counts.filter(pl.col("count") > 1).height
    lost = written - nums.n_unique()
    print(f"{n} SIGKILLs while {written} lines were written with rotation: {nums.n_unique()} stored, "
          f"{lost} lost, {twice} stored more than once")
    if lost or twice:
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="lines per second (default 10000)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", default="5s", help="the collector's flush_interval (default 5s)")
    ap.add_argument("--kills", type=int, default=0, help="run the SIGKILL fault injection instead")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="observe-bench-collector-"))
    try:
        (kills if args.kills else sustained)(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
