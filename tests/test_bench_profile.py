"""The ingest bench's profile (bench/ingest_profile.py) sees every stage it names: each is a function
the pipeline still calls, where the profile wraps it (a renamed or moved one would read 0 CPU-s)."""
from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from observe.simulate import generate

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from ingest_profile import STAGES  # noqa: E402


def test_every_stage_of_the_profile_is_run_and_the_rows_add_up(tmp_path: Path) -> None:
    generate(tmp_path / "logs", nodes=2, hours=6, seed=3, start=datetime(2026, 11, 20, tzinfo=timezone.utc))
    out = subprocess.run([sys.executable, str(BENCH / "ingest_profile.py"), str(tmp_path / "logs")],
                         capture_output=True, text=True, check=True).stdout
    total = float(re.search(r"; ([\d.]+) CPU-s", out).group(1))
    # each stage's CPU-s (printed to 10 ms) and ms per MB (to 0.1 ms: what a stage a few ms long shows in)
    rows = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^(\w[^\n]*?)\s+(-?[\d.]+)\s+-?\d+%", out, re.M)}
    per_mb = {m.group(1).strip(): float(m.group(2))
              for m in re.finditer(r"^(\w[^\n]*?)\s+-?[\d.]+\s+-?\d+%\s+(-?[\d.]+)", out, re.M)}
    for label, _, _ in STAGES:
        if label.startswith(("publish", "commit")):  # a few segments: under the table's 10 ms
            assert label in rows
        else:
            assert per_mb[label] > 0, f"{label}: no CPU seen (is it still what the pipeline calls?)\n{out}"
    assert rows[next(r for r in rows if r.startswith("start-up"))] > 0
    assert abs(sum(rows.values()) - total) < 0.05, out  # the rows are the whole process, "other" the rest
