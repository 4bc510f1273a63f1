"""The settings a process that runs its own threads (ingest, compaction) runs its libraries with: read by polars
and its allocator when polars is first imported, by glibc when a process starts. Apart from the packages that
import polars, so that a command can set them first.

Ingest's parallelism is its own (a parse thread and a writer thread in one process, or worker processes), and
so is compaction's (a thread per core, up to four, each rewriting a batch). polars' pool of a thread per core on
top of them spins for work on the same cores (measured on the bench's real-shaped syslog in one process on 2
cores: 145,000 involuntary context switches against 17,000 with one polars thread, and a tenth of the CPU), so
it gets the cores they leave; and both allocators keep freed memory for the next chunk instead of handing it
back to the kernel and faulting it in again (measured in workers: system time 3.0 s -> 1.9 s over the bench).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping

ALLOCATOR = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:5000,muzzy_decay_ms:0"}  # read when polars is imported
WORKER_LIBRARY_ENV = {"POLARS_MAX_THREADS": "1", **ALLOCATOR}  # a worker is one of a core's worth of processes
# the cores one ingest process keeps busy with its parse and write threads (bench's real-shaped syslog, 86 MB: 1.46);
# on 2 cores a second process finished no sooner (5.1-5.4 s against 5.2-5.3) for 10-25% more CPU
PROCESS_CORES = 1.5
COMPACT_THREADS = 4  # threads rewriting at once at most, each holding a slice (peak ~10x COMPACT_SLICE_BYTES)
PROCESS_ENV = {  # read by glibc at a process's start: a worker gets them
    "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
}
# glibc's malloc (2.35 and later) asks for transparent huge pages where the kernel gives them on
# request (THP "madvise", Debian's and Ubuntu's default): the read buffers and Python's heap then
# fault in 2 MB at a time (measured on the bench: 475k -> 320k page faults, ~0.3 s less wall time).
# Older glibc and other C libraries ignore it; a user's own setting of it wins.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def own_threads(busy: float) -> None:
    """This process's polars and allocator for a command whose own threads keep ``busy`` cores busy: polars gets
    the cores they leave, one at least (on 2 cores one, where its pool spun under an ingest's threads; on a larger
    host the rest, for what the command reads after: an ingest's job index over the whole store). The user's
    environment wins; nothing once polars is imported (what it read then stays)."""
    if "polars" not in sys.modules:
        for name, value in {"POLARS_MAX_THREADS": str(max(1, int(cores() - busy))), **ALLOCATOR}.items():
            os.environ.setdefault(name, value)


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a worker process: ``environ`` with the settings above, and glibc's huge pages
    asked for unless ``GLIBC_TUNABLES`` already says how."""
    env = {**environ, **WORKER_LIBRARY_ENV, **PROCESS_ENV}
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    if not any(t.startswith("glibc.malloc.hugetlb=") for t in tunables):
        env["GLIBC_TUNABLES"] = ":".join([*tunables, HUGE_PAGES_TUNABLE])
    return env
