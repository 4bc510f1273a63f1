"""A deterministic demo GPU cluster: a seeded simulation of Slurm jobs on ``gpu001..gpuNNN`` that
writes the raw logs such a cluster leaves behind, with injected incidents and their ground truth.

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

Scenario mode (``types=``, see :data:`SCENARIOS` and :func:`scenarios`) injects failures with a known
root cause for measuring root-cause analysis: besides the types above, fatal Xids 48/64/94/95/119/120,
an InfiniBand leaf switch taking down the links of 4-8 neighbouring nodes, a hung rank that only the
PyTorch watchdog's sequence numbers give away, a node that crashes (its own logs just stop), and
application Xids that do not fail their job (noise). ``clock_skew_s`` gives each node a fixed clock
offset. Lines of several scenarios are built from the real lines in tests/fixtures/corpus/real
(:data:`REAL`), re-timed and placed on the generated hosts.
"""
from __future__ import annotations

import hashlib
import heapq
import math
import re
from base64 import b64encode
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

import numpy as np
from hostlist import collect_hostlist

from observe.real_lines import RealLines, Record, rehome

S = 1_000_000  # the simulation's clock: integer microseconds since the Unix epoch
MINUTE = 60 * S
HOUR = 60 * MINUTE
DAY = 24 * HOUR
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Bytes one node adds per simulated hour (about 39 kB measured, taken a little low): sizes the
# default start of a target_bytes run so that its logs end before now.
BYTES_PER_NODE_HOUR = 36_000

