"""Files the store makes and reads as root among untrusted users: its modes and group, no symlink ever
followed, fsync'd renames, and the one atomic write every replaced file goes through."""
from __future__ import annotations

from typing import TYPE_CHECKING

import errno
import grp
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

if TYPE_CHECKING:
    from observe.store import Store



DIR_MODE = 0o750  # root writes; the store's group (the people who may query) reads; nobody else


FILE_MODE = 0o640


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory (a rename or a new file in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class UnsafeStore(ValueError):
    """A store that others can write, or a symlink inside one: refused (a ValueError, so commands
    report it as their one-line error)."""


def store_group() -> int | None:
    """The group that may read what the store creates: $OBSERVE_STORE_GROUP (a name or a number), or
    None (the creator's, or that of a setgid directory, which the kernel passes on)."""
    name = os.environ.get("OBSERVE_STORE_GROUP", "")
    if not name:
        return None
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"OBSERVE_STORE_GROUP={name}: no such group") from None


def check_dir(path: Path, st: os.stat_result) -> None:
    """Refuse a store directory that is a symlink or, when running as root, one that another user
    could write (they could plant there what root then follows, reads and ships)."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeStore(f"{path}: a symlink inside the store; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
        who = f"owned by uid {st.st_uid}" if st.st_uid != 0 else \
            f"writable by {'everyone' if st.st_mode & stat.S_IWOTH else 'its group'}"
        raise UnsafeStore(f"store {path}: {who}; as root, observe uses a store only if root alone can write it "
                          f"(chown root and chmod go-w it)")


def create_file(path: Path, mode: int | None = None, gid: int | None = None) -> BinaryIO:
    """A new file at ``path`` open for writing, never through a symlink (O_EXCL, O_NOFOLLOW: nothing
    may be there yet). With ``mode``, exactly that mode (whatever the umask) and the group ``gid``,
    both set before a byte is written; without, 0666 less the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666 if mode is None else 0o600)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        if mode is not None:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def open_nofollow(path: Path, write: bool = False) -> BinaryIO:
    """An existing file opened for reading (or writing, to lock it) unless it is a symlink."""
    try:
        fd = os.open(path, (os.O_WRONLY if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStore(f"{path}: a symlink inside the store; refusing to follow it") from None
        raise
    return os.fdopen(fd, "wb" if write else "rb")


def regular_names(directory: Path) -> list[str]:
    """The names of the regular files in ``directory`` (none if it is missing), hidden ones
    (temporaries, locks) left out. Symlinks are left out too: one named like a segment would have
    queries read, and the collector ship, whatever it points to."""
    try:
        with os.scandir(directory) as it:
            return [e.name for e in it if not e.name.startswith(".") and e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def subdirs(directory: Path, prefix: str) -> list[tuple[str, str]]:
    """(value, path) of the ``prefix<value>`` subdirectories of ``directory``, sorted; none if it is
    missing. Symlinks are left out (:func:`regular_names` says why)."""
    try:
        with os.scandir(directory) as it:
            return sorted((e.name[len(prefix):], e.path) for e in it
                          if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def create_temp(path: Path, store: Store | None = None) -> BinaryIO:
    """A temporary file at ``path`` made as ``store`` makes its files (else as :func:`create_file`
    does), whatever had the name removed first: a crash's leftover, or a planted link, never followed."""
    path.unlink(missing_ok=True)
    return store.create(path) if store else create_file(path)


@contextmanager
def atomic_file(path: Path, store: Store | None = None) -> Iterator[BinaryIO]:
    """A file that replaces ``path`` whole or not at all: written to a hidden temporary beside it (this
    process's own name), fsync'd, renamed onto ``path``, the directory fsync'd; removed if the writing
    fails. The temporary is made as ``store`` makes its files (mode, group) when given, never through a
    symlink. Every atomic write of observe goes through here."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with create_temp(tmp, store) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_atomic(path: Path, data: bytes, store: Store | None = None) -> None:
    """Write ``data`` to ``path`` whole or not at all (:func:`atomic_file`)."""
    with atomic_file(path, store) as f:
        f.write(data)
