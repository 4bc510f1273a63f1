"""Fixed-position fast paths give what the general regex paths give, on batches that mix layouts."""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

import collectors.nccl as nccl
from observe.collector import Context, split_header
from observe import timeparse as tp

CTX = Context(reference_time=datetime(2026, 11, 22, tzinfo=timezone.utc))
PYLOG_LINES = [
    "[2026-11-08 19:02:39,710] [INFO] [train.py:48] step 10",
    "[2026-11-08 19:02:39,7101] [WARNING] fraction of another length",
    "2026-11-08 19:02:40,123 - ERROR - no brackets",
    "[2026-11-08 19:02:41.123456] [DEBUG] dot and micros",
    "[rank3]:[2026-11-08 19:02:42,000] [INFO] rank prefix",
    "[2026-11-08 19:02:43,000]  [INFO] two spaces",
    "[2026-11-08 19:02:44,000]\t[INFO] a tab",
    "[2026-02-30 19:02:45,000] [INFO] no such day",
    "[2026-11-08T19:02:46,000] [CRITICAL] a T",
    "  [2026-11-08 19:02:47,000] [INFO] indented",
]


def _general(part: pl.DataFrame) -> pl.DataFrame:
    """What the regex path alone gives (the fast path's reference)."""
    g = split_header(part, nccl.PYLOG)
    level = pl.col("msg").str.slice(0, 60).str.extract(nccl.PY_LEVEL, 1)
    return g.select(
        "raw", "offset", tp.iso(pl.col("stamp"), CTX.tz).alias("ts"), pl.col("rank").cast(pl.Int32).alias("rank"),
        level.replace_strict(nccl.PY_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
        pl.col("msg").alias("message"), pl.lit("python").alias("program"),
    )


def test_python_logging_fast_path_matches_the_regex_path() -> None:
    for first in range(len(PYLOG_LINES)):  # each layout in turn is the one the fast path takes
        lines = PYLOG_LINES[first:] + PYLOG_LINES[:first]
        part = pl.DataFrame({"raw": lines, "offset": range(len(lines))})
        got = nccl._pylog(part, CTX).sort("offset")
        assert got.equals(_general(part).sort("offset")), lines[0]
    fixed, rest = nccl._pylog_fixed(pl.DataFrame({"raw": PYLOG_LINES, "offset": range(len(PYLOG_LINES))}), CTX)
    assert fixed.height == 1 and rest.height == len(PYLOG_LINES) - 1  # only the first layout is cut by position


def test_blank_lines() -> None:
    from observe.ingest import blank_lines

    raw = pl.Series(["", " ", "\t \r", "x", " x", "x ", "\u00a0", None, "  \t  y"])
    assert blank_lines(raw).to_list() == (raw.str.strip_chars() == "").to_list()
