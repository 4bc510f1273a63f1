"""Per-GPU state: the prolog records which GPUs a job holds (SLURM_JOB_GPUS -> minor number -> UUID
and PCI id through NVML, served by the pynvml stand-in), the epilog their release, and the fault
policy names the job that held a GPU when it failed, or whose process an Xid names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from conftest import committed
from observe.collector import Context
from observe.health import faults, policy
from observe.ingest import parse_bytes
from observe.schema import conform
from observe.store import Store

FAKES = Path(__file__).resolve().parent / "fakes"
OBSERVE = str(Path(sys.executable).parent / "observe")
RULES = policy.load().faults
BUS = ["18", "2a", "3b", "5d"]  # NVML index order (PCI order); minor numbers differ from it
MINOR = [2, 0, 3, 1]


def _readings(path: Path) -> Path:
    path.write_text(json.dumps({"gpus": [{
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3", "nvmlDeviceGetPciInfo": f"00000000:{bus.upper()}:00.0",
        "nvmlDeviceGetUUID": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "nvmlDeviceGetMinorNumber": MINOR[i],
    } for i, bus in enumerate(BUS)]}))
    return path


def _hook(kind: str, tmp_path: Path, **env: str) -> None:
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(FAKES),
            "OBSERVE_NVML_READINGS": str(_readings(tmp_path / "nvml.json")),
            "SLURMD_NODENAME": "gpu1", "SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "1,3"}
    policy_file = tmp_path / "site.toml"
    policy_file.write_text('[prolog]\nchecks = []\n[epilog]\nchecks = []\ncapture = false\nexplain = false\n')
    done = subprocess.run([OBSERVE, "slurm", kind, "--store", str(tmp_path / "store"), "--policy", str(policy_file),
                           "--log", str(tmp_path / "hook.log")], env={**base, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _xid(at: datetime, bus: str, code: int = 48, pid: int = 999) -> str:
    return (f"{at:%Y-%m-%dT%H:%M:%S.%f+00:00} gpu1 kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, pid={pid}, "
            f"name=python, Ch 00000010\n")


def test_prolog_and_epilog_record_the_jobs_gpus_and_faults_name_the_job(tmp_path: Path) -> None:
    _hook("prolog", tmp_path)
    _hook("epilog", tmp_path)
    store = committed(tmp_path / "store")  # the hooks deliver; the central compaction commits
    held = store.scan(sources=["health"]).filter(pl.col("kind").str.starts_with("gpu_")).sort("ts", "gpu").collect()
    assert held.select("kind", "gpu", "job_id").rows() == [
        ("gpu_allocated", "0000:3b:00", "4242"), ("gpu_allocated", "0000:5d:00", "4242"),  # minor 3 and minor 1
        ("gpu_released", "0000:3b:00", "4242"), ("gpu_released", "0000:5d:00", "4242")]
    assert json.loads(held["attrs"][0])["uuid"] == "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"
    start, end = held["ts"][0], held["ts"][2]
    during = start + (end - start) / 2
    kernel = _xid(during, "3b") + _xid(during, "18", code=79) + _xid(end + timedelta(minutes=10), "3b", code=94)
    store.write(conform(parse_bytes(kernel.encode(), "kernel", Context(node="gpu1", route="kmsg"))))
    done = subprocess.run([OBSERVE, "health", "faults", "--all", "--format", "json", "--store", str(store.root)],
                          capture_output=True, text=True)
    rows = {(r["gpu"], r["code"]): r["jobs"] for r in map(json.loads, done.stdout.splitlines())}
    assert rows == {("0000:3b:00", 48): ["4242"],  # the job held that GPU
                    ("0000:18:00", 79): [],  # a GPU the job did not hold
                    ("0000:3b:00", 94): []}  # after the job released it


def test_no_gpus_or_no_nvml_records_nothing_and_says_why(tmp_path: Path) -> None:
    _hook("prolog", tmp_path, SLURM_JOB_GPUS="")
    _hook("prolog", tmp_path, OBSERVE_NVML_READINGS=str(tmp_path / "missing.json"))
    assert not committed(tmp_path / "store").scan(sources=["health"]).filter(
        pl.col("kind").str.starts_with("gpu_")).collect().height
    assert "job 4242's GPUs [1, 3] not recorded" in (tmp_path / "hook.log").read_text()


T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def test_an_xids_pid_names_the_job_whose_process_it_was() -> None:
    """NCCL's ``host:pid:tid`` lines carry no time: a pid names a job when no other job logged it."""
    def nccl(job: str, pid: int) -> pl.DataFrame:
        line = f"gpu1:{pid}:{pid + 7} [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        return parse_bytes(line.encode(), "nccl", Context(node="gpu1", job_id=job))

    xids = _xid(T0, "3b", pid=4242) + _xid(T0, "5d", pid=5151) + _xid(T0, "18", pid=6262)
    frames = [nccl("77", 4242), nccl("78", 6262), nccl("79", 5151), nccl("80", 5151),  # 5151: two jobs, ambiguous
              parse_bytes(xids.encode(), "kernel", Context(node="gpu1", route="kmsg"))]
    got = faults.decide(pl.concat([conform(f) for f in frames]).lazy(), RULES, T0 + timedelta(hours=1))
    assert {g: j.to_list() for g, j in zip(got["gpu"], got["jobs"])} == {
        "0000:3b:00": ["77"], "0000:5d:00": [], "0000:18:00": ["78"]}


def test_a_dated_process_names_its_job_only_near_its_lines() -> None:
    """Timed output (PyTorch's glog lines, NCCL with timestamps): the job whose process logged within
    the grace of the Xid; the same pid reused by a later job names that one."""
    def logged(job: str, at: datetime) -> pl.DataFrame:
        return conform(pl.DataFrame({"ts": [at], "node": ["gpu1"], "pid": [4242], "job_id": [job], "kind": ["log"],
                                     "source": ["nccl"], "message": ["step"], "raw": ["step"]}))

    xids = (_xid(T0 + timedelta(minutes=5), "3b", pid=4242) + _xid(T0 + timedelta(hours=5), "5d", pid=4242)
            + _xid(T0 + timedelta(hours=9), "18", pid=4242))
    frames = [logged("77", T0), logged("88", T0 + timedelta(hours=8, minutes=59)),
              conform(parse_bytes(xids.encode(), "kernel", Context(node="gpu1", route="kmsg")))]
    got = faults.decide(pl.concat(frames, how="vertical_relaxed").lazy(), RULES, T0 + timedelta(hours=10))
    assert {g: j.to_list() for g, j in zip(got["gpu"], got["jobs"])} == {
        "0000:3b:00": ["77"], "0000:5d:00": [], "0000:18:00": ["88"]}  # 5h after 77's last line: not 77's
