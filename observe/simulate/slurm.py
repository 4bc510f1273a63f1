"""Slurm's side of the simulation, as event handlers over the cluster: jobs arrive, are scheduled
(in queue order, backfilling), start, and end (completed, cancelled, timed out, failed), with what
slurmctld, slurmd, slurmstepd and jobcomp log of it; nodes drain and come back. Also the failures
that are a job's own rather than an injected incident: its bug, a GPU a previous job left broken,
the Xids of a cancelled job's killed processes."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from observe.simulate.clock import HOUR, MINUTE, S, iso, py_stamp, utc
from observe.simulate.fleet import CPUS_PER_NODE, DATASETS, USERS, Job, Node, Run
from observe.simulate.formats import (APP_ERRORS, JOBCOMP, KERNEL, NCCL, PYTHON, SETUP, SLURMCTLD, SLURMD, SLURMSTEPD,
                                      TRAINING, lines, real)
from observe.simulate.joblog import abort, header, nccl_init, traceback

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def arrive(sim: Cluster, t: int) -> None:
    """A job is submitted; the scheduler looks at the queue shortly after."""
    rng = sim.rng
    kind = sim.kinds[rng.choice(len(sim.kinds), p=sim.weights)]
    user = USERS[rng.integers(len(USERS))]
    seconds = int(rng.uniform(*kind.hours) * 3600) * S
    job = Job(sim.next_id, kind, user, int(rng.choice(kind.nodes)), seconds, t, t, DATASETS[rng.integers(len(DATASETS))])
    sim.next_id += 1
    sim.queue.append(job)
    sim.ctl(t, SLURMCTLD["submit"].format(job=job.id, prio=int(rng.integers(4000, 9000)), usec=int(rng.integers(300, 3000))))
    schedule(sim, t + int(rng.integers(1000, 400_000)))


def schedule(sim: Cluster, t: int) -> None:
    """Start queued jobs on idle nodes in queue order; later jobs backfill unless the head starves."""
    free = [n for n in sim.nodes if n.state == "idle"]
    head = True
    for job in list(sim.queue):
        if job.eligible > t:
            continue
        if job.nodes <= len(free):
            sim.queue.remove(job)
            start(sim, t, job, free[:job.nodes], backfill=not head)
            free = free[job.nodes:]
        elif head and t - job.submit > 2 * HOUR:
            break
        else:
            head = False


def outcome(rng: np.random.Generator) -> str:
    """How a run ends unless an incident intervenes."""
    u = rng.random()
    return "TIMEOUT" if u < 0.04 else "CANCELLED" if u < 0.10 else "FAILED" if u < 0.16 else "COMPLETED"


def start(sim: Cluster, t: int, job: Job, nodes: list[Node], backfill: bool) -> None:
    """A run of ``job`` begins on ``nodes``: allocation, slurmd's launch, the job's header and NCCL
    setup; how it will end is drawn now."""
    rng, uid = sim.rng, job.user[1]
    job.runs += 1
    if job.runs == 1:
        sim.files.add(f"jobs/slurm-{job.id}.out", "nccl", keep_open=False, job=str(job.id))
    run = Run(job, nodes, t, sim.gpus, rng, sim.start)
    for n in nodes:
        n.state, n.run = "alloc", run
    if backfill:
        sim.ctl(t, SLURMCTLD["backfill"].format(job=job.id, nodes=run.nodelist))
    else:
        sim.ctl(t, SLURMCTLD["allocate"].format(job=job.id, nodes=run.nodelist, cpus=len(nodes) * CPUS_PER_NODE))
    sim.syslog(nodes[0], t + 40_000, SLURMD["launch_batch"].format(pid=nodes[0].daemons["slurmd"], job=job.id, uid=uid))
    for k, n in enumerate(nodes):
        sim.syslog(n, t + 2 * S + k * 3000,
                   SLURMD["launch_task"].format(pid=n.daemons["slurmd"], job=job.id, uid=uid, host=nodes[0].ip,
                                                port=int(rng.integers(32768, 61000))),
                   SLURMD["affinity"].format(pid=n.daemons["slurmd"], job=job.id))
    sim.job(run, t + S, header(run, t + S))
    if run.ranks > 1:
        nccl_init(sim, run, t + 15 * S)
    if len(nodes) > 1 and rng.random() < 0.3:
        sim.kernel(nodes[0], t + 16 * S, KERNEL["syn_flood"])
    fate = outcome(rng)
    if fate == "TIMEOUT":
        run.end = run.stop = t + job.kind.limit * MINUTE
    elif fate == "CANCELLED":
        run.end = run.stop = t + int(job.seconds * rng.uniform(0.05, 0.9))
    elif fate == "FAILED":  # the application's own error, before its planned end
        sim.at(t + 2 * MINUTE + int(job.seconds * rng.uniform(0, 0.4)), app_error, run)
    run.fate = fate if fate != "FAILED" else run.fate
    sim.at(run.end, end, run)
    sim.live.append(run)
    for n in nodes:  # a GPU failed unnoticed in the node's previous job (scenario prior_fault)
        if n.broken is not None:
            sim.at(t + int(rng.integers(40 * S, 4 * MINUTE)), inherited, run, n)


def end(sim: Cluster, t: int, run: Run) -> None:
    """A run's last lines: the job's tail, slurmctld completion, jobcomp, slurmstepd; nodes freed."""
    if run.ended or t != run.end:
        return
    run.ended = True
    job, first, rng = run.job, run.nodes[0].name, sim.rng
    done = t + int(rng.integers(S // 2, 3 * S))
    if run.fate == "COMPLETED":
        took = t - run.start
        sim.job(run, t, [TRAINING["finished"].format(stamp=py_stamp(t + run.skew0), script=job.kind.script, steps=run.step,
                                                     hours=took // HOUR, minutes=took % HOUR // MINUTE)])
        if run.ranks > 1:
            sim.job(run, t + 1000, [NCCL["destroy"].format(prefix=run.prefix(r), comm=run.comms[r], rank=r, nranks=run.ranks,
                                                           dev=r % run.gpus, bus=run.where(r)[0].gpus[r % run.gpus].bus)
                                    for r in range(run.ranks)])
    elif run.fate in ("CANCELLED", "TIMEOUT"):
        cancelled = run.fate == "CANCELLED"
        sim.ctl(t, SLURMCTLD["cancel"].format(job=job.id, uid=job.user[1]) if cancelled
                else SLURMCTLD["time_limit"].format(job=job.id))
        why = "" if cancelled else SLURMSTEPD["time_limit"]
        at = iso(t + run.skew0)
        sim.job(run, t + S // 2, [SLURMSTEPD["cancelled"].format(job=job.id, node=first, at=at, why=why),
                                  SLURMSTEPD["step_cancelled"].format(job=job.id, node=first, at=at, why=why)])
        run.status, run.exit = "WTERMSIG 15", "0:15"
        done += int(rng.integers(1, 30)) * S
        if cancelled and sim.scenario and job.id not in sim.hit and rng.random() < 0.5:
            killed_xids(sim, t + S // 2, run)
    if run.status:
        sim.ctl(done, *lines(SLURMCTLD["complete"], job=job.id, status=run.status))
    for k, n in enumerate(run.nodes):
        sim.syslog(n, done + 5000 + k * 1000, SLURMD["step_done"].format(pid=run.stepd[k], job=job.id))
        if rng.random() < 0.3:
            sim.kernel(n, done + 6000, KERNEL["peermem"])
    sim.syslog(run.nodes[0], done + 9000, SLURMD["batch_done"].format(pid=run.stepd[0] - 7, job=job.id))
    sim.out.put(("jobcomp",), done, jobcomp(run, done))
    for n in run.nodes:
        n.run = None
        if n.state == "alloc":
            n.state = "idle"
    schedule(sim, done + 10_000)


def jobcomp(run: Run, t: int) -> str:
    """The jobcomp/filetxt record of a finished run."""
    job, (user, uid, account) = run.job, run.job.user
    n = len(run.nodes)
    return JOBCOMP["record"].format(job=job.id, user=user, uid=uid, name=job.kind.name, state=run.fate, limit=job.kind.limit,
                                    start=iso(run.start), end=iso(t), nodes=run.nodelist, count=n, cpus=n * CPUS_PER_NODE,
                                    memory=n * 2000, gpus=run.ranks, account=account, submit=iso(job.submit),
                                    eligible=iso(job.eligible), exit=run.exit)


def fail(sim: Cluster, run: Run, hang: int, end_at: int, fate: str, status: str | None, exit_code: str) -> None:
    """Decide a run's early end: progress stops at ``hang``, Slurm ends it at ``end_at``."""
    run.doomed = True
    run.stop, run.end, run.fate, run.status, run.exit = hang, end_at, fate, status, exit_code
    sim.at(end_at, end, run)