GPU_BUS = ("18", "2a", "3b", "5d", "9a", "ab", "ba", "db", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8")
HCA_BUS = ("1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc")
CPUS_PER_NODE = 128
KERNEL = "5.15.0-105-generic #115-Ubuntu"
DRIVER = "550.90.07"
NCCL_VERSION = "2.21.5"
FIRST_JOB_ID = 127400
# (user, uid, account); alice..frank submit jobs, root logs in from the admin host.
USERS = (("alice", 1001, "ml"), ("bob", 1002, "ml"), ("carol", 1003, "vision"),
         ("dave", 1004, "nlp"), ("erin", 1005, "nlp"), ("frank", 1006, "vision"))
# Incident types: (count per day on a 16-node cluster, needs a multi-node job).
INCIDENTS = {"xid79": (1, True), "ib_link_down": (1, True), "oom": (1, True),
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
# A healthy fleet's alarming-looking kernel lines, drawn from real records when a scenario run has
# them: per node-hour rates (our judgement of orders of magnitude, not a measurement). A corrected
# PCIe or memory error was fixed by the hardware; a link that flaps comes back within seconds; the
# OOM killer takes some other process than the job's.
BACKGROUND = {"aer_corrected": 0.05, "ecc_corrected": 0.02, "ib_flap": 0.01, "oom_other": 0.004}
DISTRACTED = 0.3  # of failures with real records: an unrelated alarming line on another node of the job, minutes before


@dataclass(frozen=True)
class InputFile:
    """One file :func:`generate` wrote; ``format`` is the collector (``--source``) that reads it."""

    path: Path
    format: str
    node: str | None = None  # the host the file comes from (ctl1: the Slurm controller)
    job: str | None = None
    boot_time: datetime | None = None  # dmesg: the node's boot time (ground truth for checks)


@dataclass
class Manifest:
    """What :func:`generate` wrote and what it injected.

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


def generate(out_dir: Path, nodes: int = 16, gpus_per_node: int = 8, hours: float = 24, seed: int = 0,
             start: datetime | None = None, target_bytes: int | None = None,
             progress: Callable[[int], None] | None = None, *, incident_rate: float = 1.0,
             clock_skew_s: float = 0.0, types: Iterable[str] | None = None,
             first_job_id: int = FIRST_JOB_ID, real: RealLines | None = None, first_node: int = 1) -> Manifest:
    """Write a simulated cluster's logs under ``out_dir`` and return the manifest.

    The same arguments give the same bytes. ``start`` (UTC; naive means UTC) defaults to whole
    hours before now: ``hours`` of them, or as many as ``target_bytes`` is expected to take. With
    ``target_bytes`` the simulation runs hour by hour until the files hold at least that many bytes
    and ``hours`` is not used. Existing files of the layout are overwritten. ``progress`` receives
    the size of each write.

    ``incident_rate`` multiplies the incidents planned per day. ``clock_skew_s`` gives every node a
    fixed clock offset drawn from [-clock_skew_s, +clock_skew_s], applied to everything the node
    stamps (syslog, the ranks' job-output stamps; its dmesg ``boot_time`` is the boot by its clock).
    ``types`` (names from :data:`SCENARIOS`) switches to scenario mode: those incident types at
    :data:`SCENARIOS` rates (or, given a dict, at its rates), each failed job in at most one incident;
    None keeps :data:`INCIDENTS`.
    ``first_job_id`` numbers the jobs and ``first_node`` the nodes (``gpu001``...): distinct ranges let
    several runs share one store without one cluster's history showing on another's nodes.
    ``real`` (scenario mode): labelled real records to draw incident lines and a healthy fleet's
    alarming-looking background from (:data:`BACKGROUND`), re-homed onto the simulated nodes.
    """
    if nodes < 1 or not 1 <= gpus_per_node <= len(GPU_BUS) or (target_bytes is None and hours <= 0):
        raise ValueError(f"need nodes >= 1, 1 <= gpus_per_node <= {len(GPU_BUS)} and hours > 0")
    if incident_rate < 0 or clock_skew_s < 0:
        raise ValueError("need incident_rate >= 0 and clock_skew_s >= 0")
    rates = types if isinstance(types, dict) else {t: SCENARIOS[t][0] for t in types or ()}
    plan = INCIDENTS if types is None else {t: (rate, SCENARIOS[t][1]) for t, rate in rates.items()}
    if start is None:
        span = hours if target_bytes is None else target_bytes / (nodes * BYTES_PER_NODE_HOUR)
        now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        start = now - timedelta(hours=math.ceil(span))
    t0 = _us(start)
    horizon = None if target_bytes is not None else t0 + round(hours * HOUR)
    sim = _Cluster(_Files(Path(out_dir), progress), nodes, gpus_per_node, seed, t0, horizon, plan=plan,
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


# ----------------------------------------------------------------------------------------- time


def _us(dt: datetime) -> int:
    dt = dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    return (dt - EPOCH) // timedelta(microseconds=1)


def _utc(t: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(t))


def _iso(t: int) -> str:
    """``2026-11-22T10:00:00`` (Slurm's second-resolution stamps)."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S")


def _glog(t: int) -> str:
    """PyTorch's glog stamp ``1122 10:33:05.123456789`` (nanoseconds from the microseconds)."""
    d = _utc(t)
    return f"{d:%m%d %H:%M:%S}.{d.microsecond:06d}{t * 7919 % 1000:03d}"


def _c10(t: int) -> str:
    """c10's glog-like stamp as PyTorch 2.x prints it: ``626 06:24:44.903881913`` (month unpadded)."""
    d = _utc(t)
    return f"{d.month}{d:%d %H:%M:%S}.{d.microsecond:06d}{t * 7919 % 1000:03d}"


def _iso_strings(t: np.ndarray, unit: str) -> list[str]:
    return np.datetime_as_string(np.asarray(t, dtype=np.int64).astype("datetime64[us]"), unit=unit).tolist()


_SYSLOG_DAYS: dict[str, str] = {}


def _syslog_stamps(t: np.ndarray) -> list[str]:
    """``Nov 22 10:00:01`` (RFC 3164, day space-padded) for each time."""
    out = []
    for s in _iso_strings(t, "s"):
        day = _SYSLOG_DAYS.get(s[:10])
        if day is None:
            day = _SYSLOG_DAYS[s[:10]] = datetime.strptime(s[:10], "%Y-%m-%d").strftime("%b ") + f"{int(s[8:10]):>2} "
        out.append(day + s[11:])
    return out


def _py_stamps(t: np.ndarray) -> list[str]:
    """Python logging's ``2026-11-22 10:00:10,123`` for each time."""
    return [s.replace("T", " ").replace(".", ",") for s in _iso_strings(t, "ms")]


def _py_stamp(t: int) -> str:
    return _py_stamps(np.array([t]))[0]


# ------------------------------------------------------------------------------- noise templates


@dataclass(frozen=True)
class _Noise:
    """A background burst: lines (seconds after the burst starts, text with ``{field}``s) drawn
    ``rate`` times an hour at random, or every ``every`` seconds at ``at`` seconds past the period.
    ``fields`` draws spec-specific values (rng, n) -> array; the rest come from :func:`_column`."""

    lines: tuple[tuple[float, str], ...]
    rate: float = 0.0
    every: int = 0
    at: int = 0
    fields: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = field(default_factory=dict)

    def times(self, rng: np.random.Generator, t0: int, t1: int, hosts: int) -> tuple[np.ndarray, np.ndarray]:
        """Burst start times in [t0, t1) and the host of each, ordered by host, then time."""
        if self.every:
            period, phase = self.every * S, self.at * S
            first = -(-(t0 - phase) // period) * period + phase
            base = np.arange(first, t1, period, dtype=np.int64)
            host = np.repeat(np.arange(hosts), len(base))
            return np.tile(base, hosts) + rng.integers(0, S // 2, len(host)), host
        host = np.repeat(np.arange(hosts), rng.poisson(self.rate * (t1 - t0) / HOUR, hosts))
        t = rng.integers(t0, t1, len(host))
        order = np.lexsort((t, host))
        return t[order], host[order]


@lru_cache(maxsize=None)
def _compile(template: str) -> tuple[str, tuple[str, ...]]:
    """``{name}`` template to a %-format and its field names, in order."""
    names = tuple(re.findall(r"\{(\w+)\}", template))
    return re.sub(r"\{\w+\}", "%s", template.replace("%", "%%")), names


def _cron(command: str, every: int, at: int) -> _Noise:
    """A root crontab entry as cron logs it: the PAM session around the command."""
    return _Noise(every=every, at=at, lines=(
        (0.0, "CRON[{pid}]: pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)"),
        (0.003, "CRON[{cpid}]: (root) CMD (" + command + ")"),
        (0.25, "CRON[{pid}]: pam_unix(cron:session): session closed for user root"),
    ))


def _unit(unit: str, description: str, every: int = 0, rate: float = 0.0, at: int = 0, took: float = 1.5) -> _Noise:
    """A systemd oneshot service started by a timer."""
    return _Noise(every=every, rate=rate, at=at, lines=(
        (0.0, f"systemd[1]: Starting {unit} - {description}..."),
        (took, f"systemd[1]: {unit}: Deactivated successfully."),
        (took + 0.001, f"systemd[1]: Finished {unit} - {description}."),
    ))


def _ints(low: int, high: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: rng.integers(low, high, n)


def _hexes(low: int, high: int) -> Callable[[np.random.Generator, int], list[str]]:
    return lambda rng, n: [f"{v:x}" for v in rng.integers(low, high, n).tolist()]


SYSLOG_NOISE = (
    _cron("/usr/sbin/nhc -t 120", 300, 0),
    _cron("command -v debian-sa1 > /dev/null && debian-sa1 1 1", 600, 300),
    _cron("/opt/health/gpu_check.sh >/dev/null 2>&1", 900, 120),
    _cron("   cd / && run-parts --report /etc/cron.hourly", 3600, 1020),
    _unit("logrotate.service", "Rotate log files", every=86400, at=0),
    _unit("systemd-tmpfiles-clean.service", "Cleanup of Temporary Directories", every=86400, at=2533, took=0.1),
    _unit("man-db.service", "Daily man-db regeneration", every=86400, at=22250, took=3.2),
    _unit("apt-daily.service", "Daily apt download activities", rate=1 / 12, took=4.1),
    _unit("fwupd-refresh.service", "Refresh fwupd metadata and update motd", rate=1 / 12, took=0.8),
    _unit("motd-news.service", "Message of the Day", rate=1 / 12, took=0.4),
    _Noise(rate=6, lines=(
        (0.0, "sshd[{pid}]: Accepted publickey for {user} from {ip} port {port} ssh2: ED25519 {key}"),
        (0.01, "sshd[{pid}]: pam_unix(sshd:session): session opened for user {user}(uid={uid}) by (uid=0)"),
        (0.02, "systemd-logind[{logind}]: New session {session} of user {user}."),
        (0.03, "systemd[1]: Started session-{session}.scope - Session {session} of User {user}."),
        (2.1, "sshd[{pid}]: Received disconnect from {ip} port {port}:11: disconnected by user"),
        (2.1, "sshd[{pid}]: Disconnected from user {user} {ip} port {port}"),
        (2.11, "sshd[{pid}]: pam_unix(sshd:session): session closed for user {user}"),
        (2.12, "systemd[1]: session-{session}.scope: Deactivated successfully."),
        (2.12, "systemd-logind[{logind}]: Session {session} logged out. Waiting for processes to exit."),
        (2.13, "systemd-logind[{logind}]: Removed session {session}."),
    )),
    _Noise(rate=30, lines=((0.0, 'prometheus-node-exporter[{exporter}]: ts={iso} caller=collector.go:169 level=error '
                                 'msg="collector failed" name=hwmon duration_seconds=0.00{ms} err="hwmon collector failed for '
                                 'hwmon3: open /sys/class/hwmon/hwmon3/temp1_input: no such device"'),),
           fields={"ms": _ints(1000, 9999)}),
    _Noise(rate=0.2, lines=((0.0, "chronyd[{chronyd}]: Selected source 10.1.0.1 (ntp1.cluster.local)"),)),
)
KERNEL_NOISE = (
    _Noise(rate=0.2, lines=((0.0, "IPv4: martian source 10.1.255.255 from 10.1.{a}.{b}, on dev eno1"),
                            (0.0001, "ll header: 00000000: ff ff ff ff ff ff 3c ec ef 4a {c} 12 08 00")),
           fields={"a": _ints(0, 4), "b": _ints(2, 250), "c": _hexes(16, 255)}),
    _Noise(rate=0.05, lines=((0.0, "perf: interrupt took too long ({a} > {b}), lowering kernel.perf_event_max_sample_rate to {c}"),),
           fields={"a": _ints(2501, 9000), "b": _ints(2500, 2501), "c": _ints(20000, 79000)}),
    _Noise(rate=0.02, lines=((0.0, "EDAC MC{mc}: 1 CE memory read error on CPU_SrcID#{mc}_MC#0_Chan#{ch}_DIMM#0 (channel:{ch} "
                                   "slot:0 page:0x{page} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f "
                                   "socket:{mc} imc:0 rank:0 bg:1 ba:2 row:0x{row} col:0x{col})"),),
           fields={"mc": _ints(0, 2), "ch": _ints(0, 8), "page": _hexes(0x1000, 0xfffff),
                   "row": _hexes(0x100, 0x3ffff), "col": _hexes(0x10, 0x3ff)}),
    _Noise(rate=0.03, lines=((0.0, "nfs: server nfs01 not responding, still trying"), (41.5, "nfs: server nfs01 OK"))),
)
CONTROLLER_NOISE = (
    _Noise(every=30, lines=((0.0, "backfill: beginning"),
                            (0.002, "backfill: completed testing {tested}({started}) jobs, usec={usec}")),
           fields={"tested": _ints(0, 12), "started": _ints(0, 1)}),
    _Noise(rate=1.0, lines=((0.0, "error: slurm_receive_msg [10.1.0.{b}:{port}]: Zero Bytes were transmitted or received"),),
           fields={"b": _ints(5, 9)}),
    _Noise(rate=0.5, lines=((0.0, "Warning: Note very large processing time from _slurm_rpc_dump_jobs: usec={big} began={clock}"),),
           fields={"big": _ints(1_000_000, 4_000_000)}),
)
SSH_KEYS = {name: "SHA256:" + b64encode(hashlib.sha256(name.encode()).digest()).decode().rstrip("=")
            for name in ["root", *(u for u, _, _ in USERS)]}


UPTIME = "[%5d.%06d]"  # the kernel's seconds since boot, as dmesg prints them
PID_FLOOR, PID_SPAN = 300, 4_194_304 - 300  # Linux hands out pids upwards from 300, wrapping at pid_max


def _pid(base, t):
    """The pid a host hands out at time ``t`` (about two new processes a second); scalars or arrays."""
    return PID_FLOOR + (base + t // (S // 2)) % PID_SPAN


class _Hosts:
    """Hosts whose background noise is drawn together: per-host template constants and counters."""

    def __init__(self, consts: dict[str, list[str]], pid_base: list[int], session: list[int]) -> None:
        self.consts = {k: np.array(v, dtype=object) for k, v in consts.items()}
        self.pid_base = np.array(pid_base, dtype=np.int64)
        self.session = np.array(session, dtype=np.int64)
        self.n = len(pid_base)


def _column(name: str, spec: _Noise, hosts: _Hosts, rng: np.random.Generator, t: np.ndarray, host: np.ndarray,
            cols: dict) -> list:
    """Values of field ``name`` for bursts at times ``t`` on ``host`` (``cols``: the bursts' other fields)."""
    n = len(t)
    if name in spec.fields:
        values = spec.fields[name](rng, n)
        return values.tolist() if isinstance(values, np.ndarray) else values
    if name in hosts.consts:
        return hosts.consts[name][host].tolist()
    if name in ("pid", "cpid"):
        pid = _pid(hosts.pid_base[host], t) + rng.integers(0, 3, n)
        cols["pid"], cols["cpid"] = pid.tolist(), (pid + 1).tolist()
        return cols[name]
    if name == "session":  # numbered per host in time order
        within = np.arange(n) - np.searchsorted(host, host)
        values = hosts.session[host] + within + 1
        hosts.session += np.bincount(host, minlength=hosts.n)
        return values.tolist()
    if name in ("user", "uid", "key", "ip"):  # who logs in: mostly root from the admin host
        who = np.where(rng.random(n) < 0.8, -1, rng.integers(0, len(USERS), n)).tolist()
        cols["user"] = [USERS[w][0] if w >= 0 else "root" for w in who]
        cols["uid"] = [USERS[w][1] if w >= 0 else 0 for w in who]
        cols["key"] = [SSH_KEYS[u] for u in cols["user"]]
        cols["ip"] = ["10.1.0.5" if w >= 0 else "10.1.0.2" for w in who]
        return cols[name]
    if name == "port":
        return rng.integers(32768, 61000, n).tolist()
    if name == "usec":
        return rng.integers(150, 9000, n).tolist()
    if name == "iso":
        return [s + "Z" for s in _iso_strings(t, "ms")]
    if name == "clock":
        return [s[11:] for s in _iso_strings(t, "ms")]
    raise KeyError(f"no values for template field {name!r}")


def _noise(specs: tuple[_Noise, ...], hosts: _Hosts, rng: np.random.Generator, t0: int, t1: int
           ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The bursts of ``specs`` on every host in [t0, t1): line times, hosts and texts."""
    times, where, texts = [], [], []
    for spec in specs:
        t, host = spec.times(rng, t0, t1, hosts.n)
        if not len(t):
            continue
        cols: dict[str, list] = {}
        for offset, template in spec.lines:
            fmt, names = _compile(template)
            for name in names:
                if name not in cols:
                    cols[name] = _column(name, spec, hosts, rng, t, host, cols)
            texts += [fmt % row for row in zip(*(cols[n] for n in names))] if names else [fmt] * len(t)
            times.append(t + int(offset * S))
            where.append(host)
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.int64), []
    return np.concatenate(times), np.concatenate(where), texts


# ---------------------------------------------------------------------------------- output plumbing


class _Outbox:
    """Timed lines waiting for the hour they fall in, per destination."""

    def __init__(self) -> None:
        self.pending: dict[tuple, tuple[list[int], list[str]]] = {}

    def put(self, dest: tuple, t, texts) -> None:
        """Queue ``texts`` at times ``t`` (a time for all, or one per text)."""
        times, lines = self.pending.setdefault(dest, ([], []))
        texts = [texts] if isinstance(texts, str) else texts
        times.extend(t.tolist() if isinstance(t, np.ndarray) else t if isinstance(t, list) else [t] * len(texts))
        lines.extend(texts)

    def take(self, dest: tuple, until: int) -> tuple[np.ndarray, list[str]]:
        """The lines due before ``until``, in time order (ties keep their queueing order)."""
        times, lines = self.pending.pop(dest, ([], []))
        t = np.asarray(times, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        due = order[t[order] < until]
        rest = order[t[order] >= until]
        if len(rest):
            self.pending[dest] = (t[rest].tolist(), [lines[i] for i in rest.tolist()])
        return t[due], [lines[i] for i in due.tolist()]

    def job_dests(self) -> list[tuple]:
        return [d for d in self.pending if d[0] == "job"]


class _Files:
    """The demo's files: truncated on first write, appended after; counts the bytes written."""

    def __init__(self, root: Path, progress: Callable[[int], None] | None) -> None:
        self.root, self.progress = root, progress
        self.entries: dict[str, InputFile] = {}
        self.open: dict[str, BinaryIO] = {}
        self.bytes = 0

    def add(self, rel: str, fmt: str, keep_open: bool = True, **info) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        self.entries[rel] = InputFile(path, fmt, **info)
        f = open(path, "wb", buffering=1 << 20)
        if keep_open:
            self.open[rel] = f
        else:
            f.close()

    def write(self, rel: str, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        self.bytes += len(data)
        if self.progress:
            self.progress(len(data))
        f = self.open.get(rel)
        if f is not None:
            f.write(data)
        else:
            with open(self.root / rel, "ab") as g:
                g.write(data)

    def close(self) -> list[InputFile]:
        for f in self.open.values():
            f.close()
        return list(self.entries.values())


# ----------------------------------------------------------------------------------------- cluster


@dataclass(frozen=True)
class _Gpu:
    bus: str  # "3b"
    uuid: str
    serial: str

    @property
    def pci(self) -> str:
        return f"0000:{self.bus}:00"


class _Node:
    """A GPU node: hardware, boot time, Slurm state, and its noise source."""

    def __init__(self, index: int, gpus: int, rng: np.random.Generator, start: int, first: int = 1) -> None:
        self.index = index
        self.name = f"gpu{first + index:03d}"
        self.ib_ip = f"10.0.{index // 200}.{index % 200 + 11}"
        self.ip = f"10.1.{index // 200}.{index % 200 + 11}"
        self.boot = start - int(rng.integers(2 * HOUR, 30 * DAY))
        self.gpus = []
        for g in range(gpus):
            h = rng.bytes(16).hex()
            self.gpus.append(_Gpu(GPU_BUS[g], f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
                                  str(int(rng.integers(1_650_000_000_000, 1_659_999_999_999)))))
        self.hcas = min(gpus, len(HCA_BUS))
        self.daemons = {name: str(pid) for name, pid in zip(("logind", "chronyd", "exporter", "slurmd"),
                                                             rng.integers(900, 3000, 4).tolist())}
        self.pid_base = int(rng.integers(0, PID_SPAN))
        self.session = int(rng.integers(1000, 90_000))
        self.state = "idle"  # idle, alloc, drain, down
        self.run: _Run | None = None
        self.fallen: int | None = None  # index of a GPU off the bus, until repaired
        self.broken: tuple[int, int, int] | None = None  # (GPU, since, Xid) failed unnoticed (scenario prior_fault)
        self.skew = 0  # this node's clock minus true time (microseconds)

    def uptime(self, t: int) -> str:
        return UPTIME % divmod(t - self.boot, S)


@dataclass(frozen=True)
class _Kind:
    """A kind of job: name, script, node counts, run hours, weight, seconds between progress lines."""

    name: str
    script: str
    nodes: tuple[int, ...]
    hours: tuple[float, float]
    weight: float
    every: tuple[float, float]
    limit: int  # minutes


KINDS = (
    _Kind("pretrain-llm", "pretrain.py", (2, 4, 8), (3.0, 14.0), 2.0, (8.0, 15.0), 2880),
    _Kind("finetune", "finetune.py", (1, 2), (0.5, 4.0), 4.0, (4.0, 8.0), 720),
    _Kind("eval", "evaluate.py", (1,), (0.1, 0.7), 4.0, (20.0, 40.0), 120),
)
# Scenario mode's mix: more, shorter multi-node jobs, so that more jobs can fail per simulated hour.
SCENARIO_KINDS = (
    _Kind("pretrain-llm", "pretrain.py", (2, 4, 8), (1.0, 5.0), 4.0, (8.0, 15.0), 2880),
    _Kind("finetune", "finetune.py", (2, 4), (0.5, 3.0), 3.0, (4.0, 8.0), 720),
    _Kind("eval", "evaluate.py", (1,), (0.1, 0.7), 2.0, (20.0, 40.0), 120),
)
DATASETS = ("fineweb-edu-v2", "redpajama-v2", "laion-coco-400m", "the-stack-v2", "openwebmath")


@dataclass
class _Job:
    id: int
    kind: _Kind
    user: tuple[str, int, str]
    nodes: int
    seconds: int
    submit: int
    eligible: int
    dataset: str
    runs: int = 0
    step: int = 0  # training step reached (a requeued run resumes from it)


class _Run:
    """One run of a job on its nodes; knows its ranks and writes its progress lines."""

    def __init__(self, job: _Job, nodes: list[_Node], t: int, gpus: int, rng: np.random.Generator) -> None:
        self.job, self.nodes, self.start, self.gpus = job, nodes, t, gpus
        self.nodelist = collect_hostlist([n.name for n in nodes])
        self.ranks = len(nodes) * gpus
        self.stepd = [int(_pid(n.pid_base, t)) for n in nodes]
        self.base_pids = [p + 40 for p in self.stepd]  # the ranks start after slurmstepd and srun's helpers
        self.comms = [f"0x{v:x}" for v in rng.integers(0x55d000000000, 0x55dfffffffff, self.ranks).tolist()]
        self.comm_id = f"0x{int(rng.integers(1 << 60, 1 << 62)):x}"
        self.every = int(rng.uniform(*job.kind.every) * S)
        self.steps_per_line = 10
        self.step = job.step
        self.total = job.step + int(job.seconds / (self.every / S) * self.steps_per_line)
        self.decay = self.total / 5 + 1
        self.next_t = t + int(rng.integers(40, 90)) * S
        self.end = t + job.seconds
        self.stop = self.end  # progress lines stop here (a hang stops them early)
        self.fate = "COMPLETED"
        self.status: str | None = "WEXITSTATUS 0"
        self.exit = "0:0"
        self.doomed = False  # an incident or application error decided its end
        self.ended = False
        self.noisy = False  # an application Xid that it survives (scenario noise): no incident for it
        self.skew0 = nodes[0].skew  # the batch host's clock offset: rank 0's and slurmstepd's stamps

    def skew(self, rank: int) -> int:
        return self.nodes[rank // self.gpus].skew

    @property
    def id(self) -> str:
        return str(self.job.id)

    def where(self, rank: int) -> tuple[_Node, int, int]:
        """Node, local GPU index and pid of ``rank``."""
        k, g = divmod(rank, self.gpus)
        return self.nodes[k], g, self.base_pids[k] + g

    def prefix(self, rank: int, thread: int = 0) -> str:
        """NCCL's ``host:pid:tid [dev]`` line prefix (thread 0: the main thread)."""
        node, g, pid = self.where(rank)
        return f"{node.name}:{pid}:{pid + thread} [{g}]"

    def progress(self, rng: np.random.Generator, until: int) -> tuple[np.ndarray, list[str]]:
        """Rank 0's training log lines from the last one written up to ``until``."""
        until = min(until, self.stop)
        if self.next_t >= until:
            return np.empty(0, np.int64), []
        n = int((until - self.next_t) / (0.9 * self.every)) + 1
        gaps = (self.every * rng.uniform(0.9, 1.1, n)).astype(np.int64)
        t = self.next_t + np.concatenate([[0], np.cumsum(gaps[:-1])])
        n = int(np.searchsorted(t, until))
        t = t[:n]
        self.next_t = int(t[-1] + gaps[n - 1])
        steps = self.step + self.steps_per_line * np.arange(1, n + 1)
        self.step = self.job.step = int(steps[-1])
        loss = 1.9 + 6.0 * np.exp(-steps / self.decay) + rng.normal(0, 0.02, n)
        lr = 3e-4 * np.minimum(1.0, steps / 2000) * (0.1 + 0.9 * np.cos(np.minimum(steps / self.total, 1) * np.pi / 2))
        secs = gaps[:n] / S / self.steps_per_line
        grad = np.abs(rng.normal(0.9, 0.25, n))
        toks = (len(self.nodes) * 52_000 * (1 + rng.normal(0, 0.02, n))).astype(np.int64)
        script, total = self.job.kind.script, self.total
        lines = [f"[{s}] [INFO] [{script}:412] step {st}/{total} | loss {lo:.4f} | lr {r:.3e} | grad_norm {g:.3f} "
                 f"| tokens/s {tk} | step_time {dt:.3f}s"
                 for s, st, lo, r, g, tk, dt in zip(_py_stamps(t + self.skew0), steps.tolist(), loss.tolist(), lr.tolist(),
                                                     grad.tolist(), toks.tolist(), secs.tolist())]
        times = t.tolist()
        for i in np.flatnonzero(steps % 2000 == 0).tolist():  # checkpoints
            ckpt = f"/checkpoints/{self.job.user[0]}/{self.job.kind.name}-{self.id}/step_{steps[i]:07d}"
            lines.append(f"[{_py_stamp(times[i] + 1000 + self.skew0)}] [INFO] [checkpoint.py:88] saved checkpoint to {ckpt} in "
                         f"{rng.uniform(4, 30):.1f}s")
            times.append(times[i] + 1000)
        return np.asarray(times, dtype=np.int64), lines


def _slices(host: np.ndarray) -> list[tuple[int, int, int]]:
    """(host, start, stop) of each host's run in an array ordered by host."""
    cut = np.flatnonzero(np.diff(host)) + 1
    starts, stops = np.concatenate([[0], cut]), np.concatenate([cut, [len(host)]])
    return [(int(host[a]), int(a), int(b)) for a, b in zip(starts.tolist(), stops.tolist()) if b > a]


def _ranges(ranks: list[int]) -> str:
    """``0-2,4-7`` as srun prints task lists."""
    out, first = [], None
    for i, r in enumerate(ranks):
        first = r if first is None else first
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(f"{first}-{r}" if r != first else f"{r}")
            first = None
    return ",".join(out)


NCCL_BOOT = (
    "{host}:{pid}:{pid} [{dev}] NCCL INFO cudaDriverVersion 12040",
    "{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using eno1:{ip}<0>",
    "{host}:{pid}:{pid} [{dev}] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)",
    "{host}:{pid}:{pid} [{dev}] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
    "object file: No such file or directory : when loading libnccl-net.so",
    "{host}:{pid}:{pid} [{dev}] NCCL INFO NET/Plugin: Using internal network plugin.",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NET/IB : Using {hcas} ; OOB eno1:{ip}<0>",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Using non-device net plugin version 0",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Using network IB",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} "
    "nvmlDev {dev} busId {bus}000 commId {commid} - Init START",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Setting affinity for GPU {dev} to {affinity}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NVLS multicast support is available on dev {dev}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO comm {comm} rank {rank} nRanks {nranks} nNodes {nnodes} localRanks "
    "{local} localRank {dev} MNNVL 0",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Trees [0] {tree} [1] {tree}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO P2P Chunksize set to 131072",
)
NCCL_READY = (
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Connected all rings",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Connected all trees",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO NVLS comm {comm} headRank {dev} nHeads {local} buffSize 4194304 memSize "
    "2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO threadThresholds 8/8/64 | {threads}/8/64 | 512 | 512",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, "
    "32 p2p channels per peer",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO TUNER/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared "
    "object file: No such file or directory : when loading libnccl-tuner.so",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO TUNER/Plugin: Using internal tuner plugin.",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} "
    "nvmlDev {dev} busId {bus}000 commId {commid} - Init COMPLETE",
)
# Python frames above the failing statement of an application error, then (statement, exception).
TRACEBACK = (
    ("{script}", 431, "<module>", "main()"),
    ("{script}", 417, "main", "trainer.fit(loader)"),
    ("trainer.py", 208, "fit", "loss = self.training_step(batch)"),
)
APP_ERRORS = (
    ("cuda_oom", "trainer.py", 171, "training_step", "loss.backward()",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {dev} has a total capacity of "
     "79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. "
     "Of the allocated memory 74.51 GiB is allocated by PyTorch, and 2.07 GiB is reserved by PyTorch but unallocated. "
     "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
     "avoid fragmentation.  See documentation for Memory Management  "
     "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
    ("python_exception", "data.py", 88, "__getitem__", 'with open(self.shards[idx], "rb") as f:',
     "FileNotFoundError: [Errno 2] No such file or directory: '/datasets/{dataset}/shard_{shard:05d}.bin'"),
    ("python_exception", "model.py", 143, "forward", "q = q.view(b, s, self.n_heads, self.head_dim)",
     "RuntimeError: shape '[8, 4096, 32, 128]' is invalid for input of size 100663296"),
)
CUDA_ILLEGAL_ADDRESS = (
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)
CUDA_ECC = ("RuntimeError: CUDA error: uncorrectable ECC error encountered", *CUDA_ILLEGAL_ADDRESS[1:])
# Real lines (tests/fixtures/corpus/real, sources in its SOURCES.md) as templates: (corpus file, lines,
# the values that give back the corpus lines: one dict for all lines or one per line).
# tests/test_scenarios.py checks that ``line.format(**values)`` is in the file; the scenarios fill in generated hosts, PCI ids, pids, times.
REAL = {
    # xid.log 55-61, NVIDIA/open-gpu-kernel-modules#1151
    "xid79": ("xid.log", ("NVRM: GPU at PCI:{pci}: {uuid}", "NVRM: GPU Board Serial Number: {serial}",
                          "NVRM: Xid (PCI:{pci}): 79, GPU has fallen off the bus.",
                          "NVRM: GPU {pci}.0: GPU has fallen off the bus.", "NVRM: GPU {pci}.0: GPU serial number is {serial}.",
                          "NVRM: kgspRcAndNotifyAllChannels_IMPL: RC all channels for critical error 79.",
                          "NVRM: _threadNodeCheckTimeout: API_GPU_ATTACHED_SANITY_CHECK failed!"),
              dict(pci="0000:06:00", uuid="GPU-0b6b7808-c002-f593-ac86-cd8e57757b94", serial="0")),
    # xid.log 70-73, NVIDIA/open-gpu-kernel-modules#829
    "xid120": ("xid.log", ("NVRM: GPU at PCI:{pci}: {uuid}",
                           "NVRM: Xid (PCI:{pci}): 120, GSP task exception: {access} access page fault (cause:{cause}) "
                           "@ pc:{pc}, partition:{part}#0, task:{task}",
                           "NVRM:     Reported by libos partition:{part}#{libos} kernel v3.1 [0] @ ts:{ts}",
                           "NVRM:     RISC-V CSR State:"),
               dict(pci="0000:06:00", uuid="GPU-604d3abb-43d5-088f-f873-9dc453a081a5", access="store", cause="0xf",
                    pc="0x13ebd80", part=2, task=3, libos=4, ts=1770232285)),
    # xid.log 44-46, leptonai/gpud#46
    "xid13": ("xid.log", ("NVRM: Xid (PCI:{pci}): 13, pid={pid}, name={name}, Graphics SM Warp Exception on (GPC {gpc}, "
                          "TPC {tpc}, SM 0): Illegal Instruction Parameter",
                          "NVRM: Xid (PCI:{pci}): 13, pid={pid}, name={name}, Graphics SM Global Exception on (GPC {gpc}, "
                          "TPC {tpc}, SM 0): Multiple Warp Errors",
                          "NVRM: Xid (PCI:{pci}): 13, pid={pid}, name={name}, Graphics Exception: ESR 0x57c730=0xc04000b "
                          "0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174"),
              dict(pci="0000:cb:00", pid="'<unknown>'", name="<unknown>", gpc=7, tpc=7)),
    # xid.log 68, NVIDIA/open-gpu-kernel-modules#363
    "xid31": ("xid.log", ("NVRM: Xid (PCI:{pci}): 31, pid={pid}, name={name}, Ch {ch}, intr 00000000. MMU Fault: ENGINE "
                          "CE0 HUBCLIENT_HSCE0 faulted @ {addr}. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",),
              dict(pci="0000:08:00", pid=169800, name="chrome", ch="00000023", addr="0x0_0abe0000")),
    # xid.log 23, madMAx43v3r/chia-gigahorse#301
    "xid45": ("xid.log", ("NVRM: Xid (PCI:{pci}): 45, pid={pid}, name={name}, Ch {ch}",),
              dict(pci="0000:0a:00", pid="'<unknown>'", name="<unknown>", ch="00000008")),
    # nccl.log 11-12, snowflakedb/ArcticTraining#219
    "watchdog": ("nccl.log", ("[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
                              "operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
                              "Timeout(ms)={timeout}) ran for {ran} milliseconds before timing out.",
                              "[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
                              "Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued "
                              "NCCL work: {enqueued}, last completed NCCL work: {completed}."),
                 (dict(rank=1, stamp="626 06:24:44.903881913", seq=808, op="ALLREDUCE", numel=9801523, timeout=600000,
                       ran=600020), dict(rank=1, stamp="626 06:24:44.906457629", seq=808, enqueued=811, completed=807))),
    # nccl.log 6-10, snowflakedb/ArcticTraining#219 (a newer PyTorch: FlightRecorder, "work sequence id")
    "watchdog_new": ("nccl.log", ("[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:670] Stack trace of the failed collective "
                                  "not found, potentially because FlightRecorder is disabled. You can enable it by setting "
                                  "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
                                  "[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank "
                                  "{rank}]  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued "
                                  "work: {enqueued}, last completed work: {completed}",
                                  "[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:684] [Rank {rank}] Some NCCL operations have "
                                  "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
                                  "operations might run on corrupted/incomplete data.",
                                  "[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:698] [Rank {rank}] To avoid data "
                                  "inconsistency, we are taking the entire process down."),
                     (dict(rank=1, stamp="626 16:48:25.440243908"),
                      dict(rank=5, stamp="626 16:48:25.440238649", seq=120049, enqueued=120051, completed=120048),
                      dict(rank=3, stamp="626 16:48:25.440250129"), dict(rank=3, stamp="626 16:48:25.440271515"))),
    # nccl.log 76-79, NVIDIA/nccl#928
    "ib_warn": ("nccl.log", ("{prefix} transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {peer}<{port}> "
                             "with error {err}, opcode {opcode}, len {len}, vendor err {vendor} ({side})",
                             "{prefix} NCCL INFO transport/net.cc:1008 -> 6", "{prefix} NCCL INFO proxy.cc:679 -> 6",
                             "{prefix} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]"),
                dict(prefix="H100-2:19989:20082 [1]", peer="fe80::966d:ae03:8b:df78%ib0", port=53249, err=4, opcode=32564,
                     len=32564, vendor=81, side="Send")),
    # nccl.log 53-56, NVIDIA/nccl#1814 (an external IB plugin)
    "ib_warn_plugin": ("nccl.log", ("{prefix} ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer {peer}<{port}> "
                                    "with status={err} opcode={opcode} len={len} vendor err {vendor} ({side}) localGid "
                                    "::ffff:{lgid} remoteGids::ffff:{rgid}",
                                    "{prefix} NCCL INFO transport/net.cc:1298 -> 6", "{prefix} NCCL INFO proxy.cc:694 -> 6",
                                    "{prefix} NCCL INFO proxy.cc:874 -> 6 [Progress Thread]"),
                       dict(prefix="hostname-test:984:1357 [4]", peer="172.36.143.59", port=44206, err=12, opcode=129,
                            len=65536, vendor=129, side="Recv", lgid="29.87.88.182", rgid="29.87.4.221")),
    # nccl.log 34-37, NVIDIA/nccl#1235
    "socket_closed": ("nccl.log", ("{prefix} misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
                                   "{peer}<{port}>", "{prefix} NCCL INFO misc/socket.cc:749 -> 6",
                                   "{prefix} proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId={op}",
                                   "{prefix} NCCL INFO group.cc:65 -> 3 [Async thread]"),
                      dict(prefix="ng30903:3063025:3066048 [0]", peer="ng30903-ib.narval.calcul.quebec", port=51159,
                           op="0x55a51966cc80")),
    # ib_pcie.log 4 and 6, leptonai/gpud#1209
    "link_up": ("ib_pcie.log", ("mlx5_core {pci} mlx5_{k}: Port: 1 Link INIT", "mlx5_core {pci} mlx5_{k}: Port: 1 Link ACTIVE"),
                dict(pci="0000:ab:00.0", k=5)),
}


def _real(sample: str, **values) -> list[str]:
    """The lines of real sample ``sample`` with generated values."""
    return [line.format(**values) for line in REAL[sample][1]]


BOOT = (  # (seconds after boot, dmesg text); {gpu}/{hca} lines repeat per device
    (0.0, f"Linux version {KERNEL.split()[0]} (buildd@lcy02-amd64-007) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, "
          f"GNU ld (GNU Binutils for Ubuntu) 2.38) {KERNEL.split()[1]} SMP Mon Apr 15 09:52:04 UTC 2024 "
          "(Ubuntu 5.15.0-105.115-generic 5.15.148)"),
    (0.0, f"Command line: BOOT_IMAGE=/boot/vmlinuz-{KERNEL.split()[0]} root=UUID=6f1c0a3e-8d7b-4c1e-9a55-2b1f0c7d9e41 ro "
          "pci=realloc=off iommu=pt intel_iommu=on console=tty0 console=ttyS0,115200n8"),
    (0.0, "DMI: NVIDIA DGXH100/DGXH100, BIOS 1.5.1 02/22/2024"),
    (0.0, "tsc: Detected 2000.000 MHz processor"),
    (0.41, "Memory: 2113035028K/2147054952K available (18441K kernel code, 3374K rwdata, 12216K rodata, 4776K init, "
           "5068K bss, 34019664K reserved, 0K cma-reserved)"),
    (1.93, "pci 0000:{gpu}:00.0: [10de:2330] type 00 class 0x030200"),
    (2.21, "pci 0000:{hca}:00.0: [15b3:1021] type 00 class 0x020700"),
    (5.02, "mlx5_core 0000:{hca}:00.0: firmware version: 28.39.1002"),
    (5.03, "mlx5_core 0000:{hca}:00.0: 252.048 Gb/s available PCIe bandwidth (16.0 GT/s PCIe x16 link)"),
    (6.8, "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Opts: (null). Quota mode: none."),
    (9.11, "nvidia: loading out-of-tree module taints kernel."),
    (9.11, "nvidia: module license 'NVIDIA' taints kernel."),
    (9.25, "nvidia-nvlink: Nvlink Core is being initialized, major device number 509"),
    (9.31, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Fri May 31 09:35:42 UTC 2024"),
    (9.52, f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {DRIVER}  Fri May 31 09:30:47 UTC 2024"),
    (14.7, "mlx5_core 0000:{hca}:00.0 mlx5_{k}: Port: 1 Link ACTIVE"),
    (22.4, "NFS: Registering the id_resolver key type"),
    (31.0, "nvidia-peermem: loading out-of-tree module taints kernel."),
)


def _corrected(record: Record) -> bool:
    """An EDAC/MCE record of a corrected error (``CE``, ``Corrected``), not an uncorrected one."""
    return bool(re.search(r"\bCE\b|(?<![Uu]n)[Cc]orrected", record.texts[0]))


def _outcome(rng: np.random.Generator) -> str:
    """How a run ends unless an incident intervenes."""
    u = rng.random()
    return "TIMEOUT" if u < 0.04 else "CANCELLED" if u < 0.10 else "FAILED" if u < 0.16 else "COMPLETED"


class _Cluster:
    """The simulation: Slurm scheduling, job runs, incidents, and the files they write."""

    def __init__(self, files: _Files, n_nodes: int, gpus: int, seed: int, start: int, horizon: int | None,
                 plan: dict = INCIDENTS, scenario: bool = False, rate: float = 1.0, skew_s: float = 0.0,
                 first_job_id: int = FIRST_JOB_ID, real: RealLines | None = None, first_node: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.real = real
        self.quiet_rng = np.random.default_rng([seed, 0xB6])  # the background's own stream
        self.start, self.horizon, self.gpus = start, horizon, gpus
        self.files, self.out = files, _Outbox()
        self.nodes = [_Node(i, gpus, self.rng, start, first_node) for i in range(n_nodes)]
        self.plan, self.scenario, self.rate = plan, scenario, rate
        # A separate stream, so that skew and scenario draws leave the default run's bytes unchanged.
        extra = np.random.default_rng([seed, 0x5CE7])
        self.skew = np.zeros(n_nodes, dtype=np.int64)
        if skew_s > 0:
            self.skew = np.round(extra.uniform(-skew_s, skew_s, n_nodes) * S).astype(np.int64)
            for node, skew in zip(self.nodes, self.skew.tolist()):
                node.skew = skew
        self.leaf = int(extra.integers(4, 9))  # nodes per InfiniBand leaf switch (ib_switch)
        self.dead_at = np.full(n_nodes, np.iinfo(np.int64).max, dtype=np.int64)  # crashed nodes write nothing after
        self.crashed: list[_Node] = []
        self.lost: dict[int, tuple[int, int]] = {}  # node index -> a window its kernel and syslog lines never reached us
        self.hit: set[int] = set()  # jobs with an incident record
        self.hosts = _Hosts({k: [n.daemons[k] for n in self.nodes] for k in ("logind", "chronyd", "exporter")},
                            [n.pid_base for n in self.nodes], [n.session for n in self.nodes])
        self.controller = _Hosts({}, [0], [0])
        self.boots = np.array([n.boot for n in self.nodes], dtype=np.int64)
        fits = [(k, tuple(n for n in k.nodes if n <= n_nodes)) for k in (SCENARIO_KINDS if scenario else KINDS)]
        self.kinds = [_Kind(k.name, k.script, n, k.hours, k.weight, k.every, k.limit) for k, n in fits if n]
        weights = np.array([k.weight for k in self.kinds])
        self.weights = weights / weights.sum()
        node_hours = sum(w * np.mean(k.nodes) * np.mean(k.hours) for w, k in zip(self.weights, self.kinds))
        self.arrivals_per_hour = 0.85 * n_nodes / node_hours
        self.queue: list[_Job] = []
        self.live: list[_Run] = []
        self.events: list = []
        self.seq = 0
        self.next_id = first_job_id
        self.incidents: list[dict] = []
        self.files.add("slurm/slurmctld.log", "slurm", node="ctl1")
        self.files.add("slurm/jobcomp.log", "slurm_jobs", node="ctl1")
        for node in self.nodes:
            self.files.add(f"nodes/{node.name}/syslog", "syslog", node=node.name)
            self.files.add(f"nodes/{node.name}/dmesg", "kernel", node=node.name, boot_time=_utc(node.boot + node.skew))
            self.files.write(f"nodes/{node.name}/dmesg", self._boot_lines(node))
        for _ in range(n_nodes // 2 + 1):  # a queue is waiting when the logs begin
            self._at(start + int(self.rng.integers(0, 10 * MINUTE)), self._arrive)

    # --- the clock

    def _at(self, t: int, fn: Callable, *args) -> None:
        self.seq += 1
        heapq.heappush(self.events, (int(t), self.seq, fn, args))

    def advance(self, t0: int, t1: int) -> None:
        """Simulate [t0, t1): plan arrivals and incidents, run the events, write the hour's lines."""
        if (t0 - self.start) % DAY == 0:
            self._plan_incidents(t0)
        for t in np.sort(self.rng.integers(t0, t1, self.rng.poisson(self.arrivals_per_hour * (t1 - t0) / HOUR))):
            self._at(t, self._arrive)
        while self.events and self.events[0][0] < t1:
            t, _, fn, args = heapq.heappop(self.events)
            fn(t, *args)
        if self.real is not None:
            self._background(t0, t1)
        self._flush(t0, t1)

    def close(self, end: int) -> Manifest:
        """Write each node's nvidia-smi snapshot, close the files, return the manifest."""
        for node in self.nodes:
            if node in self.crashed:  # still down: nothing to run nvidia-smi on
                continue
            rel = f"nodes/{node.name}/nvidia-smi.xml"
            self.files.add(rel, "nvidia_smi", node=node.name)
            self.files.write(rel, [_nvidia_smi(node, end + node.skew, self.rng)])
        files = self.files.close()
        skew = {n.name: n.skew / S for n in self.nodes} if self.skew.any() else {}
        return Manifest(files, self.files.bytes, self.incidents, _utc(self.start), _utc(end), skew)

    # --- a healthy fleet's background (real records)

    def _background(self, t0: int, t1: int) -> None:
        rng = self.quiet_rng
        for name, rate in BACKGROUND.items():
            for _ in range(rng.poisson(rate * len(self.nodes) * (t1 - t0) / HOUR)):
                node, t = self.nodes[int(rng.integers(len(self.nodes)))], int(rng.integers(t0, t1))
                if t < self.dead_at[node.index]:
                    getattr(self, "_quiet_" + name)(t, node, rng)

    def _quiet_aer_corrected(self, t: int, node: _Node, rng: np.random.Generator) -> None:
        self._quiet(t, node, rng, self.real.pick(rng, "pcie_aer", aer="corrected"), node.gpus[int(rng.integers(len(node.gpus)))].pci)

    def _quiet_ecc_corrected(self, t: int, node: _Node, rng: np.random.Generator) -> None:
        self._quiet(t, node, rng, self.real.pick(rng, "memory_ecc", test=_corrected), None)

    def _quiet_ib_flap(self, t: int, node: _Node, rng: np.random.Generator) -> None:
        hca = f"0000:{HCA_BUS[int(rng.integers(node.hcas))]}:00"
        down, up = self.real.pick(rng, "ib_link_down"), self.real.pick(rng, "ib_link_up")
        if down and up:
            self._quiet(t, node, rng, down, hca)
            self._quiet(t + int(rng.integers(S, 5 * S)), node, rng, up, hca)

    def _quiet_oom_other(self, t: int, node: _Node, rng: np.random.Generator) -> None:
        self._quiet(t, node, rng, self.real.pick(rng, "oom_kill", test=lambda r: "python" not in r.texts[0]), None)

    def _quiet(self, t: int, node: _Node, rng: np.random.Generator, record: Record | None, pci: str | None) -> None:
        if record is not None:
            self._kernel(node, t, *rehome(record, pci=pci, host=node.name, pid=int(rng.integers(2000, 4_000_000))))

    def _real_record(self, kind: str, test=None, **fields) -> Record | None:
        """A real record for an incident, half the time when the run has them."""
        if self.real is None or self.rng.random() < 0.5:
            return None
        return self.real.pick(self.rng, kind, test, **fields)

    # --- writing

    def _boot_lines(self, node: _Node) -> list[str]:
        lines, pace = [], self.rng.uniform(0.9, 1.1)  # how fast this machine boots
        for i, (offset, text) in enumerate(BOOT):
            t = node.boot + int(offset * pace * S) + i * 40 * (offset > 0)
            if "{gpu}" in text:
                lines += [f"{node.uptime(t + j)} {text.format(gpu=g.bus)}" for j, g in enumerate(node.gpus)]
            elif "{hca}" in text:
                lines += [f"{node.uptime(t + k)} {text.format(hca=HCA_BUS[k], k=k)}" for k in range(node.hcas)]
            else:
                lines.append(f"{node.uptime(t)} {text}")
        return lines

    def _flush(self, t0: int, t1: int) -> None:
        out, rng = self.out, self.rng
        for run in self.live:
            t, lines = run.progress(rng, t1)
            out.put(("job", run.id), t, lines)
        self.live = [r for r in self.live if not r.ended]
        names = [f"nodes/{n.name}/" for n in self.nodes]
        kt, kn, kmsg = self._alive(*self._due("kernel", KERNEL_NOISE, self.hosts, t0, t1))
        dmesg = [UPTIME % divmod(u, S) + " " + m for u, m in zip((kt - self.boots[kn]).tolist(), kmsg)]
        for i, a, b in _slices(kn):
            self.files.write(names[i] + "dmesg", dmesg[a:b])
        st, sn, body = self._alive(*self._due("syslog", SYSLOG_NOISE, self.hosts, t0, t1,
                                              also=(kt, kn, ["kernel: " + line for line in dmesg])))
        hosts = [f" {n.name} " for n in self.nodes]
        stamps = _syslog_stamps(st + self.skew[sn] if self.skew.any() else st)
        lines = [s + hosts[i] + b for s, i, b in zip(stamps, sn.tolist(), body)]
        for i, a, b in _slices(sn):
            self.files.write(names[i] + "syslog", lines[a:b])
        ct, _, msgs = self._due("ctl", CONTROLLER_NOISE, self.controller, t0, t1)
        self.files.write("slurm/slurmctld.log", [f"[{s}] {m}" for s, m in zip(_iso_strings(ct, "ms"), msgs)])
        self.files.write("slurm/jobcomp.log", out.take(("jobcomp",), t1)[1])
        for dest in out.job_dests():
            self.files.write(f"jobs/slurm-{dest[1]}.out", out.take(dest, t1)[1])

    def _due(self, kind: str, specs: tuple[_Noise, ...], hosts: _Hosts, t0: int, until: int,
             also: tuple[np.ndarray, np.ndarray, list[str]] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The hour's ``kind`` lines of every host: noise drawn from ``specs``, ``also`` and the
        outbox's, ordered by host and time; lines past ``until`` (bursts running over the hour) go
        back to the outbox."""
        times, where, texts = [], [], []
        for t, host, x in [_noise(specs, hosts, self.rng, t0, until)] + ([also] if also else []):
            times.append(t)
            where.append(host)
            texts += x
        for i in range(hosts.n):
            t, x = self.out.take((kind, i), until)
            times.append(t)
            where.append(np.full(len(t), i))
            texts += x
        t, host = np.concatenate(times), np.concatenate(where)
        order = np.lexsort((t, host))
        late = order[t[order] >= until].tolist()
        for j in late:
            self.out.put((kind, int(host[j])), int(t[j]), texts[j])
        order = order[t[order] < until]
        return t[order], host[order], [texts[j] for j in order.tolist()]

    def _alive(self, t: np.ndarray, host: np.ndarray, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Drop the lines of crashed nodes from their crash on, and of nodes whose logs were lost
        (scenario logs_lost) in that window."""
        if not self.crashed and not self.lost:
            return t, host, texts
        keep = t < self.dead_at[host]
        for index, (lo, hi) in self.lost.items():
            keep &= ~((host == index) & (t >= lo) & (t < hi))
        return t[keep], host[keep], [x for x, k in zip(texts, keep.tolist()) if k]

    def _ctl(self, t: int, *lines: str) -> None:
        self.out.put(("ctl", 0), t, list(lines))

    def _syslog(self, node: _Node, t: int, *lines: str) -> None:
        self.out.put(("syslog", node.index), t, list(lines))

    def _kernel(self, node: _Node, t: int, *lines: str) -> None:
        self.out.put(("kernel", node.index), t, list(lines))

    def _job(self, run: _Run, t, lines) -> None:
        self.out.put(("job", run.id), t, lines)

    # --- Slurm

    def _arrive(self, t: int) -> None:
        rng = self.rng
        kind = self.kinds[rng.choice(len(self.kinds), p=self.weights)]
        user = USERS[rng.integers(len(USERS))]
        seconds = int(rng.uniform(*kind.hours) * 3600) * S
        job = _Job(self.next_id, kind, user, int(rng.choice(kind.nodes)), seconds, t, t,
                   DATASETS[rng.integers(len(DATASETS))])
        self.next_id += 1
        self.queue.append(job)
        self._ctl(t, f"_slurm_rpc_submit_batch_job: JobId={job.id} InitPrio={int(rng.integers(4000, 9000))} "
                     f"usec={int(rng.integers(300, 3000))}")
        self._schedule(t + int(rng.integers(1000, 400_000)))

    def _schedule(self, t: int) -> None:
        """Start queued jobs on idle nodes in queue order; later jobs backfill unless the head starves."""
        free = [n for n in self.nodes if n.state == "idle"]
        head = True
        for job in list(self.queue):
            if job.eligible > t:
                continue
            if job.nodes <= len(free):
                self.queue.remove(job)
                self._start(t, job, free[:job.nodes], backfill=not head)
                free = free[job.nodes:]
            elif head and t - job.submit > 2 * HOUR:
                break
            else:
                head = False

    def _start(self, t: int, job: _Job, nodes: list[_Node], backfill: bool) -> None:
        rng, user = self.rng, job.user
        job.runs += 1
        if job.runs == 1:
            self.files.add(f"jobs/slurm-{job.id}.out", "nccl", keep_open=False, job=str(job.id))
        run = _Run(job, nodes, t, self.gpus, rng)
        for n in nodes:
            n.state, n.run = "alloc", run
        if backfill:
            self._ctl(t, f"backfill: Started JobId={job.id} in gpu on {run.nodelist}")
        else:
            self._ctl(t, f"sched: Allocate JobId={job.id} NodeList={run.nodelist} #CPUs={len(nodes) * CPUS_PER_NODE} Partition=gpu")
        self._syslog(nodes[0], t + 40_000, f"slurmd[{nodes[0].daemons['slurmd']}]: slurmd: Launching batch job {job.id} for UID {user[1]}")
        for k, n in enumerate(nodes):
            self._syslog(n, t + 2 * S + k * 3000,
                         f"slurmd[{n.daemons['slurmd']}]: slurmd: launch task StepId={job.id}.0 request from UID:{user[1]} "
                         f"GID:{user[1]} HOST:{nodes[0].ip} PORT:{int(rng.integers(32768, 61000))}",
                         f"slurmd[{n.daemons['slurmd']}]: slurmd: task/affinity: lllp_distribution: JobId={job.id} implicit auto "
                         "binding: cores,one_thread, dist 8192")
        self._job(run, t + S, self._header(run, t + S))
        if run.ranks > 1:
            self._nccl_init(run, t + 15 * S)
        if len(nodes) > 1 and rng.random() < 0.3:
            self._kernel(nodes[0], t + 16 * S, "TCP: request_sock_TCP: Possible SYN flooding on port 29500. "
                                               "Sending cookies.  Check SNMP counters.")
        fate = _outcome(rng)
        if fate == "TIMEOUT":
            run.end = run.stop = t + job.kind.limit * MINUTE
        elif fate == "CANCELLED":
            run.end = run.stop = t + int(job.seconds * rng.uniform(0.05, 0.9))
        elif fate == "FAILED":  # the application's own error, before its planned end
            self._at(t + 2 * MINUTE + int(job.seconds * rng.uniform(0, 0.4)), self._app_error, run)
        run.fate = fate if fate != "FAILED" else run.fate
        self._at(run.end, self._end, run)
        self.live.append(run)
        for n in nodes:  # a GPU failed unnoticed in the node's previous job (scenario prior_fault)
            if n.broken is not None:
                self._at(t + int(rng.integers(40 * S, 4 * MINUTE)), self._inherited, run, n)

    def _end(self, t: int, run: _Run) -> None:
        """A run's last lines: the job's tail, slurmctld completion, jobcomp, slurmstepd; nodes freed."""
        if run.ended or t != run.end:
            return
        run.ended = True
        job, first, rng = run.job, run.nodes[0].name, self.rng
        done = t + int(rng.integers(S // 2, 3 * S))
        if run.fate == "COMPLETED":
            self._job(run, t, [f"[{_py_stamp(t + run.skew0)}] [INFO] [{job.kind.script}:455] training finished: {run.step} steps in "
                               f"{(t - run.start) // HOUR}h{(t - run.start) % HOUR // MINUTE:02d}m"])
            if run.ranks > 1:
                self._job(run, t + 1000, [f"{run.prefix(r)} NCCL INFO comm {run.comms[r]} rank {r} nranks {run.ranks} cudaDev "
                                          f"{r % run.gpus} busId {run.where(r)[0].gpus[r % run.gpus].bus}000 - Destroy COMPLETE"
                                          for r in range(run.ranks)])
        elif run.fate in ("CANCELLED", "TIMEOUT"):
            cancelled = run.fate == "CANCELLED"
            self._ctl(t, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={job.id} uid {job.user[1]}" if cancelled
                      else f"Time limit exhausted for JobId={job.id}")
            why = "" if cancelled else " DUE TO TIME LIMIT"
            at = _iso(t + run.skew0)
            self._job(run, t + S // 2, [f"slurmstepd: error: *** JOB {job.id} ON {first} CANCELLED AT {at}{why} ***",
                                        f"slurmstepd: error: *** STEP {job.id}.0 ON {first} CANCELLED AT {at}{why} ***"])
            run.status, run.exit = "WTERMSIG 15", "0:15"
            done += int(rng.integers(1, 30)) * S
            if cancelled and self.scenario and job.id not in self.hit and rng.random() < 0.5:
                self._killed_xids(t + S // 2, run)
        if run.status:
            self._ctl(done, f"_job_complete: JobId={job.id} {run.status}", f"_job_complete: JobId={job.id} done")
        for k, n in enumerate(run.nodes):
            self._syslog(n, done + 5000 + k * 1000, f"slurmstepd[{run.stepd[k]}]: [{job.id}.0] done with job")
            if rng.random() < 0.3:
                self._kernel(n, done + 6000, "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
                                             "skipping further processing")
        self._syslog(run.nodes[0], done + 9000, f"slurmstepd[{run.stepd[0] - 7}]: [{job.id}.batch] done with job")
        self.out.put(("jobcomp",), done, _jobcomp(run, done))
        for n in run.nodes:
            n.run = None
            if n.state == "alloc":
                n.state = "idle"
        self._schedule(done + 10_000)

    def _header(self, run: _Run, t: int) -> list[str]:
        job = run.job
        stamp, script = _py_stamp(t + run.skew0), job.kind.script
        lines = [f"SLURM_JOB_ID={job.id} SLURM_JOB_NODELIST={run.nodelist} MASTER_ADDR={run.nodes[0].name} MASTER_PORT=29500",
                 f"[{stamp}] [INFO] [{script}:48] starting {job.kind.name} job {job.id} on {len(run.nodes)} node(s) "
                 f"{run.nodelist}: world_size={run.ranks}",
                 f"[{stamp}] [INFO] [{script}:73] dataset /datasets/{job.dataset}: {1 + job.id % 997} shards"]
        if job.runs > 1:
            lines.append(f"[{stamp}] [INFO] [{script}:131] resuming from /checkpoints/{job.user[0]}/{job.kind.name}-{job.id}/latest")
        return lines

    def _nccl_init(self, run: _Run, t: int) -> None:
        """Every rank's NCCL communicator setup, interleaved as ranks run concurrently."""
        n, gpus, rng = run.ranks, run.gpus, self.rng
        hcas = " ".join(f"[{k}]mlx5_{k}:1/IB" for k in range(run.nodes[0].hcas))
        ring = "   ".join(str(r) for r in range(n))
        times, lines = [], []
        for r in range(n):
            node, g, pid = run.where(r)
            f = dict(host=node.name, pid=pid, tid=pid + 61, dev=g, ip=node.ip, hcas=hcas, comm=run.comms[r], rank=r,
                     nranks=n, bus=node.gpus[g].bus, commid=run.comm_id, nnodes=len(run.nodes), local=gpus,
                     affinity="ffffffff,00000000,ffffffff" if g < gpus // 2 else "00000000,ffffffff,00000000",
                     tree=f"{r + 1 if (r + 1) % gpus else -1}/-1/-1->{r}->{r - 1 if r % gpus else -1}",
                     threads=512 if len(run.nodes) > 1 else 256)
            text = [x.format(**f) for x in NCCL_BOOT]
            if r == 0:
                text.insert(5, f"NCCL version {NCCL_VERSION}+cuda12.4")
                text += [f"{run.prefix(0, 61)} NCCL INFO Channel {c:02d}/24 :    {ring}" for c in range(2)]
            for c in range(4):
                nxt, prv = (r + 1) % n, (r - 1) % n
                if nxt // gpus == r // gpus:
                    text.append(f"{run.prefix(r, 61)} NCCL INFO Channel {c:02d}/0 : {r}[{g}] -> {nxt}[{nxt % gpus}] via P2P/IPC")
                else:
                    text.append(f"{run.prefix(r, 61)} NCCL INFO Channel {c:02d}/0 : {r}[{g}] -> {nxt}[{nxt % gpus}] [send] "
                                f"via NET/IB/{g % node.hcas}/GDRDMA")
                if prv // gpus != r // gpus:
                    text.append(f"{run.prefix(r, 61)} NCCL INFO Channel {c:02d}/0 : {prv}[{prv % gpus}] -> {r}[{g}] [receive] "
                                f"via NET/IB/{g % node.hcas}/GDRDMA")
            text += [x.format(**f) for x in NCCL_READY]
            base = t + int(rng.integers(0, 2 * S))
            times += [base + i * 1700 for i in range(len(text))]
            lines += text
        self._job(run, times, lines)

    # --- failures

    def _fail(self, run: _Run, hang: int, end: int, fate: str, status: str | None, exit_code: str) -> None:
        """Decide a run's early end: progress stops at ``hang``, Slurm ends it at ``end``."""
        run.doomed = True
        run.stop, run.end, run.fate, run.status, run.exit = hang, end, fate, status, exit_code
        self._at(end, self._end, run)

    def _abort(self, run: _Run, t: int, rank: int, how: str, terminate: bool = False) -> int:
        """srun's lines when task ``rank`` dies and the step is killed; returns when they end."""
        node, _, _ = run.where(rank)
        lines = [f"srun: error: {node.name}: task {rank}: {how}"]
        if run.ranks > 1:
            lines.append(f"srun: Terminating StepId={run.id}.0" if terminate
                         else "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
            lines.append(f"slurmstepd: error: *** STEP {run.id}.0 ON {run.nodes[0].name} CANCELLED AT {_iso(t + S + run.skew0)} ***")
            for k, n in enumerate(run.nodes):
                others = [r for r in range(k * run.gpus, (k + 1) * run.gpus) if r != rank]
                if others:
                    lines.append(f"srun: error: {n.name}: task{'s' if len(others) > 1 else ''} {_ranges(others)}: Killed")
        self._job(run, [t + i * 2000 + (S if i > 1 else 0) for i in range(len(lines))], lines)
        return t + 3 * S

    def _traceback(self, run: _Run, t: int, rank: int, frame: tuple, exception: tuple[str, ...]) -> None:
        """A Python traceback on ``rank``, prefixed as torchrun prints it."""
        home = f"/home/{run.job.user[0]}/{run.job.kind.name}"
        frames = [(f.format(script=run.job.kind.script), line, fn, code) for f, line, fn, code in TRACEBACK] + [frame]
        body = ["Traceback (most recent call last):"]
        for path, line, fn, code in frames:
            body += [f'  File "{home}/{path}", line {line}, in {fn}', f"    {code}"]
        self._job(run, t, [f"[rank{rank}]: {x}" for x in body + list(exception)])

    def _app_error(self, t: int, run: _Run) -> None:
        """The run's own bug ends it: a traceback on one rank, srun kills the rest."""
        if run.doomed or run.ended or (self.scenario and (run.noisy or run.job.id in self.hit)):
            return
        rng = self.rng
        kind, path, line, fn, code, exc = APP_ERRORS[rng.integers(len(APP_ERRORS))]
        rank = int(rng.integers(run.ranks))
        node, g, _ = run.where(rank)
        self._traceback(run, t, rank, (path, line, fn, code),
                        (exc.format(dev=g, dataset=run.job.dataset, shard=int(rng.integers(0, 4000))),))
        done = self._abort(run, t + S // 2, rank, "Exited with exit code 1")
        self._fail(run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("user_error", t, run, node, None, kind, None)

    def _record(self, name: str, t: int, run: _Run, node: _Node, gpu: _Gpu | None, kind: str, code: int | None,
                nodes: list[str] | None = None, **extra) -> None:
        if self.real is not None and self.quiet_rng.random() < DISTRACTED:
            self._distract(t, run, node.name)
        self.incidents.append({"type": name, "node": node.name, "nodes": nodes or [node.name],
                               "gpu": gpu.pci if gpu else None, "job_id": run.id, "ts": _utc(t).isoformat(), "kind": kind,
                               "code": code, "category": TYPES[name][1], **extra})
        self.hit.add(run.job.id)

    def _plan_incidents(self, day: int) -> None:
        scale = len(self.nodes) / 16
        for name, (per_day, multi) in self.plan.items():
            n = per_day * scale * self.rate
            for _ in range(max(1, round(n)) if n > 0 and (len(self.nodes) > 1 or not multi) else 0):
                self._at(day + int(self.rng.integers(0, DAY)), self._incident, name)

    def _incident(self, t: int, name: str) -> None:
        """Inject incident ``name`` into a running job; retry later when none is eligible."""
        if self.horizon is not None and t + 20 * MINUTE > self.horizon:
            return
        multi = self.plan[name][1]
        runs = [r for r in self.live if not r.doomed and not r.ended and r.start + 10 * MINUTE < t < r.end - 20 * MINUTE
                and (len(r.nodes) > 1 or not multi)]
        if self.scenario:  # a job fails of one cause at most; noise goes to jobs that no incident hits
            runs = [r for r in runs if not r.noisy and r.job.id not in self.hit]
            if name == "xid_noise":
                runs = [r for r in runs if len(r.nodes) == 1] or runs
        if not runs:
            self._at(t + 20 * MINUTE, self._incident, name)
            return
        run = runs[self.rng.integers(len(runs))]
        getattr(self, "_" + name)(t, run)

    def _pick(self, run: _Run) -> tuple[int, _Node, int, int]:
        rank = int(self.rng.integers(run.ranks))
        return (rank, *run.where(rank))

    def _xid79(self, t: int, run: _Run) -> None:
        """A GPU falls off the bus: collectives hang, every rank's watchdog fires after 10 minutes,
        the job fails, the stuck process makes the node drain with 'Kill task failed'."""
        rng = self.rng
        rank, node, g, pid = self._pick(run)
        gpu = node.gpus[g]
        node.fallen, node.state = g, "drain"
        record = self._real_record("gpu_xid", code=79)
        if record is not None:
            self._kernel(node, t, *rehome(record, pci=gpu.pci, host=node.name, pid=pid))
        elif self.scenario and rng.random() < 0.5:  # the real sample's shape: no pid, a sanity-check line after
            self._kernel(node, t, *_real("xid79", pci=gpu.pci, uuid=gpu.uuid, serial=gpu.serial))
        else:
            self._kernel(node, t, f"NVRM: GPU at PCI:{gpu.pci}: {gpu.uuid}", f"NVRM: GPU Board Serial Number: {gpu.serial}",
                         f"NVRM: Xid (PCI:{gpu.pci}): 79, pid={pid}, name=python, GPU has fallen off the bus.",
                         f"NVRM: GPU {gpu.pci}.0: GPU has fallen off the bus.",
                         f"NVRM: GPU {gpu.pci}.0: GPU serial number is {gpu.serial}.",
                         "NVRM: kgspRcAndNotifyAllChannels_IMPL: RC all channels for critical error 79.")
        hung = t + 123 * S
        self._kernel(node, hung, f"INFO: task python:{pid} blocked for more than 122 seconds.",
                     f"      Tainted: P           OE      {KERNEL}",
                     '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
                     f"task:python          state:D stack:0     pid:{pid}  ppid:{pid - g - 1} flags:0x00004002")
        seq, numel = int(rng.integers(800, 90_000)), int(rng.choice([9801523, 2106881, 544997376, 5056]))
        fired = t + 600 * S - int(rng.integers(0, 3 * S))
        times, lines = [], []
        for r in range(run.ranks):
            w = fired + int(rng.integers(0, 900_000))
            ran = 600_000 + (w - fired) // 1000 + 20
            timeout = (f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                       f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for {ran} milliseconds before timing out.")
            pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
            c = w + run.skew(r)
            text = [f"[rank{r}]:[E{_glog(c)} ProcessGroupNCCL.cpp:616] {timeout}",
                    f"[rank{r}]:[E{_glog(c + 2500)} ProcessGroupNCCL.cpp:1785] {pg} Exception (either an error or timeout) "
                    f"detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + 3}, last completed NCCL work: {seq - 1}.",
                    f"[rank{r}]:[E{_glog(c + 2600)} ProcessGroupNCCL.cpp:630] [Rank {r}] Some NCCL operations have failed or "
                    "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                    "corrupted/incomplete data.",
                    f"[rank{r}]:[E{_glog(c + 2700)} ProcessGroupNCCL.cpp:636] [Rank {r}] To avoid data inconsistency, we are "
                    "taking the entire process down.",
                    "terminate called after throwing an instance of 'c10::DistBackendError'",
                    f"  what():  {pg} Process group watchdog thread terminated with exception: {timeout}"]
            times += [w, w + 2500, w + 2600, w + 2700, w + 3000, w + 3000]
            lines += text
        self._job(run, times, lines)
        done = self._abort(run, fired + 2 * S, (rank + 1) % run.ranks, "Aborted (core dumped)")
        end = done + 30 * S
        self._fail(run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
        stuck = end + int(rng.integers(60, 90)) * S
        k = run.nodes.index(node)
        self._syslog(node, stuck, f"slurmstepd[{run.stepd[k]}]: error: *** JOB {run.id} STEPD TERMINATED ON {node.name} "
                                  f"AT {_iso(stuck + node.skew)} DUE TO JOB NOT ENDING WITH SIGNALS ***")
        self._ctl(stuck + 2000, f"error: slurmd error running JobId={run.id} on node(s)={node.name}: Kill task failed",
                  f"update_node: node {node.name} reason set to: Kill task failed",
                  f"update_node: node {node.name} state set to DRAINING")
        self._at(stuck + int(rng.integers(2 * HOUR, 6 * HOUR)), self._repaired, node,
                 [f"update_node: node {node.name} state set to IDLE"])
        self._record("xid79", t, run, node, gpu, "gpu_xid", 79)

    def _ib_link_down(self, t: int, run: _Run) -> None:
        """An HCA port goes down: NCCL's IB transport fails on the ranks using it, the job aborts."""
        rng = self.rng
        rank, node, g, pid = self._pick(run)
        hca = g % node.hcas
        dev = f"mlx5_core 0000:{HCA_BUS[hca]}:00.0 mlx5_{hca}"
        record = self._real_record("ib_link_down")
        self._kernel(node, t, *(rehome(record, pci=f"0000:{HCA_BUS[hca]}:00", host=node.name) if record
                                else [f"{dev}: Port: 1 Link DOWN"]))
        self._kernel(node, t + int(rng.integers(20, 180)) * S, f"{dev}: Port: 1 Link ACTIVE")
        peer = (rank + run.gpus) % run.ranks
        peer_node = run.where(peer)[0]
        w = t + int(rng.integers(2 * S, 8 * S))
        for r, other, side in ((rank, peer_node, "Recv"), (peer, node, "Send")):
            p = run.prefix(r, 63)
            self._job(run, [w + i * 300 for i in range(4)], [
                f"{p} transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {other.ib_ip}<{int(rng.integers(32768, 61000))}> "
                f"with error 12, opcode 0, len 0, vendor err 129 ({side})",
                f"{p} NCCL INFO transport/net.cc:1008 -> 6", f"{p} NCCL INFO proxy.cc:679 -> 6",
                f"{p} NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]"])
            w += 400_000
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        self._job(run, w + 3 * S, [
            f"[rank{rank}]:[E{_glog(w + 3 * S + run.skew(rank))} ProcessGroupNCCL.cpp:1595] {pg} Process group watchdog thread terminated "
            f"with exception: NCCL error: remote process exited or there was a network error, NCCL version {NCCL_VERSION}",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            "terminate called after throwing an instance of 'c10::DistBackendError'"])
        done = self._abort(run, w + 5 * S, rank, "Aborted (core dumped)")
        self._fail(run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("ib_link_down", t, run, node, None, "ib_link_down", None)

    def _oom(self, t: int, run: _Run) -> None:
        """The kernel's OOM killer kills one rank (host memory); slurmstepd reports it, the step is killed."""
        rng = self.rng
        rank, node, g, pid = self._pick(run)
        rss, frss, shm = int(rng.integers(180_000_000, 260_000_000)), int(rng.integers(60_000, 900_000)), int(rng.integers(10_000, 90_000))
        record = self._real_record("oom_kill")
        if record is not None:
            self._kernel(node, t, *rehome(record, host=node.name, pid=pid))
        else:
            self._oom_lines(t, run, node, g, pid, rss, frss, shm)
        self._kernel(node, t + int(rng.integers(300_000, 1_500_000)),
                     f"oom_reaper: reaped process {pid} (python), now anon-rss:0kB, file-rss:{frss}kB, shmem-rss:{shm}kB")
        self._job(run, t + 2 * S, f"slurmstepd: error: Detected 1 oom_kill event in StepId={run.id}.0. "
                                  "Some of the step tasks have been OOM Killed.")
        done = self._abort(run, t + 2 * S + 5000, rank, "Out Of Memory", terminate=True)
        self._fail(run, t, done + int(rng.integers(5, 30)) * S, "OUT_OF_MEMORY", "WTERMSIG 9", "0:9")
        self._record("oom", t, run, node, None, "oom_kill", None)

    def _oom_lines(self, t: int, run: _Run, node: _Node, g: int, pid: int, rss: int, frss: int, shm: int) -> None:
        rng, uid = self.rng, run.job.user[1]
        self._kernel(node, t, "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
                     f"CPU: {int(rng.integers(0, 224))} PID: {pid} Comm: python Tainted: P           OE      {KERNEL}",
                     "Hardware name: NVIDIA DGXH100/DGXH100, BIOS 1.5.1 02/22/2024",
                     f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
                     f"task_memcg=/system.slice/slurmstepd.scope/job_{run.id}/step_0/user/task_{g},task=python,pid={pid},uid={uid}",
                     f"Out of memory: Killed process {pid} (python) total-vm:{rss + 61_000_000}kB, anon-rss:{rss}kB, "
                     f"file-rss:{frss}kB, shmem-rss:{shm}kB, UID:{uid} pgtables:{rss // 500}kB oom_score_adj:0")

    def _app_xid(self, t: int, run: _Run) -> None:
        """An application fault the driver reports as Xid 13 or 31: the job's own bug, not the GPU's."""
        rng = self.rng
        rank, node, g, pid = self._pick(run)
        gpu, code = node.gpus[g], int(rng.choice([13, 31]))
        head = f"NVRM: Xid (PCI:{gpu.pci}): {code}, pid={pid}, name=python, "
        gpc, tpc = int(rng.integers(0, 8)), int(rng.integers(0, 9))
        record = self._real_record("gpu_xid", test=lambda r: r.fields.get("code") in APP_XIDS)
        if record is not None:
            code = record.fields["code"]
            self._kernel(node, t, *rehome(record, pci=gpu.pci, host=node.name, pid=pid))
        elif code == 13:
            self._kernel(node, t, head + f"Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM 0): Out Of Range Address",
                         head + f"Graphics SM Global Exception on (GPC {gpc}, TPC {tpc}, SM 0): Multiple Warp Errors",
                         head + "Graphics Exception: ESR 0x524648=0x1000e 0x524650=0x0 0x524644=0xd3eff2 0x52464c=0x17f")
        else:
            self._kernel(node, t, head + f"Ch 000000{int(rng.integers(8, 64)):02x}, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                                         f"GPCCLIENT_T1_{gpc} faulted @ 0x7f{int(rng.integers(16, 255)):02x}_4c000000. "
                                         "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
        self._traceback(run, t + S // 2, rank, ("trainer.py", 171, "training_step", "loss.backward()"), CUDA_ILLEGAL_ADDRESS)
        done = self._abort(run, t + S, rank, "Exited with exit code 1")
        self._fail(run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("app_xid", t, run, node, gpu, "gpu_xid", code)

    def _node_not_responding(self, t: int, run: _Run) -> None:
        """slurmd on one node hangs: slurmctld marks it DOWN after SlurmdTimeout, kills and requeues
        the job; an admin restarts slurmd later."""
        rng = self.rng
        _, node, _, _ = self._pick(run)
        node.state = "down"
        down = t + 300 * S
        self._ctl(t, f"error: Nodes {node.name} not responding")
        self._ctl(t + 100 * S, f"error: Nodes {node.name} not responding")
        self._ctl(down, f"error: Nodes {node.name} not responding, setting DOWN",
                  f"Killing JobId={run.id} on failed node {node.name}", f"Requeuing JobId={run.id}")
        self._job(run, down + S, [f"slurmstepd: error: *** JOB {run.id} ON {run.nodes[0].name} CANCELLED AT {_iso(down + run.skew0)} DUE TO "
                                  "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
                                  f"srun: error: Node failure on {node.name}",
                                  "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."])
        self._fail(run, t, down + 2 * S, "NODE_FAIL", None, "0:0")
        job = run.job
        job.eligible = down + 2 * MINUTE
        self.queue.insert(0, job)
        self._at(job.eligible, self._schedule)
        back = down + int(rng.integers(5 * MINUTE, 35 * MINUTE))
        self._syslog(node, back - 3 * S, f"slurmd[{node.daemons['slurmd']}]: slurmd: slurmd version 23.11.4 started",
                     f"slurmd[{node.daemons['slurmd']}]: slurmd: CPUs={CPUS_PER_NODE} Boards=1 Sockets=2 Cores=32 Threads=2 "
                     f"Memory=2063937 TmpDisk=3506394 Uptime={(back - node.boot) // S} CPUSpecList=(null) "
                     "FeaturesAvail=(null) FeaturesActive=(null)")
        self._at(back, self._repaired, node, [f"Node {node.name} now responding",
                                              f"node_did_resp: node {node.name} returned to service"])
        self._record("node_not_responding", t, run, node, None, "slurm_node_not_responding", None)

    # --- scenario mode

    def _drain(self, node: _Node, t: int, reason: str) -> None:
        """slurmctld drains ``node`` at ``t``; an admin returns it to service hours later."""
        node.state = "drain"
        self._ctl(t, f"update_node: node {node.name} reason set to: {reason}",
                  f"update_node: node {node.name} state set to DRAINING")
        self._at(t + int(self.rng.integers(2 * HOUR, 6 * HOUR)), self._repaired, node,
                 [f"update_node: node {node.name} state set to IDLE"])

    def _watchdog(self, run: _Run, r: int, w: int, seq: int, enqueued: int, completed: int, op: str, numel: int,
                  new: bool) -> tuple[list[int], list[str]]:
        """Rank ``r``'s PyTorch watchdog timing out on collective ``seq`` at ``w``, as the real samples
        print it (``new``: a newer PyTorch's wording), then the process going down."""
        ran = 600_000 + int(self.rng.integers(5, 120))
        c = w + run.skew(r)
        values = dict(rank=r, seq=seq, op=op, numel=numel, timeout=600000, ran=ran, enqueued=enqueued, completed=completed)
        timeout = REAL["watchdog"][1][0].format(stamp=_c10(c), **values)
        if new:
            rest = [x.format(stamp=_c10(c + 2400 + 100 * i), **values) for i, x in enumerate(REAL["watchdog_new"][1])]
        else:
            rest = [REAL["watchdog"][1][1].format(stamp=_c10(c + 2500), **values),
                    f"[rank{r}]:[E{_c10(c + 2600)} ProcessGroupNCCL.cpp:630] [Rank {r}] Some NCCL operations have failed or "
                    "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                    "corrupted/incomplete data.",
                    f"[rank{r}]:[E{_c10(c + 2700)} ProcessGroupNCCL.cpp:636] [Rank {r}] To avoid data inconsistency, we are "
                    "taking the entire process down."]
        lines = [timeout, *rest, "terminate called after throwing an instance of 'c10::DistBackendError'",
                 f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process group watchdog thread terminated with "
                 f"exception: {timeout.split('cpp:616] ', 1)[1]}"]
        return [w + 2500 * min(i, 1) + 100 * i for i in range(len(lines))], lines

    def _collective(self) -> tuple[int, str, int, bool]:
        """A collective that hangs: sequence number, op, element count, whether PyTorch is the newer one."""
        rng = self.rng
        return (int(rng.integers(800, 90_000)), str(rng.choice(["ALLREDUCE", "_REDUCE_SCATTER_BASE", "_ALLGATHER_BASE"])),
                int(rng.choice([9801523, 2106881, 544997376, 5056])), bool(rng.random() < 0.5))

    def _all_time_out(self, run: _Run, fired: int, queued: int) -> int:
        """Every rank's watchdog fires within a second of ``fired`` on the same collective (up to
        ``queued`` - 1 more enqueued behind it); returns the last line's time."""
        rng = self.rng
        seq, op, numel, new = self._collective()
        times, lines = [], []
        for r in range(run.ranks):
            a, b = self._watchdog(run, r, fired + int(rng.integers(0, 900_000)), seq, seq + int(rng.integers(0, queued)),
                                  seq - 1, op, numel, new)
            times += a
            lines += b
        self._job(run, times, lines)
        return max(times)

    def _gpu_hang(self, t: int, run: _Run, rank: int) -> int:
        """The GPU of ``rank`` stops: every rank's watchdog times out 10 minutes later, the job fails."""
        rng = self.rng
        last = self._all_time_out(run, t + 600 * S - int(rng.integers(0, 3 * S)), 4)
        done = self._abort(run, last + 2 * S, (rank + 1) % run.ranks, "Aborted (core dumped)")
        end = done + 30 * S
        self._fail(run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
        return end

    def _fatal_xid(self, t: int, run: _Run) -> None:
        """A node-fault Xid on one GPU: uncorrectable ECC (48, 64, 94, 95: the rank's CUDA call fails, the
        job aborts) or the GSP stops answering (119, 120: the GPU hangs, every rank's watchdog fires)."""
        rng = self.rng
        rank, node, g, pid = self._pick(run)
        gpu, code = node.gpus[g], int(rng.choice(FATAL_XIDS))
        head, anon = f"NVRM: Xid (PCI:{gpu.pci}): {code}, ", "pid='<unknown>', name=<unknown>, "
        addr = int(rng.integers(0x1000000, 0xfffffffff))
        lines = [f"NVRM: GPU at PCI:{gpu.pci}: {gpu.uuid}"]
        record = self._real_record("gpu_xid", test=lambda r: r.fields.get("code") in FATAL_XIDS + HANG_XIDS)
        if record is not None:
            code = record.fields["code"]
            lines = rehome(record, pci=gpu.pci, host=node.name, pid=pid)
        elif code == 48:
            lines.append(head + anon + f"An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                                       f"at physAddr 0x{addr:x} partition {int(rng.integers(0, 20))}, "
                                       f"subpartition {int(rng.integers(0, 4))}.")
            if rng.random() < 0.5:
                lines.append(f"NVRM: Xid (PCI:{gpu.pci}): 63, " + anon +
                             f"Row Remapper: New row (0x{addr:016x}) marked for remapping, reset gpu to activate.")
        elif code == 64:
            lines.append(head + anon + f"Row Remapper: Failed to remap row (0x{addr:016x}): no spare rows left in bank "
                                       f"{int(rng.integers(0, 16))}, reset gpu and run field diagnostics.")
        elif code == 94:
            lines.append(head + f"pid={pid}, name=python, Contained: SM (0x1). RST: No, D-RST: No")
        elif code == 95:
            lines.append(head + f"pid={pid}, name=python, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No")
        elif code == 119:
            ctl = f"(0x{int(rng.choice([0x20802a02, 0x20809004, 0x90cc0301])):08x} 0x{int(rng.integers(1, 0x700)):x})"
            rpc = head + f"pid={pid}, name=python, Timeout after 6s of waiting for RPC response from GPU{g} GSP! " \
                         f"Expected function 76 (GSP_RM_CONTROL) {ctl}."
            lines.append(rpc)
            self._kernel(node, t + 6 * S, rpc)
            self._kernel(node, t + 12 * S, rpc)
        else:  # 120: the real sample
            store = bool(rng.random() < 0.5)
            lines = _real("xid120", pci=gpu.pci, uuid=gpu.uuid, access="store" if store else "load",
                          cause="0xf" if store else "0xd", pc=f"0x{int(rng.integers(0x1300000, 0x1500000)):x}",
                          part=int(rng.integers(2, 5)), task=3, libos=int(rng.integers(4, 6)), ts=(t - node.boot) // S)
        self._kernel(node, t, *lines)
        if code in HANG_XIDS:
            node.state = "drain"
            end = self._gpu_hang(t, run, rank)
            self._drain(node, end + int(rng.integers(60, 90)) * S, "Kill task failed")
        else:
            self._traceback(run, t + S // 2, rank, ("trainer.py", 171, "training_step", "loss.backward()"), CUDA_ECC)
            done = self._abort(run, t + S, rank, "Exited with exit code 1")
            end = done + int(rng.integers(5, 30)) * S
            self._fail(run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
            if code != 94:  # a contained error leaves the GPU usable
                node.state = "drain"
                self._drain(node, end + int(rng.integers(20, 120)) * S, f"NHC: nv_health: GPU {g} Xid {code}")
        self._record("fatal_xid", t, run, node, gpu, "gpu_xid", code)

    def _net_errors(self, run: _Run, t: int, hit: list[_Node], k: int) -> None:
        """NCCL's IB transport fails on the ranks using rail ``k`` of the ``hit`` nodes; the job aborts."""
        rng, gpus = self.rng, run.gpus
        w = t + int(rng.integers(2 * S, 8 * S))
        plugin = rng.random() < 0.4
        pairs = []
        for node in hit[:2]:
            rank = run.nodes.index(node) * gpus + k % gpus
            peer = (rank + gpus) % run.ranks
            pairs += [(rank, node, run.where(peer)[0], "Recv"), (peer, run.where(peer)[0], node, "Send")]
        for rank, me, other, side in pairs:
            prefix, port = run.prefix(rank, 63), int(rng.integers(32768, 61000))
            if plugin:
                lines = _real("ib_warn_plugin", prefix=prefix, peer=other.ib_ip, port=port, err=12, opcode=0, len=0,
                              vendor=129, side=side, lgid=me.ib_ip, rgid=other.ib_ip)
            else:
                lines = _real("ib_warn", prefix=prefix, peer=f"fe80::966d:ae03:{other.index:x}:{0xdf00 + k:x}%ib{k}",
                              port=port, err=12, opcode=0, len=0, vendor=129, side=side)
            self._job(run, [w + i * 300 for i in range(len(lines))], lines)
            w += 400_000
        rank = pairs[0][0]
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        self._job(run, w + 3 * S, [
            f"[rank{rank}]:[E{_c10(w + 3 * S + run.skew(rank))} ProcessGroupNCCL.cpp:1595] {pg} Process group watchdog "
            f"thread terminated with exception: NCCL error: remote process exited or there was a network error, "
            f"NCCL version {NCCL_VERSION}",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            "terminate called after throwing an instance of 'c10::DistBackendError'"])
        done = self._abort(run, w + 5 * S, rank, "Aborted (core dumped)")
        self._fail(run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")

    def _ib_switch(self, t: int, run: _Run) -> None:
        """A leaf switch fails: one rail's links go down on all of its 4-8 consecutive nodes within a
        minute; every multi-node job on them fails with NCCL network errors (one record per job)."""
        rng, n = self.rng, len(self.nodes)
        size = min(self.leaf, n)
        if size < 4:  # no leaf switch with several nodes in so small a cluster
            self._ib_link_down(t, run)
            return
        target = run.nodes[int(rng.integers(len(run.nodes)))]
        lo = min(target.index - target.index % size, n - size)
        k = int(rng.integers(target.hcas))
        offsets = np.sort(rng.integers(0, 50 * S, size))
        offsets = (offsets - offsets[0])[rng.permutation(size)].tolist()
        pci = f"0000:{HCA_BUS[k]}:00.0"
        back = t + int(rng.integers(8, 25)) * MINUTE
        down: dict[str, int] = {}
        for node, off in zip(self.nodes[lo:lo + size], offsets):
            if self.dead_at[node.index] <= t:
                continue
            down[node.name] = t + off
            self._kernel(node, t + off, f"mlx5_core {pci} mlx5_{k}: Port: 1 Link DOWN")
            up = back + off + int(rng.integers(0, 3 * S))
            init, active = _real("link_up", pci=pci, k=k)
            self._kernel(node, up, init)
            self._kernel(node, up + int(rng.integers(S, 4 * S)), active)
        runs = [r for r in self.live if not r.doomed and not r.ended and len(r.nodes) > 1 and r.start + MINUTE < t
                and t + 2 * MINUTE < r.end and r.job.id not in self.hit and any(x.name in down for x in r.nodes)]
        for r in runs:
            hit = sorted((x for x in r.nodes if x.name in down), key=lambda x: down[x.name])
            first = down[hit[0].name]
            self._net_errors(r, first, hit, k)
            self._record("ib_switch", first, r, hit[0], None, "ib_link_down", None, nodes=sorted(x.name for x in hit),
                         switch_nodes=sorted(down))

    def _hung_rank(self, t: int, run: _Run) -> None:
        """One rank stops issuing collectives (a deadlock in user code, a stuck data loader): no kernel
        or Slurm event; 10 minutes later every other rank's watchdog times out on collective N with
        N-1 completed, while the hung rank prints nothing or times out on N-1 (it never enqueued N)."""
        rng = self.rng
        hung, node, _, _ = self._pick(run)
        seq, op, numel, new = self._collective()
        silent = rng.random() < 0.5
        fired = t + 600 * S + int(rng.integers(0, 2 * S))
        times, lines = [], []
        for r in range(run.ranks):
            if r == hung:
                if silent:
                    continue
                a, b = self._watchdog(run, r, fired - int(rng.integers(S, 20 * S)), seq - 1, seq - 1, seq - 2, op, numel, new)
            else:
                a, b = self._watchdog(run, r, fired + int(rng.integers(0, 900_000)), seq, seq + int(rng.integers(0, 3)),
                                      seq - 1, op, numel, new)
            times += a
            lines += b
        self._job(run, times, lines)
        done = self._abort(run, max(times) + 2 * S, (hung + 1) % run.ranks, "Aborted (core dumped)")
        self._fail(run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("hung_rank", t, run, node, None, "nccl_timeout", None, rank=hung,
                     evidence_ts=_utc(min(times)).isoformat())

    def _node_crash(self, t: int, run: _Run) -> None:
        """A node dies (hard hang, power): its logs stop, slurmctld marks it DOWN after SlurmdTimeout,
        the other ranks lose their peers; the job ends NODE_FAIL. The node stays down. When the batch
        host (the job's first node) is the one that died, the job's output just stops too."""
        rng = self.rng
        if len(self.crashed) >= max(1, len(self.nodes) // 4):  # keep most of the cluster up
            return
        k = int(rng.integers(1, len(run.nodes))) if rng.random() < 0.75 else 0
        node, gpus = run.nodes[k], run.gpus
        node.state = "down"
        self.dead_at[node.index] = t
        self.crashed.append(node)
        seen = t + int(rng.integers(30, 100)) * S
        down = seen + 200 * S
        self._ctl(seen, f"error: Nodes {node.name} not responding")
        self._ctl(seen + 100 * S, f"error: Nodes {node.name} not responding")
        self._ctl(down, f"error: Nodes {node.name} not responding, setting DOWN",
                  f"Killing JobId={run.id} on failed node {node.name}")
        if k:
            w = t + int(rng.integers(2 * S, 20 * S))
            socket = rng.random() < 0.4
            for r, side in (((k * gpus - 1) % run.ranks, "Send"), (((k + 1) * gpus) % run.ranks, "Recv")):
                prefix, port = run.prefix(r, 63), int(rng.integers(32768, 61000))
                if socket:
                    lines = _real("socket_closed", prefix=prefix, peer=node.name, port=port,
                                  op=f"0x{int(rng.integers(0x55d000000000, 0x55dfffffffff)):x}")
                else:
                    lines = _real("ib_warn", prefix=prefix, peer=node.ib_ip, port=port, err=12, opcode=0, len=0,
                                  vendor=129, side=side)
                pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
                lines += [f"[rank{r}]:[E{_c10(w + 3 * S + run.skew(r))} ProcessGroupNCCL.cpp:1595] {pg} Process group "
                          f"watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
                          f"network error, NCCL version {NCCL_VERSION}",
                          "terminate called after throwing an instance of 'c10::DistBackendError'"]
                self._job(run, [w + i * 300 + (3 * S if i >= len(lines) - 2 else 0) for i in range(len(lines))], lines)
                w += 500_000
            alive = [(n, range(i * gpus, (i + 1) * gpus)) for i, n in enumerate(run.nodes) if i != k]
            self._job(run, [w + 5 * S + i * 2000 for i in range(len(alive))],
                      [f"srun: error: {n.name}: tasks {_ranges(list(ranks))}: Aborted (core dumped)" for n, ranks in alive])
            self._job(run, [down + S, down + S, down + S + 2000], [
                f"srun: error: Node failure on {node.name}",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                f"slurmstepd: error: *** JOB {run.id} ON {run.nodes[0].name} CANCELLED AT {_iso(down + run.skew0)} DUE TO "
                "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"])
        self._fail(run, t, down + 2 * S, "NODE_FAIL", None, "0:0")
        self._record("node_crash", t, run, node, None, "slurm_node_not_responding", None, evidence_ts=_utc(seen).isoformat())

    def _logs_lost(self, t: int, run: _Run) -> None:
        """A GPU falls off the bus on a node whose kernel and syslog lines of the hour never reach the
        store (its log shipping broke, its disk filled): every rank's watchdog fires, nothing names the
        node. The honest verdict is undetermined, naming the node whose logs are missing."""
        before = len(self.incidents)
        self._xid79(t, run)
        if len(self.incidents) > before:  # its lines are still in the outbox: lose them
            incident = self.incidents[-1]
            self.lost[next(n.index for n in run.nodes if n.name == incident["node"])] = (t - 20 * MINUTE, t + HOUR)
            incident.update(type="logs_lost", unsure_ok=True)

    def _distract(self, t: int, run: _Run, culprit: str) -> None:
        """An unrelated alarming line on another node of a failing job, minutes before its failure:
        an uncorrected but non-fatal PCIe error, a corrected one, a corrected memory error."""
        others = [n for n in run.nodes if n.name != culprit]
        if not others or self.real is None:
            return
        rng = self.quiet_rng
        node = others[int(rng.integers(len(others)))]
        at = t - int(rng.integers(MINUTE, 10 * MINUTE))
        pick = int(rng.integers(3))
        record = (self.real.pick(rng, "pcie_aer", aer="non_fatal") if pick == 0 else
                  self.real.pick(rng, "pcie_aer", aer="corrected") if pick == 1 else
                  self.real.pick(rng, "memory_ecc", test=_corrected))
        self._quiet(at, node, rng, record, node.gpus[int(rng.integers(len(node.gpus)))].pci)

    def _user_bug_all(self, t: int, run: _Run) -> None:
        """Every rank hits the same bug at once (a bad config, a shape mismatch): the same traceback on
        every rank within a second, no hardware event. The job's own fault, on no node in particular."""
        rng = self.rng
        kind, path, line, fn, code, exc = APP_ERRORS[1 + int(rng.integers(len(APP_ERRORS) - 1))]
        shard = int(rng.integers(0, 4000))
        for r in range(run.ranks):
            self._traceback(run, t + int(rng.integers(0, S)), r, (path, line, fn, code),
                            (exc.format(dev=run.where(r)[1], dataset=run.job.dataset, shard=shard),))
        done = self._abort(run, t + 2 * S, 0, "Exited with exit code 1")
        self._fail(run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("user_bug_all", t, run, run.nodes[0], None, kind, None, nodes=[n.name for n in run.nodes])

    def _silent_hang(self, t: int, run: _Run) -> None:
        """A collective hangs on every rank at once (an NCCL or framework bug): every rank's watchdog
        fires on the same collective, no rank lags, no node logs anything. No node is at fault."""
        rng = self.rng
        last = self._all_time_out(run, t + 600 * S, 3)
        done = self._abort(run, last + 2 * S, int(rng.integers(run.ranks)), "Aborted (core dumped)")
        self._fail(run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("silent_hang", t, run, run.nodes[0], None, None, None, nodes=[n.name for n in run.nodes])

    def _prior_fault(self, t: int, run: _Run) -> None:
        """A GPU fails uncorrectably in one job and Slurm does not notice (no drain): the job fails of
        it (a fatal_xid incident), and the next job to land on the node fails minutes into its run with
        a misleading CUDA error on that GPU. The previous job's Xid explains the next job's failure."""
        rank, node, g, _ = self._pick(run)
        gpu, code = node.gpus[g], int(self.rng.choice((48, 64, 95)))
        record = self._real_record("gpu_xid", test=lambda r: r.fields.get("code") in (48, 64, 95))
        if record is not None:
            code = record.fields["code"]
        lines = (rehome(record, pci=gpu.pci, host=node.name) if record is not None else
                 [f"NVRM: Xid (PCI:{gpu.pci}): {code}, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
                  f"error (DBE) has been detected on GPU in the framebuffer at physAddr 0x{int(self.rng.integers(1 << 24, 1 << 36)):x}."])
        self._kernel(node, t, *lines)
        self._traceback(run, t + S // 2, rank, ("trainer.py", 171, "training_step", "loss.backward()"), CUDA_ECC)
        done = self._abort(run, t + S, rank, "Exited with exit code 1")
        self._fail(run, t, done + int(self.rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
        self._record("fatal_xid", t, run, node, gpu, "gpu_xid", code)
        node.broken = (g, t, code)

    def _inherited(self, t: int, run: _Run, node: _Node) -> None:
        """The next run on a node whose GPU failed before (see :meth:`_prior_fault`) dies of it."""
        if run.doomed or run.ended or node.broken is None:
            return
        g, since, code = node.broken
        node.broken = None
        rank = run.nodes.index(node) * run.gpus + g
        error = str(self.rng.choice(["RuntimeError: CUDA error: uncorrectable ECC error encountered",
                                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. "
                                     f"GPU {g} has a total capacity of 79.11 GiB of which 0 bytes is free.",
                                     "RuntimeError: CUDA error: unknown error"]))
        self._traceback(run, t, rank, ("trainer.py", 96, "setup", "model.to(device)"), (error,))
        done = self._abort(run, t + S // 2, rank, "Exited with exit code 1")
        end = done + int(self.rng.integers(5, 30)) * S
        self._fail(run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
        self._drain(node, end + int(self.rng.integers(60, 600)) * S, f"NHC: nv_health: GPU {g} Xid {code}")  # twice: noticed
        self._record("prior_fault", since, run, node, node.gpus[g], "gpu_xid", code, run_ts=_utc(t).isoformat())

    def _xid_noise(self, t: int, run: _Run) -> None:
        """An application Xid (13 or 31) that the job survives; no incident."""
        rng = self.rng
        _, node, g, pid = self._pick(run)
        gpu = node.gpus[g]
        run.noisy = True
        v = int(rng.integers(3))
        if v < 2:
            lines = _real("xid13", pci=gpu.pci, pid="'<unknown>'" if v == 0 else pid, name="<unknown>" if v == 0 else "python",
                          gpc=int(rng.integers(0, 8)), tpc=int(rng.integers(0, 9)))
        else:
            lines = _real("xid31", pci=gpu.pci, pid=pid, name="python", ch=f"{int(rng.integers(8, 64)):08x}",
                          addr=f"0x7f{int(rng.integers(16, 255)):02x}_{int(rng.integers(0, 1 << 32)):08x}")
        self._kernel(node, t, *lines)

    def _killed_xids(self, t: int, run: _Run) -> None:
        """Xid 43 then 45 on a GPU whose process was killed (a cancelled job); no incident."""
        rng = self.rng
        _, node, g, pid = self._pick(run)
        gpu = node.gpus[g]
        ch = f"{int(rng.integers(8, 64)):08x}"
        self._kernel(node, t, f"NVRM: Xid (PCI:{gpu.pci}): 43, pid={pid}, name=python, Ch {ch}")
        self._kernel(node, t + int(rng.integers(50_000, 400_000)),
                     *_real("xid45", pci=gpu.pci, pid="'<unknown>'", name="<unknown>", ch=ch))

    def _repaired(self, t: int, node: _Node, lines: list[str]) -> None:
        node.state, node.fallen = "idle", None
        self._ctl(t, *lines)
        self._schedule(t + 10_000)


def _jobcomp(run: _Run, t: int) -> str:
    """The jobcomp/filetxt record of a finished run."""
    job, (user, uid, account) = run.job, run.job.user
    n = len(run.nodes)
    cpus = n * CPUS_PER_NODE
    return (f"JobId={job.id} UserId={user}({uid}) GroupId={user}({uid}) Name={job.kind.name} JobState={run.fate} "
            f"Partition=gpu TimeLimit={job.kind.limit} StartTime={_iso(run.start)} EndTime={_iso(t)} NodeList={run.nodelist} "
            f"NodeCnt={n} ProcCnt={cpus} WorkDir=/home/{user}/{job.kind.name} ReservationName= "
            f"Tres=cpu={cpus},mem={n * 2000}G,node={n},billing={cpus},gres/gpu={run.ranks} Account={account} QOS=normal "
            f"WcKey= Cluster=demo SubmitTime={_iso(job.submit)} EligibleTime={_iso(job.eligible)} "
            f"DerivedExitCode={run.exit} ExitCode={run.exit}")


NVSMI_GPU = """\t<gpu id="00000000:{BUS}:00.0">
\t\t<product_name>NVIDIA H100 80GB HBM3</product_name>
\t\t<product_brand>NVIDIA</product_brand>
\t\t<product_architecture>Hopper</product_architecture>
\t\t<display_mode>Disabled</display_mode>
\t\t<display_active>Disabled</display_active>
\t\t<persistence_mode>Enabled</persistence_mode>
\t\t<addressing_mode>None</addressing_mode>
\t\t<mig_mode>
\t\t\t<current_mig>Disabled</current_mig>
\t\t\t<pending_mig>Disabled</pending_mig>
\t\t</mig_mode>
\t\t<serial>{serial}</serial>
\t\t<uuid>{uuid}</uuid>
\t\t<minor_number>{index}</minor_number>
\t\t<vbios_version>96.00.99.00.01</vbios_version>
\t\t<gpu_recovery_action>{recovery}</gpu_recovery_action>
\t\t<pci>
\t\t\t<pci_bus>{BUS}</pci_bus>
\t\t\t<pci_device>00</pci_device>
\t\t\t<pci_domain>0000</pci_domain>
\t\t\t<pci_device_id>233010DE</pci_device_id>
\t\t\t<pci_bus_id>00000000:{BUS}:00.0</pci_bus_id>
\t\t\t<pci_sub_system_id>16C110DE</pci_sub_system_id>
\t\t\t<pci_gpu_link_info>
\t\t\t\t<pcie_gen>
\t\t\t\t\t<max_link_gen>5</max_link_gen>
\t\t\t\t\t<current_link_gen>{gen}</current_link_gen>
\t\t\t\t</pcie_gen>
\t\t\t\t<link_widths>
\t\t\t\t\t<max_link_width>16x</max_link_width>
\t\t\t\t\t<current_link_width>16x</current_link_width>
\t\t\t\t</link_widths>
\t\t\t</pci_gpu_link_info>
\t\t\t<replay_counter>0</replay_counter>
\t\t\t<replay_rollover_counter>0</replay_rollover_counter>
\t\t</pci>
\t\t<fan_speed>N/A</fan_speed>
\t\t<performance_state>P0</performance_state>
\t\t<fb_memory_usage>
\t\t\t<total>81559 MiB</total>
\t\t\t<reserved>328 MiB</reserved>
\t\t\t<used>{used}</used>
\t\t\t<free>{free}</free>
\t\t</fb_memory_usage>
\t\t<compute_mode>Default</compute_mode>
\t\t<utilization>
\t\t\t<gpu_util>{util}</gpu_util>
\t\t\t<memory_util>{mem_util}</memory_util>
\t\t</utilization>
\t\t<ecc_mode>
\t\t\t<current_ecc>Enabled</current_ecc>
\t\t\t<pending_ecc>Enabled</pending_ecc>
\t\t</ecc_mode>
\t\t<ecc_errors>
\t\t\t<volatile>
\t\t\t\t<sram_correctable>0</sram_correctable>
\t\t\t\t<sram_uncorrectable>0</sram_uncorrectable>
\t\t\t\t<dram_correctable>0</dram_correctable>
\t\t\t\t<dram_uncorrectable>0</dram_uncorrectable>
\t\t\t</volatile>
\t\t\t<aggregate>
\t\t\t\t<sram_correctable>0</sram_correctable>
\t\t\t\t<sram_uncorrectable>0</sram_uncorrectable>
\t\t\t\t<dram_correctable>{aggregate_ce}</dram_correctable>
\t\t\t\t<dram_uncorrectable>0</dram_uncorrectable>
\t\t\t</aggregate>
\t\t</ecc_errors>
\t\t<remapped_rows>
\t\t\t<remapped_row_corr>0</remapped_row_corr>
\t\t\t<remapped_row_unc>0</remapped_row_unc>
\t\t\t<remapped_row_pending>No</remapped_row_pending>
\t\t\t<remapped_row_failure>No</remapped_row_failure>
\t\t</remapped_rows>
\t\t<temperature>
\t\t\t<gpu_temp>{temp}</gpu_temp>
\t\t\t<gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>
\t\t\t<gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>
\t\t\t<memory_temp>{mem_temp}</memory_temp>
\t\t</temperature>
\t\t<gpu_power_readings>
\t\t\t<power_state>P0</power_state>
\t\t\t<power_draw>{power}</power_draw>
\t\t\t<current_power_limit>700.00 W</current_power_limit>
\t\t\t<default_power_limit>700.00 W</default_power_limit>
\t\t</gpu_power_readings>
\t\t<clocks>
\t\t\t<graphics_clock>{clock}</graphics_clock>
\t\t\t<sm_clock>{clock}</sm_clock>
\t\t\t<mem_clock>2619 MHz</mem_clock>
\t\t</clocks>
\t\t<processes>{processes}
\t\t</processes>
\t</gpu>"""
NVSMI_PROCESS = """
\t\t\t<process_info>
\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>
\t\t\t\t<compute_instance_id>N/A</compute_instance_id>
\t\t\t\t<pid>{pid}</pid>
\t\t\t\t<type>C</type>
\t\t\t\t<process_name>python</process_name>
\t\t\t\t<used_memory>{used} MiB</used_memory>
\t\t\t</process_info>"""


def _nvidia_smi(node: _Node, t: int, rng: np.random.Generator) -> str:
    """``nvidia-smi -q -x`` at time ``t``: busy or idle readings; a GPU off the bus reads Unknown Error."""
    run = node.run
    busy = run is not None
    gpus = []
    for i, gpu in enumerate(node.gpus):
        used = int(rng.integers(60_000, 78_000)) if busy else 0
        pid = run.base_pids[run.nodes.index(node)] + i if busy else 0
        values = dict(BUS=gpu.bus.upper(), serial=gpu.serial, uuid=gpu.uuid, index=i, recovery="None", gen=5 if busy else 1,
                      used=f"{used} MiB", free=f"{81559 - 328 - used} MiB",
                      util=f"{int(rng.integers(85, 100)) if busy else 0} %", mem_util=f"{int(rng.integers(30, 60)) if busy else 0} %",
                      aggregate_ce=int(rng.poisson(0.3)), temp=f"{int(rng.integers(55, 72) if busy else rng.integers(28, 36))} C",
                      mem_temp=f"{int(rng.integers(60, 80) if busy else rng.integers(30, 40))} C",
                      power=f"{rng.uniform(480, 690) if busy else rng.uniform(68, 75):.2f} W",
                      clock=f"{1980 if busy else 345} MHz",
                      processes=NVSMI_PROCESS.format(pid=pid, used=used - 500) if busy else "")
        if node.fallen == i:
            values.update(recovery="Reboot", used="Unknown Error", free="Unknown Error", util="Unknown Error",
                          mem_util="Unknown Error", temp="Unknown Error", mem_temp="Unknown Error",
                          power="Unknown Error", clock="Unknown Error", processes="")
        gpus.append(NVSMI_GPU.format(**values))
    stamp = _utc(t).strftime("%a %b %d %H:%M:%S %Y")
    return ('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
            f"\t<timestamp>{stamp}</timestamp>\n\t<driver_version>{DRIVER}</driver_version>\n"
            f"\t<cuda_version>12.4</cuda_version>\n\t<attached_gpus>{len(node.gpus)}</attached_gpus>\n"
            + "\n".join(gpus) + "\n</nvidia_smi_log>")
