"""Byte streams to line frames (``raw``, ``offset``) in bounded chunks, without a Python loop per line."""
from __future__ import annotations

import errno
import fnmatch
import glob
import hashlib
import io
import os
import re
import select
import stat
import sys
import threading
import zlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

from observe.compressed import GzipInput

CHUNK_BYTES = 16 << 20
MAX_RECORD_BYTES = 1 << 20  # a line longer than this is stored cut into records of this size
FINGERPRINT_BYTES = 1024
ROTATED = re.compile(r"(?:[.-]\d{8})?(?:\.\d{1,3})?(?:\.(?:gz|xz|bz2|zst))?$")


SCAN_BYTES = 1 << 20  # newlines are looked for this much at a time, in a buffer kept per thread
_INLINE = np.arange(12)
_scratch = threading.local()


def newlines(data: np.ndarray) -> np.ndarray:
    """Positions of the ``\n`` bytes in ``data`` (uint8), scanned in cache-sized blocks."""
    hit = getattr(_scratch, "hit", None)
    if hit is None:
        hit = _scratch.hit = np.empty(SCAN_BYTES, np.bool_)
    found = []
    for at in range(0, len(data), SCAN_BYTES):
        block = data[at:at + SCAN_BYTES]
        np.equal(block, 10, out=hit[:len(block)])
        found.append(np.flatnonzero(hit[:len(block)]) + at)
    return np.concatenate(found) if found else np.empty(0, np.int64)


def lines_of(body: bytes | memoryview, base: int = 0, limit: int = MAX_RECORD_BYTES) -> pl.DataFrame:
    """Split ``body`` (ending with a newline) into lines without their ``\n`` or ``\r\n``; offsets
    are ``base`` + byte position. A line longer than ``limit`` is cut into records of ``limit``
    bytes (at its start and every ``limit`` bytes after), as the collector stores one.

    The lines are an Arrow string view array built over ``body`` itself: one newline scan, then
    16-byte views (length, prefix and position; short lines inline), no copy of the text.
    """
    data = np.frombuffer(body, np.uint8)
    nl = newlines(data)
    n = len(nl)
    starts = np.empty(n, np.int64)
    starts[:1] = 0
    starts[1:] = nl[:-1] + 1
    lens = nl - starts
    cr = np.flatnonzero(data[np.maximum(nl - 1, 0)] == 13)
    lens[cr[lens[cr] > 0]] -= 1  # \r\n
    if n and lens.max() > limit:
        pieces = np.maximum((lens + limit - 1) // limit, 1)
        line = np.repeat(np.arange(n), pieces)
        nth = np.arange(len(line)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts, lens, n = starts[line] + nth * limit, np.minimum(lens[line] - nth * limit, limit), len(line)
    views = np.zeros((n, 4), np.uint32)  # Arrow's view layout: length, then prefix, buffer, offset
    views[:, 0] = lens
    long = np.flatnonzero(lens > 12)
    words = np.ndarray((max(len(data) - 3, 0),), "<u4", body, strides=(1,))  # the 4 bytes at each position
    views[long, 1] = words[starts[long]]
    views[long, 3] = starts[long]
    short = np.flatnonzero(lens <= 12)
    if len(short):
        inline = data[np.minimum(starts[short, None] + _INLINE, len(data) - 1)]
        inline[_INLINE[None, :] >= lens[short, None]] = 0
        views.view(np.uint8).reshape(n, 16)[short, 4:] = inline
    arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(body)])
    try:
        arr.validate(full=True)
        raw = pl.Series(_ArrowArray(arr))
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere in the chunk: decode line by line, replacing
        raw = pl.Series([bytes(body[s:s + k]).decode("utf-8", "replace") for s, k in zip(starts, lens)],
                        dtype=pl.String)
    return pl.DataFrame({"raw": raw, "offset": starts + base})


class _ArrowArray:
    """An Arrow array seen only through the Arrow PyCapsule interface: polars imports it as it is
    (``pl.from_arrow`` first imports ``pyarrow.compute``, 0.15 s in each worker, for nothing here)."""

    __slots__ = ("array",)

    def __init__(self, array: pa.Array):
        self.array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self.array.__arrow_c_array__(requested_schema)


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


