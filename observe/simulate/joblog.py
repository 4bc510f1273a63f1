"""What a job's processes print to its output file beyond rank 0's progress: the training script's
header, every rank's NCCL setup, a rank's Python traceback, srun's lines when a task dies, and
PyTorch's watchdog when a collective times out. Shared by Slurm's job ends and the incidents."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from observe.simulate.clock import S, c10, iso, py_stamp
from observe.simulate.fleet import Run, ranges
from observe.simulate.formats import NCCL, PYTHON, REAL, SLURMSTEPD, SRUN, TORCH, TRACEBACK, TRAINING

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def header(run: Run, t: int) -> list[str]:
    """The job's first lines: its environment and the training script's start."""
    job = run.job
    stamp, script, kind = py_stamp(t + run.skew0), job.kind.script, job.kind.name
    lines = [TRAINING["env"].format(job=job.id, nodes=run.nodelist, master=run.nodes[0].name),
             TRAINING["starting"].format(stamp=stamp, script=script, kind=kind, job=job.id, count=len(run.nodes),
                                         nodes=run.nodelist, ranks=run.ranks),
             TRAINING["dataset"].format(stamp=stamp, script=script, dataset=job.dataset, shards=1 + job.id % 997)]
    if job.runs > 1:
        lines.append(TRAINING["resuming"].format(stamp=stamp, script=script, user=job.user[0], kind=kind, job=job.id))
    return lines


def nccl_init(sim: Cluster, run: Run, t: int) -> None:
    """Every rank's NCCL communicator setup, interleaved as ranks run concurrently."""
    n, gpus, rng = run.ranks, run.gpus, sim.rng
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
        text = [x.format(**f) for x in NCCL["boot"]]
        prefix = run.prefix(r, 61)
        if r == 0:
            text.insert(5, NCCL["version"])
            text += [NCCL["ring"].format(prefix=prefix, channel=c, ring=ring) for c in range(2)]
        for c in range(4):
            nxt, prv = (r + 1) % n, (r - 1) % n
            here = dict(prefix=prefix, channel=c, rank=r, dev=g, hca=g % node.hcas)
            if nxt // gpus == r // gpus:
                text.append(NCCL["p2p"].format(peer=nxt, peer_dev=nxt % gpus, **here))
            else:
                text.append(NCCL["send"].format(peer=nxt, peer_dev=nxt % gpus, **here))
            if prv // gpus != r // gpus:
                text.append(NCCL["receive"].format(peer=prv, peer_dev=prv % gpus, **here))
        text += [x.format(**f) for x in NCCL["ready"]]
        base = t + int(rng.integers(0, 2 * S))
        times += [base + i * 1700 for i in range(len(text))]
        lines += text
    sim.job(run, times, lines)


def abort(sim: Cluster, run: Run, t: int, rank: int, how: str, terminate: bool = False) -> int:
    """srun's lines when task ``rank`` dies and the step is killed; returns when they end."""
    node, _, _ = run.where(rank)
    lines = [SRUN["task_failed"].format(node=node.name, rank=rank, how=how)]
    if run.ranks > 1:
        lines.append(SRUN["terminating"].format(job=run.id) if terminate else SRUN["aborted"])
        lines.append(SLURMSTEPD["step_cancelled"].format(job=run.id, node=run.nodes[0].name, at=iso(t + S + run.skew0), why=""))
        for k, n in enumerate(run.nodes):
            others = [r for r in range(k * run.gpus, (k + 1) * run.gpus) if r != rank]
            if others:
                lines.append(SRUN["killed"].format(node=n.name, s="s" if len(others) > 1 else "", ranks=ranges(others)))
    sim.job(run, [t + i * 2000 + (S if i > 1 else 0) for i in range(len(lines))], lines)
    return t + 3 * S


def traceback(sim: Cluster, run: Run, t: int, rank: int, frame: tuple, exception: tuple[str, ...]) -> None:
    """A Python traceback on ``rank`` ending in ``frame`` (file, line, function, code), prefixed as
    torchrun prints it."""
    home = f"/home/{run.job.user[0]}/{run.job.kind.name}"
    frames = [(f.format(script=run.job.kind.script), line, fn, code) for f, line, fn, code in TRACEBACK] + [frame]
    body = [PYTHON["traceback"]]
    for path, line, fn, code in frames:
        body += [PYTHON["frame"][0].format(home=home, path=path, line=line, function=fn), PYTHON["frame"][1].format(code=code)]
    sim.job(run, t, [PYTHON["prefix"].format(rank=rank, text=x) for x in body + list(exception)])


def timeout_lines(stamp: Callable[[int], str], c: int, values: dict, new: bool) -> list[str]:
    """A rank's PyTorch watchdog timing out on a collective at ``c`` by the rank's clock, as the real
    samples print it (``new``: a newer PyTorch's wording), then the process going down. ``values``:
    rank, seq, op, numel, timeout, ran, enqueued, completed."""
    r = values["rank"]
    timeout = REAL["watchdog"][1][0].format(stamp=stamp(c), **values)
    if new:
        rest = [x.format(stamp=stamp(c + 2400 + 100 * i), **values) for i, x in enumerate(REAL["watchdog_new"][1])]
    else:
        rest = [REAL["watchdog"][1][1].format(stamp=stamp(c + 2500), **values),
                TORCH["failed"].format(rank=r, stamp=stamp(c + 2600)), TORCH["take_down"].format(rank=r, stamp=stamp(c + 2700))]
    return [timeout, *rest, TORCH["terminate"], TORCH["what"].format(rank=r, error=timeout.split("cpp:616] ", 1)[1])]


def watchdog(sim: Cluster, run: Run, r: int, w: int, seq: int, enqueued: int, completed: int, op: str, numel: int,
             new: bool) -> tuple[list[int], list[str]]:
    """Rank ``r``'s watchdog timing out on collective ``seq`` at ``w``: the lines' times and texts."""
    ran = 600_000 + int(sim.rng.integers(5, 120))
    values = dict(rank=r, seq=seq, op=op, numel=numel, timeout=600000, ran=ran, enqueued=enqueued, completed=completed)
    lines = timeout_lines(c10, w + run.skew(r), values, new)
    return [w + 2500 * min(i, 1) + 100 * i for i in range(len(lines))], lines


def collective(sim: Cluster) -> tuple[int, str, int, bool]:
    """A collective that hangs: sequence number, op, element count, whether PyTorch is the newer one."""
    rng = sim.rng
    return (int(rng.integers(800, 90_000)), str(rng.choice(["ALLREDUCE", "_REDUCE_SCATTER_BASE", "_ALLGATHER_BASE"])),
            int(rng.choice([9801523, 2106881, 544997376, 5056])), bool(rng.random() < 0.5))


def all_time_out(sim: Cluster, run: Run, fired: int, queued: int) -> int:
    """Every rank's watchdog fires within a second of ``fired`` on the same collective (up to
    ``queued`` - 1 more enqueued behind it); returns the last line's time."""
    rng = sim.rng
    seq, op, numel, new = collective(sim)
    times, lines = [], []
    for r in range(run.ranks):
        a, b = watchdog(sim, run, r, fired + int(rng.integers(0, 900_000)), seq, seq + int(rng.integers(0, queued)),
                        seq - 1, op, numel, new)
        times += a
        lines += b
    sim.job(run, times, lines)
    return max(times)


def network_error(rank: int, stamp: str) -> list[str]:
    """PyTorch's watchdog on ``rank`` ending the process on an NCCL network error."""
    return [TORCH["network_error"].format(rank=rank, stamp=stamp), TORCH["remote_error"], TORCH["terminate"]]
