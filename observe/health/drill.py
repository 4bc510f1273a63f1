"""Fault drills: a synthetic Xid line in the kernel log, which the collector, ``xid_history`` and the
Slurm hooks treat as the real thing. The process name ``observe-drill`` marks it in the evidence."""
from __future__ import annotations

import os
import re
from datetime import datetime, timezone

GPU_ID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(\.[0-7])?$")
DRILL = "observe-drill"


def xid_message(code: int, gpu: str) -> str:
    """The driver's Xid line (without a header) for ``code`` on ``gpu``, named from the Xid catalog."""
    if not 0 < code < 1000:
        raise ValueError(f"Xid {code}: codes are 1-999")
    if not GPU_ID.match(gpu):
        raise ValueError(f"GPU {gpu!r}: give a PCI bus id such as 0000:3b:00")
    from observe.rules import catalog

    table = catalog("gpu_xid")
    names = table.filter(table["code"] == code).get_column("name").to_list() if table is not None else []
    return f"NVRM: Xid (PCI:{gpu}): {code}, pid='<unknown>', name={DRILL}, {names[0] if names else 'drill'}."


def inject(code: int, gpu: str, target: str, node: str) -> str:
    """Write the Xid line to ``target``: ``/dev/kmsg`` (the kernel stamps it), or append it to a kernel
    log file in kern.log form (ISO time, node, ``kernel:``). Returns the line written."""
    message = xid_message(code, gpu)
    if target == "/dev/kmsg" or os.path.realpath(target) == "/dev/kmsg":
        line = f"<2>{message}\n"  # priority crit, as the driver logs it
        fd = os.open(target, os.O_WRONLY)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return line
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    line = f"{stamp} {node} kernel: {message}\n"
    with open(target, "a") as f:
        f.write(line)
    return line
