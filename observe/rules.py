"""Detection rules and catalogs, read from TOML data files and applied as vectorised polars passes.

A rule file holds ``source = "kernel"`` and ``[[rule]]`` tables: ``kind``, ``severity``, ``pattern``
(Rust regex with named groups), optional ``literal`` (a string or list of strings, one of which
every match contains: a cheap prefilter), ``attrs`` (static extras),
``examples`` (must match) and ``counterexamples`` (must not), and ``cite``: where the emitter prints
the matched text (``"<repository> <path> <version>: <format string>"``, one per version or wording
covered), so a rule is built from the source of truth and checked against it. Within a source the first matching rule
wins, files taken in name order. Named groups called like schema fields (``gpu``, ``code``, ``rank``,
``job_id``, ``pid``, ``node``, ``program``) fill those fields; other groups go to ``attrs``.

A catalog file holds ``catalog = "<kind>"``, ``key = "<field>"`` and ``[[entry]]`` tables; events of
that kind get the matching entry's other keys merged into ``attrs`` (``severity`` sets the field), or
only those named in ``attach = [...]``: the rest stay in the catalog, for :func:`catalog` at query time.
Later files' entries replace earlier ones with the same key (a later ``attach`` the earlier one). A
catalog may guard some fields with ``monotone = "<field>"`` (or a list) and ``order = [lowest, ...,
highest]``: its entries' values must be in ``order``, and a later file may keep or lower an entry's
value, never raise it (new keys are free).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from observe.config import rule_dirs
from observe.frames import any_of, attrs_json, merge_attrs, scatter_rows
from observe.memo import once
from observe.schema import POLARS_SCHEMA, SEVERITIES, SOURCES

FIELD_GROUPS = ("gpu", "code", "rank", "job_id", "pid", "node", "program")


class RuleError(ValueError):
    """A rule or catalog file is invalid; the message names the file and the rule."""


@dataclass(frozen=True)
class Rule:
    kind: str
    severity: str
    source: str
    pattern: str
    where: str
    literals: tuple[str, ...] = ()
    attrs: tuple[tuple[str, str], ...] = ()
    examples: tuple[str, ...] = ()
    counterexamples: tuple[str, ...] = ()
    groups: tuple[str, ...] = field(default=())
    cite: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalog:
    kind: str
    key: str
    entries: pl.DataFrame
    where: str
    monotone: tuple[str, ...] = ()  # fields a later file may only keep or lower along ``order``
    order: tuple[str, ...] = ()
    attach: tuple[str, ...] | None = None  # fields merged into events' attrs; None: all


def _check_pattern(pattern: str, where: str) -> tuple[str, ...]:
    try:  # one compile validates it and names its groups (each costs about a millisecond, in every process)
        groups = pl.Series([""]).str.extract_groups(pattern).struct.fields
    except Exception as exc:  # polars reports regex syntax errors as ComputeError
        raise RuleError(f"{where}: bad pattern: {str(exc).splitlines()[0]}") from None
    return tuple(g for g in groups if not g.isdigit())


def _rule(raw: dict, source: str, where: str) -> Rule:
    for key in ("kind", "pattern"):
        if not isinstance(raw.get(key), str):
            raise RuleError(f"{where}: missing {key!r}")
    severity = raw.get("severity", "info")
    if severity not in SEVERITIES:
        raise RuleError(f"{where}: severity {severity!r} not one of {', '.join(SEVERITIES)}")
    where = f"{where} ({raw['kind']})"
    return Rule(
        kind=raw["kind"],
        severity=severity,
        source=raw.get("source", source),
        pattern=raw["pattern"],
        where=where,
        literals=_literals(raw.get("literal"), where),
        attrs=tuple((k, str(v)) for k, v in raw.get("attrs", {}).items()),
        examples=tuple(raw.get("examples", ())),
        counterexamples=tuple(raw.get("counterexamples", ())),
        groups=_check_pattern(raw["pattern"], where),
        cite=_strings(raw.get("cite", ()), "cite", where),
    )


def _strings(value: object, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise RuleError(f"{where}: {key} must be a list of non-empty strings")
    return tuple(value)


def _literals(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise RuleError(f"{where}: literal must be a non-empty string or a list of them")
    return tuple(values)


@once
def _load(dirs: tuple[Path, ...]) -> tuple[tuple[Rule, ...], tuple[Catalog, ...]]:
    rules: list[Rule] = []
    catalogs: list[Catalog] = []
    for d in dirs:
        if not d.is_dir():
            raise RuleError(f"{d}: rule directory not found")
        for path in sorted(d.glob("*.toml")):
            try:
                doc = tomllib.loads(path.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise RuleError(f"{path}: {exc}") from None
            if "catalog" in doc:
                catalogs.append(_catalog(doc, str(path)))
                continue
            source = doc.get("source", "")
            for i, raw in enumerate(doc.get("rule", [])):
                rule = _rule(raw, source, f"{path}:rule {i + 1}")
                if rule.source not in SOURCES:
                    raise RuleError(f"{rule.where}: source {rule.source!r} not one of {', '.join(SOURCES)}")
                rules.append(rule)
    return tuple(rules), tuple(_merge(catalogs))


def _merge(catalogs: list[Catalog]) -> list[Catalog]:
    """One catalog per kind: entries of later files override earlier ones with the same key.

    The first file of a kind that declares ``monotone``/``order`` guards the later ones: an override
    that raises a guarded field of an existing key is a :class:`RuleError`. The last ``attach`` declared holds.
    """
    merged: dict[str, Catalog] = {}
    for cat in catalogs:
        if cat.kind in merged:
            prev = merged[cat.kind]
            if prev.monotone:
                _check_monotone(prev, cat, prev.monotone, prev.order)
            monotone, order = (prev.monotone, prev.order) if prev.monotone else (cat.monotone, cat.order)
            entries = pl.concat([prev.entries, cat.entries], how="diagonal_relaxed")
            cat = Catalog(cat.kind, cat.key, entries.unique(subset=cat.key, keep="last", maintain_order=True),
                          cat.where, monotone, order, prev.attach if cat.attach is None else cat.attach)
        merged[cat.kind] = cat
    return list(merged.values())


def _rank(field: str, order: tuple[str, ...]) -> pl.Expr:
    return pl.col(field).cast(pl.String).replace_strict(list(order), list(range(len(order))), default=None,
                                                        return_dtype=pl.Int32)


def _check_monotone(prev: Catalog, cat: Catalog, monotone: tuple[str, ...], order: tuple[str, ...]) -> None:
    """RuleError when ``cat`` gives a key already in ``prev`` a higher guarded value than ``prev`` has."""
    fields = [f for f in monotone if f in prev.entries.columns and f in cat.entries.columns]
    if not fields:
        return
    key = pl.col(cat.key).cast(pl.String)
    old = prev.entries.select(key, *(_rank(f, order).alias(f) for f in fields))
    new = cat.entries.select(key, *(pl.col(f).cast(pl.String) for f in fields),
                             *(_rank(f, order).alias(f"_new_{f}") for f in fields))
    both = new.join(old, on=cat.key, how="inner")
    for f in fields:
        unknown = both.filter(pl.col(f).is_not_null() & pl.col(f"_new_{f}").is_null())
        if unknown.height:
            k, v = unknown.row(0)[0], unknown.get_column(f)[0]
            raise RuleError(f"{cat.where}: {cat.key} {k}: {f} {v!r} not one of {', '.join(order)}")
        up = both.filter(pl.col(f"_new_{f}") > pl.col(f"{f}_right"))
        if up.height:
            raise RuleError(f"{cat.where}: {cat.key} {up.item(0, cat.key)}: {f} {up.item(0, f)!r} is above the "
                            f"built-in {order[up.item(0, f'{f}_right')]!r}; site catalogs may suppress or lower a "
                            f"code's action, never escalate it")


def _catalog(doc: dict, where: str) -> Catalog:
    key = doc.get("key", "code")
    entries = doc.get("entry", [])
    if not entries or any(key not in e for e in entries):
        raise RuleError(f"{where}: every [[entry]] needs {key!r}")
    monotone = doc.get("monotone", ())
    monotone = (monotone,) if isinstance(monotone, str) else monotone
    order = doc.get("order", ())
    if not isinstance(monotone, (list, tuple)) or not all(isinstance(f, str) and f for f in monotone):
        raise RuleError(f"{where}: monotone must be a field name or a list of them")
    if monotone and (not isinstance(order, list) or not order or not all(isinstance(v, str) for v in order)):
        raise RuleError(f"{where}: monotone needs order = [lowest, ..., highest] (a list of strings)")
    attach = doc.get("attach")
    if attach is not None and (not isinstance(attach, list) or not all(isinstance(f, str) and f for f in attach)):
        raise RuleError(f"{where}: attach must be a list of field names")
    frame = pl.DataFrame(entries, infer_schema_length=None)
    for f in monotone:
        if f in frame.columns:
            bad = frame.filter(pl.col(f).is_not_null() & _rank(f, tuple(order)).is_null())
            if bad.height:
                raise RuleError(f"{where}: {key} {bad.item(0, key)}: {f} {bad.item(0, f)!r} not one of "
                                f"{', '.join(order)}")
    return Catalog(kind=doc["catalog"], key=key, entries=frame, where=where, monotone=tuple(monotone),
                   order=tuple(order), attach=None if attach is None else tuple(attach))


def load() -> tuple[tuple[Rule, ...], tuple[Catalog, ...]]:
    """All rules and catalogs from :func:`rule_dirs`, validated."""
    return _load(tuple(rule_dirs()))


def catalog(kind: str) -> pl.DataFrame | None:
    """The catalog entries for events of ``kind`` (every field, attached or not), or None."""
    return next((c.entries for c in load()[1] if c.kind == kind), None)


def xid_action() -> pl.Expr:
    """The Xid catalog's action for an event (attached to its attrs at ingest): an NVLink5 Xid (144-150) whose line
    says "Fatal" (nvrm.toml: attrs.nvlink_severity) takes the entry's ``fatal_action``, its Nonfatal form ``action``."""
    attr = pl.col("attrs").str.json_path_match
    fatal = (attr("$.nvlink_severity") == "fatal") & attr("$.fatal_action").is_not_null()
    return pl.when(fatal).then(attr("$.fatal_action")).otherwise(attr("$.action"))