# what reading an input may raise: I/O errors, and a damaged or truncated gzip
READ_ERRORS = (OSError, EOFError, zlib.error)


def read_error(path: str, exc: BaseException) -> str:
    """One line naming ``path`` and what went wrong reading it."""
    return f"{path}: {getattr(exc, 'strerror', None) or str(exc) or type(exc).__name__}"


def is_stream(path: str) -> bool:
    """Whether ``path`` can be read only once, front to back: ``-`` (stdin), or not a regular file
    (a pipe such as ``<(zcat syslog.gz)``, a FIFO, a device). Its head is peeked, never read ahead."""
    if path == "-":
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # opening it says what is wrong


class Refused(OSError):
    """A file not opened: a symbolic link or a FIFO that an untrusted user may have put in a log's place."""


def trusted(st: os.stat_result) -> bool:
    """Whether root or the user running observe owns a link or FIFO: one an untrusted user cannot have made."""
    return st.st_uid in (0, os.geteuid())


def followable(path: str) -> bool:
    """Whether ``path`` is not a symbolic link, or one that :func:`trusted` made."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return not stat.S_ISLNK(st.st_mode) or trusted(st)


def is_file(path: str) -> bool:
    """Whether ``path`` is a regular file, reached through no link an untrusted user made."""
    return os.path.isfile(path) and followable(path)


def open_file(path: str, streams: bool = False) -> BinaryIO:
    """Open ``path`` for reading safely where untrusted users write (job output, read by root).

    No symbolic link an untrusted user made is followed, in any component of the path: a user
    cannot point a job's output, or swap their job directory for a link, at root-only files
    (:func:`_open_beneath`). The file must be regular (checked on the open descriptor, O_NONBLOCK:
    a FIFO swapped in never blocks the open), or with ``streams`` a trusted FIFO, pipe or device,
    then waited on as a blocking open would. A file with more than one name (a hard link) is refused:
    its owner and mode say nothing about who named it. Raises :class:`Refused`.
    """
    fd = _open_beneath(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:  # logs and job output have one name
            raise Refused(errno.EMLINK, f"a file with {st.st_nlink} names (hard links), not read: where "
                                        "fs.protected_hardlinks is 0 a user can name root's file in their own directory", path)
        if not stat.S_ISREG(st.st_mode):
            if not (streams and trusted(st)):
                raise Refused(errno.EINVAL, f"not a regular file (mode {stat.filemode(st.st_mode)}, uid {st.st_uid}), "
                                            "not read", path)
            poll = select.poll()  # a FIFO's reader waits for its writer
            poll.register(fd, select.POLLIN)
            poll.poll()
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


MAX_LINKS = 40  # links followed in one path, as the kernel's own walk (ELOOP past it)
# What a /proc/PID/fd link names where its file has no path (a pipe, a socket): the kernel opens the
# object itself, no path is walked (source: torvalds/linux fs/pipe.c pipefs_dname "pipe:[%lu]", net/socket.c
# sockfs_dname "socket:[%lu]")
PIPE_LINK = re.compile(r"^(?:pipe|socket):\[\d+\]$")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_beneath(path: str, flags: int) -> int:
    """A descriptor of ``path`` reached through no link an untrusted user made.

    O_NOFOLLOW guards a path's last component only, and a check of the directories before the
    open is a race (a user swaps their directory for a link in between). So: the path is opened
    as it is (O_NOFOLLOW), and kept when the kernel's name for what it opened is the path itself
    (no link anywhere on the way: nearly always); otherwise it is walked again a component at a
    time, each directory opened O_NOFOLLOW relative to the one before (``openat``), a link followed
    only where :func:`trusted` made it, read as the same link it was checked as."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    else:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == os.path.abspath(path):
                return fd
        except OSError:
            pass
        os.close(fd)
    return _walk_open(path, flags)


