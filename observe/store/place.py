"""Where a store's bytes are: a local (or shared) directory, or an object store.

One location string names a store for every command: a path, ``file://``, or a filesystem URL
pyarrow knows (``s3://bucket/prefix``, ``gs://``, ``abfs://``), the same form collectors ship to.
Options that pyarrow takes in the URL's query string (``endpoint_override``, ``scheme``,
``region``) are translated for the two other readers of the store, delta-rs (the table's log) and
polars (the segments), so that all three reach the same server; credentials come from the
environment, as each of them reads it (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, a
profile, an instance role).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# pyarrow's S3 options in a URL's query string -> object_store's keys (delta-rs and polars)
S3_OPTIONS = {"region": "aws_region"}


@dataclass(frozen=True)
class Place:
    """An object store holding a store: pyarrow's filesystem for files, the URL scheme and the
    storage options delta-rs and polars need to read and write the same objects."""

    fs: "pafs.FileSystem"  # imported only where a store is remote: 17 ms of every command's start otherwise
    scheme: str
    options: dict[str, str] = field(default_factory=dict)

    def uri(self, path: PurePosixPath) -> str:
        """``path`` (the filesystem's form, ``bucket/key``) as a URL delta-rs and polars open."""
        return f"{self.scheme}://{path}"

    def info(self, path: PurePosixPath) -> "pafs.FileInfo":
        return self.fs.get_file_info(str(path))

    def stat(self, path: PurePosixPath) -> tuple[int, int]:
        """An object's size and modification time (ms); FileNotFoundError if there is none."""
        import pyarrow.fs as pafs

        info = self.info(path)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"{self.uri(path)}: no such object")
        return info.size, int(info.mtime.timestamp() * 1000) if info.mtime else 0

    def exists(self, path: PurePosixPath) -> bool:
        import pyarrow.fs as pafs

        return self.info(path).type != pafs.FileType.NotFound

    def files(self, directory: PurePosixPath, recursive: bool = False) -> list["pafs.FileInfo"]:
        """The files under ``directory`` (none if there is none), hidden names left out."""
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(str(directory), recursive=recursive, allow_not_found=True))
        return [i for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith(".")]

    def read_bytes(self, path: PurePosixPath) -> bytes:
        with self.fs.open_input_stream(str(path)) as f:
            return f.read()

    def put(self, path: PurePosixPath, data: bytes) -> None:
        """An object, whole once its upload completes (object stores have no partial objects)."""
        with self.fs.open_output_stream(str(path)) as f:
            f.write(data)


def place_of(location: str) -> tuple[Place, PurePosixPath] | None:
    """The object store and the store's root in it for a URL; None for a local path or ``file://``.
    ValueError (one line) for a URL pyarrow cannot open."""
    if "://" not in location or location.startswith("file://"):
        return None
    import pyarrow.fs as pafs

    parts = urlsplit(location)
    try:
        fs, root = pafs.FileSystem.from_uri(location)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"store {location!r}: {exc}") from None
    return Place(fs, parts.scheme, _storage_options(parts.scheme, parse_qs(parts.query))), PurePosixPath(root.rstrip("/"))


def _storage_options(scheme: str, query: dict[str, list[str]]) -> dict[str, str]:
    """delta-rs's and polars' options for what the URL's query string told pyarrow."""
    one = {k: v[-1] for k, v in query.items()}
    if scheme != "s3":
        return {}
    options = {S3_OPTIONS[k]: v for k, v in one.items() if k in S3_OPTIONS}
    if "endpoint_override" in one:
        http = one.get("scheme", "https")
        options["aws_endpoint_url"] = f"{http}://{one['endpoint_override']}"
        if http == "http":
            options["aws_allow_http"] = "true"
    return options
