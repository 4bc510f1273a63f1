"""gpu_procs: processes still on the GPUs (NVML's compute and graphics processes) and the Slurm job
each belongs to, from its ``/proc/<pid>/cgroup``: Slurm puts a job's processes under ``job_<id>``
(cgroup v2: ``/system.slice/slurmstepd.scope/job_<id>/step_0/...``; v1: ``/slurm/uid_<uid>/job_<id>/...``).
After a job (epilog), a process of that job still holding a GPU (stuck in the driver, unkillable)
or one started outside Slurm takes memory and compute from the next job. ``job``: the job that
just ended; without it only processes of no job are judged.
"""
from __future__ import annotations

import re
from pathlib import Path

from observe.health.nvml_gpus import each_gpu
from observe.health.result import Result, Status, unknown

NAME = "gpu_procs"
JOB = re.compile(r"/job_(\d+)(?:/|$)", re.MULTILINE)


def run(opts: dict) -> Result:
    """FAIL when a GPU holds a process of the job that ended, or of no Slurm job (a stray)."""
    gpus = each_gpu(NAME, read)
    if isinstance(gpus, Result):
        return gpus
    if not gpus:
        return unknown(NAME, "NVML shows no GPUs")
    proc = Path(opts.get("root", "/")) / "proc"
    ended = str(opts.get("job") or "")
    procs = [{**p, "gpu": g["pci"], **owner(proc / str(p["pid"]))} for g in gpus for p in g.get("procs", [])]
    problems, unread = [], []
    for p in procs:
        used = "?" if p["used_mib"] is None else p["used_mib"]
        what = f"pid {p['pid']} ({p['name'] or '?'}) on GPU {p['gpu']}, {used} MiB"
        if p["state"] == "unreadable":
            unread.append(what)
        elif p["state"] == "running" and p["job"] is None:
            problems.append(f"{what}: belongs to no Slurm job (a stray)")
        elif p["state"] == "running" and p["job"] == ended:
            problems.append(f"{what}: still running for job {ended}, which ended")
    unread += [f"GPU {g.get('pci') or g['index']}: {g['error']}" for g in gpus if "error" in g]
    evidence = {"processes": procs, "job": ended or None}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    if unread:
        return unknown(NAME, "could not tell whose: " + "; ".join(unread), **evidence)
    running = [p for p in procs if p["state"] == "running"]
    exited = [str(p["pid"]) for p in procs if p["state"] == "exited"]
    jobs = ", ".join(sorted({p["job"] for p in running}))
    said = f"{len(running)} process(es) on the GPUs, of running job(s) {jobs}" if running else \
        f"no process left on the {len(gpus)} GPU(s)"
    return Result(NAME, Status.PASS, said + (f" (pid {', '.join(exited)} exited meanwhile)" if exited else ""), evidence)


def read(nvml, handle) -> dict:
    """The GPU's compute and graphics processes: pid and memory used (MiB; None where not reported)."""
    procs = {}
    for call in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            found = call(handle)
        except nvml.NVMLError_NotSupported:
            continue
        for p in found:
            used = p.usedGpuMemory
            procs[p.pid] = {"pid": p.pid, "used_mib": None if used is None else used >> 20}
    return {"procs": list(procs.values())}


def owner(pid_dir: Path) -> dict:
    """The Slurm job a process belongs to (None: no job) and its command name; ``state`` exited when
    its /proc entry is gone, unreadable when it cannot be read."""
    try:
        cgroup = (pid_dir / "cgroup").read_text()
    except FileNotFoundError:
        return {"state": "exited", "job": None, "name": ""}
    except OSError:
        return {"state": "unreadable", "job": None, "name": ""}
    m = JOB.search(cgroup)
    return {"state": "running", "job": m.group(1) if m else None, "name": _name(pid_dir)}


def _name(pid_dir: Path) -> str:
    """The program's name: argv[0]'s last part, else the kernel's ``comm``."""
    try:
        argv0 = (pid_dir / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        return Path(argv0).name or (pid_dir / "comm").read_text().strip()
    except OSError:
        return ""
