"""Field accuracy: how often observe's parsers get right what real log lines hold, per log family
and per field, against labels a person wrote by reading the lines (tests/fixtures/corpus/LABELS.md).

    python bench/field_accuracy.py                    # every set: dev, tune and heldout
    python bench/field_accuracy.py --set dev          # real/: the lines the rules were first written from
    python bench/field_accuracy.py --set extra        # extra/ and extra2/: more lines collected to tune on
    python bench/field_accuracy.py --set tune         # heldout/, half its threads: tuned on since
    python bench/field_accuracy.py --set heldout      # heldout/, the other half: never tuned on

The sets: dev is tests/fixtures/corpus/real, extra and extra2 are tests/fixtures/corpus/extra and
extra2 (collected to tune on, from threads in none of the others); heldout/ (collected later from other public threads) is
split by source thread (observe.simulate.real_lines.halves: within each file, every other thread): half 0 is
the tune set, which parsers may be fixed against, half 1 the heldout set, which nothing is tuned on
and whose figure is the one to believe.
    python bench/field_accuracy.py --misses           # also every wrong field: file:line, field, expected, got
    python bench/field_accuracy.py --json             # the same figures as one JSON object

Each corpus file is parsed as ``observe ingest --source S`` would read it from a root-owned file
(route system_file), S being the collector a site configures for it: kernel-side files (xid,
ib_pcie, oom, nvrm, aer_edac, ib) ``kernel``, nccl and torch ``nccl``, slurm ``slurm``, syslog
``syslog``. The reference time is fixed (2026-11-01 UTC) so that yearless stamps resolve the same
way every run. A corpus file without a labels file is skipped (and listed); a labels file whose
``text`` differs from the corpus line is refused (labels out of date: exit status 2).

How a line is scored:
- a ``start`` label is matched to the event at that line's byte offset. Its fields are ``kind``,
  ``message`` and every key of ``fields``; each is right or a miss. No event there ("record split
  wrong": the line was joined to the record above) is a miss on every one of them.
- a ``continuation`` label is right when no event starts at that line (it was joined to its record).
- ``kind``: the event's kind (``log`` for an ordinary line; ``unparsed`` is never right).
  ``message``: the first line of the event's message (labels describe one line each).
  ``time``: ``ts`` against the printed time, taken as UTC (what observe assumes for a stamp without a
  zone) unless the line prints an offset (``+02:00``, ``-0500``, ``Z``), then converted; a label
  without a year is compared on month, day and time, one with only a time on the time; microseconds,
  the label's fraction truncated. A stamp observe clamped as future (``attrs.ts_claimed``) counts as
  what the parser read. ``uptime``: ``attrs.uptime`` within 1e-6. ``code``, ``pid``, ``rank``,
  ``seq``, ``timeout_ms``, ``port``: integers. Everything else (``gpu``, ``node``, ``program``,
  ``job_id``, and attrs ``pci``, ``op``, ``aer``, ``process``, ``peer``, ``device``): as text.
- a labelled field the event lacks is a miss; a field the event has and the label omits is not counted.

Prints, per set: a row per family (the label's ``family``: which emitter printed the line) with its
lines, starts found, continuations joined, fields checked, fields right and accuracy; then a row per
field; then the set's overall accuracy.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from observe.collector import Context  # noqa: E402
from observe.ingest import parse_bytes, sample_of  # noqa: E402
from observe.printable import printable  # noqa: E402
from observe.simulate.real_lines import halves, sources  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "corpus"
SETS = {"dev": ("real", None), "extra": ("extra", None), "extra2": ("extra2", None), "tune": ("heldout", 0),
        "heldout": ("heldout", 1)}  # set: its folder under CORPUS, and which half of it (None: all)
# The collector a site configures for each corpus file (by file stem)
SOURCE = {"xid": "kernel", "ib_pcie": "kernel", "oom": "kernel", "nvrm": "kernel", "aer_edac": "kernel",
          "ib": "kernel", "nccl": "nccl", "torch": "nccl", "slurm": "slurm", "syslog": "syslog"}
REFERENCE = datetime(2026, 11, 1, tzinfo=timezone.utc)
ROUTE = "system_file"

COLUMNS = ("kind", "code", "gpu", "pid", "rank", "node", "program", "job_id", "message")
INTEGERS = {"code", "pid", "rank", "seq", "timeout_ms", "port"}
STAMP = re.compile(r"^(?:(?:(\d{4})-)?(\d{2})-(\d{2}) )?(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$")
# A line that starts with a stamp of its own (dmesg, syslog, ISO 8601): labelled ``continuation``, it
# goes against LABELS.md's one-record-per-header convention (counted and shown, not rescored)
OWN_STAMP = re.compile(r"^(?:\s*(?:<\d+>)?\[\s*\+?\d+\.\d{6}\]|[^\W\d_]{3,5}\.? [ \d]\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)")


class StaleLabels(Exception):
    """A labels file that no longer describes its corpus file (or is not valid JSON lines)."""


@dataclass
class Line:
    number: int  # 1-based
    offset: int  # byte offset of its first byte in the file
    text: str


@dataclass
class Result:
    """Every check of one or more files: ``checks`` (one row per labelled field of a start line),
    ``records`` (one row per labelled line: was it a record start or joined as labelled),
    ``skipped`` (what was not scored, and why) and ``notes`` (partial labels)."""

    checks: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: Result) -> None:
        self.checks += other.checks
        self.records += other.records
        self.skipped += other.skipped
        self.notes += other.notes


def lines_of(data: bytes) -> list[Line]:
    """The file's lines (split on newline only) with their byte offsets."""
    out, offset = [], 0
    for number, raw in enumerate(data.split(b"\n"), 1):
        out.append(Line(number, offset, raw.decode("utf-8", "replace")))
        offset += len(raw) + 1
    if out and out[-1].text == "" and data.endswith(b"\n"):
        out.pop()  # the empty piece after the last newline
    return out


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load_labels(labels: Path, lines: list[Line], root: Path = CORPUS) -> list[dict]:
    """The labels of ``labels`` in line order; StaleLabels when one does not match its corpus line."""
    out, seen = [], set()
    for i, text in enumerate(labels.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        where = f"{_shown(labels, root)} line {i}"
        try:
            label = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StaleLabels(f"{where}: not JSON ({exc.msg})") from None
        n = label.get("line")
        if not isinstance(n, int) or not 1 <= n <= len(lines):
            raise StaleLabels(f"{where}: corpus line {n!r} does not exist (the file has {len(lines)} lines)")
        if n in seen:
            raise StaleLabels(f"{where}: corpus line {n} is labelled twice")
        seen.add(n)
        if label.get("text") != lines[n - 1].text:
            raise StaleLabels(f"{where}: text differs from corpus line {n}")
        if label.get("record") not in ("start", "continuation"):
            raise StaleLabels(f"{where}: record is {label.get('record')!r}, not start or continuation")
        out.append(label)
    return sorted(out, key=lambda lab: lab["line"])


def parse(data: bytes, source: str) -> pl.DataFrame:
    """Events of a file's bytes as ingest makes them with collector ``source`` (one parse unit)."""
    sample = sample_of(data[: 64 * 1024])
    ctx = Context(reference_time=REFERENCE, tz="UTC", header=sample[0] if sample else None, route=ROUTE)
    return parse_bytes(data, source, ctx)


def _offset(text: str, clock: str) -> timedelta | None:
    """The UTC offset printed right after ``clock`` (HH:MM:SS) in ``text``, if any."""
    m = re.search(re.escape(clock) + r"(?:[.,]\d+)?\s?(Z|[+-]\d{2}:?\d{2})(?![\d:])", text)
    if not m:
        return None
    if m.group(1) == "Z":
        return timedelta(0)
    sign = -1 if m.group(1)[0] == "-" else 1
    digits = m.group(1)[1:].replace(":", "")
    return sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))


