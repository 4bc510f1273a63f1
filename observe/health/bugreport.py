"""``nvidia-bug-report.sh`` collected when observe drains a node for a hardware fault, before anyone
resets, reboots or replaces anything (a reset or reboot destroys the evidence NVIDIA support asks for).

It runs detached, in its own session, under ``timeout``: a hook never waits for it (it takes minutes,
and a hung GPU can hang it; ``--safe-mode`` skips what hangs most). An argument list only: the file
name is built from the validated node name and the time, never from log text. The tool writes
as root to a name anyone can guess: only into a directory nobody else can write (no link planted
there can send it over another file).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from observe.health import slurm
from observe.health.policy import Drain

SYSTEM_PATH = "/usr/bin:/usr/sbin:/bin:/sbin:/usr/local/bin"  # Slurm runs hooks with no PATH


def start(node: str, rules: Drain) -> str:
    """Start the bug report for ``node`` per [drain] ``bug_report_dir`` / ``bug_report_command`` /
    ``bug_report_timeout``; the file it writes, or why none is collected."""
    directory = rules.bug_report_dir
    if not directory:
        return "not collected (bug_report_dir is empty)"
    path = os.environ.get("PATH") or SYSTEM_PATH
    command = shutil.which(rules.bug_report_command, path=path)
    timeout = shutil.which("timeout", path=f"{path}:{SYSTEM_PATH}")
    if command is None or timeout is None:
        return f"not collected: {rules.bug_report_command} not found"
    out = Path(directory) / f"nvidia-bug-report-{slurm.node_name(node)}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.log"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if _others_can_write(out.parent):
            return f"not collected: {out.parent} must be a directory of this user's that no one else can write"
        seconds = int(rules.bug_report_timeout.total_seconds())
        subprocess.Popen([timeout, "-k", "10", str(seconds), command, "--safe-mode", "--output-file", str(out)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, cwd=out.parent)
    except (OSError, ValueError) as exc:
        return f"not collected: {exc}"
    return f"{out}.gz"


def _others_can_write(directory: Path) -> bool:
    """``directory`` is a link, or not ours, or group or others may write in it."""
    info = directory.lstat()
    return not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or bool(info.st_mode & 0o022)
