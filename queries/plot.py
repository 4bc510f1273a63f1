"""A job's failure as a self-contained HTML page: one lane per node, one mark per event (SVG, no
scripts, no network), the root cause ringed; hovering a mark shows the event."""
from __future__ import annotations

from datetime import datetime
from html import escape

from queries.causes import load_causes
from queries.explain import Explanation

COLOURS = {"gpu": "#d62728", "network": "#1f77b4", "memory": "#9467bd", "node": "#8c564b",
           "software": "#ff7f0e", "user": "#2ca02c", "unknown": "#7f7f7f"}
LANE, LEFT, WIDTH = 28, 120, 1000


def timeline_html(e: Explanation, categories: dict[str, str] | None = None) -> str:
    """The per-node timeline around the failure (``categories`` maps kinds to colour groups)."""
    categories = categories or {c.kind: c.category for c in load_causes().causes.values() if not c.attrs}
    rows = [t for t in e.timeline if t["ts"] is not None]
    lanes = sorted({t["node"] or "(job)" for t in rows} | set(e.nodes))
    title = f"job {e.job_id}: {e.state or ''}"
    if not rows:
        return _page(title, "<p>No timed events around this job.</p>")
    lo, hi = min(t["ts"] for t in rows), max(t["ts"] for t in rows)
    span = max((hi - lo).total_seconds(), 1.0)

    def x(ts: datetime) -> float:
        return LEFT + (ts - lo).total_seconds() / span * WIDTH

    height = LANE * (len(lanes) + 2)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 40}" height="{height}" '
             'font-family="sans-serif" font-size="12">']
    for i, lane in enumerate(lanes):
        y = LANE * (i + 1)
        parts.append(f'<text x="4" y="{y + 4}">{escape(lane)}</text>'
                     f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + WIDTH}" y2="{y}" stroke="#ddd"/>')
    root = e.root_cause or {}
    for t in rows:
        y = LANE * (lanes.index(t["node"] or "(job)") + 1)
        colour = COLOURS.get(categories.get(t["kind"], "unknown"), COLOURS["unknown"])
        tip = escape(f"{t['ts']:%Y-%m-%d %H:%M:%S} {t['node'] or '-'} {t['kind']} x{t['count']}: {t['message']}")
        parts.append(f'<circle cx="{x(t["ts"]):.1f}" cy="{y}" r="5" fill="{colour}"><title>{tip}</title></circle>')
        if root and t["kind"] == root.get("kind") and t["node"] == root.get("node") and t["ts"] == root.get("ts"):
            parts.append(f'<circle cx="{x(t["ts"]):.1f}" cy="{y}" r="10" fill="none" stroke="black" stroke-width="2"/>')
    axis = LANE * (len(lanes) + 1)
    parts.append(f'<text x="{LEFT}" y="{axis}">{lo:%Y-%m-%d %H:%M:%S} UTC</text>'
                 f'<text x="{LEFT + WIDTH}" y="{axis}" text-anchor="end">{hi:%Y-%m-%d %H:%M:%S} UTC</text></svg>')
    legend = " ".join(f'<span style="color:{c}">&#9679; {escape(k)}</span>' for k, c in COLOURS.items())
    verdict = (f"<p><b>Root cause:</b> {escape(str(root.get('node')))} {escape(str(root.get('kind')))} "
               f"{escape(str(root.get('code') or ''))} ({escape(str(root.get('category')))}, confidence "
               f"{root.get('confidence')}) &mdash; {escape(str(root.get('action')))}</p>") if root else ""
    return _page(title, verdict + "".join(parts) + f"<p>{legend}</p>")


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title></head>"
            f"<body><h3>{escape(title)}</h3>{body}</body></html>\n")
