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
LISTS = ("secret_names", "auth_schemes", "scheme_keys", "secret_values")

# Pieces of a value. Each alternative is told apart from the others by its first character and every
# run is possessive, so a value is read once, left to right.
_DQ = r'"(?:[^"\\\n]|\\.)*+"'                   # a quoted string on one line
_SQ = r"'[^'\n]*+'"
_ANSI = r"\$'(?:[^'\\\n]|\\.)*+'"               # bash's $'...'
_ESC = r"\\[\s\S]?"                              # a \-escaped character (a\ b), or a lone \ at the end
# a quote opening a value: it may span lines (shell, TOML and Python strings do; TOML's and Python's
# triple quotes first), and one that no later quote closes (a script cut at SCRIPT_MAX, a typo) runs to
# its line's end. Only the text's last quote of a kind can fail to close, so a scan that fails is
# made once.
_OPEN = "|".join([r'"""(?:[^"]|"(?!""))*+"""', r"'''(?:[^']|'(?!''))*+'''",
                  r"\$'(?:[^'\\]|\\[\s\S]?)*+'", r'"(?:[^"\\]|\\[\s\S]?)*+"', r"'[^']*+'",
                  r"\$?+[\"'][^\n]*+"])
_PIECE = "|".join([_ANSI, _DQ, _SQ, _ESC])
# a shell word after `=`: its pieces run on (ab"cd", a\ b, $'a b'); after a quoted opening an
# unquoted `,` `)` `}` `]` ends it (a Python call's or a literal's next item)
_WORD = (rf"(?:(?:{_OPEN})(?:{_PIECE}|[^\s\"'\\;&|,)}}\]])*+"
         rf"|(?:{_ESC}|[^\s\"'\\;&|])(?:{_PIECE}|[^\s\"'\\;&|])*+)")

# A secret-named key and its value: a key is a whole token (never a run's tail, so each token is
# tried once whatever follows it) holding a secret name; ``--name value`` needs the option dashes and
# a value on the same line (or after a ``\`` continuation) that is not another option; ``NAME=value``
# (and ``+=``, ``?=``, ``:=``, ``=>``) a shell word; ``NAME: value``, JSON's ``"name": value`` and a
# subscript's ``env["NAME"] = value`` need their ``=`` or ``:`` (so prose's "my key is" is no
# assignment). An authentication scheme opening the value is kept (``Authorization: Bearer ...``),
# and after a header of scheme_keys any scheme word is (``Authorization: Splunk ...``: letters, then
# dashed parts, as SCRAM-SHA-256; a word with digits in its first part is a credential). A quote around
# the whole assignment (``set -x``'s ``+ export 'PASS=a b'``, a script's ``export "PASS=a b"``) ends
# its value. Every run is possessive: the pattern takes time linear in the text; names are looked for
# only in a token shaped like a key (an option before a blank, a token before its separator).
ASSIGN = (r"(?i)(?<![\w.\-])(?:(?P<sq>')|(?P<dq>\"))?+"
          r"(?=-[\w.\-]*+(?:[ \t]|\\\n)|[\w.\-]++[\"']?+\]?+[ \t]*+(?:[+?:]?+=|:))(?=[\w.\-]*?(?:{names}))"
          r"(?P<key>(?(sq)[\w.\-]++=|(?(dq)[\w.\-]++=|"
          r"(?:-[\w.\-]*+(?:[ \t]|\\\n)++(?!-)|(?P<hdr>(?=(?:{scheme_keys})[\"']?+[ \t]*+:))?+"
          r"[\w.\-]++[\"']?+\]?+[ \t]*+(?:(?P<eq>[+?:]?+=>?+|=>)|:)[ \t]*+)))"
          r"(?:(?(hdr)(?:{schemes}|[a-z]++(?:-[a-z0-9]++)*+)|(?:{schemes}))[ \t]++(?=[^\s\"']))?+)"
          r"(?P<val>(?(sq)[^'\n]*+(?=')|(?(dq)(?:[^\"\\\n]|\\.)*+(?=\")|"
          r"(?(eq)" + _WORD + "|(?:" + _DQ + "|" + _SQ + r"|[^\s\"';&|]++)))))")
