"""The newest complete checkpoint in a directory, so a requeued job resumes from it.

A checkpoint is one of:
- a ``torch.distributed.checkpoint`` directory: its ``.metadata`` (written last) and every shard it
  names (``*.distcp``), each at least as long as the data the metadata places in it;
- a ``torch.save`` file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) or a ``.safetensors`` file: a zip
  whose central directory (at its end) reads, or a safetensors header whose tensors fit the file;
- a directory holding such files (a Hugging Face ``checkpoint-500/``): complete when all of them are.

Incomplete ones (missing or short shards, truncated or zero-length files, ``*.tmp`` names) are
skipped with the reason. Newest means the highest step number in the name when every complete
checkpoint has one, else the latest modification time.

Reading DCP metadata unpickles it, which runs code from the file: by default only for files the
caller owns (``trust``); otherwise (root hooks reading a user's directory) the structural checks alone.

The directory is the user's, and root hooks scan it (``latest_as``): symbolic links inside it are
never followed (they could lead anywhere), only regular files are opened, a length a header
claims is believed only up to the file's real size and HEADER_MAX, a JSON header is parsed only if
it nests no deeper than a safetensors header may, and whatever one file raises skips that file alone.
``latest_as`` also runs the scan as the job's user, in a child process bounded in time and memory.
"""
from __future__ import annotations

import json
import os
import re
import resource
import select
import signal
import stat
import struct
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

SAVE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
PARTIAL = re.compile(r"(?i)(\.tmp|\.partial|\.incomplete|\.part|~)$|^\.(?!metadata$)")
STEP = re.compile(r"(\d+)(?!.*\d)")
HEADER_MAX = 100_000_000  # the largest safetensors header the format allows (the safetensors library's limit)
NESTING_MAX = 4  # a safetensors header nests 3 deep ({"w": {"shape": [2]}}); json.loads recurses a level a bracket
JSON_STRING = re.compile(rb'"[^"]*+"')  # once escaped quotes are gone
BRACKETS = bytes.maketrans(b"{}", b"[]"), bytes(sorted(set(range(256)) - set(b"[]{}")))  # keep brackets, one kind


@dataclass
class Checkpoint:
    """A complete checkpoint: where, what kind, when written, its step (from the name) and size."""

    path: str
    kind: str  # dcp, torch.save, safetensors or directory
    mtime: float
    step: int | None
    bytes: int


@dataclass
class Skipped:
    path: str
    why: str


class ScanError(RuntimeError):
    """A bounded scan (``latest_as``) gave no answer: it ran out of time or memory, or failed."""


def scan(root: str | Path, trust: bool | None = None) -> tuple[list[Checkpoint], list[Skipped]]:
    """Every checkpoint under ``root`` (itself, its entries, and theirs one level down). Whatever one
    candidate raises (a hostile header, a file removed while it is read) skips that one, with why."""
    found: list[Checkpoint] = []
    skipped: list[Skipped] = []
    for path in _candidates(Path(root)):
        try:
            why = _incomplete(path, trust)
            if not why:
                found.append(_checkpoint(path))
        except Exception as exc:  # noqa: BLE001 - one bad file never stops the scan of the others
            why = " ".join(f"unreadable: {type(exc).__name__}: {exc}".split())
        if why:
            skipped.append(Skipped(str(path), why))
    return found, skipped


def _checkpoint(path: Path) -> Checkpoint:
    files = [path] if _regular(path) else list(_files(path).values())
    stats = [p.lstat() for p in files]
    return Checkpoint(str(path), _kind(path), max(s.st_mtime for s in stats), _step(path.name),
                      sum(s.st_size for s in stats))


def latest(root: str | Path, trust: bool | None = None) -> tuple[Checkpoint | None, list[Skipped]]:
    """The newest complete checkpoint under ``root`` (None if there is none) and what was skipped."""
    found, skipped = scan(root, trust)
    if not found:
        return None, skipped
    if all(c.step is not None for c in found):
        return max(found, key=lambda c: (c.step, c.mtime)), skipped
    return max(found, key=lambda c: c.mtime), skipped