def _walk_open(path: str, flags: int) -> int:
    parts = path.split(os.sep)
    at = os.open(os.sep if path.startswith(os.sep) else os.curdir, _DIRECTORY)
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name in ("", ".") and any(p not in ("", ".") for p in parts):
                continue
            last = not any(p not in ("", ".") for p in parts)
            try:
                fd = os.open(name or os.curdir, (flags if last else _DIRECTORY) | os.O_NOFOLLOW, dir_fd=at)
            except OSError as exc:  # a link: ELOOP, or ENOTDIR where a directory was asked for
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _trusted_link(name, at, path, exc)
                if last and PIPE_LINK.match(target):  # <(zcat ...): /dev/fd/N, the pipe itself
                    return os.open(name, flags, dir_fd=at)
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
                parts[:0] = target.split(os.sep)
                if target.startswith(os.sep):
                    os.close(at)
                    at = os.open(os.sep, _DIRECTORY)
                continue
            if last:
                return fd
            os.close(at)
            at = fd
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    finally:
        os.close(at)


def _trusted_link(name: str, at: int, path: str, failed: OSError) -> str:
    """The target of link ``name`` in directory ``at``, if :func:`trusted` made it: looked at before
    and after reading it (a link cannot change, only be replaced), so the target read is its.
    Raises ``failed`` (the open's error) where ``name`` is no link."""
    before = os.stat(name, dir_fd=at, follow_symlinks=False)
    if not stat.S_ISLNK(before.st_mode):
        raise failed
    if not trusted(before):
        raise Refused(errno.ELOOP, f"a symbolic link of uid {before.st_uid}, not followed", path)
    target = os.readlink(name, dir_fd=at)
    after = os.stat(name, dir_fd=at, follow_symlinks=False)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        raise Refused(errno.ELOOP, "a symbolic link replaced while it was read, not followed", path)
    return target


def open_input(path: str) -> BinaryIO:
    """Open a file (gzip by magic number; see :func:`open_file`) or ``-`` for stdin, as a binary stream."""
    if path == "-":  # peeked at, like a file: a gzip stream on stdin is read decompressed
        f = sys.stdin.buffer if hasattr(sys.stdin.buffer, "peek") else io.BufferedReader(sys.stdin.buffer)
    else:
        f = open_file(path, streams=True)
    if f.peek(2)[:2] == b"\x1f\x8b":
        return GzipInput(f)  # type: ignore[return-value]
    return f


def log_name(path: str) -> str:
    """A file's absolute path without rotation suffixes: ``/var/log/syslog.2.gz`` -> ``/var/log/syslog``."""
    if path == "-":
        return path
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, ROTATED.sub("", name) or name)


def fingerprint(head: bytes, node: str | None, job: str | None = None, name: str = "",
                boot: datetime | None = None) -> str:
    """Identity of an input: a hash of its first line (up to 1 KiB), node, job and log name, and
    for a kernel log given its boot time, that time's minute.

    Stable while the file grows and when rotation renames it (``syslog`` -> ``syslog.1``); a copy
    in another directory is another input. Every boot's dmesg starts with the same line: the boot
    time tells them apart (to the minute, so that ``uptime -s`` wavering by a second does not).
    """
    first = head[:FINGERPRINT_BYTES]
    nl = first.find(b"\n")
    first = first[: nl + 1] if nl >= 0 else first
    booted = f"\0{boot.astimezone(timezone.utc):%Y-%m-%dT%H:%M}" if boot is not None else ""
    tag = f"\0{node or ''}\0{job or ''}\0{name}{booted}".encode()
    return hashlib.blake2b(first + tag, digest_size=8).hexdigest()


def peek_head(path: str, size: int = 64 * 1024) -> bytes:
    """The first ``size`` bytes of a file (decompressed); nothing of a stream (which it would consume)."""
    return read_head(path, size)[0]


def read_head(path: str, size: int) -> tuple[bytes, bool, bool, os.stat_result | None]:
    """The first ``size`` bytes of a file (decompressed), whether they are all of a plain file (a
    compressed one may still be damaged past them), whether it is compressed, and the ``fstat`` of
    what was read (its owner and mode: what it is, whatever its path named before); nothing of a
    stream (which it would consume)."""
    if is_stream(path):
        return b"", False, False, None
    with open_input(path) as f:
        head = f.read(size)
        plain = isinstance(f, io.BufferedReader)
        return head, plain and len(head) < size, not plain, os.fstat(f.fileno())


