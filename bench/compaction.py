"""Compaction of partitions that keep growing, side by side with the code before it merged only new
segments (OLD: each compaction rewrote a partition whole, and cut an undated one by input ranges,
reading every segment once per output file).

The data is real lines nobody on the team wrote (``bench/fleet_logs.py``): thousands of job output
files of NCCL and PyTorch lines without times (one undated partition, which retention keeps) and a
day of 32 nodes' syslog (today's dated partitions), arriving as a fleet's do. First a backlog (half
of it, never compacted: one large compaction), then ``--rounds`` rounds, each appending the next
piece of every node's syslog and adding the next job files, ingested by the current code into both
stores, then compacted: by the old code in one store, by the new in the other, each in its own
process. Both stores must end with the same records (checked).

    python bench/compaction.py                      # --files 16000 --mb 60 --rounds 8 (about 10 min), data kept in --dir
    python bench/compaction.py --files 2000 --mb 8 --rounds 3 --dir /tmp/cb   # a quick check
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fleet_logs  # noqa: E402
from observe.ingest import ingest  # noqa: E402
from observe.store import Store  # noqa: E402

OLD = "cdac4c9"  # the last commit whose compaction rewrote partitions whole
COMPACT = """
import json, sys, time
from observe.store import Store
s = Store(sys.argv[1])
t = time.perf_counter()
done = s.compactor.compact_many(s.partitions(), file_rows=int(sys.argv[2]))
print(json.dumps({"s": time.perf_counter() - t, "replaced": sum(n for n, _ in done),
                  "rows": sum(r for _, r in done), "files": len(s.files(undated=True))}))
"""


def pieces(data: bytes, n: int) -> list[bytes]:
    """``data`` cut at line ends into ``n`` pieces of about equal size."""
    out, at = [], 0
    for i in range(1, n + 1):
        end = len(data) if i == n else data.find(b"\n", len(data) * i // n) + 1 or len(data)
        out.append(data[at:end])
        at = end
    return out


def compact(code: Path, store: Path, file_rows: int) -> dict:
    done = subprocess.run([sys.executable, "-c", COMPACT, str(store), str(file_rows)], cwd=code, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(code)}, check=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/observe-compaction"))
    ap.add_argument("--files", type=int, default=16000, help="job output files (about 4 KB each)")
    ap.add_argument("--mb", type=float, default=60, help="MB of syslog over the day")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--file-rows", type=int, default=100_000,
                    help="rows per compacted file (observe's default is 1,000,000: this is a tenth-scale fleet)")
    args = ap.parse_args()
    src = args.dir / f"logs-{args.files}-{args.mb:g}"
    if not src.is_dir():
        print(f"writing {args.files} job files and {args.mb:g} MB of syslog to {src} ...", flush=True)
        fleet_logs.jobs(src, files=args.files)
        fleet_logs.syslog(src, nodes=32, days=1, mb=args.mb)
    old_code = args.dir / f"code-{OLD}"
    if not old_code.is_dir():
        old_code.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive.stdout, check=True)
    live, stores = args.dir / "live", {"old": args.dir / "store-old", "new": args.dir / "store-new"}
    for d in (live, *stores.values()):
        shutil.rmtree(d, ignore_errors=True)
    code = {"old": old_code, "new": ROOT}

    # the backlog is half of everything; each round then adds an equal share of the rest
    logs = sorted(src.glob("nodes/*/syslog"))
    cut = {f: pieces(f.read_bytes(), 2 * args.rounds) for f in logs}
    jobs = sorted(src.glob("jobs/*.out"))
    share = [jobs[: len(jobs) // 2]] + [jobs[len(jobs) // 2:][i::args.rounds] for i in range(args.rounds)]
    print(f"{'round':>8} {'new rows':>9} | {'old s':>6} {'new s':>6} {'ratio':>6} | {'old rewrote':>11} "
          f"{'new rewrote':>11} | {'old files':>9} {'new files':>9}")
    totals = {"old": 0.0, "new": 0.0}
    for r in range(args.rounds + 1):
        paths = []
        for f in logs:
            target = live / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("ab") as out:
                out.write(b"".join(cut[f][: args.rounds]) if r == 0 else cut[f][args.rounds + r - 1])
            paths.append(str(target))
        paths += [str(j) for j in share[r]]
        stored = [ingest(paths, Store(stores[k])).stored for k in ("old", "new")]
        assert stored[0] == stored[1], stored
        rows = stored[1]
        got = {k: compact(code[k], stores[k], args.file_rows) for k in ("old", "new")}
        for k in got:
            totals[k] += got[k]["s"]
        print(f"{'backlog' if r == 0 else r:>8} {rows:>9,} | {got['old']['s']:>6.2f} {got['new']['s']:>6.2f} "
              f"{got['new']['s'] / got['old']['s']:>5.2f}x | {got['old']['rows']:>11,} {got['new']['rows']:>11,} | "
              f"{got['old']['files']:>9} {got['new']['files']:>9}", flush=True)
    keys = [Store(stores[k]).scan(undated=True).select("file_id", "offset", "raw").collect().sort("file_id", "offset")
            for k in ("old", "new")]
    assert keys[0].equals(keys[1]), "the stores differ"
    print(f"total compaction: old {totals['old']:.1f} s, new {totals['new']:.1f} s "
          f"({totals['new'] / totals['old']:.2f}x); both hold the same {keys[0].height:,} records")


if __name__ == "__main__":
    main()
