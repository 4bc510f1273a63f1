"""ib: InfiniBand port state and rate from ``/sys/class/infiniband/<dev>/ports/<n>/``, against the
ports and rate expected for this node's GPU model (``[ib.per_gpu_model]``, the model from
``/proc/driver/nvidia/gpus/*/information``), else the policy's ``expected_ports`` / ``min_rate_gbps``.

The files read are what ``ibstat`` prints, as the kernel writes them (torvalds/linux
drivers/infiniband/core/sysfs.c, 4.x-6.x): ``state`` "%d: %s" (DOWN, INIT, ARMED, ACTIVE,
ACTIVE_DEFER), ``phys_state`` "%d: %s" (Sleep, Polling, Disabled, PortConfigurationTraining,
LinkUp, LinkErrorRecovery, Phy Test), ``rate`` "%d%s Gb/sec (%dX%s)" (the ".5" of 2.5 Gb/s lanes
and the speed name, e.g. "400 Gb/sec (4X NDR)"), ``link_layer`` InfiniBand or Ethernet."""
from __future__ import annotations

import re
from pathlib import Path

from observe.health.result import Result, Status, unknown

NAME = "ib"


def run(opts: dict) -> Result:
    """FAIL when fewer ports are active than expected (no count: any port not ACTIVE / LinkUp), or an
    active one runs below the rate floor."""
    base = Path(opts.get("root", "/"))
    root = base / "sys/class/infiniband"
    ports = sorted(root.glob("*/ports/*")) if root.is_dir() else []
    if not ports:
        return unknown(NAME, f"no InfiniBand ports under {root}")
    model, expect = _expectation(base, opts.get("per_gpu_model") or {})
    floor = float(expect.get("rate_gbps", opts.get("min_rate_gbps")) or 0)
    want = int(expect.get("ports", opts.get("expected_ports")) or 0)
    seen, problems = [], []
    for port in ports:
        name = f"{port.parent.parent.name}/{port.name}"
        state, phys, rate = (_read(port / f) for f in ("state", "phys_state", "rate"))
        gbps = float(m.group(1)) if (m := re.match(r"\s*([\d.]+)\s*Gb/sec", rate)) else 0.0
        layer = _read(port / "link_layer") or "InfiniBand"
        seen.append({"port": name, "state": state, "phys_state": phys, "rate": rate, "link_layer": layer})
        active = state.endswith("ACTIVE") and phys.endswith("LinkUp")
        if not active and not want:
            problems.append(f"{name} {state or '?'} / {phys or '?'}")
        elif active and floor and gbps < floor:
            problems.append(f"{name} at {rate}, below {floor:g} Gb/s")
    active = [p for p in seen if p["state"].endswith("ACTIVE") and p["phys_state"].endswith("LinkUp")]
    if want and len(active) < want:
        down = [f"{p['port']} {p['state']}" for p in seen if p not in active]
        problems.insert(0, f"{len(active)} of {want} ports active ({', '.join(down)})")
    evidence = {"ports": seen, "gpu_model": model, "expected_ports": want, "min_rate_gbps": floor}
    applied = f" (expectation for {model}: {want or 'all'} ports active, {floor:g} Gb/s floor)" if model else ""
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems) + applied, evidence)
    rates = ", ".join(f"{p['port']} {p['rate']}" for p in active)
    return Result(NAME, Status.PASS, f"{len(active)} port(s) active: {rates}{applied}", evidence)


def _expectation(root: Path, per_model: dict) -> tuple[str, dict]:
    """The first GPU model on this node that ``per_model`` lists, and its entry; none: ("", {})."""
    for info in sorted(root.glob("proc/driver/nvidia/gpus/*/information")):
        m = re.search(r"^Model:\s*(.+?)\s*$", _read(info), re.MULTILINE)
        if m and m.group(1) in per_model:
            return m.group(1), per_model[m.group(1)]
    return "", {}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
