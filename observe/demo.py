"""A seeded generator of a GPU cluster's raw logs with injected incidents of known cause.

Writes the files a Slurm GPU cluster really produces (slurmctld log, jobcomp records, per-node
syslog and dmesg, per-job output with NCCL / PyTorch lines) in their real formats, with background
noise and a few incidents per day: a GPU falling off the bus (Xid 79) followed by NCCL timeouts on
every rank, an InfiniBand link going down, an OOM kill, application Xids, a node not responding.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import hostlist

GPU_BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
USERS = ["alice", "bob", "carol", "dave", "erin"]
SYSLOG_NOISE = [
    "systemd[1]: Started Session {n} of User {user}.",
    "systemd-logind[{pid}]: New session {n} of user {user}.",
    "CRON[{pid}]: (root) CMD (/usr/sbin/nhc >/dev/null 2>&1)",
    "sshd[{pid}]: Accepted publickey for {user} from 10.1.{a}.{b} port {port} ssh2: ED25519 SHA256:{h}",
    "sshd[{pid}]: pam_unix(sshd:session): session opened for user {user}(uid={uid}) by (uid=0)",
    "chronyd[{pid}]: Selected source 10.0.0.{a} (ntp{b}.cluster)",
    "slurmd[{pid}]: slurmd: launch task StepId={n}.0 request from UID:{uid} GID:{uid} HOST:10.0.{a}.{b} PORT:{port}",
    "nvidia-persistenced[{pid}]: Verbose syslog connection opened",
    "kernel: [{up}] perf: interrupt took too long ({a}00 > {b}00), lowering kernel.perf_event_max_sample_rate to {port}",
    "dbus-daemon[{pid}]: [system] Successfully activated service 'org.freedesktop.hostname1'",
    "rsyslogd[{pid}]: imjournal: {n} messages lost due to rate-limiting",
    "kernel: [{up}] EXT4-fs (nvme0n1p2): re-mounted. Opts: (null)",
]
DMESG_NOISE = [
    "perf: interrupt took too long ({a}00 > {b}00), lowering kernel.perf_event_max_sample_rate to {port}",
    "nvidia-nvswitch: Probing device 0000:{h2}:00.0, Vendor Id = 0x10de, Device Id = 0x22a3, Class = 0x68000",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib{b}: link becomes ready",
    "mlx5_core 0000:{h2}:00.0: mlx5_fw_tracer_handle_traces:{n}: FW tracer: tracing event",
]
CTLD_NOISE = [
    "sched/backfill: _start_job: Started JobId={job} in gpu on {nodes}",
    "_slurm_rpc_submit_batch_job: JobId={job} InitPrio={n} usec={port}",
    "sched: _slurm_rpc_allocate_resources JobId={job} NodeList=(null) usec={port}",
    "backfill: beginning",
    "backfill: reached end of job queue",
    "_job_complete: JobId={job} done",
]
TRAIN = "step {n} loss {loss:.4f} lr 3.0e-04 grad_norm {g:.3f} tokens/s {port}"


@dataclass(frozen=True)
class InputFile:
    path: Path
    format: str  # the collector (--source) that reads it
    node: str | None = None
    job: str | None = None


@dataclass
class Manifest:
    """What :func:`generate` wrote: files, total bytes, and the incidents with their true cause."""

    files: list[InputFile] = field(default_factory=list)
    bytes: int = 0
    incidents: list[dict] = field(default_factory=list)


class _Writer:
    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.handles: dict[Path, object] = {}

    def add(self, path: Path, fmt: str, lines: list[str], node: str | None = None, job: str | None = None) -> None:
        if path not in self.handles:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.handles[path] = open(path, "w", buffering=1 << 20)
            self.manifest.files.append(InputFile(path, fmt, node, job))
        text = "".join(line + "\n" for line in lines)
        self.handles[path].write(text)
        self.manifest.bytes += len(text)

    def close(self) -> None:
        for f in self.handles.values():
            f.close()


def _fill(rng: random.Random, template: str, **extra: object) -> str:
    values = dict(n=rng.randrange(1, 99999), user=rng.choice(USERS), pid=rng.randrange(300, 65000),
                  a=rng.randrange(1, 250), b=rng.randrange(1, 9), port=rng.randrange(1024, 65000),
                  h=f"{rng.getrandbits(64):016x}", uid=1000 + rng.randrange(5), h2=rng.choice(GPU_BUS),
                  job=rng.randrange(1000, 9999), nodes="gpu001")
    values.update(extra)
    return template.format(**values)


def _syslog_stamp(t: datetime) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


def _glog(t: datetime) -> str:
    return f"{t.month}{t:%d %H:%M:%S}.{t.microsecond:06d}{t.microsecond % 1000:03d}"


def generate(out_dir: Path, nodes: int = 16, gpus_per_node: int = 8, hours: float = 24, seed: int = 0,
             start: datetime | None = None, target_bytes: int | None = None,
             progress: Callable[[int], None] | None = None) -> Manifest:
    """Write a cluster's logs under ``out_dir``; with ``target_bytes``, keep adding days until reached."""
    rng = random.Random(seed)
    out_dir = Path(out_dir)
    start = start or datetime(2026, 11, 22, tzinfo=timezone.utc)
    names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]
    boot = {n: start - timedelta(seconds=rng.randrange(3600, 30 * 86400)) for n in names}
    manifest = Manifest()
    w = _Writer(manifest)
    job_id = 5000
    day = 0
    try:
        while True:
            t0 = start + timedelta(hours=hours * day)
            job_id = _period(rng, w, out_dir, names, gpus_per_node, boot, t0, hours, job_id)
            day += 1
            if progress:
                progress(manifest.bytes)
            if target_bytes is None or manifest.bytes >= target_bytes:
                break
    finally:
        w.close()
    return manifest


