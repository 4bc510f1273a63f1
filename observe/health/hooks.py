"""Slurm's Prolog, Epilog and HealthCheckProgram, as ``observe slurm prolog|epilog|healthcheck``.

Slurm runs these as root, with no PATH, and drains a node whose Prolog or Epilog exits non-zero. So
each hook keeps to a time budget, acts only on a check's clear FAIL (UNKNOWN never acts), does
nothing when it cannot record what it does (store unreachable), and exits 0 whatever happens inside
it: observe's own bug must never drain a node or fail a job.

- epilog: runs the epilog checks, drains the node on a FAIL and, for a job that failed and opted in
  (``sbatch --requeue`` and a ``#OBSERVE requeue`` line in its script), requeues it so it restarts
  on healthy nodes, recording the work lost since its latest checkpoint; then, with the budget left,
  captures the job's artifacts (batch script, the environment Slurm hands the hook, output paths;
  secrets redacted).
- prolog: records which GPUs the job holds (``SLURM_JOB_GPUS`` -> UUID and PCI id; the epilog
  records their release), runs the prolog checks before the job starts; a FAIL drains the node and
  requeues an opted-in job so it starts elsewhere.
- healthcheck: runs the periodic checks; a FAIL drains, and a node observe drained for failed checks
  is resumed once those same checks pass again, and then, on the idle node, the extended re-check
  (``[drain] return_checks``: burn, all-reduce, NVML).

Running as root among files users control, a hook opens nothing of theirs through a symbolic link,
creates its own files exclusively, and reads a job's checkpoint directory only as the job's user
(:func:`observe.checkpoint.latest_as`).
"""
from __future__ import annotations

import math
import os
import re
import signal
import stat
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

import polars as pl

from observe import redact
from observe.job_states import EPILOG_ACTS_ON
from observe.health import allocation, bugreport, drains, requeue, slurm
from observe.health.drain import Drainer
from observe.health.events import health_events
from observe.health.policy import Policy
from observe.health.result import Result, Status
from observe.health.runner import as_events, run_checks
from observe.config import to_json
from observe.store import Store

ACTING = ("drain", "reset", "reboot")
SCRIPT_MAX = 256 << 10


class BudgetSpent(Exception):
    """The hook's time budget ran out."""


@dataclass
class Hook:
    """One hook run: who, where, with what policy and store; what it did (``log``)."""

    kind: str  # prolog, epilog or healthcheck
    env: dict[str, str]
    policy: Policy
    store: Store
    dry_run: bool = False
    log: list[str] = field(default_factory=list)
    deadline: float = math.inf  # time.monotonic() when the budget runs out (set by run)

    @property
    def node(self) -> str:
        if not self.env.get("SLURMD_NODENAME"):
            raise slurm.SlurmError("SLURMD_NODENAME is not set: run by slurmd (Prolog, Epilog, HealthCheckProgram)")
        return slurm.node_name(self.env["SLURMD_NODENAME"])

    @property
    def job(self) -> str:
        if not (self.env.get("SLURM_JOB_ID") or self.env.get("SLURM_JOBID")):
            raise slurm.SlurmError("SLURM_JOB_ID is not set: run by slurmd as Prolog or Epilog")
        return slurm.job_id_of(self.env.get("SLURM_JOB_ID") or self.env["SLURM_JOBID"])

    def say(self, text: str) -> None:
        self.log.append(line(self.kind, text))

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.deadline - time.monotonic()


def line(kind: str, text: str) -> str:
    """One log line: time, hook, what (on one line whatever the text holds)."""
    return f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} observe {kind}: {' | '.join(text.splitlines())}"


def run(hook: Hook, budget_s: float) -> int:
    """Run ``hook`` within ``budget_s``; always 0 (every failure is logged, none is raised)."""
    hook.deadline = time.monotonic() + budget_s
    try:
        with _deadline(budget_s):
            try:
                _probe(hook.store)
            except OSError as exc:
                hook.say(f"store {hook.store.name} unreachable ({exc.strerror or exc}): nothing done")
                return 0
            {"epilog": _epilog, "prolog": _prolog, "healthcheck": _healthcheck}[hook.kind](hook)
    except BudgetSpent:
        hook.say(f"stopped: the {budget_s:g}s budget ran out; nothing more done")
    except Exception as exc:  # noqa: BLE001 - fail safe: log, leave the node and the job alone
        hook.say(f"internal error, node and job left alone: {type(exc).__name__}: {exc}")
    return 0


