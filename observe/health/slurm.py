"""The one module that calls Slurm. Argument lists only, never a shell; node names and job ids are
checked against Slurm's own syntax and reasons are cleaned before they reach ``scontrol``."""
from __future__ import annotations

import os
import re
import secrets
import subprocess
from dataclasses import dataclass

from observe.hostlists import expand_nodes

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
TIMEOUT_S = 30.0
REASON_MAX = 200
REASON_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:/()@#%+\-\[\]]")
# squeue --Format fields for job(), and the scontrol names observe keeps them under
SQUEUE = ("JobID", "JobArrayID", "State", "Requeue", "RestartCnt", "UserName", "UserID", "GroupName", "GroupID",
          "NodeList", "StartTime", "EndTime", "Partition", "BatchFlag", "BatchHost", "exit_code", "tres-alloc",
          "Name", "Command", "WorkDir", "STDOUT", "STDERR")
FIELDS = {"JobState": "{State}", "Requeue": "{Requeue}", "Restarts": "{RestartCnt}", "UserId": "{UserName}({UserID})",
          "GroupId": "{GroupName}({GroupID})", "NodeList": "{NodeList}", "StartTime": "{StartTime}",
          "EndTime": "{EndTime}", "Partition": "{Partition}", "TRES": "{tres-alloc}", "JobName": "{Name}",
          "Command": "{Command}", "WorkDir": "{WorkDir}"}
BATCH_ONLY = {"StdOut": "{STDOUT}", "StdErr": "{STDERR}"}  # squeue makes up a path for a job without a script
# a node's Reason: free text, then Slurm's " [user@time]"
REASON = re.compile(r" Reason=(.*? \[[^\[\]@]*+@[^\[\]]*+\](?= [\w:/]+=|$)|.*?(?= [\w:/]+=|$))")


class SlurmError(RuntimeError):
    """A Slurm command failed or its input was refused; the message is one line."""


