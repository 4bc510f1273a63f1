"""disk: free space and free inodes of the local file systems jobs and slurmd write to (the
policy's ``paths``), as an unprivileged job sees them (``os.statvfs``: blocks and inodes available
to non-root). A full ``/tmp`` or spool fails jobs in ways that look like their own bugs."""
from __future__ import annotations

import os

from observe.health.result import Result, Status, unknown

NAME = "disk"
GB = 1e9


def run(opts: dict) -> Result:
    """FAIL when a path's free space is under ``min_free_pct`` or ``min_free_gb``, or its free inodes
    under ``min_free_inodes_pct``; a path that does not exist is skipped."""
    paths = opts.get("paths") or ["/", "/tmp", "/var/tmp", "/var/spool/slurmd"]
    seen, missing, unread, problems = [], [], [], []
    for path in paths:
        try:
            st = os.statvfs(path)
        except FileNotFoundError:
            missing.append(path)
            continue
        except OSError as exc:
            unread.append(f"{path}: {exc.strerror or exc}")
            continue
        fs = _usage(path, st)
        seen.append(fs)
        problems += [f"{path}: {p}" for p in judge(fs, opts)]
    evidence = {"paths": seen, "missing": missing, "unreadable": unread}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    if unread or not seen:
        return unknown(NAME, "could not read " + ("; ".join(unread) or f"any of {', '.join(paths)} (none exists)"),
                       **evidence)
    skipped = f" ({', '.join(missing)} not here)" if missing else ""
    return Result(NAME, Status.PASS, ", ".join(f"{fs['path']} {_free(fs)}" for fs in seen) + skipped, evidence)


def _usage(path: str, st: os.statvfs_result) -> dict:
    """Free space and inodes; a share is None where the file system reports no total (no inode table)."""
    return {"path": path, "free_gb": st.f_bavail * st.f_frsize / GB,
            "free_pct": 100 * st.f_bavail / st.f_blocks if st.f_blocks else None,
            "free_inodes": st.f_favail, "free_inodes_pct": 100 * st.f_favail / st.f_files if st.f_files else None}


def judge(fs: dict, opts: dict) -> list[str]:
    """What is short on one file system under the policy's floors (0: no floor)."""
    out = []
    pct, gb = float(opts["min_free_pct"]), float(opts["min_free_gb"])
    if fs["free_pct"] is not None and (fs["free_pct"] < pct or fs["free_gb"] < gb):
        out.append(f"{_free(fs)}, under {pct:g}% or {gb:g} GB")
    inodes = float(opts["min_free_inodes_pct"])
    if fs["free_inodes_pct"] is not None and fs["free_inodes_pct"] < inodes:
        out.append(f"{fs['free_inodes']} inodes free ({fs['free_inodes_pct']:.1f}%), under {inodes:g}%")
    return out


def _free(fs: dict) -> str:
    pct = f" ({fs['free_pct']:.1f}%)" if fs["free_pct"] is not None else ""
    return f"{fs['free_gb']:.1f} GB free{pct}"
