"""Failures whose root cause is a node's network, memory or the node itself, one function per
shape: an HCA port down (ib_link_down), a leaf switch taking down its nodes' links (ib_switch), the
kernel's OOM killer (oom), slurmd not responding (node_not_responding), a node dying (node_crash).
Each takes the cluster, the time and a running job's run."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from observe.simulate.clock import MINUTE, S, c10, glog, iso, utc
from observe.simulate.fleet import CPUS_PER_NODE, HCA_BUS, Node, Run, ranges
from observe.simulate.formats import KERNEL, SLURMCTLD, SLURMD, SLURMSTEPD, SRUN, TORCH, lines, real
from observe.simulate.joblog import abort, network_error
from observe.simulate.real_lines import rehome
from observe.simulate.slurm import fail, repaired, schedule

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def ib_link_down(sim: Cluster, t: int, run: Run) -> None:
    """An HCA port goes down: NCCL's IB transport fails on the ranks using it, the job aborts."""
    rng = sim.rng
    rank, node, g, _ = sim.pick(run)
    hca = g % node.hcas
    pci = f"0000:{HCA_BUS[hca]}:00"
    record = sim.real_record("ib_link_down")
    sim.kernel(node, t, *(rehome(record, pci=pci, host=node.name) if record
                          else [KERNEL["link"].format(pci=pci + ".0", k=hca, state="DOWN")]))
    sim.kernel(node, t + int(rng.integers(20, 180)) * S, KERNEL["link"].format(pci=pci + ".0", k=hca, state="ACTIVE"))
    peer = (rank + run.gpus) % run.ranks
    w = t + int(rng.integers(2 * S, 8 * S))
    for r, other, side in ((rank, run.where(peer)[0], "Recv"), (peer, node, "Send")):
        sim.job(run, [w + i * 300 for i in range(4)],
                real("ib_warn", prefix=run.prefix(r, 63), peer=other.ib_ip, port=int(rng.integers(32768, 61000)), err=12,
                     opcode=0, len=0, vendor=129, side=side))
        w += 400_000
    sim.job(run, w + 3 * S, network_error(rank, glog(w + 3 * S + run.skew(rank))))
    done = abort(sim, run, w + 5 * S, rank, "Aborted (core dumped)")
    fail(sim, run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("ib_link_down", t, run, node, None, "ib_link_down", None)


def ib_switch(sim: Cluster, t: int, run: Run) -> None:
    """A leaf switch fails (power, a firmware crash, a reboot): one rail's links go down together on all of its
    4-8 consecutive nodes, each kernel logging its port's loss within seconds; every multi-node job on them
    fails with NCCL network errors (one record per job)."""
    rng, n = sim.rng, len(sim.nodes)
    size = min(sim.leaf, n)
    if size < 4:  # no leaf switch with several nodes in so small a cluster
        ib_link_down(sim, t, run)
        return
    target = run.nodes[int(rng.integers(len(run.nodes)))]
    lo = min(target.index - target.index % size, n - size)
    k = int(rng.integers(target.hcas))
    offsets = np.sort(rng.integers(0, 3 * S, size))
    offsets = (offsets - offsets[0])[rng.permutation(size)].tolist()
    pci = f"0000:{HCA_BUS[k]}:00.0"
    back = t + int(rng.integers(8, 25)) * MINUTE
    down: dict[str, int] = {}
    for node, off in zip(sim.nodes[lo:lo + size], offsets):
        if sim.dead_at[node.index] <= t:
            continue
        down[node.name] = t + off
        sim.kernel(node, t + off, KERNEL["link"].format(pci=pci, k=k, state="DOWN"))
        up = back + off + int(rng.integers(0, 3 * S))
        init, active = real("link_up", pci=pci, k=k)
        sim.kernel(node, up, init)
        sim.kernel(node, up + int(rng.integers(S, 4 * S)), active)
    runs = [r for r in sim.live if not r.doomed and not r.ended and len(r.nodes) > 1 and r.start + MINUTE < t
            and t + 2 * MINUTE < r.end and r.job.id not in sim.hit and any(x.name in down for x in r.nodes)]
    for r in runs:
        hit = sorted((x for x in r.nodes if x.name in down), key=lambda x: down[x.name])
        first = down[hit[0].name]
        _net_errors(sim, r, first, hit, k)
        sim.record("ib_switch", first, r, hit[0], None, "ib_link_down", None, nodes=sorted(x.name for x in hit),
                   switch_nodes=sorted(down))


def _net_errors(sim: Cluster, run: Run, t: int, hit: list[Node], k: int) -> None:
    """NCCL's IB transport fails on the ranks using rail ``k`` of the ``hit`` nodes; the job aborts."""
    rng, gpus = sim.rng, run.gpus
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
            text = real("ib_warn_plugin", prefix=prefix, peer=other.ib_ip, port=port, err=12, opcode=0, len=0,
                        vendor=129, side=side, lgid=me.ib_ip, rgid=other.ib_ip)
        else:
            text = real("ib_warn", prefix=prefix, peer=f"fe80::966d:ae03:{other.index:x}:{0xdf00 + k:x}%ib{k}",
                        port=port, err=12, opcode=0, len=0, vendor=129, side=side)
        sim.job(run, [w + i * 300 for i in range(len(text))], text)
        w += 400_000
    rank = pairs[0][0]
    sim.job(run, w + 3 * S, network_error(rank, c10(w + 3 * S + run.skew(rank))))
    done = abort(sim, run, w + 5 * S, rank, "Aborted (core dumped)")
    fail(sim, run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")


def oom(sim: Cluster, t: int, run: Run) -> None:
    """The kernel's OOM killer kills one rank (host memory); slurmstepd reports it, the step is killed."""
    rng = sim.rng
    rank, node, g, pid = sim.pick(run)
    rss, frss, shm = int(rng.integers(180_000_000, 260_000_000)), int(rng.integers(60_000, 900_000)), int(rng.integers(10_000, 90_000))
    record = sim.real_record("oom_kill")
    if record is not None:
        sim.kernel(node, t, *rehome(record, host=node.name, pid=pid))
    else:
        sim.kernel(node, t, *lines(KERNEL["oom"], cpu=int(rng.integers(0, 224)), pid=pid, job=run.id, task=g,
                                   uid=run.job.user[1], total_vm=rss + 61_000_000, rss=rss, file_rss=frss, shmem_rss=shm,
                                   pgtables=rss // 500))
    sim.kernel(node, t + int(rng.integers(300_000, 1_500_000)), KERNEL["oom_reaper"].format(pid=pid, file_rss=frss, shmem_rss=shm))
    sim.job(run, t + 2 * S, SLURMSTEPD["oom"].format(job=run.id))
    done = abort(sim, run, t + 2 * S + 5000, rank, "Out Of Memory", terminate=True)
    fail(sim, run, t, done + int(rng.integers(5, 30)) * S, "OUT_OF_MEMORY", "WTERMSIG 9", "0:9")
    sim.record("oom", t, run, node, None, "oom_kill", None)


def _not_responding(sim: Cluster, seen: int, down: int, node: Node, run: Run, *then: str) -> None:
    """slurmctld missing a node's slurmd at ``seen``, again 100 s later, and marking it DOWN at ``down``."""
    sim.ctl(seen, SLURMCTLD["not_responding"].format(node=node.name))
    sim.ctl(seen + 100 * S, SLURMCTLD["not_responding"].format(node=node.name))
    sim.ctl(down, SLURMCTLD["set_down"].format(node=node.name), SLURMCTLD["kill_on_failed"].format(job=run.id, node=node.name),
            *then)


def node_not_responding(sim: Cluster, t: int, run: Run) -> None:
    """slurmd on one node hangs: slurmctld marks it DOWN after SlurmdTimeout, kills and requeues
    the job; an admin restarts slurmd later."""
    rng = sim.rng
    _, node, _, _ = sim.pick(run)
    node.state = "down"
    down = t + 300 * S
    _not_responding(sim, t, down, node, run, SLURMCTLD["requeue"].format(job=run.id))
    sim.job(run, down + S, [SLURMSTEPD["node_failure"].format(job=run.id, node=run.nodes[0].name, at=iso(down + run.skew0)),
                            SRUN["node_failure"].format(node=node.name), SRUN["aborted"]])
    fail(sim, run, t, down + 2 * S, "NODE_FAIL", None, "0:0")
    job = run.job
    job.eligible = down + 2 * MINUTE
    sim.queue.insert(0, job)
    sim.at(job.eligible, schedule)
    back = down + int(rng.integers(5 * MINUTE, 35 * MINUTE))
    slurmd = node.daemons["slurmd"]
    sim.syslog(node, back - 3 * S, SLURMD["started"].format(pid=slurmd),
               SLURMD["config"].format(pid=slurmd, cpus=CPUS_PER_NODE, uptime=(back - node.boot) // S))
    sim.at(back, repaired, node, lines(SLURMCTLD["responding"], node=node.name))
    sim.record("node_not_responding", t, run, node, None, "slurm_node_not_responding", None)


def node_crash(sim: Cluster, t: int, run: Run) -> None:
    """A node dies (hard hang, power): its logs stop, slurmctld marks it DOWN after SlurmdTimeout,
    the other ranks lose their peers; the job ends NODE_FAIL. The node stays down. When the batch
    host (the job's first node) is the one that died, the job's output just stops too."""
    rng = sim.rng
    if len(sim.crashed) >= max(1, len(sim.nodes) // 4):  # keep most of the cluster up
        return
    k = int(rng.integers(1, len(run.nodes))) if rng.random() < 0.75 else 0
    node, gpus = run.nodes[k], run.gpus
    node.state = "down"
    sim.dead_at[node.index] = t
    sim.crashed.append(node)
    seen = t + int(rng.integers(30, 100)) * S
    down = seen + 200 * S
    _not_responding(sim, seen, down, node, run)
    if k:
        w = t + int(rng.integers(2 * S, 20 * S))
        socket = rng.random() < 0.4
        for r, side in (((k * gpus - 1) % run.ranks, "Send"), (((k + 1) * gpus) % run.ranks, "Recv")):
            prefix, port = run.prefix(r, 63), int(rng.integers(32768, 61000))
            if socket:
                text = real("socket_closed", prefix=prefix, peer=node.name, port=port,
                            op=f"0x{int(rng.integers(0x55d000000000, 0x55dfffffffff)):x}")
            else:
                text = real("ib_warn", prefix=prefix, peer=node.ib_ip, port=port, err=12, opcode=0, len=0,
                            vendor=129, side=side)
            text += [TORCH["network_error"].format(rank=r, stamp=c10(w + 3 * S + run.skew(r))), TORCH["terminate"]]
            sim.job(run, [w + i * 300 + (3 * S if i >= len(text) - 2 else 0) for i in range(len(text))], text)
            w += 500_000
        alive = [(n, range(i * gpus, (i + 1) * gpus)) for i, n in enumerate(run.nodes) if i != k]
        sim.job(run, [w + 5 * S + i * 2000 for i in range(len(alive))],
                [SRUN["tasks_aborted"].format(node=n.name, ranks=ranges(list(ranks))) for n, ranks in alive])
        sim.job(run, [down + S, down + S, down + S + 2000], [
            SRUN["node_failure"].format(node=node.name), SRUN["aborted"],
            SLURMSTEPD["node_failure"].format(job=run.id, node=run.nodes[0].name, at=iso(down + run.skew0))])
    fail(sim, run, t, down + 2 * S, "NODE_FAIL", None, "0:0")
    sim.record("node_crash", t, run, node, None, "slurm_node_not_responding", None, evidence_ts=utc(seen).isoformat())
