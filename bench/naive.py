"""The naive parser ingest is measured against, as a new user would write one: per line, one match for
the header, a few searches for the main event kinds, then pyarrow; one process.

Reads a directory laid out like ``observe.simulate`` and ``bench/fleet_logs.py`` write it
(``slurm/slurmctld.log``, ``nodes/<node>/syslog|dmesg``, ``jobs/slurm-<id>.out``; other files are
skipped) and writes ``OUT_DIR/events.parquet`` (zstd), 100k rows at a time. ``bench/baseline.py`` is the
heavier, fair one: every rule of observe's rule files, the same kinds as observe.

Usage: python bench/naive.py INPUT_DIR OUT_DIR
"""
from __future__ import annotations

import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import MONTHS, file_format  # noqa: E402

BATCH_ROWS = 100_000
HEADERS = {  # one match per line, by the file's format
    "syslog": re.compile(r"^(\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\S+) ([^:\[]+)(?:\[(\d+)\])?: ?(.*)$"),
    "dmesg": re.compile(r"^\[\s*(\d+\.\d+)\] ?()()()()()()()(.*)$"),
    "slurm": re.compile(r"^\[(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)[.\d]*\] ()()()(.*)$"),
    "nccl": re.compile(r"^(?:(\S+):(\d+):\d+ \[(\d+)\] )?()()()()()()(.*)$"),
}
KINDS = [  # (kind, literal, regex for its fields): the main event kinds
    ("gpu_xid", "Xid", re.compile(r"Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")),
    ("oom_kill", "Killed process", re.compile(r"Killed process (\d+) \(([^)]*)\)")),
    ("ib_link_down", "Link DOWN", re.compile(r"()(Link DOWN)")),
    ("nccl_timeout", "Watchdog caught collective operation timeout", re.compile(r"SeqNum=(\d+), OpType=(\w+)")),
    ("gpu_fell_off_bus", "fallen off the bus", re.compile(r"GPU at PCI:([0-9a-fA-F:.]+)()")),
]
SCHEMA = pa.schema([("ts", pa.timestamp("us", "UTC")), ("node", pa.string()), ("program", pa.string()),
                    ("kind", pa.string()), ("code", pa.string()), ("detail", pa.string()), ("message", pa.string()),
                    ("file", pa.string()), ("offset", pa.int64())])


def rows(path: Path, fmt: str, year: int):
    header = HEADERS["slurm" if fmt == "slurm" else fmt]
    node = path.parent.name if fmt in ("syslog", "dmesg") else None
    offset = 0
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            m = header.match(line)
            ts, program, message = None, None, line
            if m:
                g = m.groups()
                message = g[8]
                if fmt == "syslog":
                    ts = datetime(year, MONTHS.get(g[0], 1), int(g[1]), int(g[2]), int(g[3]), int(g[4]), tzinfo=timezone.utc)
                    node, program = g[5], g[6]
                elif fmt == "slurm":
                    ts = datetime(*map(int, g[:6]), tzinfo=timezone.utc)
            kind, code, detail = "log", None, None
            for name, literal, pattern in KINDS:
                if literal in message:
                    hit = pattern.search(message)
                    if hit:
                        kind, detail, code = name, hit.group(1), hit.group(2)
                        break
            yield ts, node, program, kind, code, detail, message, str(path), offset
            offset += len(raw)


def run(input_dir: Path, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    with pq.ParquetWriter(out_dir / "events.parquet", SCHEMA, compression="zstd") as writer:
        batch: list[tuple] = []
        for root, _, files in sorted(os.walk(input_dir)):
            for name in sorted(files):
                path = Path(root) / name
                fmt = file_format(path)
                if fmt not in ("syslog", "dmesg", "slurm", "nccl"):
                    continue
                year = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).year
                for row in rows(path, fmt, year):
                    batch.append(row)
                    if len(batch) >= BATCH_ROWS:
                        total += _write(writer, batch)
                        batch = []
        if batch:
            total += _write(writer, batch)
    return total


def _write(writer: pq.ParquetWriter, batch: list[tuple]) -> int:
    columns = [pa.array(values, field.type) for values, field in zip(zip(*batch), SCHEMA)]
    writer.write_table(pa.Table.from_arrays(columns, schema=SCHEMA))
    return len(batch)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print(f"{run(Path(argv[0]), Path(argv[1]))} rows -> {Path(argv[1]) / 'events.parquet'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
