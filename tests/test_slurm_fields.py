"""What observe reads from Slurm about a job or a node: every field it acts on or records is Slurm's,
never text a job's user wrote into its name, comment, paths or labels to look like them (recorded
output of this host's Slurm 22.05, and a real slurmctld where one can run)."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from observe.health import slurm
from slurm_cluster import SlurmCluster, available

FORGED = (" JobState=FAILED Requeue=1 Restarts=0 UserId=root(0) GroupId=root(0) NodeList=gpu099 BatchHost=gpu099"
          " ExitCode=0:0 TRES=cpu=1 WorkDir=/root StdOut=/etc/shadow")
# scontrol show job --oneliner as Slurm 22.05 prints it (key order of src/api/job_info.c), a user's text in
# braces: what a reader of scontrol's text would be fooled by (observe reads squeue; scontrol answers anyway)
LINE = ("JobId=4242 JobName={JobName} UserId=alice(1001) GroupId=alice(1001) MCS_label={MCS_label} Priority=4294901759 "
        "Nice=0 Account=ml QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=0 Restarts=3 BatchFlag=1 "
        "Reboot=0 ExitCode=2:0 RunTime=12:13:39 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-24T08:59:58 "
        "EligibleTime=2026-11-24T08:59:58 AccrueTime=2026-11-24T08:59:58 StartTime=2026-11-24T09:00:01 "
        "EndTime=2026-11-24T21:13:40 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-24T09:00:01 "
        "Scheduler=Main Partition=gpu AllocNode:Sid=login1:3590 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu[001-002] "
        "BatchHost=gpu001 NumNodes=2 NumCPUs=128 NumTasks=16 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=128,node=2,billing=128 "
        "Socks/Node=* NtasksPerN:B:S:C=8:0:*:* CoreSpec=* MinCPUsNode=64 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) "
        "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network={Network} Command={Command} "
        "WorkDir={WorkDir} Comment={Comment} StdErr={StdErr} StdIn=/dev/null StdOut={StdOut} Power= \n")
OWN = {"JobName": "train", "MCS_label": "N/A", "Network": "(null)", "Command": "/home/alice/train.sh",
       "WorkDir": "/home/alice", "Comment": "llama", "StdErr": "/home/alice/out.txt", "StdOut": "/home/alice/out.txt"}
# the same job's fields as squeue --Format prints them (src/squeue/print.c), by field name; a user's text in braces
RECORD = {"jobid": "4242", "jobarrayid": "4242", "state": "COMPLETED", "requeue": "0", "restartcnt": "3",
          "username": "alice", "userid": "1001", "groupname": "alice", "groupid": "1001", "nodelist": "gpu[001-002]",
          "starttime": "2026-11-24T09:00:01", "endtime": "2026-11-24T21:13:40", "partition": "gpu", "batchflag": "1",
          "batchhost": "gpu001", "exit_code": "512", "tres-alloc": "cpu=128,node=2,billing=128", "name": "{JobName}",
          "command": "{Command}", "workdir": "{WorkDir}", "stdout": "{StdOut}", "stderr": "{StdErr}"}
# what observe reads of it: every field the hooks act on or record
REAL = {"JobState": "COMPLETED", "Requeue": "0", "Restarts": "3", "UserId": "alice(1001)", "GroupId": "alice(1001)",
        "NodeList": "gpu[001-002]", "BatchHost": "gpu001", "ExitCode": "2:0", "StartTime": "2026-11-24T09:00:01",
        "EndTime": "2026-11-24T21:13:40", "Partition": "gpu", "TRES": "cpu=128,node=2,billing=128"}
USERS = ("JobName", "Command", "WorkDir", "StdOut", "StdErr")  # the user's own words, kept as written


def _squeue(argv: list[str], env: dict[str, str], records: list[dict[str, str]]) -> str:
    """squeue's output for ``records``, in the format it was asked for (``--Format`` or SQUEUE_FORMAT2:
    ``field:suffix,...``): each field's value, then its suffix; a newline after each record."""
    spec = next((a.removeprefix("--Format=") for a in argv if a.startswith("--Format=")), env.get("SQUEUE_FORMAT2", ""))
    fields = [token.split(":", 1) for token in spec.split(",")]
    return "".join("".join(r[field.lower()] + suffix for field, suffix in fields) + "\n" for r in records)


