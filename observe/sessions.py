"""Sessions: rows of one group that follow each other closely belong together (a node's repeated
reports are one episode, one job's end seen by several sources is one moment). The rule is defined
here once; each caller says how close is close and what a row without a time does."""
from __future__ import annotations

from datetime import timedelta

import polars as pl


def starts(ts: str, by: str | list[str], gap: timedelta, *, undated_starts: bool) -> pl.Expr:
    """True on the rows that start a session of their group ``by``, in rows sorted by ``by`` then ``ts``:
    the group's first row, and a row more than ``gap`` after the one before it. A row without a time
    (or after one) starts its own session when ``undated_starts``, else continues the one before."""
    first = pl.int_range(pl.len()).over(by) == 0
    return first | (pl.col(ts).diff().over(by) > gap).fill_null(undated_starts)


def numbered(ts: str, by: str | list[str], gap: timedelta, *, undated_starts: bool) -> pl.Expr:
    """A session number per row, distinct across groups (rows sorted by ``by`` then ``ts``)."""
    return starts(ts, by, gap, undated_starts=undated_starts).cum_sum()
