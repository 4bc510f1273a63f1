"""Fixture in, golden out: every tests/fixtures/golden/<collector>/<case> input against <case>.jsonl.

Run ``pytest --update-golden`` to rewrite the goldens after a deliberate change; review the diff.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import FIXTURES, parse_file
from observe.collector import Context

GOLDEN = FIXTURES / "golden"
CASES = sorted(p for p in GOLDEN.glob("*/*") if p.suffix != ".jsonl")
CTX = Context(node="node-hint", reference_time=datetime(2026, 11, 23, tzinfo=timezone.utc))


def _render(path: Path) -> str:
    out = parse_file(path, path.parent.name, CTX).drop("file_id", "raw")
    rows = out.with_columns(out.get_column("ts").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")).to_dicts()
    return "".join(json.dumps({k: v for k, v in r.items() if v is not None}, sort_keys=True) + "\n" for r in rows)


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden(case: Path, update_golden: bool) -> None:
    golden = case.with_suffix(".jsonl")
    got = _render(case)
    if update_golden:
        golden.write_text(got)
    assert golden.exists(), f"{golden.name} missing: run pytest --update-golden, then review what it wrote"
    assert got == golden.read_text()