def apply(df: pl.DataFrame, rules: tuple[Rule, ...] | None = None) -> pl.DataFrame:
    """Set ``kind``/``severity`` and rule-extracted fields on rows whose ``kind`` is still null.

    ``df`` needs ``source``, ``message``, ``kind``, ``severity``, ``attrs`` and the field columns.
    Per source, one Aho-Corasick pass over the rules' literals picks the candidate rows and, for each,
    the rules whose literals it holds; each rule's regex runs only on its rows (the first rule that
    matches wins). A few lazy queries do it all: compiling every regex, or an eager step per rule,
    would cost more than the matching.
    """
    rules = load()[0] if rules is None else rules
    by_source: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        by_source.setdefault(rule.source, []).append(i)
    # only rows still unclassified whose source has rules (most syslog lines have none)
    # (comparisons, not is_in: they read the views' inline prefixes instead of hashing every value)
    ruled = pl.any_horizontal([pl.col("source") == source for source in by_source]).fill_null(False)
    rows = df.select(pl.col("kind").is_null() & ruled).to_series().arg_true()
    if not len(rows):
        return df
    todo = df.select("source", pl.col("message").fill_null("")).gather(rows).with_columns(rows.cast(pl.Int64).alias("_i"))
    msg = pl.col("message")
    found_literals = []
    # one frame per source first: filters chained in one lazy query would run the literal
    # search on every row, whatever its source
    sources = todo.get_column("source")
    by_part = {(sources[0],): todo} if sources.n_unique() == 1 else todo.partition_by("source", as_dict=True)
    for (source,), cand in by_part.items():
        group = by_source[source]
        literals = sorted({x for i in group for x in rules[i].literals})
        if all(rules[i].literals for i in group):
            cand = cand.filter(msg.str.contains(any_of(literals)))
        found_literals.append(cand.lazy().with_columns(msg.str.extract_many(literals or [""], overlapping=True).alias("_lit")))
    cands = pl.concat(found_literals).collect()
    if cands.is_empty():
        return df
    found = _first_matches(cands, rules, by_source)
    if found.is_empty():
        return df
    found = pl.concat([_extract(part.lazy(), rules[i]) for (i,), part in found.group_by("_rule")],
                      how="diagonal_relaxed").collect()
    # only the columns some match sets are replaced (each replaced column is copied whole)
    fields = [n for n in FIELD_GROUPS if n in found.columns and found.get_column(n).null_count() < found.height]
    attrs = found.get_column("attrs").null_count() < found.height
    idx = found.get_column("_i")
    now = df.select(pl.col(["kind", "severity", *fields, *(["attrs"] if attrs else [])]).gather(idx).name.suffix("_now"))
    new = pl.concat([found, now], how="horizontal").select(
        pl.coalesce("kind", "kind_now").alias("kind"),
        pl.coalesce("severity", "severity_now").alias("severity"),
        *([merge_attrs(pl.col("attrs_now"), pl.col("attrs")).alias("attrs")] if attrs else []),
        *(pl.coalesce(pl.col(n).cast(POLARS_SCHEMA[n], strict=False), f"{n}_now").alias(n) for n in fields),
    )
    return scatter_rows(df, idx, new)


