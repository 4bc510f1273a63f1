"""A job's failure as a self-contained HTML page: one lane per node, one mark per event (SVG, no
scripts, no network), the root cause ringed; hovering a mark shows the event.

Every text on the page (node names, messages, the job's fields) is log text users write: it is
shown with its control characters escaped (:func:`observe.printable.printable`, as on a terminal)
and then HTML-escaped."""
from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from observe.printable import printable
from queries.causes import load_causes
from queries.explain import Explanation

COLOURS = {"gpu": "#d62728", "network": "#1f77b4", "memory": "#9467bd", "node": "#8c564b",
           "software": "#ff7f0e", "user": "#2ca02c", "unknown": "#7f7f7f"}
LANE, LEFT, WIDTH = 28, 120, 1000


BEFORE, AFTER = timedelta(minutes=15), timedelta(minutes=5)  # the window drawn around the onset


def timeline_html(e: Explanation, categories: dict[str, str] | None = None) -> str:
    """The per-node timeline of the window around the failure's onset (its first symptom): from
    ``BEFORE`` it (or the root cause, when that came less than an hour earlier) to ``AFTER`` it.
    Events outside are counted, not drawn; a root cause from longer ago (a node's past fault) is
    marked at the left edge with how long before it was. ``categories`` maps kinds to colour groups."""
    categories = categories or {c.kind: c.category for c in load_causes().causes.values() if not c.attrs}
    timed = [t for t in e.timeline if t["ts"] is not None]
    title = f"job {e.job_id}: {e.state or ''}"
    if not timed:
        return _page(title, "<p>No timed events around this job.</p>")
    root = e.root_cause or {}
    onset = e.onset or max(t["ts"] for t in timed)
    lo, hi = onset - BEFORE, onset + AFTER
    if root.get("ts") and onset - timedelta(hours=1) <= root["ts"] < lo:
        lo = root["ts"] - timedelta(minutes=1)
    rows = [t for t in timed if lo <= t["ts"] <= hi]
    lanes = sorted({t["node"] or "(job)" for t in rows} | set(e.nodes) | ({root["node"]} if root.get("node") else set()))
    span = max((hi - lo).total_seconds(), 1.0)

    def x(ts: datetime) -> float:
        return LEFT + (ts - lo).total_seconds() / span * WIDTH

    height = LANE * (len(lanes) + 2)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 40}" height="{height}" '
             'font-family="sans-serif" font-size="12">']
    for i, lane in enumerate(lanes):
        y = LANE * (i + 1)
        parts.append(f'<text x="4" y="{y + 4}">{_text(lane)}</text>'
                     f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + WIDTH}" y2="{y}" stroke="#ddd"/>')
    for t in rows:
        y = LANE * (lanes.index(t["node"] or "(job)") + 1)
        colour = COLOURS.get(categories.get(t["kind"], "unknown"), COLOURS["unknown"])
        tip = _text(f"{t['ts']:%Y-%m-%d %H:%M:%S} {t['node'] or '-'} {t['kind']} x{t['count']}: {t['message']}")
        parts.append(f'<circle cx="{x(t["ts"]):.1f}" cy="{y}" r="5" fill="{colour}"><title>{tip}</title></circle>')
        if root and t["kind"] == root.get("kind") and t["node"] == root.get("node") and t["ts"] == root.get("ts"):
            parts.append(f'<circle cx="{x(t["ts"]):.1f}" cy="{y}" r="10" fill="none" stroke="black" stroke-width="2"/>')
    if root.get("ts") and root["ts"] < lo and root.get("node") in lanes:  # a past fault: at the edge, with its age
        y = LANE * (lanes.index(root["node"]) + 1)
        ago = onset - root["ts"]
        parts.append(f'<text x="{LEFT - 4}" y="{y + 16}" text-anchor="end" font-weight="bold">&#171; root cause '
                     f'{_text(_age(ago))} before<title>{_text(root.get("message"))}</title></text>')
    axis = LANE * (len(lanes) + 1)
    parts.append(f'<text x="{LEFT}" y="{axis}">{lo:%Y-%m-%d %H:%M:%S} UTC</text>'
                 f'<text x="{LEFT + WIDTH}" y="{axis}" text-anchor="end">{hi:%Y-%m-%d %H:%M:%S} UTC</text></svg>')
    legend = " ".join(f'<span style="color:{c}">&#9679; {_text(k)}</span>' for k, c in COLOURS.items())
    verdict = (f"<p><b>Root cause:</b> {_text(root.get('node'))} {_text(root.get('kind'))} "
               f"{_text(root.get('code') or '')} ({_text(root.get('category'))}, confidence "
               f"{root.get('confidence')}) &mdash; {_text(root.get('action'))}</p>") if root else ""
    outside = len(timed) - len(rows)
    note = (f"<p>{outside} more event(s) of the timeline outside this window (observe explain lists them).</p>"
            if outside else "")
    return _page(title, verdict + "".join(parts) + f"<p>{legend}</p>" + note)


def _text(value: object) -> str:
    """``value`` as HTML text: control and bidi characters shown escaped, then ``<&>"'`` as entities."""
    return escape(printable(str(value)))


def _age(d: timedelta) -> str:
    minutes = int(d.total_seconds() // 60)
    return f"{minutes // 1440}d {minutes % 1440 // 60}h" if minutes >= 1440 else f"{minutes // 60}h {minutes % 60:02d}m"


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_text(title)}</title></head>"
            f"<body><h3>{_text(title)}</h3>{body}</body></html>\n")
