"""The bench's naive baseline emits the events observe emits (the issue's terms for a fair comparison):
the same detection rules, read from the same rule files, give the same kinds on the same logs."""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from observe.ingest import ingest
from observe.reader import input_files
from observe.rules import load
from observe.simulate import generate
from observe.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import baseline  # noqa: E402

START = datetime(2026, 11, 20, tzinfo=timezone.utc)
# What the baseline leaves out, on purpose (it is a plain per-line parser): observe also dates a
# job's start from its job record (jobcomp) and reads nvidia-smi XML into readings.
NOT_IN_BASELINE = {"slurm_job_start", "gpu_health"}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """Events per kind from observe and from the baseline, over the same demo cluster's logs."""
    root = tmp_path_factory.mktemp("baseline")
    generate(root / "logs", nodes=4, hours=12, seed=5, start=START)
    store = Store(root / "store")
    ingest(input_files([str(root / "logs")]), store, workers=1)
    baseline.run(root / "logs", root / "baseline")
    ours = store.scan().group_by("kind").len("observe").collect()
    theirs = pl.read_parquet(root / "baseline" / "events.parquet").group_by("kind").len("baseline")
    return ours.join(theirs, on="kind", how="full", coalesce=True).fill_null(0)


def test_baseline_emits_the_rule_kinds_observe_emits(kinds: pl.DataFrame) -> None:
    rule_kinds = {r.kind for r in load()[0]} - NOT_IN_BASELINE
    found = kinds.filter(pl.col("kind").is_in(sorted(rule_kinds)) & (pl.col("observe") > 0))
    assert found.height >= 15, found  # the demo's incidents and noise exercise most rules
    differ = found.filter(pl.col("observe") != pl.col("baseline"))
    assert differ.is_empty(), differ


def test_baseline_classifies_with_observes_rule_files() -> None:
    """Every rule (user rules too) reaches the baseline, compiled with Python re, in file order."""
    ours = load()[0]
    assert [(k, p.pattern) for rules in baseline.RULES.values() for k, _, _, p, _ in rules] == \
        [(r.kind, r.pattern) for source in baseline.RULES for r in ours if r.source == source]
    assert sum(len(rules) for rules in baseline.RULES.values()) == len(ours)
