"""Message templates: group log messages into templates (``<*>`` marks a variable), count them, and
report the templates that are new or unusually frequent in a window against a baseline.

Per line, all in polars: masks from ``patterns.toml`` replace numbers, hex, IPs and UUIDs with ``<*>``
and whitespace is collapsed, so most lines of one template become one string. Only the distinct
strings go through Drain's clustering (He et al., ICWS 2017) in a short Python loop: a string's leaf
is its token count and first ``depth`` tokens; strings of a leaf share a template when at least
``similarity`` of their tokens agree, and the positions where they differ become ``<*>``. Strings are
clustered most frequent first (ties by text), so the result does not depend on row order; a
template's id is a hash of its text. Mine the frames to compare together: :func:`compare` does.
"""
from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import polars as pl

from observe.config import rule_dirs
from queries.search import ORDER

PATTERNS = Path(__file__).with_name("patterns.toml")
WILDCARD = "<*>"


@dataclass(frozen=True)
class Config:
    """Masks (name, Rust regex), constant-token patterns, Drain's tree and threshold (see patterns.toml)."""

    masks: tuple[tuple[str, str], ...]
    keep: tuple[tuple[str, str], ...]
    similarity: float = 0.6
    depth: int = 2
    max_children: int = 100
    max_leaf: int = 100


def load_config() -> Config:
    """``queries/patterns.toml`` plus any ``patterns.toml`` in the directories of ``OBSERVE_RULES``."""
    extra = [d / "patterns.toml" for d in rule_dirs()[1:]]
    return _load_config(tuple(p for p in [PATTERNS, *extra] if p.is_file()))


@cache
def _load_config(paths: tuple[Path, ...]) -> Config:
    masks: dict[str, str] = {}
    keep: dict[str, str] = {}
    miner: dict[str, float] = {}
    for path in paths:
        try:
            doc = tomllib.loads(path.read_text())
            miner.update(doc.get("miner", {}))
            for table, entries in (("mask", masks), ("keep", keep)):
                for entry in doc.get(table, []):
                    entries[entry["name"]] = entry["pattern"]
        except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: {exc}") from None
    return Config(tuple(masks.items()), tuple(keep.items()),
                  float(miner["similarity"]), int(miner["depth"]),
                  int(miner["max_children"]), int(miner["max_leaf"]))


def masked(messages: pl.Expr, config: Config | None = None) -> pl.Expr:
    """The messages with whitespace collapsed and every mask replaced by ``<*>``."""
    config = config or load_config()
    expr = messages.fill_null("").str.replace_all(r"\s+", " ").str.strip_chars(" ")
    for _, pattern in config.masks:
        expr = expr.str.replace_all(pattern, WILDCARD, literal=False)
    return expr


def _best(leaf: list[int], templates: list[list[str]], kept: list[list[bool]],
          tokens: list[str], tkept: list[bool]) -> tuple[int | None, float]:
    """The most similar template of a leaf (the first on ties) and its similarity; ``<*>`` agrees with any token."""
    best, best_same = None, -1
    for i in leaf:
        same = 0
        for a, b, ka, kb in zip(templates[i], tokens, kept[i], tkept):
            if a == b or a == WILDCARD:
                same += 1
            elif ka and kb:
                break
        else:
            if same > best_same:
                best, best_same = i, same
    return best, best_same / len(tokens)


