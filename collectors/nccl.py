"""Job output (``slurm-<job>.out``): NCCL debug lines, PyTorch distributed (ProcessGroupNCCL) messages
in the old ``[E ProcessGroupNCCL.cpp:NNN]`` and glog ``[rank3]:[E626 16:48:25.44 ...]`` styles,
Python tracebacks, and the srun/slurmstepd lines Slurm writes into the same file.

Sample: ``ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed``
Python ``logging`` lines (``[2026-11-08 19:02:39,710] [INFO] ...``) give their time and level. Free
text is kept as ``log``; the NCCL ``[N]`` device index goes to ``gpu``, ``[rankN]`` to ``rank``.
"""
from __future__ import annotations

import re

import polars as pl

from collectors.slurm import slurm_severity
from observe import timeparse as tp
from observe.collector import Collector, Context, register, split_header
from observe.rules import any_of

# ASCII classes: the regex engine runs them twice as fast as Unicode \w and \d
# What a launcher puts before each task's lines: srun --label's right-aligned ``12: `` (task id),
# torchrun's ``[default3]:`` / ``[rank3]:``
SRUN_LABEL = r"(?:\d{1,6}: )"
TORCHRUN_LABEL = r"\[(?:rank|default)\d+\]:"
TASK_LABEL = r"(?:" + TORCHRUN_LABEL + r"|\d{1,6}:)"  # either, without the space after it
NCCL = r"\s*(?:" + SRUN_LABEL + r"\s*|" + TORCHRUN_LABEL + r"\s?)?(?:\[(?P<tag>[0-9]+)\]\s*)?(?P<host>[A-Za-z0-9_.-]+):(?P<pid>[0-9]+):(?P<tid>[0-9]+) \[(?P<dev>[0-9]+)\] "
NCCL_LEVEL = r"NCCL (INFO|WARN|TRACE|ABORT|ERROR)"
TORCH = (
    r"\s*" + SRUN_LABEL + r"?(?:\[(?:rank|default)(?P<rank>\d+)\]:\s?)?(?P<pre>.*?)\[(?P<lvl>[EWIF])(?:(?P<md>\d{3,4}) "
    r"(?P<clock>\d\d:\d\d:\d\d\.\d+)(?: \d+)?)? ?(?P<src>[\w.]+\.(?:cpp|cc|h|hpp|py):\d+)\] "
)
RANK_PREFIX = r"^\s*(?:\[(?:rank|default))?(\d{1,6})(?:\]:\s?|: )"  # [rank3]: or srun's 3:
RANKED_INDENT = r"^(?:\s*" + TASK_LABEL + r"\s)?\s"
# torchrun's ChildFailedError prints each failure as an ``[i]:`` line and indented fields: the line
# continues the heading before it ("Root Cause (first observed failure):"), so one record holds both
FAILURE_INDEX = r"^\s*(?:" + TASK_LABEL + r"\s?)?\[\d+\]:\s*$"
RECORD_START = (
    r"^\s*(?:" + TASK_LABEL + r"\s?\S|(?:" + TORCHRUN_LABEL + r"\s?)?"
    r"(?:\[[EWIF][\d ]|\[\d+\]\s*[\w.-]+:\d+:\d+ |[\w.-]+:\d+:\d+ \[\d+\]))"
)
TORCH_LITERALS = ["ProcessGroup", "]:[", "[E ", "[W ", "[I ", "[F "]
GLOG_START = r"^\s*\[[EWIF]\d{3,4} "
PYLOG = (
    r"\s*" + SRUN_LABEL + r"?(?:\[(?:rank|default)(?P<rank>\d+)\]:\s?)?\[?(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]?"
    r"\s*"
)
PYLOG_FIXED = r"(\[?)(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)(\]?) "  # the first line's layout
PYLOG_START = r"^\s*" + SRUN_LABEL + r"?(?:\[(?:rank|default)\d+\]:\s?)?\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"
PY_LEVEL = r"(?-u:\b)(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?-u:\b)"
PY_LEVEL_LEAD = r"^\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?-u:\b)"
PY_SEVERITY = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning", "ERROR": "err",
               "CRITICAL": "crit", "FATAL": "crit"}
