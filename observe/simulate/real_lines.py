"""Real log records by what they hold, re-homed onto simulated nodes for the scenario generator.

Records come from a labelled corpus (``tests/fixtures/corpus/LABELS.md``): each is a start line and
its continuation lines, with the emitter family, the observe kind and the fields a person read in
it. Scenarios draw their incidents and their background from one set (the DEV lines while tuning,
the held-out lines when measuring), so accuracy can be reported on lines that nothing was tuned on.
A record is re-homed by dropping its header (the generator writes its own) and putting the
simulated device's PCI id, the simulated host and pid where the original ones were.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Headers a continuation line may carry before its text (its start line's header is known from
# its label): dmesg uptime or ctime brackets, journald/syslog ``Mon dd HH:MM:SS host kernel:``.
_HEADER = re.compile(r"^(?:\S+ +\d+ \d\d:\d\d:\d\d \S+ kernel: |\d{4}-\d\d-\d\dT\S+ \S+ kernel: )?(?:\[[^\]]*\] ?)?")
# PCI ids with a domain (0000:3b:00, 0000:3b:00.0) or a function (3b:00.0), not a clock's digits
_PCI = re.compile(r"(?<![0-9A-Fa-f:])(?:(?P<domain>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})"
                  r"(?P<fn>\.[0-7])?|(?P<bus2>[0-9A-Fa-f]{2}):(?P<dev2>[0-9A-Fa-f]{2})(?P<fn2>\.[0-7]))(?![0-9A-Fa-f:])")


@dataclass(frozen=True)
class Record:
    """One labelled record: ``texts`` the start line's message then its continuation lines' text."""

    where: str  # corpus file:line
    thread: str  # the public thread it was copied from
    family: str
    kind: str
    fields: dict
    texts: tuple[str, ...]


class RealLines:
    """The labelled records under some corpus directories (each with a ``labels/`` folder and
    ``SOURCES*.md`` tables naming each line range's source thread). ``half`` (0 or 1) keeps the
    records of half the threads (:func:`halves`): one half can tune what the other then measures."""

    def __init__(self, dirs: list[Path], half: int | None = None) -> None:
        self.records: list[Record] = []
        for d in dirs:
            threads, split = sources(Path(d)), halves(Path(d))
            for path in sorted(Path(d, "labels").glob("*.jsonl")):
                self.records += [r for r in _records(path, threads) if half is None or split.get(r.thread) == half]
        if not self.records:
            raise ValueError(f"no labelled records under {', '.join(map(str, dirs))}")

    def matching(self, kind: str, test=None, **fields) -> list[Record]:
        """Records of ``kind`` whose fields equal ``fields`` (and that pass ``test``, if given)."""
        return [r for r in self.records if r.kind == kind and all(r.fields.get(k) == v for k, v in fields.items())
                and (test is None or test(r))]

    def pick(self, rng: np.random.Generator, kind: str, test=None, **fields) -> Record | None:
        found = self.matching(kind, test, **fields)
        return found[int(rng.integers(len(found)))] if found else None


_RANGE = re.compile(r"^\| *(\d+)(?:[–-](\d+))? *\| *<?([^|>\s]+)>? *\|")


def sources(d: Path) -> dict[str, str]:
    """``stem:line`` -> the address of the thread the line came from, from the directory's
    ``SOURCES*.md`` tables (a ``## file.log`` heading, then ``| first–last | <url> | note |`` rows)."""
    out: dict[str, str] = {}
    for md in sorted(d.glob("SOURCES*.md")):
        stem = None
        for line in md.read_text().splitlines():
            if line.startswith("## "):
                stem = line[3:].split()[0].rsplit(".", 1)[0].strip("`")
            elif stem and (m := _RANGE.match(line)):
                for n in range(int(m[1]), int(m[2] or m[1]) + 1):
                    out[f"{stem}:{n}"] = m[3]
    return out


def halves(d: Path) -> dict[str, int]:
    """Each source thread of a corpus directory -> 0 or 1: within each corpus file, its threads in
    the order their lines come, every other one (a thread met in an earlier file keeps its half)."""
    out: dict[str, int] = {}
    by_file: dict[str, list[str]] = {}
    for at, thread in sources(d).items():
        stem, line = at.rsplit(":", 1)
        by_file.setdefault(stem, [])
        if thread not in by_file[stem]:
            by_file[stem].append(thread)
    for stem in sorted(by_file):
        new = [t for t in by_file[stem] if t not in out]
        out.update({t: i % 2 for i, t in enumerate(new)})
    return out


def _records(path: Path, threads: dict[str, str]) -> list[Record]:
    out: list[Record] = []
    start: dict | None = None
    texts: list[str] = []
    for line in path.read_text().splitlines():
        label = json.loads(line)
        if label["record"] == "start":
            if start:
                out.append(_record(path, start, texts, threads))
            start, texts = label, [label.get("message", label["text"])]
        elif start:
            texts.append(_HEADER.sub("", label["text"], count=1))
    if start:
        out.append(_record(path, start, texts, threads))
    return out


def _record(path: Path, label: dict, texts: list[str], threads: dict[str, str]) -> Record:
    at = f"{path.stem}:{label['line']}"
    return Record(f"{path.parent.parent.name}/{at}", threads.get(at, at), label["family"], label.get("kind", "log"),
                  label.get("fields", {}), tuple(texts))


def rehome(record: Record, pci: str | None = None, host: str | None = None, pid: int | None = None) -> list[str]:
    """The record's texts with the simulated device ``pci`` (``0000:3b:00``), ``host`` and ``pid``
    where the original ones were."""
    texts = list(record.texts)
    if pci:
        domain, bus, dev = pci.split(":")

        def swap(m: re.Match) -> str:
            if m["domain"]:
                return f"{domain.zfill(len(m['domain']))}:{bus}:{dev}{m['fn'] or ''}"
            return f"{bus}:{dev}{m['fn2']}"
        texts = [_PCI.sub(swap, t) for t in texts]
    old_host, old_pid = record.fields.get("node"), record.fields.get("pid")
    if host and old_host and len(str(old_host)) > 2:
        texts = [t.replace(str(old_host), host) for t in texts]
    if pid is not None and old_pid is not None:
        texts = [re.sub(rf"(?<!\d){old_pid}(?!\d)", str(pid), t) for t in texts]
    return texts
