"""What Slurm's messages say, wherever they are read (slurmctld/slurmd logs, syslog, job output): the
program that printed a line, its severity, the job and the single node it names.

A private module (discovery skips it): the slurm, syslog and nccl collectors share it.
"""
from __future__ import annotations

import polars as pl

# Every Slurm daemon and command prints its messages to stderr through log.c as "<argv0>: <level prefix><text>":
# source: SchedMD/slurm src/common/log.c (17.02-24.11) _log_msg: _log_printf(log, log->buf, stderr, "%s: %s%s\n",
#   log->argv0, pfx, buf) (argv0 the program's base name; slurmstepd names itself "slurmstepd-<node>" in some releases).
SLURM_PROGRAMS = (r"(?:slurm(?:ctld|d|stepd|dbd|restd|scriptd)|sackd|s(?:run|alloc|batch|control|acct|acctmgr|info|queue"
                  r"|cancel|attach|bcast|stat|share|prio|report|trigger|crontab))")
# srun, salloc and sbatch print through the same log.c: "srun: error: ..." (their messages in job output too)
# source: SchedMD/slurm src/common/log.c (17.02-24.11, _log_msg): pfx = "error: ", "fatal: ", "debug:  " (two
#   spaces, aligned with "debug2: " and "debug3: ").
LEVEL = r"^(?:" + SLURM_PROGRAMS + r"(?:-\S+)?: )?(error|fatal|warning|debug\d?|verbose|info): {1,2}"
SEVERITY = {"error": "err", "fatal": "crit", "warning": "warning", "verbose": "info", "info": "info"}
# source: SchedMD/slurm src/api/step_launch.c (_launch_handler): error("Task launch for %u.%u failed on node %s: %m",
#   job_id, step_id, node_name) (before 20.11), error("Task launch for %ps failed on node %s: %m", ...) (20.11+,
#   %ps prints "StepId=<job>.<step>"): the job, and the node the launch failed on.
# source: SchedMD/slurm src/slurmd/slurmstepd/mgr.c 20.11 (later releases: step->step_id.job_id): error("container_g_join
#   failed: %u", job->step_id.job_id): the job whose container the task could not join.
# source: SchedMD/slurm src/slurmd/slurmd/req.c (_rpc_launch_tasks): info("launch task %u.%u request from UID:%u GID:%u
#   HOST:%s PORT:%hu", ...) (before 20.11; "launch task %ps request from ..." since, %ps printing "StepId=%u.%u").
JOB = (r"(?:JobId=|StepId=|job_id=|JOB |STEP (?:FOR )?|job |step |Task launch for |launch task |container_g_join failed: )"
       r"(\d+(?:_\d+)?(?:\+\d+)?)")
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
# source: SchedMD/slurm src/slurmd/slurmstepd/req.c 17.02-24.11 (_rpc_signal_tasks/_kill_tasks): error("*** %s STEPD
#   TERMINATED ON %s AT %s DUE TO JOB NOT RUNNING ***", entity, job->node_name, time_str) and "... DUE TO JOB NOT ENDING
#   WITH SIGNALS ***" (entity "JOB %u", "STEP %u.%u", "EXTERN STEP FOR %u", "INTERACTIVE STEP FOR %u").
# source: SchedMD/slurm src/slurmctld/power_save.c: verbose("power_save: waking nodes %s", host) and
#   "suspending nodes %s", "rewaking nodes %s" (17.02-20.11); log_flag(POWER, "power_save: waking nodes %s",
#   host) (21.08+, log_flag prefixes "POWER: ")
# source: SchedMD/slurm src/slurmctld/node_mgr.c (15.08-24.11): info("%s: Node %s unexpectedly rebooted boot_time=%u last
#   response=%u", ...), verbose("Node %s rebooted %u secs ago"), error("Invalid state for node %s, was IDLE with %u running
#   jobs"), error("%s: Prolog or job env setup failure on node %s, draining the node") (15.08: "Prolog failure on node %s,
#   draining the node"), info("update_node: node %s state set to %s"), info("update_node: node %s reason set to: %s"),
#   info("drain_nodes: node %s state set to DRAIN"), error("update_node: node %s does not exist"), info("Invalid node state
#   transition requested for node %s from=%s to=%s"), info("powering down node %s"), info("Canceling REBOOT on node %s"),
#   error("Node %s has vanished from configuration"), error("Node %s Features(%s) differ from slurm.conf"),
#   debug("Still waiting for boot of node %s"), error("%s: %pJ node %s run_job_cnt underflow").
# source: SchedMD/slurm src/slurmctld/job_mgr.c (17.02-24.11): error("Orphan %ps reported on node %s") (20.02 "Orphan
#   JobId=%u %s reported on node %s", 17.02 "Orphan job %u.%u reported on node %s"), error("Registered PENDING %pJ %ps on
#   node %s"), error("Registered %pJ %ps on wrong node %s"), info("Batch %pJ missing from batch node %s (...)"),
#   info("Node %s rebooted, killing missing step %u.%u"), error("Removing failed node %s from %pJ"), error("%s: %pJ epilog
#   error on %s, draining the node"), debug("Killing %pJ on node %s"), debug("Aborting %pJ on node %s").
# source: SchedMD/slurm src/slurmctld/proc_req.c (17.02-23.02): error("slurmd error running JobId=%u on %s=%s: %s", ...,
#   "node(s)", node_name, ...), info("slurmd error running JobId=%u from %s=%s: %s"), error("Batch completion for JobId=%u
#   sent from wrong node (%s rather than %s). ...") (the sender).
# source: SchedMD/slurm src/slurmctld/agent.c (17.11-24.11): verbose("agent/is_node_resp: node:%s RPC:%s : %m"),
#   error("Epilog failure on host %s, setting DOWN"), error("We were unable to forward message to '%s'. ..."),
#   debug2("RPC to node %s failed, job not running").
# source: SchedMD/slurm src/slurmctld/power_save.c (18.08-23.11): info("node %s not resumed by ResumeTimeout(%d) - marking
#   down and power_save") (24.x: ", setting DOWN and POWERED_DOWN").
# source: SchedMD/slurm src/common/node_conf.c (20.02-23.x): error("%s: lookup failure for node \"%s\"", __func__, name)
#   (15.x-16.x: "find_node_record: lookup failure for %s"); node_name2bitmap's error("%s: invalid node specified: \"%s\"").
NODE = r"([^\s\[\],:'\"()]+)(?:[\s,:.'\")]|$)"
# (the words before the node, the words after it): each wording cited above
NODE_WORDINGS = [
    (r"\bNode ", r"(?:appears to have a different|has low |now responding|unexpectedly rebooted|rebooted|has vanished from"
                 r"|Weight\(|Features\(|comp_job_cnt underflow)"),
    (r"\bnode ", r"(?:returned to service|not resumed by ResumeTimeout|state set to|reason set to|does not exist"
                 r"|(?:run|sus|no_share|comp)_job_cnt)"),
    (r"(?:\bon|\bfor|\bof|\bfrom|powering (?:down|up)|Removing) (?:wrong |batch |DOWN |failed |unknown )?node ", ""),
    (r"_slurm_rpc_node_registration node=", ""),
    (r"Duplicated NodeHostName ", ""),
    (r"power_save: (?:re)?(?:waking|suspending) nodes ", ""),
    (r"node_did_resp (?:unable to find node )?", ""),
    (r"node_not_resp: node ", ""),
    (r"can't find address for host ", ""),
    (r"STEPD TERMINATED ON ", ""),
    (r"epilog error on ", r" ?draining the node"),
    (r"slurmd error running \S+ (?:on|from) node\(s\)=", ""),
    (r"sent from wrong node \(", ""),
    (r"agent/is_node_resp: node:", ""),
    (r"Epilog failure on host ", ""),
    (r"unable to forward message to '", ""),
    (r"RPC to node ", ""),
    (r"lookup failure for (?:node )?\"?", ""),
    (r"invalid node specified: \"", ""),
]
NODE_NAMED = "|".join(before + NODE.replace("(", f"(?P<n{i}>", 1) + after for i, (before, after) in enumerate(NODE_WORDINGS))
NODE_GROUPS = tuple(f"n{i}" for i in range(len(NODE_WORDINGS)))
# every wording holds one of these
NODE_WORDS = r"(?i:node)|power_save|address for host|TERMINATED ON|error on |on host |forward message"

