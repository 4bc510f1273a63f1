"""NVML for the checks that read every GPU through it (nvidia-ml-py): each GPU's readings, or why
NVML cannot be read at all (an UNKNOWN result)."""
from __future__ import annotations

from collections.abc import Callable

from observe.health.result import Result, unknown


def each_index(check: str, read: Callable[[object, int], dict]) -> list[dict] | Result:
    """``read(pynvml, index)`` for each GPU, in one NVML session. UNKNOWN without nvidia-ml-py or a driver."""
    try:
        import pynvml
    except ImportError:
        return unknown(check, "nvidia-ml-py is not installed (pip install 'observe[health]')")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return unknown(check, f"NVML is not available: {exc}")
    try:
        return [read(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def each_gpu(check: str, read: Callable[[object, object], dict]) -> list[dict] | Result:
    """``read(pynvml, handle)`` merged into each GPU's index, name and PCI bus id; an NVML error on one
    GPU becomes its ``error`` (that GPU could not be judged). UNKNOWN as :func:`each_index`."""
    return each_index(check, lambda nvml, index: _gpu(nvml, index, read))


def _gpu(nvml, index: int, read: Callable[[object, object], dict]) -> dict:
    gpu: dict = {"index": index}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu["name"] = text(nvml.nvmlDeviceGetName(handle))
        gpu["pci"] = text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        gpu.update(read(nvml, handle))
    except nvml.NVMLError as exc:
        gpu["error"] = str(exc) or type(exc).__name__
    return gpu


def text(value):
    """NVML's strings: bytes in some nvidia-ml-py versions."""
    return value.decode() if isinstance(value, bytes) else value
