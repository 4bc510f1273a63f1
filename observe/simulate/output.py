"""What reaches the files each simulated hour: every host's background noise merged with the lines
events queued for that hour, ordered by host and time, the lines of crashed nodes and lost logs
dropped; plus the lines written once (a node's boot log, its nvidia-smi snapshot at the end)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from observe.simulate.clock import UPTIME, S, iso_strings, syslog_stamps, utc
from observe.simulate.fleet import HCA_BUS, Node
from observe.simulate.formats import BOOT, NVIDIA_SMI
from observe.simulate.noise import CONTROLLER_NOISE, KERNEL_NOISE, SYSLOG_NOISE, Hosts, Noise, draw

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def boot_lines(sim: Cluster, node: Node) -> list[str]:
    """The node's dmesg from its boot: kernel, PCI devices, drivers, links up."""
    lines, pace = [], sim.rng.uniform(0.9, 1.1)  # how fast this machine boots
    for i, (offset, text) in enumerate(BOOT):
        t = node.boot + int(offset * pace * S) + i * 40 * (offset > 0)
        if "{gpu}" in text:
            lines += [f"{node.uptime(t + j)} {text.format(gpu=g.bus)}" for j, g in enumerate(node.gpus)]
        elif "{hca}" in text:
            lines += [f"{node.uptime(t + k)} {text.format(hca=HCA_BUS[k], k=k)}" for k in range(node.hcas)]
        else:
            lines.append(f"{node.uptime(t)} {text}")
    return lines


def slices(host: np.ndarray) -> list[tuple[int, int, int]]:
    """(host, start, stop) of each host's run in an array ordered by host."""
    cut = np.flatnonzero(np.diff(host)) + 1
    starts, stops = np.concatenate([[0], cut]), np.concatenate([cut, [len(host)]])
    return [(int(host[a]), int(a), int(b)) for a, b in zip(starts.tolist(), stops.tolist()) if b > a]


def flush(sim: Cluster, t0: int, t1: int) -> None:
    """Write the hour [t0, t1): the running jobs' progress, then dmesg, syslog (which carries the
    kernel's lines too), slurmctld, jobcomp and the job outputs."""
    out, rng, files = sim.out, sim.rng, sim.files
    for run in sim.live:
        t, lines = run.progress(rng, t1)
        out.put(("job", run.id), t, lines)
    sim.live = [r for r in sim.live if not r.ended]
    names = [f"nodes/{n.name}/" for n in sim.nodes]
    kt, kn, kmsg = alive(sim, *due(sim, "kernel", KERNEL_NOISE, sim.hosts, t0, t1))
    dmesg = [UPTIME % divmod(u, S) + " " + m for u, m in zip((kt - sim.boots[kn]).tolist(), kmsg)]
    for i, a, b in slices(kn):
        files.write(names[i] + "dmesg", dmesg[a:b])
    st, sn, body = alive(sim, *due(sim, "syslog", SYSLOG_NOISE, sim.hosts, t0, t1,
                                   also=(kt, kn, ["kernel: " + line for line in dmesg])))
    hosts = [f" {n.name} " for n in sim.nodes]
    stamps = syslog_stamps(st + sim.skew[sn] if sim.skew.any() else st)
    lines = [s + hosts[i] + b for s, i, b in zip(stamps, sn.tolist(), body)]
    for i, a, b in slices(sn):
        files.write(names[i] + "syslog", lines[a:b])
    ct, _, msgs = due(sim, "ctl", CONTROLLER_NOISE, sim.controller, t0, t1)
    files.write("slurm/slurmctld.log", [f"[{s}] {m}" for s, m in zip(iso_strings(ct, "ms"), msgs)])
    files.write("slurm/jobcomp.log", out.take(("jobcomp",), t1)[1])
    for dest in out.job_dests():
        files.write(f"jobs/slurm-{dest[1]}.out", out.take(dest, t1)[1])


def due(sim: Cluster, kind: str, specs: tuple[Noise, ...], hosts: Hosts, t0: int, until: int,
        also: tuple[np.ndarray, np.ndarray, list[str]] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The hour's ``kind`` lines of every host: noise drawn from ``specs``, ``also`` and the
    outbox's, ordered by host and time; lines past ``until`` (bursts running over the hour) go
    back to the outbox."""
    times, where, texts = [], [], []
    for t, host, x in [draw(specs, hosts, sim.rng, t0, until)] + ([also] if also else []):
        times.append(t)
        where.append(host)
        texts += x
    for i in range(hosts.n):
        t, x = sim.out.take((kind, i), until)
        times.append(t)
        where.append(np.full(len(t), i))
        texts += x
    t, host = np.concatenate(times), np.concatenate(where)
    order = np.lexsort((t, host))
    late = order[t[order] >= until].tolist()
    for j in late:
        sim.out.put((kind, int(host[j])), int(t[j]), texts[j])
    order = order[t[order] < until]
    return t[order], host[order], [texts[j] for j in order.tolist()]


def alive(sim: Cluster, t: np.ndarray, host: np.ndarray, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Drop the lines of crashed nodes from their crash on, and of nodes whose logs were lost
    (scenario logs_lost) in that window."""
    if not sim.crashed and not sim.lost:
        return t, host, texts
    keep = t < sim.dead_at[host]
    for index, (lo, hi) in sim.lost.items():
        keep &= ~((host == index) & (t >= lo) & (t < hi))
    return t[keep], host[keep], [x for x, k in zip(texts, keep.tolist()) if k]


def nvidia_smi(node: Node, t: int, rng: np.random.Generator) -> str:
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
                      processes="\n" + NVIDIA_SMI["process"].format(pid=pid, used=used - 500) if busy else "")
        if node.fallen == i:
            values.update(recovery="Reboot", used="Unknown Error", free="Unknown Error", util="Unknown Error",
                          mem_util="Unknown Error", temp="Unknown Error", mem_temp="Unknown Error",
                          power="Unknown Error", clock="Unknown Error", processes="")
        gpus.append(NVIDIA_SMI["gpu"].format(**values))
    return NVIDIA_SMI["log"].format(stamp=utc(t).strftime("%a %b %d %H:%M:%S %Y"), count=len(node.gpus), gpus="\n".join(gpus))
