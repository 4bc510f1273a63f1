"""The failure types the simulator injects: how often each happens in each mix (per day on a 16-node
cluster, and whether it needs a multi-node job), and the ground truth each records (the observe event
kind of its root cause and its category). The shapes themselves are in :mod:`observe.simulate.incidents`."""
from __future__ import annotations

# The default demo's incidents: (count per day on a 16-node cluster, needs a multi-node job).
DEMO_MIX = {"xid79": (1, True), "ib_link_down": (1, True), "oom": (1, True),
            "node_not_responding": (1, True), "app_xid": (2, False)}
# Scenario mode (generate(types=...)): every type, same meaning. xid_noise records nothing: Xid 13/31
# in a job that survives it (and Xid 43/45 when a cancelled job's processes are killed).
SCENARIOS = {"xid79": (0.8, True), "fatal_xid": (1.5, True), "ib_link_down": (1.5, True), "ib_switch": (0.8, True),
             "oom": (1.2, True), "node_not_responding": (1.2, True), "node_crash": (1, True), "hung_rank": (1.2, True),
             "app_xid": (1.0, False), "xid_noise": (4, False), "user_bug_all": (0.6, True), "silent_hang": (0.7, True),
             "prior_fault": (1.0, True), "logs_lost": (0.4, True)}
# The regression set (tests, the generator's own bench) and, for the evaluation on real lines, the mix of
# ../shared/notes/failure-mix.md (a shared Slurm GPU cluster: gpu 40%, network 12%, node 10%, host OOM 5%,
# software 15%, user 18%; one failure in ten or more left by the node's previous job): rates per day per 16 nodes.
REGRESSION = ("xid79", "fatal_xid", "ib_link_down", "ib_switch", "oom", "node_not_responding", "node_crash",
              "hung_rank", "app_xid", "xid_noise")
FLEET_MIX = {"xid79": 1.2, "fatal_xid": 1.6, "prior_fault": 0.9, "ib_link_down": 0.8, "ib_switch": 0.4,
             "node_not_responding": 0.5, "node_crash": 0.5, "oom": 0.5, "hung_rank": 0.8, "silent_hang": 0.7,
             "app_xid": 0.6, "user_bug_all": 0.6, "logs_lost": 0.4, "xid_noise": 4.0}
# Ground truth per incident type: (observe event kind of the root cause, category). user_error's kind
# is cuda_oom or python_exception (which error the job hit).
TYPES = {"xid79": ("gpu_xid", "gpu"), "fatal_xid": ("gpu_xid", "gpu"), "ib_link_down": ("ib_link_down", "network"),
         "ib_switch": ("ib_link_down", "network"), "oom": ("oom_kill", "memory"),
         "node_not_responding": ("slurm_node_not_responding", "node"), "node_crash": ("slurm_node_not_responding", "node"),
         "hung_rank": ("nccl_timeout", "software"), "app_xid": ("gpu_xid", "user"), "user_error": (None, "user"),
         "user_bug_all": ("python_exception", "user"), "silent_hang": (None, "software"), "prior_fault": ("gpu_xid", "gpu"),
         "logs_lost": ("gpu_xid", "gpu")}
FATAL_XIDS = (48, 64, 94, 95, 119, 120)  # fatal_xid's codes: ECC (48, 64, 94, 95) and GSP (119, 120)
HANG_XIDS = (74, 119, 120)  # of fatal_xid's real records: the GPU stops (NVLink, GSP); the others abort a CUDA call
APP_XIDS = (13, 31, 43)  # app_xid's real records
