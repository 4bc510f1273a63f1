"""Requeueing a failed job that opted in (``sbatch --requeue`` and a ``#OBSERVE requeue`` line in its
batch script), with the work lost since its latest checkpoint: the hooks' one action on a job.

The checkpoint directory is the user's: it is read as the job's user, in a child process, structurally
only (:func:`observe.checkpoint.latest_as`).
"""
from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING

from observe import checkpoint
from observe.config import to_json
from observe.health import slurm
from observe.health.events import health_events
from observe.health.result import Result, Status

if TYPE_CHECKING:
    from observe.health.hooks import Hook

MARKER = re.compile(r"^#OBSERVE[ \t]+requeue\b(?P<opts>[^\n]*)$", re.M)
SLURM_ID = re.compile(r"\((\d+)\)$")  # scontrol's UserId=alice(1000), GroupId=alice(1000)


def requeue(hook: Hook, info: dict, script: str, results: list[Result]) -> None:
    """Requeue the job if it opted in; the decision, and the work lost since its latest checkpoint, to the ledger."""
    marker = MARKER.search(script or "")
    limit = hook.policy.epilog.max_requeues
    restarts = int(info.get("Restarts") or hook.env.get("SLURM_JOB_RESTART_COUNT") or 0)
    why = ("slurmctld no longer knows the job" if not info else
           "the job does not allow requeue (sbatch --requeue)" if info.get("Requeue") != "1" else
           "no '#OBSERVE requeue' line in the batch script" if not marker else
           f"already requeued {restarts} times (limit {limit})" if restarts >= limit else "")
    evidence: dict = {"restarts": restarts, "checks": [r.check for r in results if r.status is Status.FAIL]}
    if marker and (ckpt_dir := option(marker["opts"], "checkpoints")):
        evidence.update(lost_work(hook, info, ckpt_dir))
    if not why:
        try:
            if not hook.dry_run:
                slurm.requeue(hook.job)
        except slurm.SlurmError as exc:
            why = f"scontrol requeue failed: {exc}"
    kind = "job_requeue_skipped" if why else "job_requeue"
    detail = why or f"requeued to restart on healthy nodes (restart {restarts + 1})"
    hook.say(f"{kind} {hook.job}: {detail}" + (f"; {evidence['lost_work_s']:.0f}s of work since its checkpoint"
                                              if "lost_work_s" in evidence else ""))
    hook.store.write(health_events([{
        "node": hook.node, "kind": kind, "severity": "warning" if why else "notice", "job_id": hook.job,
        "message": f"{kind} {hook.job}: {detail}" + (" (dry run)" if hook.dry_run else ""),
        "attrs": to_json({"detail": detail, "dry_run": hook.dry_run, "evidence": evidence}),
        "file_id": f"ledger:{hook.node}",
    }]))


def lost_work(hook: Hook, info: dict[str, str], directory: str) -> dict:
    """The newest complete checkpoint in ``directory`` and the work since it. The directory is the
    user's: a root hook scans it as the job's user, in a child process within [epilog]
    ``checkpoint_timeout`` (and half the budget left) and ``checkpoint_memory_mb``, structurally only
    (it never unpickles a user's files)."""
    owner = None
    if os.geteuid() == 0 and (owner := job_owner(hook.env, info)) is None:
        return {"checkpoint_error": "the job's user is unknown: its directory is not read as root"}
    rules = hook.policy.epilog
    timeout = min(rules.checkpoint_timeout.total_seconds(), hook.left() / 2)
    try:
        best = checkpoint.latest_as(directory, owner, timeout, rules.checkpoint_memory_mb << 20)
    except (checkpoint.ScanError, OSError) as exc:
        return {"checkpoint_error": str(exc)}
    if best is None:
        return {"checkpoint": None, "lost_work_s": None}
    return {"checkpoint": best.path, "checkpoint_step": best.step, "lost_work_s": max(0.0, time.time() - best.mtime)}


def job_owner(env: dict[str, str], info: dict[str, str]) -> tuple[int, int] | None:
    """The job's uid and gid: Slurm's SLURM_JOB_UID and SLURM_JOB_GID, else the job record's."""
    ids = []
    for var, key in (("SLURM_JOB_UID", "UserId"), ("SLURM_JOB_GID", "GroupId")):
        recorded = SLURM_ID.search(info.get(key, ""))
        text = env.get(var) or (recorded.group(1) if recorded else "")
        if not text.isdigit():
            return None
        ids.append(int(text))
    return ids[0], ids[1]


def option(text: str, name: str) -> str | None:
    m = re.search(rf"(?:^|\s){name}=(\S+)", text)
    return m.group(1) if m else None
