"""ib: InfiniBand port state and rate from ``/sys/class/infiniband/<dev>/ports/<n>/``."""
from __future__ import annotations

import re
from pathlib import Path

from observe.health.result import Result, Status, unknown

NAME = "ib"


def run(opts: dict) -> Result:
    """FAIL when a port is not ACTIVE / LinkUp, or runs below ``min_rate_gbps``."""
    root = Path(opts.get("root", "/")) / "sys/class/infiniband"
    ports = sorted(root.glob("*/ports/*")) if root.is_dir() else []
    if not ports:
        return unknown(NAME, f"no InfiniBand ports under {root}")
    floor = float(opts.get("min_rate_gbps") or 0)
    want = int(opts.get("expected_ports") or 0)
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
    evidence = {"ports": seen}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    return Result(NAME, Status.PASS, f"{len(active)} port(s) active: " + ", ".join(f"{p['port']} {p['rate']}" for p in active),
                  evidence)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
