"""Slurm job records: ``jobcomp/filetxt`` lines and ``sacct --parsable2`` output (header line first).

Sample: ``JobId=127441 UserId=alice(1001) GroupId=alice(1001) Name=train JobState=FAILED Partition=gpu
TimeLimit=1440 StartTime=2026-11-22T10:00:00 EndTime=2026-11-22T11:00:00 NodeList=gpu[001-004] ...
ExitCode=1:0``. Each record gives ``slurm_job_end`` (at its end, code = exit status) and
``slurm_job_start`` (at its start, provenance offset + 1); attrs carry state, nodes, start, end.
Step records (``5001.batch``) give ``slurm_step_end`` with attrs.step.
"""
from __future__ import annotations

import polars as pl

from observe import timeparse as tp
from observe.collector import Collector, Context, register
from observe.frames import attrs_json

JOBCOMP_KEYS = {
    "job_id": "JobId", "user": "UserId", "name": "Name", "state": "JobState", "partition": "Partition",
    "start": "StartTime", "end": "EndTime", "nodes": "NodeList", "exit": "ExitCode",
}
SACCT_KEYS = {
    "job_id": "JobID", "user": "User", "name": "JobName", "state": "State", "partition": "Partition",
    "start": "Start", "end": "End", "nodes": "NodeList", "exit": "ExitCode",
}
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _jobcomp(records: pl.DataFrame) -> pl.DataFrame:
    raw = pl.col("raw")
    cols = [
        raw.str.extract(rf"(?:^| ){key}=(.*?)(?: \w+=|$)", 1).alias(name) for name, key in JOBCOMP_KEYS.items()
    ]
    return records.with_columns(cols).with_columns(pl.col("user").str.replace(r"\(\d+\)$", ""))


def _sacct(records: pl.DataFrame, header: str) -> pl.DataFrame:
    names = header.strip().split("|")
    fields = pl.col("raw").str.split("|")
    cols = [
        (fields.list.get(names.index(key), null_on_oob=True) if key in names else pl.lit(None, dtype=pl.String)).alias(name)
        for name, key in SACCT_KEYS.items()
    ]
    is_header = pl.col("raw").str.strip_chars() == header.strip()
    return records.with_columns(cols).with_columns(
        pl.when(~is_header).then(pl.col(name)).alias(name) for name in SACCT_KEYS)


@register
class SlurmJobs(Collector):
    name = "slurm_jobs"
    source = "slurm"
    priority = 40
    batchable = False  # sacct output is read with its own header line
    sniff = r"^JobId=\d\S* UserId=|^JobID\||^\d+(?:_\d+)?(?:\+\d+)?(?:\.\w+)?\|"  # sacct rows too

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
