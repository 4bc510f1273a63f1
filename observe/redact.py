"""Secrets out of captured text: environment variables whose names say secret, and values that look
like credentials wherever they appear (batch scripts, command lines, log lines).

The patterns are data (``redact.toml``); a site adds its own in a ``redact.toml`` under a directory
in ``$OBSERVE_RULES``. Redaction errs on the side of hiding: a git hash may be masked, a token never
kept.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

from observe.rules import rule_dirs

MASK = "[REDACTED]"
BUILTIN = Path(__file__).with_name("redact.toml")


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, re.Pattern, tuple[re.Pattern, ...]]:
    names, values = [], []
    for path in [BUILTIN, *(d / "redact.toml" for d in rule_dirs())]:
        if path.is_file():
            doc = tomllib.loads(path.read_text())
            names += doc.get("secret_names", [])
            values += doc.get("secret_values", [])
    name = "|".join(f"(?:{n})" for n in names)
    # NAME=value, NAME: value, --name value, --name=value where NAME says secret: the value is masked
    assign = (rf"(?i)(?P<key>(?:--?)?[\w.\-]*(?:{name})[\w.\-]*)(?P<sep>\s*[=:]\s*|\s+)"
              r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"';&|]+)")
    return re.compile(rf"(?i){name}"), re.compile(assign), tuple(re.compile(v) for v in values)


def secret_name(name: str) -> bool:
    """True for an environment variable or option name that says it holds a secret."""
    return bool(_patterns()[0].search(name))


def text(value: str) -> str:
    """``value`` with credential-looking values and ``NAME=secret`` assignments masked."""
    names, assign, values = _patterns()
    for pattern in values:
        value = pattern.sub(_mask_group, value)
    return assign.sub(lambda m: f"{m['key']}{m['sep']}{MASK}" if _is_secret_key(m["key"], m["sep"]) else m[0], value)


def env(variables: dict[str, str]) -> dict[str, str]:
    """An environment with every secret-named variable's value masked and the rest scrubbed by :func:`text`."""
    return {k: MASK if secret_name(k) else text(v) for k, v in variables.items()}


def _mask_group(m: re.Match) -> str:
    """Mask the pattern's ``secret`` group if it has one (keeping what frames it), else the whole match."""
    if "secret" in m.re.groupindex and m["secret"] is not None:
        start, end = m.span("secret")
        return m[0][:start - m.start()] + MASK + m[0][end - m.start():]
    return MASK


def _is_secret_key(key: str, sep: str) -> bool:
    # "--token abc" and "TOKEN=abc" are assignments; "my key is" in prose is not (no option dashes)
    return bool(sep.strip()) or key.startswith("-")
