"""The silent-infrastructure checks on recorded readings: fabric and gpu_procs through the pynvml
stand-in (tests/fakes), gpu_procs' owners and ib's GPU model from recorded /proc and /sys trees,
disk on tmp_path (os.statvfs faked for what a test machine cannot show)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from observe.health import policy as pol
from observe.health.checks import disk, fabric, gpu_procs, ib
from observe.health.result import Status
from observe.health.runner import run_checks

FAKES = Path(__file__).resolve().parent / "fakes"
H100 = "NVIDIA H100 80GB HBM3"
DONE = {"state": 3, "status": 0, "cliqueId": 0}  # NVML_GPU_FABRIC_STATE_COMPLETED, NVML_SUCCESS


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Serve NVML readings ``{"gpus": [...]}`` to checks run here or in the runner's child process."""
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # a fresh stand-in for each test
    monkeypatch.setenv("PYTHONPATH", str(FAKES))

    def put(gpus: list[dict], **extra) -> None:
        path = tmp_path / "nvml.json"
        path.write_text(json.dumps({"gpus": gpus, **extra}))
        monkeypatch.setenv("OBSERVE_NVML_READINGS", str(path))
    return put


def _gpu(i: int, name: str = H100, fabric_info: dict | None = None, links: int = 0, down: tuple = (), **calls) -> dict:
    """One GPU's recorded NVML answers; ``links`` NVLinks exist (those in ``down`` inactive), no more."""
    gpu = {"nvmlDeviceGetName": name, "nvmlDeviceGetPciInfo": f"00000000:{0x18 + i:02X}:00.0", **calls}
    if fabric_info is not None:
        gpu["nvmlDeviceGetGpuFabricInfoV"] = fabric_info
    gpu.update({f"nvmlDeviceGetNvLinkState({n})": int(n not in down) for n in range(links)})
    return gpu


def _hgx(**second) -> list[dict]:
    """Two HGX H100 GPUs, the second one changed by ``second``."""
    return [_gpu(0, fabric_info=DONE, links=18), _gpu(1, **{"fabric_info": DONE, "links": 18, **second})]


@pytest.mark.parametrize("gpus,status,words", [
    (_hgx(), Status.PASS, ["fabric configured on 2 GPU(s), 18 NVLinks active each"]),
    (_hgx(fabric_info={"state": 1, "status": 0}), Status.FAIL,
     ["GPU 00000000:19:00.0: fabric NOT_STARTED", "nvidia-fabricmanager"]),
    (_hgx(fabric_info={"state": 2, "status": 0}), Status.FAIL, ["fabric IN_PROGRESS"]),
    (_hgx(fabric_info={"state": 3, "status": 999}), Status.FAIL, ["fabric COMPLETED with error status 999"]),
    (_hgx(down=(3, 7)), Status.FAIL, ["GPU 00000000:19:00.0: 16 of 18 NVLinks active (down: 3, 7)"]),
    (_hgx(links=16), Status.FAIL, ["16 of 18 NVLinks active"]),  # two links gone from the GPU altogether
    (_hgx(**{"nvmlDeviceGetNvLinkState(18)": {"error": "InvalidArgument"}}), Status.PASS, ["18 NVLinks active"]),
    ([_gpu(0, "NVIDIA H800", DONE, links=8)], Status.PASS, ["8 NVLinks active each"]),  # not listed: the links it has
    ([_gpu(0, "NVIDIA H800", DONE, links=8, down=(0,))], Status.FAIL, ["7 of 8 NVLinks active (down: 0)"]),
    ([_gpu(0, "NVIDIA H100 PCIe", {"error": "NotSupported"}), _gpu(1, "NVIDIA H100 PCIe", {"state": 0, "status": 0})],
     Status.PASS, ["no NVSwitch fabric on the 2 GPU(s)"]),
    (_hgx(fabric_info={"error": "Unknown"}), Status.UNKNOWN, ["could not read GPU 00000000:19:00.0: Unknown"]),
    ([_gpu(0, fabric_info={"error": "Unknown"}), _gpu(1, fabric_info={"state": 1, "status": 0}, links=18)],
     Status.FAIL, ["fabric NOT_STARTED"]),  # a GPU that could not be read does not hide one that fails
    ([], Status.UNKNOWN, ["NVML shows no GPUs"]),
])
def test_fabric_from_recorded_readings(serve, gpus, status, words) -> None:
    serve(gpus)
    r = fabric.run(pol.load().checks["fabric"])
    assert r.status is status, r.summary
    assert all(w in r.summary for w in words), r.summary


