"""The simulation's clock and the stamps the logs print.

Time is integer microseconds since the Unix epoch: events order exactly, and every stamp a file
prints (Slurm's, syslog's, Python logging's, glog's, dmesg's seconds since boot) is computed from
that one integer, so a line's stamp and the ground truth's time cannot disagree.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

S = 1_000_000  # a second
MINUTE = 60 * S
HOUR = 60 * MINUTE
DAY = 24 * HOUR
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
UPTIME = "[%5d.%06d]"  # the kernel's seconds since boot, as dmesg prints them


def micros(dt: datetime) -> int:
    """A datetime (naive means UTC) as the clock's integer."""
    dt = dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    return (dt - EPOCH) // timedelta(microseconds=1)


def utc(t: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(t))


def iso(t: int) -> str:
    """``2026-11-22T10:00:00`` (Slurm's second-resolution stamps)."""
    return utc(t).strftime("%Y-%m-%dT%H:%M:%S")


def glog(t: int) -> str:
    """PyTorch's glog stamp ``1122 10:33:05.123456789`` (nanoseconds from the microseconds)."""
    d = utc(t)
    return f"{d:%m%d %H:%M:%S}.{d.microsecond:06d}{t * 7919 % 1000:03d}"


def c10(t: int) -> str:
    """c10's glog-like stamp as PyTorch 2.x prints it: ``626 06:24:44.903881913`` (month unpadded)."""
    d = utc(t)
    return f"{d.month}{d:%d %H:%M:%S}.{d.microsecond:06d}{t * 7919 % 1000:03d}"


def iso_strings(t: np.ndarray, unit: str) -> list[str]:
    """ISO 8601 strings of times, to ``unit`` (``s``, ``ms``)."""
    return np.datetime_as_string(np.asarray(t, dtype=np.int64).astype("datetime64[us]"), unit=unit).tolist()


_SYSLOG_DAYS: dict[str, str] = {}


def syslog_stamps(t: np.ndarray) -> list[str]:
    """``Nov 22 10:00:01`` (RFC 3164, day space-padded) for each time."""
    out = []
    for s in iso_strings(t, "s"):
        day = _SYSLOG_DAYS.get(s[:10])
        if day is None:
            day = _SYSLOG_DAYS[s[:10]] = datetime.strptime(s[:10], "%Y-%m-%d").strftime("%b ") + f"{int(s[8:10]):>2} "
        out.append(day + s[11:])
    return out


def py_stamps(t: np.ndarray) -> list[str]:
    """Python logging's ``2026-11-22 10:00:10,123`` for each time."""
    return [s.replace("T", " ").replace(".", ",") for s in iso_strings(t, "ms")]


def py_stamp(t: int) -> str:
    return py_stamps(np.array([t]))[0]
