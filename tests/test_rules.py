"""Every rule's examples produce its kind through the real engine; bad rule files fail clearly."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from observe import rules
from observe.schema import POLARS_SCHEMA

ALL_RULES, _ = rules.load()


def _classify(message: str, source: str) -> str | None:
    df = pl.DataFrame({"message": [message], "source": [source]}).with_columns(
        pl.lit(None, dtype=t).alias(n) for n, t in POLARS_SCHEMA.items() if n not in ("message", "source")
    )
    return rules.apply(df).get_column("kind")[0]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: f"{r.source}:{r.kind}:{r.where.split(':rule ')[-1]}")
def test_examples_yield_their_kind(rule: rules.Rule) -> None:
    assert rule.examples, f"{rule.where} has no examples"
    for ex in rule.examples:
        assert _classify(ex, rule.source) == rule.kind, ex
    for ex in rule.counterexamples:
        assert _classify(ex, rule.source) != rule.kind, ex


def test_examples_report_is_clean() -> None:
    assert rules.examples_report() == []


def test_bad_pattern_names_file_and_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.toml").write_text('source = "kernel"\n[[rule]]\nkind = "x"\npattern = "(unclosed"\n')
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    with pytest.raises(rules.RuleError, match=r"bad\.toml:rule 1 \(x\): bad pattern"):
        rules.load()


def test_user_rules_extend_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site.toml").write_text(
        'source = "kernel"\n[[rule]]\nkind = "site_fan_failure"\nseverity = "crit"\n'
        "pattern = 'fan (?P<fan>\\d+) failed'\nexamples = ['fan 3 failed']\n"
    )
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    assert _classify("ipmi: fan 3 failed", "kernel") == "site_fan_failure"
    assert _classify("NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.", "kernel") == "gpu_xid"


def test_catalog_override_replaces_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "xid_site.toml").write_text(
        'catalog = "gpu_xid"\nkey = "code"\n[[entry]]\ncode = 13\nname = "site"\naction = "none"\nseverity = "info"\n'
    )
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    cat = rules.catalog("gpu_xid")
    assert cat is not None
    row = cat.filter(pl.col("code") == 13).row(0, named=True)
    assert row["action"] == "none" and row["name"] == "site"
    assert cat.filter(pl.col("code") == 79).height == 1
