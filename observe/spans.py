"""Times and spans as users give them (``--since 2h``, ``window = "30m"`` in a policy, an ISO time):
parsed once here for every command, policy and check."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_span(text: str) -> timedelta:
    """A span like ``90s``, ``30m``, ``2h``, ``7d`` or ``1w``."""
    m = RELATIVE.match(text.strip())
    if not m:
        raise ValueError(f"bad span {text!r}: use a number and a unit, like 90s, 30m, 2h, 7d")
    return timedelta(**{UNITS[m.group(2)]: float(m.group(1))})


def parse_time(text: str, now: datetime | None = None, tz: str = "UTC") -> datetime:
    """An ISO time (in ``tz`` unless it says otherwise) or a relative one like ``2h``/``7d`` (before now)."""
    now = now or datetime.now(timezone.utc)
    if RELATIVE.match(text.strip()):
        return now - parse_span(text)
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"bad time {text!r}: use ISO 8601 (2026-11-22T10:00) or a span like 30m, 2h, 7d") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=ZoneInfo(tz))
