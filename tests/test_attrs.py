"""The attrs contract (observe/attrs.toml): what every writer puts in an event's attrs is declared for
its source or kind, and every key the code reads is one declared."""
from __future__ import annotations

import json
import tomllib
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest

from observe import rules
from observe.collect import Counters
from observe.collector import Context
from observe.health.drain import KINDS as DECISIONS, Decision, ledger
from observe.health.result import Result, Status
from observe.health.runner import as_events
from observe.ingest import parse_bytes
from observe.rules import FIELD_GROUPS
from tests.test_architecture import _attr_reads

ROOT = Path(__file__).resolve().parents[1]
DECLARED = tomllib.loads((ROOT / "observe" / "attrs.toml").read_text())
CORPUS = ROOT / "tests" / "fixtures" / "corpus"


def declared(source: str | None, kind: str) -> set[str]:
    return (set(DECLARED["source"].get(source or "", [])) | set(DECLARED["source"]["any"])
            | set(DECLARED["kind"].get(kind, [])))


def keys_of(df: pl.DataFrame) -> list[tuple[str, str, set[str]]]:
    return [(source, kind, set(json.loads(attrs))) for source, kind, attrs in
            df.select("source", "kind", "attrs").drop_nulls("attrs").iter_rows()]


@pytest.mark.parametrize("rule", rules.load()[0], ids=lambda r: Path(r.where).name)
def test_a_rules_groups_and_attrs_are_declared_for_its_kind(rule: rules.Rule) -> None:
    writes = {g for g in rule.groups if g not in FIELD_GROUPS} | {k for k, _ in rule.attrs}
    assert writes - declared(rule.source, rule.kind) == set()


def test_a_catalogs_attached_fields_are_declared_for_its_kind() -> None:
    for cat in rules.load()[1]:
        attached = set(cat.attach) if cat.attach is not None else set(cat.entries.columns) - {cat.key, "severity"}
        assert attached - set(DECLARED["kind"].get(cat.kind, [])) == set(), cat.where


@pytest.mark.parametrize("path", sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".log", ".txt")),
                         ids=lambda p: str(p.relative_to(CORPUS)))
def test_what_the_collectors_write_on_real_lines_is_declared(path: Path) -> None:
    from observe.collector import detect
    from observe.ingest import sample_of

    data = path.read_bytes()
    best, _ = detect(sample_of(data[:16384]))
    if best is None:
        pytest.skip("no collector reads it as a whole")
    for source, kind, keys in keys_of(parse_bytes(data, best.name, Context(node="n1", route="system_file"))):
        assert keys - declared(source, kind) == set(), (source, kind)


def test_what_the_health_side_writes_is_declared() -> None:
    checks = as_events([Result("disk", Status.FAIL, "full", {"free": 1}, 0.1, action="drain")], "n1", "v1")
    decisions = ledger([Decision(kind, "n1", "why", "detail", False, {}) for kind in DECISIONS
                        if kind != "drain_breaker_reset"], "v1")  # a person's reset: by whom, and their note
    for source, kind, keys in keys_of(pl.concat([checks, decisions], how="diagonal_relaxed")):
        assert keys - declared(source, kind) == set(), kind
    stats = {k for k in asdict(Counters()) if k not in ("last_error", "updated")}
    assert stats == set(DECLARED["kind"]["collector_stats"])


def test_every_key_the_code_reads_is_declared() -> None:
    every = set().union(*DECLARED["source"].values(), *DECLARED["kind"].values())
    assert {k: where for k, where in _attr_reads().items() if k not in every} == {}
