"""What observe reads from Slurm about a job or a node: the fields it acts on are Slurm's, never text a
job's user wrote into its name, comment, paths or labels to look like them (recorded output of this
host's Slurm 22.05, and a real slurmctld where one can run)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from observe.health import slurm
from slurm_cluster import SlurmCluster, available

FORGED = " JobState=FAILED Requeue=1 Restarts=0 UserId=root(0) GroupId=root(0) NodeList=gpu099 BatchHost=gpu099"
# scontrol show job --oneliner as Slurm 22.05 prints it (key order of src/api/job_info.c), a user's text in braces
LINE = ("JobId=4242 JobName={JobName} UserId=alice(1001) GroupId=alice(1001) MCS_label={MCS_label} Priority=4294901759 "
        "Nice=0 Account=ml QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=0 Restarts=3 BatchFlag=1 "
        "Reboot=0 ExitCode=0:0 RunTime=12:13:39 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-24T08:59:58 "
        "EligibleTime=2026-11-24T08:59:58 AccrueTime=2026-11-24T08:59:58 StartTime=2026-11-24T09:00:01 "
        "EndTime=2026-11-24T21:13:40 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-24T09:00:01 "
        "Scheduler=Main Partition=gpu AllocNode:Sid=login1:3590 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu[001-002] "
        "BatchHost=gpu001 NumNodes=2 NumCPUs=128 NumTasks=16 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=128,node=2,billing=128 "
        "Socks/Node=* NtasksPerN:B:S:C=8:0:*:* CoreSpec=* MinCPUsNode=64 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) "
        "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network={Network} Command={Command} "
        "WorkDir={WorkDir} Comment={Comment} StdErr={StdErr} StdIn=/dev/null StdOut={StdOut} Power= \n")
OWN = {"JobName": "train", "MCS_label": "N/A", "Network": "(null)", "Command": "/home/alice/train.sh",
       "WorkDir": "/home/alice", "Comment": "llama", "StdErr": "/home/alice/out.txt", "StdOut": "/home/alice/out.txt"}
# squeue --noheader --states=all --jobs=4242 --Format=JobID:|,JobArrayID:|,... as the same Slurm prints it
SQUEUE = "4242|4242|COMPLETED|0|3|alice|1001|alice|1001|gpu[001-002]|2026-11-24T09:00:01|2026-11-24T21:13:40|gpu|\n"
REAL = {"JobState": "COMPLETED", "Requeue": "0", "Restarts": "3", "UserId": "alice(1001)", "GroupId": "alice(1001)",
        "NodeList": "gpu[001-002]"}


def _slurm(monkeypatch: pytest.MonkeyPatch, outputs: dict[str, str]) -> list[list[str]]:
    """Commands answer from ``outputs`` (by program; one missing exits 1); the argument lists run, returned."""
    ran: list[list[str]] = []

    def run(argv, **kw):
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv) and not kw.get("shell")
        ran.append(argv)
        out = outputs.get(argv[0])
        return subprocess.CompletedProcess(argv, 1 if out is None else 0, out or "", "" if out else "error\n")
    monkeypatch.setattr(slurm.subprocess, "run", run)
    return ran


@pytest.mark.parametrize("field", [*OWN, "JobName+newline"])
def test_a_users_text_never_passes_for_slurms_fields(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """Whichever field a user forges fields into (the name, before the real ones; the comment, after
    them; a newline that cuts the line), the job's state, requeue flag, restart count, owner and nodes are Slurm's."""
    own = {**OWN, field.split("+")[0]: OWN[field.split("+")[0]] + FORGED + ("\n" + FORGED if "+" in field else "")}
    ran = _slurm(monkeypatch, {"scontrol": LINE.format(**own), "squeue": SQUEUE})
    info = slurm.job("4242")
    assert {k: info.get(k) for k in REAL} == REAL
    assert ran[1][:4] == ["squeue", "--noheader", "--states=all", "--jobs=4242"]


def test_the_users_own_words_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _slurm(monkeypatch, {"scontrol": LINE.format(**OWN), "squeue": SQUEUE})
    info = slurm.job("4242")
    assert {k: info[k] for k in ("JobName", "WorkDir", "StdOut", "Command", "ExitCode", "BatchHost")} == {
        "JobName": "train", "WorkDir": "/home/alice", "StdOut": "/home/alice/out.txt", "Command": "/home/alice/train.sh",
        "ExitCode": "0:0", "BatchHost": "gpu001"}


def test_an_array_is_read_for_the_asked_task_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeue lists every task under the array's id: the record whose own id or array id was asked is taken."""
    tasks = ("4242|4242_3|FAILED|1|0|alice|1001|alice|1001|gpu003|x|y|gpu|\n"
             "4243|4242_1|COMPLETED|0|3|alice|1001|alice|1001|gpu001|x|y|gpu|\n")
    _slurm(monkeypatch, {"scontrol": LINE.format(**OWN), "squeue": tasks})
    assert slurm.job("4243")["JobState"] == "COMPLETED" and slurm.job("4242_3")["JobState"] == "FAILED"
    assert slurm.job("4242")["NodeList"] == "gpu003"