def _tree(top: str, hidden: bool = True) -> Iterator[tuple[str, list[str]]]:
    """``top`` and every directory under it (``hidden`` ones too, or not) with its entries that are
    not directories, each directory once (a link loop or a second way in is stopped). Links to
    directories are followed (``/var/log/slurm`` is often one) only where :func:`trusted` made them:
    a user's link must not lead root into a root-only tree."""
    seen: set[tuple[int, int]] = set()
    for directory, subdirs, files in os.walk(top, followlinks=True):
        try:
            st = os.stat(directory)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            subdirs.clear()
            continue
        seen.add((st.st_dev, st.st_ino))
        subdirs[:] = [d for d in subdirs if (hidden or not d.startswith(".")) and followable(os.path.join(directory, d))]
        yield directory, files


def _walk(top: str) -> list[str]:
    """Every file under ``top``, sorted (see :func:`_tree`)."""
    found = [os.path.join(directory, f) for directory, files in _tree(top) for f in files]
    return sorted(found, key=lambda f: f.split(os.sep))  # by path parts, not characters


def _names(directory: str, pattern: str) -> list[str]:
    """Paths in ``directory`` whose name matches ``pattern`` (hidden ones only if it starts with a dot)."""
    try:
        names = os.listdir(directory or os.curdir)
    except OSError:
        return []
    if not pattern.startswith("."):
        names = [n for n in names if not n.startswith(".")]
    return [os.path.join(directory, n) for n in fnmatch.filter(names, pattern)]


def _below(top: str) -> Iterator[tuple[str, list[str]]]:
    """What ``**`` matches: ``top`` and the directories under it, not hidden, named as glob names them."""
    for directory, files in _tree(top or os.curdir, hidden=False):
        yield (directory if top else "" if directory == os.curdir else os.path.relpath(directory)), files


def find_files(pattern: str) -> list[str]:
    """The regular files a glob matches (``**``: any depth), as ``glob.glob(recursive=True)`` finds
    them, but past its leading fixed directories (the admin's) through no link an untrusted user
    made (see :func:`_tree`), and through each directory once: glob follows every link, and a few
    looping links make it list forever."""
    parts = [p for i, p in enumerate(pattern.split(os.sep)) if p or i == 0]
    fixed = next((i for i, p in enumerate(parts[:-1]) if glob.has_magic(p)), len(parts) - 1)
    dirs = [os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else "")]
    for part in parts[fixed:-1]:
        if part == "**":
            dirs = [d for top in dirs for d, _ in _below(top)]
        elif glob.has_magic(part):
            dirs = [d for top in dirs for d in _names(top, part) if os.path.isdir(d) and followable(d)]
        else:
            dirs = [d for top in dirs if os.path.isdir(d := os.path.join(top, part)) and followable(d)]
    last = parts[-1]
    if last == "**":
        found = [os.path.join(d, f) for top in dirs for d, files in _below(top) for f in files if not f.startswith(".")]
    elif glob.has_magic(last):
        found = [f for top in dirs for f in _names(top, last)]
    else:
        found = [os.path.join(top, last) for top in dirs]
    return sorted(f for f in dict.fromkeys(found) if is_file(f))


def input_files(paths: list[str], skip: str | os.PathLike[str] | None = None,
                missing: list[str] | None = None) -> list[str]:
    """Expand directories (recursively) and globs into a sorted list of regular files; ``-`` kept.

    Files under ``skip`` (the store being written, when it sits among the logs) and hidden files
    are left out of what directories and globs expand to. A path that matches nothing raises
    FileNotFoundError, or is added to ``missing`` when that list is given.
    """
    inside = tuple({os.path.join(os.path.abspath(skip), ""), os.path.join(os.path.realpath(skip), "")}) if skip else ()

    def wanted(f: str) -> bool:
        return not (inside and os.path.abspath(f).startswith(inside))

    out: list[str] = []
    for p in paths:
        if p == "-":
            if p in out:
                raise ValueError("- (stdin) given more than once")
            out.append(p)
            continue
        path = Path(p)
        if path.is_dir():
            out.extend(f for f in _walk(p) if not os.path.basename(f).startswith(".") and is_file(f) and wanted(f))
        elif path.exists():
            out.append(str(path))
        else:
            matches = [m for m in find_files(p) if wanted(m)]
            if not matches and missing is None:
                raise FileNotFoundError(f"no such file: {p}")
            if not matches:
                missing.append(p)
            out.extend(matches)
    return out
