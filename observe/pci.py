"""A GPU's PCI id as observe keeps it: ``dddd:bb:dd``, lower case, the domain's last four digits, no
function (``00000000:B1:00.0`` -> ``0000:b1:00``), whoever printed it (nvidia-smi's 8-digit domains,
the kernel's ``0000:b1:00.0``, the driver's ``PCI:0000:b1:00``). Defined once for every collector and check."""
from __future__ import annotations

import re

import polars as pl

# a bus id's domain, bus and device, anywhere in the text (its domain may have 4 to 8 digits)
BUS_ID = r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})"
_WHOLE = r"^[0-9a-f]*?([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$"
_ANY = re.compile(BUS_ID)


def gpu_id(bus_id: str | None) -> str | None:
    """The GPU id of the first bus id in ``bus_id``; None when it holds none."""
    m = _ANY.search(bus_id or "")
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}".lower() if m else None


def gpu_ids(expr: pl.Expr) -> pl.Expr:
    """``expr``'s bus ids as GPU ids (a value that is not one bus id is kept, lower-cased)."""
    return expr.str.to_lowercase().str.replace(_WHOLE, "${1}:${2}:${3}")