def time_right(expected: str, got: datetime | None, text: str) -> bool:
    """Whether ``got`` (UTC) is the time label ``expected`` (as printed in ``text``) means."""
    m = STAMP.match(str(expected).strip())
    if not m or got is None:
        return False
    year, month, day, hh, mm, ss, frac = m.groups()
    micro = int((frac or "")[:6].ljust(6, "0"))
    got = got.astimezone(timezone.utc).replace(tzinfo=None)
    # a yearless label takes the parsed year (a leap year for a time alone: any day exists)
    label = datetime(int(year) if year else (got.year if month else 2000), int(month or 1), int(day or 1),
                     int(hh), int(mm), int(ss), micro)
    offset = _offset(text, f"{hh}:{mm}:{ss}")
    if offset is not None:
        label -= offset
    if year:
        return got == label
    if month:
        return (got.month, got.day, got.time()) == (label.month, label.day, label.time())
    return got.time() == label.time()


def _stamp(ts: datetime | None, expected: str) -> str | None:
    """``ts`` written the way the label writes its time (for the list of misses)."""
    if ts is None:
        return None
    m = STAMP.match(str(expected).strip())
    fmt = "%Y-%m-%d %H:%M:%S" if not m or m.group(1) else "%m-%d %H:%M:%S" if m.group(2) else "%H:%M:%S"
    out = ts.astimezone(timezone.utc).strftime(fmt)
    return out + (f".{ts.microsecond:06d}" if ts.microsecond else "")


