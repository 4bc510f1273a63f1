"""Where `observe ingest`'s CPU goes, stage by stage, on one layout's logs.

    python bench/ingest_profile.py LOGS          # prints the table (``bench/ingest.py --profile`` runs it)

The real command runs in this process with one worker and polars on one thread. The stages are the
pipeline's own functions, wrapped; they take turns (one lock), so that the process's CPU time while
one runs is its work, polars' thread pool included. A stage's time excludes the stages it calls.
What is left ("other") is what runs while no stage does: the main thread reading the inputs and
handing out units (while a stage runs, it counts in that stage), the threads' hand-offs, the
garbage collector. Taking turns costs wall time, not CPU.
"""
from __future__ import annotations

import os

os.environ["POLARS_MAX_THREADS"] = "1"  # before polars starts its pool: each call on its caller's thread

import contextlib  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# (what the stage does, module, attribute): the functions the pipeline calls, wrapped where they are looked up
STAGES = [
    ("archive: each node-less file's node from its path", "observe.ingest.archive", "directory_nodes"),
    ("plan: each input's format, identity and records stored", "observe.ingest", "plan"),
    ("records: newline scan, continuation lines joined", "observe.ingest.pipeline", "joined_records"),
    ("parse: the collector's fields, input hints, duplicates", "observe.ingest.pipeline", "parse_unit"),
    ("classify: rules, catalogs, defaults", "observe.ingest.parse", "finalize"),
    ("split: stored layout, partitions", "observe.ingest.parse", "buffered_parts"),
    ("write: segments' Parquet encoding and files", "observe.store", "Store.write_partition"),
    ("publish: fsync and rename", "observe.store", "Store.durable"),
    ("commit: the table's log", "observe.store", "Store.commit"),
]


class Profile:
    """CPU seconds per stage, its own only (a per-thread stack takes out the stages it calls)."""

    def __init__(self) -> None:
        self.cpu = {label: 0.0 for label, _, _ in STAGES}
        self.local = threading.local()
        self.lock = threading.RLock()  # stages take turns; a stage's calls into others re-enter
        self.started = self.ended = 0.0  # process CPU when the ingest began and ended

    def wrap(self, label: str, module: str, attribute: str) -> None:
        owner = importlib.import_module(module)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            stack = self.local.__dict__.setdefault("stack", [])
            with self.lock:
                stack.append(0.0)  # CPU of the stages this call makes
                start = time.process_time()
                try:
                    return inner(*args, **kwargs)
                finally:
                    spent = time.process_time() - start
                    nested = stack.pop()
                    if stack:
                        stack[-1] += spent
                    self.cpu[label] += spent - nested

        setattr(owner, name, timed)

    def around_ingest(self) -> None:
        """Note the process CPU when the ingest starts (start-up: interpreter, imports, options)
        and when it ends (then the job index and the summary)."""
        module = importlib.import_module("observe.ingest")
        inner = module.ingest_inputs

        def timed(*args, **kwargs):
            self.started = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.ended = time.process_time()

        module.ingest_inputs = timed


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).exists():
        sys.exit("usage: python bench/ingest_profile.py LOGS")
    logs = Path(sys.argv[1])
    size = sum(f.stat().st_size for f in logs.rglob("*") if f.is_file()) if logs.is_dir() else logs.stat().st_size
    profile = Profile()
    profile.around_ingest()
    for stage in STAGES:
        profile.wrap(*stage)
    from observe.cli import main as observe  # after the wrapping, which it must see

    with tempfile.TemporaryDirectory(prefix="observe-profile-") as tmp, open(os.devnull, "w") as quiet:
        sys.argv = ["observe", "ingest", str(logs), "--store", str(Path(tmp) / "store"), "--workers", "1"]
        try:
            with contextlib.redirect_stdout(quiet):  # the ingest's own summary
                observe()
        except SystemExit as exc:
            if exc.code:
                raise
    total = time.process_time()
    rows = [("start-up: interpreter, imports, options, the store opened", profile.started),
            *profile.cpu.items(),
            ("after: the job index, the summary", total - profile.ended)]
    rows.append(("other: reading inputs, threads' hand-offs, garbage collector", total - sum(cpu for _, cpu in rows)))
    mb = size / 1e6
    print(f"where the CPU goes: {mb:.0f} MB, one worker, polars on one thread; {total:.2f} CPU-s, "
          f"{mb / total:.1f} MB/s per core")
    print(f"{'stage':62}{'CPU-s':>7}{'share':>7}{'ms/MB':>7}")
    for label, cpu in rows:
        print(f"{label:62}{cpu:7.2f}{cpu / total:7.0%}{cpu * 1000 / mb:7.1f}")


if __name__ == "__main__":
    main()