SLURM_LITERALS = ["slurmstepd", "srun:", "salloc:", "sbatch:", "slurmd:"]
SLURM_PROGRAM = r"^(srun|slurmstepd|salloc|sbatch|slurmd)(?:-\S+)?: "
MONTHS = {i: m for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
GLOG_SEVERITY = {"E": "err", "W": "warning", "I": "info", "F": "crit"}
NCCL_SEVERITY = {"WARN": "warning", "INFO": "info", "TRACE": "debug", "ABORT": "crit", "ERROR": "err"}


@register
class Nccl(Collector):
    name = "nccl"
    source = "nccl"
    priority = 5
    sniff = r"NCCL (?:INFO|WARN)|ProcessGroupNCCL|^\[rank\d+\]:"

    continuation_hint = RANKED_INDENT + "|" + FAILURE_INDEX

    def continuation(self, line: pl.Expr) -> pl.Expr:
        """Indented lines (tracebacks, wrapped messages) that do not start a record themselves, and
        ChildFailedError's ``[i]:`` lines."""
        return (line.str.contains(RANKED_INDENT) & ~line.str.contains(RECORD_START)) | line.str.contains(FAILURE_INDEX)

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """NCCL, PyTorch and Slurm client prefixes; any other text is a valid message.

        Cheap literal tests route each record to the one header regex that can match it.
        """
        raw = pl.col("raw")
        routes = [(_nccl, raw.str.contains("NCCL ", literal=True)),
                  (_torch, raw.str.contains(any_of(TORCH_LITERALS)) | raw.str.contains(GLOG_START)),
                  (_pylog, raw.str.contains(PYLOG_START)), (_slurm, raw.str.contains(any_of(SLURM_LITERALS)))]
        parts, rest = [], records
        for parser, test in routes:  # each test only on the records the ones before did not take
            hit = rest.select(test).to_series()
            if hit.any():
                parts.append(parser(rest.filter(hit), ctx))
                rest = rest.filter(~hit)
            if not rest.height:
                break
        if rest.height:
            parts.append(_text(rest, ctx))
        return pl.concat(parts, how="diagonal_relaxed")


def _rank(raw: pl.Expr) -> pl.Expr:
    return raw.str.extract(RANK_PREFIX, 1).cast(pl.Int32, strict=False)


def _text(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    raw = pl.col("raw")
    return part.select("raw", "offset", _rank(raw).alias("rank"),
                       raw.str.replace(RANK_PREFIX, "").str.strip_chars().alias("message"))


def _nccl(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, NCCL).with_columns(pl.col("msg").str.extract(NCCL_LEVEL, 1).alias("level"))
    ok = pl.col("level").is_not_null()
    if not part.height or g.get_column("level").null_count() == part.height:
        return _torch(part, ctx)
    return pl.concat([
        g.filter(ok).select(
            "raw", "offset", pl.col("host").alias("node"), pl.col("tag").cast(pl.Int32).alias("rank"),
            pl.col("dev").alias("gpu"), pl.col("pid").cast(pl.Int64).alias("pid"), pl.lit("nccl").alias("program"),
            pl.col("level").replace_strict(NCCL_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
            pl.col("msg").alias("message"),
        ),
        _torch(part.filter(g.get_column("level").is_null()), ctx),
    ], how="diagonal_relaxed")


def _torch(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, TORCH)
    month = pl.col("md").str.head(-2).cast(pl.Int32, strict=False).replace_strict(MONTHS, default=None, return_dtype=pl.String)
    ts = tp.yearless(month, pl.col("md").str.tail(2), pl.col("clock"), ctx.reference_time, ctx.tz)
    ok = g.get_column("msg").is_not_null()
    return pl.concat([
        g.filter(ok).select(
            "raw", "offset", ts.alias("ts"), pl.col("rank").cast(pl.Int32).alias("rank"), pl.lit("torch").alias("program"),
            pl.col("lvl").replace_strict(GLOG_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
            pl.format("[{}] {}", pl.col("src"), pl.col("msg")).alias("message"),
        ),
        _text(part.filter(~ok), ctx),
    ], how="diagonal_relaxed")


def _pylog(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Python ``logging`` lines: ``[2026-11-08 19:02:39,710] [INFO] [train.py:48] message``.

    Lines laid out like the first (stamp at the same place, then one space) are cut at fixed
    positions; the others go through the regex.
    """
    fixed, g = _pylog_fixed(part, ctx)
    if g.height:
        g = split_header(g, PYLOG).with_columns(tp.iso(pl.col("stamp"), ctx.tz).alias("ts"))
        g = pl.concat([fixed, g.select("raw", "offset", "ts", "rank", "msg")], how="diagonal_relaxed") if fixed.height else g
    else:
        g = fixed
    return g.select(
        "raw", "offset", "ts", pl.col("rank").cast(pl.Int32).alias("rank"),
        _py_level(g.get_column("msg")).replace_strict(PY_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
        pl.col("msg").alias("message"), pl.lit("python").alias("program"),
    )


def _py_level(msg: pl.Series) -> pl.Series:
    """The first level name in a message's first 60 characters; where the message starts with it
    (``[INFO] ...``, nearly always) an anchored regex finds it at once."""
    return tp.or_general(msg.str.extract(PY_LEVEL_LEAD, 1), msg,
                         lambda rows: msg.gather(rows).str.slice(0, 60).str.extract(PY_LEVEL, 1))


def _pylog_fixed(part: pl.DataFrame, ctx: Context) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(raw, offset, ts, rank, msg) of the lines whose stamp sits where the first line's does, and
    the other lines."""
    first = re.match(PYLOG_FIXED, part.item(0, "raw")) if part.height else None
    if first is None:
        return pl.DataFrame(), part
    at, length, head = first.start(2), len(first.group(2)), first.end()
    raw = part.get_column("raw")
    ts = tp.iso_plain(raw.str.slice(at, length), ctx.tz)
    ok = (ts.is_not_null() & (raw.str.slice(0, at) == first.group(1))
          & (raw.str.slice(at + length, head - at - length) == first.group(3) + " ")
          & (raw.str.slice(head, 1) != " ")).fill_null(False)
    fixed = part.with_columns(ts.alias("ts"), pl.lit(None, dtype=pl.String).alias("rank"),
                              raw.str.slice(head).alias("msg")).filter(ok)
    return fixed, part.filter(~ok)


def _slurm(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    text = _text(part, ctx)
    prog = text.get_column("message").str.extract(SLURM_PROGRAM, 1)
    ok = prog.is_not_null()
    slurm = text.filter(ok).with_columns(
        prog.filter(ok).alias("program"), pl.lit("slurm").alias("source"),
        slurm_severity(pl.col("message")).alias("severity"),
    )
    return pl.concat([slurm, text.filter(~ok)], how="diagonal_relaxed")