def latest_as(root: str | Path, user: tuple[int, int] | None, timeout_s: float, memory_bytes: int) -> Checkpoint | None:
    """``latest(root, trust=False)`` from a forked child: as ``user`` (uid, gid, no supplementary
    groups) when given, so it reads only what that user may read; with ``memory_bytes`` of address
    space beyond what it starts with; killed after ``timeout_s``. ScanError when it gives no answer.

    A fork rather than a new interpreter: nothing of observe's installation need be readable by the
    user. The child runs only this module's pure-Python code (not polars, whose threads a fork does
    not copy) and leaves with ``os._exit``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _scan_child(root, user, timeout_s, memory_bytes, w)
    os.close(w)
    try:
        data = _read_within(r, timeout_s)
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)  # done or not: it must not outlive the answer (or the caller's budget)
        os.waitpid(pid, 0)
    if data is None:
        raise ScanError(f"the checkpoint scan did not finish within {timeout_s:g}s")
    try:
        doc = json.loads(data or b"{}")
    except ValueError:  # cut short: the child died writing
        doc = {}
    if "latest" not in doc:
        raise ScanError(doc.get("error") or "the checkpoint scan ended without an answer")
    return Checkpoint(**doc["latest"]) if doc["latest"] else None


def _scan_child(root: str | Path, user: tuple[int, int] | None, timeout_s: float, memory_bytes: int,
                out: int) -> NoReturn:
    """The forked scan: become ``user``, bound itself, write its answer (JSON) to ``out``, exit."""
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the inherited handler (a hook's budget) would raise here
        signal.alarm(max(1, int(timeout_s + 1)))  # the kernel ends it even if the parent is gone
        if user is not None:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        with open("/proc/self/statm") as f:
            limit = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        best, _ = latest(root, trust=False)
        doc = {"latest": asdict(best) if best else None}
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the parent hears it
        doc = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        os.write(out, json.dumps(doc).encode())
    finally:
        os._exit(0)


def _read_within(fd: int, timeout_s: float) -> bytes | None:
    """All that is written to ``fd`` until its writer closes it; None if that takes over ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    ready = select.poll()
    ready.register(fd, select.POLLIN)
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not ready.poll(left * 1000):
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def to_dict(best: Checkpoint | None, skipped: list[Skipped]) -> dict:
    return {"latest": asdict(best) if best else None, "skipped": [asdict(s) for s in skipped]}


def _candidates(root: Path) -> list[Path]:
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    if _is_dcp(_files(root)):
        return [root]
    out = []
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                try:
                    files = _files(Path(entry.path))
                except PermissionError:  # not this user's to read: nothing it could resume from
                    continue
                if _is_dcp(files) or any(map(_is_save_name, files)):
                    out.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False) and (_is_save_name(entry.name) or (
                    PARTIAL.search(entry.name) and any(s in entry.name for s in SAVE_SUFFIXES))):
                out.append(Path(entry.path))
    return out


def _files(directory: Path) -> dict[str, Path]:
    """The regular files in ``directory`` by name (symbolic links, and what is not a file, left out)."""
    with os.scandir(directory) as entries:
        return {e.name: Path(e.path) for e in entries if e.is_file(follow_symlinks=False)}