def got_value(event: dict, attrs: dict, name: str):
    """What the event holds for label field ``name`` (None: it holds nothing)."""
    if name == "time":
        claimed = attrs.get("ts_claimed")  # clamped as future by policy: the parser read this
        return datetime.fromisoformat(claimed) if claimed else event["ts"]
    if name == "message":
        return None if event["message"] is None else event["message"].split("\n", 1)[0]
    if name in COLUMNS:
        return event[name]
    return attrs.get(name)


def right(name: str, expected, got, text: str) -> bool:
    if got is None:
        return False
    if name == "kind":
        return got != "unparsed" and got == expected
    if name == "time":
        return time_right(expected, got, text)
    if name == "uptime":
        try:
            return abs(float(got) - float(expected)) <= 1e-6
        except (TypeError, ValueError):
            return False
    if name in INTEGERS:
        try:
            return int(str(got).strip()) == int(str(expected).strip())
        except ValueError:
            return str(got) == str(expected)
    return str(got) == str(expected)


def score_file(path: Path, labels_path: Path, source: str, set_name: str = "dev", root: Path = CORPUS,
               keep: set[int] | None = None) -> Result:
    """Every check of one corpus file against its labels (StaleLabels when they are out of date),
    of the lines numbered in ``keep`` (all when None)."""
    data = path.read_bytes()
    lines = lines_of(data)
    labels = load_labels(labels_path, lines, root)
    res = Result()
    nonblank = sum(1 for line in lines if line.text.strip())
    if keep is not None:
        labels = [label for label in labels if label["line"] in keep]
    elif len(labels) < nonblank:
        res.notes.append(f"{_shown(path, root)}: {len(labels)} of {nonblank} lines labelled (partial labels)")
    events = parse(data, source)
    by_offset = {row["offset"]: row for row in events.iter_rows(named=True)}
    shown = _shown(path, root)
    for label in labels:
        line = lines[label["line"] - 1]
        event = by_offset.get(line.offset)
        where = {"set": set_name, "file": shown, "line": line.number, "family": label.get("family") or "?"}
        start = label["record"] == "start"
        res.records.append({**where, "record": label["record"], "right": (event is not None) == start,
                            "stamped": not start and OWN_STAMP.match(line.text) is not None})
        if not start:
            continue
        attrs = json.loads(event["attrs"]) if event is not None and event["attrs"] else {}
        wanted = {"kind": label.get("kind"), **(label.get("fields") or {}), "message": label.get("message")}
        for name, expected in wanted.items():
            if expected is None:
                continue
            got = got_value(event, attrs, name) if event is not None else None
            ok = event is not None and right(name, expected, got, line.text)
            if name == "time" and isinstance(got, datetime):
                got = _stamp(got, expected)
            res.checks.append({**where, "field": name, "expected": expected, "got": got, "right": ok,
                               "why": None if event is not None else "record split wrong"})
    return res


