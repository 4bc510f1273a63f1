"""Polars helpers every layer shares: a literal prefilter as one regex, ``attrs`` JSON built and merged
without Python per row, a few rows of a frame replaced in place."""
from __future__ import annotations

import re

import polars as pl


def any_of(literals: list[str] | tuple[str, ...]) -> str:
    """A regex matching any of ``literals``: the regex engine's SIMD prefilter finds them several
    times faster than ``str.contains_any`` does (measured: 16 ms against 70 ms over 55 MB of NCCL
    messages, 15 literals)."""
    return "|".join(re.escape(x) for x in literals)


def attrs_json(cols: list[tuple[str, pl.Expr]]) -> pl.Expr:
    """A JSON object from named expressions (values as strings), leaving out nulls; null if empty.

    Each member is JSON-encoded on its own and the non-null ones joined: no regex over the text
    (polars keeps 32 compiled regexes per thread)."""
    members = [pl.when(e.is_not_null()).then(pl.struct(e.cast(pl.String).alias(k)).struct.json_encode().str.slice(1).str.head(-1))
               for k, e in cols]
    body = pl.concat_str(members, separator=",", ignore_nulls=True)
    return pl.when(body != "").then(pl.concat_str([pl.lit("{"), body, pl.lit("}")]))


def merge_attrs(left: pl.Expr, right: pl.Expr) -> pl.Expr:
    """Merge two JSON-object columns (right's keys appended; both may be null)."""
    both = pl.format("{},{}", left.str.head(-1), right.str.tail(-1))
    return pl.when(left.is_null()).then(right).when(right.is_null()).then(left).otherwise(both)


def scatter_rows(df: pl.DataFrame, idx: pl.Series, new: pl.DataFrame) -> pl.DataFrame:
    """``df`` with rows ``idx`` of ``new``'s columns replaced by ``new`` (few rows: no whole-frame join)."""
    return df.with_columns(df.get_column(c).clone().scatter(idx, new.get_column(c)) for c in new.columns)
