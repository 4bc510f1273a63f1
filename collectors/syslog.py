"""Syslog: RFC 3164 (localized months, space-padded days), RFC 5424, RFC 3339 / journald short-iso,
``journalctl -o json``, and the Sandia archive prefix (``- 1131566461 2005.11.09 dn228 ...``).

Sample: ``Apr 29 19:24:11 EVE kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.``
Kernel lines become source ``kernel`` (their ``[uptime]`` kept in attrs), Slurm daemons ``slurm``.
"""
from __future__ import annotations

import json

import polars as pl

from observe import provenance
from observe import timeparse as tp
from observe.collector import Collector, Context, per_value, register, split_header
from observe.rules import attrs_json, merge_attrs, scatter_rows

TAG = r"(?:(?P<tag>[^\s:\[\]]+(?:\([^)\s]*\))?)(?:\[(?P<pid>\d+)\])?: ?)?"
RFC3164 = (
    r"(?:(?P<tb_label>\S+) (?P<tb_epoch>\d{9,11}) (?P<tb_date>\d{4}\.\d\d\.\d\d) (?P<tb_node>\S+) )?"
    r"(?:<(?P<pri>\d{1,3})>)?(?P<mon>\p{L}{3,5}\.?) {1,2}(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?) "
    r"(?:(?P<year>\d{4}) )?(?P<host>\S+) " + TAG
)
RFC3339 = (
    r"(?:<(?P<pri>\d{1,3})>)?(?P<stamp>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) "
    r"(?P<host>\S+) " + TAG
)
RFC5424 = (
    r"(?s)^<(?P<pri>\d{1,3})>1 (?P<stamp>\S+) (?P<host>\S+) (?P<tag>\S+) (?P<pid>\S+) (?P<msgid>\S+) "
    r"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: \x{FEFF}?(?P<msg>.*))?$"
)
SLURM_DAEMONS = r"^slurm(?:ctld|d|stepd|dbd|restd)?$"
UPTIME = r"^\[\s*(\d+\.\d+)\]\s?"
SEVERITY_BY_PRI = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]

def severity_from_pri(pri: pl.Expr) -> pl.Expr:
    """Syslog PRI (facility*8+level) or bare level to a severity name."""
    return (pri.cast(pl.Int32, strict=False) % 8).replace_strict(
        dict(enumerate(SEVERITY_BY_PRI)), default=None, return_dtype=pl.String)

def source_of(program: pl.Expr) -> pl.Expr:
    """Schema source for a syslog program name (worked out once per distinct name)."""
    return per_value(program, lambda names: pl.when(names == "kernel").then(pl.lit("kernel"))
                     .when(names.str.contains(SLURM_DAEMONS)).then(pl.lit("slurm")).otherwise(pl.lit("syslog")),
                     default="syslog")

def _nil(e: pl.Expr) -> pl.Expr:
    return pl.when(e != "-").then(e)

@register
class Syslog(Collector):
    name = "syslog"
    source = "syslog"
    priority = 10
    relayed = True
    sniff = (
        r"^(?:\S+ \d{9,11} \d{4}\.\d\d\.\d\d \S+ )?(?:<\d{1,3}>)?\p{L}{3,5}\.? {1,2}\d{1,2} \d\d:\d\d:\d\d(?:\.\d{1,9})? |"
        r"^(?:<\d{1,3}>1? ?)?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S* \S+ [^\s:]+: |"
        r"^<\d{1,3}>1 (?:\d{4}-\d\d-\d\dT\S+|-) \S+ \S+ \S+ \S+ |"  # RFC 5424: no tag's colon
        r"^\{.*\"__REALTIME_TIMESTAMP\""
    )

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Split headers: lines of the common RFC 3164 shape (the stamp parses, a space follows) at
        fixed positions, the others by their format; the rest of each record is the message."""
        raw = records.get_column("raw")
        ts = tp.syslog_stamp(raw.str.slice(0, 15), ctx.reference_time, ctx.tz)
        fast = (ts.is_not_null() & (raw.str.slice(15, 1) == " ")).fill_null(False)
        if fast.all():  # nearly always: no format detection, split or concatenation
            out = _rfc3164_fast(records.with_columns(ts.alias("_ts")))
        else:
            out = pl.concat([_rfc3164_fast(records.with_columns(ts.alias("_ts")).filter(fast)),
                             _by_format(records.filter(~fast), ctx)], how="diagonal_relaxed")
        return _slurm_lines(kernel_uptime(out.with_columns(_source(out))))


def _source(df: pl.DataFrame) -> pl.Expr:
    """The source of each line by its program; a journal entry a user sent is syslog whatever
    program it names (``logger -t kernel``, ``logger -t slurmd``)."""
    source = source_of(pl.col("program"))
    if "route" not in df.columns:
        return source.alias("source")
    return pl.when(pl.col("route") == "journal_user").then(pl.lit("syslog")).otherwise(source).alias("source")


def _slurm_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Slurm daemons' lines (``slurmd[777]: error: ...``) with Slurm's severity and job id."""
    rows = df.select((pl.col("source") == "slurm").fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    from collectors.slurm import slurm_fields  # collectors.slurm reads syslog-framed lines through this module

    part = df.select("message", "severity", *(["job_id"] if "job_id" in df.columns else [])).gather(rows)
    fixed = slurm_fields(part).select("severity", "job_id")
    if "job_id" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("job_id"))
    return scatter_rows(df, rows, fixed)


