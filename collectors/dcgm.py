"""DCGM output: ``dcgmi diag`` result tables, nvvs / nv-hostengine log lines, DCGM health messages
(``DCGM_FR_*`` codes, plain or inside JSON logs such as NVSentinel's) and dcgm-exporter samples.

Sample: ``| GPU Memory                | Pass - GPU: 1                                  |``
Each test result row of a diag table is a ``dcgm_diag`` event (a row with an empty test cell and
its own result, ``|   | Fail - GPU: 0 |``, is another result of the test above); rows whose test
cell is empty otherwise continue the text of the row above, hard-wrapped at the cell width. Lines
naming a ``DCGM_FR_*`` code are ``dcgm_health`` (code = Xid where one is named). Log lines
``2026-01-16 09:50:02.419 INFO  [pid:tid] message [file:line] [function]`` and other recognised
lines stay untyped (``log``); table borders and the header row are dropped.
"""
from __future__ import annotations

import io

import polars as pl

from observe import timeparse as tp
from observe.collector import Collector, Context, register
from observe.pci import gpu_ids
from observe.reader import read_lines
from observe.frames import attrs_json

LOG = (
    r"^(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s+(?P<level>[A-Z]+)\s+\[(?P<pid>\d+):(?P<tid>\d+)\]\s*"
    r"(?P<body>.*?)(?:\s*\[(?P<src>[^\[\]]+:\d+)\]\s*\[(?P<func>[^\[\]]+)\])?\s*$"
)
ROW = r"^\|(?P<c1>[^|]*)(?:\|(?P<c2>[^|]*))?\|\s*$"
BORDER = r"^\+[-=+]+\+\s*$"
HEAD_RULE = r"^\+=+\+"
SECTION = r"^[|+]-{3,}\s+(\S.*?)\s+-+\+-*[|+]\s*$"
RESULT = r"^(?P<res>Pass|Fail|Warn|Skip)(?:\s*-\s*(?:GPUs?:\s*)?(?P<gpus>\S.*))?$"
METRIC = r"^(?P<metric>DCGM_FI_\w+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)"
CHATTER = r"^(?:\$ )?dcgmi\b|^Successfully ran |^# (?:HELP|TYPE) DCGM_FI_"
UUID = r"(GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})"
LEVELS = {"TRACE": "debug", "VERB": "debug", "VERBOSE": "debug", "DEBUG": "debug", "INFO": "info",
          "WARN": "warning", "WARNING": "warning", "ERROR": "err", "CRITICAL": "crit", "CRIT": "crit",
          "FATAL": "crit"}
RESULT_SEVERITY = {"Fail": "err", "Warn": "warning"}
COLUMNS = ("ts", "node", "severity", "kind", "gpu", "code", "pid", "message", "raw", "attrs", "offset")


