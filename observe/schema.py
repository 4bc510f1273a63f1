"""The one event schema: every record observe stores has exactly these columns."""
from __future__ import annotations

import polars as pl
import pyarrow as pa

SOURCES = ("slurm", "syslog", "kernel", "nccl", "gpu", "health")
SEVERITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")

_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("ts", pa.timestamp("us", tz="UTC"), "event time in UTC, microseconds; null when truly unknown"),
    ("node", pa.string(), "Slurm node name or short host name"),
    ("source", pa.string(), "one of: " + ", ".join(SOURCES)),
    ("severity", pa.string(), "syslog level: " + ", ".join(SEVERITIES)),
    ("kind", pa.string(), "snake_case event kind (rule files document each); log or unparsed otherwise"),
    ("job_id", pa.string(), "Slurm job id as text: 123, 123_4 and 123+1 are all real"),
    ("rank", pa.int32(), "distributed rank (NCCL / PyTorch)"),
    ("gpu", pa.string(), "GPU PCI bus id (0000:3b:00) or index"),
    ("code", pa.int32(), "numeric code of the event, e.g. the Xid number or an exit code"),
    ("program", pa.string(), "emitting program or component (syslog tag, daemon, kernel)"),
    ("pid", pa.int64(), "process id of the emitting program"),
    ("message", pa.string(), "the record's text without its header"),
    ("raw", pa.string(), "the original record, continuation lines joined with newlines"),
    ("attrs", pa.string(), "source-specific extras as a JSON object"),
    ("file_id", pa.string(), "provenance: fingerprint of the input the record came from"),
    ("offset", pa.int64(), "provenance: byte offset of the record in that input"),
    ("route", pa.string(), "provenance: how the record reached observe (observe/provenance.toml); only "
                           "trusted routes drive checks and drains"),
]

EVENT_SCHEMA = pa.schema(
    [pa.field(n, t, metadata={"description": d}) for n, t, d in _FIELDS]
)
# Files keep each line's text once: where ``raw`` is ``header + message`` (nearly always), ``raw`` is
# left null and ``header`` holds the part before the message. Readers restore it:
# raw = coalesce(raw, header || message).
STORED_SCHEMA = EVENT_SCHEMA.append(pa.field(
    "header", pa.string(), metadata={"description": "raw = header || message, where raw is null"}))
FIELDS: tuple[str, ...] = tuple(n for n, _, _ in _FIELDS)
DESCRIPTIONS: dict[str, str] = {n: d for n, _, d in _FIELDS}
POLARS_SCHEMA: dict[str, pl.DataType] = dict(pl.Schema(EVENT_SCHEMA))  # through the C schema: an empty pyarrow table imports pandas where it is installed
KEY = ("file_id", "offset")


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Cast and order ``df`` to the event schema; missing columns become null, unknown ones are an error.

    A frame without a ``route`` was made by observe itself (parsers always set one): route ``observe``.
    """
    unknown = set(df.columns) - set(FIELDS)
    if unknown:
        raise ValueError(f"columns not in the event schema: {sorted(unknown)}")
    missing = {"route": "observe"}
    return df.select(
        [
            pl.col(n).cast(t, strict=False) if n in df.columns else pl.lit(missing.get(n), dtype=t).alias(n)
            for n, t in POLARS_SCHEMA.items()
        ]
    )


def to_stored(df: pl.DataFrame) -> pl.DataFrame:
    """The on-disk layout of a conformed frame: ``raw`` split into header and message when it can be."""
    raw, message, head = pl.col("raw"), pl.col("message"), pl.col("_head")
    df = df.with_columns(raw.str.strip_suffix(message).alias("_head"))
    # the message was a suffix where the head is that much shorter (one comparison, not two)
    tail = (head.str.len_bytes() + message.str.len_bytes() == raw.str.len_bytes()).fill_null(False)
    return df.with_columns(pl.when(~tail).then(raw).alias("raw"), pl.when(tail).then(head).alias("header")).drop("_head")


def stored_raw() -> pl.Expr:
    """A stored row's original record: ``raw``, else ``header || message``."""
    return pl.coalesce(pl.col("raw"), pl.concat_str([pl.col("header"), pl.col("message")]))


def from_stored(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The event schema from the on-disk layout (inverse of :func:`to_stored`)."""
    return lf.with_columns(stored_raw().alias("raw")).drop("header")