def test_fabric_and_gpu_procs_without_a_driver_are_unknown(serve) -> None:
    serve([], init_error="DriverNotLoaded")
    for check in (fabric, gpu_procs):
        r = check.run({})
        assert r.status is Status.UNKNOWN and "NVML is not available" in r.summary


def _proc(root: Path, pid: int, cgroup: str, cmdline: bytes = b"", comm: str = "") -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline)
    (d / "comm").write_text(comm + "\n")


@pytest.fixture
def procs(tmp_path: Path) -> Path:
    """A recorded /proc: Slurm jobs under cgroup v2 and v1, a stray, an unreadable entry (pid 400 has exited)."""
    root = tmp_path / "root"
    _proc(root, 100, "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n",
          b"/usr/bin/python3\0train.py\0--lr=3e-4\0", "python3")
    _proc(root, 200, "12:memory:/slurm/uid_1000/job_456/step_batch/task_0\n11:devices:/slurm/uid_1000/job_456/step_batch\n"
          "1:name=systemd:/system.slice/slurmd.service\n", b"./a.out\0", "a.out")
    _proc(root, 300, "0::/user.slice/user-0.slice/session-7.scope\n", b"", "stress")
    _proc(root, 600, "0::/system.slice/slurmstepd.scope/job_1230/step_extern/user/task_special\n", b"sleep\0", "sleep")
    (root / "proc/500/cgroup").mkdir(parents=True)  # reading it fails (not as "no such file")
    return root


def _using(*pids: int, mib: int | None = 30720) -> list[dict]:
    return [{"pid": p, "usedGpuMemory": None if mib is None else mib << 20} for p in pids]


@pytest.mark.parametrize("compute,graphics,job,status,words", [
    ([], [], 123, Status.PASS, ["no process left on the 2 GPU(s)"]),
    ([100], [], 123, Status.FAIL, ["pid 100 (python3) on GPU 00000000:18:00.0, 30720 MiB: still running for job 123"]),
    ([200, 600], [], 123, Status.PASS, ["2 process(es) on the GPUs, of running job(s) 1230, 456"]),
    ([100], [], None, Status.PASS, ["of running job(s) 123"]),  # no ending job named: another job's
    ([], [300], 123, Status.FAIL, ["pid 300 (stress)", "belongs to no Slurm job (a stray)"]),
    ([400], [], 123, Status.PASS, ["no process left on the 2 GPU(s) (pid 400 exited meanwhile)"]),
    ([200, 400], [], 123, Status.PASS, ["1 process(es) on the GPUs, of running job(s) 456 (pid 400 exited meanwhile)"]),
    ([500], [], 123, Status.UNKNOWN, ["could not tell whose: pid 500 (?)"]),
    ([500, 100], [], "123", Status.FAIL, ["still running for job 123"]),
])
def test_gpu_procs_from_recorded_readings(serve, procs, compute, graphics, job, status, words) -> None:
    serve([_gpu(0, nvmlDeviceGetComputeRunningProcesses=_using(*compute),
                nvmlDeviceGetGraphicsRunningProcesses=_using(*graphics)), _gpu(1)])
    r = gpu_procs.run({"root": str(procs), "job": job})
    assert r.status is status, r.summary
    assert all(w in r.summary for w in words), r.summary


def test_gpu_procs_evidence_names_each_process_once_per_gpu(serve, procs) -> None:
    """A process NVML lists as compute and graphics is one; memory NVML cannot report shows as '?'."""
    both = _using(100, mib=None)
    serve([_gpu(0, nvmlDeviceGetComputeRunningProcesses=both, nvmlDeviceGetGraphicsRunningProcesses=both),
           _gpu(1, nvmlDeviceGetComputeRunningProcesses=_using(100, 300, mib=512))])
    r = gpu_procs.run({"root": str(procs), "job": 123})
    assert r.status is Status.FAIL and "pid 100 (python3) on GPU 00000000:18:00.0, ? MiB" in r.summary
    assert [(p["pid"], p["gpu"], p["used_mib"], p["job"], p["name"]) for p in r.evidence["processes"]] == [
        (100, "00000000:18:00.0", None, "123", "python3"), (100, "00000000:19:00.0", 512, "123", "python3"),
        (300, "00000000:19:00.0", 512, None, "stress")]