def slurm_severity(message: pl.Expr) -> pl.Expr:
    """Severity from Slurm's ``error:``/``fatal:``/``debug:`` message prefix."""
    level = message.str.extract(LEVEL, 1)
    return pl.when(level.str.starts_with("debug")).then(pl.lit("debug")).otherwise(
        level.replace_strict(SEVERITY, default=None, return_dtype=pl.String))


def slurm_fields(df: pl.DataFrame) -> pl.DataFrame:
    """Slurm lines' severity from their ``error:``-style prefix, the job their message names (where
    the header gave none) and the node a slurmctld message is about (NODE_NAMED; before the host of a
    syslog header, which is the controller's): for this collector's lines and Slurm daemons' lines in syslog."""
    job = pl.col("job_id") if "job_id" in df.columns else pl.lit(None, dtype=pl.String)
    node = pl.col("node") if "node" in df.columns else pl.lit(None, dtype=pl.String)
    severity = pl.col("severity") if "severity" in df.columns else pl.lit(None, dtype=pl.String)
    return named_node(df.with_columns(
        pl.coalesce(slurm_severity(pl.col("message")), severity).alias("severity"),
        pl.coalesce(job, pl.col("message").str.extract(JOB, 1)).alias("job_id"),
        node.alias("node"),
    ))


def named_node(df: pl.DataFrame) -> pl.DataFrame:
    """``node`` set to the node a message names (NODE_NAMED), only on the rows that name one."""
    rows = df.select(pl.col("message").str.contains(NODE_WORDS).fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    named = df.select("message", "node").gather(rows).with_columns(
        pl.col("message").str.extract_groups(NODE_NAMED).alias("_n")).unnest("_n")
    fixed = named.select(pl.coalesce(*NODE_GROUPS, "node").alias("node"))
    return df.with_columns(df.get_column("node").clone().scatter(rows, fixed.get_column("node")))