def drain(sim: Cluster, node: Node, t: int, reason: str) -> None:
    """slurmctld drains ``node`` at ``t``; an admin returns it to service hours later."""
    node.state = "drain"
    sim.ctl(t, *lines(SLURMCTLD["drain"], node=node.name, reason=reason))
    sim.at(t + int(sim.rng.integers(2 * HOUR, 6 * HOUR)), repaired, node, [SLURMCTLD["idle"].format(node=node.name)])


def repaired(sim: Cluster, t: int, node: Node, said: list[str]) -> None:
    """``node`` is back in service (slurmctld logs ``said``); the queue may use it."""
    node.state, node.fallen = "idle", None
    sim.ctl(t, *said)
    schedule(sim, t + 10_000)


def app_error(sim: Cluster, t: int, run: Run) -> None:
    """The run's own bug ends it: a traceback on one rank, srun kills the rest."""
    if run.doomed or run.ended or (sim.scenario and (run.noisy or run.job.id in sim.hit)):
        return
    rng = sim.rng
    kind, path, line, fn, code, exc = APP_ERRORS[rng.integers(len(APP_ERRORS))]
    rank = int(rng.integers(run.ranks))
    node, g, _ = run.where(rank)
    traceback(sim, run, t, rank, (path, line, fn, code),
              (exc.format(dev=g, dataset=run.job.dataset, shard=int(rng.integers(0, 4000))),))
    done = abort(sim, run, t + S // 2, rank, "Exited with exit code 1")
    fail(sim, run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("user_error", t, run, node, None, kind, None)


def inherited(sim: Cluster, t: int, run: Run, node: Node) -> None:
    """The next run on a node whose GPU failed unnoticed (the prior_fault incident) dies of it; this
    time the node is drained."""
    if run.doomed or run.ended or node.broken is None:
        return
    g, since, code = node.broken
    node.broken = None
    rank = run.nodes.index(node) * run.gpus + g
    error = str(sim.rng.choice(PYTHON["inherited"])).format(gpu=g)
    traceback(sim, run, t, rank, SETUP, (error,))
    done = abort(sim, run, t + S // 2, rank, "Exited with exit code 1")
    end_at = done + int(sim.rng.integers(5, 30)) * S
    fail(sim, run, t, end_at, "FAILED", "WEXITSTATUS 1", "1:0")
    drain(sim, node, end_at + int(sim.rng.integers(60, 600)) * S, SLURMCTLD["nhc_reason"].format(gpu=g, code=code))
    sim.record("prior_fault", since, run, node, node.gpus[g], "gpu_xid", code, run_ts=utc(t).isoformat())


def killed_xids(sim: Cluster, t: int, run: Run) -> None:
    """Xid 43 then 45 on a GPU whose process was killed (a cancelled job); no incident."""
    rng = sim.rng
    _, node, g, pid = sim.pick(run)
    gpu = node.gpus[g]
    ch = f"{int(rng.integers(8, 64)):08x}"
    sim.kernel(node, t, KERNEL["xid43"].format(pci=gpu.pci, pid=pid, ch=ch))
    sim.kernel(node, t + int(rng.integers(50_000, 400_000)), *real("xid45", pci=gpu.pci, pid="'<unknown>'", name="<unknown>", ch=ch))
