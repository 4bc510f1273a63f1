"""What a simulated run hands back: the files it wrote (with the collector that reads each) and the
failures it injected, the ground truth that tests and the accuracy benches check explain against."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class InputFile:
    """One file :func:`~observe.simulate.generate` wrote; ``format`` is the collector (``--source``) that reads it."""

    path: Path
    format: str
    node: str | None = None  # the host the file comes from (ctl1: the Slurm controller)
    job: str | None = None
    boot_time: datetime | None = None  # dmesg: the node's boot time (ground truth for checks)


@dataclass
class Manifest:
    """What :func:`~observe.simulate.generate` wrote and what it injected.

    ``incidents`` holds one dict per injected failure (one per failed job): ``type`` (xid79,
    ib_link_down, oom, app_xid, node_not_responding, user_error; in scenario mode also fatal_xid,
    ib_switch, hung_rank, node_crash), ``node`` (the culprit), ``nodes`` (every acceptable culprit:
    ``[node]``, or for ib_switch all of the job's nodes whose link went down), ``gpu`` (PCI bus id
    ``0000:3b:00`` or None), ``job_id``, ``ts`` (ISO 8601 UTC true time of the root event: when the
    fault began), the expected root cause: ``kind`` (the event kind observe's rules give it) and
    ``code`` (the Xid number, else None), and ``category`` (gpu, network, memory, node, software,
    user). Some types add keys: hung_rank ``rank``; ib_switch ``switch_nodes`` (every node of the
    leaf switch); hung_rank and node_crash ``evidence_ts`` (when the first line of ``kind`` appears);
    prior_fault ``run_ts`` (a time the failed run was running: ``ts`` is the fault, in the run before);
    logs_lost ``unsure_ok`` (the culprit's logs never arrived: an undetermined verdict is right too).
    """

    files: list[InputFile]
    bytes: int
    incidents: list[dict]
    start: datetime
    end: datetime
    skew: dict[str, float] = field(default_factory=dict)  # node -> its clock's offset in seconds (clock_skew_s)
