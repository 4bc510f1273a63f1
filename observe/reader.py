"""Byte streams to line frames (``raw``, ``offset``) in bounded chunks, without a Python loop per line."""
from __future__ import annotations

import glob
import gzip
import hashlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

CHUNK_BYTES = 16 << 20
FINGERPRINT_BYTES = 1024
ROTATED = re.compile(r"(?:[.-]\d{8})?(?:\.\d{1,3})?(?:\.(?:gz|xz|bz2|zst))?$")


def lines_of(body: bytes | memoryview, base: int = 0) -> pl.DataFrame:
    """Split ``body`` (ending with a newline) into lines; offsets are ``base`` + byte position."""
    data = np.frombuffer(body, np.uint8)
    nl = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], nl[:-1] + 1]).astype(np.int64)
    offs = np.concatenate([[0], nl + 1]).astype(np.int64)
    arr = pa.LargeStringArray.from_buffers(len(nl), pa.py_buffer(offs.tobytes()), pa.py_buffer(body))
    try:
        arr.validate(full=True)
        raw = pl.from_arrow(arr)
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere in the chunk: decode line by line, replacing
        raw = pl.Series([bytes(body[s:e]).decode("utf-8", "replace") for s, e in zip(offs[:-1], offs[1:])],
                        dtype=pl.String)
    raw = raw.str.strip_suffix("\n")
    if (data == 13).any():
        raw = raw.str.strip_suffix("\r")
    return pl.DataFrame({"raw": raw, "offset": starts + base})


def read_lines(stream: BinaryIO, start: int = 0, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pl.DataFrame]:
    """Yield frames of complete lines from ``stream`` (a final line without newline included)."""
    pending = b""
    base = start
    while True:
        data = stream.read(chunk_bytes)
        if not data:
            break
        buf = pending + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            pending = buf
            continue
        body, pending = buf[: cut + 1], buf[cut + 1 :]
        yield lines_of(body, base)
        base += len(body)
    if pending:
        yield lines_of(pending + b"\n", base)


def open_input(path: str) -> BinaryIO:
    """Open a file (gzip by magic number) or ``-`` for stdin, as a binary stream."""
    if path == "-":
        return sys.stdin.buffer
    f = open(path, "rb")
    if f.peek(2)[:2] == b"\x1f\x8b":
        return gzip.open(f)  # type: ignore[return-value]
    return f


def log_name(path: str) -> str:
    """A file's absolute path without rotation suffixes: ``/var/log/syslog.2.gz`` -> ``/var/log/syslog``."""
    if path == "-":
        return path
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, ROTATED.sub("", name) or name)


def fingerprint(head: bytes, node: str | None, job: str | None = None, name: str = "") -> str:
    """Identity of an input: a hash of its first line (up to 1 KiB), node, job and log name.

    Stable while the file grows and when rotation renames it (``syslog`` -> ``syslog.1``); a copy
    in another directory is another input.
    """
    first = head[:FINGERPRINT_BYTES]
    nl = first.find(b"\n")
    first = first[: nl + 1] if nl >= 0 else first
    tag = f"\0{node or ''}\0{job or ''}\0{name}".encode()
    return hashlib.blake2b(first + tag, digest_size=8).hexdigest()


def peek_head(path: str) -> bytes:
    """The first bytes of a file (decompressed), without consuming stdin."""
    if path == "-":
        return b""
    with open_input(path) as f:
        return f.read(64 * 1024)


def input_files(paths: list[str]) -> list[str]:
    """Expand directories (recursively) and globs into a sorted list of regular files; ``-`` kept."""
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)
            continue
        path = Path(p)
        if path.is_dir():
            out.extend(str(f) for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith("."))
        elif path.exists():
            out.append(str(path))
        else:
            matches = sorted(m for m in glob.glob(p, recursive=True) if Path(m).is_file())
            if not matches:
                raise FileNotFoundError(f"no such file: {p}")
            out.extend(matches)
    return out
