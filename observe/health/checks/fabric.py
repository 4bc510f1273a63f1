"""fabric: the NVLink fabric of NVSwitch systems (HGX H100/H200/B200), through NVML. Until Fabric
Manager has configured it, CUDA fails with "system not yet initialized"; a link that dropped
leaves the GPU slow or cut off from its peers. Per GPU: the fabric's state and status, and how many
NVLinks are active against ``[fabric.expected_links]`` for its model (a model not listed: every
link the GPU has). A GPU with no NVSwitch fabric (PCIe, NVLink bridge) is skipped.
"""
from __future__ import annotations

import ctypes

from observe.health.nvml_gpus import each_gpu
from observe.health.result import Result, Status, unknown

NAME = "fabric"
STATES = ("NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED")  # NVML_GPU_FABRIC_STATE_*, by value


def run(opts: dict) -> Result:
    """FAIL when a GPU's fabric is not configured (state not COMPLETED, or an error status), or fewer
    of its NVLinks are active than expected."""
    gpus = each_gpu(NAME, read)
    if isinstance(gpus, Result):
        return gpus
    if not gpus:
        return unknown(NAME, "NVML shows no GPUs")
    expected = opts.get("expected_links") or {}
    fabric = [g for g in gpus if g.get("fabric")]
    problems = [f"GPU {g['pci']}: {p}" for g in fabric for p in judge(g, expected.get(g["name"]))]
    unread = [f"GPU {g.get('pci') or g['index']}: {g['error']}" for g in gpus if "error" in g]
    evidence = {"gpus": gpus, "expected_links": expected}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    if unread:
        return unknown(NAME, "could not read " + "; ".join(unread), **evidence)
    if not fabric:
        return Result(NAME, Status.PASS, f"no NVSwitch fabric on the {len(gpus)} GPU(s) (PCIe or NVLink bridge): "
                      "nothing to check", evidence)
    active = sorted({g["links_active"] for g in fabric})
    return Result(NAME, Status.PASS, f"fabric configured on {len(fabric)} GPU(s), "
                  f"{'/'.join(map(str, active))} NVLinks active each", evidence)


def read(nvml, handle) -> dict:
    """The GPU's fabric state and status and its NVLinks; ``fabric`` None when it has no NVSwitch fabric."""
    versioned = hasattr(nvml, "c_nvmlGpuFabricInfoV_t")  # nvidia-ml-py 12.550 and later
    info = nvml.c_nvmlGpuFabricInfoV_t() if versioned else nvml.c_nvmlGpuFabricInfo_t()
    call = nvml.nvmlDeviceGetGpuFabricInfoV if versioned else nvml.nvmlDeviceGetGpuFabricInfo
    try:
        call(handle, ctypes.byref(info))
    except nvml.NVMLError_NotSupported:
        return {"fabric": None}
    if info.state == nvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return {"fabric": None}
    links = {}
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            links[link] = nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            continue  # the GPU has no such link
    return {"fabric": {"state": STATES[info.state] if info.state < len(STATES) else str(info.state),
                       "status": info.status, "clique": info.cliqueId},
            "links_active": sum(links.values()), "links_down": [n for n, up in links.items() if not up]}


def judge(gpu: dict, expected: int | None) -> list[str]:
    """What is wrong with one GPU's fabric; ``expected`` NVLinks active (None: every link it has)."""
    out = []
    fabric = gpu["fabric"]
    if fabric["state"] != "COMPLETED":
        out.append(f"fabric {fabric['state']} (Fabric Manager has not configured it: is nvidia-fabricmanager running?)")
    elif fabric["status"]:
        out.append(f"fabric COMPLETED with error status {fabric['status']} (NVML return code)")
    active, down = gpu["links_active"], gpu["links_down"]
    want = int(expected) if expected else active + len(down)
    if active < want:
        out.append(f"{active} of {want} NVLinks active" + (f" (down: {', '.join(map(str, down))})" if down else ""))
    return out