def _port(root: Path, dev: str, state: str, rate: str) -> None:
    d = root / "sys/class/infiniband" / dev / "ports/1"
    d.mkdir(parents=True)
    for name, text in (("state", state), ("phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled"),
                       ("rate", rate), ("link_layer", "InfiniBand")):
        (d / name).write_text(text + "\n")


def _model(root: Path, pci: str, model: str) -> None:
    d = root / "proc/driver/nvidia/gpus" / pci
    d.mkdir(parents=True)
    (d / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 156\nGPU UUID: \t GPU-3b1c5d2e-0000-0000-0000-"
                                   "000000000000\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\n"
                                   f"Bus Location: \t {pci}\nDevice Minor: \t 0\nGPU Excluded:\t No\n")


@pytest.mark.parametrize("gpu_model,opts,status,words", [
    (H100, {"per_gpu_model": {H100: {"ports": 2, "rate_gbps": 400}}}, Status.FAIL,
     ["mlx5_1/1 at 200 Gb/sec (4X HDR), below 400 Gb/s", f"(expectation for {H100}: 2 ports active, 400 Gb/s floor)"]),
    (H100, {"per_gpu_model": {H100: {"ports": 3}}}, Status.FAIL, ["2 of 3 ports active (mlx5_2/1 1: DOWN)", H100]),
    (H100, {"per_gpu_model": {H100: {"ports": 2, "rate_gbps": 200}}, "min_rate_gbps": 400, "expected_ports": 3},
     Status.PASS, ["2 port(s) active", f"expectation for {H100}: 2 ports active, 200 Gb/s floor"]),
    ("NVIDIA A100-SXM4-80GB", {"per_gpu_model": {H100: {"ports": 2}}, "expected_ports": 3}, Status.FAIL,
     ["2 of 3 ports active"]),  # a model the table does not list: the defaults
    (None, {"per_gpu_model": {H100: {"ports": 2}}, "min_rate_gbps": 400}, Status.FAIL, ["below 400 Gb/s"]),
])
def test_ib_expectation_per_gpu_model(tmp_path: Path, gpu_model, opts, status, words) -> None:
    _port(tmp_path, "mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    _port(tmp_path, "mlx5_1", "4: ACTIVE", "200 Gb/sec (4X HDR)")
    _port(tmp_path, "mlx5_2", "1: DOWN", "10 Gb/sec (4X SDR)")
    if gpu_model:
        for pci in ("0000:18:00.0", "0000:2a:00.0"):
            _model(tmp_path, pci, gpu_model)
    r = ib.run({"root": str(tmp_path), **opts})
    assert r.status is status, r.summary
    assert all(w in r.summary for w in words), r.summary
    assert ("expectation for" in r.summary) == (gpu_model == H100)
    assert r.evidence["gpu_model"] == (H100 if gpu_model == H100 else "")


@pytest.mark.parametrize("opts,status,words", [
    ({}, Status.PASS, ["GB free", "(/nope not here)"]),
    ({"min_free_pct": 101}, Status.FAIL, ["under 101% or 1 GB"]),
    ({"min_free_gb": 1e9}, Status.FAIL, ["under 5% or 1e+09 GB"]),
    ({"min_free_pct": 0, "min_free_gb": 0, "min_free_inodes_pct": 101}, Status.FAIL, ["inodes free", "under 101%"]),
])
def test_disk_on_a_real_file_system(tmp_path: Path, opts, status, words) -> None:
    r = disk.run({**pol.load().checks["disk"], "paths": [str(tmp_path), "/nope"], **opts})
    assert r.status is status, r.summary
    assert all(w in r.summary for w in words), r.summary
    assert r.evidence["missing"] == ["/nope"] and r.evidence["paths"][0]["path"] == str(tmp_path)


def _statvfs(blocks: int, avail: int, files: int, favail: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, blocks, avail, avail, files, favail, favail, 0, 255))