def _regular(path: Path) -> bool:
    """``path`` is a regular file itself (not a link to one)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _is_dcp(files: dict[str, Path]) -> bool:
    return ".metadata" in files or any(n.endswith(".distcp") for n in files)


def _is_save_name(name: str) -> bool:
    return os.path.splitext(name)[1] in SAVE_SUFFIXES


def _kind(path: Path) -> str:
    if not _regular(path):
        return "dcp" if ".metadata" in _files(path) else "directory"
    return "safetensors" if path.suffix == ".safetensors" else "torch.save"


def _incomplete(path: Path, trust: bool | None) -> str:
    """Why ``path`` is not a complete checkpoint ('' when it is)."""
    if PARTIAL.search(path.name):
        return "a partial or temporary name"
    if _regular(path):
        return _file_incomplete(path)
    files = _files(path)
    if _is_dcp(files):
        return _dcp_incomplete(files, trust)
    bad = [f"{name}: {why}" for name, p in sorted(files.items())
           if _is_save_name(name) and (why := _file_incomplete(p))]
    return "; ".join(bad)


def _dcp_incomplete(files: dict[str, Path], trust: bool | None) -> str:
    meta = files.get(".metadata")
    if meta is None:
        return "no .metadata (the save did not finish)"
    meta_stat = meta.lstat()
    if meta_stat.st_size == 0:
        return ".metadata is empty"
    shards = {name: p.lstat().st_size for name, p in files.items() if name.endswith(".distcp")}
    if trust is None:
        trust = meta_stat.st_uid == os.geteuid()
    if not trust:
        if not shards:
            return "no *.distcp shards"
        empty = [n for n, size in shards.items() if size == 0]
        return f"empty shard(s): {', '.join(sorted(empty))}" if empty else ""
    try:
        from torch.distributed.checkpoint import FileSystemReader

        needed: dict[str, int] = {}
        for info in FileSystemReader(str(meta.parent)).read_metadata().storage_data.values():
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    except Exception as exc:  # noqa: BLE001 - an unreadable metadata file makes the checkpoint incomplete
        return f".metadata unreadable: {type(exc).__name__}: {exc}"
    missing = sorted(n for n in needed if n not in shards)
    if missing:
        return f"missing shard(s): {', '.join(missing)}"
    short = sorted(n for n, end in needed.items() if shards[n] < end)
    return f"shard(s) shorter than the metadata says: {', '.join(short)}" if short else ""


def _file_incomplete(path: Path) -> str:
    try:  # not through a link, and without waiting on a FIFO put in the file's place since it was listed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size == 0:
            return "zero length"
        head = f.read(8)
        if path.suffix == ".safetensors":
            return _safetensors_incomplete(f, head, info.st_size)
        if not head.startswith(b"PK"):
            return ""  # the legacy pickle format has no trailer to check
        try:  # zipfile reads no central directory larger than the file
            with zipfile.ZipFile(f) as z:
                ends = [i.header_offset + i.compress_size for i in z.infolist()]
        except (zipfile.BadZipFile, OSError) as exc:
            return f"truncated or corrupt zip: {exc}"
    return "truncated: entries run past the end" if ends and max(ends) > info.st_size else ""


def _safetensors_incomplete(f, head: bytes, size: int) -> str:
    if len(head) < 8:
        return "truncated header"
    (n,) = struct.unpack("<Q", head)
    if n > size - 8:
        return f"truncated: the header says it is {n} bytes, {size - 8} follow"
    if n > HEADER_MAX:
        return f"corrupt: a {n}-byte header (safetensors allows {HEADER_MAX})"
    raw = f.read(n)
    if not _nests_within(raw, NESTING_MAX):
        return f"corrupt: the header's brackets nest over {NESTING_MAX} deep or do not close"
    try:
        header = json.loads(raw)
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"unreadable header: {exc}"
    return "truncated: tensors run past the end" if 8 + n + end > size else ""


def _nests_within(text: bytes, depth: int) -> bool:
    """Whether the brackets outside strings in ``text`` close, nesting at most ``depth`` deep; linear
    (json.loads recurses once a bracket). Strings go (their escaped backslashes and quotes first),
    then all but brackets, then the innermost pairs, a level a pass."""
    text = JSON_STRING.sub(b"", text.replace(b"\\\\", b"").replace(b'\\"', b"")).translate(*BRACKETS)
    for _ in range(depth):
        text = text.replace(b"[]", b"")
    return not text


def _step(name: str) -> int | None:
    m = STEP.search(name)
    return int(m.group(1)) if m else None
