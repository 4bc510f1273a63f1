"""Health checks on the CPU path CI has (torch CPU, gloo), recorded /proc and sysfs trees, and the
runner's guarantees: a check that hangs or breaks is UNKNOWN, never FAIL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from observe.health import policy as pol
from observe.health.checks import allreduce, gpu_burn, gpu_count, ib
from observe.health.result import Status
from observe.health.runner import run_checks
from observe.store import Store

POLICY = pol.load()

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


def test_gpu_burn_passes_on_a_healthy_cpu() -> None:
    r = gpu_burn.run({**POLICY.checks["gpu_burn"], "seconds": 1, "cpu_size": 128})
    assert r.status is Status.PASS, r.summary
    dev = r.evidence["devices"]["cpu"]
    assert dev["iterations"] > 10 and dev["tflops"] > 0 and dev["mismatches"] == 0
    assert dev["max_error"] <= r.evidence["tolerance"]


def _second_device_uses(monkeypatch: pytest.MonkeyPatch, fake) -> None:
    """Run gpu_burn's second device (both are the CPU here) with ``fake`` as its matmul."""
    real_burn, real_mm = gpu_burn._burn, torch.matmul
    calls = []

    def burn(t, dev, a, b, seconds, n):
        calls.append(dev)
        if len(calls) == 2:
            monkeypatch.setattr(torch, "matmul", lambda x, y: fake(real_mm, x, y))
        try:
            return real_burn(t, dev, a, b, seconds, n)
        finally:
            monkeypatch.setattr(torch, "matmul", real_mm)

    monkeypatch.setattr(gpu_burn, "_burn", burn)


def test_gpu_burn_catches_one_silently_corrupted_product(monkeypatch: pytest.MonkeyPatch) -> None:
    count = {"n": 0}

    def flaky(mm, x, y):  # the 6th product of the second device has one wrong element
        c = mm(x, y)
        count["n"] += 1
        if count["n"] == 6:
            c = c.clone()
            c[3, 7] += 1e-3
        return c

    _second_device_uses(monkeypatch, flaky)
    r = gpu_burn.run({**POLICY.checks["gpu_burn"], "seconds": 1, "cpu_size": 128, "devices": ["cpu", "cpu"]})
    assert r.status is Status.FAIL
    assert "cpu#1: 1 product(s) differ from its first" in r.summary
    assert r.evidence["devices"]["cpu#0"]["mismatches"] == 0


def test_gpu_burn_catches_nan_and_a_wrong_first_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(mm, x, y):  # every product of the second device has a NaN
        c = mm(x, y).clone()
        c[0, 0] = float("nan")
        return c

    _second_device_uses(monkeypatch, broken)
    r = gpu_burn.run({**POLICY.checks["gpu_burn"], "seconds": 0.5, "cpu_size": 64, "devices": ["cpu", "cpu"]})
    assert r.status is Status.FAIL
    assert "cpu#1: NaN/Inf" in r.summary and "float64 reference" in r.summary


def test_gpu_burn_names_a_slow_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    def slow(mm, x, y):
        time.sleep(0.002)
        return mm(x, y)

    _second_device_uses(monkeypatch, slow)
    r = gpu_burn.run({**POLICY.checks["gpu_burn"], "seconds": 1, "cpu_size": 64, "devices": ["cpu", "cpu", "cpu"], "min_peer_ratio": 0.85})
    assert r.status is Status.FAIL and "cpu#1:" in r.summary and "below 85% of its peers' median" in r.summary


def test_allreduce_gloo_two_ranks_checks_every_sum() -> None:
    r = allreduce.run({**POLICY.checks["allreduce"], "sizes": ["64KB", "1MB"], "iterations": 3, "warmup": 1})
    assert r.status is Status.PASS, r.summary
    assert r.evidence["backend"] == "gloo" and r.evidence["ranks"] == 2
    sizes = r.evidence["sizes"]
    assert [s["bytes"] for s in sizes] == [64 << 10, 1 << 20]
    assert all(s["wrong"] == 0 and s["busbw_gbps"] == pytest.approx(s["algbw_gbps"]) for s in sizes)  # n=2: factor 1
    assert r.evidence["slowest_node"]


@pytest.mark.parametrize("rows, world, floor, status, words", [
    ({"sizes": {1 << 20: {"seconds": 0.001, "wrong": 0, "wrong_nodes": []}}, "per_node": {"a": 1.0, "b": 2.0}},
     8, 0, Status.PASS, "busbw 1.84 GB/s at 1 MB, every sum right; slowest node b"),
    ({"sizes": {1 << 20: {"seconds": 0.001, "wrong": 1, "wrong_nodes": ["b:rank3"]}}, "per_node": {"a": 1.0}},
     8, 0, Status.FAIL, "wrong sum at 1048576 bytes: b:rank3"),
    ({"sizes": {1 << 20: {"seconds": 0.001, "wrong": 0, "wrong_nodes": []}}, "per_node": {"a": 1.0}},
     8, 100, Status.FAIL, "below the floor 100"),
])
def test_allreduce_verdicts(rows, world, floor, status, words) -> None:
    r = allreduce._verdict(rows, world, {"backend": "nccl"}, {"min_busbw_gbps": floor})
    assert r.status is status and words in r.summary
    assert r.evidence["sizes"][0]["busbw_gbps"] == pytest.approx(1.048576 * 2 * 7 / 8)  # nccl-tests' busbw


def _gpus(root: Path, n: int) -> None:
    for i in range(n):
        (root / "proc/driver/nvidia/gpus" / f"0000:{0x18 + i:02x}:00.0").mkdir(parents=True)