@pytest.mark.parametrize("fs,status,words", [
    (_statvfs(1 << 20, 1 << 19, 1000, 10), Status.FAIL, ["/scratch: 10 inodes free (1.0%), under 5%"]),
    (_statvfs(1 << 20, 1 << 19, 0, 0), Status.PASS, ["/scratch 2.1 GB free (50.0%)"]),  # no inode count (btrfs)
    (_statvfs(1 << 30, 1 << 20, 1000, 900), Status.FAIL, ["4.3 GB free (0.1%), under 5% or 1 GB"]),  # big and full
    (_statvfs(1 << 17, 1 << 17, 1000, 900), Status.FAIL, ["0.5 GB free (100.0%)"]),  # small and empty
    (_statvfs(0, 0, 0, 0), Status.PASS, ["/scratch 0.0 GB free"]),  # no size to judge
    (PermissionError(13, "Permission denied"), Status.UNKNOWN, ["could not read /scratch: Permission denied"]),
])
def test_disk_judges_what_statvfs_reports(monkeypatch: pytest.MonkeyPatch, fs, status, words) -> None:
    def statvfs(path):
        if isinstance(fs, OSError):
            raise fs
        return fs
    monkeypatch.setattr(os, "statvfs", statvfs)
    r = disk.run({**pol.load().checks["disk"], "paths": ["/scratch"]})
    assert r.status is status, r.summary
    assert all(w in r.summary for w in words), r.summary


def test_disk_with_no_path_here_is_unknown(tmp_path: Path) -> None:
    r = disk.run({**pol.load().checks["disk"], "paths": [str(tmp_path / "a"), str(tmp_path / "b")]})
    assert r.status is Status.UNKNOWN and "none exists" in r.summary


def test_runner_acts_on_the_new_checks(serve, procs, tmp_path: Path) -> None:
    """Through the runner (each in its child process): the policy's action and category for each FAIL."""
    serve([_gpu(0, fabric_info={"state": 2, "status": 0}, links=18,
                nvmlDeviceGetComputeRunningProcesses=_using(100, 200))])
    policy = pol.load()
    policy.checks["disk"].update(paths=[str(tmp_path)], min_free_pct=101)
    results = run_checks(["disk", "fabric", "gpu_procs"], policy, 120, {"root": str(procs), "job": 123})
    assert [(r.check, r.status, r.action, r.category) for r in results] == [
        ("disk", Status.FAIL, "drain", "node"), ("fabric", Status.FAIL, "drain", "hardware"),
        ("gpu_procs", Status.FAIL, "drain", "node")], [r.summary for r in results]
    assert "fabric IN_PROGRESS" in results[1].summary and "job 123" in results[2].summary
    assert "pid 200" not in results[2].summary  # job 456 is still running: its process is fine
    results = run_checks(["fabric", "gpu_procs"], policy, 120, {"root": str(procs), "job": 456})
    assert [r.status for r in results] == [Status.FAIL, Status.FAIL] and "pid 200" in results[1].summary


def test_policy_wires_the_new_checks(tmp_path: Path) -> None:
    p = pol.load()
    assert "gpu_procs" in p.epilog.checks and {"disk", "fabric"} <= set(p.healthcheck.checks)
    site = tmp_path / "site.toml"
    site.write_text('[fabric.expected_links]\n"NVIDIA GB200" = 18\n'
                    '[ib.per_gpu_model]\n"NVIDIA H100 80GB HBM3" = { ports = 8, rate_gbps = 400 }\n')
    p = pol.load(site)
    links = p.checks["fabric"]["expected_links"]
    assert links["NVIDIA GB200"] == 18 and links[H100] == 18
    assert p.checks["ib"]["per_gpu_model"] == {H100: {"ports": 8, "rate_gbps": 400}} and p.checks["ib"]["on_fail"] == "drain"
    site.write_text("[disk]\nmin_free = 5\n")
    with pytest.raises(pol.PolicyError, match="unknown policy key 'disk.min_free'"):
        pol.load(site)
