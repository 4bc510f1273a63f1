"""Slurm daemon logs (slurmctld, slurmd, slurmstepd), client messages (srun, salloc, sbatch) and node
reason strings (``Reason=... [user@time]``), plain or inside syslog.

Sample: ``[2022-05-27T10:42:30.509] sched: Allocate JobId=127441 NodeList=c014 #CPUs=2 Partition=gpu``
"""
from __future__ import annotations

import polars as pl

from collectors.syslog import Syslog
from observe import timeparse as tp
from observe.collector import Collector, Context, register, split_header

# Also srun --label's task number (right-aligned, "%*d: ") before a step's line, and submitit's logging
# layout in job output: source: facebookincubator/submitit submitit/core/logger.py (1.x) CONFIG formatter
#   "submitit_basic": "%(name)s %(levelname)s (%(asctime)s) - %(message)s" (asctime "%Y-%m-%d %H:%M:%S,%f"[:3]).
# source: SchedMD/slurm src/srun/srun_job.c / src/api/step_io.c (--label): the task id, padded to the widest, and ": ".
# Also `docker compose logs`' prefix for a containerised daemon's output (the service's container name, not a host):
# source: docker/compose cmd/formatter/logs.go (v2) presenter.setPrefix: fmt.Sprintf("%-"+strconv.Itoa(width)+"s | ",
#   p.name) (width: the longest name plus one, so at least one space before "| "); colour codes only on a terminal.
HEADER = (
    r"(?:[A-Za-z0-9][\w.-]* +\| )?\s*(?:\d{1,6}: )?"
    r"(?:(?P<pyname>[A-Za-z_][\w.]*) (?P<pylvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"\((?P<pystamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\) - )?"
    r"(?:\[(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d)?)\] )?"
    r"(?:\[(?P<step>\d+(?:\.\w+)?)\] )?(?:(?P<prog>slurmctld|slurmd|slurmstepd|slurmdbd|srun|salloc|sbatch|scontrol)"
    r"(?:-\S+)?: )?"
)
# srun, salloc and sbatch print through the same log.c: "srun: error: ..." (their messages in job output too)
# source: SchedMD/slurm src/common/log.c (17.02-24.11, _log_msg): pfx = "error: ", "fatal: ", "debug:  " (two
#   spaces, aligned with "debug2: " and "debug3: ").
LEVEL = r"^(?:(?:slurmctld|slurmd|slurmstepd|slurmdbd|srun|salloc|sbatch): )?(error|fatal|warning|debug\d?|verbose|info): {1,2}"
SEVERITY = {"error": "err", "fatal": "crit", "warning": "warning", "verbose": "info", "info": "info"}
# source: SchedMD/slurm src/api/step_launch.c (_launch_handler): error("Task launch for %u.%u failed on node %s: %m",
#   job_id, step_id, node_name) (before 20.11), error("Task launch for %ps failed on node %s: %m", ...) (20.11+,
#   %ps prints "StepId=<job>.<step>"): the job, and the node the launch failed on.
# source: SchedMD/slurm src/slurmd/slurmstepd/mgr.c 20.11 (later releases: step->step_id.job_id): error("container_g_join
#   failed: %u", job->step_id.job_id): the job whose container the task could not join.
JOB = r"(?:JobId=|StepId=|job_id=|JOB |STEP |job |step |Task launch for |container_g_join failed: )(\d+(?:_\d+)?(?:\+\d+)?)"
# slurmctld messages about one node, which name it (that node is the event's node, not the host that
# logged it). Only a single node name: a hostlist (``gpu[01-04]``, ``a,b``) names several.
# source: SchedMD/slurm src/slurmctld/node_mgr.c 17.02-24.11: error("Node %s appears to have a different
#   slurm.conf than the slurmctld. ...", ...), error("Node %s has low socket*core*thread count (%d < %d)", ...),
#   error("Node %s has low cpu count (%u < %u)", ...), error("Node %s has low real_memory size (...)", ...),
#   info("Node %s now responding", node_ptr->name), info("node %s returned to service", ...),
#   debug2("node_did_resp %s", name), error("node_did_resp unable to find node %s", name),
#   info("node_not_resp: node %s responded since msg sent", ...)
# source: SchedMD/slurm src/slurmctld/proc_req.c 17.02-24.11: error("_slurm_rpc_node_registration node=%s: %s",
#   node_reg_stat_msg->node_name, slurm_strerror(error_code))
# source: SchedMD/slurm src/common/read_config.c 17.02-24.11: error("Duplicated NodeHostName %s in the config file", ...)
# source: SchedMD/slurm src/common/forward.c 20.02-24.11 (fwd_tree_thread, _forward_thread): error("%s: can't find address
#   for host %s, check slurm.conf", __func__, name) (srun's and the daemons' message forwarding: the node it names)
# source: SchedMD/slurm src/slurmctld/power_save.c: verbose("power_save: waking nodes %s", host) and
#   "suspending nodes %s", "rewaking nodes %s" (17.02-20.11); log_flag(POWER, "power_save: waking nodes %s",
#   host) (21.08+, log_flag prefixes "POWER: ")
NODE = r"([^\s\[\],:]+)(?:[\s,:.]|$)"
NODE_NAMED = (
    r"^(?:(?:slurmctld|srun): )?(?:(?:error|warning|verbose|info|debug\d?): {1,2})?(?:POWER: )?(?:"
    r"Node " + NODE.replace("(", "(?P<n1>", 1) + r"(?:appears to have a different slurm\.conf|has low |now responding)|"
    r"node " + NODE.replace("(", "(?P<n2>", 1) + r"returned to service|"
    r"_slurm_rpc_node_registration node=(?P<n3>[^\s\[\],:]+): |"
    r"Duplicated NodeHostName " + NODE.replace("(", "(?P<n4>", 1) + r"|"
    r"power_save: (?:re)?(?:waking|suspending) nodes " + NODE.replace("(", "(?P<n5>", 1) + r"|"
    r"node_did_resp (?:unable to find node )?" + NODE.replace("(", "(?P<n6>", 1) + r"|"
    r"node_not_resp: node " + NODE.replace("(", "(?P<n7>", 1) + r"|"
    r"Task launch for \S+ failed on node " + NODE.replace("(", "(?P<n8>", 1) + r"|"
    r"\w+: can't find address for host " + NODE.replace("(", "(?P<n9>", 1) + r")"
)
_NODE_GROUPS = ("n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9")
_NODE_WORDS = r"[Nn]ode|NodeHostName|power_save|address for host"  # every NODE_NAMED wording holds one of these
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
    """Slurm lines' severity from their ``error:``-style prefix, the job their message names (where
    the header gave none) and the node a slurmctld message is about (NODE_NAMED; before the host of a
    syslog header, which is the controller's): for this collector's lines and Slurm daemons' lines in syslog."""
    job = pl.col("job_id") if "job_id" in df.columns else pl.lit(None, dtype=pl.String)
    node = pl.col("node") if "node" in df.columns else pl.lit(None, dtype=pl.String)
    return named_node(df.with_columns(
        pl.coalesce(slurm_severity(pl.col("message")), pl.col("severity")).alias("severity"),
        pl.coalesce(job, pl.col("message").str.extract(JOB, 1)).alias("job_id"),
        node.alias("node"),
    ))