@dataclass(frozen=True)
class Node:
    """A node as slurmctld reports it."""

    name: str
    state: str  # e.g. IDLE, ALLOCATED+DRAIN, DOWN*+DRAIN
    reason: str  # with Slurm's " [user@time]" suffix
    partitions: tuple[str, ...]
    gres: str

    @property
    def idle(self) -> bool:
        """No job on it (IDLE, or DRAINED rather than DRAINING)."""
        flags = set(self.state.replace("*", "").split("+"))
        return not flags & {"ALLOCATED", "ALLOC", "MIXED", "COMPLETING"}

    @property
    def drained(self) -> bool:
        """Drained, draining or down: not taking new jobs."""
        flags = set(self.state.replace("*", "").split("+"))
        return bool(flags & {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL"})


def node_name(name: str) -> str:
    """``name`` if it is a valid Slurm node name; SlurmError otherwise."""
    if not NODE_NAME.match(name):
        raise SlurmError(f"{name!r} is not a node name")
    return name


def clean_reason(reason: str) -> str:
    """A reason safe to hand to scontrol: one line of letters, digits, spaces and ``_.,:/()@#%+-[]``,
    at most REASON_MAX characters. scontrol parses ``Key=value`` text inside an argument again
    (``Reason=x State=RESUME`` resumes the node), so ``=`` and quotes never pass."""
    text = REASON_UNSAFE.sub(" ", reason)
    return " ".join(text.split())[:REASON_MAX]


def nodes(names: list[str] | None = None) -> list[Node]:
    """Every node (or the named ones)."""
    argv = ["scontrol", "show", "node", "--oneliner"]
    if names:
        argv.append(",".join(node_name(n) for n in names))
    return [_node(line) for line in _run(argv).splitlines() if line.startswith("NodeName=")]


def drain(name: str, reason: str) -> None:
    """Drain ``name`` with ``reason`` (running jobs finish; no new ones start)."""
    _run(["scontrol", "update", f"NodeName={node_name(name)}", "State=DRAIN", f"Reason={clean_reason(reason)}"])


def resume(name: str) -> None:
    """Return ``name`` to service."""
    _run(["scontrol", "update", f"NodeName={node_name(name)}", "State=RESUME"])


def quarantine_name(node: str) -> str:
    """The name of ``node``'s quarantine reservation."""
    return f"observe_quarantine_{node_name(node)}"


def quarantine(name: str) -> None:
    """Hold ``name`` in a reservation only root may use, from now on, whatever runs there: however it
    leaves the drain (a person's resume too), no user's job starts on it until it is released."""
    _run(["scontrol", "create", "reservation", f"ReservationName={quarantine_name(name)}", f"Nodes={node_name(name)}",
          "StartTime=now", "Duration=infinite", "Users=root", "Flags=IGNORE_JOBS"])


def release(name: str) -> None:
    """Delete ``name``'s quarantine reservation."""
    _run(["scontrol", "delete", f"ReservationName={quarantine_name(name)}"])


def quarantined(name: str) -> bool:
    """Whether ``name``'s quarantine reservation exists."""
    try:
        text = _run(["scontrol", "show", "reservation", "--oneliner", quarantine_name(name)])
    except SlurmError:
        return False  # "Reservation ... not found"
    return f"ReservationName={quarantine_name(name)} " in text


def requeue(job_id: str) -> None:
    """Requeue a job (it restarts on other nodes; it must allow requeue)."""
    _run(["scontrol", "requeue", job_id_of(job_id)])


def job(job_id: str) -> dict[str, str]:
    """A job's fields under ``scontrol show job``'s names (JobState, Requeue, Restarts, UserId,
    NodeList, BatchHost, ExitCode, JobName, WorkDir, StdOut, ...); empty when Slurm no longer knows it.

    Not from ``scontrol show job``'s text: it prints ``Key=value`` with nothing to end a value, and a
    job's user writes several (JobName, Comment, MCS_label, Command, WorkDir, StdOut; newlines too), so
    a name ``train BatchHost=gpu999`` reads as that field, and no key order settles it (a name can copy
    the whole record, a comment can swallow the real one). ``--json`` would be unambiguous, but
    scontrol has it only from 23.11 and squeue's before 23.11 ignores ``--jobs`` (the whole queue).
    So one ``squeue --Format`` with a separator drawn afresh for each call, handed over in
    ``SQUEUE_FORMAT2`` (the environment, which only root reads, not the command line, which every
    user does): no text a user wrote before the call can hold it, so none can make or move a field."""
    sep = f"|{secrets.token_hex(16)}|"
    try:
        out = _run(["squeue", "--noheader", "--states=all", f"--jobs={job_id_of(job_id)}"],
                   {"SQUEUE_FORMAT2": ",".join(f"{field}:{sep}" for field in SQUEUE)})
    except SlurmError:
        return {}
    values = out.split(sep)
    if len(values) % len(SQUEUE) != 1 or values[-1].strip():
        return {}  # not squeue's records: nothing rather than misread fields
    for at in range(0, len(values) - 1, len(SQUEUE)):
        v = dict(zip(SQUEUE, values[at:at + len(SQUEUE)]))
        v["JobID"] = v["JobID"].removeprefix("\n")  # each record ends its line
        if job_id in (v["JobID"], v["JobArrayID"]):  # squeue lists a whole array under its first id
            return _job_fields(v)
    return {}


def batch_script(job_id: str) -> str:
    """A batch job's script (``scontrol write batch_script ID -``); '' for a job without one."""
    try:
        return _run(["scontrol", "write", "batch_script", job_id_of(job_id), "-"])
    except SlurmError:
        return ""


def job_id_of(job_id: str) -> str:
    """``job_id`` if it is a Slurm job id (``123`` or ``123_4``); SlurmError otherwise."""
    if not JOB_ID.match(job_id):
        raise SlurmError(f"{job_id!r} is not a job id")
    return job_id


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """``argv``'s output; ``env`` adds to the environment (less any SQUEUE_* variable: one there
    would filter or reformat squeue's)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SQUEUE_")} | (env or {})
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=environ)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: is this a Slurm node?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv[:3])} did not answer within {TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        msg = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SlurmError(f"{' '.join(argv[:3])}: {msg}")
    return done.stdout


def _job_fields(v: dict[str, str]) -> dict[str, str]:
    """One squeue record under scontrol's names, its values as scontrol prints them: ExitCode as
    ``status:signal``; BatchHost the node that runs the script, or for a job without one the first
    node of its allocation (where slurmctld puts it; squeue would print the submit host)."""
    batch = v["BatchFlag"] == "1"
    found = {key: value.format_map(v) for key, value in {**FIELDS, **(BATCH_ONLY if batch else {})}.items()}
    if v["exit_code"].lstrip("-").isdigit():
        found["ExitCode"] = _exit_code(int(v["exit_code"]) & 0xFFFFFFFF)
    try:
        host = v["BatchHost"] if batch else next(iter(expand_nodes(v["NodeList"])), "")
    except ValueError:
        host = ""
    if host not in ("", "n/a"):  # n/a: a pending job's, none yet
        found["BatchHost"] = host
    return found


def _exit_code(status: int) -> str:
    """A wait status as scontrol's ``ExitCode=exit:signal`` (src/api/job_info.c: WIFEXITED, WIFSIGNALED)."""
    low = status & 0x7F
    if low == 0:
        return f"{(status >> 8) & 0xFF}:0"
    return f"0:{low if low != 0x7F else 0}"


def _fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of a ``scontrol show --oneliner`` line; a value runs to the next `` Key=``
    and the first occurrence of a key wins (a node's fields come before its free text; a job's line
    cannot be read this way: see :func:`job`)."""
    found: dict[str, str] = {}
    for m in re.finditer(r"(\w+)=(.*?)(?= [\w:/]+=|$)", line.strip()):
        found.setdefault(m.group(1), m.group(2).strip())
    return found


def _node(line: str) -> Node:
    """A node from its ``scontrol show node --oneliner`` line. Its Reason is free text (a person's
    ``RMA ticket=4411``) that Slurm ends with `` [user@time]``: it runs to such a stamp that ends the
    line or comes before a `` Key=`` (else to the next `` Key=``), and what it holds is no field."""
    m = REASON.search(line)
    head, tail = (line[:m.start()], line[m.end():]) if m else (line, "")
    f = {**_fields(tail), **_fields(head)}
    parts = tuple(p for p in f.get("Partitions", "").split(",") if p and p != "(null)")
    return Node(f.get("NodeName", ""), f.get("State", ""), m[1].strip() if m else "", parts, f.get("Gres", ""))
