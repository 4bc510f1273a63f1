"""The one event schema: every record observe stores has exactly these columns."""
from __future__ import annotations

import polars as pl

from observe import header_shapes, timeparse as tp
from observe.frames import attrs_json, merge_attrs, scatter_rows

SOURCES = ("slurm", "syslog", "kernel", "nccl", "gpu", "health")
SEVERITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")

_TS = pl.Datetime("us", "UTC")
_FIELDS: list[tuple[str, pl.DataType, str]] = [
    ("ts", _TS, "event time in UTC, microseconds; null when truly unknown"),
    ("node", pl.String(), "Slurm node name or short host name"),
    ("source", pl.String(), "one of: " + ", ".join(SOURCES)),
    ("severity", pl.String(), "syslog level: " + ", ".join(SEVERITIES)),
    ("kind", pl.String(), "snake_case event kind (rule files document each); log or unparsed otherwise"),
    ("job_id", pl.String(), "Slurm job id as text: 123, 123_4 and 123+1 are all real"),
    ("rank", pl.Int32(), "distributed rank (NCCL / PyTorch)"),
    ("gpu", pl.String(), "GPU PCI bus id (0000:3b:00) or index"),
    ("code", pl.Int32(), "numeric code of the event, e.g. the Xid number or an exit code"),
    ("program", pl.String(), "emitting program or component (syslog tag, daemon, kernel)"),
    ("pid", pl.Int64(), "process id of the emitting program"),
    ("message", pl.String(), "the record's text without its header"),
    ("raw", pl.String(), "the original record, continuation lines joined with newlines"),
    ("attrs", pl.String(), "source-specific extras as a JSON object"),
    ("file_id", pl.String(), "provenance: fingerprint of the input the record came from"),
    ("offset", pl.Int64(), "provenance: byte offset of the record in that input"),
    ("route", pl.String(), "provenance: how the record reached observe (observe/provenance.toml); only "
                           "trusted routes drive checks and drains"),
]
# Files keep each line's text once: where ``raw`` is ``header + message`` (nearly always), ``raw`` is
# left null and ``header`` holds the part before the message, or, where one of the shapes of
# observe/header_shapes.toml renders that part from the row's ts, node, program and pid, ``header`` is
# null and ``shape`` names the shape. Readers restore it: raw = coalesce(raw, coalesce(header,
# rendered shape) || message). ``copy_of`` says which rows copy a record another input
# holds (observe/copies.py decides, observe/store/copy_marks.py writes it): engines other than
# observe count each record once with ``WHERE copy_of IS NULL``.
_STORED_ONLY: list[tuple[str, pl.DataType, str]] = [
    ("header", pl.String(), "raw = header || message, where raw is null (and header is not)"),
    ("copy_of", pl.String(), "null, or the file_id of the input whose row of the same record is the one kept: "
                             "count records WHERE copy_of IS NULL"),
    ("shape", pl.String(), "where raw and header are null, the header's shape: {ts:FORMAT} (strftime; {ts@ZONE:...} "
                           "in ZONE), {node}, {program} and {pid} rendered from the row, then its message"),
]
FIELDS: tuple[str, ...] = tuple(n for n, _, _ in _FIELDS)
DESCRIPTIONS: dict[str, str] = {n: d for n, _, d in _FIELDS + _STORED_ONLY}
POLARS_SCHEMA: dict[str, pl.DataType] = {n: t for n, t, _ in _FIELDS}
STORED_COLUMNS = pl.Schema({n: t for n, t, _ in _FIELDS + _STORED_ONLY})  # the files' columns, as polars reads them


def arrow_schema(stored: bool = True):
    """The files' columns (or, without ``stored``, the events') as a pyarrow schema with each column's
    description: for writers and the Delta table. pyarrow is imported here, by what writes; a command that
    only reads does without it (0.1 s, with numpy)."""
    import pyarrow as pa

    arrow = {pl.String(): pa.string(), pl.Int32(): pa.int32(), pl.Int64(): pa.int64(), _TS: pa.timestamp("us", tz="UTC")}
    fields = _FIELDS + (_STORED_ONLY if stored else [])
    return pa.schema([pa.field(n, arrow[t], metadata={"description": d}) for n, t, d in fields])