def _by_format(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Lines of any other shape, each by its format's parser."""
    raw = pl.col("raw")
    kinds = records.with_columns(
        pl.when(raw.str.starts_with("{")).then(pl.lit("json"))
        .when(raw.str.contains(r"^<\d{1,3}>1 ")).then(pl.lit("5424"))
        .when(raw.str.contains(r"^(?:<\d{1,3}>)?\d{4}-\d\d-\d\d[T ]")).then(pl.lit("3339"))
        .otherwise(pl.lit("3164")).alias("_fmt")
    )
    parsers = {"json": _json, "5424": _rfc5424, "3339": _rfc3339, "3164": _rfc3164_regex}
    return pl.concat([parsers[fmt](part.drop("_fmt"), ctx) for (fmt,), part in kinds.group_by("_fmt")],
                     how="diagonal_relaxed")


def kernel_uptime(df: pl.DataFrame) -> pl.DataFrame:
    """Move a kernel message's leading ``[ 12.345678]`` into attrs.uptime (only those rows touched)."""
    has = (pl.col("source") == "kernel") & pl.col("message").str.starts_with("[")
    rows = df.select(has.fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    msg = pl.col("message")
    fixed = df.select("message", "attrs").gather(rows).with_columns(msg.str.extract(UPTIME, 1).alias("_up")).select(
        pl.when(pl.col("_up").is_not_null()).then(msg.str.replace(UPTIME, "")).otherwise(msg).alias("message"),
        merge_attrs(pl.col("attrs"), attrs_json([("uptime", pl.col("_up"))])).alias("attrs"),
    )
    return scatter_rows(df, rows, fixed)

def _header(part: pl.DataFrame, pattern: str) -> pl.DataFrame:
    return part.with_columns(pl.col("raw").str.extract_groups(pattern).alias("_h")).unnest("_h")

def _common(g: pl.DataFrame, ts: pl.Expr, host: pl.Expr, severity: pl.Expr) -> pl.DataFrame:
    return g.select(
        "raw", "offset", ts.alias("ts"), host.alias("node"), severity.alias("severity"),
        pl.col("tag").alias("program"), pl.col("pid").cast(pl.Int64, strict=False).alias("pid"),
        pl.col("msg").alias("message"), pl.lit(None, dtype=pl.String).alias("attrs"),
    )

def _rfc3164_fast(part: pl.DataFrame) -> pl.DataFrame:
    """``Mmm dd hh:mm:ss host tag[pid]: msg`` (time already in ``_ts``) by fixed positions and
    splits, no regex captures."""
    raw = pl.col("raw")
    g = part.with_columns(
        raw.str.slice(16).str.splitn(" ", 2).struct.rename_fields(["host", "body"]).alias("_h")
    ).unnest("_h").with_columns(
        pl.col("body").str.splitn(": ", 2).struct.rename_fields(["tagpart", "msg"]).alias("_t")
    ).unnest("_t")
    tagged = pl.col("msg").is_not_null() & (pl.col("tagpart") != "") & ~pl.col("tagpart").str.contains(" ", literal=True)
    g = g.with_columns(
        pl.when(tagged).then(pl.col("tagpart").str.splitn("[", 2)).alias("_p")
    ).unnest("_p")
    g = g.with_columns(
        pl.col("field_0").alias("tag"),
        pl.col("field_1").str.strip_suffix("]").alias("pid"),
        pl.when(tagged).then(pl.col("msg")).otherwise(pl.col("body")).alias("msg"),
    )
    return _common(g, pl.col("_ts"), pl.col("host"), pl.lit(None, dtype=pl.String))


def _rfc3164_regex(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """The general RFC 3164 shape: PRI, archive prefix, localized months, optional year."""
    g = split_header(part, RFC3164)
    year = pl.coalesce(pl.col("year"), pl.col("tb_date").str.slice(0, 4))
    ts = pl.coalesce(
        tp.yearless(pl.col("mon"), pl.col("day"), pl.col("clock"), ctx.reference_time, ctx.tz, year=year),
        tp.yearless(pl.col("mon"), pl.col("day"), pl.col("clock"), ctx.reference_time, ctx.tz),
    )
    host = pl.coalesce(pl.col("tb_node"), pl.col("host").str.extract(r"^([^/]+)", 1))
    ok = pl.col("msg").is_not_null() & tp.month_number(pl.col("mon")).is_not_null()
    g = g.with_columns(pl.when(ok).then(pl.col("msg")).alias("msg"))
    return _common(g, ts, host, severity_from_pri(pl.col("pri")))

def _rfc3339(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, RFC3339)
    return _common(g, tp.iso(pl.col("stamp"), ctx.tz), pl.col("host"), severity_from_pri(pl.col("pri")))

def _rfc5424(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = part.with_columns(pl.col("raw").str.extract_groups(RFC5424).alias("_h")).unnest("_h").with_columns(
        _nil(pl.col("tag")).alias("tag"), _nil(pl.col("pid")).alias("pid"),
        pl.coalesce(pl.col("msg"), pl.when(pl.col("pri").is_not_null()).then(pl.lit(""))).alias("msg"),
    )
    return _common(g, tp.iso(pl.col("stamp")), _nil(pl.col("host")), severity_from_pri(pl.col("pri")))

def _json(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    raw = pl.col("raw")

    def field(name: str) -> pl.Expr:
        return raw.str.json_path_match(f"$.{name}")

    usec = field("__REALTIME_TIMESTAMP").cast(pl.Int64, strict=False)
    ts = pl.from_epoch(usec, time_unit="us").dt.replace_time_zone("UTC")
    # journald sets the fields that start with "_" itself; SYSLOG_IDENTIFIER is whatever the sender
    # said (``logger -t kernel``): only the kernel transport makes a kernel line, only a system
    # account's entry a Slurm daemon's
    kernel = field("_TRANSPORT") == "kernel"
    system = field("_UID").cast(pl.Int64, strict=False) <= provenance.policy()["system_uid_max"]
    route = pl.when(kernel).then(pl.lit("journal_kernel")).when(system).then(pl.lit("journal_system")) \
        .otherwise(pl.lit("journal_user"))
    tag = pl.when(kernel).then(pl.lit("kernel")).otherwise(pl.coalesce(field("SYSLOG_IDENTIFIER"), field("_COMM")))
    out = part.select(
        "raw", "offset", ts.alias("ts"), field("_HOSTNAME").alias("node"),
        severity_from_pri(field("PRIORITY")).alias("severity"), tag.alias("program"),
        pl.coalesce(field("_PID"), field("SYSLOG_PID")).cast(pl.Int64, strict=False).alias("pid"),
        field("MESSAGE").alias("message"), pl.lit(None, dtype=pl.String).alias("attrs"), route.alias("route"),
    )
    # journald writes a MESSAGE that is not valid UTF-8 (or holds control characters) as an array
    # of byte values: decoded, invalid bytes replaced (such lines are rare: a Python loop over them)
    rows = out.select(raw.str.contains(r'"MESSAGE"\s*:\s*\[').fill_null(False)).to_series().arg_true()
    if len(rows):
        msgs = out.get_column("message").gather(rows)
        decoded = [bytes(json.loads(m)).decode("utf-8", "replace") if m else m for m in msgs]
        out = out.with_columns(out.get_column("message").scatter(rows, pl.Series(decoded, dtype=pl.String)))
    return out
