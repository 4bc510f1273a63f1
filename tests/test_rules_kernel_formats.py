"""Kernel-side rules against the emitters' own format strings, one case per wording/version.

Each line below is the rendering of a format string cited in collectors/rules/kernel.toml or
nvrm.toml (realistic values filled in), fed through the real kernel collector (dmesg framing)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from observe import rules
from observe.collector import Context
from observe.ingest import parse_bytes

CTX = Context(node="n1", reference_time=datetime(2026, 11, 23, tzinfo=timezone.utc))


def _one(message: str) -> dict:
    out = parse_bytes(f"[ 1234.567890] {message}\n".encode(), "kernel", CTX)
    assert out.height == 1, out
    row = out.row(0, named=True)
    row["attrs"] = json.loads(row["attrs"]) if row["attrs"] else {}
    return row


def _check(message: str, kind: str, **want: object) -> dict:
    row = _one(message)
    assert row["kind"] == kind, (message, row["kind"])
    for key, value in want.items():
        got = row[key] if key in ("code", "gpu", "pid", "severity") else row["attrs"].get(key)
        assert got == value, (message, key, got, value)
    return row


def test_every_kernel_rule_cites_its_source() -> None:
    for rule in rules.load()[0]:
        if rule.where.split(":rule")[0].endswith(("kernel.toml", "nvrm.toml")):
            assert rule.cite, rule.where
            assert all(": " in c for c in rule.cite), rule.where


# ---- PCIe AER ----
AER = [
    # drivers/pci/pcie/aer/aerdrv_errprint.c v4.x: "PCIe Bus Error: severity=%s, type=%s, id=%04x(%s)"
    ("pcieport 0000:00:1d.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e8(Receiver ID)",
     "corrected", {"pci": "0000:00:1d.0", "layer": "Physical Layer"}),
    ("pcieport 0000:00:1c.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, id=00e0(Requester ID)",
     "non_fatal", {"pci": "0000:00:1c.0", "layer": "Transaction Layer"}),
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, id=0018(Requester ID)",
     "fatal", {"layer": "Transaction Layer"}),
    # aerdrv_errprint.c v4.x: "AER: %s%s error received: id=%04x"
    ("pcieport 0000:00:1d.0: AER: Multiple Corrected error received: id=00e8", "corrected", {"source": "00e8"}),
    ("pcieport 0000:00:1c.0: AER: Uncorrected (Non-Fatal) error received: id=0300", "non_fatal", {"source": "0300"}),
    ("pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: id=0018", "fatal", {"source": "0018"}),
    # aer.c v4.19-v6.x: "PCIe Bus Error: severity=%s, type=%s, (%s)", "%s%s error received: %04x:%02x:%02x.%d"
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
     "corrected", {"layer": "Data Link Layer"}),
    ("pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0", "corrected",
     {"pci": "0000:00:03.0", "source": "0000:00:03.0"}),
    ("pcieport 0000:00:1c.0: AER: Uncorrected (Non-Fatal) error received: 0000:03:00.0", "non_fatal",
     {"source": "0000:03:00.0"}),
    ("pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0", "fatal",
     {"source": "0000:00:03.0"}),
    # aer.c v6.x severity strings "Correctable", "Uncorrectable (Non-Fatal)", "Uncorrectable (Fatal)"
    ("pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Receiver ID)",
     "corrected", {"layer": "Data Link Layer"}),
    ("nvidia 0000:03:00.0: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), type=Transaction Layer, (Completer ID)",
     "non_fatal", {"pci": "0000:03:00.0"}),
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Inaccessible, (Unregistered Agent ID)",
     "fatal", {"layer": "Inaccessible"}),
    # aer.c v6.16+: "%s%s error message received from %04x:%02x:%02x.%d%s"
    ("pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0", "corrected",
     {"source": "0000:00:00.0"}),
    ("pcieport 0000:00:1c.0: AER: Multiple Uncorrectable (Non-Fatal) error message received from 0000:73:00.1",
     "non_fatal", {"source": "0000:73:00.1"}),
    ("pcieport 0000:00:03.0: AER: Uncorrectable (Fatal) error message received from 0000:03:00.0 (no details found",
     "fatal", {"source": "0000:03:00.0"}),
    # drivers/pci/pcie/err.c, both capitalisations
    ("nvidia 0000:03:00.0: AER: Can't recover (no error_detected callback)", "fatal",
     {"pci": "0000:03:00.0", "recovery": "failed"}),
    ("nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)", "fatal", {"recovery": "failed"}),
    ("pcieport 0000:00:03.0: AER: Device recovery failed", "fatal", {"recovery": "failed"}),
    ("pcieport 0000:00:03.0: AER: device recovery failed", "fatal", {"recovery": "failed"}),
]


@pytest.mark.parametrize(("line", "aer", "attrs"), AER, ids=range(len(AER)))
def test_pcie_aer(line: str, aer: str, attrs: dict) -> None:
    severity = {"corrected": "warning", "non_fatal": "err", "fatal": "crit"}[aer]
    _check(line, "pcie_aer", aer=aer, severity=severity, **attrs)


def test_aer_detail_lines_are_not_events() -> None:
    for line in ("pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00001000/00002000",
                 "pcieport 0000:00:03.0:    [12] Timeout               ",
                 "pcieport 0000:00:03.0: AER: Device recovery successful"):
        assert _one(line)["kind"] == "log", line


# ---- OOM killer ----
OOM = [
    # 2.6.2x "%s: Killed process %d (%s).", 4.x "Killed process %d (%s) total-vm:...", 5.x+ with "%s: " and UID
    ("Out of memory: Killed process 4242 (python).", "oom_kill", 4242, "python", {}),
    ("Killed process 935 (python) total-vm:113656kB, anon-rss:102104kB, file-rss:0kB", "oom_kill", 935, "python",
     {"total_vm": "113656", "anon_rss": "102104"}),
    ("Killed process 935 (python) total-vm:113656kB, anon-rss:102104kB, file-rss:0kB, shmem-rss:0kB", "oom_kill",
     935, "python", {"total_vm": "113656"}),
    ("Out of memory: Killed process 7899 (python) total-vm:26184840kB, anon-rss:15370088kB, file-rss:0kB, "
     "shmem-rss:0kB, UID:1001 pgtables:38964kB oom_score_adj:0", "oom_kill", 7899, "python", {"anon_rss": "15370088"}),
    ("Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, "
     "shmem-rss:0kB, UID:1001 pgtables:100kB oom_score_adj:0", "oom_kill", 4242, "python3", {"scope": "Memory cgroup"}),
    # victim choice, up to 5.0: "%s: Kill process %d (%s) score %u or sacrifice child"; 2.6: "... and children."
    ("Out of memory: Kill process 4242 (python) score 912 or sacrifice child", "oom_kill", 4242, "python",
     {"score": "912"}),
    ("Memory cgroup out of memory: Kill process 4242 (python3) score 1999 or sacrifice child", "oom_kill", 4242,
     "python3", {"scope": "Memory cgroup"}),
    ("Out of Memory: Kill process 4242 (python) score 81234 and children.", "oom_kill", 4242, "python", {}),
    # dump_oom_summary, 5.0+
    ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/slurm/job_42,"
     "task_memcg=/slurm/job_42/step_0,task=python3,pid=4242,uid=1000", "oom_kill", 4242, "python3",
     {"constraint": "CONSTRAINT_MEMCG", "memcg": "/slurm/job_42/step_0"}),
    # oom_reaper, 4.6+
    ("oom_reaper: reaped process 935 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB", "oom_reaped", 935,
     "python", {}),
    # dump_header: 2.6 and 5.x+ wordings
    ("python invoked oom-killer: gfp_mask=0x201d2, order=0, oomkilladj=0", "oom_invoked", None, "python", {}),
    ("GC Thread#9 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
     "oom_invoked", None, "GC Thread#9", {}),
]


@pytest.mark.parametrize(("line", "kind", "pid", "process", "attrs"), OOM, ids=range(len(OOM)))
def test_oom(line: str, kind: str, pid: int | None, process: str, attrs: dict) -> None:
    _check(line, kind, pid=pid, process=process, **attrs)


# ---- hung task, lockups, MCE, EDAC, panic ----
def test_hung_task() -> None:
    # kernel/hung_task.c: "INFO: task %s:%d blocked for more than %ld seconds."
    _check("INFO: task cache_mgr_event:620917 blocked for more than 120 seconds.", "hung_task", pid=620917,
           process="cache_mgr_event", seconds="120")
    _check("INFO: task kworker/u16:3:1234 blocked for more than 241 seconds.", "hung_task", pid=1234,
           process="kworker/u16:3")
    _check("INFO: task CPU 0/KVM:24430 blocked for more than 122 seconds.", "hung_task", pid=24430,
           process="CPU 0/KVM")


def test_lockups() -> None:
    # kernel/watchdog.c: "BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]"
    _check("watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [python:4242]", "soft_lockup", pid=4242,
           process="python", cpu="12", seconds="22")
    _check("BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:1234]", "soft_lockup", pid=1234,
           process="kworker/3:1")
    # watchdog_hld.c: "Watchdog detected hard LOCKUP on cpu %d"
    _check("NMI watchdog: Watchdog detected hard LOCKUP on cpu 1", "soft_lockup", lockup="hard", cpu="1",
           severity="crit")


def test_mce_and_panic() -> None:
    _check("mce: [Hardware Error]: Machine check events logged", "mce", detail="Machine check events logged")
    _check("Kernel panic - not syncing: Fatal exception", "kernel_panic", detail="Fatal exception")


EDAC = [
    # edac_mc.c v5.8+: "%d CE %s%son %s (%s page:0x%lx offset:0x%lx grain:%ld syndrome:0x%lx%s%s)"
    ("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x5a4f "
     "offset:0x0 grain:32 syndrome:0x0)", "corrected", "1"),
    ("EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0x12345 "
     "offset:0x0 grain:32 - err_code:0x0000:0x009f)", "uncorrected", "1"),
    # v3.5-v5.7: "%d CE %s%son %s (%s %s - %s)"
    ("EDAC MC0: 2 CE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#1 (channel:0 slot:1 page:0x1234 offset:0x0 "
     "grain:32 syndrome:0x0 - area:DRAM err_code:0001:0090)", "corrected", "2"),
    ("EDAC MC0: 1 UE memory scrubbing error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#1 (channel:0 slot:1 page:0x1234 "
     "offset:0x0 grain:32 - area:DRAM err_code:0001:00c0)", "uncorrected", "1"),
    # v2.6-v3.4: "CE page 0x%lx, offset 0x%lx, grain %d, syndrome 0x%lx, row %d, channel %d, label \"%s\": %s"
    ('EDAC MC0: CE page 0x5a4f, offset 0x0, grain 32, syndrome 0x0, row 0, channel 1, label "DIMM_A1": i5000 CE',
     "corrected", None),
    ('EDAC MC0: UE page 0x5a4f, offset 0x0, grain 32, row 0, labels "DIMM_A1": i5000 UE', "uncorrected", None),
]


@pytest.mark.parametrize(("line", "severity", "count"), EDAC, ids=range(len(EDAC)))
def test_edac(line: str, severity: str, count: str | None) -> None:
    row = _check(line, "memory_ecc", controller="MC0" if "MC0" in line else "MC1", count=count)
    assert row["attrs"]["severity"] == severity
    assert row["severity"] == ("warning" if severity == "corrected" else "crit")


# ---- InfiniBand / mlx5 ----
def test_ib_port_state() -> None:
    # drivers/infiniband/core/cache.c ibdev_info: "Port: %d Link %s"
    down = _check("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN", "ib_link_down", hca="mlx5_5", port="1",
                  pci="0000:ab:00.0")
    up = _check("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE", "ib_link_up", hca="mlx5_5", port="1")
    assert (down["attrs"]["hca"], down["attrs"]["port"]) == (up["attrs"]["hca"], up["attrs"]["port"])
    _check("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE_DEFER", "ib_link_up", port="1")
    for transient in ("INIT", "ARMED"):
        assert _one(f"mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link {transient}")["kind"] == "log"
    _check("ib0: Lost carrier", "ib_link_down", hca="ib0")


def test_mlx5_health() -> None:
    # mlx5/core/health.c poll_health: "device's health compromised - reached miss count"
    _check("mlx5_core 0000:d2:00.0: poll_health:825: device's health compromised - reached miss count",
           "ib_hca_error", driver="mlx5_core", pci="0000:d2:00.0")
    # drivers/base/dd.c: "%s: probe of %s failed with error %d" (no dev_printk prefix: the device after "probe of")
    _check("mlx5_core: probe of 0000:03:00.0 failed with error -22", "ib_hca_error", driver="mlx5_core", pci="0000:03:00.0")


def _attrs_text(message: str) -> str:
    return parse_bytes(f"[ 1234.567890] {message}\n".encode(), "kernel", CTX).item(0, "attrs")


# drivers/base/core.c __dev_printk "%s %s: %pV" (driver, dev_name) and drivers/infiniband/core/device.c
# __ibdev_printk "%s %s %s: %pV" (driver, parent's dev_name, IB device): the device of every such line
DEVICE_LINES = [
    ("mlx5_core 0004:01:00.0: 63.008 Gb/s available PCIe bandwidth (8.0 GT/s PCIe x8 link)", "log",
     {"pci": "0004:01:00.0"}),
    ("mlx5_core 0000:03:00.0: firmware version: 14.32.1010", "log", {"pci": "0000:03:00.0"}),
    ("mlx4_core 0000:81:00.0: PCIe link speed is 8.0GT/s, device supports 8.0GT/s", "log", {"pci": "0000:81:00.0"}),
    ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT", "log", {"pci": "0000:ab:00.0", "device": "mlx5_5"}),
    ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE", "ib_link_up",
     {"pci": "0000:ab:00.0", "device": "mlx5_5", "hca": "mlx5_5", "port": "1"}),
    ("pcieport 0000:00:03.0: AER: Root Port link has been reset (0)", "log", {"pci": "0000:00:03.0"}),
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)", "pcie_aer",
     {"pci": "0000:00:03.0", "aer": "corrected"}),
]


@pytest.mark.parametrize(("line", "kind", "attrs"), DEVICE_LINES, ids=range(len(DEVICE_LINES)))
def test_device_prefix(line: str, kind: str, attrs: dict) -> None:
    _check(line, kind, **attrs)
    text = _attrs_text(line)
    assert text.count('"pci"') == 1 and text.count('"device"') <= 1, text  # read once, by the collector


def test_device_prefix_through_syslog() -> None:
    out = parse_bytes(b"Feb 14 05:03:41 gpu-1 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE\n", "kernel", CTX)
    row = out.row(0, named=True)
    assert row["kind"] == "ib_link_up" and row["node"] == "gpu-1"
    assert {k: json.loads(row["attrs"]).get(k) for k in ("pci", "device", "port")} == {
        "pci": "0000:ab:00.0", "device": "mlx5_5", "port": "1"}


def test_mlx5_debug_prefix_pid() -> None:
    # mlx5_core.h mlx5_core_err/_info: dev_err(dev, "%s:%d:(pid %d): " format, __func__, __LINE__, current->pid)
    row = _check("mlx5_core 0004:01:00.0: mlx5_pcie_event:294:(pid 542): PCIe slot advertised sufficient power (75W).",
                 "log", pci="0004:01:00.0")
    assert row["pid"] == 542


def test_rxe_port_state() -> None:
    # rdma_rxe rxe_net.c: v4.9+ dev_info(&rxe->ib_dev.dev, "set active\n") / "set down\n" (class prefix
    # "infiniband rxe0: "), v4.8 pr_info("rxe: set %s active\n") / "rxe: set %s down\n"
    _check("infiniband rxe0: set active", "ib_link_up", hca="rxe0", device="rxe0")
    _check("infiniband rxe0: set down", "ib_link_down", hca="rxe0", device="rxe0")
    _check("rxe: set rxe0 active", "ib_link_up", hca="rxe0")
    _check("rxe: set rxe1 down", "ib_link_down", hca="rxe1")
    assert _one("rdma_rxe: Failed sending ack")["kind"] == "log"


def test_nvrm_gpu_prefix() -> None:
    # os-interface.h NV_DEV_PRINTF: "NVRM: GPU " NV_PCI_DEV_FMT ": " format, NV_PCI_DEV_FMT "%04x:%02x:%02x.%x"
    _check("NVRM: GPU 0000:06:00.0: GPU serial number is 0.", "log", gpu="0000:06:00")
    _check("NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.", "gpu_fell_off_bus", gpu="0000:06:00")


# ---- NVRM ----
XID = [
    # kernel_rc.c krcReportXid, process known / unknown ('<unknown>' in 5xx) / none
    ("NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=cuda_plot_k32_v, Ch 00000010, intr 00000000.", 31,
     "0000:0a:00", 13332, {"process": "cuda_plot_k32_v"}),
    ("NVRM: Xid (PCI:0000:0a:00): 62, pid='<unknown>', name=<unknown>, 2023b230 20238a3a", 62, "0000:0a:00", None,
     {"process": "<unknown>"}),
    ("NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.", 79, "0000:06:00", None,
     {"detail": "GPU has fallen off the bus."}),
    # MIG attribution: "PCI:%04x:%02x:%02x GPU-I:%02u" and "... GPU-CI:%02u"
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 43, pid=4242, name=python, Ch 00000008", 43, "0000:3b:00", 4242,
     {"gpu_instance": "01"}),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:02 GPU-CI:00): 31, pid=4242, name=python, Ch 00000010", 31, "0000:3b:00", 4242,
     {"gpu_instance": "02", "compute_instance": "00"}),
    # root cause suffix " caused by previous Xid %d"
    ("NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python, Ch 00000010 caused by previous Xid 31", 45,
     "0000:3b:00", 4242, {"caused_by": "31", "detail": "Ch 00000010"}),
    # Xid 119 messages (kernel_gsp.c), old and new
    ("NVRM: Xid (PCI:0000:00:06): 119, pid='<unknown>', name=<unknown>, Timeout waiting for RPC from GSP! "
     "Expected function FREE (0x0 0x0).", 119, "0000:00:06", None, {}),
    ("NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi, Timeout waiting for RPC from GSP1! Expected "
     "function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).", 119, "0002:00:00", 67769, {}),
    # NVLink units (Fatal / Nonfatal) and Xid 154
    ("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000)", 149,
     "0000:00:00", None, {"nvlink_unit": "NETIR_LINK_EVT", "nvlink_severity": "fatal"}),
    ("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)", 145,
     "0018:01:00", None, {"nvlink_severity": "nonfatal"}),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
     154, "0000:01:00", None, {"recovery_action": "Node Reboot Required"}),
    # drivers before the "PCI:" prefix
    ("NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100", 13, "0000:01:00", None, {}),
]


@pytest.mark.parametrize(("line", "code", "gpu", "pid", "attrs"), XID, ids=range(len(XID)))
def test_xid(line: str, code: int, gpu: str, pid: int | None, attrs: dict) -> None:
    _check(line, "gpu_xid", code=code, gpu=gpu, pid=pid, **attrs)


def test_xid_with_continuation_lines() -> None:
    out = parse_bytes(b"[ 8130.000000] NVRM: Xid (PCI:0000:3b:00): 120, GSP task exception: store access page "
                      b"fault (cause:0xf) @ pc:0x13ebd80, partition:2#0, task:3\n"
                      b"[ 8130.000010] NVRM:     Reported by libos partition:2#4 kernel v3.1 [0] @ ts:1770232285\n",
                      "kernel", CTX)
    row = out.row(0, named=True)
    assert (row["kind"], row["code"], row["gpu"]) == ("gpu_xid", 120, "0000:3b:00")
    assert json.loads(row["attrs"])["detail"].endswith("task:3")


NVRM = [
    # NV_DEV_PRINTF "NVRM: GPU %04x:%02x:%02x.%x: " + osinit.c / nv.c messages (gpu stored without the function)
    ("NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.", "gpu_fell_off_bus", {"gpu": "0000:06:00"}),
    ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x40:1941)", "gpu_init_failed", {"gpu": "0000:01:00"}),
    ("NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0", "gpu_init_failed",
     {"gpu": "0000:01:00"}),
    ("NVRM: RmInitAdapter: Cannot initialize GSP firmware RM", "gpu_init_failed", {}),
    ("NVRM: GPU7 RmInitAdapter: Cannot initialize GSP firmware RM", "gpu_init_failed", {}),
    ("NVRM: kgspInitRm_IMPL: Error preparing GSP-RM image", "gpu_init_failed", {}),
    ("NVRM: GPU7 _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP", "gpu_init_failed", {}),
    ("NVRM: GPU7 _kgspBootGspRm: (the GPU is likely in a bad state and may need to be reset)", "gpu_reset_required",
     {"gpu": "7"}),
    # kernel_rc.c _krcLogUuidOnce: "NVRM: GPU at PCI:%04x:%02x:%02x: %s"
    ("NVRM: GPU at PCI:0000:01:00: GPU-10eb9e88-c56c-2ca3-3722-b7aec3028d35", "gpu_uuid",
     {"gpu": "0000:01:00", "uuid": "GPU-10eb9e88-c56c-2ca3-3722-b7aec3028d35"}),
    # kernel_gsp.c heartbeat / RPC timeout banner
    ("NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 812751949 heartbeat 1899482 "
     "heartbeatWithOffsetMs 812745879 diff 6070 timeout 5200", "gpu_gsp_error", {"gpu": "6"}),
    ("NVRM: GPU6 _kgspLogRpcTimeout: ********************************* GSP Timeout "
     "**********************************", "gpu_gsp_error", {}),
    # kernel_nvlink.c
    ("NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!", "gpu_nvlink", {}),
    ("NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!", "gpu_nvlink", {}),
    # nv.c "NVRM: loading %s": open and closed driver banners
    ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.71.05  Release Build  (root@epyc)  "
     "Fri Jul  3 11:27:00 AM UTC 2026", "gpu_driver_loaded", {"driver_version": "595.71.05"}),
    ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024", "gpu_driver_loaded",
     {"driver_version": "535.183.01"}),
]


@pytest.mark.parametrize(("line", "kind", "attrs"), NVRM, ids=range(len(NVRM)))
def test_nvrm(line: str, kind: str, attrs: dict) -> None:
    _check(line, kind, **attrs)


# mlx5 core/cmd.c: a firmware command that never completed (wait_func_handle_exec_timeout v5.11+, wait_func),
# printed by mlx5_core_warn: dev_printk prefix, "%s:%d:(pid %d): ", then the format.
@pytest.mark.parametrize(("line", "command"), [
    ("mlx5_core 0000:61:00.0: wait_func_handle_exec_timeout:1104:(pid 141183): cmd[22]: CREATE_DCT(0x710) No done completion",
     "CREATE_DCT"),
    ("mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): CREATE_DCT(0x710) timeout. Will cause a leak of a command resource",
     "CREATE_DCT"),
    ("mlx5_core 0000:56:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource",
     "ACCESS_REG"),
])
def test_mlx5_command_timeout(line: str, command: str) -> None:
    row = _check(line, "ib_hca_error", command=command, error="command_timeout")
    assert row["attrs"]["pci"] == line.split()[1].rstrip(":")
    assert row["pid"] == int(line.split("(pid ")[1].split(")")[0])


# mlx5 cmd.c mlx5_cmd_check "%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x)\n" after
# mlx5_core_err's "%s:%d:(pid %d): ", with or without the dev_printk device prefix; mlx5_cmd_out_err (v6.x) adds uid
@pytest.mark.parametrize(("line", "command", "pid"), [
    ("mlx5_cmd_check:810:(pid 923941): create_mkey(0x200) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x35e6ec)",
     "create_mkey", 923941),
    ("mlx5_core 0000:ab:00.0: mlx5_cmd_out_err:838:(pid 4242): CREATE_MKEY(0x200) op_mod(0x0) uid(0) failed, status bad "
     "parameter(0x3), syndrome (0x11ed7d), err(-22)", None, 4242),
])
def test_mlx5_command_failed(line: str, command: str | None, pid: int) -> None:
    row = _check(line, "ib_hca_error", pid=pid)
    if command:
        assert row["attrs"].get("command") == command


# NVIDIA driver 390.x (closed resman) after the Xid 79 line: "NVRM: GPU at %04x:%02x:%02x.%x has fallen off the bus."
def test_nvrm_old_fallen_off_the_bus_wording() -> None:
    _check("NVRM: GPU at 0000:06:00.0 has fallen off the bus.", "gpu_fell_off_bus", gpu="0000:06:00")


# drivers/pci/pcie/aer.c "PCIe Bus Error: severity=%s, type=%s, (%s)" hard-wrapped after the severity
def test_aer_severity_without_type() -> None:
    _check("pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected,", "pcie_aer", aer="corrected")
    _check("pcieport 0000:00:1c.5: PCIe Bus Error: severity=Uncorrected (Non-Fatal), ", "pcie_aer", aer="non_fatal")


# drivers/pci/pcie/aer.c v4.19-v5.x: aer_print_error's "PCIe Bus Error: severity=%s, type=%s, (%s)" through pci_err() /
# pci_printk(), whose dev_fmt "AER: " comes after the dev_printk device prefix (the endpoint's own driver here)
@pytest.mark.parametrize(("line", "aer"), [
    ("alx 0000:07:00.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)", "corrected"),
    ("nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
     "non_fatal"),
    ("pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)", "fatal"),
])
def test_aer_bus_error_with_dev_fmt_prefix(line: str, aer: str) -> None:
    row = _check(line, "pcie_aer", aer=aer)
    assert row["attrs"]["pci"] == line.split()[1].rstrip(":")


# arch/x86/kernel/cpu/mce/core.c __print_mce: the report's first line HW_ERR "CPU %d: Machine Check%s: %Lx Bank %d: %016Lx"
# is the event; the TSC/ADDR/MISC/PROCESSOR lines it prints after are its details. drivers/acpi/apei/ghes.c likewise:
# "{%u}" HW_ERR "Hardware error from APEI Generic Hardware Error Source: %d", then cper_estatus_print's section lines.
# drivers/edac/mce_amd.c amd_decode_mce: HW_ERR "%s" (decode_error_status) then "CPU:%d (%x:%x:%x) MC%d_STATUS[...".
@pytest.mark.parametrize("line", [
    "mce: [Hardware Error]: Machine check events logged",
    "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408",
    "mce: [Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 6: be00000000800400",
    "mce: [Hardware Error]: Machine check: Processor context corrupt",
    "{1}[Hardware Error]: event severity: recoverable",
    "[Hardware Error]: Corrected error, no action required.",
    "[Hardware Error]: CPU:0 (17:31:0) MC255_STATUS[-|CE|-|-|AddrV|-|-|-]",
])
def test_machine_check_report_lines(line: str) -> None:
    _check(line, "mce")


@pytest.mark.parametrize("line,mce", [
    ("mce: [Hardware Error]: Machine check events logged", "logged"),
    ("mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 6: cc59dec000041152", "corrected"),
    ("[Hardware Error]: CPU:0 (17:31:0) MC255_STATUS[-|CE|-|-|AddrV|-|-|-]", "corrected"),
    ("mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408", None),
    ("mce: [Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 6: be00000000800400", None),
    ("[Hardware Error]: CPU:0 (17:31:0) MC4_STATUS[-|UE|-|-|AddrV|PCC|-|-]", None),
    ("{1}[Hardware Error]: event severity: corrected", "corrected"),  # a GHES record's severity, its header says none
    ("{1}[Hardware Error]: event severity: fatal", None),
])
def test_a_machine_check_says_whether_the_hardware_corrected_it(line: str, mce: str | None) -> None:
    """MCi_STATUS's UC bit (61: the first hex digit's 2) or AMD's CE/UE flag says corrected or not; the
    "events logged" notice says only that records were logged (a fatal one panics the node)."""
    assert _check(line, "mce")["attrs"].get("mce") == mce


@pytest.mark.parametrize("line", [
    "mce: [Hardware Error]: TSC 0 ADDR fef4c9e0 ",
    "mce: [Hardware Error]: TSC 0 ADDR 1422ff800 MISC 13020004086 ",
    "mce: [Hardware Error]: PROCESSOR 0:706a1 TIME 1537152664 SOCKET 0 APIC 0 microcode 28",
    "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4",
    "{1}[Hardware Error]: section_type: memory error",
    "{1}[Hardware Error]: physical_address: 0x0000000e16677000",
])
def test_machine_check_detail_lines_are_log(line: str) -> None:
    assert _one(line)["kind"] == "log"


# ---- anchored rules: the kernel's own text from the start of the message, to the end where the rule reads a
# whole line (collectors/rules/kernel.toml, nvrm.toml) ----
# edac_mc.c v2.6.x-v3.4: the FB-DIMM and "no information" wordings after "EDAC MC%d: "
@pytest.mark.parametrize(("line", "severity"), [
    ('EDAC MC0: CE row 2, channel 1, label "DIMM_B1": i5400 CE', "corrected"),
    ("EDAC MC0: CE - no information available: INTERNAL ERROR", "corrected"),
    ('EDAC MC1: UE row 0, channel-a= 0 channel-b= 1 labels "DIMM_A1-DIMM_B1": i5000 UE', "uncorrected"),
    ("EDAC MC1: UE - no information available: INTERNAL ERROR", "uncorrected"),
    # v5.8+ with an empty location: "(%s page:..." prints "( page:..."
    ("EDAC MC0: 1 UE on any memory ( page:0x0 offset:0x0 grain:1)", "uncorrected"),
])
def test_edac_older_wordings(line: str, severity: str) -> None:
    assert _check(line, "memory_ecc")["attrs"]["severity"] == severity


@pytest.mark.parametrize("line", [
    # comm-first kernel texts after a process name spelling "EDAC ...: UE"/"CE" (at most 15 bytes)
    "EDAC MC0: 1 UE (31337) used greatest stack depth: 10744 bytes left",
    "EDAC x: UE y[31337] bad frame in rt_sigreturn frame:000000004e6f3c21 ip:7f3a2b1c0d4e sp:7ffd5b2c1d30 orax:0",
    "EDAC MC0: 1 CE: page allocation failure: order:10, mode:0xcc0(GFP_KERNEL), nodemask=(null),cpuset=/,mems_allowed=0",
])
def test_edac_needs_its_format(line: str) -> None:
    assert _one(line)["kind"] != "memory_ecc", line


def test_panic_end_marker_and_hard_lockup_wordings() -> None:
    # kernel/panic.c: pr_emerg("---[ end Kernel panic - not syncing: %s ]---\n", buf)
    _check("---[ end Kernel panic - not syncing: Fatal exception ]---", "kernel_panic")
    # kernel/watchdog.c v6.5+: pr_emerg("CPU%u: Watchdog detected hard LOCKUP on cpu %u\n", this_cpu, cpu)
    _check("watchdog: CPU3: Watchdog detected hard LOCKUP on cpu 3", "soft_lockup", lockup="hard", cpu="3")
    # the panic that follows it (nmi_panic) is the node's panic
    _check("Kernel panic - not syncing: Hard LOCKUP", "kernel_panic")


def test_linux_banner_needs_user_at_host() -> None:
    # init/version.c linux_banner: "Linux version %s (%s@%s) (%s) %s"
    _check("Linux version 6.8.0-45-generic (buildd@lcy02-amd64-007) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) "
           "13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #45-Ubuntu SMP PREEMPT_DYNAMIC", "kernel_boot",
           kernel="6.8.0-45-generic")
    _check("Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP", "kernel_boot")
    for line in ("Linux version x (31337) used greatest stack depth: 10744 bytes left",
                 "Linux version x (31337): attempted to duplicate a private mapping with mremap.  This is not supported."):
        assert _one(line)["kind"] != "kernel_boot", line


def test_mlx5_port_module_event_through_mlx5_core_err() -> None:
    # mlx5/core/events.c port_module: mlx5_core_err adds "%s:%d:(pid %d): " (function, line, task) after the device prefix
    _check("mlx5_core 0000:3b:00.0: port_module:271:(pid 0): Port module event[error]: module 1, Cable error, "
           "High Temperature", "ib_link_down", module="1", pci="0000:3b:00.0")


def test_nvrm_function_rules_want_a_function_name_longer_than_a_comm_can_spell() -> None:
    # "NVRM: " + a 9-character name is 15 bytes, what a process name can fill ahead of warn_alloc's ": page ..."
    for line in ("NVRM: knvlinkAB: page allocation failure: order:10, mode:0xcc0(GFP_KERNEL), nodemask=(null)",
                 "NVRM: kgspRpcXy: page allocation failure: order:10, mode:0xcc0(GFP_KERNEL), nodemask=(null),"
                 "cpuset=timeout,mems_allowed=0",
                 "NVRM: abcdefghi: page allocation failure: order:10, mode:0xcc0(GFP_KERNEL), nodemask=(null),"
                 "cpuset=may need to be reset,mems_allowed=0"):
        assert _one(line)["kind"] == "log", line
    _check("NVRM: GPU1 knvlinkCoreShutdownDeviceLinks_IMPL: Failed to shutdown links", "gpu_nvlink", gpu="1")
