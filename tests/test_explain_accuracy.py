"""explain against ground truth: generated scenarios (real corpus lines re-timed onto generated nodes,
clock skew up to 3 s, noise Xids) ingested into one store; top-1 and top-3 accuracy per type.
Run with -s to see the table; bench/explain_accuracy.py does the same on 300+ failures."""
from __future__ import annotations

from observe.demo import FAST, scenarios
from observe.ingest import ingest_inputs
from queries.accuracy import lines, score, summary


def test_explain_names_the_injected_root_cause(tmp_path, store) -> None:
    manifests = scenarios(tmp_path / "logs", **FAST)
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job, "boot_time": f.boot_time})
                   for m in manifests for f in m.files], store)
    incidents = [i for m in manifests for i in m.incidents]
    table = summary(score(store, incidents))
    print("\n" + "\n".join(lines(table)))
    overall = table.filter(table["type"] == "all").row(0, named=True)
    assert overall["failures"] >= 60 and table.height >= 10  # every scenario type is there
    assert overall["top1"] >= 0.95
    assert table.get_column("top1").min() >= 0.85, table