def _epilog(hook: Hook) -> None:
    """The checks, the drain and the requeue first; the artifacts last, with the budget left: however
    long a job's script takes to redact, it cannot keep the checks from running."""
    _gpus(hook, "gpu_released")
    info = slurm.job(hook.job)
    failed = _job_failed(hook.env, info)
    results = _checks(hook, "epilog")
    if hook.policy.epilog.explain:  # a job that exits 0 after a fault of the node (its user's code caught it) leaves
        results += _checks(hook, "epilog", ["explain"])  # the node as broken as one that failed
    drained = _drain_if_failing(hook, results)
    capture = hook.policy.epilog.capture and info.get("BatchHost", hook.node) == hook.node
    script = slurm.batch_script(hook.job) if capture or (drained and failed) else ""
    if drained and failed:
        requeue.requeue(hook, info, script, results)
    elif not results or all(r.status is not Status.FAIL for r in results):
        hook.say(f"job {hook.job} {'failed' if failed else 'ended'}; no check failed on {hook.node}")
    if capture:
        hook.store.write(_artifacts(hook, info, script), deliver=True)  # captured once, on the node that ran the script


def _prolog(hook: Hook) -> None:
    _gpus(hook, "gpu_allocated")
    results = _checks(hook, "prolog")
    if _drain_if_failing(hook, results):
        info = slurm.job(hook.job)
        requeue.requeue(hook, info, slurm.batch_script(hook.job), results)


def _gpus(hook: Hook, kind: str) -> None:
    """Record which GPUs (UUID, PCI id) the job holds: ``gpu_allocated`` or ``gpu_released``."""
    numbers = allocation.job_gpus(hook.env)
    if not numbers:
        return
    gpus = allocation.table()
    if isinstance(gpus, str):
        hook.say(f"job {hook.job}'s GPUs {numbers} not recorded: {gpus}")
        return
    found = allocation.events(hook.node, hook.job, kind, numbers, gpus)
    if found.height:
        hook.store.write(found, deliver=True)


def _healthcheck(hook: Hook) -> None:
    _note_others(hook)
    results = _checks(hook, "healthcheck")
    if _drain_if_failing(hook, results):
        return
    target = slurm.nodes([hook.node])
    drainer = Drainer(hook.policy, hook.store, hook.dry_run)
    ours = bool(target) and target[0].drained and target[0].reason.startswith(drainer.prefix)
    held = bool(target) and not target[0].drained and drainer.held(hook.node)  # resumed by a person, still held
    if not ((ours or held) and drainer.drained_for_checks(hook.node)):
        return
    if all(r.status is Status.PASS for r in results) and target[0].idle:
        # the extended re-check before a node returns: on a drained node no job is disturbed
        extra = [c for c in drainer.rules.return_checks if c not in {r.check for r in results}]
        results += _checks(hook, "healthcheck", extra)
    for d in drainer.resume(hook.node, {"checks": {r.check: r.to_dict() for r in results}}):
        hook.say(f"{d.kind} {d.node}: {d.detail}")


def _note_others(hook: Hook) -> None:
    """Record a drain of this node that observe did not make (NHC, an admin, Slurm), and its end."""
    try:
        target = slurm.nodes([hook.node])
        event = drains.seen(hook.store, target[0], hook.policy.drain) if target else None
    except (slurm.SlurmError, pl.exceptions.PolarsError, OSError) as exc:
        hook.say(f"could not tell who else drained {hook.node}: {exc}")
        return
    if event is not None:
        hook.store.write(event)
        hook.say(event.item(0, "message"))


def _checks(hook: Hook, section: str, names: list[str] | None = None) -> list[Result]:
    names = list(hook.policy.hook(section).checks) if names is None else names
    if not names:
        return []
    overrides = {"node": hook.node, "store": hook.store.location, "device": "auto"}
    if hook.kind == "epilog":
        overrides["job"] = hook.job  # gpu_procs: this job's processes must be gone
    results = run_checks(names, hook.policy, max(1.0, hook.left() - 5), overrides)
    hook.store.write(as_events(results, hook.node, hook.policy.version), deliver=True)
    for r in results:
        if r.status is not Status.PASS:
            hook.say(f"{r.check} {r.status.value}{' (' + r.action + ')' if r.action else ''}: {r.summary}")
    return results


def _drain_if_failing(hook: Hook, results: list[Result]) -> bool:
    """Drain on a FAIL whose action takes the node out; True when the node is (now) drained by observe."""
    failing = [r for r in results if r.status is Status.FAIL and r.action in ACTING]
    watched = [r for r in failing if hook.policy.checks[r.check]["observe_only"]]
    for r in watched:
        hook.say(f"{r.check} is observe-only: would {r.action}, did nothing")
    failing = [r for r in failing if r not in watched]
    if not failing:
        return False
    reason = _reason(failing)
    evidence = {"checks": {r.check: r.to_dict() for r in failing}, "hook": hook.kind,
                **({"job": hook.env["SLURM_JOB_ID"]} if hook.env.get("SLURM_JOB_ID") else {})}
    drainer = Drainer(hook.policy, hook.store, hook.dry_run)
    decisions = drainer.drain(hook.node, reason, evidence)
    for d in decisions:
        hook.say(f"{d.kind} {d.node}: {d.detail}")
    if any(d.done for d in decisions) and any((r.category or "hardware") == "hardware" for r in failing):
        _bug_report(hook)
    return any(d.kind == "node_drain" or (d.kind == "node_drain_refused" and d.detail.startswith("already drained by observe"))
               for d in decisions)