# YAML's secret-named key with its value on the lines below (``password:``, ``password: |``, in a
# heredoc writing a config file): the lines after it indented deeper than the key are masked. The key
# starts a line, so each line is tried once (and for names only when shaped like a key); the value's
# lines share its first line's indent.
_BLOCK_KEY = r"[\w.\-]++[\"']?+[ \t]*+:[ \t]*+(?:[|>][1-9+\-]{0,2}+[ \t]*+)?+(?:#[^\n]*+)?+\n"
BLOCK = (r"(?im)^(?P<key>(?P<ind>[ \t]*+)(?:-[ \t]++)?+[\"']?+(?=" + _BLOCK_KEY + r")(?=[\w.\-]*?(?:{names}))"
         + _BLOCK_KEY + r"(?P<deep>(?P=ind)[ \t]++))"
         r"(?P<val>\S[^\n]*+(?:\n(?P=deep)[^\n]*+)*+)")


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, tuple[re.Pattern, ...], tuple[re.Pattern, ...]]:
    lists: dict[str, list[str]] = {key: [] for key in LISTS}
    for path in [BUILTIN, *(d / "redact.toml" for d in rule_dirs())]:
        if path.is_file():
            doc = tomllib.loads(path.read_text())
            for key, entries in lists.items():
                entries += doc.get(key, [])
    names, schemes, scheme_keys = ("|".join(f"(?:{n})" for n in lists[key]) or "(?!)" for key in LISTS[:3])
    def fill(pattern: str) -> re.Pattern:
        return re.compile(pattern.replace("{names}", names).replace("{schemes}", schemes)
                          .replace("{scheme_keys}", scheme_keys))
    return (re.compile(rf"(?i){names}"), (fill(BLOCK), fill(ASSIGN)),
            tuple(re.compile(v) for v in lists["secret_values"]))


def secret_name(name: str) -> bool:
    """True for an environment variable or option name that says it holds a secret."""
    return bool(_patterns()[0].search(name))


def text(value: str) -> str:
    """``value`` with credential-looking values and ``NAME=secret`` assignments masked (a quoted
    value keeps its quotes, so a JSON document or a shell line stays one)."""
    _, assigns, values = _patterns()
    for pattern in values:
        value = pattern.sub(_mask_group, value)
    for pattern in assigns:
        value = pattern.sub(_mask_value, value)
    return value


def env(variables: dict[str, str]) -> dict[str, str]:
    """An environment with every secret-named variable's value masked and the rest scrubbed by :func:`text`."""
    return {k: MASK if secret_name(k) else text(v) for k, v in variables.items()}


_SEPARATOR = re.compile(r"[ \t]*+[=:][ \t]*+")


def _mask_group(m: re.Match) -> str:
    """Mask the pattern's ``secret`` group if it has one (keeping what frames it), else the whole match.
    A mask covers a value, never the ``=`` or ``:`` before it: were it to, the key would be left with
    no separator and the value beyond the mask in clear, so a secret that is only a separator masks
    nothing (the assignment rules then read ``key = value`` whole)."""
    if "secret" in m.re.groupindex and m["secret"] is not None:
        start, end = m.span("secret")
        if separator := _SEPARATOR.match(m.string, start, end):
            start = separator.end()
        if start == end:
            return m[0]
        return m[0][:start - m.start()] + MASK + m[0][end - m.start():]
    return MASK


def _mask_value(m: re.Match) -> str:
    """The key as written, then the value masked inside its quotes if it had any (a value that only
    opens a quote keeps that)."""
    groups = m.groupdict()
    val, outer = groups["val"], groups.get("sq") or groups.get("dq") or ""
    lead = "" if outer else "$'" if val.startswith("$'") else val[:1] if val[:1] in ("\"", "'") else ""
    close = lead[-1] if lead and len(val) > len(lead) and val.endswith(lead[-1]) else ""
    return f"{outer}{m['key']}{lead}{MASK}{close}"