def _period(rng: random.Random, w: _Writer, out: Path, names: list[str], gpus: int, boot: dict[str, datetime],
            t0: datetime, hours: float, job_id: int) -> int:
    span = hours * 3600
    ctld: list[tuple[datetime, str]] = []
    node_sys: dict[str, list[tuple[datetime, str]]] = {n: [] for n in names}
    node_dmesg: dict[str, list[tuple[datetime, str]]] = {n: [] for n in names}
    for n in names:  # background noise: ~1 line every 2 s in syslog, fewer in dmesg
        for _ in range(int(span / 2)):
            t = t0 + timedelta(seconds=rng.uniform(0, span))
            up = f"{(t - boot[n]).total_seconds():12.6f}".strip()
            node_sys[n].append((t, _fill(rng, rng.choice(SYSLOG_NOISE), up=up)))
        for _ in range(int(span / 120)):
            t = t0 + timedelta(seconds=rng.uniform(0, span))
            node_dmesg[n].append((t, _fill(rng, rng.choice(DMESG_NOISE))))
    for _ in range(int(span / 30)):
        ctld.append((t0 + timedelta(seconds=rng.uniform(0, span)), _fill(rng, rng.choice(CTLD_NOISE))))
    kinds = ["xid79", "ib_down", "oom", "ok", "ok", "ok", "app_xid", "user_error"]
    t = t0
    jobcomp: list[str] = []
    while True:
        t += timedelta(minutes=rng.uniform(5, 40))
        if t > t0 + timedelta(seconds=span * 0.85):
            break
        job_id += 1
        size = rng.choice([1, 2, 4, 4, 8])
        first = rng.randrange(0, len(names) - size + 1)
        alloc = names[first:first + size]
        end = t + timedelta(minutes=rng.uniform(20, 180))
        incident = rng.choice(kinds) if size > 1 else rng.choice(["ok", "oom", "user_error"])
        end, state, exit_code = _job(rng, w, out, t, end, job_id, alloc, gpus, incident, node_sys, node_dmesg, ctld,
                                     w.manifest.incidents)
        user = rng.choice(USERS)
        nodelist = hostlist.collect_hostlist(alloc)
        ctld.append((t, f"sched: Allocate JobId={job_id} NodeList={nodelist} #CPUs={64 * size} Partition=gpu"))
        status = f"WEXITSTATUS {exit_code}" if exit_code < 128 else f"WTERMSIG {exit_code - 128}"
        ctld.append((end, f"_job_complete: JobId={job_id} {status}"))
        ctld.append((end + timedelta(milliseconds=1), f"_job_complete: JobId={job_id} done"))
        ec = f"{exit_code}:0" if exit_code < 128 else f"0:{exit_code - 128}"
        jobcomp.append(
            f"JobId={job_id} UserId={user}(1001) GroupId={user}(1001) Name=train JobState={state} Partition=gpu "
            f"TimeLimit=1440 StartTime={t:%Y-%m-%dT%H:%M:%S} EndTime={end:%Y-%m-%dT%H:%M:%S} NodeList={nodelist} "
            f"NodeCnt={size} ProcCnt={64 * size} WorkDir=/home/{user} ReservationName= Tres=cpu={64 * size},"
            f"node={size} Account=ml QOS=normal WcKey= Cluster=demo SubmitTime={t:%Y-%m-%dT%H:%M:%S} "
            f"EligibleTime={t:%Y-%m-%dT%H:%M:%S} DerivedExitCode=0:0 ExitCode={ec}")
    w.add(out / "slurm" / "slurmctld.log", "slurm",
          [f"[{ts:%Y-%m-%dT%H:%M:%S}.{ts.microsecond // 1000:03d}] {m}" for ts, m in sorted(ctld)], node="ctl1")
    w.add(out / "slurm" / "jobcomp.log", "slurm_jobs", jobcomp, node="ctl1")
    for n in names:
        w.add(out / "nodes" / n / "syslog", "syslog", [f"{_syslog_stamp(ts)} {n} {m}" for ts, m in sorted(node_sys[n])])
        up = [((ts - boot[n]).total_seconds(), m) for ts, m in sorted(node_dmesg[n])]
        w.add(out / "nodes" / n / "dmesg", "kernel", [f"[{u:12.6f}] {m}" for u, m in up], node=n)
    return job_id


