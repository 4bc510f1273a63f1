"""explain against ground truth: generated scenarios (real corpus lines re-timed onto generated nodes,
clock skew up to 3 s, noise Xids) ingested into one store; top-1 and top-3 accuracy per type.
Run with -s to see the table; bench/explain_accuracy.py does the same on 300+ failures."""
from __future__ import annotations

from observe.demo import FAST, scenarios
from observe.ingest import ingest_inputs
import polars as pl
import pytest

from queries.accuracy import lines, reliability, score, summary


def test_explain_names_the_injected_root_cause(tmp_path, store) -> None:
    manifests = scenarios(tmp_path / "logs", **FAST)
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job, "boot_time": f.boot_time})
                   for m in manifests for f in m.files], store)
    incidents = [i for m in manifests for i in m.incidents]
    scored = score(store, incidents)
    table = summary(scored)
    print("\n" + "\n".join(lines(table, scored)))
    overall = table.filter(table["type"] == "all").row(0, named=True)
    assert overall["failures"] >= 60 and table.height >= 10  # every scenario type is there
    assert overall["top1"] >= 0.95
    assert table.get_column("top1").min() >= 0.85, table
    # the job's own fault (its code, its memory) or a hang: no verdict calls for a drain
    mine = table.filter(pl.col("type").is_in(["app_xid", "user_error", "oom", "hung_rank"]))
    assert mine.height == 4 and mine.get_column("drains").sum() == 0, mine


def test_reliability_bins_and_calibration_error() -> None:
    scored = pl.DataFrame({"confidence": [0.99, 0.99, 0.99, 0.99, 0.6, 0.6], "top1": [True, True, True, False, True, False]})
    bins, ece = reliability(scored)
    assert bins.select("bin", "count", "accuracy").rows() == [("0.5-0.7", 2, 0.5), (">=0.97", 4, 0.75)]
    assert ece == pytest.approx((2 * 0.1 + 4 * 0.24) / 6)