@register
class Dcgm(Collector):
    name = "dcgm"
    source = "gpu"
    whole_file = True
    sniff = (
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ +[A-Z]+ +\[\d+:\d+\] |DCGM_FR_|^DCGM_FI_|^[+|]-{3,}.*[+|]\s*$"
        r"|^\|[^|]*\|[^|]*\|\s*$"
    )

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Diag table rows, health messages and log lines of each whole-file record, by byte offset."""
        frames = []
        for raw, offset in records.select("raw", "offset").iter_rows():
            chunks = list(read_lines(io.BytesIO(raw.encode()), start=offset))
            if not chunks:  # an empty document
                continue
            lines = pl.concat(chunks)
            table = pl.col("raw").str.contains(BORDER) | pl.col("raw").str.contains(SECTION) | pl.col("raw").str.contains(ROW)
            frames += [_table(lines), _lines(lines.filter(~table, pl.col("raw").str.strip_chars() != ""), ctx)]
        if not frames:
            return records.with_columns(pl.lit(None, dtype=pl.String).alias("message"))
        out = pl.concat([f.select(COLUMNS) for f in frames], how="vertical_relaxed")
        return out.with_columns(pl.lit("gpu").alias("source"), pl.lit("dcgm").alias("program")).sort("offset")


def _table(lines: pl.DataFrame) -> pl.DataFrame:
    """One event per table row, wrapped continuation rows joined; borders, sections and header dropped."""
    raw = pl.col("raw")
    cells = raw.str.extract_groups(ROW)
    c2 = cells.struct.field("c2").str.strip_prefix(" ").str.strip_chars_end()
    lines = lines.with_columns(
        pl.when(~raw.str.contains(SECTION)).then(cells.struct.field("c1").str.strip_chars()).alias("c1"),
        c2.alias("c2"),
        (raw.str.strip_chars() == "").cum_sum().alias("tbl"),  # a blank line ends a table
    ).with_columns(
        pl.when(raw.str.contains(HEAD_RULE)).then(pl.lit("")).otherwise(raw.str.extract(SECTION, 1))
        .forward_fill().over("tbl").alias("section"),
        pl.col("c2").str.len_chars().max().over("tbl").alias("width"),
    )
    is_cont = (pl.col("c1") == "") & ~pl.col("c2").str.contains(RESULT) & pl.col("c1").shift(1).is_not_null()
    lines = lines.with_columns(is_cont.fill_null(False).alias("cont")).with_columns(
        (~pl.col("cont")).cum_sum().alias("rid"),
        pl.concat_str(
            pl.when(pl.col("cont") & (pl.col("c2").shift(1).str.len_chars() < pl.col("width")))
            .then(pl.lit(" ")).otherwise(pl.lit("")),
            pl.col("c2").fill_null(""),
        ).alias("piece"),
    )
    header = (pl.col("c1") == "Diagnostic") & (pl.col("c2") == "Result")
    rows = (
        lines.filter(pl.col("c1").is_not_null(), ~header)
        .group_by("rid", maintain_order=True)
        .agg(pl.col("offset").first(), raw.str.join("\n"), pl.col("c1").first(), pl.col("c2").first().alias("head"),
             pl.col("piece").str.join("").alias("text"), pl.col("section", "tbl").first())
    )
    result = pl.col("head").str.extract_groups(RESULT)
    res, gpus = result.struct.field("res"), result.struct.field("gpus")
    test = pl.when(res.is_not_null() & (pl.col("c1") != "")).then("c1").forward_fill().over("tbl")
    detail = pl.col("c1").is_in(["Warning", "Info"])
    text = pl.col("text").str.strip_chars()
    return rows.with_columns(
        pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("ts"),
        pl.lit(None, dtype=pl.String).alias("node"),
        pl.when(res.is_not_null()).then(pl.lit("dcgm_diag")).alias("kind"),
        pl.coalesce(res.replace_strict(RESULT_SEVERITY, default=None, return_dtype=pl.String),
                    pl.when(pl.col("c1") == "Warning").then(pl.lit("warning")), pl.lit("info")).alias("severity"),
        pl.when(res.is_not_null()).then(gpus.str.extract(r"^(\d+)$", 1)).otherwise(text.str.extract(r"^GPU (\d+)\b", 1))
        .alias("gpu"),
        pl.lit(None, dtype=pl.Int32).alias("code"),
        pl.lit(None, dtype=pl.Int64).alias("pid"),
        pl.when(res.is_not_null()).then(pl.coalesce(pl.format("{}: {}", test, text), text))
        .when(pl.col("c1") != "").then(pl.format("{}: {}", pl.col("c1"), text)).otherwise(text).alias("message"),
        attrs_json([
            ("test", pl.when(res.is_not_null() | detail).then(test)), ("result", res.str.to_lowercase()),
            ("gpus", gpus), ("section", pl.col("section")),
        ]).alias("attrs"),
    )


def _lines(lines: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Log lines, health messages (plain or JSON), dcgm-exporter samples; other lines unparsed."""
    raw = pl.col("raw")
    log = raw.str.extract_groups(LOG)
    body = log.struct.field("body")
    is_json = raw.str.contains(r"^\s*\{")

    def field(key: str) -> pl.Expr:
        return pl.when(is_json).then(raw.str.extract(rf'"{key}":\s*"((?:[^"\\]|\\.)*)"', 1))

    metric = raw.str.extract_groups(METRIC)
    labels = metric.struct.field("labels")
    code = raw.str.extract(r"(DCGM_FR_[A-Z0-9_]+)", 1)
    health = code.is_not_null()
    level = pl.coalesce(log.struct.field("level"), field("level")).str.to_uppercase()
    fatal = raw.str.contains(r'"isFatal":\s*true') | level.is_in(["ERROR", "CRITICAL", "CRIT", "FATAL"])
    xid = raw.str.extract(r"(?i)\bXID:?\s*(\d+)", 1)
    pci = raw.str.extract(r"\bPCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)", 1)
    gpu = pl.coalesce(
        gpu_ids(pci),
        raw.str.extract(r"\bGPU[: ]?(\d+)\b", 1),
    )
    known = body.is_not_null() | is_json | metric.struct.field("metric").is_not_null() | raw.str.contains(CHATTER)
    message = (
        pl.when(health).then(pl.coalesce(field("message"), body, raw.str.strip_chars()))
        .when(body.is_not_null()).then(body)
        .when(is_json).then(pl.coalesce(field("msg"), raw.str.strip_chars()))
        .when(known).then(raw.str.strip_chars())
    )
    return lines.with_columns(
        pl.coalesce(tp.iso(log.struct.field("ts"), ctx.tz), tp.iso(field("time"), ctx.tz)).alias("ts"),
        pl.coalesce(field("nodeName"), labels.str.extract(r'Hostname="([^"]+)"', 1)).alias("node"),
        pl.when(health).then(pl.when(fatal).then(pl.lit("err")).otherwise(pl.lit("warning")))
        .otherwise(level.replace_strict(LEVELS, default="info")).alias("severity"),
        pl.when(health).then(pl.lit("dcgm_health")).alias("kind"),
        pl.when(health).then(gpu).otherwise(labels.str.extract(r'\bgpu="(\d+)"', 1)).alias("gpu"),
        pl.when(health).then(xid.cast(pl.Int32, strict=False)).alias("code"),
        log.struct.field("pid").cast(pl.Int64, strict=False).alias("pid"),
        message.alias("message"),
        attrs_json([
            ("error_code", code), ("xid", pl.when(health).then(xid)), ("check", pl.coalesce(
                field("checkName"), raw.str.extract(r"^(\w+) Message=", 1))),
            ("agent", field("agent")), ("fatal", pl.when(health).then(fatal)),
            ("uuid", raw.str.extract(UUID, 1)), ("action", raw.str.extract(r"Recommended Action=(\w+)", 1)),
            ("tid", log.struct.field("tid")), ("src", log.struct.field("src")), ("func", log.struct.field("func")),
            ("metric", metric.struct.field("metric")), ("value", metric.struct.field("value")),
        ]).alias("attrs"),
    )