def _bug_report(hook: Hook) -> None:
    """Start nvidia-bug-report on the node just drained for hardware, before any remedy; its file to the ledger."""
    where = bugreport.start(hook.node, hook.policy.drain)
    hook.say(f"nvidia-bug-report: {where}")
    hook.store.write(health_events([{
        "node": hook.node, "kind": "bug_report", "severity": "info", "message": f"nvidia-bug-report: {where}",
        "attrs": to_json({"file": where if where.startswith("/") else None, "note": where}),
        "file_id": f"ledger:{hook.node}"}]))


def _reason(failing: list[Result]) -> str:
    """A drain reason led by its type: ``[hardware] xid_history (reboot): Xid 79 on 0000:3b:00 ...``
    (the gravest type when checks disagree: hardware, then node, then user)."""
    kinds = [r.category or "hardware" for r in failing]
    kind = next((k for k in ("hardware", "node", "user") if k in kinds), kinds[0])
    return f"[{kind}] " + "; ".join(f"{r.check} ({r.action}): {_untyped(r.summary)}" for r in failing)


def _untyped(summary: str) -> str:
    """A summary without a leading ``[type] `` (the reason carries one)."""
    return re.sub(r"(^|; )\[\w+\] ", r"\1", summary)


def _job_failed(env: dict[str, str], info: dict[str, str]) -> bool:
    """The job ended badly: its script's wait status is not 0 (Slurm hands it to the epilog; the
    derived exit code is not used: it outlives a requeue) or its state is a failed one."""
    state = info.get("JobState", "")
    return env.get("SLURM_JOB_EXIT_CODE", "0") not in ("", "0") or state in EPILOG_ACTS_ON


def _artifacts(hook: Hook, info: dict[str, str], script: str):
    """The job's artifacts as one event, secrets redacted."""
    keep = ("JobName", "UserId", "JobState", "ExitCode", "Restarts", "Requeue", "NodeList", "BatchHost", "StartTime",
            "EndTime", "WorkDir", "StdOut", "StdErr", "Command", "Partition", "TRES")
    attrs = {
        "job": {k: redact.text(info[k]) for k in keep if k in info},
        "env": redact.env(dict(sorted(hook.env.items()))),
        "script": redact.text(script[:SCRIPT_MAX]) if script else None,
        "script_truncated": len(script) > SCRIPT_MAX,
        "exit_code": hook.env.get("SLURM_JOB_EXIT_CODE2") or hook.env.get("SLURM_JOB_EXIT_CODE"),
    }
    return health_events([{
        "node": hook.node, "kind": "job_artifacts", "severity": "info", "job_id": hook.job,
        "message": f"job {hook.job} artifacts: {info.get('JobState', '?')} exit {attrs['exit_code'] or '?'} "
                   f"on {info.get('NodeList', hook.node)}",
        "attrs": to_json(attrs), "file_id": f"artifacts:{hook.job}",
    }])


def _probe(store: Store) -> None:
    """Raise unless the store takes writes: a hook that cannot record what it does does nothing.
    The probe is a new file of a random name (mkstemp: O_EXCL, O_NOFOLLOW): a link planted at a
    name it could guess never makes it write another file, nor can a planted file stop it. A store in
    an object store is refused: the drain budget needs a lock every node shares (a shared directory's)."""
    if not store.place.local:
        raise OSError(f"hooks need a local or shared directory as their store (the drain budget's lock), "
                      f"not {store.name}")
    store.make_dirs(store.root)
    fd, probe = tempfile.mkstemp(prefix=".probe-", dir=store.root)
    os.close(fd)
    os.unlink(probe)


@contextmanager
def _deadline(seconds: float):
    def expire(signum, frame):
        raise BudgetSpent()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.1))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def write_log(lines: list[str], path: str | None) -> None:
    """Append the hook's log lines to ``path`` (else stderr: slurmd's log); never raises. Only to a
    regular file, never through a link (nor waiting on a FIFO) put at ``path``."""
    text = "".join(f"{line}\n" for line in lines)
    try:
        if path:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            with open(fd, "a") as f:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    f.write(text)
        else:
            sys.stderr.write(text)
    except OSError:
        pass
