"""The health policy: built-in ``policy.toml`` merged with a site file."""
from __future__ import annotations

import tomllib
from pathlib import Path

from observe.config import read_toml

BUILTIN = Path(__file__).with_name("policy.toml")
ACTIONS = ("drain", "reset", "reboot", "report")
HOOKS = ("prolog", "epilog", "healthcheck")
# tables whose keys a site chooses (GPU models, fault kinds)
OPEN = ("tflops_floor", "per_gpu_model", "expected_links", "kinds", "recovery_action")


class PolicyError(ValueError):
    """A policy file is unreadable or names an unknown check, key or action."""


def load(site: str | Path | None = None) -> dict:
    """The policy: every check's section, a site file's keys replacing the built-in ones."""
    policy = tomllib.loads(BUILTIN.read_text())
    if site is not None:
        policy = _merge(policy, read_toml(site, PolicyError), str(site))
    from observe.health.runner import CHECKS

    for hook in HOOKS:
        unknown = [c for c in policy[hook]["checks"] if c not in CHECKS]
        if unknown:
            raise PolicyError(f"policy [{hook}] checks: unknown {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    for name, section in policy.items():
        for key, value in (section.items() if isinstance(section, dict) else ()):
            if key.startswith("on_") and value not in ACTIONS:
                raise PolicyError(f"policy [{name}]: {key} {value!r}: use one of {', '.join(ACTIONS)}")
    return policy


def _merge(base: dict, extra: dict, where: str, path: str = "") -> dict:
    out = dict(base)
    for key, value in extra.items():
        if key not in base:
            raise PolicyError(f"{where}: unknown policy key {path + key!r}")
        out[key] = _merge(base[key], value, where, f"{path}{key}.") if isinstance(value, dict) and key not in OPEN \
            else ({**base[key], **value} if key in OPEN else value)
    return out
