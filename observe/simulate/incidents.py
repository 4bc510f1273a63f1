"""Every failure shape the simulator injects, by name (:data:`SHAPES`), and how they are placed:
each simulated day, each type of the run's mix is planned at random times, and at its time goes to
a running job that fits it (or waits twenty minutes for one). The shapes are one function each in
gpu_incidents, host_incidents and job_incidents; their rates and ground truth are in catalog."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from observe.simulate import gpu_incidents, host_incidents, job_incidents
from observe.simulate.clock import DAY, MINUTE
from observe.simulate.fleet import Run

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster

SHAPES: dict[str, Callable[[Cluster, int, Run], None]] = {
    "xid79": gpu_incidents.xid79, "fatal_xid": gpu_incidents.fatal_xid, "app_xid": gpu_incidents.app_xid,
    "xid_noise": gpu_incidents.xid_noise, "prior_fault": gpu_incidents.prior_fault, "logs_lost": gpu_incidents.logs_lost,
    "ib_link_down": host_incidents.ib_link_down, "ib_switch": host_incidents.ib_switch, "oom": host_incidents.oom,
    "node_not_responding": host_incidents.node_not_responding, "node_crash": host_incidents.node_crash,
    "hung_rank": job_incidents.hung_rank, "silent_hang": job_incidents.silent_hang,
    "user_bug_all": job_incidents.user_bug_all,
}


def plan_day(sim: Cluster, day: int) -> None:
    """Place the day's incidents: per type, its rate scaled to the cluster's size and the run's rate."""
    scale = len(sim.nodes) / 16
    for name, (per_day, multi) in sim.plan.items():
        n = per_day * scale * sim.rate
        for _ in range(max(1, round(n)) if n > 0 and (len(sim.nodes) > 1 or not multi) else 0):
            sim.at(day + int(sim.rng.integers(0, DAY)), inject, name)


def inject(sim: Cluster, t: int, name: str) -> None:
    """Inject incident ``name`` into a running job; retry later when none is eligible."""
    if sim.horizon is not None and t + 20 * MINUTE > sim.horizon:
        return
    multi = sim.plan[name][1]
    runs = [r for r in sim.live if not r.doomed and not r.ended and r.start + 10 * MINUTE < t < r.end - 20 * MINUTE
            and (len(r.nodes) > 1 or not multi)]
    if sim.scenario:  # a job fails of one cause at most; noise goes to jobs that no incident hits
        runs = [r for r in runs if not r.noisy and r.job.id not in sim.hit]
        if name == "xid_noise":
            runs = [r for r in runs if len(r.nodes) == 1] or runs
    if not runs:
        sim.at(t + 20 * MINUTE, inject, name)
        return
    run = runs[sim.rng.integers(len(runs))]
    SHAPES[name](sim, t, run)