def _first_matches(cands: pl.DataFrame, rules: tuple[Rule, ...], by_source: dict[str, list[int]]) -> pl.DataFrame:
    """Candidate rows (``_i``, ``source``, ``message``, ``_lit``: the literals found in each) with the
    first rule that matches each (``_rule``). A rule's regex runs only on the rows holding one of its
    literals (rules without literals on every row of their source), in one query."""
    pairs = cands.select("_i", "source", pl.col("_lit").list.unique()).explode("_lit").join(
        _literal_rules(rules), on=["source", "_lit"]).select("_i", "_rule")
    plain = [(i, source) for source, ids in by_source.items() for i in ids if not rules[i].literals]
    if plain:
        every = pl.DataFrame({"_rule": [i for i, _ in plain], "source": [s for _, s in plain]},
                             schema={"_rule": pl.Int32, "source": pl.String})
        pairs = pl.concat([pairs, cands.select("_i", "source").join(every, on="source").select("_i", "_rule")])
    pairs = pairs.unique().join(cands.select("_i", "source", "message"), on="_i")
    tested = [part.lazy().filter(pl.col("message").str.contains(rules[i].pattern))
              for (i,), part in pairs.group_by("_rule")]
    hits = pl.concat(tested).group_by("_i").agg(pl.col("_rule").min()).collect() if tested else pairs.clear()
    return cands.join(hits.select("_i", "_rule"), on="_i").drop("_lit")


