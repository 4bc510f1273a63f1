"""A real Slurm on this host for tests: munged, slurmctld and one slurmd per fake node, all as root,
state under a temporary directory, SLURM_CONF pointing at its own slurm.conf (Debian's slurm-wlm;
see ../shared/notes/real-components.md for why each line is there)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONF = """\
ClusterName=observe-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={dir}/ctld
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=DEFAULT CPUs=1 RealMemory=500 State=UNKNOWN
{nodes}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{extra}
"""


def available() -> str | None:
    """Why a real Slurm cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs as root)"
    missing = [b for b in ("slurmctld", "slurmd", "scontrol", "munged") if not shutil.which(b)
               and not Path(f"/usr/sbin/{b}").exists()]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install slurm-wlm slurm-client munge)"
    return None


class SlurmCluster:
    """slurmctld + ``n`` slurmd (node1..nodeN) on loopback; ``env`` has SLURM_CONF for clients."""

    def __init__(self, directory: Path, n: int = 4, base_port: int = 17100, extra: str = ""):
        """``extra``: more slurm.conf lines (Prolog=, Epilog=, HealthCheckProgram=...)."""
        self.dir = directory
        self.nodes = [f"node{i}" for i in range(1, n + 1)]
        self.conf = directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.base_port = base_port
        self.extra = extra

    def start(self) -> SlurmCluster:
        for sub in ("ctld", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.base_port + 10 + i}"
                          for i, n in enumerate(self.nodes))
        self.conf.write_text(CONF.format(host=host, dir=self.dir, nodes=nodes, ctld_port=self.base_port,
                                         slurmd_port=self.base_port + 1, extra=self.extra))
        _munged()
        subprocess.run(["slurmctld", "-c", "-f", str(self.conf)], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for n in self.nodes:
            subprocess.run(["slurmd", "-N", n, "-f", str(self.conf)], env=self.env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_idle(self.nodes)
        return self

    @contextmanager
    def serving(self) -> Iterator[SlurmCluster]:
        """Started, and the Slurm every client in this process talks to (SLURM_CONF), until the block ends."""
        self.start()
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(self.conf)
        try:
            yield self
        finally:
            self.stop()
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True, check=True).stdout

    def state(self, node: str) -> tuple[str, str]:
        """(State, Reason) of a node as slurmctld reports them."""
        fields = dict(_pairs(self.scontrol("show", "node", node, "-o")))
        return fields.get("State", ""), fields.get("Reason", "")

    def wait_idle(self, nodes: list[str], timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if all(self.state(n)[0] == "IDLE" for n in nodes):
                    return
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"nodes not idle after {timeout}s: {[self.state(n) for n in nodes]}")

    def stop(self) -> None:
        for pidfile in self.dir.glob("*.pid"):
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)


def _munged() -> None:
    run = Path("/run/munge")
    if (run / "munge.socket.2").exists() and subprocess.run(["sh", "-c", "munge -n | unmunge"],
                                                            capture_output=True).returncode == 0:
        return
    run.mkdir(parents=True, exist_ok=True)
    shutil.chown(run, "munge", "munge")
    if not Path("/etc/munge/munge.key").exists():
        subprocess.run(["mungekey", "--create"], check=True)
        shutil.chown("/etc/munge/munge.key", "munge", "munge")
    subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)


def _pairs(line: str) -> list[tuple[str, str]]:
    """``Key=value`` pairs of a ``scontrol show -o`` line; a value runs to the next `` Key=``
    (Reason holds spaces)."""
    import re

    return [(m.group(1), m.group(2).strip()) for m in re.finditer(r"(\w+)=(.*?)(?= \w+=|$)", line.strip())]
