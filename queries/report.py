"""An explanation as text: the verdict first, then the candidates with their evidence, then the
timeline (what ``observe explain`` prints)."""
from __future__ import annotations

from datetime import datetime

from queries.explain import Explanation
from observe.hostlists import compact_nodes
from queries.search import first_line

def report(e: Explanation) -> list[str]:
    """The explanation as text lines: verdict first, then candidates, then the evidence timeline."""
    def when(ts: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
        return ts.strftime(fmt) if ts else "-"

    nodes = compact_nodes(e.nodes) if e.nodes else "-"
    lines = [f"job {e.job_id}  {e.state or 'state unknown'}  exit {e.exit_code or '-'}  "
             f"{len(e.nodes)} node(s) {nodes}  {when(e.start)} -> {when(e.end)} UTC", ""]
    r = e.root_cause
    if r is None and (e.state or "").startswith("COMPLETED"):
        lines.append("ROOT CAUSE  none: the job completed (candidates below are context only)")
    elif r is None and e.unclassified:
        lines.append(f"ROOT CAUSE  unclassified: no catalogued event explains it; {len(e.unclassified)} kind(s) of error "
                     "or warning line on its nodes and in its output, below, are the evidence to read")
    elif r is None:
        lines.append("ROOT CAUSE  none found: no error or warning line on the job's nodes or in its output in the "
                     "window read")
    else:
        if r["verdict"] == "undetermined" and (r.get("symptom") or r.get("context")):
            lines.append(f"UNDETERMINED  no cause established, only symptoms or background: {r['confidence']:.2f} probable "
                         "that the cause left no line in the store; the likeliest line, then the candidates:")
        elif r["verdict"] == "undetermined":
            lines.append(f"UNDETERMINED  the likeliest cause is only {r['confidence']:.2f} probable: the evidence is weak "
                         "or points several ways; it, then the candidates:")
        what = r["kind"] + (f" {r['code']}" if r["code"] is not None else "")
        where = r["node"] or ("(what the nodes share)" if r.get("shared") else "(job output)")
        gpu = f"  GPU {r['gpu']}" if r["gpu"] else ""
        rank = f"  rank {r['rank']}" if r["rank"] is not None else ""
        head = "LIKELIEST " if r["verdict"] == "undetermined" else "ROOT CAUSE"
        sure = f"probability {r['probability']:.2f}" if r["verdict"] == "undetermined" else f"confidence {r['confidence']:.2f}"
        lines += [f"{head}  {where}{gpu}{rank}  {what}  category {r['category']}  {sure}",
                  f"  {when(r['ts'])}  {_bounded(first_line(r['message']))}",
                  f"  action: {r['action']}  (for the node: {r['node_action']})"]
        if r["node_action"] == "verify" and not r.get("trusted"):
            lines.append("  unconfirmed: the lines came through a route users can write (a syslog file, job output); "
                         "confirm on the node with an active check (observe health check) before acting on it")
    if e.node_fault:
        f = e.node_fault
        what = f["kind"] + (f" {f['code']}" if f["code"] is not None else "")
        lines += [f"NODE FAULT  {f['node']}  {what}  {f['confidence']:.2f} probable that the fault is real, on lines no "
                  "user can write: the node is taken out for it, whatever else failed the job",
                  f"  {when(f['ts'])}  {_bounded(first_line(f['message']))}",
                  f"  action: {f['action']}  (for the node: {f['node_action']})"]
    lines += [f"MISSING     {m}" for m in e.missing]
    if e.candidates:
        lines += ["", "CANDIDATES", f"  {'prob':>5}  {'node':10} {'kind':26} {'code':>5}  {'first seen':19}  {'count':>5}  message"]
        for c in _fold_symptoms(e.candidates):
            code = "" if c["code"] is None else str(c["code"])
            lines.append(f"  {c['probability']:5.2f}  {c['node'] or '-':10} {c['kind']:26} {code:>5}  {when(c['ts']):19}  "
                         f"{c['count']:5d}  {first_line(c['message'])[:100]}")
            if c.get("evidence"):
                lines.append(f"         why: {'; '.join(c['evidence'])}")
    if e.unclassified and (r is None or r["verdict"] == "undetermined"):
        lines += ["", "UNCLASSIFIED (error or warning lines no rule names, first seen first)"]
        for u in e.unclassified:
            where = compact_nodes(u["nodes"]) if u["nodes"] else "(job output)"
            lines.append(f"  {when(u['ts'], '%m-%d %H:%M:%S')}  {where:10} {u['source'] or '-':7} x{u['count']:<5} "
                         f"{first_line(u['message'])[:110]}")
    if e.timeline:
        lines += ["", "TIMELINE (UTC; ~ a line without a time of its own, printed after then)"]
        for t in e.timeline:
            code = f" {t['code']}" if t["code"] is not None else ""
            many = f"  x{t['count']}" + (f" ({t['ranks']} ranks)" if t["ranks"] > 1 else "") if t["count"] > 1 else ""
            lines.append(f"  {when(t['ts'], '%m-%d %H:%M:%S')}{'~' if t.get('approx') else ' '} {t['node'] or '-':10} {t['source']:7} "
                         f"{t['kind'] + code:28}{many}  {(t['message'] or '')[:110]}")
    return lines


def _fold_symptoms(candidates: list[dict]) -> list[dict]:
    """One row per symptom kind (what every rank reports), its nodes as a hostlist; causes as they are."""
    out: list[dict] = []
    folded: dict[str, dict] = {}
    for c in candidates:
        if not c.get("symptom") or c["node"] is None:
            out.append(c)
        elif c["kind"] in folded:
            row = folded[c["kind"]]
            row["_nodes"].append(c["node"])
            row["count"] += c["count"]
            row["ts"] = min(t for t in (row["ts"], c["ts"]) if t is not None) if row["ts"] or c["ts"] else None
        else:
            folded[c["kind"]] = row = {**c, "_nodes": [c["node"]]}
            out.append(row)
    for row in folded.values():
        nodes = row.pop("_nodes")
        row["node"] = compact_nodes(nodes) if len(nodes) > 1 else nodes[0]
    return out


def _bounded(text: str, most: int = 400) -> str:
    """``text`` cut to ``most`` characters, saying how many more there were: a line a job printed can be megabytes."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text) - most} more characters)"
