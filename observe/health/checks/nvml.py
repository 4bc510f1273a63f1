"""nvml: what the driver knows about each GPU's health, through NVML (nvidia-ml-py):

- uncorrectable ECC errors (volatile: since the driver loaded; aggregate: lifetime),
- retired pages (double-bit and multiple single-bit causes) and retirements pending a reboot,
- row remapping (A100 and later): remaps pending a GPU reset, remapping failures (RMA),
- clock throttling for hardware reasons (HW slowdown, thermal, power brake),
- PCIe link width and generation against their maximum (generation only while the GPU is in P0:
  an idle GPU lowers its link speed on purpose).

Each finding carries the action NVIDIA's guidance implies: ``reset`` (a GPU reset clears it),
``drain`` (the node must not take jobs: hardware), or ``report``. A reading the GPU does not support
is left out, not failed.
"""
from __future__ import annotations

from observe.health.nvml_gpus import each_index, text
from observe.health.result import Result, Status, unknown

NAME = "nvml"
HW_THROTTLE = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
               0x80: "hw_power_brake_slowdown"}
SEVERITY = {"report": 0, "reset": 1, "reboot": 2, "drain": 3}


def run(opts: dict) -> Result:
    """FAIL when a GPU shows a finding whose action is not ``report``; the action is the gravest one."""
    gpus = each_index(NAME, read)
    if isinstance(gpus, Result):
        return gpus
    if not gpus:
        return unknown(NAME, "NVML shows no GPUs")
    findings = [f for gpu in gpus for f in judge(gpu, opts)]
    evidence = {"gpus": gpus, "findings": findings}
    acting = [f for f in findings if f["action"] != "report"]
    if not acting:
        notes = f"; {len(findings)} note(s): " + "; ".join(f["what"] for f in findings) if findings else ""
        return Result(NAME, Status.PASS, f"{len(gpus)} GPU(s) healthy{notes}", evidence)
    action = max((f["action"] for f in acting), key=SEVERITY.__getitem__)
    return Result(NAME, Status.FAIL, "; ".join(f"GPU {f['gpu']}: {f['what']}" for f in acting), evidence, action=action)


def read(nvml, index: int) -> dict:
    """One GPU's readings; ``None`` where the GPU does not support one, ``lost`` when it is gone."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    get = _Getter(nvml, handle)
    gpu = {"index": index, "name": get("nvmlDeviceGetName"), "uuid": get("nvmlDeviceGetUUID")}
    pci = get("nvmlDeviceGetPciInfo")
    gpu["pci"] = text(getattr(pci, "busId", None)) if pci is not None else None
    unc = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    gpu["ecc_volatile_uncorrected"] = get("nvmlDeviceGetTotalEccErrors", unc, nvml.NVML_VOLATILE_ECC)
    gpu["ecc_aggregate_uncorrected"] = get("nvmlDeviceGetTotalEccErrors", unc, nvml.NVML_AGGREGATE_ECC)
    dbe = get("nvmlDeviceGetRetiredPages", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    sbe = get("nvmlDeviceGetRetiredPages", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    gpu["retired_pages"] = None if dbe is None and sbe is None else len(dbe or []) + len(sbe or [])
    gpu["retired_pending"] = get("nvmlDeviceGetRetiredPagesPendingStatus")
    rows = get("nvmlDeviceGetRemappedRows")
    gpu["remapped_rows"] = dict(zip(("correctable", "uncorrectable", "pending", "failed"), rows)) if rows else None
    gpu["throttle_reasons"] = get("nvmlDeviceGetCurrentClocksEventReasons")
    gpu["pstate"] = get("nvmlDeviceGetPerformanceState")
    gpu["pcie"] = {k: get(f) for k, f in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                                          ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                                          ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                                          ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"))}
    gpu["lost"] = get.lost
    gpu["errors"] = get.errors
    return {k: text(v) for k, v in gpu.items()}


def judge(gpu: dict, opts: dict) -> list[dict]:
    """Findings for one GPU's readings under the policy's thresholds."""
    out = []
    label = gpu.get("pci") or str(gpu.get("index"))

    def add(what: str, action: str) -> None:
        out.append({"gpu": label, "what": what, "action": action})

    if gpu.get("lost"):
        add("the GPU is lost (fell off the bus?)", "drain")
        return out
    volatile = gpu.get("ecc_volatile_uncorrected")
    if volatile is not None and volatile > int(opts["max_volatile_uncorrected"]):
        add(f"{volatile} uncorrectable ECC error(s) since the driver loaded", opts["on_volatile_uncorrected"])
    aggregate = gpu.get("ecc_aggregate_uncorrected")
    if aggregate and int(opts["max_aggregate_uncorrected"]) and aggregate > int(opts["max_aggregate_uncorrected"]):
        add(f"{aggregate} uncorrectable ECC errors in its lifetime", "drain")
    pages = gpu.get("retired_pages")
    if pages is not None and pages >= int(opts["max_retired_pages"]):
        add(f"{pages} retired pages (at the retirement limit: RMA)", "drain")
    if gpu.get("retired_pending"):
        add("page retirement pending (takes effect after a reboot or GPU reset)", opts["on_pending"])
    rows = gpu.get("remapped_rows") or {}
    if rows.get("failed"):
        add("row remapping failed (RMA)", "drain")
    elif rows.get("pending"):
        add("row remap pending (a GPU reset applies it)", opts["on_pending"])
    reasons = gpu.get("throttle_reasons") or 0
    failing = set(opts["throttle_fail"])
    for bit, name in HW_THROTTLE.items():
        if reasons & bit:
            add(f"clocks throttled: {name}", "drain" if name in failing else "report")
    pcie = gpu.get("pcie") or {}
    if pcie.get("width") and pcie.get("max_width") and pcie["width"] < pcie["max_width"]:
        add(f"PCIe link x{pcie['width']} of x{pcie['max_width']}", opts["on_pcie_degraded"])
    if pcie.get("gen") and pcie.get("max_gen") and pcie["gen"] < pcie["max_gen"]:
        if gpu.get("pstate") == 0:
            add(f"PCIe gen {pcie['gen']} of {pcie['max_gen']} under load (P0)", opts["on_pcie_degraded"])
    return out


class _Getter:
    """Calls NVML for one GPU: None for what it does not support, errors noted, a lost GPU flagged."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.lost = False
        self.errors: dict[str, str] = {}

    def __call__(self, fn: str, *args):
        call = getattr(self.nvml, fn, None)
        if call is None and fn == "nvmlDeviceGetCurrentClocksEventReasons":  # nvidia-ml-py before 12.535
            call = getattr(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if call is None:
            return None
        try:
            return call(self.handle, *args)
        except self.nvml.NVMLError_NotSupported:
            return None
        except self.nvml.NVMLError_GpuIsLost:
            self.lost = True
        except self.nvml.NVMLError as exc:
            self.errors[fn] = str(exc)
        return None