def _slurm(monkeypatch: pytest.MonkeyPatch, scontrol: str | None, records: list[dict[str, str]] | None,
           own: dict[str, str] = OWN) -> list[tuple[list[str], dict[str, str]]]:
    """scontrol prints ``scontrol`` (LINE with ``own``), squeue ``records`` (with ``own``); None: exits 1.
    The argument lists and environments run, returned."""
    ran: list[tuple[list[str], dict[str, str]]] = []

    def run(argv, **kw):
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv) and not kw.get("shell")
        env = kw.get("env") or dict(os.environ)
        ran.append((argv, env))
        if argv[0] == "squeue" and records is not None:
            out = _squeue(argv, env, [{k: v.format(**own) for k, v in r.items()} for r in records])
        elif argv[0] == "scontrol" and scontrol is not None:
            out = scontrol.format(**own)
        else:
            return subprocess.CompletedProcess(argv, 1, "", "error\n")
        return subprocess.CompletedProcess(argv, 0, out, "")
    monkeypatch.setattr(slurm.subprocess, "run", run)
    return ran


@pytest.mark.parametrize("field", [*OWN, "JobName+newline"])
def test_a_users_text_never_passes_for_slurms_fields(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """Whichever field a user forges fields into (the name, before the real ones; the comment, after
    them; a newline that cuts the line; squeue's old ``|`` and a whole record after a newline), every
    field the hooks act on or record is Slurm's, and the user's own words are kept as written."""
    name = field.split("+")[0]
    forged = OWN[name] + FORGED + "|4242|4242|FAILED|1|0|root|0|root|0|gpu099|" + ("\n" + FORGED if "+" in field else "")
    own = {**OWN, name: forged}
    _slurm(monkeypatch, LINE, [RECORD], own)
    info = slurm.job("4242")
    assert {k: info.get(k) for k in REAL} == REAL
    assert {k: info.get(k) for k in USERS} == {k: own[k] for k in USERS}


def test_a_job_named_like_a_batch_host_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: ``train BatchHost=gpu999`` made the epilog read BatchHost=gpu999 and capture nothing."""
    _slurm(monkeypatch, LINE, [RECORD], {**OWN, "JobName": "train BatchHost=gpu999"})
    info = slurm.job("4242")
    assert (info["BatchHost"], info["JobName"]) == ("gpu001", "train BatchHost=gpu999")


# squeue 22.05.8 (Debian's slurm-wlm) for a real job, SQUEUE_FORMAT2 = "<field>:|SEP|,..." over slurm.SQUEUE
RECORDED = ("7|SEP|7|SEP|FAILED|SEP|1|SEP|0|SEP|root|SEP|0|SEP|root|SEP|0|SEP|node2|SEP|2026-11-28T06:29:15|SEP|"
            "2026-11-28T06:29:16|SEP|gpu|SEP|1|SEP|node2|SEP|768|SEP|cpu=1,node=1,billing=1|SEP|"
            "train BatchHost=gpu999\nStdOut=/x|SEP|/tmp/sl39/job.sh|SEP|/work/main|SEP|/tmp/sl39/out-%j.txt|SEP|"
            "/tmp/sl39/out-%j.txt|SEP|\n")


def test_squeues_recorded_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a real squeue printed for ``sbatch -J $'train BatchHost=gpu999\\nStdOut=/x'``, read back."""
    def run(argv, **kw):
        sep = kw["env"]["SQUEUE_FORMAT2"].split(",")[0].removeprefix("JobID:")
        return subprocess.CompletedProcess(argv, 0, RECORDED.replace("|SEP|", sep), "")
    monkeypatch.setattr(slurm.subprocess, "run", run)
    assert slurm.job("7") == {
        "JobState": "FAILED", "Requeue": "1", "Restarts": "0", "UserId": "root(0)", "GroupId": "root(0)",
        "NodeList": "node2", "StartTime": "2026-11-28T06:29:15", "EndTime": "2026-11-28T06:29:16", "Partition": "gpu",
        "TRES": "cpu=1,node=1,billing=1", "JobName": "train BatchHost=gpu999\nStdOut=/x", "Command": "/tmp/sl39/job.sh",
        "WorkDir": "/work/main", "StdOut": "/tmp/sl39/out-%j.txt", "StdErr": "/tmp/sl39/out-%j.txt", "ExitCode": "3:0",
        "BatchHost": "node2"}


def test_the_separator_is_new_each_call_and_not_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every user may read a root process's arguments, none its environment; a SQUEUE_* variable
    the hook inherited (a format, a user filter) never reaches squeue."""
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    monkeypatch.setenv("SQUEUE_USERS", "nobody")
    ran = _slurm(monkeypatch, None, [RECORD])
    slurm.job("4242")
    slurm.job("4242")
    seps = [env["SQUEUE_FORMAT2"].split(",")[0].removeprefix("JobID:") for _, env in ran]
    assert len(set(seps)) == 2 and all(len(sep) >= 32 for sep in seps)
    assert not any(sep in arg for sep in seps for argv, _ in ran for arg in argv)
    assert not any(k in env for _, env in ran for k in ("SQUEUE_FORMAT", "SQUEUE_USERS"))


def test_an_array_is_read_for_the_asked_task_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeue lists every task under the array's id: the record whose own id or array id was asked is taken."""
    tasks = [{**RECORD, "jobid": "4242", "jobarrayid": "4242_3", "state": "FAILED", "nodelist": "gpu003"},
             {**RECORD, "jobid": "4243", "jobarrayid": "4242_1"}]
    _slurm(monkeypatch, None, tasks)
    assert slurm.job("4243")["JobState"] == "COMPLETED" and slurm.job("4242_3")["JobState"] == "FAILED"
    assert slurm.job("4242")["NodeList"] == "gpu003"


def test_a_job_without_a_script_or_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """srun/salloc: BatchHost is the allocation's first node, as slurmctld sets it (squeue prints the
    submit host there), and no output paths squeue would make up; a pending job has no BatchHost yet."""
    _slurm(monkeypatch, None, [{**RECORD, "batchflag": "0", "batchhost": "login1", "stderr": "N/A"}])
    info = slurm.job("4242")
    assert info["BatchHost"] == "gpu001" and "StdOut" not in info and "StdErr" not in info
    _slurm(monkeypatch, None, [{**RECORD, "batchhost": "n/a", "nodelist": "", "state": "PENDING"}])
    assert "BatchHost" not in slurm.job("4242")


@pytest.mark.parametrize("out", [None, "", "4242|4242|COMPLETED\n", RECORDED])
def test_what_is_not_squeues_record_of_the_job_is_no_job(monkeypatch: pytest.MonkeyPatch, out: str | None) -> None:
    """squeue failing, listing nothing, or printing what is not its records in the asked format
    (here, without the separator): nothing, never fields guessed; the requeue guard reads it as "skip"."""
    def run(argv, **kw):
        return subprocess.CompletedProcess(argv, 1 if out is None else 0, out or "", "error\n")
    monkeypatch.setattr(slurm.subprocess, "run", run)
    assert slurm.job("4242") == {}


@pytest.mark.parametrize(("status", "code"), [(0, "0:0"), (768, "3:0"), (9, "0:9"), (0x7F, "0:0"), (-2, "0:126")])
def test_exit_codes_read_as_scontrol_prints_them(status: int, code: str) -> None:
    assert slurm._exit_code(status & 0xFFFFFFFF) == code


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
    """The same through a real slurmctld: a job forging fields in every text it may set (its name,
    comment, MCS label, network, working directory and output path) reads as Slurm has it."""
    forged = " JobState=COMPLETED Requeue=1 Restarts=7 UserId=alice(1001) NodeList=node9 BatchHost=node9 ExitCode=0:0"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    work = tmp_path / f"w{forged}"
    work.mkdir()
    out = f"{work}/o{forged} StdOut=shadow"
    with SlurmCluster(tmp_path / "slurm", n=1, base_port=17300).serving() as c:
        job = subprocess.run(["sbatch", "--parsable", "-w", "node1", "-o", out, "--chdir", str(work), "--no-requeue",
                              "-J", f"x{forged}\n{forged}", "--comment", f"c{forged}", "--mcs-label", f"m{forged}",
                              "--network", f"n{forged}", str(script)],
                             env=c.env, capture_output=True, text=True, check=True).stdout.strip()
        end = time.monotonic() + 30
        while (info := slurm.job(job)).get("JobState") in (None, "PENDING", "RUNNING", "COMPLETING") and time.monotonic() < end:
            time.sleep(0.5)
    assert {k: info[k] for k in ("JobState", "Requeue", "Restarts", "UserId", "NodeList", "BatchHost", "ExitCode")} == {
        "JobState": "FAILED", "Requeue": "0", "Restarts": "0", "UserId": "root(0)", "NodeList": "node1",
        "BatchHost": "node1", "ExitCode": "3:0"}
    assert (info["JobName"], info["WorkDir"], info["StdOut"], info["Command"]) == (
        f"x{forged}\n{forged}", str(work), out, str(script))
