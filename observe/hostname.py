"""This node's name, as Slurm and the store know it: what slurmd calls it (``SLURMD_NODENAME``, set
for prologs, epilogs and job steps), else the host name's first label (``gpu001.cluster.local`` ->
``gpu001``), which is what Slurm's NodeName usually is."""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def this_node(env: Mapping[str, str] = os.environ) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
