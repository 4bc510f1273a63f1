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

from observe.config import rule_dirs

MASK = "[REDACTED]"
BUILTIN = Path(__file__).with_name("redact.toml")


# A secret-named key and its value: a key is a whole token (never a run's tail, so each token is
# tried once whatever follows it) holding a secret name; ``--name value`` needs the option dashes and
# a value on the same line (or after a ``\`` continuation) that is not another option, ``NAME=value``,
# ``NAME: value`` and JSON's ``"name": value`` an ``=`` or ``:`` (so prose's "my key is" is no
# assignment). An authentication scheme opening the value is kept (``Authorization: Bearer ...``).
# ``set -x`` quotes a whole assignment (``+ export 'PASS=a b'``): its value runs to that quote.
# Every run is possessive: the pattern takes time linear in the text.
ASSIGN = (r"(?i)(?<![\w.\-])(?P<q>')?+(?=[\w.\-]*?(?:{names}))"
          r"(?P<key>(?(q)[\w.\-]++=|(?:-[\w.\-]*+(?:[ \t]|\\\n)++(?!-)|[\w.\-]++[\"']?[ \t]*+[=:][ \t]*+))"
          r"(?:(?:{schemes})[ \t]++)?+)"
          r"(?P<val>(?(q)[^'\n]*+(?=')|(?:\"(?:[^\"\\\n]|\\.)*+\"|'[^'\n]*+'|[^\s\"';&|]++)))")


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, re.Pattern, tuple[re.Pattern, ...]]:
    lists: dict[str, list[str]] = {"secret_names": [], "auth_schemes": [], "secret_values": []}
    for path in [BUILTIN, *(d / "redact.toml" for d in rule_dirs())]:
        if path.is_file():
            doc = tomllib.loads(path.read_text())
            for key, entries in lists.items():
                entries += doc.get(key, [])
    name, schemes = ("|".join(f"(?:{n})" for n in lists[key]) for key in ("secret_names", "auth_schemes"))
    return (re.compile(rf"(?i){name}"), re.compile(ASSIGN.format(names=name, schemes=schemes)),
            tuple(re.compile(v) for v in lists["secret_values"]))


def secret_name(name: str) -> bool:
    """True for an environment variable or option name that says it holds a secret."""
    return bool(_patterns()[0].search(name))


def text(value: str) -> str:
    """``value`` with credential-looking values and ``NAME=secret`` assignments masked (a quoted
    value keeps its quotes, so a JSON document or a shell line stays one)."""
    _, assign, values = _patterns()
    for pattern in values:
        value = pattern.sub(_mask_group, value)
    return assign.sub(_mask_value, value)


def env(variables: dict[str, str]) -> dict[str, str]:
    """An environment with every secret-named variable's value masked and the rest scrubbed by :func:`text`."""
    return {k: MASK if secret_name(k) else text(v) for k, v in variables.items()}


def _mask_group(m: re.Match) -> str:
    """Mask the pattern's ``secret`` group if it has one (keeping what frames it), else the whole match."""
    if "secret" in m.re.groupindex and m["secret"] is not None:
        start, end = m.span("secret")
        return m[0][:start - m.start()] + MASK + m[0][end - m.start():]
    return MASK


def _mask_value(m: re.Match) -> str:
    """The key as written, then the value masked inside its quotes if it had any."""
    quote = m["val"][:1] if m["val"][:1] in ("\"", "'") and not m["q"] else ""
    return f"{m['q'] or ''}{m['key']}{quote}{MASK}{quote}"
