"""Which job holds which GPU: UUID <-> PCI bus id <-> job, recorded by the Slurm prolog and epilog.

Slurm hands Prolog and Epilog ``SLURM_JOB_GPUS``: the job's GPUs as gres.conf numbers them, which
are the minor numbers of ``/dev/nvidiaN``. NVML maps each minor number to the GPU's UUID and PCI
bus id; the prolog stores one ``gpu_allocated`` event per GPU and the epilog ``gpu_released``
(``gpu`` is the PCI id as Xid lines name it, ``0000:3b:00``), so the fault policy names the job that
held a GPU when it failed (:func:`observe.health.faults.with_jobs`).

NVML is read in a child process with a time limit (``python -m observe.health.allocation`` prints
the GPU table as JSON): a GPU that fell off the bus can hang NVML calls, and the hook must not hang.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import polars as pl

from observe.pci import gpu_id
from observe.health.events import health_events
from observe.health.nvml_gpus import each_gpu, text
from observe.config import to_json

TIMEOUT_S = 15.0
KINDS = {"gpu_allocated": "allocated to", "gpu_released": "released by"}


def job_gpus(env: dict[str, str]) -> list[int]:
    """The job's GPU numbers from ``SLURM_JOB_GPUS`` (``0,1,3``; empty when the job has none)."""
    return [int(n) for n in re.findall(r"\d+", env.get("SLURM_JOB_GPUS", ""))]


def _read(nvml, handle) -> dict:
    return {"uuid": text(nvml.nvmlDeviceGetUUID(handle)), "minor": nvml.nvmlDeviceGetMinorNumber(handle)}


def table(timeout: float = TIMEOUT_S) -> list[dict] | str:
    """Every GPU's index, minor number, UUID and PCI bus id; or why they could not be read."""
    try:
        done = subprocess.run([sys.executable, "-m", "observe.health.allocation"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"NVML did not answer within {timeout:.0f}s"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return json.loads(done.stdout)


def events(node: str, job: str, kind: str, numbers: list[int], gpus: list[dict]) -> pl.DataFrame:
    """``gpu_allocated`` / ``gpu_released`` events for the job's GPUs (matched on minor number, else
    on NVML index); numbers no GPU answers to are left out."""
    by_minor = {g["minor"]: g for g in gpus if g.get("minor") is not None}
    by_index = {g["index"]: g for g in gpus}
    rows = []
    for n in numbers:
        gpu = by_minor.get(n) or (by_index.get(n) if not by_minor else None)
        if gpu is None or gpu.get("error"):
            continue
        pci = gpu_id(gpu.get("pci"))
        rows.append({"node": node, "gpu": pci, "job_id": job, "kind": kind, "severity": "info",
                     "message": f"GPU {n} ({pci}, {gpu.get('uuid')}) {KINDS[kind]} job {job}",
                     "attrs": to_json({"number": n, "uuid": gpu.get("uuid"), "pci": gpu.get("pci"),
                                       "index": gpu.get("index")}),
                     "file_id": f"gpus:{node}"})
    return health_events(rows) if rows else pl.DataFrame()


def main() -> None:
    """Print the GPU table as JSON; exit 1 with a one-line reason when NVML cannot be read."""
    found = each_gpu("allocation", _read)
    if not isinstance(found, list):
        print(found.summary, file=sys.stderr)
        sys.exit(1)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
