"""Slurm job records: ``jobcomp/filetxt`` lines and ``sacct --parsable2`` output (header line first).

Sample: ``JobId=127441 UserId=alice(1001) GroupId=alice(1001) Name=train JobState=FAILED Partition=gpu
TimeLimit=1440 StartTime=2026-11-22T10:00:00 EndTime=2026-11-22T11:00:00 NodeList=gpu[001-004] ...
ExitCode=1:0``. Each record gives ``slurm_job_end`` (at its end, code = exit status) and
``slurm_job_start`` (at its start, provenance offset + 1); attrs carry state, nodes, start, end.
Step records (``5001.batch``) give ``slurm_step_end`` with attrs.step.
"""
from __future__ import annotations

import re

import numpy as np
import polars as pl

from observe import timeparse as tp
from observe.collector import Collector, Context, register
from observe.frames import attrs_json

# source: SchedMD/slurm src/plugins/jobcomp/filetxt/jobcomp_filetxt.c JOB_FORMAT "JobId=%lu UserId=%s(%lu)
#   GroupId=%s(%lu) Name=%s JobState=%s Partition=%s TimeLimit=%s StartTime=%s EndTime=%s NodeList=%s NodeCnt=%u
#   ProcCnt=%u WorkDir=%s ReservationName=%s Tres=%s Account=%s QOS=%s WcKey=%s Cluster=%s SubmitTime=%s
#   EligibleTime=%s%s%s DerivedExitCode=%s ExitCode=%s \n" (Gres= for Tres= before 15.08). Name, WorkDir and
#   WcKey are the user's own text, printed as they are, spaces, "Key=" and newlines included: a record is read
#   from its fixed head, the run of fields Slurm makes between Name and WorkDir (which must appear exactly once:
#   a name or directory holding a copy makes it two readings, and the record is left unparsed) and its tail.
JOBCOMP_HEAD = r"^JobId=(?P<job_id>\d+) UserId=(?P<user>[^\s(]*)\(\d+\) GroupId=[^\s(]*\(\d+\) Name="
JOBCOMP_RUN = (r" JobState=(?P<state>\S+) Partition=(?P<partition>\S*) TimeLimit=\S+ StartTime=(?P<start>\S+)"
               r" EndTime=(?P<end>\S+) NodeList=(?P<nodes>\S*) NodeCnt=")
JOBCOMP_TAIL = r"(?:DerivedExitCode=\S+ )?ExitCode=(?P<exit>\d+:\d+) ?$"
# Tres= is the job's allocated TRES (job_ptr->tres_fmt_alloc_str: "cpu=384,mem=4000000M,node=4,billing=384,
# gres/gpu=32"), between WorkDir and WcKey (the user's text): read only where the record holds it once
JOBCOMP_TRES = r" Tres=(\S*) Account="
GPUS = r"(?:^|,)gres/gpu=(\d+)"  # the job's GPUs, any type (typed counts, gres/gpu:h100=N, come beside it)
SACCT_KEYS = {
    "job_id": "JobID", "user": "User", "name": "JobName", "state": "State", "partition": "Partition",
    "start": "Start", "end": "End", "nodes": "NodeList", "exit": "ExitCode", "tres": "AllocTRES",
}
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _jobcomp(records: pl.DataFrame) -> pl.DataFrame:
    raw = pl.col("raw")
    one = raw.str.count_matches(re.sub(r"\(\?P<\w+>", "(?:", JOBCOMP_RUN)) == 1
    g = records.with_columns(
        raw.str.extract_groups(JOBCOMP_HEAD).alias("_h"), raw.str.extract_groups(JOBCOMP_RUN).alias("_r"),
        raw.str.extract_groups(JOBCOMP_TAIL).alias("_t"),
        raw.str.extract("(?s)Name=(.*?)" + re.sub(r"\(\?P<\w+>", "(?:", JOBCOMP_RUN), 1).alias("name"),
        pl.when(raw.str.count_matches(JOBCOMP_TRES) == 1).then(raw.str.extract(JOBCOMP_TRES, 1)).alias("tres"),
    ).unnest("_h", "_r", "_t")
    whole = one & pl.col("job_id").is_not_null() & pl.col("exit").is_not_null()
    return g.with_columns(pl.when(whole).then(pl.col(n)).alias(n) for n in SACCT_KEYS)


def _record_open(line: pl.Expr) -> pl.Expr:
    """True for a line after a jobcomp record's head whose tail has not come yet: the record goes on
    (a job name holding newlines); a line with a tail ends a record, a head starts one."""
    state = pl.when(line.str.contains(r"ExitCode=\d+:\d+ ?$")).then(pl.lit(1)).when(
        line.str.starts_with("JobId=")).then(pl.lit(0))
    return (state.shift(1).forward_fill() == 0).fill_null(False)


# sacct --parsable2 prints each field as it is, "|" between them (source: SchedMD/slurm src/sacct/print.c,
#   print_fields_str with fields_delimiter "|"): a "|" in a user's text adds a field, a newline ends the row
#   early. With one such column in the header a row of extra fields is still read (the columns before it
#   from the left, those after from the right); any other row not of the header's width, and the row after
#   a short one (a newline's rest), is left unparsed.
SACCT_FREE_TEXT = {"JobName", "WorkDir", "Comment", "AdminComment", "SystemComment", "SubmitLine", "WCKey",
                   "Constraints", "Reason"}