def test_gpu_count_against_policy_and_slurm_gres(tmp_path: Path) -> None:
    _gpus(tmp_path, 7)
    assert gpu_count.run({"root": str(tmp_path), "expected": 8}).status is Status.FAIL
    assert "7 of 8" in gpu_count.run({"root": str(tmp_path), "gres": "gpu:h100:8(S:0-1)"}).summary
    assert gpu_count.run({"root": str(tmp_path), "expected": 7}).status is Status.PASS
    assert gpu_count.run({"root": str(tmp_path / "none")}).status is Status.UNKNOWN
    assert [gpu_count._gres_gpus(g) for g in ("gpu:8", "gpu:a100:4,nic:1", "gres/gpu=2", "nic:1", "")] == [8, 4, 2, 0, 0]


def _port(root: Path, dev: str, port: int, state: str, phys: str, rate: str) -> None:
    d = root / "sys/class/infiniband" / dev / "ports" / str(port)
    d.mkdir(parents=True)
    for name, text in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", "InfiniBand")):
        (d / name).write_text(text + "\n")


def test_ib_ports_from_a_recorded_sysfs_tree(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    _port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")
    ok = ib.run({"root": str(tmp_path)})
    assert ok.status is Status.PASS and "mlx5_0/1 400 Gb/sec" in ok.summary
    slow = ib.run({"root": str(tmp_path), "min_rate_gbps": 400})
    assert slow.status is Status.FAIL and "mlx5_1/1 at 200 Gb/sec (4X HDR), below 400" in slow.summary
    _port(tmp_path, "mlx5_2", 1, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")
    down = ib.run({"root": str(tmp_path)})
    assert down.status is Status.FAIL and "mlx5_2/1 1: DOWN / 3: Disabled" in down.summary
    assert "2 of 3 ports active" in ib.run({"root": str(tmp_path), "expected_ports": 3}).summary
    assert ib.run({"root": str(tmp_path / "none")}).status is Status.UNKNOWN


def test_runner_turns_hangs_and_crashes_into_unknown() -> None:
    policy = pol.load()
    # a million iterations outlast the 3 s budget on any machine (a fast one finished 10 in 2.7 s)
    hung, crashed = run_checks(["allreduce", "gpu_burn"], policy, 3.0, {"iterations": 1_000_000, "cpu_size": "not a number"})
    assert hung.status is Status.UNKNOWN and "did not finish" in hung.summary
    assert crashed.status is Status.UNKNOWN
    assert not hung.action and not crashed.action  # nothing to drain for


def test_policy_merges_a_site_file_and_rejects_mistakes(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('[gpu_burn]\nseconds = 5\n[gpu_burn.tflops_floor]\n"NVIDIA H100 80GB HBM3" = 500\n')
    p = pol.load(site)
    assert p.checks["gpu_burn"]["seconds"] == 5 and p.checks["gpu_burn"]["dtype"] == "bf16"
    assert p.checks["gpu_burn"]["tflops_floor"] == {"NVIDIA H100 80GB HBM3": 500}
    site.write_text("[gpu_burn]\nsecs = 5\n")
    with pytest.raises(pol.PolicyError, match="unknown policy key 'gpu_burn.secs'"):
        pol.load(site)
    site.write_text('[ib]\non_fail = "explode"\n')
    with pytest.raises(pol.PolicyError, match="on_fail 'explode'"):
        pol.load(site)
    site.write_text('[drain]\nmax_per_hour = "five"\n')
    with pytest.raises(pol.PolicyError, match=r"\[drain\] max_per_hour: 'five' is not a whole number"):
        pol.load(site)
    site.write_text('[epilog]\nbudget = "soon"\n')
    with pytest.raises(pol.PolicyError, match=r"\[epilog\] budget"):
        pol.load(site)
    site.write_text('[faults]\nladder = "reset"\n')
    with pytest.raises(pol.PolicyError, match=r"\[faults\] ladder: 'reset' is not a list"):
        pol.load(site)
    p = pol.load(site.write_text('[epilog]\nbudget = "90s"\nmax_requeues = 1\n') and site)
    assert p.epilog.budget == timedelta(seconds=90) and p.epilog.max_requeues == 1 and p.prolog.budget == timedelta(seconds=20)


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observe.cli", "health", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, **kw)


def test_cli_health_run_records_results(tmp_path: Path) -> None:
    ibroot = tmp_path / "root"
    _port(ibroot, "mlx5_0", 1, "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)")
    site = tmp_path / "site.toml"
    site.write_text("[gpu_burn]\ncpu_size = 64\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = _cli("run", "--checks", "gpu_burn,ib", "--seconds", "1", "--format", "json", "--policy", str(site),
               "--record", "--store", str(tmp_path / "store"), "--node", "gpu007", env=env)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["status"] for r in results] == ["PASS", "UNKNOWN"]  # no /sys/class/infiniband on this machine
    assert run.returncode == 0, run.stderr
    events = Store(tmp_path / "store").scan(sources=["health"]).collect()
    assert events.height == 2 and set(events.get_column("node")) == {"gpu007"}
    assert events.filter(pl.col("kind") == "health_check").get_column("message")[0].startswith("gpu_burn PASS")
    bad = _cli("run", "--checks", "gpu_burn,nope", env=env)
    assert bad.returncode == 2 and "unknown check(s) nope" in bad.stderr and "Traceback" not in bad.stderr


def test_this_node_is_slurms_name_else_the_short_host_name(monkeypatch) -> None:
    import socket

    from observe.hostname import this_node
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu042.cluster.local")
    assert this_node({}) == "gpu042"
    assert this_node({"SLURMD_NODENAME": "node-a17"}) == "node-a17"