def evaluate(sets: list[str], root: Path = CORPUS) -> Result:
    """Every check of the named sets' labelled corpus files under ``root``."""
    res = Result()
    for set_name in sets:
        name, half = SETS[set_name]
        folder = root / name
        if not folder.is_dir():
            res.skipped.append(f"{set_name}: {_shown(folder, root)}/ does not exist")
            continue
        threads, split = sources(folder), halves(folder)
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix != ".md")
        stems = {p.stem for p in files}
        for path in files:
            labels = folder / "labels" / f"{path.stem}.jsonl"
            if not labels.exists():
                res.skipped.append(f"{set_name}: {_shown(path, root)} (no labels)")
            elif path.stem not in SOURCE:
                res.skipped.append(f"{set_name}: {_shown(path, root)} (no collector known for it)")
            else:
                keep = None if half is None else {int(at.rsplit(":", 1)[1]) for at, thread in threads.items()
                                                  if at.rsplit(":", 1)[0] == path.stem and split[thread] == half}
                res.add(score_file(path, labels, SOURCE[path.stem], set_name, root, keep))
        for labels in sorted((folder / "labels").glob("*.jsonl")):
            if labels.stem not in stems:
                res.skipped.append(f"{set_name}: {_shown(labels, root)} (no corpus file {labels.stem}.*)")
    return res


def _acc(right: int, checked: int) -> float | None:
    return round(100 * right / checked, 1) if checked else None


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return pl.DataFrame([{k: r[k] for k in schema} for r in rows], schema=schema)


def summary(res: Result) -> dict:
    """Per set: per family, per field and overall counts (what the table and --json show)."""
    checks = _frame(res.checks, {"set": pl.String, "family": pl.String, "field": pl.String, "right": pl.Boolean})
    recs = _frame(res.records, {"set": pl.String, "family": pl.String, "record": pl.String, "right": pl.Boolean,
                                "stamped": pl.Boolean})
    start, cont = pl.col("record") == "start", pl.col("record") == "continuation"
    fams = recs.group_by("set", "family").agg(
        pl.len().alias("lines"),
        start.sum().alias("starts"),
        (start & pl.col("right")).sum().alias("starts_found"),
        cont.sum().alias("continuations"),
        (cont & pl.col("right")).sum().alias("joined_right"),
        pl.col("stamped").sum().alias("stamped_continuations"),
        (pl.col("stamped") & ~pl.col("right")).sum().alias("stamped_started"),
    ).join(checks.group_by("set", "family").agg(pl.len().alias("checked"), pl.col("right").sum().alias("right")),
           on=["set", "family"], how="left").fill_null(0).sort("set", "family")
    fields = checks.group_by("set", "field").agg(pl.len().alias("checked"), pl.col("right").sum().alias("right")) \
        .sort("set", "field")
    out = {}
    for set_name in fams.get_column("set").unique(maintain_order=True).to_list():
        f = fams.filter(pl.col("set") == set_name)
        rows = [{**r, "accuracy": _acc(r["right"], r["checked"])} for r in f.drop("set").iter_rows(named=True)]
        total = {k: int(f.get_column(k).sum()) for k in f.columns if k not in ("set", "family")}
        out[set_name] = {
            "families": rows,
            "fields": [{**r, "accuracy": _acc(r["right"], r["checked"])}
                       for r in fields.filter(pl.col("set") == set_name).drop("set").iter_rows(named=True)],
            "overall": {**total, "accuracy": _acc(total["right"], total["checked"])},
        }
    return out


def misses(res: Result) -> list[dict]:
    """Every wrong field and every wrongly joined line, in file order."""
    wrong = [{k: c[k] for k in ("set", "file", "line", "family", "field", "expected", "got", "why")}
             for c in res.checks if not c["right"]]
    wrong += [{"set": r["set"], "file": r["file"], "line": r["line"], "family": r["family"], "field": "record",
               "expected": "continuation", "got": "start", "why": "started an event of its own"}
              for r in res.records if r["record"] == "continuation" and not r["right"]]
    return sorted(wrong, key=lambda m: (m["set"], m["file"], m["line"]))


