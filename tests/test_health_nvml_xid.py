"""nvml and xid_history checks: recorded NVML readings served through a pynvml stand-in
(tests/fakes), real kernel-log lines from the corpus, and Xids the collector stored."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from observe.health import policy as pol
from observe.health.result import Status
from observe.health.runner import run_checks
from observe.ingest import ingest
from observe.store import Store

HERE = Path(__file__).resolve().parent
READINGS = HERE / "fixtures" / "nvml"
XID_LOG = HERE / "fixtures" / "corpus" / "real" / "xid.log"


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch):
    """Run the nvml check (in its child process, as always) against a recording."""
    monkeypatch.setenv("PYTHONPATH", f"{HERE / 'fakes'}")

    def run(case: str):
        monkeypatch.setenv("OBSERVE_NVML_READINGS", str(READINGS / f"{case}.json"))
        return run_checks(["nvml"], pol.load(), 60)[0]
    return run


@pytest.mark.parametrize("case,status,action,words", [
    ("h100_healthy", Status.PASS, "", ["2 GPU(s) healthy"]),
    ("a100_remap_pending", Status.FAIL, "reset", ["00000000:B1:00.0", "2 uncorrectable ECC", "row remap pending"]),
    ("a100_remap_failed", Status.FAIL, "drain", ["row remapping failed", "PCIe link x8 of x16", "hw_thermal_slowdown"]),
    ("v100_retired", Status.FAIL, "drain", ["page retirement pending", "61 retired pages"]),
    ("h100_lost", Status.FAIL, "drain", ["GPU 1: the GPU is lost"]),
    ("no_driver", Status.UNKNOWN, "", ["NVML is not available"]),
])
def test_nvml_findings_from_recorded_readings(nvml, case, status, action, words) -> None:
    r = nvml(case)
    assert (r.status, r.action) == (status, action), r.summary
    for w in words:
        assert w in r.summary
    if case == "h100_healthy":  # Gen1 at P8 is power saving, not a degraded link
        assert not r.evidence["findings"] and r.evidence["gpus"][1]["pcie"]["gen"] == 1


def test_nvml_without_the_library_is_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pynvml.py").write_text("raise ImportError('no module named pynvml')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    r = run_checks(["nvml"], pol.load(), 60)[0]
    assert r.status is Status.UNKNOWN and "nvidia-ml-py" in r.summary


def _xid(log: Path, **opts):
    policy = pol.load()
    policy.checks["xid_history"].update({"log": str(log), **opts})
    return run_checks(["xid_history"], policy, 60)[0]


def test_xid_history_on_real_kernel_lines(tmp_path: Path) -> None:
    """The corpus's Xid lines (dmesg format, time since boot): 79, 62, 120 are fatal; 13, 31, 45 are not."""
    r = _xid(XID_LOG, node="gpu7")
    assert r.status is Status.FAIL and r.action == "reboot" and r.category == "hardware"  # Xid 79: reboot first
    codes = {x["code"] for x in r.evidence["xids"] if x["kind"] == "gpu_xid"}
    assert {79, 62, 120} <= codes and not codes & {13, 31, 45, 32}
    assert {"gpu_fell_off_bus", "gpu_init_failed"} <= {x["kind"] for x in r.evidence["xids"]}
    benign = tmp_path / "benign.log"
    benign.write_text("".join(line for line in XID_LOG.read_text().splitlines(True)
                              if any(f"): {c}," in line for c in (13, 31, 32, 45))))
    r = _xid(benign, node="gpu7")
    assert r.status is Status.PASS, r.summary
    assert _xid(tmp_path / "missing.log").status is Status.UNKNOWN


