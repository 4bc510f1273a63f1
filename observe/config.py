"""Where observe's data files live and how they are read and written: the built-in rule directory and
the site's (``OBSERVE_RULES``), TOML read with a one-line error, compact JSON out."""
from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "collectors" / "rules"


def rule_dirs() -> list[Path]:
    """Built-in rules first, then directories listed in ``OBSERVE_RULES`` (os.pathsep separated)."""
    extra = [Path(p) for p in os.environ.get("OBSERVE_RULES", "").split(os.pathsep) if p]
    return [BUILTIN_DIR, *extra]


def read_toml(path: str | Path, error: type[Exception]) -> dict:
    """A TOML file as a dict; ``error`` with a one-line message naming the file when it cannot be read."""
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise error(f"{path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: {exc}") from None


def to_json(value: object) -> str:
    """Compact JSON (shared by collectors that build ``attrs`` from Python values)."""
    return json.dumps(value, separators=(",", ":"), default=str)
