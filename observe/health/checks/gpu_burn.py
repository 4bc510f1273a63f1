"""gpu_burn: sustained matmuls on every GPU, each result checked.

The same inputs go to every device. Each device's product is checked three ways:
- it has no NaN or Inf;
- it equals that device's first product (the same kernel on the same data must give the same bits);
- rows of it match a float64 reference computed on the CPU, within the dtype's rounding.
The same product is also compared across GPUs, and each GPU's TFLOPS against its peers' median
and an optional floor per GPU model. Without a GPU it runs on the CPU in fp32: the same code path,
tested in CI.
"""
from __future__ import annotations

import math
import time

from observe.health.result import Result, Status, unknown

NAME = "gpu_burn"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
EPS = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "fp32": 2.0 ** -24}
REF_ROWS = 16  # rows checked against the float64 reference


def run(opts: dict) -> Result:
    """Burn every device for ``opts['seconds']``; FAIL on a wrong result or a slow device."""
    try:
        import torch
    except ImportError:
        return unknown(NAME, "torch is not installed (pip install 'observe[health]')")
    devices = opts.get("devices") or _devices(torch, opts.get("device", "auto"))
    cpu = all(d == "cpu" for d in devices)
    dtype_name = "fp32" if cpu else opts["dtype"]
    if dtype_name not in DTYPES:
        return unknown(NAME, f"dtype {dtype_name!r}: use one of {', '.join(DTYPES)}")
    dtype = getattr(torch, DTYPES[dtype_name])
    n = int(opts["cpu_size"] if cpu else opts["size"])
    seconds = float(opts["seconds"])
    gen = torch.Generator().manual_seed(1234)
    a64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    b64 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    a, b = a64.to(dtype), b64.to(dtype)
    # the reference: the same (rounded) inputs multiplied exactly enough, for the first rows
    ref = a[:REF_ROWS].to(torch.float64) @ b.to(torch.float64)
    tol = 4 * EPS[dtype_name] * math.sqrt(n) * float(ref.abs().max()) + 1e-12
    per_device, first_rows, problems = {}, {}, []
    labels = devices if len(set(devices)) == len(devices) else [f"{d}#{i}" for i, d in enumerate(devices)]
    for label, dev in zip(labels, devices):
        stats = _burn(torch, dev, a, b, seconds / len(devices) if cpu else seconds, n)
        per_device[label] = {k: v for k, v in stats.items() if k != "rows"}
        first_rows[label] = stats["rows"]
        if stats["nonfinite"]:
            problems.append(f"{label}: NaN/Inf in {stats['nonfinite']} product(s)")
        if stats["mismatches"]:
            problems.append(f"{label}: {stats['mismatches']} product(s) differ from its first (silent corruption)")
        err = float((stats["rows"].to(torch.float64) - ref).abs().max())
        per_device[label]["max_error"] = err
        if not math.isfinite(err) or err > tol:
            problems.append(f"{label}: result off the float64 reference by {err:.3g} (tolerance {tol:.3g})")
    names = list(first_rows)
    for dev in names[1:]:
        diff = float((first_rows[dev].to(torch.float64) - first_rows[names[0]].to(torch.float64)).abs().max())
        if not math.isfinite(diff) or diff > tol:
            problems.append(f"{dev}: result differs from {names[0]} by {diff:.3g}")
    tflops = {d: s["tflops"] for d, s in per_device.items()}
    if len(tflops) > 1:
        median = sorted(tflops.values())[len(tflops) // 2]
        ratio = float(opts["min_peer_ratio"])
        problems += [f"{d}: {t:.1f} TFLOPS, below {ratio:.0%} of its peers' median {median:.1f}"
                     for d, t in tflops.items() if t < ratio * median]
    floors = opts.get("tflops_floor") or {}
    for d, s in per_device.items():
        floor = floors.get(s.get("model", ""))
        if floor and s["tflops"] < floor:
            problems.append(f"{d}: {s['tflops']:.1f} TFLOPS, below the floor {floor} for {s['model']}")
    evidence = {"dtype": dtype_name, "size": n, "seconds_per_device": seconds, "tolerance": tol, "devices": per_device}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    summary = ", ".join(f"{d} {t:.2f} TFLOPS" for d, t in tflops.items())
    return Result(NAME, Status.PASS, f"{len(devices)} device(s) correct: {summary}", evidence)


def _devices(torch, wanted: str) -> list[str]:
    if wanted != "cpu" and torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def _burn(torch, dev: str, a, b, seconds: float, n: int) -> dict:
    """Multiply on ``dev`` for about ``seconds``; count products with NaN/Inf and products unlike the
    first. Every product is checked, on the device and without waiting for it."""
    da, db = a.to(dev), b.to(dev)
    first = torch.matmul(da, db)
    nonfinite = (~torch.isfinite(first)).any().to(torch.int64)
    mismatches = torch.zeros((), dtype=torch.int64, device=dev)
    iters = 0
    _sync(torch, dev)
    start = time.perf_counter()
    while True:
        c = torch.matmul(da, db)
        nonfinite += (~torch.isfinite(c)).any()
        mismatches += (c != first).any()
        iters += 1
        if iters % 8 == 0 or dev == "cpu":
            _sync(torch, dev)
            if time.perf_counter() - start >= seconds:
                break
    elapsed = time.perf_counter() - start
    model = torch.cuda.get_device_name(dev) if dev.startswith("cuda") else "cpu"
    return {"iterations": iters, "seconds": elapsed, "tflops": 2 * n ** 3 * iters / elapsed / 1e12,
            "nonfinite": int(nonfinite), "mismatches": int(mismatches), "model": model, "rows": first[:REF_ROWS].cpu()}


def _sync(torch, dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize(dev)
