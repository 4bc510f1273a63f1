"""Ingest across worker processes: the same records as one process, whatever ran where."""
from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from observe.ingest import pool as parallel
from observe.ingest import ingest, ingest_inputs
from observe.ingest.pool import WorkerError
from observe.process_env import worker_env
from observe.reader import input_files
from observe.simulate import generate
from observe.store import Store

START = datetime(2026, 11, 20, tzinfo=timezone.utc)
COLUMNS = ["file_id", "offset", "ts", "node", "source", "severity", "kind", "job_id", "rank", "gpu", "code",
           "program", "pid", "message", "raw", "attrs"]


def _rows(store: Store) -> pl.DataFrame:
    return store.scan().select(COLUMNS).collect().sort("file_id", "offset")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo cluster's logs plus the awkward cases: a kernel log whose boot time only another
    input tells, a rotated copy sharing its first line, a compressed job file, an empty file."""
    root = tmp_path_factory.mktemp("parallel")
    generate(root, nodes=4, hours=6, seed=3, start=START)
    extra = root / "extra"
    extra.mkdir()
    (extra / "kern.log").write_text("Nov 20 01:00:00 gpu009 kernel: [  100.000000] usb 1-1: new device\n"  # rsyslog's copy
                                    "Nov 20 01:01:40 gpu009 kernel: [  200.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    (extra / "dmesg").write_text("[  200.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    syslog = next(root.rglob("syslog"))
    shutil.copy(syslog, syslog.with_name("syslog.1"))  # the same input twice: stored once
    with gzip.open(extra / "slurm-424242.out.gz", "wt") as f:
        f.write("gpu001:1:1 [0] NCCL INFO Bootstrap : Using eno1\n")
    (extra / "empty.log").write_text("")
    return root


def _inputs(logs: Path) -> list[tuple[str, dict]]:
    files = input_files([str(logs)])
    return [(f, {"node": "gpu009"} if f.endswith("/extra/dmesg") else {}) for f in files]


def test_workers_store_what_one_process_stores(logs: Path, tmp_path: Path) -> None:
    one, two = Store(tmp_path / "one"), Store(tmp_path / "two")
    a = ingest_inputs(_inputs(logs), one, workers=1)
    b = ingest_inputs(_inputs(logs), two, workers=2)
    assert _rows(two).equals(_rows(one))
    for field in ("files", "bytes", "records", "stored", "duplicates", "unparsed", "blank"):
        assert getattr(b, field) == getattr(a, field), field
    assert b.kinds == a.kinds and b.failed == a.failed
    xid = _rows(two).filter(pl.col("kind") == "gpu_xid", pl.col("node") == "gpu009").row(0, named=True)
    assert xid["ts"] == datetime(2026, 11, 20, 1, 1, 40, tzinfo=timezone.utc)  # boot time from kern.log, another task
    assert b.duplicates > 0  # syslog.1 repeats syslog: its records were already there


def test_workers_again_store_nothing(logs: Path, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    first = ingest_inputs(_inputs(logs), store, workers=2)
    again = ingest_inputs(_inputs(logs), store, workers=2)
    assert first.stored > 0 and again.stored == 0 and again.duplicates == again.records


def test_an_input_that_fails_is_reported_and_the_rest_stored(logs: Path, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    odd = tmp_path / "odd.bin"
    odd.write_bytes(bytes(range(256)) * 40)
    summary = ingest([*input_files([str(logs)]), str(odd)], store, workers=2)
    assert [line.split(":")[0] for line in summary.failed] == [str(odd)]
    assert "cannot tell the log format" in summary.failed[0] and summary.stored > 0


def test_a_worker_killed_is_an_error_not_a_hang(logs: Path, tmp_path: Path) -> None:
    killed: list[int] = []

    def kill_a_worker(_: int) -> None:  # progress: a worker has read something
        if not killed:
            kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()]
            workers = [k for k in kids if "observe.ingest.pool" in _cmdline(k)]
            if workers:
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])

    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"ingest worker \d died \(exit code -9\)"):
        ingest(input_files([str(logs)]), Store(tmp_path / "store"), progress=kill_a_worker, workers=2)
    assert killed and time.monotonic() - start < 60


def test_more_workers_than_tasks(logs: Path, tmp_path: Path) -> None:
    """Workers left without a task are stopped at once; the busy one's summary still counts."""
    syslog = str(next(logs.rglob("syslog")))
    one = ingest_inputs([(syslog, {})], Store(tmp_path / "one"), workers=1)
    three = ingest_inputs([(syslog, {})], Store(tmp_path / "three"), workers=3)
    assert three.records == one.records > 0 and three.stored == one.stored and three.files == 1
    assert _rows(Store(tmp_path / "three")).equals(_rows(Store(tmp_path / "one")))


def test_parsing_and_writing_never_import_pyarrow_compute(logs: Path, tmp_path: Path) -> None:
    """pyarrow.compute takes 0.15 s to import (in each worker) and nothing on the ingest path needs it."""
    code = ("import sys; from observe.ingest import ingest; from observe.store import Store; "
            f"s = ingest([{str(next(logs.rglob('syslog')))!r}], Store({str(tmp_path / 'store')!r}), workers=1); "
            "assert s.stored > 0; print('pyarrow.compute' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_workers_ask_glibc_for_huge_pages_unless_told_otherwise() -> None:
    assert worker_env({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    mine = worker_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "HOME": "/root"})
    assert mine["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1" and mine["HOME"] == "/root"
    assert worker_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"
    assert worker_env({})["POLARS_MAX_THREADS"] == "1"


def test_small_runs_stay_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parallel.default_workers(parallel.PARALLEL_MIN_BYTES - 1) == 1
    for cores, workers in ((2, 1), (4, 2), (16, 10)):  # a process keeps about 1.5 cores busy
        monkeypatch.setattr(parallel, "cores", lambda: cores)
        assert parallel.default_workers(parallel.PARALLEL_MIN_BYTES) == workers


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_polars_gets_the_cores_a_commands_own_threads_leave() -> None:
    """One at least (on 2 cores its pool spun under an ingest's threads); the user's own setting wins."""
    def pool(n: int, busy: float, env: dict[str, str]) -> str:
        code = (f"import os; from observe import process_env as p; p.cores = lambda: {n}; p.own_threads({busy}); "
                "import polars; print(os.environ['POLARS_MAX_THREADS'], polars.thread_pool_size())")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    mine = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    assert [pool(n, busy, mine) for n, busy in ((2, 1.5), (8, 1.5), (6, 4), (1, 4))] == ["1 1", "6 6", "2 2", "1 1"]
    assert pool(8, 1.5, {**mine, "POLARS_MAX_THREADS": "3"}) == "3 3"
