"""Ingest across worker processes: one per core, each with its own parse pipeline and segment writer.

Threads of one process share the interpreter lock and the allocator, and polars hands each call to
its own thread pool; processes keep every core busy instead (measured on the bench's 1.1 GB on two
cores: 9.2 s with threads, 7.9 s with two workers). The main process plans the run and hands out
tasks, largest first, each to the first worker that is free; it collects the boot times the
workers learned before it hands out the kernel logs that need them, and adds up their summaries.
Workers write their own segments into the store.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection, wait

from observe import boot_copies
from observe.process_env import PROCESS_CORES, cores, worker_env
from observe.ingest.pipeline import Pipeline, run_step
from observe.ingest.plan import Step, Task, plan, tasks
from observe.ingest.summary import Summary
from observe.reader import CHUNK_BYTES
from observe.store import Store

PARALLEL_MIN_BYTES = 64 << 20  # smaller runs stay in one process (a worker takes ~0.3 s to start)
TASK_BYTES = 4 * CHUNK_BYTES  # small files of one format are handed out in batches of four parse units
# Per worker: one parse thread and one writer thread, and half the chunks waiting in the writer that
# one process keeps (the workers together keep as many)
WORKER_PARSE_THREADS = 1
WORKER_WRITER = {"max_rows": 250_000, "budget_bytes": 128 << 20, "threads": 1}


class WorkerError(RuntimeError):
    """A worker process failed or died; the message is one line."""


def default_workers(total_bytes: int) -> int:
    """For runs of at least PARALLEL_MIN_BYTES, one worker per PROCESS_CORES cores; 1 (this process) otherwise."""
    return 1 if total_bytes < PARALLEL_MIN_BYTES else max(1, int(cores() / PROCESS_CORES))


def ingest(inputs: list[tuple[str, dict]], store: Store, workers: int,
           progress: Callable[[int], None] | None = None) -> Summary:
    """Ingest ``inputs`` (no stdin) with ``workers`` processes; their summaries added up. The workers
    start first, so that they import their libraries while this process plans the run; tasks go
    out largest first (measured: handing the big files out while the small ones are still being
    planned starts the workers 0.35 s sooner but ends 0.3 s later). Without boot-relative kernel
    logs to wait for, nothing waits for all workers: each writes what it holds as soon as no task
    is left for it (measured on the bench: 0.26 s sooner done)."""
    with _Workers(store, workers, progress) as pool:
        planned = plan(inputs, store)
        first, last = tasks(planned, task_bytes(sum(p.size for p in planned), workers))
        pool.submit(sorted(first, key=_size, reverse=True))
        if last:
            pool.run()
            copies = boot_copies.Copies()
            for learned in pool.each("flush" if _ids(first) & _ids(last) else "drain"):
                copies.add(learned)
            pool.submit([[_with_boot_copies(step, copies) for step in task] for task in last])
        total = Summary()
        for summary in pool.finish():
            total.add(summary)
    return total


def task_bytes(total: int, workers: int) -> int:
    """How much of a run's small files one task holds: TASK_BYTES, or less, so that each worker gets
    three tasks or more and none is left with a long tail (a chunk's worth at least)."""
    return min(TASK_BYTES, max(CHUNK_BYTES, total // (3 * workers)))


def _ids(todo: list[Task]) -> set[str]:
    return {p.file_id for task in todo for step in task for p in step.inputs if p.file_id}


def _size(task: Task) -> int:
    return sum(step.size for step in task)


def _with_boot_copies(step: Step, copies: boot_copies.Copies) -> Step:
    """``step`` with what dates each input's records, unless its boot time is given: the first tasks' copies of its
    node's kernel records."""
    return replace(step, inputs=tuple(
        replace(p, opts={**p.opts, "learned_boot_copies": copies.of(p.opts.get("node"))})
        if not p.opts.get("boot_time") else p for p in step.inputs))


class _Workers:
    """Worker processes (``python -c`` running :func:`serve`, so the caller's main module is never
    imported again), each with a command pipe and a result pipe carrying pickled messages."""

    def __init__(self, store: Store, n: int, progress: Callable[[int], None] | None):
        self.progress = progress
        self.procs: list[subprocess.Popen] = []
        self.commands: list[Connection] = []
        self.results: list[Connection] = []
        env = worker_env(os.environ)
        for _ in range(n):
            cmd_r, cmd_w = os.pipe()
            res_r, res_w = os.pipe()
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", "import sys; from observe.ingest.pool import serve; serve(*sys.argv[1:])",
                 str(cmd_r), str(res_w), store.location], pass_fds=(cmd_r, res_w), env=env))
            os.close(cmd_r)
            os.close(res_w)
            self.commands.append(Connection(cmd_w, readable=False))
            self.results.append(Connection(res_r, writable=False))
        self.pending: deque[Task] = deque()
        self.busy: set[int] = set()  # workers running a task

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self.commands + self.results:
            conn.close()
        for proc in self.procs:
            if exc[0] is not None and proc.poll() is None:
                proc.kill()
            proc.wait()

    def submit(self, todo: list[Task]) -> None:
        """Queue tasks, and hand out what the workers can take now."""
        self.pending.extend(todo)
        self._hand_out()

    def _hand_out(self) -> None:
        for wid in range(len(self.procs)):
            if self.pending and wid not in self.busy:
                self.commands[wid].send(("task", self.pending.popleft()))
                self.busy.add(wid)

    def run(self, stopping: dict[int, str] | None = None) -> None:
        """Run every task queued, each on the first worker free; with ``stopping``, a worker left
        without a task is told to stop at once (and noted there)."""
        while self.pending or self.busy:
            if stopping is not None and not self.pending:
                self._stop(stopping)
            wid, _ = self._next({wid: "done" for wid in self.busy})
            self.busy.discard(wid)
            self._hand_out()

    def each(self, command: str) -> list:
        """Send ``command`` to every worker; their answers, in worker order."""
        for conn in self.commands:
            conn.send((command, None))
        return self._answers({wid: command for wid in range(len(self.procs))})

    def finish(self) -> list[Summary]:
        """Run every task queued, then stop the workers, each as soon as nothing is left for it
        (it writes what it holds while the others finish their tasks); their summaries, in worker order."""
        stopping: dict[int, str] = {}
        self.run(stopping)
        self._stop(stopping)
        return self._answers(stopping)

    def _stop(self, stopping: dict[int, str]) -> None:
        """Tell each idle worker not yet ``stopping`` to stop."""
        for wid in range(len(self.procs)):
            if wid not in self.busy and wid not in stopping:
                self.commands[wid].send(("stop", None))
                stopping[wid] = "stop"

    def _answers(self, expected: dict[int, str]) -> list:
        """The answers of the workers in ``expected`` (worker -> the kind of answer awaited), in worker order."""
        answers: dict[int, object] = {}
        while len(answers) < len(expected):
            wid, answer = self._next({w: kind for w, kind in expected.items() if w not in answers})
            answers[wid] = answer
        return [answers[w] for w in sorted(expected)]

    def _next(self, expected: dict[int, str]) -> tuple[int, object]:
        """The next answer from one of the workers in ``expected`` (worker -> the kind of answer
        awaited; progress reports are passed on); a worker's error, or its death, raises here."""
        conns = {self.results[wid]: wid for wid in expected}
        while True:
            for conn in wait(list(conns)):
                wid = conns[conn]
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    code = self.procs[wid].wait()
                    raise WorkerError(f"ingest worker {wid} died (exit code {code})") from None
                if kind == "read":
                    if self.progress:
                        self.progress(payload)
                elif kind == "error":
                    raise payload
                elif kind != expected[wid]:
                    raise WorkerError(f"ingest worker {wid} answered {kind!r} to {expected[wid]!r}")
                else:
                    return wid, payload


