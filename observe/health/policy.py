"""The health policy: the built-in ``policy.toml`` merged with a site file, read into typed sections.

The hooks', drain and fault sections are dataclasses whose fields are the file's keys, with no
defaults here: a key the file lacks, or a value of the wrong type, is a :class:`PolicyError` when the
policy is loaded, not a surprise in a hook at 3 a.m. Each check's section stays the options mapping
its ``run(opts)`` takes (checks run in child processes and take JSON), checked against the built-in
keys. Spans (``"60s"``, ``"24h"``) are timedeltas once loaded.
"""
from __future__ import annotations

import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path

from observe.config import read_toml
from observe.health.checks import NAMES
from observe.spans import parse_span

BUILTIN = Path(__file__).with_name("policy.toml")
ACTIONS = ("drain", "reset", "reboot", "report")
HOOKS = ("prolog", "epilog", "healthcheck")
# tables whose keys a site chooses (GPU models, fault kinds)
CHECK_KEYS = ("category", "observe_only", "on_fail")  # in every check's section
OPEN = ("tflops_floor", "per_gpu_model", "expected_links", "kinds", "recovery_action")


class PolicyError(ValueError):
    """A policy file is unreadable, names an unknown check, key or action, or gives a value of the wrong type."""


@dataclass(frozen=True)
class Hook:
    """[prolog], [healthcheck]: the checks a hook runs and its time budget."""
    checks: tuple[str, ...]
    budget: timedelta


@dataclass(frozen=True)
class Epilog(Hook):
    """[epilog]: a hook that also captures the job, requeues it and explains its failure."""
    capture: bool
    max_requeues: int
    checkpoint_timeout: timedelta
    checkpoint_memory_mb: int
    explain: bool


@dataclass(frozen=True)
class Drain:
    """[drain]: the drain budget, the breaker, the re-check before a return, who drained a node."""
    reason_prefix: str
    max_fraction: float
    max_nodes: int
    max_per_hour: int
    budget_breaker: bool
    gpu_nodes_only: bool
    return_checks: tuple[str, ...]
    quarantine: bool
    bug_report_dir: str
    bug_report_command: str
    bug_report_timeout: timedelta
    owners: tuple[Mapping[str, str], ...]
    seen_days: int
    seen_late: timedelta


@dataclass(frozen=True)
class Faults:
    """[faults]: how fault lines become episodes and remedies."""
    dedup_window: timedelta
    repeat_window: timedelta
    repeat_count: int
    remediation_window: timedelta
    remediation_count: int
    app_repeat_count: int
    recovery: tuple[str, ...]
    observe_only: tuple[str, ...]
    ladder: tuple[str, ...]
    xid_remedy: Mapping[str, str]
    recovery_action: Mapping[str, str]
    kinds: Mapping[str, Mapping[str, typing.Any]]


@dataclass(frozen=True)
class Policy:
    """The whole policy. ``doc`` is the merged file, what a check's child process is handed."""
    version: str
    prolog: Hook
    epilog: Epilog
    healthcheck: Hook
    drain: Drain
    faults: Faults
    checks: Mapping[str, dict]
    doc: Mapping[str, typing.Any]

    def hook(self, name: str) -> Hook:
        return {"prolog": self.prolog, "epilog": self.epilog, "healthcheck": self.healthcheck}[name]


def load(site: str | Path | None = None) -> Policy:
    """The policy: every section, a site file's keys replacing the built-in ones."""
    doc = tomllib.loads(BUILTIN.read_text())
    if site is not None:
        doc = _merge(doc, read_toml(site, PolicyError), str(site))
    return from_doc(doc)


def from_doc(doc: Mapping[str, typing.Any]) -> Policy:
    """A merged policy document (``Policy.doc``, as a check's child process gets it) as a :class:`Policy`."""
    for check in NAMES:
        lacks = [k for k in CHECK_KEYS if k not in doc.get(check, {})]
        if lacks:
            raise PolicyError(f"policy [{check}]: missing {', '.join(lacks)} (every check has them)")
    for name, section in doc.items():
        for key, value in (section.items() if isinstance(section, dict) else ()):
            if key.startswith("on_") and value not in ACTIONS:
                raise PolicyError(f"policy [{name}]: {key} {value!r}: use one of {', '.join(ACTIONS)}")
    policy = Policy(version=_typed(str, doc.get("version"), "version"),
                    prolog=_section(Hook, doc, "prolog"), epilog=_section(Epilog, doc, "epilog"),
                    healthcheck=_section(Hook, doc, "healthcheck"), drain=_section(Drain, doc, "drain"),
                    faults=_section(Faults, doc, "faults"), checks={c: dict(doc[c]) for c in NAMES}, doc=doc)
    for hook in HOOKS:
        unknown = [c for c in policy.hook(hook).checks if c not in NAMES]
        if unknown:
            raise PolicyError(f"policy [{hook}] checks: unknown {', '.join(unknown)}; known: {', '.join(NAMES)}")
    return policy


def _section(cls: type, doc: Mapping[str, typing.Any], name: str):
    section = doc.get(name)
    if not isinstance(section, dict):
        raise PolicyError(f"policy: no [{name}] section")
    hints = typing.get_type_hints(cls)
    keys = {f.name for f in fields(cls)}
    if missing := sorted(keys - set(section)):
        raise PolicyError(f"policy [{name}]: missing {', '.join(missing)}")
    if extra := sorted(set(section) - keys):
        raise PolicyError(f"policy [{name}]: unknown key(s) {', '.join(extra)}")
    return cls(**{k: _typed(hints[k], section[k], f"[{name}] {k}") for k in keys})


def _typed(kind, value, where: str):
    """``value`` as ``kind`` (str, bool, int, float, timedelta, tuple[...], Mapping[...]), or a PolicyError."""
    origin = typing.get_origin(kind)
    if kind is timedelta:
        try:
            return parse_span(str(value))
        except ValueError as exc:
            raise PolicyError(f"policy {where}: {exc}") from None
    if origin is tuple and isinstance(value, list):
        return tuple(_typed(typing.get_args(kind)[0], v, where) for v in value)
    if origin in (Mapping, dict) and isinstance(value, dict):
        return dict(value)
    if kind is typing.Any:
        return value
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool), str: isinstance(value, str)}
    if ok.get(kind):
        return float(value) if kind is float else value
    what = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}.get(kind, "a list or table")
    raise PolicyError(f"policy {where}: {value!r} is not {what}")


def _merge(base: dict, extra: dict, where: str, path: str = "") -> dict:
    out = dict(base)
    for key, value in extra.items():
        if key not in base:
            raise PolicyError(f"{where}: unknown policy key {path + key!r}")
        out[key] = _merge(base[key], value, where, f"{path}{key}.") if isinstance(value, dict) and key not in OPEN \
            else ({**base[key], **value} if key in OPEN else value)
    return out
