"""Log text made safe to show on a terminal.

Users of the compute nodes write the logs observe shows, so a message, node or job name can hold
escape sequences (ESC [2J clears the screen, OSC 0;title BEL retitles the window, an 8-bit CSI
\\x9b does either), carriage returns and backspaces that overwrite what was printed, newlines that
forge rows, and bidi overrides (U+202E) that reorder what is read. Text outputs show these
characters escaped instead of obeying them; JSON keeps the exact text, CSV too but for a leading '
before cells a spreadsheet would run as formulas.
"""
from __future__ import annotations

import re

# C0 controls (tab and newline too: one row per line), DEL, C1 controls, the bidi marks, embeddings,
# overrides and isolates, and the Unicode line and paragraph separators
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    return SHORT.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str) -> str:
    """``text`` with every control, bidi and line-separator character shown as its escape
    (``\\x1b``, ``\\x9b``, ``\\r``, ``\\u202e``); other text, backslashes included, as it is.
    Applying it twice changes nothing more."""
    return UNSAFE.sub(_escaped, text)
