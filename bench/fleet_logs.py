"""Logs shaped like a real fleet's, from real lines nobody on the team wrote: what the ingest bench
measures besides the demo's generated data.

- ``syslog``: one ``nodes/<node>/syslog`` per node over ``days`` (default 120) days. The messages are
  real: loghub's Linux, OpenSSH and Thunderbird samples (daemons with paths and parentheses in their
  program field, ``sshd(pam_unix)[1327]:``, ``/apps/x86_64/system/ganglia-3.0.1/sbin/gmetad[1682]:``,
  and their long tail of message shapes), and kernel lines (NVRM/Xid, mlx5, AER, OOM) from the DEV
  and tuned corpora. Each line is re-timed (a Poisson stream per node, so days are sparse and
  bursty alike) and re-homed on the node; a slurmctld log rides along.
- ``jobs``: ``jobs/slurm-<id>.out``, thousands of small job output files (about 4 KB each) of real
  NCCL and PyTorch lines (the DEV and tuned corpora) with the host and pid rewritten per job.

The held-out corpus (``tests/fixtures/corpus/heldout``) is never used. The same arguments give the
same bytes.

    python bench/fleet_logs.py syslog DIR [--nodes 32 --days 120 --mb 90]
    python bench/fleet_logs.py jobs DIR [--files 6000]
"""
from __future__ import annotations

import argparse
import csv
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LOGHUB = ROOT / "tests/fixtures/corpus/loghub"
CORPORA = [ROOT / "tests/fixtures/corpus" / name for name in ("real", "extra", "extra2")]
END = datetime(2026, 11, 20, tzinfo=timezone.utc)
KERNEL_SHARE = 0.08  # of syslog lines: the kernel's (the rest are daemons')
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
KERNEL_HEADER = re.compile(r"^(?:\w{3}\s+\d+ [\d:]{8} \S+ kernel: )?(?:\[\s*\d+\.\d+\]\s?)?(?P<msg>.+)$")
NCCL_HEADER = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) (?P<rest>\[\d+\] NCCL .*)$")


def daemon_lines() -> list[tuple[str, str]]:
    """(program[pid], message) of loghub's syslog samples."""
    out = []
    for name, program, pid in (("Linux", "Component", "PID"), ("OpenSSH", None, "Pid"), ("Thunderbird", "Component", "PID")):
        path = _loghub(f"{name}_2k.log_structured.csv")
        if not path.exists():
            continue
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                tag = (row[program] if program else "sshd") + (f"[{row[pid]}]" if row.get(pid) else "")
                out.append((tag, row["Content"]))
    return out


def kernel_lines() -> list[str]:
    """Kernel messages (their own stamps and headers cut off) of the DEV and tuned corpora."""
    out = []
    for corpus in CORPORA:
        for name in ("xid.log", "ib_pcie.log", "nvrm.log", "aer_edac.log", "ib.log", "oom.log"):
            path = corpus / name
            if path.exists():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    m = KERNEL_HEADER.match(line.strip())
                    if m and not m["msg"].startswith(("{", '"', "[")) and ": kern: " not in m["msg"]:  # no nested stamps
                        out.append(m["msg"])
    return out


def job_lines() -> list[str]:
    """NCCL and PyTorch lines of the DEV and tuned corpora."""
    out = []
    for corpus in CORPORA:
        for name in ("nccl.log", "torch.log"):
            path = corpus / name
            if path.exists():
                out += [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return out


def syslog(out: Path, nodes: int = 32, days: int = 120, mb: float = 90, seed: int = 0) -> None:
    """``nodes`` syslogs over ``days`` days ending at END, about ``mb`` MB in all, and a slurmctld log."""
    rng = np.random.default_rng(seed)
    daemons, kernel = daemon_lines(), kernel_lines()
    per_node = int(mb * 1e6 / nodes / 120)  # lines of ~120 bytes
    start = END - timedelta(days=days)
    span_s = days * 86400
    for n in range(1, nodes + 1):
        host = f"gpu{n:03d}"
        count = int(rng.poisson(per_node))
        ts = np.sort(rng.uniform(0, span_s, count))
        is_kernel = rng.random(count) < KERNEL_SHARE
        d = rng.integers(0, len(daemons), count)
        k = rng.integers(0, len(kernel), count)
        boot = 0.0
        lines = []
        for t, kern, di, ki in zip(ts.tolist(), is_kernel.tolist(), d.tolist(), k.tolist()):
            when = start + timedelta(seconds=t)
            stamp = f"{MONTHS[when.month - 1]} {when.day:2d} {when:%H:%M:%S}"
            if kern:
                lines.append(f"{stamp} {host} kernel: [{t - boot:12.6f}] {kernel[ki]}\n")
            else:
                tag, message = daemons[di]
                lines.append(f"{stamp} {host} {tag}: {message}\n")
        _write(out / "nodes" / host / "syslog", lines)
    ctl = [m for corpus in CORPORA for m in _slurmctld(corpus / "slurm.log")]
    t = np.sort(rng.uniform(0, span_s, 20 * days))
    _write(out / "slurm" / "slurmctld.log",
           [f"[{start + timedelta(seconds=s):%Y-%m-%dT%H:%M:%S.%f}"[:-3] + f"] {ctl[i % len(ctl)]}\n"
            for i, s in enumerate(t.tolist())])


def jobs(out: Path, files: int = 6000, seed: int = 0) -> None:
    """``files`` job output files of about 4 KB of real NCCL and PyTorch lines, each job's own host and pid."""
    rng = np.random.default_rng(seed)
    pool = job_lines()
    for i in range(files):
        host, pid = f"gpu{rng.integers(1, 1025):03d}", int(rng.integers(1000, 4_000_000))
        at = int(rng.integers(0, len(pool)))
        lines, size = [], 0
        while size < 4000:
            line = pool[at % len(pool)]
            m = NCCL_HEADER.match(line)
            if m:
                line = f"{host}:{pid}:{pid + 7} {m['rest']}"
            lines.append(line + "\n")
            size += len(line) + 1
            at += 1
        _write(out / "jobs" / f"slurm-{200000 + i}.out", lines)


def _slurmctld(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [m.group(1) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if (m := re.match(r"^\[\d{4}-\d\d-\d\dT[\d:.]+\] (.+)$", line))]


def _loghub(name: str) -> Path:
    """loghub's files: the shared corpus when present (../shared/corpus/loghub), else the fixtures' copy."""
    shared = ROOT.parent / "shared/corpus/loghub" / name
    return shared if shared.exists() else LOGHUB / name


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    stamp = END.timestamp()
    os.utime(path, (stamp, stamp))  # a year-less syslog stamp is dated by its file's time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("layout", choices=("syslog", "jobs"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--days", type=int, default=120)
    ap.add_argument("--mb", type=float, default=90)
    ap.add_argument("--files", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.layout == "syslog":
        syslog(args.dir, args.nodes, args.days, args.mb, args.seed)
    else:
        jobs(args.dir, args.files, args.seed)


if __name__ == "__main__":
    main()
