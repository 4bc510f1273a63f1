"""Shipping sealed segments from a node's spool to the central store: a shared path or an object store.

Segments keep their names and partition paths under the store's ``incoming/``, so many collectors
ship into one store without coordination (``observe compact`` commits them to the table in batches), and shipping a segment twice (a crash between the copy and the local delete)
overwrites it with the same bytes. Oldest first; while the store is unreachable the spool grows up
to a bound, past which the oldest segments are dropped with a log line and counted.
"""
from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from observe.store import Store, atomic_file, open_nofollow, regular_names, subdirs
from observe.store.place import place_of


class Destination:
    """Where shipped files go: ``put`` makes a whole file appear at once under a relative path."""

    def put(self, rel: str, src: Path) -> None:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    @staticmethod
    def from_url(url: str) -> Destination:
        """A local directory (path or ``file://``) or any filesystem URL pyarrow knows (``s3://``,
        ``gs://``, ``hdfs://``; S3 options such as ``endpoint_override`` go in the query string)."""
        placed = place_of(url)
        if placed is None:
            return LocalDir(Store(url))
        return ArrowDir(placed[0].fs, str(placed[1]))


@dataclass
class LocalDir(Destination):
    """A store's directory on a local or shared file system, written as the store writes (its
    modes and group, no symlink followed, refused as root when others can write it): copy to a
    hidden name, fsync, rename."""

    store: Store

    def put(self, rel: str, src: Path) -> None:
        final = self.store.root / rel
        self.store.make_dirs(final.parent)
        with open_nofollow(src) as r, atomic_file(final, self.store) as w:
            shutil.copyfileobj(r, w, 1 << 20)

    def exists(self, rel: str) -> bool:
        return (self.store.root / rel).exists()


@dataclass
class ArrowDir(Destination):
    """A pyarrow filesystem (S3 and friends): an object appears whole when its upload completes."""

    fs: pafs.FileSystem
    root: str

    def put(self, rel: str, src: Path) -> None:
        path = f"{self.root}/{rel}"
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with open_nofollow(src) as r, self.fs.open_output_stream(path) as w:
            shutil.copyfileobj(r, w, 1 << 20)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(f"{self.root}/{rel}").type != pafs.FileType.NotFound


@dataclass
class ShipResult:
    shipped: int = 0
    failed: bool = False
    error: str = ""
    dropped_files: int = 0
    dropped_rows: int = 0
    dropped_bytes: int = 0


def spool_files(spool: Path) -> list[Path]:
    """Sealed files waiting in a spool, oldest first: input markers, then segments by batch. Regular
    files in real directories only: root ships them where the store's group reads them."""
    markers = [spool / "inputs" / n for n in sorted(regular_names(spool / "inputs"))]
    segments = [Path(d) / n for _, s in subdirs(spool / "events", "source=") for _, d in subdirs(Path(s), "date=")
                for n in regular_names(Path(d)) if n.endswith(".parquet")]
    return markers + sorted(segments, key=lambda p: p.name)


def batch_of(segment: Path) -> int:
    """The batch number in a spool segment's name (``b0000000042-<uuid>.parquet``); -1 if none."""
    head = segment.name.split("-", 1)[0]
    return int(head[1:]) if head.startswith("b") and head[1:].isdigit() else -1


def ship(spool: Path, dest: Destination, committed: int, max_bytes: int) -> ShipResult:
    """Ship the spool's sealed files (segments of batches up to ``committed``) oldest first, deleting
    each once it is at ``dest``; stop at the first failure. Then, if what is left exceeds
    ``max_bytes``, drop the oldest segments (logged and counted)."""
    result = ShipResult()
    pending = [p for p in spool_files(spool) if p.parent.name == "inputs" or batch_of(p) <= committed]
    for path in pending:
        rel = str(path.relative_to(spool))
        if path.parent.name != "inputs":
            rel = f"incoming/{rel}"  # committed to the table centrally (Store.adopt), never by each node
        try:
            if path.parent.name == "inputs":
                if not dest.exists(rel):
                    dest.put(rel, path)
            else:
                dest.put(rel, path)
        except OSError as exc:
            result.failed, result.error = True, f"{rel}: {exc}"
            break
        path.unlink(missing_ok=True)
        result.shipped += 1
    _enforce_bound(spool, max_bytes, result)
    return result


def _enforce_bound(spool: Path, max_bytes: int, result: ShipResult) -> None:
    segments = [p for p in spool_files(spool) if p.suffix == ".parquet"]
    sizes = {p: p.stat().st_size for p in segments}
    total = sum(sizes.values())
    for path in segments:
        if total <= max_bytes:
            break
        try:
            rows = pq.read_metadata(path).num_rows
        except (OSError, pq.lib.ArrowException):
            rows = 0
        path.unlink(missing_ok=True)
        total -= sizes[path]
        result.dropped_files += 1
        result.dropped_rows += rows
        result.dropped_bytes += sizes[path]
    if result.dropped_files:
        print(f"observe collect: spool over its bound of {max_bytes} bytes: dropped the {result.dropped_files} "
              f"oldest segment(s), {result.dropped_rows} records, {result.dropped_bytes} bytes",
              file=sys.stderr, flush=True)