def common(wrong: list[dict], n: int = 20) -> list[dict]:
    """The ``n`` most common kinds of miss: family, field and how (absent, different, the record
    split wrong; for ``kind`` and ``record`` also what was expected and got), with a count and the
    first line it happened on."""
    groups: dict[tuple, list[dict]] = {}
    for m in wrong:
        how = m["why"] or ("absent" if m["got"] is None else "different")
        what = f"{m['expected']} -> {m['got']}" if m["field"] in ("kind", "record") and not m["why"] else ""
        groups.setdefault((m["family"], m["field"], how, what), []).append(m)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:n]
    return [{"family": f, "field": fld, "how": how, "what": what, "count": len(ms),
             "first": f"{ms[0]['file']}:{ms[0]['line']}"} for (f, fld, how, what), ms in ranked]


def _pct(a: float | None) -> str:
    return "-" if a is None else f"{a:.1f}%"


def table(summ: dict) -> list[str]:
    out = []
    for set_name, s in summ.items():
        out.append(f"{set_name}")
        out.append(f"  {'family':10} {'lines':>6} {'starts':>9} {'joined':>9} {'checked':>8} {'right':>6} {'accuracy':>9}")
        for r in s["families"] + [{"family": "all", **s["overall"]}]:
            out.append(f"  {printable(r['family']):10} {r['lines']:>6} {r['starts_found']:>4}/{r['starts']:<4} "
                       f"{r['joined_right']:>4}/{r['continuations']:<4} {r['checked']:>8} {r['right']:>6} "
                       f"{_pct(r['accuracy']):>9}")
        out.append(f"  {'field':10} {'checked':>8} {'right':>6} {'accuracy':>9}")
        for r in s["fields"]:
            out.append(f"  {printable(r['field']):10} {r['checked']:>8} {r['right']:>6} {_pct(r['accuracy']):>9}")
        o = s["overall"]
        out.append(f"  overall: {o['right']}/{o['checked']} fields right ({_pct(o['accuracy'])}), "
                   f"{o['starts_found']}/{o['starts']} record starts found, "
                   f"{o['joined_right']}/{o['continuations']} continuation lines joined")
        if o["stamped_continuations"]:
            out.append(f"  {o['stamped_continuations']} lines labelled continuation carry a stamp of their own, against "
                       f"LABELS.md's one record per header; {o['stamped_started']} of them are among the misses")
        out.append("")
    return out


def _text(v) -> str:
    return "(none)" if v is None else printable(json.dumps(v, ensure_ascii=False) if isinstance(v, str) else str(v))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=[*SETS, "all"], default="all", help="which labelled set (default all)")
    ap.add_argument("--misses", action="store_true", help="list every wrong field: file:line, field, expected, got")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sets = list(SETS) if args.set == "all" else [args.set]
    try:
        res = evaluate(sets, args.corpus)
    except StaleLabels as exc:
        print(f"field_accuracy: labels out of date: {printable(str(exc))}", file=sys.stderr)
        return 2
    summ = summary(res)
    if args.json:
        doc = {"sets": summ, "skipped": res.skipped, "notes": res.notes}
        if args.misses:
            doc["misses"] = misses(res)
            doc["common_misses"] = common(doc["misses"])
        print(json.dumps(doc, indent=1, ensure_ascii=False, default=str))
        return 0
    for s in res.skipped:
        print(f"skipped {printable(s)}")
    for n in res.notes:
        print(f"note: {printable(n)}")
    if res.skipped or res.notes:
        print()
    if not summ:
        print("no labelled corpus file")
    print("\n".join(table(summ)).rstrip())
    if args.misses:
        wrong = misses(res)
        print(f"\n{len(wrong)} misses")
        for m in wrong:
            why = f"  ({m['why']})" if m["why"] else ""
            print(f"  {printable(m['file'])}:{m['line']}  {m['field']}: expected {_text(m['expected'])}, "
                  f"got {_text(m['got'])}{why}")
        if wrong:
            print("\nmost common misses")
            print(f"  {'count':>5}  {'family':8} {'field':10} {'how':28} first")
            for c in common(wrong):
                what = f"  {printable(c['what'])}" if c["what"] else ""
                print(f"  {c['count']:>5}  {printable(c['family']):8} {c['field']:10} {c['how']:28} {c['first']}{what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