KEY = ("file_id", "offset")


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Cast and order ``df`` to the event schema; missing columns become null, unknown ones are an error.
    A value a column's type cannot hold becomes null, and so does a time out of range
    (:data:`observe.timeparse.TS_MIN` .. ``TS_MAX``): whatever a frame holds, a stored one holds none
    (a parsed record's is taken out earlier, with its reason, by :func:`bounded`).

    A frame without a ``route`` was made by observe itself (parsers always set one): route ``observe``.
    """
    unknown = set(df.columns) - set(FIELDS)
    if unknown:
        raise ValueError(f"columns not in the event schema: {sorted(unknown)}")
    missing = {"route": "observe"}
    return df.select(
        [
            _cast(n, t) if n in df.columns else pl.lit(missing.get(n), dtype=t).alias(n)
            for n, t in POLARS_SCHEMA.items()
        ]
    )


def _cast(name: str, dtype: pl.DataType) -> pl.Expr:
    col = pl.col(name).cast(dtype, strict=False)
    return pl.when(tp.in_range(col)).then(col).alias(name) if name == "ts" else col


# attrs.parse_error of a record a value of which :func:`bounded` refused: this, then what (``time``,
# ``uptime``); never the start of a contained parse's reason (an exception's name comes first there)
OUT_OF_RANGE = "out of range: "
# an attrs.uptime text that is surely a sane one (up to 9 integer digits: under UPTIME_MAX); any other is checked
_SANE_UPTIME_TEXT = r'"uptime":"\d{1,9}(?:\.\d*)?"'
_UPTIME_MEMBER = r'"uptime":"(?:[^"\\]|\\.)*",?'


def bounded(df: pl.DataFrame) -> pl.DataFrame:
    """Where what a parser read from its input enters the schema: a time out of range
    (:func:`observe.timeparse.in_range`: a user's ``[0000-01-01 ...]``, journald's stamp of -2^63)
    becomes null, and a kernel uptime that is none (:func:`observe.timeparse.sane_uptime`:
    ``[99999999999999999999.0]``) leaves attrs; the record keeps its text and says which in
    ``attrs.parse_error`` (``out of range: time``). Boot times, partitions and the store see sane
    values only. Only those rows are touched (the uptimes of kernel lines are checked by a regex
    over attrs, their JSON read only where it does not match a plain one)."""
    ts, attrs = pl.col("ts"), pl.col("attrs")
    bad_ts = (~tp.in_range(ts)).fill_null(False) if isinstance(df.schema.get("ts"), pl.Datetime) else pl.lit(False)
    odd_up = (attrs.str.contains('"uptime":"', literal=True) & ~attrs.str.contains(_SANE_UPTIME_TEXT)).fill_null(False) \
        if df.schema.get("attrs") == pl.String else pl.lit(False)
    flags = df.select(bad_ts.alias("_t"), odd_up.alias("_u"))
    rows = flags.select(pl.col("_t") | pl.col("_u")).to_series().arg_true()
    if not len(rows):
        return df
    part = df.select("ts", "attrs").gather(rows).with_columns(flags.gather(rows))
    t, u = pl.col("_t"), pl.col("_u") & tp.sane_uptime(attrs.str.json_path_match("$.uptime")).is_null()
    what = pl.concat_str([pl.when(t).then(pl.lit("time")), pl.when(u).then(pl.lit("uptime"))], separator=", ", ignore_nulls=True)
    stripped = attrs.str.replace_all(_UPTIME_MEMBER, "").str.replace(r",\}$", "}")
    stripped = pl.when(stripped != "{}").then(stripped)
    fixed = part.select(
        pl.when(t).then(pl.lit(None, dtype=df.schema["ts"])).otherwise(ts).alias("ts"),
        merge_attrs(pl.when(u).then(stripped).otherwise(attrs),
                    attrs_json([("parse_error", pl.when(t | u).then(pl.lit(OUT_OF_RANGE) + what))])).alias("attrs"))
    return scatter_rows(df, rows, fixed)


def to_stored(df: pl.DataFrame, zone: str = "UTC") -> pl.DataFrame:
    """The on-disk layout of a conformed frame: ``raw`` split into header and message when it can be,
    and a header one of the catalog's shapes renders (its times in ``zone``, where the input's stamps
    were read) kept as that shape."""
    raw, message, head = pl.col("raw"), pl.col("message"), pl.col("_head")
    df = df.with_columns(raw.str.strip_suffix(message).alias("_head"))
    # the message was a suffix where the head is that much shorter (one comparison, not two)
    tail = (head.str.len_bytes() + message.str.len_bytes() == raw.str.len_bytes()).fill_null(False)
    return shaped(df.with_columns(pl.when(~tail).then(raw).alias("raw"), pl.when(tail).then(head).alias("header"),
                                  pl.lit(None, pl.String).alias("copy_of"), pl.lit(None, pl.String).alias("shape"))
                  .drop("_head"), zone)


def shaped(df: pl.DataFrame, zone: str) -> pl.DataFrame:
    """``df`` (stored layout) with each header one of the catalog's shapes renders (times in ``zone``)
    kept as that shape."""
    shape = header_shapes.shapes_of(df, zone)
    return df.with_columns(pl.when(shape.is_null()).then(pl.col("header")).alias("header"),
                           pl.coalesce(pl.col("shape"), shape).alias("shape"))


def stored_raw() -> pl.Expr:
    """A stored row's original record: ``raw``, else its header (kept, or rendered from its shape)
    and message."""
    head = pl.coalesce(pl.col("header"), header_shapes.rendered())
    return pl.coalesce(pl.col("raw"), pl.concat_str([head, pl.col("message")]))


def from_stored(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The event schema from the on-disk layout (inverse of :func:`to_stored`)."""
    return lf.with_columns(stored_raw().alias("raw")).drop("header", "shape", "copy_of")
