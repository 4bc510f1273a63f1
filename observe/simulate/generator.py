"""The simulator's entry points: :func:`generate` runs one cluster hour by hour and writes its logs;
:func:`scenarios` runs many small ones with failures of known root cause, for measuring explain.

Layout under ``out_dir`` (format names are the collectors' ``--source`` names)::

    slurm/slurmctld.log         slurm      [2026-11-22T12:26:42.994] sched: Allocate JobId=...
    slurm/jobcomp.log           slurm_jobs JobId=127441 UserId=alice(1001) ... ExitCode=1:0
    nodes/<node>/syslog         syslog     Nov 22 10:00:01 gpu001 CRON[4242]: ...
    nodes/<node>/dmesg          kernel     [ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, ...
    nodes/<node>/nvidia-smi.xml nvidia_smi nvidia-smi -q -x at the end of the run
    jobs/slurm-<jobid>.out      nccl       NCCL INFO/WARN, training progress, watchdog, tracebacks

Incidents (a few a day, each tied to a running job): Xid 79 (GPU fallen off the bus, then watchdog
timeouts on every rank and a drained node), InfiniBand link down (NCCL network errors), host OOM
kill, application Xid 13/31, a node not responding (job requeued), and application errors.

The simulation advances an hour at a time: Slurm events (arrivals, starts, ends, incidents) run in
time order and leave timed lines in an outbox; then each file gets that hour's background noise
(drawn in bulk with numpy) merged with the outbox's due lines, appended with buffered writes.
Memory is bounded by the jobs running, not by the length of the run.

Scenario mode (``types=``, see :data:`~observe.simulate.catalog.SCENARIOS` and :func:`scenarios`)
injects failures with a known root cause for measuring root-cause analysis: besides the types above,
fatal Xids 48/64/94/95/119/120, an InfiniBand leaf switch taking down the links of 4-8 neighbouring
nodes, a hung rank that only the PyTorch watchdog's sequence numbers give away, a node that crashes
(its own logs just stop), and application Xids that do not fail their job (noise). ``clock_skew_s``
gives each node a fixed clock offset. Lines of several scenarios are built from the real lines in
tests/fixtures/corpus/real (:data:`~observe.simulate.formats.REAL`), re-timed and placed on the
generated hosts.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from observe.simulate.catalog import DEMO_MIX, REGRESSION, SCENARIOS
from observe.simulate.clock import HOUR, micros
from observe.simulate.cluster import Cluster
from observe.simulate.files import Files
from observe.simulate.fleet import GPU_BUS
from observe.simulate.manifest import Manifest
from observe.simulate.real_lines import RealLines

FIRST_JOB_ID = 127400
# Bytes one node adds per simulated hour (about 39 kB measured, taken a little low): sizes the
# default start of a target_bytes run so that its logs end before now.
BYTES_PER_NODE_HOUR = 36_000


def generate(out_dir: Path, nodes: int = 16, gpus_per_node: int = 8, hours: float = 24, seed: int = 0,
             start: datetime | None = None, target_bytes: int | None = None,
             progress: Callable[[int], None] | None = None, *, incident_rate: float = 1.0,
             clock_skew_s: float = 0.0, types: Iterable[str] | None = None,
             first_job_id: int = FIRST_JOB_ID, real: RealLines | None = None, first_node: int = 1) -> Manifest:
    """Write a simulated cluster's logs under ``out_dir`` and return the manifest.

    The same arguments give the same bytes. ``start`` (UTC; naive means UTC) defaults to whole
    hours before now: ``hours`` of them, or as many as ``target_bytes`` is expected to take (so two
    runs an hour apart differ: periodic noise is aligned to the clock, not to the start). With
    ``target_bytes`` the simulation runs hour by hour until the files hold at least that many bytes
    and ``hours`` is not used. Existing files of the layout are overwritten. ``progress`` receives
    the size of each write.

    ``incident_rate`` multiplies the incidents planned per day. ``clock_skew_s`` gives every node a
    fixed clock offset drawn from [-clock_skew_s, +clock_skew_s], applied to everything the node
    stamps (syslog, the ranks' job-output stamps; its dmesg ``boot_time`` is the boot by its clock).
    ``types`` (names from :data:`SCENARIOS`) switches to scenario mode: those incident types at
    :data:`SCENARIOS` rates (or, given a dict, at its rates), each failed job in at most one incident;
    None keeps :data:`~observe.simulate.catalog.DEMO_MIX`.
    ``first_job_id`` numbers the jobs and ``first_node`` the nodes (``gpu001``...): distinct ranges let
    several runs share one store without one cluster's history showing on another's nodes.
    ``real`` (scenario mode): labelled real records to draw incident lines and a healthy fleet's
    alarming-looking background from (:data:`~observe.simulate.background.BACKGROUND`), re-homed onto
    the simulated nodes.
    """
    if nodes < 1 or not 1 <= gpus_per_node <= len(GPU_BUS) or (target_bytes is None and hours <= 0):
        raise ValueError(f"need nodes >= 1, 1 <= gpus_per_node <= {len(GPU_BUS)} and hours > 0")
    if incident_rate < 0 or clock_skew_s < 0:
        raise ValueError("need incident_rate >= 0 and clock_skew_s >= 0")
    rates = types if isinstance(types, dict) else {t: SCENARIOS[t][0] for t in types or ()}
    plan = DEMO_MIX if types is None else {t: (rate, SCENARIOS[t][1]) for t, rate in rates.items()}
    if start is None:
        span = hours if target_bytes is None else target_bytes / (nodes * BYTES_PER_NODE_HOUR)
        now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        start = now - timedelta(hours=math.ceil(span))
    t0 = micros(start)
    horizon = None if target_bytes is not None else t0 + round(hours * HOUR)
    sim = Cluster(Files(Path(out_dir), progress), nodes, gpus_per_node, seed, t0, horizon, plan=plan,
                  scenario=types is not None, rate=incident_rate, skew_s=clock_skew_s, first_job_id=first_job_id,
                  real=real, first_node=first_node)
    t = t0
    while (t < horizon) if horizon is not None else (sim.files.bytes < target_bytes):
        t1 = t + HOUR if horizon is None else min(t + HOUR, horizon)
        sim.advance(t, t1)
        t = t1
    return sim.close(t)


SCENARIO_START = datetime(2026, 10, 1, tzinfo=timezone.utc)
# Scenario sets: FAST (a test's, about 50 failures, every type at least 3 times, a few seconds) and
# BENCH (at least 300 failures).
FAST = dict(seeds=range(6, 12), sizes=(8, 12, 16), hours=12.0)
BENCH = dict(seeds=range(24), sizes=(8, 12, 16, 24), hours=12.0)


def scenarios(out_dir: Path, seeds: Iterable[int] = FAST["seeds"], sizes: tuple[int, ...] = FAST["sizes"],
              hours: float = FAST["hours"], *, incident_rate: float = 6.0, clock_skew_s: float = 3.0,
              gpus_per_node: int = 8, types: Iterable[str] | dict[str, float] = REGRESSION,
              start: datetime = SCENARIO_START, real: RealLines | None = None) -> list[Manifest]:
    """Many small clusters with failures of known root cause, one per subdirectory of ``out_dir``
    (``000-s0-n8``: index, seed, nodes), sizes taken in turn from ``sizes``. Their times do not
    overlap (each starts after the one before ends) and their job ids do not either (cluster ``i``
    numbers from ``FIRST_JOB_ID + 10000 * i``, its nodes from ``gpu{100 * i + 1}``), so all can go into one store. The failures are
    ``[i for m in manifests for i in m.incidents]``; ``scenarios(dir, **BENCH)`` gives at least 300.
    """
    out, types, manifests = Path(out_dir), types if isinstance(types, dict) else tuple(types), []
    step = timedelta(hours=math.ceil(hours) + 1)
    for i, seed in enumerate(seeds):
        nodes = sizes[i % len(sizes)]
        manifests.append(generate(out / f"{i:03d}-s{seed}-n{nodes}", nodes=nodes, gpus_per_node=gpus_per_node,
                                  hours=hours, seed=seed, start=start + i * step, incident_rate=incident_rate,
                                  clock_skew_s=clock_skew_s, types=types, first_job_id=FIRST_JOB_ID + 10_000 * i,
                                  real=real, first_node=100 * i + 1))
    return manifests