def _job(rng: random.Random, w: _Writer, out: Path, start: datetime, end: datetime, job_id: int, alloc: list[str],
         gpus: int, incident: str, node_sys: dict, node_dmesg: dict, ctld: list, incidents: list) -> tuple:
    lines: list[str] = []
    ranks = [(n, g) for n in alloc for g in range(gpus)]
    pid = {n: rng.randrange(2000, 60000) for n in alloc}
    for r, (n, g) in enumerate(ranks[:: max(1, len(ranks) // 8)]):
        lines.append(f"{n}:{pid[n] + g}:{pid[n] + g} [{g}] NCCL INFO Bootstrap : Using ib0:10.0.{alloc.index(n)}.1<0>")
        lines.append(f"{n}:{pid[n] + g}:{pid[n] + g} [{g}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; "
                     f"OOB ib0:10.0.{alloc.index(n)}.1<0>")
    steps = int((end - start).total_seconds() / 20)
    fail_at = start + (end - start) * rng.uniform(0.3, 0.8)
    stop = steps if incident in ("ok", "app_xid") else int(steps * (fail_at - start) / (end - start))
    for s in range(0, stop, 5):
        lines.append(_fill(rng, TRAIN, n=s, loss=3.5 / (1 + s / 500), g=rng.uniform(0.2, 2.0)))
    state, code = "COMPLETED", 0
    bad = rng.choice(alloc)
    gpu = rng.randrange(gpus)
    pci = f"0000:{GPU_BUS[gpu % len(GPU_BUS)]}:00"
    seq = rng.randrange(1000, 90000)
    if incident == "xid79":
        node_dmesg[bad] += [
            (fail_at, f"NVRM: GPU at PCI:{pci}: GPU-{rng.getrandbits(32):08x}-1f3f-adc5-25cb-57e440db2c91"),
            (fail_at, f"NVRM: Xid (PCI:{pci}): 79, pid={pid[bad] + gpu}, name=python, GPU has fallen off the bus."),
            (fail_at, f"NVRM: GPU {pci}.0: GPU has fallen off the bus."),
        ]
        end = _timeouts(rng, lines, ranks, fail_at + timedelta(minutes=10), seq)
        state, code = "FAILED", 134
        incidents.append(dict(type="xid79", node=bad, gpu=pci, job_id=str(job_id), ts=fail_at.isoformat(),
                              kind="gpu_xid", code=79))
    elif incident == "ib_down":
        node_dmesg[bad].append((fail_at, "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN"))
        node_dmesg[bad].append((fail_at + timedelta(minutes=3), "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"))
        peer = rng.choice([n for n in alloc if n != bad])
        lines.append(f"{peer}:{pid[peer]}:{pid[peer] + 80} [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                     f"from peer 10.0.{alloc.index(bad)}.1<53249> with error 12, opcode 0, len 0, vendor err 129 (Recv)")
        lines.append(f"{peer}:{pid[peer]}:{pid[peer] + 80} [0] NCCL INFO transport/net.cc:1008 -> 6")
        end = _timeouts(rng, lines, ranks, fail_at + timedelta(minutes=10), seq)
        state, code = "FAILED", 134
        incidents.append(dict(type="ib_link_down", node=bad, gpu=None, job_id=str(job_id), ts=fail_at.isoformat(),
                              kind="ib_link_down", code=None))
    elif incident == "oom":
        victim = pid[bad] + gpu
        node_dmesg[bad] += [
            (fail_at, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/slurm/"
                      f"uid_1001/job_{job_id},task_memcg=/slurm/uid_1001/job_{job_id}/step_0,task=python,pid={victim},uid=1001"),
            (fail_at, f"Memory cgroup out of memory: Killed process {victim} (python) total-vm:98765432kB, "
                      f"anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:171234kB oom_score_adj:0"),
        ]
        lines.append(f"slurmstepd: error: Detected 1 oom_kill event in StepId={job_id}.0. Some of the step tasks have been OOM Killed.")
        lines.append(f"srun: error: {bad}: task {alloc.index(bad) * gpus + gpu}: Out Of Memory")
        end, state, code = fail_at + timedelta(seconds=5), "OUT_OF_MEMORY", 137
        incidents.append(dict(type="oom", node=bad, gpu=None, job_id=str(job_id), ts=fail_at.isoformat(),
                              kind="oom_kill", code=None))
    elif incident == "user_error":
        lines += ["Traceback (most recent call last):", '  File "/home/user/train.py", line 214, in <module>',
                  "    main(cfg)", '  File "/home/user/train.py", line 187, in main',
                  "    x = batch['input_ids'].view(cfg.bs, -1)",
                  "RuntimeError: shape '[32, -1]' is invalid for input of size 1000"]
        end, state, code = fail_at, "FAILED", 1
        incidents.append(dict(type="user_error", node=None, gpu=None, job_id=str(job_id), ts=fail_at.isoformat(),
                              kind="python_exception", code=None))
    elif incident == "app_xid":
        node_dmesg[bad].append((fail_at, f"NVRM: Xid (PCI:{pci}): 13, pid={pid[bad]}, name=python, Graphics SM Warp "
                                         f"Exception on (GPC 4, TPC 1, SM 0): Illegal Instruction Encoding"))
    if incident in ("xid79", "ib_down") and rng.random() < 0.5:
        ctld.append((fail_at + timedelta(minutes=5), f"error: Nodes {bad} not responding"))
        ctld.append((fail_at + timedelta(minutes=9), f"Node {bad} now responding"))
    w.add(out / "jobs" / f"slurm-{job_id}.out", "nccl", lines, node=alloc[0], job=str(job_id))
    return end, state, code


def _timeouts(rng: random.Random, lines: list[str], ranks: list, when: datetime, seq: int) -> datetime:
    for r, (n, g) in enumerate(ranks):
        t = when + timedelta(milliseconds=rng.randrange(0, 900))
        lines.append(f"[rank{r}]:[E{_glog(t)} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
                     f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, "
                     f"Timeout(ms)=600000) ran for 600020 milliseconds before timing out.")
        lines.append(f"[rank{r}]:[E{_glog(t)} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
                     f"Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
                     f"work: {seq + 3}, last completed NCCL work: {seq - 1}.")
    return when + timedelta(seconds=30)