def _compact(leaf: list[int], templates: list[list[str]], kept: list[list[bool]], parent: list[int],
             max_leaf: int) -> None:
    """Make positions with at least ``max_leaf // 4`` distinct values in a full leaf variables and merge
    the templates that become equal."""
    for p in range(len(templates[leaf[0]])):
        if len({templates[i][p] for i in leaf}) >= max(2, max_leaf // 4):
            for i in leaf:
                templates[i][p], kept[i][p] = WILDCARD, False
    _merge_equal(leaf, templates, parent)


def _merge_equal(leaf: list[int], templates: list[list[str]], parent: list[int]) -> None:
    """Keep one of the leaf's templates that have become equal; the others point at it."""
    survivors: dict[tuple[str, ...], int] = {}
    for i in leaf:
        parent[i] = survivors.setdefault(tuple(templates[i]), i)
    leaf[:] = survivors.values()


def _wild(prefix: tuple, leaves: dict[tuple, list[int]], templates: list[list[str]], kept: list[list[bool]],
          parent: list[int], max_leaf: int) -> None:
    """Make the token after ``prefix`` a variable in every leaf under it, merging those leaves (and
    compacting one that ends up with ``max_leaf // 4`` templates)."""
    pos, n = len(prefix) - 1, len(prefix)
    targets: dict[tuple, list[int]] = {}
    for key in [k for k in leaves if k[:n] == prefix and k[n] != WILDCARD]:
        wild_key = (*prefix, WILDCARD, *key[n + 1:])
        target = targets[wild_key] = leaves.setdefault(wild_key, [])
        for i in leaves.pop(key):
            templates[i][pos], kept[i][pos] = WILDCARD, False
            target.append(i)
    for target in targets.values():
        _merge_equal(target, templates, parent)
        if len(target) >= max(2, max_leaf // 4):
            _compact(target, templates, kept, parent, max_leaf)


def _cluster(rows: Iterable[tuple[list[str], list[bool]]], config: Config) -> list[list[str]]:
    """Drain over distinct masked messages (tokens, keep flags): the template each one joined.

    A message's leaf is its token count and first ``depth`` tokens; a token with a digit or ``<*>`` routes
    as ``<*>``, and so does a new one after a prefix that already has ``max_children``: the first token,
    as in drain3; a later one, which then becomes ``<*>`` in every template under that prefix too.
    Messages of one leaf share a template when at least ``similarity`` of their tokens agree (``<*>``
    agrees with anything) and they do not differ where both have a keep token. A leaf that reaches
    ``max_leaf`` templates is compacted (:func:`_compact`); if it stays full, a message joins its most
    similar template. This bounds the work, otherwise quadratic in a leaf's messages.
    """
    similarity, max_leaf = config.similarity, config.max_leaf
    children: dict[tuple, set[str]] = {}
    wild: set[tuple] = set()
    templates: list[list[str]] = []
    kept: list[list[bool]] = []
    parent: list[int] = []
    leaves: dict[tuple, list[int]] = {}
    out: list[int] = []
    for tokens, tkept in rows:
        key: tuple = (len(tokens),)
        for token in tokens[:config.depth]:
            seen = children.setdefault(key, set())
            if key in wild or WILDCARD in token or any(c.isdigit() for c in token):
                token = WILDCARD
            elif token not in seen and len(seen) >= config.max_children:
                if len(key) > 1:
                    wild.add(key)
                    _wild(key, leaves, templates, kept, parent, max_leaf)
                token = WILDCARD
            seen.add(token)
            key = (*key, token)
        leaf = leaves.setdefault(key, [])
        best, sim = _best(leaf, templates, kept, tokens, tkept)
        if (best is None or sim < similarity) and len(leaf) >= max_leaf:
            _compact(leaf, templates, kept, parent, max_leaf)
            best, sim = _best(leaf, templates, kept, tokens, tkept)
        if best is not None and (sim >= similarity or len(leaf) >= max_leaf):
            template = templates[best]
            for i, (a, b) in enumerate(zip(template, tokens)):
                if a != b:
                    template[i], kept[best][i] = WILDCARD, False
        else:
            best = len(templates)
            templates.append(list(tokens))
            kept.append(list(tkept))
            parent.append(best)
            leaf.append(best)
        out.append(best)
    for i in range(len(parent)):
        while parent[parent[i]] != parent[i]:
            parent[i] = parent[parent[i]]
    return [templates[parent[i]] for i in out]


def template_id(template: str) -> str:
    """The stable id of a template text: 16 hex digits of its BLAKE2b hash."""
    return hashlib.blake2b(template.encode(), digest_size=8).hexdigest()


def template_map(masked_messages: pl.Series, config: Config | None = None) -> pl.DataFrame:
    """One row per distinct masked message: ``masked``, ``template_id``, ``template``."""
    return _templates(masked_messages.rename("masked").value_counts(name="n"), config)


def _templates(counts: pl.DataFrame, config: Config | None = None) -> pl.DataFrame:
    """``template_id`` and ``template`` of each distinct masked message of ``counts`` (``masked``, its
    rows ``n``): clustered most frequent first, so the same counts give the same templates."""
    config = config or load_config()
    keep = "|".join(f"(?:{p})" for _, p in config.keep) or "$^"
    uniq = (counts.select("masked", "n").sort(["n", "masked"], descending=[True, False])
            .with_columns(tokens=pl.col("masked").str.split(" ")))
    uniq = uniq.with_columns(kept=pl.col("tokens").list.eval(pl.element().str.contains(keep)))
    rows = zip(uniq["tokens"].to_list(), uniq["kept"].to_list())
    templates = [" ".join(t) for t in _cluster(rows, config)]
    ids = {t: template_id(t) for t in set(templates)}
    return pl.DataFrame({"masked": uniq["masked"], "template_id": [ids[t] for t in templates],
                         "template": templates}, schema={"masked": pl.String, "template_id": pl.String,
                                                         "template": pl.String})


def template_ids(messages: pl.Series, config: Config | None = None) -> pl.DataFrame:
    """``template_id`` and ``template`` of each message, in the messages' order."""
    config = config or load_config()
    m = pl.DataFrame({"masked": messages}).select(masked(pl.col("masked"), config))
    mapping = template_map(m.get_column("masked"), config)
    return m.join(mapping, on="masked", how="left", maintain_order="left").drop("masked")


def masked_counts(events: pl.LazyFrame, start: datetime | None = None, config: Config | None = None) -> pl.DataFrame:
    """Per distinct masked message of ``events`` (in any order): its rows in the window (``ts`` from
    ``start``; every row without one) and before it, the window's first and last time, nodes and first
    message (with its place in the events' order, ORDER). The part of mining that adds up: pieces of the
    events (a node's, a day's) give pieces that :func:`mine` and :func:`compare` take together."""
    return _counts(events, (pl.col("ts") >= start).fill_null(False) if start else pl.lit(True), config)


def _counts(lf: pl.LazyFrame, window: pl.Expr, config: Config | None) -> pl.DataFrame:
    """Counted per distinct message first, then masked: a fleet's lines repeat (a week of 256 nodes: 11
    million messages, 380,000 distinct), and masking is the dear part (its regexes run per string). One
    streamed pass counts every row, its messages as categories (grouped by a small code: a week of 256
    nodes in 0.7 GB, not 1.5, and a third faster); a second reads the window's (few: its filter reaches the files'
    row groups) for their nodes and first row. The masking is streamed too: its morsels run on every core."""
    names = lf.collect_schema().names()
    order = [c for c in ORDER if c in names]
    w, ts, message = pl.col("_w"), pl.col("ts"), pl.col("message").fill_null("")
    per_message = (lf.select(message.cast(pl.Categorical), window.alias("_w"), pl.when(window).then(ts).alias("_tw"),
                             pl.when(~window).then(ts).alias("_tb"))
                   .group_by("message").agg(
                       w.sum().cast(pl.UInt32).alias("count"), (~w).sum().cast(pl.UInt32).alias("baseline_count"),
                       pl.col("_tw").min().alias("first_ts"), pl.col("_tw").max().alias("last_ts"),
                       pl.col("_tb").min().alias("_b_first"), pl.col("_tb").max().alias("_b_last"))
                   .collect(engine="streaming").with_columns(pl.col("message").cast(pl.String)))
    seen = lf.filter(window).group_by(message).agg(
        pl.col("node").drop_nulls().unique().alias("_nodes"),
        pl.struct(order).sort_by(order, nulls_last=True).first().alias("_key"))
    first = [pl.col("_key").struct.field(c) for c in order]
    return (per_message.lazy().join(seen, on="message", how="left")
            .with_columns(masked(pl.col("message"), config).alias("masked")).group_by("masked").agg(
                pl.col("count").sum(), pl.col("baseline_count").sum(), pl.col("first_ts").min(), pl.col("last_ts").max(),
                pl.col("_b_first").min(), pl.col("_b_last").max(),
                pl.col("_nodes").list.explode(keep_nulls=False, empty_as_null=False).unique(),
                pl.when(pl.col("count") > 0).then(pl.col("message")).sort_by(first, nulls_last=True).first().alias("example"),
                pl.col("_key").sort_by(first, nulls_last=True).first())
            .collect(engine="streaming"))


def _stats(pieces: list[pl.DataFrame], config: Config | None) -> tuple[pl.DataFrame, tuple]:
    """Per template, the pieces' counts added up; and the time ranges of the window and the baseline."""
    merged = pl.concat(pieces, how="vertical_relaxed")
    key = [pl.col("_key").struct.field(c) for c in merged.schema["_key"].to_schema()] if merged.height else []
    first = merged.sort(key, nulls_last=True) if key else merged  # the example: the first in the events' order
    ranges = merged.select(pl.col("first_ts").min(), pl.col("last_ts").max(), pl.col("_b_first").min(),
                           pl.col("_b_last").max()).row(0)
    counts = merged.group_by("masked").agg((pl.col("count") + pl.col("baseline_count")).sum().alias("n"))
    stats = (first.join(_templates(counts, config), on="masked", how="left", maintain_order="left")
             .group_by("template_id", "template", maintain_order=True).agg(
                 pl.col("count").sum(), pl.col("baseline_count").sum(),
                 pl.col("example").drop_nulls().first(),
                 pl.col("_nodes").list.explode(keep_nulls=False, empty_as_null=False).n_unique().cast(pl.UInt32).alias("nodes"),
                 pl.col("first_ts").min(), pl.col("last_ts").max()))
    return stats, ranges


def mine(events: pl.LazyFrame | list[pl.DataFrame], config: Config | None = None) -> pl.DataFrame:
    """Templates of the events' messages (or of :func:`masked_counts`' pieces of them): count, first
    and last ts, distinct nodes, an example; most frequent first."""
    pieces = events if isinstance(events, list) else [masked_counts(events, config=config)]
    stats, _ = _stats(pieces, config)
    return (stats.select("template_id", "template", "count", "first_ts", "last_ts", "nodes", "example")
            .sort(["count", "template"], descending=[True, False]))


def _span_s(lo: datetime | None, hi: datetime | None) -> float | None:
    return (hi - lo).total_seconds() if lo is not None and hi is not None and hi > lo else None


def compare(window: pl.LazyFrame | list[pl.DataFrame], baseline: pl.LazyFrame | None = None, *,
            window_span: timedelta | None = None, baseline_span: timedelta | None = None, min_count: int = 3,
            min_ratio: float = 5.0, config: Config | None = None) -> pl.DataFrame:
    """Templates new in ``window`` (absent from ``baseline``) or at least ``min_ratio`` times as frequent
    (per second of each span, else per event) with at least ``min_count`` events; most surprising first.
    ``window`` may instead be :func:`masked_counts`' pieces of the events of both (no ``baseline``).

    Spans default to each frame's ts range. ``score`` is (count + 1) / (expected + 1), expected being the
    baseline's rate over the window's span. Both frames are mined together, so ids agree between them.
    """
    if isinstance(window, list):
        pieces = window
    else:
        pieces = [_counts(pl.concat([window.with_columns(pl.lit(True).alias("_w")),
                                     baseline.with_columns(pl.lit(False).alias("_w"))], how="diagonal_relaxed"),
                          pl.col("_w"), config)]
    stats, (w_lo, w_hi, b_lo, b_hi) = _stats(pieces, config)
    stats = stats.filter(pl.col("count") > 0)
    ws = window_span.total_seconds() if window_span else _span_s(w_lo, w_hi)
    bs = baseline_span.total_seconds() if baseline_span else _span_s(b_lo, b_hi)
    if not ws or not bs:
        ws = float(stats.get_column("count").sum() or 1)
        bs = float(stats.get_column("baseline_count").sum() or 1)
    count, base = pl.col("count"), pl.col("baseline_count")
    expected = base * (ws / bs)
    return (stats.with_columns(
        (count / expected).alias("ratio"),
        ((count + 1) / (expected + 1)).alias("score"),
        pl.when(base == 0).then(pl.lit("new"))
        .when((count >= min_count) & (count >= expected * min_ratio)).then(pl.lit("frequent")).alias("status"))
        .filter(pl.col("status").is_not_null())
        .sort(["score", "count", "template"], descending=[True, True, False])
        .select("status", "template", "count", "baseline_count", "ratio", "score", "nodes", "first_ts",
                "last_ts", "example", "template_id"))


def grouping_accuracy(predicted: pl.Series, truth: pl.Series) -> float:
    """Share of messages whose predicted group holds exactly the messages of their true group
    (Zhu et al., ICSE-SEIP 2019)."""
    df = pl.DataFrame({"p": predicted, "t": truth})
    return df.select(((pl.len().over("p") == pl.len().over("t")) & (pl.len().over("p", "t") == pl.len().over("p")))
                     .mean()).item()