def test_xid_history_per_node_log_and_boot_window(tmp_path: Path) -> None:
    """%n names the node's own file; an Xid logged before this boot does not count."""
    boot = datetime.now(timezone.utc) - timedelta(hours=1)
    before, after = boot - timedelta(hours=2), boot + timedelta(minutes=5)
    line = "{t} node{n} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    for n in (1, 2):
        (tmp_path / f"node{n}").mkdir()
    (tmp_path / "node1" / "kern.log").write_text(line.format(t=before.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00"), n=1))
    (tmp_path / "node2" / "kern.log").write_text(line.format(t=after.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00"), n=2))
    opts = {"boot_time": boot.isoformat()}
    assert _xid(tmp_path / "%n" / "kern.log", node="node1", **opts).status is Status.PASS
    r = _xid(tmp_path / "%n" / "kern.log", node="node2", **opts)
    assert r.status is Status.FAIL and r.evidence["xids"][0]["code"] == 79 and r.evidence["xids"][0]["gpu"] == "0000:3b:00"


def test_xid_history_leaves_a_jobs_own_xids_to_the_job(tmp_path: Path) -> None:
    """One job's Xid 31, three episodes seven minutes apart on one GPU: the prolog and epilog drain nothing."""
    boot = datetime.now(timezone.utc) - timedelta(hours=1)
    log = tmp_path / "kern.log"
    log.write_text("".join(f"{boot + timedelta(minutes=10 + 7 * i):%Y-%m-%dT%H:%M:%S.%f+00:00} gpu9 kernel: NVRM: Xid "
                           "(PCI:0000:3b:00): 31, pid=4242, name=python, Ch 00000010, intr 00000000. MMU Fault: "
                           "ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x17_00592000.\n" for i in range(3)))
    r = _xid(log, node="gpu9", from_store=False, boot_time=boot.isoformat())
    assert r.status is Status.PASS and not r.action, r.summary


def test_xid_history_reads_the_store(tmp_path: Path) -> None:
    """An Xid the collector shipped is found even when the local log no longer has it."""
    store = Store(tmp_path / "store")
    log = tmp_path / "kern.log"
    now = datetime.now(timezone.utc)
    log.write_text(f"{now:%Y-%m-%dT%H:%M:%S.%f+00:00} gpu9 kernel: NVRM: Xid (PCI:0000:b1:00): 48, pid=9, "
                   "name=python, Ch 0000000a, DBE (double bit error) detected.\n")
    ingest([str(log)], store, source="kernel")  # a kernel log named as such (a syslog file vouches for no sender)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    r = _xid(empty, node="gpu9", store=str(store.root), boot_time=(now - timedelta(hours=1)).isoformat())
    assert r.status is Status.FAIL and r.action == "reset" and r.evidence["looked_in"][-1] == "the store"
    assert r.evidence["xids"][0]["code"] == 48
    r = _xid(empty, node="gpu9", store=str(store.root), from_store=False, boot_time=(now - timedelta(hours=1)).isoformat())
    assert r.status is Status.PASS


def test_inject_fault_drill_is_seen_as_a_fatal_xid(tmp_path: Path) -> None:
    """observe health inject-fault writes a line the kernel collector and xid_history take for the real thing."""
    import subprocess
    import sys

    log = tmp_path / "kern.log"
    cli = [sys.executable, "-m", "observe.cli", "health", "inject-fault", "--to", str(log), "--node", "gpu9"]
    refused = subprocess.run(cli, capture_output=True, text=True)
    assert refused.returncode == 2 and "--yes" in refused.stderr and not log.exists()
    bad = subprocess.run([*cli, "--yes", "--gpu", "3b:00; reboot"], capture_output=True, text=True)
    assert bad.returncode == 2 and "PCI bus id" in bad.stderr and not log.exists()
    assert _xid(tmp_path / "missing.log", node="gpu9").status is Status.UNKNOWN
    subprocess.run([*cli, "--yes", "--xid", "48", "--gpu", "0000:86:00"], check=True, capture_output=True)
    r = _xid(log, node="gpu9", boot_time=(datetime.now(timezone.utc) - timedelta(hours=1)).isoformat())
    assert r.status is Status.FAIL and r.action == "reset"  # the catalog's action for 48
    (found,) = r.evidence["xids"]
    assert (found["code"], found["gpu"]) == (48, "0000:86:00") and "name=observe-drill" in found["message"]