def _sacct(records: pl.DataFrame, header: str) -> pl.DataFrame:
    names = header.strip().split("|")
    free = [i for i, n in enumerate(names) if n in SACCT_FREE_TEXT]
    fields = pl.col("_f")
    width = pl.col("_width")

    def column(i: int) -> pl.Expr:
        if len(free) == 1 and i > free[0]:  # counted from the right where the free text took more fields
            return fields.list.reverse().list.get(len(names) - 1 - i, null_on_oob=True)
        if len(free) == 1 and i == free[0]:  # all between the fields before it and those after
            return pl.col("raw").str.extract(rf"^(?:[^|]*\|){{{i}}}(.*?)(?:\|[^|]*){{{len(names) - i - 1}}}$", 1)
        return fields.list.get(i, null_on_oob=True)

    readable = ((width == 0) | ((width > 0) & (len(free) == 1))) & ~pl.col("_after_short") \
        & (pl.col("raw").str.strip_chars() != header.strip())
    g = records.with_columns(pl.col("raw").str.split("|").alias("_f")).with_columns(
        (pl.col("_f").list.len().cast(pl.Int64) - len(names)).alias("_width"))
    short = g.get_column("_width").to_numpy() < 0  # (polars 2.1 panicked filtering strings made under a
    g = g.with_columns(pl.Series("_after_short", np.concatenate(([False], short[:-1]))))  # shift's predicate)
    g = g.with_columns(*[(column(names.index(key)) if key in names else pl.lit(None, dtype=pl.String)).alias(name)
                         for name, key in SACCT_KEYS.items()], readable.alias("_ok"))
    return g.with_columns(pl.when("_ok").then(pl.col(name)).alias(name) for name in SACCT_KEYS).drop("_f", "_width", "_after_short", "_ok")


@register
class SlurmJobs(Collector):
    name = "slurm_jobs"
    source = "slurm"
    priority = 40
    batchable = False  # sacct output is read with its own header line
    sniff = r"^JobId=\d\S* UserId=|^JobID\||^\d+(?:_\d+)?(?:\+\d+)?(?:\.\w+)?\|"  # sacct rows too

    def continuation(self, line: pl.Expr) -> pl.Expr:
        return _record_open(line)

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """One end and one start event per job record (a job not started or not ended, as sacct lists
        it with ``Unknown``, gives neither); other lines are left unparsed."""
        header = ctx.header or ""
        sacct = header.startswith("JobID|") or "|JobID|" in header
        g = _sacct(records, header) if sacct else _jobcomp(records)
        g = g.with_columns(
            [pl.when(pl.col(n) != "").then(pl.col(n)).alias(n) for n in SACCT_KEYS],
        ).with_columns(
            pl.col("job_id").str.extract(r"^([^.]+)", 1).alias("job_id"),
            pl.col("job_id").str.extract(r"\.(.+)$", 1).alias("step"),
        )
        step = pl.col("step").is_not_null()
        state = pl.col("state").str.extract(r"^(\w+)", 1)
        exit_code = pl.col("exit").str.extract(r"^(\d+)", 1).cast(pl.Int32, strict=False)
        signal = pl.col("exit").str.extract(r":(\d+)$", 1)
        attrs = attrs_json([
            ("state", state), ("nodes", pl.col("nodes")), ("start", pl.col("start")), ("end", pl.col("end")),
            ("partition", pl.col("partition")), ("user", pl.col("user")), ("name", pl.col("name")),
            ("signal", pl.when(signal != "0").then(signal)), ("step", pl.col("step")),
            ("gpus", pl.col("tres").str.extract(GPUS, 1)),
        ])
        ok = pl.col("job_id").is_not_null()
        ended, started = tp.iso(pl.col("end"), ctx.tz), tp.iso(pl.col("start"), ctx.tz)
        severity = pl.when(state.is_in(FAILED_STATES)).then(pl.lit("err")).otherwise(pl.lit("info"))
        common = [
            "raw", pl.col("job_id"), attrs.alias("attrs"), pl.lit("slurm").alias("source"),
            pl.lit("slurmctld").alias("program"),
        ]
        end = g.select(
            *common, "offset", ended.alias("ts"),
            pl.when(ok & step & ended.is_not_null()).then(pl.lit("slurm_step_end"))
            .when(ok & ended.is_not_null()).then(pl.lit("slurm_job_end")).alias("kind"),
            severity.alias("severity"), exit_code.alias("code"),
            pl.when(ok).then(pl.format("job {} {} exit {}", pl.col("job_id"), state, pl.col("exit")))
            .when(pl.col("raw") == header).then(pl.col("raw")).alias("message"),
        )
        start = g.filter(ok & ~step & started.is_not_null()).select(
            *common, (pl.col("offset") + 1).alias("offset"), started.alias("ts"),
            pl.lit("slurm_job_start").alias("kind"), pl.lit("info").alias("severity"),
            pl.format("job {} started on {}", pl.col("job_id"), pl.col("nodes")).alias("message"),
        )
        return pl.concat([end, start], how="diagonal_relaxed")
