"""The simulation's state and its clock: the nodes, the queue, the running jobs, the event queue
(time, then order of scheduling) and the outbox of timed lines. Slurm (:mod:`.slurm`), the
incidents (:mod:`.incidents`), the background (:mod:`.background`) and the hourly output
(:mod:`.output`) are functions over it; it holds what they share and nothing of their logic."""
from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from observe.simulate.background import DISTRACTED, background, distract
from observe.simulate.catalog import TYPES
from observe.simulate.clock import DAY, HOUR, MINUTE, S, utc
from observe.simulate.files import Files, Outbox
from observe.simulate.fleet import KINDS, SCENARIO_KINDS, Gpu, Job, Kind, Node, Run
from observe.simulate.incidents import plan_day
from observe.simulate.manifest import Manifest
from observe.simulate.noise import Hosts
from observe.simulate.output import boot_lines, flush, nvidia_smi
from observe.simulate.real_lines import RealLines, Record
from observe.simulate.slurm import arrive


class Cluster:
    """A simulated cluster between two hours: its state, the events due, the lines not yet written."""

    def __init__(self, files: Files, n_nodes: int, gpus: int, seed: int, start: int, horizon: int | None, *,
                 plan: dict, scenario: bool, rate: float, skew_s: float, first_job_id: int, real: RealLines | None,
                 first_node: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.real = real
        self.quiet_rng = np.random.default_rng([seed, 0xB6])  # the background's own stream
        self.start, self.horizon, self.gpus = start, horizon, gpus
        self.files, self.out = files, Outbox()
        self.nodes = [Node(i, gpus, self.rng, start, first_node) for i in range(n_nodes)]
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
        self.crashed: list[Node] = []
        self.lost: dict[int, tuple[int, int]] = {}  # node index -> a window its kernel and syslog lines never reached us
        self.hit: set[int] = set()  # jobs with an incident record
        self.hosts = Hosts({k: [n.daemons[k] for n in self.nodes] for k in ("logind", "chronyd", "exporter")},
                           [n.pid_base for n in self.nodes], [n.session for n in self.nodes], start)
        self.controller = Hosts({}, [0], [0], start)
        self.boots = np.array([n.boot for n in self.nodes], dtype=np.int64)
        fits = [(k, tuple(n for n in k.nodes if n <= n_nodes)) for k in (SCENARIO_KINDS if scenario else KINDS)]
        self.kinds = [Kind(k.name, k.script, n, k.hours, k.weight, k.every, k.limit) for k, n in fits if n]
        weights = np.array([k.weight for k in self.kinds])
        self.weights = weights / weights.sum()
        node_hours = sum(w * np.mean(k.nodes) * np.mean(k.hours) for w, k in zip(self.weights, self.kinds))
        self.arrivals_per_hour = 0.85 * n_nodes / node_hours
        self.queue: list[Job] = []
        self.live: list[Run] = []
        self.events: list = []
        self.seq = 0
        self.next_id = first_job_id
        self.incidents: list[dict] = []
        self.files.add("slurm/slurmctld.log", "slurm", node="ctl1")
        self.files.add("slurm/jobcomp.log", "slurm_jobs", node="ctl1")
        for node in self.nodes:
            self.files.add(f"nodes/{node.name}/syslog", "syslog", node=node.name)
            self.files.add(f"nodes/{node.name}/dmesg", "kernel", node=node.name, boot_time=utc(node.boot + node.skew))
            self.files.write(f"nodes/{node.name}/dmesg", boot_lines(self, node))
        for _ in range(n_nodes // 2 + 1):  # a queue is waiting when the logs begin
            self.at(start + int(self.rng.integers(0, 10 * MINUTE)), arrive)

    # --- the clock

    def at(self, t: int, fn: Callable, *args) -> None:
        """Call ``fn(self, t, *args)`` at ``t`` (events at the same time in the order scheduled)."""
        self.seq += 1
        heapq.heappush(self.events, (int(t), self.seq, fn, args))

    def advance(self, t0: int, t1: int) -> None:
        """Simulate [t0, t1): plan arrivals and incidents, run the events, write the hour's lines."""
        if (t0 - self.start) % DAY == 0:
            plan_day(self, t0)
        for t in np.sort(self.rng.integers(t0, t1, self.rng.poisson(self.arrivals_per_hour * (t1 - t0) / HOUR))):
            self.at(t, arrive)
        while self.events and self.events[0][0] < t1:
            t, _, fn, args = heapq.heappop(self.events)
            fn(self, t, *args)
        if self.real is not None:
            background(self, t0, t1)
        flush(self, t0, t1)

    def close(self, end: int) -> Manifest:
        """Write each node's nvidia-smi snapshot, close the files, return the manifest."""
        for node in self.nodes:
            if node in self.crashed:  # still down: nothing to run nvidia-smi on
                continue
            rel = f"nodes/{node.name}/nvidia-smi.xml"
            self.files.add(rel, "nvidia_smi", node=node.name)
            self.files.write(rel, [nvidia_smi(node, end + node.skew, self.rng)])
        files = self.files.close()
        skew = {n.name: n.skew / S for n in self.nodes} if self.skew.any() else {}
        return Manifest(files, self.files.bytes, self.incidents, utc(self.start), utc(end), skew)

    # --- lines, queued for the hour they fall in

    def ctl(self, t: int, *lines: str) -> None:
        self.out.put(("ctl", 0), t, list(lines))

    def syslog(self, node: Node, t: int, *lines: str) -> None:
        self.out.put(("syslog", node.index), t, list(lines))

    def kernel(self, node: Node, t: int, *lines: str) -> None:
        self.out.put(("kernel", node.index), t, list(lines))

    def job(self, run: Run, t, lines) -> None:
        self.out.put(("job", run.id), t, lines)

    # --- what the incidents share

    def pick(self, run: Run) -> tuple[int, Node, int, int]:
        """A random rank of ``run``: rank, node, local GPU, pid."""
        rank = int(self.rng.integers(run.ranks))
        return (rank, *run.where(rank))

    def real_record(self, kind: str, test=None, **fields) -> Record | None:
        """A real record for an incident, half the time when the run has them."""
        if self.real is None or self.rng.random() < 0.5:
            return None
        return self.real.pick(self.rng, kind, test, **fields)

    def record(self, name: str, t: int, run: Run, node: Node, gpu: Gpu | None, kind: str | None, code: int | None,
               nodes: list[str] | None = None, **extra) -> None:
        """The ground truth of a failure of type ``name``, root cause at ``t`` on ``node``."""
        if self.real is not None and self.quiet_rng.random() < DISTRACTED:
            distract(self, t, run, node.name)
        self.incidents.append({"type": name, "node": node.name, "nodes": nodes or [node.name],
                               "gpu": gpu.pci if gpu else None, "job_id": run.id, "ts": utc(t).isoformat(), "kind": kind,
                               "code": code, "category": TYPES[name][1], **extra})
        self.hit.add(run.job.id)
