"""Following growing log files without losing or repeating a line: identities, positions, rotation.

A file is known by the same identity ``observe ingest`` gives it (a fingerprint of its first line,
node, job and log name, see :func:`observe.reader.fingerprint`), so a file renamed by rotation
(``syslog`` -> ``syslog.1``) or copied before a copytruncate is still the same input, and a later
``observe ingest`` of it stores nothing twice. Device and inode are remembered to find a file
again cheaply. Positions live in one JSON file written atomically (temp, fsync, rename); the
caller commits them only after the segment holding the lines it read is durable.

Files are found and opened as :mod:`observe.reader` does where untrusted users write (job output
read by root): no link a user made is followed, only regular files are opened, and a file's
identity is that of the descriptor read, never of a separate look at its path.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from observe import provenance
from observe.reader import FINGERPRINT_BYTES, Refused, find_files, fingerprint, is_file, log_name, newlines, open_file
from observe.store import Store, write_atomic

POSITIONS_VERSION = 1
FORGET_AFTER_S = 7 * 86400  # a checkpoint whose file is gone this long is dropped
COMPRESSED = (".gz", ".xz", ".bz2", ".zst")


@dataclass
class Checkpoint:
    """Where reading of one input stands."""

    file_id: str
    input: str  # the configured path or glob that found it
    path: str
    dev: int
    ino: int
    offset: int  # the next byte to read (kmsg: sequence number; a command: time of its last run, us)
    seen: float = 0.0  # when the file was last found (epoch seconds)
    cursor: str = ""  # journald: the cursor of the last entry read


@dataclass
class Positions:
    """Every input's checkpoint and the last batch whose segments are durable."""

    batch: int = 0
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Positions:
        """The positions in ``path`` (empty when it does not exist yet)."""
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable positions file: {exc}") from None
        if doc.get("version") != POSITIONS_VERSION:
            raise ValueError(f"{path}: positions version {doc.get('version')!r}, expected {POSITIONS_VERSION}")
        cps = [Checkpoint(**cp) for cp in doc.get("checkpoints", [])]
        return cls(batch=int(doc.get("batch", 0)), checkpoints={cp.file_id: cp for cp in cps})

    def save(self, path: Path, store: Store | None = None) -> None:
        """Write atomically: a crash leaves either the old or the new file, never a torn one; as
        ``store`` makes its files (the positions name every user's job files)."""
        doc = {"version": POSITIONS_VERSION, "batch": self.batch,
               "checkpoints": [asdict(cp) for cp in self.checkpoints.values()]}
        write_atomic(path, json.dumps(doc, indent=1).encode(), store)


@dataclass(frozen=True)
class Found:
    """A file on disk that holds an input: where, which inode, how big, when last written, and
    whether users may write it (its route, :mod:`observe.provenance`)."""

    file_id: str
    path: str
    dev: int
    ino: int
    size: int
    mtime: float
    route: str


class Finder:
    """Finds the files of an input's glob and, for inputs read before, their rotated names.

    ``job_of`` gives the job hint of a path (Slurm output files carry the job id in their name);
    ``refused(path, why)`` is told of a file not opened (:class:`observe.reader.Refused`).
    """

    def __init__(self, pattern: str, node: str | None, job_of, refused: Callable[[str, str], None]):
        self.pattern = pattern
        self.node = node
        self.job_of = job_of
        self.refused = refused
        self._ids: dict[tuple[int, int], tuple[tuple[int, int], str]] = {}  # (dev, ino) -> ((size, mtime), file_id)

    def find(self, known: list[Checkpoint]) -> dict[str, Found]:
        """Files by identity: the glob's matches plus, for ``known`` inputs not among them, files in
        the same directory with the same log name (rotated by rename, or copied before a truncate).
        Where two files share an identity (a copy), the larger one is read."""
        ids, self._ids = self._ids, {}
        found: dict[str, Found] = {}
        self._add(found, find_files(self.pattern), ids)
        wanted: dict[str, set[str]] = {}
        for cp in known:
            if cp.file_id not in found:
                wanted.setdefault(os.path.dirname(cp.path) or ".", set()).add(log_name(cp.path))
        for directory, names in wanted.items():
            try:
                with os.scandir(directory) as it:
                    siblings = sorted(e.path for e in it if not e.name.startswith(".") and not e.name.endswith(COMPRESSED)
                                      and log_name(e.path) in names and is_file(e.path))
            except OSError:
                continue
            self._add(found, siblings, ids)
        return found

    def _add(self, found: dict[str, Found], paths: list[str], ids: dict) -> None:
        for path in paths:
            f = self._identify(path, ids)
            if f is not None and (f.file_id not in found or f.size > found[f.file_id].size):
                found[f.file_id] = f

    def _identify(self, path: str, ids: dict) -> Found | None:
        try:
            with open_file(path) as fh:
                st = os.fstat(fh.fileno())
                key = (st.st_dev, st.st_ino)
                cached = self._ids.get(key) or ids.get(key)
                if cached is None or cached[0] != (st.st_size, st.st_mtime_ns):
                    # new or changed: a file truncated and grown again has another first line
                    head = fh.read(FINGERPRINT_BYTES)
                    if b"\n" not in head and len(head) < FINGERPRINT_BYTES:
                        return None  # the first line is still being written: its identity is not known yet
                    cached = ((st.st_size, st.st_mtime_ns), fingerprint(head, self.node, self.job_of(path), log_name(path)))
        except Refused as exc:
            self.refused(path, exc.strerror)
            return None
        except OSError:
            return None  # gone since it was listed
        self._ids[key] = cached
        return Found(cached[1], path, st.st_dev, st.st_ino, st.st_size, st.st_mtime,
                     provenance.file_route(st, self.job_of(path)))


def read_new(found: Found, cp: Checkpoint | None, max_bytes: int) -> tuple[int, bytes]:
    """The bytes of ``found`` after its checkpoint (at most ``max_bytes``), and where they start;
    none when the path no longer opens as the file found (replaced: the next cycle finds it again).

    A file smaller than its checkpoint was truncated in place: it is read again from the start.
    """
    start = cp.offset if cp is not None else 0
    if found.size < start:
        start = 0
    if found.size == start:
        return start, b""
    try:
        fh = open_file(found.path)
    except OSError:
        return start, b""
    with fh:
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != (found.dev, found.ino):
            return start, b""
        fh.seek(start)
        return start, fh.read(min(found.size - start, max_bytes))


def long_line(data: bytes, limit: int) -> int:
    """Where the first line of ``data`` longer than ``limit`` bytes starts (one not ended yet too), or -1."""
    if len(data) <= limit:
        return -1
    nl = newlines(np.frombuffer(data, np.uint8))
    starts = np.concatenate(([0], nl + 1))
    over = np.flatnonzero(np.append(nl, len(data)) - starts > limit)
    return int(starts[over[0]]) if len(over) else -1


def complete(data: bytes, idle: bool) -> tuple[bytes, int]:
    """The lines of ``data`` that end with a newline (an idle file's final partial line too, given a
    newline) and how many of ``data``'s bytes they consume."""
    if data.endswith(b"\n") or not data:
        return data, len(data)
    if idle:
        return data + b"\n", len(data)
    cut = data.rfind(b"\n") + 1
    return data[:cut], cut


def is_idle(found: Found, timeout_s: float, now: float | None = None) -> bool:
    """Whether a file has not been written for ``timeout_s`` (its last record is then complete)."""
    return (now if now is not None else time.time()) - found.mtime >= timeout_s
