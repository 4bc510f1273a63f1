"""A stand-in for nvidia-ml-py's ``pynvml`` that answers from recorded readings (no GPU here).

``$OBSERVE_NVML_READINGS`` names a JSON file: ``{"init_error": null | "DriverNotLoaded", "gpus": [
{"nvmlDeviceGetName": "...", "nvmlDeviceGetTotalEccErrors(1,0)": 0, "nvmlDeviceGetRemappedRows":
[0, 0, 0, 0], "nvmlDeviceGetUUID": {"error": "NotSupported"}, "nvmlDeviceGetNvLinkState(0)": 1,
"nvmlDeviceGetGpuFabricInfoV": {"state": 3, "status": 0}, "nvmlDeviceGetComputeRunningProcesses":
[{"pid": 4242, "usedGpuMemory": 1048576}], ...}]}``: each key is an NVML call (with its arguments
after the first, the handle), each value what it returns (a fabric info's fields, a process's
attributes) or the error it raises. Only the calls observe makes are here; the constants are NVML's.
"""
from __future__ import annotations

import ctypes
import json
import os
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


class NVMLError_Unknown(NVMLError):  # noqa: N801
    pass


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    pass


class c_nvmlGpuFabricInfoV_t(ctypes.Structure):  # noqa: N801 - nvmlGpuFabricInfo_v2
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]


_ERRORS = {"NotSupported": NVMLError_NotSupported, "GpuIsLost": NVMLError_GpuIsLost,
           "DriverNotLoaded": NVMLError_DriverNotLoaded, "Unknown": NVMLError_Unknown,
           "InvalidArgument": NVMLError_InvalidArgument}
_state: dict = {}


def _readings() -> dict:
    with open(os.environ["OBSERVE_NVML_READINGS"]) as f:
        return json.load(f)


def nvmlInit() -> None:  # noqa: N802
    _state.clear()
    _state.update(_readings())
    if _state.get("init_error"):
        raise _ERRORS[_state["init_error"]](_state["init_error"])


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_state["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    return index


def _call(name: str, handle: int, *args):
    gpu = _state["gpus"][handle]
    key = f"{name}({','.join(str(a) for a in args)})" if args else name
    if key not in gpu:
        raise NVMLError_NotSupported(key)
    value = gpu[key]
    if isinstance(value, dict) and "error" in value:
        raise _ERRORS[value["error"]](value["error"])
    if name == "nvmlDeviceGetPciInfo":
        return SimpleNamespace(busId=value.encode())
    if name.endswith("RunningProcesses"):
        return [SimpleNamespace(**p) for p in value]
    return tuple(value) if name == "nvmlDeviceGetRemappedRows" else value


def nvmlDeviceGetGpuFabricInfoV(device, gpuFabricInfo) -> int:  # noqa: N802, N803
    """Fills the structure ``gpuFabricInfo`` points to (``ctypes.byref(c_nvmlGpuFabricInfoV_t())``)."""
    for field, value in _call("nvmlDeviceGetGpuFabricInfoV", device).items():
        setattr(gpuFabricInfo._obj, field, value)
    return NVML_SUCCESS


def __getattr__(name: str):
    if name.startswith("nvmlDevice"):
        return lambda handle, *args: _call(name, handle, *args)
    raise AttributeError(name)