@once
def _literal_rules(rules: tuple[Rule, ...]) -> pl.DataFrame:
    """(source, literal, rule) for every literal of every rule."""
    rows = [(rule.source, lit, i) for i, rule in enumerate(rules) for lit in rule.literals]
    return pl.DataFrame({"source": [r[0] for r in rows], "_lit": [r[1] for r in rows], "_rule": [r[2] for r in rows]},
                        schema={"source": pl.String, "_lit": pl.String, "_rule": pl.Int32})


def _extract(cand: pl.LazyFrame, rule: Rule) -> pl.LazyFrame:
    groups, cols = _extraction(rule)
    return (cand.with_columns(groups) if groups is not None else cand).select(cols)


@once
def _extraction(rule: Rule) -> tuple[pl.Expr | None, list[pl.Expr]]:
    """A matched row's fields for ``rule``: its groups (a struct ``_g``, or None) and the columns to select."""
    cols = [pl.col("_i"), pl.lit(rule.kind).alias("kind"), pl.lit(rule.severity).alias("severity")]
    extra: list[tuple[str, pl.Expr]] = [(k, pl.lit(v)) for k, v in rule.attrs]
    for g in rule.groups:
        value = pl.col("_g").struct.field(g)
        if g in FIELD_GROUPS:
            cols.append(value.alias(g))
        else:
            extra.append((g, value))
    cols.append(attrs_json(extra).alias("attrs") if extra else pl.lit(None, dtype=pl.String).alias("attrs"))
    groups = pl.col("message").str.extract_groups(rule.pattern).alias("_g") if rule.groups else None
    return groups, cols


def enrich(df: pl.DataFrame) -> pl.DataFrame:
    """Merge catalog entries' attached fields into ``attrs`` (and ``severity``) of events of each catalog's kind."""
    kinds = df.get_column("kind")
    for cat in load()[1]:
        idx = (kinds == cat.kind).arg_true()
        if not len(idx):
            continue
        entries = cat.entries
        key_dtype = POLARS_SCHEMA.get(cat.key, pl.String)
        info = [c for c in entries.columns if c not in (cat.key, "severity")
                and (cat.attach is None or c in cat.attach)]
        entries = entries.select(
            pl.col(cat.key).cast(key_dtype).alias(cat.key),
            (pl.col("severity") if "severity" in entries.columns else pl.lit(None, dtype=pl.String)).alias("_sev"),
            attrs_json([(c, pl.col(c)) for c in info]).alias("_cat"),
        )
        new = df.select(pl.col(cat.key, "severity", "attrs").gather(idx)).join(
            entries, on=cat.key, how="left", maintain_order="left").select(
            pl.coalesce("_sev", "severity").alias("severity"),
            merge_attrs(pl.col("attrs"), pl.col("_cat")).alias("attrs"),
        )
        df = scatter_rows(df, idx, new)
    return df


def describe() -> list[dict]:
    """Every rule as a plain dict (for ``observe rules`` and the docs)."""
    return [
        {"source": r.source, "kind": r.kind, "severity": r.severity, "pattern": r.pattern, "where": r.where,
         "cite": list(r.cite)}
        for r in load()[0]
    ]


def examples_report() -> list[str]:
    """Problems with rule examples: an example that misses its rule, or a counterexample that hits."""
    problems = []
    for rule in load()[0]:
        for ex in rule.examples:
            if not pl.Series([ex]).str.contains(rule.pattern)[0]:
                problems.append(f"{rule.where}: example does not match: {ex}")
        for ex in rule.counterexamples:
            if pl.Series([ex]).str.contains(rule.pattern)[0]:
                problems.append(f"{rule.where}: counterexample matches: {ex}")
    return problems
