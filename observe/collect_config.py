"""The node collector's configuration (``docs/collector.toml``): its inputs, spool, store and limits,
read from TOML and checked, with a one-line error naming the file and the key."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from observe import collector as registry
from observe.hostname import this_node
from observe.config import read_toml
from observe.reader import MAX_RECORD_BYTES
from observe.spans import parse_span

SIZES = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


class ConfigError(ValueError):
    """The collector configuration is invalid; the message names the file and the key."""


TYPES = ("file", "kmsg", "journald", "command")
JOURNALCTL = ("journalctl", "-o", "json", "--follow")
STREAM_SOURCES = {"kmsg": "kernel", "journald": "syslog"}


@dataclass(frozen=True)
class InputSpec:
    """One configured input: a path or glob (``file``), ``/dev/kmsg``, the journal or a command."""

    path: str = ""
    source: str = "auto"
    job: str | None = None
    tz: str = "UTC"
    type: str = "file"
    command: tuple[str, ...] = ()
    every_s: float = 60.0

    @property
    def key(self) -> str:
        """What names the input in positions.json."""
        return self.path if self.type in ("file", "kmsg") else f"{self.type}: {' '.join(self.command)}"


@dataclass(frozen=True)
class Config:
    """A collector's configuration (see ``docs/collector.toml``)."""

    spool: Path
    store: str
    inputs: tuple[InputSpec, ...]
    node: str = field(default_factory=this_node)
    flush_interval_s: float = 5.0
    partial_timeout_s: float = 5.0
    max_batch_bytes: int = 64 << 20
    max_record_bytes: int = MAX_RECORD_BYTES
    spool_max_bytes: int = 2 << 30
    stats_interval_s: float = 60.0

    @classmethod
    def load(cls, path: str | Path) -> Config:
        """Read and check a TOML config; ConfigError (one line) when it is wrong."""
        return cls.from_dict(read_toml(path, ConfigError), str(path))

    @classmethod
    def from_dict(cls, doc: dict, where: str = "config") -> Config:
        known = {"spool", "store", "input", "node", "flush_interval", "partial_timeout", "max_batch", "max_record",
                 "spool_max", "stats_interval"}
        unknown = set(doc) - known
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        for key in ("spool", "store"):
            if not isinstance(doc.get(key), str) or not doc[key]:
                raise ConfigError(f"{where}: {key!r} (a path or URL) is required")
        inputs = [_input(raw, f"{where}: input {i + 1}") for i, raw in enumerate(doc.get("input", []))]
        if not inputs:
            raise ConfigError(f"{where}: no [[input]] tables: nothing to collect")
        opts = {}
        for key, name, parse in (("flush_interval", "flush_interval_s", seconds), ("partial_timeout", "partial_timeout_s", seconds),
                                 ("stats_interval", "stats_interval_s", seconds), ("max_batch", "max_batch_bytes", size),
                                 ("max_record", "max_record_bytes", size), ("spool_max", "spool_max_bytes", size)):
            if key in doc:
                try:
                    opts[name] = parse(doc[key])
                except ValueError as exc:
                    raise ConfigError(f"{where}: {key}: {exc}") from None
        if "node" in doc:
            opts["node"] = str(doc["node"])
        batch = opts.get("max_batch_bytes", cls.max_batch_bytes)
        record = opts.setdefault("max_record_bytes", min(cls.max_record_bytes, batch // 2))  # a small batch: half of it
        if not 0 < record < batch:
            raise ConfigError(f"{where}: max_record ({record} bytes) must be above 0 and below max_batch ({batch} bytes)")
        return cls(spool=Path(doc["spool"]), store=doc["store"], inputs=tuple(inputs), **opts)


def _input(raw: object, where: str) -> InputSpec:
    """One ``[[input]]`` table, checked."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: not a table")
    kind = raw.get("type", "file")
    allowed = {"file": {"path", "source", "job", "tz"}, "kmsg": {"path", "tz"}, "journald": {"command", "tz"},
               "command": {"command", "source", "every", "tz"}}
    if kind not in TYPES:
        raise ConfigError(f"{where}: type {kind!r}: use one of {', '.join(TYPES)}")
    extra = set(raw) - allowed[kind] - {"type"}
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(extra))} for type {kind!r}; known: "
                          f"{', '.join(sorted(allowed[kind]))}")
    command = raw.get("command", JOURNALCTL if kind == "journald" else ())
    if kind in ("journald", "command") and (not command or not isinstance(command, (list, tuple))
                                             or not all(isinstance(a, str) for a in command)):
        raise ConfigError(f"{where}: 'command' must be a list of strings (argv, run without a shell)")
    path = raw.get("path", "/dev/kmsg" if kind == "kmsg" else "")
    if kind == "file" and (not isinstance(path, str) or not path):
        raise ConfigError(f"{where}: needs a 'path'")
    source = STREAM_SOURCES.get(kind, raw.get("source", "auto"))
    if kind == "command" and source == "auto":
        raise ConfigError(f"{where}: a command needs its 'source' (nvidia_smi, dcgm, slurm_jobs, ...)")
    try:
        every = seconds(raw.get("every", 60))
    except ValueError as exc:
        raise ConfigError(f"{where}: every: {exc}") from None
    spec = InputSpec(path, source, raw.get("job"), raw.get("tz", "UTC"), kind, tuple(command), every)
    if spec.source != "auto":
        try:
            c = registry.get(spec.source)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if c.whole_file and kind == "file":
            raise ConfigError(f"{where}: source {spec.source!r} is read as whole documents, not followed line by "
                              f"line; poll its command with type = \"command\", or 'observe ingest' its files")
    return spec


def seconds(value: object) -> float:
    """``5`` (seconds), or a span as every command takes one (``"5s"``, ``"2m"``, ``"1h"``, ``"7d"``:
    observe.spans) to seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    text = str(value).strip()
    return float(text) if text.replace(".", "", 1).isdigit() else parse_span(text).total_seconds()


def size(value: object) -> int:
    """``1048576``, ``"64MB"``, ``"2GiB"`` to bytes."""
    return int(_number(value, SIZES, "a size such as 64MB or 2GiB"))


def _number(value: object, units: dict[str, float], what: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().lower()
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    try:
        n = float(digits)
    except ValueError:
        raise ValueError(f"{value!r} is not {what}") from None
    unit = text[len(digits):].strip()
    if unit not in units or n < 0:
        raise ValueError(f"{value!r} is not {what}")
    return n * units[unit]
