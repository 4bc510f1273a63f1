"""What the simulated cluster is made of: nodes with their GPUs and InfiniBand HCAs, the users, the
kinds of jobs they submit, jobs and their runs. A run knows where each rank lives and writes rank
0's training progress; everything else a run prints comes from the Slurm and incident modules."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hostlist import collect_hostlist

from observe.simulate.clock import DAY, HOUR, S, UPTIME, py_stamp, py_stamps
from observe.simulate.formats import TRAINING

GPU_BUS = ("18", "2a", "3b", "5d", "9a", "ab", "ba", "db", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8")
HCA_BUS = ("1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc")
CPUS_PER_NODE = 128
# (user, uid, account); alice..frank submit jobs, root logs in from the admin host.
USERS = (("alice", 1001, "ml"), ("bob", 1002, "ml"), ("carol", 1003, "vision"),
         ("dave", 1004, "nlp"), ("erin", 1005, "nlp"), ("frank", 1006, "vision"))
PID_FLOOR, PID_SPAN = 300, 4_194_304 - 300  # Linux hands out pids upwards from 300, wrapping at pid_max


def pid(base, t):
    """The pid a host hands out ``t`` after the simulation's start (about two new processes a second); scalars or arrays."""
    return PID_FLOOR + (base + t // (S // 2)) % PID_SPAN


@dataclass(frozen=True)
class Gpu:
    bus: str  # "3b"
    uuid: str
    serial: str

    @property
    def pci(self) -> str:
        return f"0000:{self.bus}:00"


class Node:
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
            self.gpus.append(Gpu(GPU_BUS[g], f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
                                 str(int(rng.integers(1_650_000_000_000, 1_659_999_999_999)))))
        self.hcas = min(gpus, len(HCA_BUS))
        self.daemons = {name: str(p) for name, p in zip(("logind", "chronyd", "exporter", "slurmd"),
                                                         rng.integers(900, 3000, 4).tolist())}
        self.pid_base = int(rng.integers(0, PID_SPAN))
        self.session = int(rng.integers(1000, 90_000))
        self.state = "idle"  # idle, alloc, drain, down
        self.run: Run | None = None
        self.fallen: int | None = None  # index of a GPU off the bus, until repaired
        self.broken: tuple[int, int, int] | None = None  # (GPU, since, Xid) failed unnoticed (scenario prior_fault)
        self.skew = 0  # this node's clock minus true time (microseconds)

    def uptime(self, t: int) -> str:
        return UPTIME % divmod(t - self.boot, S)


@dataclass(frozen=True)
class Kind:
    """A kind of job: name, script, node counts, run hours, weight, seconds between progress lines."""

    name: str
    script: str
    nodes: tuple[int, ...]
    hours: tuple[float, float]
    weight: float
    every: tuple[float, float]
    limit: int  # minutes


KINDS = (
    Kind("pretrain-llm", "pretrain.py", (2, 4, 8), (3.0, 14.0), 2.0, (8.0, 15.0), 2880),
    Kind("finetune", "finetune.py", (1, 2), (0.5, 4.0), 4.0, (4.0, 8.0), 720),
    Kind("eval", "evaluate.py", (1,), (0.1, 0.7), 4.0, (20.0, 40.0), 120),
)
# Scenario mode's mix: more, shorter multi-node jobs, so that more jobs can fail per simulated hour.
SCENARIO_KINDS = (
    Kind("pretrain-llm", "pretrain.py", (2, 4, 8), (1.0, 5.0), 4.0, (8.0, 15.0), 2880),
    Kind("finetune", "finetune.py", (2, 4), (0.5, 3.0), 3.0, (4.0, 8.0), 720),
    Kind("eval", "evaluate.py", (1,), (0.1, 0.7), 2.0, (20.0, 40.0), 120),
)
DATASETS = ("fineweb-edu-v2", "redpajama-v2", "laion-coco-400m", "the-stack-v2", "openwebmath")


@dataclass
class Job:
    id: int
    kind: Kind
    user: tuple[str, int, str]
    nodes: int
    seconds: int
    submit: int
    eligible: int
    dataset: str
    runs: int = 0
    step: int = 0  # training step reached (a requeued run resumes from it)


class Run:
    """One run of a job on its nodes; knows its ranks and writes its progress lines."""

    def __init__(self, job: Job, nodes: list[Node], t: int, gpus: int, rng: np.random.Generator, origin: int) -> None:
        self.job, self.nodes, self.start, self.gpus = job, nodes, t, gpus
        self.nodelist = collect_hostlist([n.name for n in nodes])
        self.ranks = len(nodes) * gpus
        self.stepd = [int(pid(n.pid_base, t - origin)) for n in nodes]  # time since the simulation's start
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

    def where(self, rank: int) -> tuple[Node, int, int]:
        """Node, local GPU index and pid of ``rank``."""
        k, g = divmod(rank, self.gpus)
        return self.nodes[k], g, self.base_pids[k] + g

    def prefix(self, rank: int, thread: int = 0) -> str:
        """NCCL's ``host:pid:tid [dev]`` line prefix (thread 0: the main thread)."""
        node, g, p = self.where(rank)
        return f"{node.name}:{p}:{p + thread} [{g}]"

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
        step, script, total = TRAINING["step"], self.job.kind.script, self.total
        lines = [step.format(stamp=s, script=script, step=st, total=total, loss=lo, lr=r, grad=g, tokens=tk, took=dt)
                 for s, st, lo, r, g, tk, dt in zip(py_stamps(t + self.skew0), steps.tolist(), loss.tolist(), lr.tolist(),
                                                     grad.tolist(), toks.tolist(), secs.tolist())]
        times = t.tolist()
        user, kind = self.job.user[0], self.job.kind.name
        for i in np.flatnonzero(steps % 2000 == 0).tolist():  # checkpoints
            lines.append(TRAINING["checkpoint"].format(stamp=py_stamp(times[i] + 1000 + self.skew0), user=user, kind=kind,
                                                       job=self.id, step=steps[i], took=rng.uniform(4, 30)))
            times.append(times[i] + 1000)
        return np.asarray(times, dtype=np.int64), lines


def ranges(ranks: list[int]) -> str:
    """``0-2,4-7`` as srun prints task lists."""
    out, first = [], None
    for i, r in enumerate(ranks):
        first = r if first is None else first
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(f"{first}-{r}" if r != first else f"{r}")
            first = None
    return ",".join(out)
