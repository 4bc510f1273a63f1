"""A healthy cluster's background lines (cron, systemd timers, ssh logins, exporters, the kernel's
martians, slurmctld's backfill...), described in noise.toml and drawn in bulk with numpy an hour at
a time for all hosts at once: the bulk of every file, at a cost that grows with the lines, not with
Python calls."""
from __future__ import annotations

import hashlib
import re
import tomllib
from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from observe.simulate.clock import HOUR, S, iso_strings
from observe.simulate.fleet import USERS, pid


@dataclass(frozen=True)
class Noise:
    """A background burst: lines (seconds after the burst starts, text with ``{field}``s) drawn
    ``rate`` times an hour at random, or every ``every`` seconds at ``at`` seconds past the period.
    ``fields`` draws spec-specific values (rng, n) -> array; the rest come from :func:`column`."""

    lines: tuple[tuple[float, str], ...]
    rate: float = 0.0
    every: int = 0
    at: int = 0
    fields: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = field(default_factory=dict)

    def times(self, rng: np.random.Generator, t0: int, t1: int, hosts: int, origin: int) -> tuple[np.ndarray, np.ndarray]:
        """Burst start times in [t0, t1) and the host of each, ordered by host, then time. A periodic burst
        keeps its phase from ``origin`` (the simulation's start): the same run started at another hour is
        the same logs, shifted."""
        if self.every:
            period, phase = self.every * S, self.at * S
            first = origin + -(-(t0 - origin - phase) // period) * period + phase
            base = np.arange(first, t1, period, dtype=np.int64)
            host = np.repeat(np.arange(hosts), len(base))
            return np.tile(base, hosts) + rng.integers(0, S // 2, len(host)), host
        host = np.repeat(np.arange(hosts), rng.poisson(self.rate * (t1 - t0) / HOUR, hosts))
        t = rng.integers(t0, t1, len(host))
        order = np.lexsort((t, host))
        return t[order], host[order]


def _draw(kind: str, low: int, high: int) -> Callable[[np.random.Generator, int], np.ndarray | list[str]]:
    """A ``fields`` entry of noise.toml: integers in [low, high), as numbers (``ints``) or hex (``hexes``)."""
    if kind == "ints":
        return lambda rng, n: rng.integers(low, high, n)
    return lambda rng, n: [f"{v:x}" for v in rng.integers(low, high, n).tolist()]


def _spec(entry: dict, shapes: dict) -> Noise:
    """One noise.toml entry: its lines (a cron job's, a systemd unit's, or its own), rate and fields."""
    if "cron" in entry:
        lines = tuple((offset, text.replace("{command}", entry["cron"])) for offset, text in shapes["cron"])
    elif "unit" in entry:
        took = entry.get("took", 1.5)
        lines = tuple((offset, text.replace("{unit}", entry["unit"]).replace("{description}", entry["description"]))
                      for offset, text in zip((0.0, took, took + 0.001), shapes["unit"]))
    else:
        lines = tuple((offset, text) for offset, text in entry["lines"])
    rate = entry["per_day"] / 24 if "per_day" in entry else entry.get("rate", 0.0)
    return Noise(lines, rate, entry.get("every", 0), entry.get("at", 0),
                 {name: _draw(*how) for name, how in entry.get("fields", {}).items()})


_SPECS = tomllib.loads(Path(__file__).with_name("noise.toml").read_text())
SYSLOG_NOISE, KERNEL_NOISE, CONTROLLER_NOISE = (tuple(_spec(e, _SPECS["shapes"]) for e in _SPECS[k])
                                                for k in ("syslog", "kernel", "controller"))
SSH_KEYS = {name: "SHA256:" + b64encode(hashlib.sha256(name.encode()).digest()).decode().rstrip("=")
            for name in ["root", *(u for u, _, _ in USERS)]}


@lru_cache(maxsize=None)
def _compile(template: str) -> tuple[str, tuple[str, ...]]:
    """``{name}`` template to a %-format and its field names, in order."""
    names = tuple(re.findall(r"\{(\w+)\}", template))
    return re.sub(r"\{\w+\}", "%s", template.replace("%", "%%")), names


class Hosts:
    """Hosts whose background noise is drawn together: per-host template constants and counters."""

    def __init__(self, consts: dict[str, list[str]], pid_base: list[int], session: list[int], origin: int) -> None:
        self.origin = origin  # the simulation's start: pids and periods count from it
        self.consts = {k: np.array(v, dtype=object) for k, v in consts.items()}
        self.pid_base = np.array(pid_base, dtype=np.int64)
        self.session = np.array(session, dtype=np.int64)
        self.n = len(pid_base)


def column(name: str, spec: Noise, hosts: Hosts, rng: np.random.Generator, t: np.ndarray, host: np.ndarray,
           cols: dict) -> list:
    """Values of field ``name`` for bursts at times ``t`` on ``host`` (``cols``: the bursts' other fields)."""
    n = len(t)
    if name in spec.fields:
        values = spec.fields[name](rng, n)
        return values.tolist() if isinstance(values, np.ndarray) else values
    if name in hosts.consts:
        return hosts.consts[name][host].tolist()
    if name in ("pid", "cpid"):
        p = pid(hosts.pid_base[host], t - hosts.origin) + rng.integers(0, 3, n)
        cols["pid"], cols["cpid"] = p.tolist(), (p + 1).tolist()
        return cols[name]
    if name == "session":  # numbered per host in time order
        within = np.arange(n) - np.searchsorted(host, host)
        values = hosts.session[host] + within + 1
        hosts.session += np.bincount(host, minlength=hosts.n)
        return values.tolist()
    if name in ("user", "uid", "key", "ip"):  # who logs in: mostly root from the admin host
        who = np.where(rng.random(n) < 0.8, -1, rng.integers(0, len(USERS), n)).tolist()
        cols["user"] = [USERS[w][0] if w >= 0 else "root" for w in who]
        cols["uid"] = [USERS[w][1] if w >= 0 else 0 for w in who]
        cols["key"] = [SSH_KEYS[u] for u in cols["user"]]
        cols["ip"] = ["10.1.0.5" if w >= 0 else "10.1.0.2" for w in who]
        return cols[name]
    if name == "port":
        return rng.integers(32768, 61000, n).tolist()
    if name == "usec":
        return rng.integers(150, 9000, n).tolist()
    if name == "iso":
        return [s + "Z" for s in iso_strings(t, "ms")]
    if name == "clock":
        return [s[11:] for s in iso_strings(t, "ms")]
    raise KeyError(f"no values for template field {name!r}")


def draw(specs: tuple[Noise, ...], hosts: Hosts, rng: np.random.Generator, t0: int, t1: int
         ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The bursts of ``specs`` on every host in [t0, t1): line times, hosts and texts."""
    times, where, texts = [], [], []
    for spec in specs:
        t, host = spec.times(rng, t0, t1, hosts.n, hosts.origin)
        if not len(t):
            continue
        cols: dict[str, list] = {}
        for offset, template in spec.lines:
            fmt, names = _compile(template)
            for name in names:
                if name not in cols:
                    cols[name] = column(name, spec, hosts, rng, t, host, cols)
            texts += [fmt % row for row in zip(*(cols[n] for n in names))] if names else [fmt] * len(t)
            times.append(t + int(offset * S))
            where.append(host)
    if not times:
        return np.empty(0, np.int64), np.empty(0, np.int64), []
    return np.concatenate(times), np.concatenate(where), texts
