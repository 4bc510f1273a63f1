"""Where the simulation's lines wait and how they reach disk: an outbox of timed lines per
destination (a line is written in the hour it falls in, so events may queue lines for later hours),
and the files, each truncated on first write and appended with buffered writes after."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from observe.simulate.manifest import InputFile


class Outbox:
    """Timed lines waiting for the hour they fall in, per destination."""

    def __init__(self) -> None:
        self.pending: dict[tuple, tuple[list[int], list[str]]] = {}

    def put(self, dest: tuple, t, texts) -> None:
        """Queue ``texts`` at times ``t`` (a time for all, or one per text)."""
        times, lines = self.pending.setdefault(dest, ([], []))
        texts = [texts] if isinstance(texts, str) else texts
        times.extend(t.tolist() if isinstance(t, np.ndarray) else t if isinstance(t, list) else [t] * len(texts))
        lines.extend(texts)

    def take(self, dest: tuple, until: int) -> tuple[np.ndarray, list[str]]:
        """The lines due before ``until``, in time order (ties keep their queueing order)."""
        times, lines = self.pending.pop(dest, ([], []))
        t = np.asarray(times, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        due = order[t[order] < until]
        rest = order[t[order] >= until]
        if len(rest):
            self.pending[dest] = (t[rest].tolist(), [lines[i] for i in rest.tolist()])
        return t[due], [lines[i] for i in due.tolist()]

    def job_dests(self) -> list[tuple]:
        return [d for d in self.pending if d[0] == "job"]


class Files:
    """The run's files: truncated on first write, appended after; counts the bytes written."""

    def __init__(self, root: Path, progress: Callable[[int], None] | None) -> None:
        self.root, self.progress = root, progress
        self.entries: dict[str, InputFile] = {}
        self.open: dict[str, BinaryIO] = {}
        self.bytes = 0

    def add(self, rel: str, fmt: str, keep_open: bool = True, **info) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        self.entries[rel] = InputFile(path, fmt, **info)
        f = open(path, "wb", buffering=1 << 20)
        if keep_open:
            self.open[rel] = f
        else:
            f.close()

    def write(self, rel: str, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        self.bytes += len(data)
        if self.progress:
            self.progress(len(data))
        f = self.open.get(rel)
        if f is not None:
            f.write(data)
        else:
            with open(self.root / rel, "ab") as g:
                g.write(data)

    def close(self) -> list[InputFile]:
        for f in self.open.values():
            f.close()
        return list(self.entries.values())
