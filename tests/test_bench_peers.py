"""The ingest bench's peers (bench/peers.py: a polars and a DuckDB job, what a user would write instead of
observe) read every line of the same logs and take the same fields: the yardstick measures like against like."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from observe.simulate import generate

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_the_polars_and_duckdb_peers_read_every_line_alike(tmp_path: Path) -> None:
    generate(tmp_path / "logs", nodes=3, hours=6, seed=2, start=datetime(2026, 11, 20, tzinfo=timezone.utc))
    lines = sum(len(p.read_bytes().splitlines()) for p in (tmp_path / "logs").rglob("*") if p.is_file())
    got = {}
    for engine in ("polars", "duckdb"):
        subprocess.run([sys.executable, str(BENCH / "peers.py"), engine, str(tmp_path / "logs"), str(tmp_path / engine)],
                       check=True, capture_output=True, timeout=300)
        df = pl.concat([pl.read_parquet(f) for f in sorted((tmp_path / engine).glob("*.parquet"))], how="vertical_relaxed")
        got[engine] = df.select(pl.len(), pl.col("ts").count(), pl.col("node").count(), pl.col("code").count(),
                                pl.col("rank").count(), pl.col("job_id").count()).row(0)
    assert got["polars"] == got["duckdb"], got
    rows, stamped, hosts, xids, ranks, jobs = got["polars"]
    assert rows == lines and stamped and hosts and xids and ranks and jobs, got
