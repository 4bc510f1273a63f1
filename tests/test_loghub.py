"""Header fields agree with loghub's structured ground truth on Thunderbird and Linux (>= 99%)."""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl
import pytest

from conftest import CORPUS, parse_file
from observe.collector import Context

LOGHUB = CORPUS / "loghub"
# name: (node column, time format of our ts, expected time expression)
CASES = {
    "Thunderbird": ("User", "%Y.%m.%d %H:%M:%S", pl.col("Date") + " " + pl.col("Time")),
    "Linux": ("Level", "%b %-d %H:%M:%S", pl.col("Month") + " " + pl.col("Date") + " " + pl.col("Time")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_fields_agree(name: str) -> None:
    node_col, fmt, expected_time = CASES[name]
    ctx = Context(reference_time=datetime(2005, 12, 31, tzinfo=timezone.utc))
    out = parse_file(LOGHUB / f"{name}_2k.log", "syslog", ctx)
    truth = pl.read_csv(LOGHUB / f"{name}_2k.log_structured.csv", infer_schema=False)
    assert out.height == truth.height == 2000
    got = out.select(
        pl.col("node"), pl.col("program"), pl.col("pid").cast(pl.String), pl.col("ts").dt.strftime(fmt).alias("time"))
    want = truth.select(pl.col(node_col).alias("node"), pl.col("Component").alias("program"),
                        pl.col("PID").alias("pid"), expected_time.alias("time"))
    for field in ("node", "program", "pid", "time"):
        agree = (got.get_column(field).eq_missing(want.get_column(field))).mean()
        print(f"{name} {field}: {100 * agree:.2f}% agree")
        assert agree >= 0.99, field