@pytest.mark.parametrize("outputs", [{"scontrol": LINE.format(**OWN)}, {"scontrol": LINE.format(**OWN), "squeue": ""},
                                     {"squeue": SQUEUE}])
def test_a_job_either_tool_does_not_know_is_no_job(monkeypatch: pytest.MonkeyPatch, outputs: dict) -> None:
    """Nothing is better than fields from scontrol alone: the requeue guard reads an empty record as "skip"."""
    _slurm(monkeypatch, outputs)
    assert slurm.job("4242") == {}


def test_a_nodes_reason_is_one_field() -> None:
    """A person's reason holding ``State=IDLE Partitions=x`` neither changes the node's state nor loses
    its ``[user@time]``; fields after it (Slurm 23.02+ prints a Comment there) are read."""
    line = ("NodeName=gpu001 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 Gres=gpu:8 NodeAddr=gpu001 Version=22.05.8 "
            "OS=Linux 6.1.0 #1 SMP State=IDLE+DRAIN ThreadsPerCore=1 Partitions=gpu BootTime=2026-11-24T08:00:00 "
            "CurrentWatts=0 AveWatts=0 Reason=RMA ticket=4411 State=IDLE Partitions=x [alice@2026-11-24T09:00:01]")
    node = slurm._node(line)
    assert (node.state, node.partitions, node.gres) == ("IDLE+DRAIN", ("gpu",), "gpu:8")
    assert node.reason == "RMA ticket=4411 State=IDLE Partitions=x [alice@2026-11-24T09:00:01]"
    after = slurm._node(line + " Comment=rack 7 Extra=x")
    assert (after.reason, after.state) == (node.reason, node.state)


@pytest.mark.skipif(available() is not None, reason=f"real Slurm: {available()}")
def test_a_real_slurmctld_job_record(tmp_path: Path) -> None:
    """The same through a real slurmctld: a job forging fields in every text it may set reads as Slurm has it."""
    forged = " JobState=COMPLETED Requeue=1 Restarts=7 UserId=alice(1001) NodeList=node9"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    with SlurmCluster(tmp_path / "slurm", n=1, base_port=17300).serving() as c:
        job = subprocess.run(["sbatch", "--parsable", "-w", "node1", "-o", "/dev/null", "--no-requeue",
                              "-J", f"x{forged}\n{forged}", "--comment", f"c{forged}", "--mcs-label", f"m{forged}",
                              "--network", f"n{forged}", str(script)],
                             env=c.env, capture_output=True, text=True, check=True).stdout.strip()
        end = time.monotonic() + 30
        while (info := slurm.job(job)).get("JobState") in (None, "PENDING", "RUNNING", "COMPLETING") and time.monotonic() < end:
            time.sleep(0.5)
    assert {k: info[k] for k in ("JobState", "Requeue", "Restarts", "UserId", "NodeList", "BatchHost")} == {
        "JobState": "FAILED", "Requeue": "0", "Restarts": "0", "UserId": "root(0)", "NodeList": "node1", "BatchHost": "node1"}
