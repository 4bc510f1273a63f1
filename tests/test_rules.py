"""Every rule's examples produce its kind and the fields recorded for them through the real engine (every
named group filled by one example at least); bad rule files fail clearly."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import polars as pl
import pytest

from observe import rules
from observe.config import BUILTIN_DIR
from observe.schema import POLARS_SCHEMA, SEVERITIES

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


def _extracted(message: str, source: str) -> dict:
    """The kind and every field and attrs key the engine sets for ``message`` (the nulls left out)."""
    df = pl.DataFrame({"message": [message], "source": [source]}).with_columns(
        pl.lit(None, dtype=t).alias(n) for n, t in POLARS_SCHEMA.items() if n not in ("message", "source"))
    row = rules.apply(df).row(0, named=True)
    fields = {k: str(v) for k, v in row.items() if v is not None and k not in ("message", "source", "attrs")}
    return {**fields, **json.loads(row["attrs"] or "{}")}


EXAMPLE_FIELDS = Path(__file__).parent / "fixtures" / "rule_examples.json"


def test_every_example_extracts_its_recorded_fields(update_golden: bool) -> None:
    """What each example yields, field by field (a broken group, a renamed one, a wrong value), against
    tests/fixtures/rule_examples.json; ``pytest --update-golden`` rewrites it after a deliberate change."""
    got = {f"{Path(r.where).name} {ex}": _extracted(ex, r.source) for r in ALL_RULES for ex in r.examples}
    if update_golden:
        EXAMPLE_FIELDS.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(EXAMPLE_FIELDS.read_text())
    assert {k: v for k, v in got.items() if recorded.get(k) != v} == {}
    assert set(recorded) == set(got), "examples added or removed: run pytest --update-golden and review"


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.groups], ids=lambda r: r.where.split("/")[-1])
def test_every_named_group_is_filled_by_an_example(rule: rules.Rule) -> None:
    """A group no example fills is untested text: it may never capture."""
    filled = set().union(*(_extracted(ex, rule.source) for ex in rule.examples))
    assert set(rule.groups) - filled == set(), f"{rule.where}: give an example that fills these groups"


def test_examples_report_is_clean() -> None:
    assert rules.examples_report() == []


# "<owner/repo> <path> <version>: <format string>", or, where the emitter's source is not public,
# "closed-source <emitter> <versions>, ...: <format as seen in field logs>"
CITE = re.compile(r"^(?:\S+/\S+ \S+|closed-source ).*: .+")


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: f"{r.source}:{r.kind}:{r.where.split(':rule ')[-1]}")
def test_every_builtin_rule_cites_its_emitter(rule: rules.Rule) -> None:
    """Built from the source of truth: where the emitter prints the text, per version."""
    assert rule.cite, f"{rule.where} cites no format string"
    assert all(CITE.match(c) for c in rule.cite), rule.cite


def test_a_cite_must_be_a_list_of_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site.toml").write_text('source = "kernel"\n[[rule]]\nkind = "x"\npattern = "x"\ncite = "one"\n')
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    with pytest.raises(rules.RuleError, match=r"site\.toml:rule 1 \(x\): cite must be a list"):
        rules.load()


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


XID_TOML = BUILTIN_DIR / "xid.toml"
XID_LOG = Path(__file__).resolve().parent / "fixtures" / "corpus" / "real" / "xid.log"


def _enriched(messages: list[str]) -> pl.DataFrame:
    df = pl.DataFrame({"message": messages, "source": ["kernel"] * len(messages)}).with_columns(
        pl.lit(None, dtype=t).alias(n) for n, t in POLARS_SCHEMA.items() if n not in ("message", "source")
    )
    return rules.enrich(rules.apply(df))


def _attr(name: str) -> pl.Expr:
    return pl.col("attrs").str.json_path_match(f"$.{name}").alias(name)


def test_xid_catalog_actions_are_in_its_order() -> None:
    doc = tomllib.loads(XID_TOML.read_text())
    order = doc["order"]
    assert order == ["none", "application_error", "investigate", "reset_gpu", "drain_node"]
    assert doc["monotone"] == ["action", "fatal_action"]
    entries = pl.DataFrame(doc["entry"], infer_schema_length=None)
    assert entries.get_column("code").is_unique().all() and entries.height >= 100
    assert entries.filter(~pl.col("action").is_in(order)).is_empty()
    assert entries.filter(pl.col("fatal_action").is_not_null() & ~pl.col("fatal_action").is_in(order)).is_empty()
    assert entries.filter(~pl.col("severity").is_in(list(SEVERITIES))).is_empty()
    assert set(entries.get_column("category")) <= {"gpu", "memory", "nvlink", "driver", "application"}
    nvlink = entries.filter(pl.col("code").is_between(144, 150))
    assert nvlink.height == 7 and (nvlink.get_column("fatal_action") == "reset_gpu").all()


def test_xid_events_carry_only_the_attached_fields() -> None:
    """attrs get ``attach`` (what faults, causes and the exporter read); the rest stays in the catalog."""
    doc = tomllib.loads(XID_TOML.read_text())
    assert {"action", "fatal_action", "category"} <= set(doc["attach"])
    assert set(doc["attach"]) <= set(pl.DataFrame(doc["entry"], infer_schema_length=None).columns)
    got = _enriched(["NVRM: Xid (PCI:0000:3b:00): 48, pid=7, name=python, An uncorrectable double bit error"])
    attrs = json.loads(got.item(0, "attrs"))
    assert attrs == {"process": "python", "detail": "An uncorrectable double bit error", "name": "Double Bit ECC Error",
                     "action": "reset_gpu", "category": "memory"}
    assert got.item(0, "severity") == "crit"
    entry = rules.catalog("gpu_xid").filter(pl.col("code") == 48).row(0, named=True)
    assert entry["meaning"].startswith("Uncorrectable") and entry["immediate"] == "WORKFLOW_XID_48"


def test_site_catalog_inherits_or_replaces_attach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = '[[entry]]\ncode = 13\nname = "site"\naction = "none"\ncategory = "application"\nmeaning = "ours"\n'
    line = "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"
    _site(tmp_path, monkeypatch, entry)
    assert json.loads(_enriched([line]).item(0, "attrs")) == {"detail": "Graphics Exception", "name": "site",
                                                               "action": "none", "category": "application"}
    _site(tmp_path, monkeypatch, 'attach = ["meaning"]\n' + entry)
    rules._load.cache_clear()
    assert json.loads(_enriched([line]).item(0, "attrs")) == {"detail": "Graphics Exception", "meaning": "ours"}


def test_catalog_without_attach_merges_every_field() -> None:
    nccl = next(c for c in rules.load()[1] if c.kind == "nccl_error")
    assert nccl.attach is None
    df = pl.DataFrame({"kind": ["nccl_error"], "code": [6], "severity": ["err"], "attrs": [None]},
                      schema_overrides={"code": POLARS_SCHEMA["code"], "attrs": pl.String})
    attrs = json.loads(rules.enrich(df).item(0, "attrs"))
    assert set(attrs) == set(nccl.entries.columns) - {nccl.key, "severity"} and attrs["meaning"]


def test_attach_must_be_a_list_of_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.toml").write_text('catalog = "x"\nkey = "k"\nattach = "level"\n[[entry]]\nk = 1\n')
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    with pytest.raises(rules.RuleError, match=r"c\.toml: attach must be a list of field names"):
        rules.load()


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    (tmp_path / "xid_site.toml").write_text('catalog = "gpu_xid"\nkey = "code"\n' + body)
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))


def test_site_catalog_may_lower_or_suppress_and_add_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _site(tmp_path, monkeypatch, '[[entry]]\ncode = 79\naction = "reset_gpu"\n'
                                 '[[entry]]\ncode = 149\naction = "none"\nfatal_action = "investigate"\n'
                                 '[[entry]]\ncode = 13\naction = "none"\n'
                                 '[[entry]]\ncode = 999\naction = "drain_node"\n')
    cat = rules.catalog("gpu_xid")
    assert cat is not None
    got = dict(cat.filter(pl.col("code").is_in([79, 149, 13, 999])).select("code", "action").iter_rows())
    assert got == {79: "reset_gpu", 149: "none", 13: "none", 999: "drain_node"}
    assert cat.filter(pl.col("code") == 149).item(0, "fatal_action") == "investigate"


@pytest.mark.parametrize("entry,field", [
    ('code = 13\naction = "drain_node"', "action"),
    ('code = 45\naction = "application_error"', "action"),
    ('code = 149\naction = "none"\nfatal_action = "drain_node"', "fatal_action"),
])
def test_site_catalog_may_not_escalate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, field: str) -> None:
    _site(tmp_path, monkeypatch, f"[[entry]]\n{entry}\n")
    code = entry.split()[2]
    with pytest.raises(rules.RuleError, match=rf"xid_site\.toml: code {code}: {field} .*never escalate it$") as err:
        rules.load()
    assert "\n" not in str(err.value)


def test_site_catalog_action_outside_order_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _site(tmp_path, monkeypatch, '[[entry]]\ncode = 79\naction = "reboot"\n')
    with pytest.raises(rules.RuleError, match=r"xid_site\.toml: code 79: action 'reboot' not one of none, "):
        rules.load()


def test_monotone_needs_an_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.toml").write_text('catalog = "x"\nkey = "k"\nmonotone = "level"\n[[entry]]\nk = 1\nlevel = "a"\n')
    monkeypatch.setenv("OBSERVE_RULES", str(tmp_path))
    with pytest.raises(rules.RuleError, match=r"c\.toml: monotone needs order"):
        rules.load()


def test_nvlink_unit_and_severity_from_corpus_lines() -> None:
    """Xid 144-150 lines of the corpus: the unit and Fatal/Nonfatal land in attrs; fatal_action rides along."""
    lines = [line.split("] ", 1)[-1] for line in XID_LOG.read_text().splitlines()
             if any(f"): {c}, " in line for c in range(144, 151))]
    assert len(lines) >= 6
    got = _enriched(lines).select("code", "kind", _attr("nvlink_unit"), _attr("nvlink_severity"), _attr("action"),
                                  _attr("fatal_action"), _attr("detail"))
    assert (got.get_column("kind") == "gpu_xid").all()
    want = pl.Series(lines).str.extract_groups(r"\): (\d+), (\w+)\s+(Fatal|Nonfatal)\s").struct.unnest()
    assert got.get_column("code").cast(pl.String).to_list() == want.get_column("1").to_list()
    assert got.get_column("nvlink_unit").to_list() == want.get_column("2").to_list()
    assert got.get_column("nvlink_severity").to_list() == want.get_column("3").str.to_lowercase().to_list()
    assert {"NETIR_LINK_EVT", "RLW_RXPIPE", "RLW_SRC_TRACK", "SAW_MVB"} <= set(got.get_column("nvlink_unit"))
    assert (got.get_column("fatal_action") == "reset_gpu").all()
    assert got.get_column("detail").str.starts_with(got.get_column("nvlink_unit")).all()
    fatal = got.filter(pl.col("nvlink_severity") == "fatal")
    assert fatal.height and (fatal.get_column("code") == 149).all()
    assert got.filter(pl.col("code") == 144).item(0, "action") == "none"


def test_threads_that_load_the_rules_at_once_compile_them_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest's parse threads start together and each asks for the rules: one compiles them, the others wait
    for its result (each compiling its own copy took four times the rules' load)."""
    import threading
    import time

    compiled: list[str] = []
    check = rules._check_pattern

    def slow_check(pattern: str, where: str) -> tuple[str, ...]:
        compiled.append(pattern)
        time.sleep(0.001)  # long enough that every thread asks while the first still loads
        return check(pattern, where)

    monkeypatch.setattr(rules, "_check_pattern", slow_check)
    rules._load.cache_clear()
    start = threading.Barrier(4)
    loaded: list[tuple] = []

    def load() -> None:
        start.wait()
        loaded.append(rules.load())

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        rules._load.cache_clear()  # the next test's load compiles with the real check
    assert len(loaded) == 4 and all(r is loaded[0] for r in loaded)
    assert len(compiled) == len(ALL_RULES)
