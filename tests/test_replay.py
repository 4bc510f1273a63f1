"""Golden replays: real kernel-log captures through the fault policy, against expected decisions.

Each capture is one source's lines of the corpus (``xid.log`` and ``ib_pcie.log``, split by the line
ranges in SOURCES.md), replayed as one node, decided at a fixed time. The goldens
(``fixtures/replay/*.jsonl``) were reviewed line by line; ``pytest --update-golden`` rewrites them
after a deliberate policy or catalog change: review that diff the same way. A few decisions are also
asserted here by name, so a golden rewritten in a hurry cannot hide them.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from conftest import CORPUS, FIXTURES
from observe.collector import Context
from observe.health import faults, policy
from observe.ingest import parse_bytes

NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)
RULES = policy.load().faults
LOGS = ("xid.log", "ib_pcie.log")


def captures(name: str) -> list[tuple[str, str, str]]:
    """(case id, source URL, text) per source of corpus file ``name``."""
    sources = (CORPUS / "real" / "SOURCES.md").read_text().split(f"## {name}", 1)[1].split("\n## ", 1)[0]
    lines = (CORPUS / "real" / name).read_text().splitlines(True)
    out = []
    for first, last, url in re.findall(r"^\| (\d+)[–-](\d+) \| <([^>]+)>", sources, re.M):
        case = f"{name.split('.')[0]}-{int(first):03d}"
        out.append((case, url, "".join(lines[int(first) - 1:int(last)])))
    return out


CASES = [c for name in LOGS for c in captures(name)]


def replay(text: str, node: str) -> list[dict]:
    """The decisions for one capture, as the goldens hold them."""
    events = parse_bytes(text.encode(), "kernel", Context(node=node, reference_time=NOW, boot_time=NOW, route="kmsg"))
    events = events.with_columns(events["node"].fill_null(node).str.replace(r".*", node))  # one capture, one node
    got = faults.decide(events.lazy(), RULES, NOW)
    keep = ["kind", "code", "gpu", "lines", "open", "remedy", "category", "acting", "reason"]
    return [{k: r[k] for k in keep if r[k] is not None} for r in got.iter_rows(named=True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_replay(case: tuple[str, str, str], update_golden: bool) -> None:
    name, url, text = case
    golden = FIXTURES / "replay" / f"{name}.jsonl"
    got = "".join(json.dumps(d, sort_keys=True) + "\n" for d in replay(text, name))
    if update_golden or not golden.exists():
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} ({url})"


def _decisions(case: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "replay" / f"{case}.jsonl").read_text().splitlines()]


def test_every_capture_is_replayed() -> None:
    assert len(CASES) == 31 and {p.stem for p in (FIXTURES / "replay").glob("*.jsonl")} == {c[0] for c in CASES}


def test_named_decisions() -> None:
    """The decisions an operator would check first, by capture."""
    fell = _decisions("xid-055")  # RTX 5090: Xid 79, fallen off the bus
    assert {(d["kind"], d["remedy"], d["acting"]) for d in fell} >= {("gpu_xid", "reboot", True),
                                                                       ("gpu_fell_off_bus", "reboot", True)}
    chia = {d["code"]: d for d in _decisions("xid-020") if d["kind"] == "gpu_xid"}
    assert chia[31]["category"] == "user" and not chia[31]["acting"] and 45 not in chia  # 45: cleanup after others
    assert chia[62]["acting"] and chia[62]["category"] == "hardware"
    aer = [d for d in _decisions("ib_pcie-027") + _decisions("ib_pcie-034") if d["kind"] == "pcie_aer"]
    assert aer and all(d["remedy"] == "reboot" for d in aer)  # fatal, recovery failed; corrected ones are no fault
    app = [d for d in _decisions("xid-012") if d["kind"] == "gpu_xid" and d.get("code") in (13, 31)]
    assert app and all(d["category"] == "user" and not d["acting"] for d in app)  # one GPU, one burst: the job's
    assert {d["code"]: d["lines"] for d in _decisions("xid-012")} == {13: 4, 31: 2, 32: 1}  # 7 lines, 3 faults
