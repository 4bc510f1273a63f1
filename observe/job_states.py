"""Slurm's job states as observe reads them: each set defined once, for the job index, explain, the
exporter and the epilog. source: SchedMD/slurm src/common/slurm_protocol_defs.c job_state_string
(17.02-24.11): the names sacct, scontrol and the jobcomp plugins print for the JOB_* states."""
from __future__ import annotations

# every end that is not a success: the runs `observe explain` looks at
BAD_ENDS = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "BOOT_FAIL", "DEADLINE", "PREEMPTED",
            "REQUEUED")
# the ends a fault of the job's nodes or software can explain (a hang runs into the time limit); a cancel, a
# deadline or a preemption was somebody's decision
FAULT_ENDS = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "TIMEOUT", "REQUEUED")
# the states in which the epilog looks for a fault to act on (at epilog time a requeue or a failed boot
# has not run the job's script on this node)
EPILOG_ACTS_ON = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")
