"""A stamp no real event carries (a user's ``[0000-01-01 00:00:00]``, ``logger -t kernel
'[99999999999999999999.0] x'``, journald's ``__REALTIME_TIMESTAMP`` of -2^63) is refused where it enters
the schema: that record is stored without the time (``attrs.parse_error`` says ``out of range: ...``),
every other record and file is stored, ``observe ingest`` exits 0 and the node collector never
crash-loops on the same bytes (docs/security.md: one record never blinds a node)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe.store import Store

ROOT = Path(__file__).resolve().parent.parent
LOW, HIGH = datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(2200, 1, 1, tzinfo=timezone.utc)
GOOD = "GOODMARK"
SACCT = "JobID|JobName|State|ExitCode|Start|End|NodeList\n"

# (case, --source, extra options, hostile file, its text, good file, its text): each hostile text is one
# an attacker used, or a variant of it
CASES = [
    ("job_output_year_0", None, [], "slurm-5.out",
     "ok line before\n[0000-01-01 00:00:00] gpu001:11:12 [0] NCCL WARN forged\nok line after\n",
     "slurm-6.out", f"other job {GOOD}\n"),
    ("job_output_year_1_tokyo", None, ["--tz", "Asia/Tokyo"], "slurm-5.out",
     "[0001-01-01 00:00:00] gpu001:11:12 [0] NCCL WARN forged\n", "slurm-6.out", f"other job {GOOD}\n"),
    ("syslog_huge_uptime", "syslog", [], "syslog",
     "Nov 28 09:20:00 gpu001 kernel: [99999999999999999999.0] x\n",
     "syslog.1", f"Nov 28 09:20:01 gpu001 kernel: [  12.000000] {GOOD}\n"),
    ("journald_min_realtime", "syslog", [], "journal.json",
     json.dumps({"__REALTIME_TIMESTAMP": "-9223372036854775808", "_TRANSPORT": "syslog", "_UID": "1000",
                 "SYSLOG_IDENTIFIER": "x", "MESSAGE": "forged"}) + "\n",
     "journal2.json", json.dumps({"__REALTIME_TIMESTAMP": "1764300000000000", "_TRANSPORT": "syslog", "_UID": "1000",
                                  "SYSLOG_IDENTIFIER": "x", "MESSAGE": GOOD}) + "\n"),
    ("kernel_year_0_and_huge_uptime", "kernel", [], "dmesg",
     "0000-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y\n"
     "[Mon Jan  1 00:00:00 0000] kernel x\n[99999999999999999999.0] y\n",
     "kern.log", f"2026-11-28T09:00:00,000000+00:00 NVRM: {GOOD}\n"),
    ("slurm_year_0", "slurm", [], "slurmctld.log",
     "[0000-01-01T00:00:00.000] sched: Allocate JobId=1 NodeList=gpu001 #CPUs=2 Partition=gpu\n",
     "slurmctld.log.1", f"[2026-01-01T00:00:00.000] {GOOD}\n"),
    ("slurm_jobs_year_0", "slurm_jobs", [], "sacct.txt",
     SACCT + "1|x|FAILED|1:0|0000-01-01T00:00:00|0001-01-01T00:00:00|gpu001\n",
     "sacct2.txt", SACCT + f"2|{GOOD}|COMPLETED|0:0|2026-01-01T00:00:00|2026-01-01T01:00:00|gpu001\n"),
]


def _sane(df: pl.DataFrame) -> None:
    """Every stored time within 1970..2200, and a hostile record says why it has none."""
    assert df.filter(pl.col("ts").is_not_null() & ~pl.col("ts").is_between(LOW, HIGH)).is_empty()
    assert not df.filter(pl.col("attrs").str.contains('"parse_error":"out of range: ', literal=True)).is_empty()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_ingest_of_a_directory_with_one_hostile_file_stores_the_other(tmp_path: Path, case) -> None:
    _, source, extra, bad_name, bad, good_name, good = case
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / bad_name).write_text(bad)
    (logs / good_name).write_text(good)
    cmd = [sys.executable, "-m", "observe.cli", "ingest", str(logs), "--store", str(tmp_path / "store"),
           "--node", "gpu001", *(["--source", source] if source else []), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    df = Store(tmp_path / "store").scan().collect()
    assert df.filter(pl.col("raw").str.contains(GOOD, literal=True)).height >= 1, "the good file was not stored"
    stored_bad = df.filter(~pl.col("raw").str.contains(GOOD, literal=True))
    assert stored_bad.height >= 1, "the hostile record was not stored"
    _sane(df)


def _collect(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(config), "--once"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_collector_once_never_crash_loops_on_poison_times_and_stores_every_input(tmp_path: Path) -> None:
    """The node's collector with the attackers' records in a user's job output, the syslog, a journald
    export and the kernel log: every run exits 0, a restart dies on nothing, and every good line of
    every input is stored."""
    users = tmp_path / "u"
    users.mkdir()
    (users / "slurm-5.out").write_text("ok line before\n[0000-01-01 00:00:00] gpu001:11:12 [0] NCCL WARN forged\n"
                                       "ok line after\n")
    (users / "slurm-6.out").write_text(f"other job {GOOD}1\n")
    (tmp_path / "syslog").write_text("Nov 28 09:20:00 gpu001 kernel: [99999999999999999999.0] x\n"
                                     f"Nov 28 09:20:01 gpu001 kernel: {GOOD}2\n")
    (tmp_path / "journal.json").write_text("".join(json.dumps(e) + "\n" for e in [
        {"__REALTIME_TIMESTAMP": "-9223372036854775808", "_TRANSPORT": "syslog", "_UID": "1000", "MESSAGE": "forged"},
        {"__REALTIME_TIMESTAMP": "1764300000000000", "_TRANSPORT": "syslog", "_UID": "1000", "MESSAGE": f"{GOOD}3"}]))
    (tmp_path / "kern.log").write_text("0000-01-01T00:00:00,000000+00:00 NVRM: forged\n"
                                       f"2026-11-28T09:00:00,000000+00:00 NVRM: {GOOD}4\n")
    for f in [*users.iterdir(), tmp_path / "syslog", tmp_path / "journal.json", tmp_path / "kern.log"]:
        os.utime(f, (time.time() - 60, time.time() - 60))  # idle: a last line is not one still being written
    config = tmp_path / "c.toml"
    config.write_text("\n".join([
        'node = "gpu001"', f'spool = "{tmp_path / "spool"}"', f'store = "{tmp_path / "central"}"',
        "[[input]]", f'path = "{users}/slurm-*.out"', 'source = "nccl"',
        "[[input]]", f'path = "{tmp_path / "syslog"}"', 'source = "syslog"',
        "[[input]]", f'path = "{tmp_path / "journal.json"}"', 'source = "syslog"',
        "[[input]]", f'path = "{tmp_path / "kern.log"}"', 'source = "kernel"']) + "\n")
    for _ in range(3):  # a restart on the same bytes (and the inputs a first cycle leaves behind)
        done = _collect(config)
        assert done.returncode == 0, done.stderr[-2000:]
    df = shipped(tmp_path / "central").scan().collect().filter(pl.col("source") != "health")
    raw = df.get_column("raw")
    for k in range(1, 5):
        assert raw.str.contains(f"{GOOD}{k}", literal=True).any(), f"input {k} not stored"
    assert raw.str.contains("ok line after", literal=True).any()
    assert df.select("file_id", "offset").is_unique().all()
    _sane(df)
    assert df.filter(pl.col("attrs").str.contains('"parse_error":"out of range: ', literal=True)).height == 4