def named_node(df: pl.DataFrame) -> pl.DataFrame:
    """``node`` set to the node a message names (NODE_NAMED), only on the rows that name one."""
    rows = df.select(pl.col("message").str.contains(_NODE_WORDS).fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    named = df.select("message", "node").gather(rows).with_columns(
        pl.col("message").str.extract_groups(NODE_NAMED).alias("_n")).unnest("_n")
    fixed = named.select(pl.coalesce(*_NODE_GROUPS, "node").alias("node"))
    return df.with_columns(df.get_column("node").clone().scatter(rows, fixed.get_column("node")))


def _native(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(records, HEADER)
    known = pl.col("stamp").is_not_null() | pl.col("prog").is_not_null() | pl.col("pystamp").is_not_null()
    py_severity = pl.col("pylvl").replace_strict({"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "ERROR": "err",
                                                  "CRITICAL": "crit"}, default=None, return_dtype=pl.String)
    return g.select(
        "raw", "offset", pl.coalesce(tp.iso(pl.col("stamp"), ctx.tz), tp.iso(pl.col("pystamp"), ctx.tz)).alias("ts"),
        pl.col("prog").alias("program"),
        pl.when(known).then(pl.col("msg")).otherwise(pl.col("raw")).alias("message"),
        pl.col("step").str.extract(r"^(\d+)", 1).alias("job_id"), pl.lit("slurm").alias("source"),
        py_severity.alias("severity"),
    )
