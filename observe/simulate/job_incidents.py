"""Failures no node causes, one function per shape: a rank that stops issuing collectives
(hung_rank), a collective that hangs on every rank (silent_hang), the same bug on every rank
(user_bug_all). Explain must name the job's own fault, or say it cannot blame a node. Each takes
the cluster, the time and a running job's run."""
from __future__ import annotations

from typing import TYPE_CHECKING

from observe.simulate.clock import S, utc
from observe.simulate.fleet import Run
from observe.simulate.formats import APP_ERRORS
from observe.simulate.joblog import abort, all_time_out, collective, traceback, watchdog
from observe.simulate.slurm import fail

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def hung_rank(sim: Cluster, t: int, run: Run) -> None:
    """One rank stops issuing collectives (a deadlock in user code, a stuck data loader): no kernel
    or Slurm event; 10 minutes later every other rank's watchdog times out on collective N with
    N-1 completed, while the hung rank prints nothing or times out on N-1 (it never enqueued N)."""
    rng = sim.rng
    hung, node, _, _ = sim.pick(run)
    seq, op, numel, new = collective(sim)
    silent = rng.random() < 0.5
    fired = t + 600 * S + int(rng.integers(0, 2 * S))
    times, text = [], []
    for r in range(run.ranks):
        if r == hung:
            if silent:
                continue
            a, b = watchdog(sim, run, r, fired - int(rng.integers(S, 20 * S)), seq - 1, seq - 1, seq - 2, op, numel, new)
        else:
            a, b = watchdog(sim, run, r, fired + int(rng.integers(0, 900_000)), seq, seq + int(rng.integers(0, 3)),
                            seq - 1, op, numel, new)
        times += a
        text += b
    sim.job(run, times, text)
    done = abort(sim, run, max(times) + 2 * S, (hung + 1) % run.ranks, "Aborted (core dumped)")
    fail(sim, run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("hung_rank", t, run, node, None, "nccl_timeout", None, rank=hung, evidence_ts=utc(min(times)).isoformat())


def silent_hang(sim: Cluster, t: int, run: Run) -> None:
    """A collective hangs on every rank at once (an NCCL or framework bug): every rank's watchdog
    fires on the same collective, no rank lags, no node logs anything. No node is at fault."""
    rng = sim.rng
    last = all_time_out(sim, run, t + 600 * S, 3)
    done = abort(sim, run, last + 2 * S, int(rng.integers(run.ranks)), "Aborted (core dumped)")
    fail(sim, run, t, done + int(rng.integers(10, 40)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("silent_hang", t, run, run.nodes[0], None, None, None, nodes=[n.name for n in run.nodes])


def user_bug_all(sim: Cluster, t: int, run: Run) -> None:
    """Every rank hits the same bug at once (a bad config, a shape mismatch): the same traceback on
    every rank within a second, no hardware event. The job's own fault, on no node in particular."""
    rng = sim.rng
    kind, path, line, fn, code, exc = APP_ERRORS[1 + int(rng.integers(len(APP_ERRORS) - 1))]
    shard = int(rng.integers(0, 4000))
    for r in range(run.ranks):
        traceback(sim, run, t + int(rng.integers(0, S)), r, (path, line, fn, code),
                  (exc.format(dev=run.where(r)[1], dataset=run.job.dataset, shard=shard),))
    done = abort(sim, run, t + 2 * S, 0, "Exited with exit code 1")
    fail(sim, run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("user_bug_all", t, run, run.nodes[0], None, kind, None, nodes=[n.name for n in run.nodes])
