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
"""
from __future__ import annotations

import json
import os
import re
import struct
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

SAVE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
PARTIAL = re.compile(r"(?i)(\.tmp|\.partial|\.incomplete|\.part|~)$|^\.(?!metadata$)")
STEP = re.compile(r"(\d+)(?!.*\d)")


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


def scan(root: str | Path, trust: bool | None = None) -> tuple[list[Checkpoint], list[Skipped]]:
    """Every checkpoint under ``root`` (itself, its entries, and theirs one level down)."""
    root = Path(root)
    found: list[Checkpoint] = []
    skipped: list[Skipped] = []
    for path in _candidates(root):
        why = _incomplete(path, trust)
        if why:
            skipped.append(Skipped(str(path), why))
        else:
            files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
            found.append(Checkpoint(str(path), _kind(path), max(p.stat().st_mtime for p in files),
                                    _step(path.name), sum(p.stat().st_size for p in files)))
    return found, skipped


def latest(root: str | Path, trust: bool | None = None) -> tuple[Checkpoint | None, list[Skipped]]:
    """The newest complete checkpoint under ``root`` (None if there is none) and what was skipped."""
    found, skipped = scan(root, trust)
    if not found:
        return None, skipped
    if all(c.step is not None for c in found):
        return max(found, key=lambda c: (c.step, c.mtime)), skipped
    return max(found, key=lambda c: c.mtime), skipped


def to_dict(best: Checkpoint | None, skipped: list[Skipped]) -> dict:
    return {"latest": asdict(best) if best else None, "skipped": [asdict(s) for s in skipped]}


def _candidates(root: Path) -> list[Path]:
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    if _is_dcp(root):
        return [root]
    out = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            if _is_dcp(entry) or any(_is_save_file(p) for p in entry.iterdir()):
                out.append(entry)
        elif _is_save_file(entry) or (PARTIAL.search(entry.name) and any(s in entry.name for s in SAVE_SUFFIXES)):
            out.append(entry)
    return out


def _is_dcp(path: Path) -> bool:
    return (path / ".metadata").exists() or any(path.glob("*.distcp"))


def _is_save_file(path: Path) -> bool:
    return path.is_file() and path.suffix in SAVE_SUFFIXES


def _kind(path: Path) -> str:
    if path.is_dir():
        return "dcp" if (path / ".metadata").exists() else "directory"
    return "safetensors" if path.suffix == ".safetensors" else "torch.save"


def _incomplete(path: Path, trust: bool | None) -> str:
    """Why ``path`` is not a complete checkpoint ('' when it is)."""
    if PARTIAL.search(path.name):
        return "a partial or temporary name"
    if path.is_file():
        return _file_incomplete(path)
    if _is_dcp(path):
        return _dcp_incomplete(path, trust)
    files = [p for p in path.iterdir() if _is_save_file(p)]
    bad = [f"{p.name}: {why}" for p in files if (why := _file_incomplete(p))]
    return "; ".join(bad)


def _dcp_incomplete(path: Path, trust: bool | None) -> str:
    meta = path / ".metadata"
    if not meta.exists():
        return "no .metadata (the save did not finish)"
    if meta.stat().st_size == 0:
        return ".metadata is empty"
    shards = {p.name: p.stat().st_size for p in path.glob("*.distcp")}
    if trust is None:
        trust = meta.stat().st_uid == os.geteuid()
    if not trust:
        if not shards:
            return "no *.distcp shards"
        empty = [n for n, size in shards.items() if size == 0]
        return f"empty shard(s): {', '.join(sorted(empty))}" if empty else ""
    try:
        from torch.distributed.checkpoint import FileSystemReader

        needed: dict[str, int] = {}
        for info in FileSystemReader(str(path)).read_metadata().storage_data.values():
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    except Exception as exc:  # noqa: BLE001 - an unreadable metadata file makes the checkpoint incomplete
        return f".metadata unreadable: {type(exc).__name__}: {exc}"
    missing = sorted(n for n in needed if n not in shards)
    if missing:
        return f"missing shard(s): {', '.join(missing)}"
    short = sorted(n for n, end in needed.items() if shards[n] < end)
    return f"shard(s) shorter than the metadata says: {', '.join(short)}" if short else ""


def _file_incomplete(path: Path) -> str:
    size = path.stat().st_size
    if size == 0:
        return "zero length"
    with open(path, "rb") as f:
        head = f.read(8)
        if path.suffix == ".safetensors":
            return _safetensors_incomplete(f, head, size)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as z:
                ends = [i.header_offset + i.compress_size for i in z.infolist()]
        except (zipfile.BadZipFile, OSError) as exc:
            return f"truncated or corrupt zip: {exc}"
        return "truncated: entries run past the end" if ends and max(ends) > size else ""
    return ""  # the legacy pickle format has no trailer to check


def _safetensors_incomplete(f, head: bytes, size: int) -> str:
    if len(head) < 8:
        return "truncated header"
    (n,) = struct.unpack("<Q", head)
    try:
        header = json.loads(f.read(n))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable header: {exc}"
    return "truncated: tensors run past the end" if 8 + n + end > size else ""


def _step(name: str) -> int | None:
    m = STEP.search(name)
    return int(m.group(1)) if m else None
