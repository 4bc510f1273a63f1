"""gpu_count: the GPUs the driver shows (``/proc/driver/nvidia/gpus/<pci>``) against how many this
node must have (the policy's ``expected``, else Slurm's ``Gres=gpu:N`` for the node)."""
from __future__ import annotations

import os
import re
from pathlib import Path

from observe.health.result import Result, Status, unknown

NAME = "gpu_count"


def run(opts: dict) -> Result:
    """FAIL when fewer GPUs show than expected (one fell off the bus)."""
    root = Path(opts.get("root", "/"))
    found = sorted(p.name for p in (root / "proc/driver/nvidia/gpus").glob("*")) \
        if (root / "proc/driver/nvidia/gpus").is_dir() else []
    expected = int(opts.get("expected") or 0) or _gres_gpus(opts.get("gres") or os.environ.get("SLURM_JOB_GRES", ""))
    evidence = {"found": found, "expected": expected}
    if not expected:
        if not found:
            return unknown(NAME, "no GPU driver here and no expected count (policy gpu_count.expected or Slurm Gres)", **evidence)
        return Result(NAME, Status.PASS, f"{len(found)} GPU(s) present (no expected count set)", evidence)
    if len(found) < expected:
        return Result(NAME, Status.FAIL, f"{len(found)} of {expected} GPUs present", evidence)
    return Result(NAME, Status.PASS, f"{len(found)} of {expected} GPUs present", evidence)


def _gres_gpus(gres: str) -> int:
    """GPUs in a Slurm Gres string: ``gpu:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a100:4,nic:1``."""
    total = 0
    for item in gres.split(","):
        m = re.match(r"(?:gres/)?gpu(?::[^:(,]+)?[:=](\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total