def serve(commands_fd: str, results_fd: str, root: str) -> None:
    """A worker: tasks into one pipeline and writer; ``drain``/``flush`` answer the boot times
    learned so far; ``stop`` writes what is left and answers the summary."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides what an interrupt stops
    commands = Connection(int(commands_fd), writable=False)
    results = Connection(int(results_fd), readable=False)
    store, summary = Store(root), Summary()
    try:
        with store.writer(**WORKER_WRITER) as writer, Pipeline(writer, summary, threads=WORKER_PARSE_THREADS) as pipe:
            while True:
                command, task = commands.recv()
                if command == "task":
                    for step in task:
                        run_step(step, store, pipe, summary, lambda n: results.send(("read", n)))
                    results.send(("done", None))
                    _trim()
                elif command == "flush":
                    pipe.flush()
                    results.send((command, summary.boot_copies))
                elif command == "drain":
                    pipe.drain()
                    results.send((command, summary.boot_copies))
                else:
                    break
        results.send(("stop", summary))
        results.close()
        os._exit(0)  # all written and durable: the interpreter's teardown would only free the heap
    except (EOFError, BrokenPipeError):  # the main process is gone (interrupted): nobody to tell
        pass
    except BaseException as exc:  # noqa: BLE001 - the main process raises it
        try:
            results.send(("error", _portable(exc)))
        except BrokenPipeError:
            pass


def _trim() -> None:
    """Hand the C heap's free pages back to the kernel (between tasks: measured 190 MB less peak
    memory over the bench's two workers, no slower)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except AttributeError:  # not glibc
        pass


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it crosses a process boundary intact, else a WorkerError with its one-line text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return WorkerError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
