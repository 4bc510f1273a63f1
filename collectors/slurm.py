"""Slurm daemon logs (slurmctld, slurmd, slurmstepd), client messages (srun, salloc, sbatch) and node
reason strings (``Reason=... [user@time]``), plain or inside syslog.

Sample: ``[2022-05-27T10:42:30.509] sched: Allocate JobId=127441 NodeList=c014 #CPUs=2 Partition=gpu``
"""
from __future__ import annotations

import polars as pl

from collectors.syslog import Syslog
from observe import timeparse as tp
from observe.collector import Collector, Context, register, split_header

HEADER = (
    r"\s*(?:\[(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d)?)\] )?"
    r"(?:\[(?P<step>\d+(?:\.\w+)?)\] )?(?:(?P<prog>slurmctld|slurmd|slurmstepd|slurmdbd|srun|salloc|sbatch|scontrol)"
    r"(?:-\S+)?: )?"
)
LEVEL = r"^(?:(?:slurmctld|slurmd|slurmstepd|slurmdbd): )?(error|fatal|warning|debug\d?|verbose|info): "
SEVERITY = {"error": "err", "fatal": "crit", "warning": "warning", "verbose": "info", "info": "info"}
JOB = r"(?:JobId=|StepId=|job_id=|JOB |STEP |job |step )(\d+(?:_\d+)?(?:\+\d+)?)"
_SYSLOG = Syslog()


def slurm_severity(message: pl.Expr) -> pl.Expr:
    """Severity from Slurm's ``error:``/``fatal:``/``debug:`` message prefix."""
    level = message.str.extract(LEVEL, 1)
    return pl.when(level.str.starts_with("debug")).then(pl.lit("debug")).otherwise(
        level.replace_strict(SEVERITY, default=None, return_dtype=pl.String))


@register
class Slurm(Collector):
    name = "slurm"
    source = "slurm"
    priority = 30
    sniff = r"^\s*\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\] |^(?:slurmstepd|srun|salloc|sbatch): |^\s+Reason=|slurm(?:ctld|d)\[\d+\]: "

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Bracketed ISO stamps and client prefixes here; syslog-framed daemon lines via syslog."""
        framed = records.get_column("raw").str.contains(_SYSLOG.sniff)
        parts = []
        if framed.any():
            parts.append(_SYSLOG.parse(records.filter(framed), ctx))
        if not framed.all():
            parts.append(_native(records.filter(~framed), ctx))
        return slurm_fields(pl.concat(parts, how="diagonal_relaxed"))


def slurm_fields(df: pl.DataFrame) -> pl.DataFrame:
    """Slurm lines' severity from their ``error:``-style prefix and the job their message names
    (where the header gave none): for this collector's lines and Slurm daemons' lines in syslog."""
    job = pl.col("job_id") if "job_id" in df.columns else pl.lit(None, dtype=pl.String)
    return df.with_columns(
        pl.coalesce(slurm_severity(pl.col("message")), pl.col("severity")).alias("severity"),
        pl.coalesce(job, pl.col("message").str.extract(JOB, 1)).alias("job_id"),
    )


def _native(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(records, HEADER)
    known = pl.col("stamp").is_not_null() | pl.col("prog").is_not_null()
    return g.select(
        "raw", "offset", tp.iso(pl.col("stamp"), ctx.tz).alias("ts"), pl.col("prog").alias("program"),
        pl.when(known).then(pl.col("msg")).alias("message"),
        pl.col("step").str.extract(r"^(\d+)", 1).alias("job_id"), pl.lit("slurm").alias("source"),
        pl.lit(None, dtype=pl.String).alias("severity"),
    )
