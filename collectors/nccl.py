"""Job output (``slurm-<job>.out``): NCCL debug lines, PyTorch distributed (ProcessGroupNCCL) messages
in the old ``[E ProcessGroupNCCL.cpp:NNN]`` and glog ``[rank3]:[E626 16:48:25.44 ...]`` styles,
Python tracebacks, and the srun/slurmstepd lines Slurm writes into the same file.

Sample: ``ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed``
Free text is kept as ``log``; the NCCL ``[N]`` device index goes to ``gpu``, ``[rankN]`` to ``rank``.
"""
from __future__ import annotations

import polars as pl

from collectors.slurm import HEADER as SLURM_HEADER
from collectors.slurm import slurm_severity
from observe import timeparse as tp
from observe.collector import Collector, Context, register

NCCL = (
    r"(?s)^\s*(?:\[(?P<tag>\d+)\]\s*)?(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?P<msg>.*?NCCL (?P<level>INFO|WARN|TRACE|ABORT|ERROR).*)$"
)
TORCH = (
    r"(?s)^\s*(?:\[(?:rank|default)(?P<rank>\d+)\]:\s?)?(?P<pre>.*?)\[(?P<lvl>[EWIF])(?:(?P<md>\d{3,4}) "
    r"(?P<clock>\d\d:\d\d:\d\d\.\d+)(?: \d+)?)? ?(?P<src>[\w.]+\.(?:cpp|cc|h|hpp|py):\d+)\] (?P<msg>.*)$"
)
RANK_PREFIX = r"^\s*\[(?:rank|default)(\d+)\]:\s?"
RECORD_START = r"^\s*(?:\[(?:rank|default)\d+\]|\[[EWIF][\d ]|\[\d+\]\s*[\w.-]+:\d+:\d+ |[\w.-]+:\d+:\d+ \[\d+\])"
GLOG_SEVERITY = {"E": "err", "W": "warning", "I": "info", "F": "crit"}
NCCL_SEVERITY = {"WARN": "warning", "INFO": "info", "TRACE": "debug", "ABORT": "crit", "ERROR": "err"}


@register
class Nccl(Collector):
    name = "nccl"
    source = "nccl"
    priority = 5
    sniff = r"NCCL (?:INFO|WARN)|ProcessGroupNCCL|^\[rank\d+\]:"

    def continuation(self, line: pl.Expr) -> pl.Expr:
        """Indented lines (tracebacks, wrapped messages) that do not start a record themselves."""
        return line.str.contains(r"^\s") & ~line.str.contains(RECORD_START)

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """NCCL, PyTorch and Slurm client prefixes; any other text is a valid message."""
        raw = pl.col("raw")
        g = records.with_columns(
            raw.str.extract_groups(NCCL).alias("_n"),
            raw.str.extract_groups(TORCH).alias("_t"),
            raw.str.replace(RANK_PREFIX, "").str.extract_groups(SLURM_HEADER).struct.field("prog").alias("_prog"),
        ).unnest("_n", "_t", separator="_")
        torch_ts = tp.yearless(
            pl.col("_t_md").str.head(-2).cast(pl.Int32, strict=False).replace_strict(
                {i: m for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)},
                default=None, return_dtype=pl.String),
            pl.col("_t_md").str.tail(2), pl.col("_t_clock"), ctx.reference_time, ctx.tz,
        )
        nccl = pl.col("_n_msg").is_not_null()
        torch = pl.col("_t_msg").is_not_null()
        slurm = pl.col("_prog").is_not_null()
        rank = pl.coalesce(pl.col("_t_rank"), raw.str.extract(RANK_PREFIX, 1), pl.col("_n_tag"))
        message = (
            pl.when(nccl).then(pl.col("_n_msg"))
            .when(torch).then(pl.format("[{}] {}", pl.col("_t_src"), pl.col("_t_msg")))
            .otherwise(raw.str.replace(RANK_PREFIX, "").str.strip_chars())
        )
        severity = (
            pl.when(nccl).then(pl.col("_n_level").replace_strict(NCCL_SEVERITY, default=None, return_dtype=pl.String))
            .when(torch).then(pl.col("_t_lvl").replace_strict(GLOG_SEVERITY, default=None, return_dtype=pl.String))
            .when(slurm).then(slurm_severity(message))
        )
        return g.select(
            "raw", "offset", torch_ts.alias("ts"),
            pl.when(nccl).then(pl.col("_n_host")).alias("node"),
            pl.when(slurm).then(pl.lit("slurm")).otherwise(pl.lit("nccl")).alias("source"),
            severity.alias("severity"), rank.cast(pl.Int32, strict=False).alias("rank"),
            pl.when(nccl).then(pl.col("_n_dev")).alias("gpu"),
            pl.coalesce(pl.when(nccl).then(pl.col("_n_pid")), pl.lit(None, dtype=pl.String)).cast(pl.Int64, strict=False).alias("pid"),
            pl.when(nccl).then(pl.lit("nccl")).when(torch).then(pl.lit("torch")).otherwise(pl.col("_prog")).alias("program"),
            message.alias("message"),
        )
