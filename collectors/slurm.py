"""Slurm daemon logs (slurmctld, slurmd, slurmstepd), client messages (srun, salloc, sbatch) and node
reason strings (``Reason=... [user@time]``), plain or inside syslog.

Sample: ``[2022-05-27T10:42:30.509] sched: Allocate JobId=127441 NodeList=c014 #CPUs=2 Partition=gpu``
"""
from __future__ import annotations

import polars as pl

from collectors._launchers import COMPOSE_PREFIX, SRUN_LABEL
from collectors._slurm_text import SLURM_PROGRAMS, slurm_fields
from collectors._syslog import SNIFF, parse_syslog
from observe import timeparse as tp
from observe.collector import Collector, Context, register, split_header

# Also srun --label's task number (right-aligned, "%*d: ") before a step's line, and submitit's logging
# layout in job output: source: facebookincubator/submitit submitit/core/logger.py (1.x) CONFIG formatter
#   "submitit_basic": "%(name)s %(levelname)s (%(asctime)s) - %(message)s" (asctime "%Y-%m-%d %H:%M:%S,%f"[:3]).
# source: SchedMD/slurm src/srun/srun_job.c / src/api/step_io.c (--label): the task id, padded to the widest, and ": ".
# Also `docker compose logs`' prefix for a containerised daemon's output (collectors/_launchers.py COMPOSE_PREFIX).
# The daemons' log file: source: SchedMD/slurm src/common/log.c (17.02-24.11) _log_msg: xlogfmtcat(&msgbuf, "[%M] %s%s%s",
#   log->fpfx, pfx, buf), %M by LogTimeFormat: iso8601_ms (the default) "%Y-%m-%dT%T.%3d", iso8601 "%Y-%m-%dT%T",
#   rfc5424(_ms) the same with "+hh:mm", short "%b %d %T", clock the clock() count, thread_id (_set_idbuf)
#   "%.15s.%-6d %5d %-*s %p" (ctime's "Mon dd HH:MM:SS", microseconds, pid, thread name, thread id).
STAMP = (r"\[(?:(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d)?)"
         r"|(?P<mon>[A-Z][a-z]{2}) (?P<day>[ \d]\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d{1,6})?) *(?:\d+ +\S* +\S+)?|\d+)\] ")
HEADER = (
    COMPOSE_PREFIX + r"?\s*" + SRUN_LABEL + r"?"
    r"(?:(?P<pyname>[A-Za-z_][\w.]*) (?P<pylvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"\((?P<pystamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\) - )?"
    r"(?P<known>" + STAMP + r")?"
    r"(?:\[(?P<step>\d+(?:\+\d+)?(?:\.\w+)?)\] )?(?:(?P<prog>" + SLURM_PROGRAMS + r")"
    r"(?:-\S+)?: )?"
)


@register
class Slurm(Collector):
    name = "slurm"
    source = "slurm"
    priority = 30
    sniff = r"^\s*\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\] |^(?:slurmstepd|srun|salloc|sbatch): |^\s+Reason=|slurm(?:ctld|d)\[\d+\]: "

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Bracketed ISO stamps and client prefixes here; syslog-framed daemon lines via syslog."""
        framed = records.get_column("raw").str.contains(SNIFF)
        parts = []
        if framed.any():
            parts.append(parse_syslog(records.filter(framed), ctx))
        if not framed.all():
            parts.append(_native(records.filter(~framed), ctx))
        return slurm_fields(pl.concat(parts, how="diagonal_relaxed"))


def _native(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(records, HEADER)
    known = pl.col("known").is_not_null() | pl.col("prog").is_not_null() | pl.col("pystamp").is_not_null()
    py_severity = pl.col("pylvl").replace_strict({"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "ERROR": "err",
                                                  "CRITICAL": "crit"}, default=None, return_dtype=pl.String)
    return g.select(
        "raw", "offset", pl.coalesce(tp.iso(pl.col("stamp"), ctx.tz), tp.iso(pl.col("pystamp"), ctx.tz),
                                     tp.yearless(pl.col("mon"), pl.col("day").str.strip_chars(), pl.col("clock"),
                                                 ctx.reference(), ctx.tz)).alias("ts"),
        pl.col("prog").alias("program"),
        pl.when(known).then(pl.col("msg")).otherwise(pl.col("raw")).alias("message"),
        pl.col("step").str.extract(r"^(\d+)", 1).alias("job_id"), pl.lit("slurm").alias("source"),
        py_severity.alias("severity"),
    )
