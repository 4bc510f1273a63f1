"""The central exporter's node labels stay bounded: a job printing 20,000 made-up host names makes
one node="other" series, not 20,000, whether Slurm can say which nodes are real or not."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from observe.collector import Context
from observe.exporter.central import StoreMetrics
from observe.exporter.serve import Exporter
from observe.ingest import parse_bytes
from observe.store import Store

REAL = [f"gpu{i:03d}" for i in range(1, 5)]
FAKE = [f"n{i:05d}" for i in range(20_000)]  # valid node names: only Slurm's list or the cap stops them
PER_NODE = ["observe_node_events", "observe_gpu_xid", "observe_gpu_xid_last_timestamp_seconds",
            "observe_node_last_event_timestamp_seconds"]


def xids(store: Store, nodes: list[str]) -> None:
    """A fatal Xid from each of ``nodes``, as syslog lines naming them, piped to ``observe ingest`` by an
    operator (a trusted route: the Xid families with an action count them too)."""
    text = "".join(f"Nov 24 10:00:{i % 60:02d} {n} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                   "name=<unknown>, GPU has fallen off the bus.\n" for i, n in enumerate(nodes))
    store.write(parse_bytes(text.encode(), "syslog", Context(route="operator")))


def exposition(body: bytes) -> tuple[Counter, dict[tuple, float]]:
    """Series per family in a /metrics body, and {(family, node): value} of every node-labelled sample."""
    series, by_node = Counter(), {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            series[fam.name] += 1
            if "node" in s.labels:
                by_node[(fam.name, s.labels["node"])] = s.value
    return series, by_node


def test_only_nodes_slurm_knows_get_a_label(tmp_path):
    store = Store(tmp_path / "store")
    xids(store, FAKE + REAL)
    exporter = Exporter(StoreMetrics(store, known_nodes=lambda: set(REAL)))
    assert exporter.refresh()
    series, by_node = exposition(exporter.body)
    for name in PER_NODE:
        assert series[name] <= len(REAL) + 1, name
        assert all((name, n) in by_node for n in REAL), name
    assert by_node[("observe_node_events", "other")] == len(FAKE)  # nothing lost: the counts add up
    assert by_node[("observe_gpu_xid", "other")] == len(FAKE)
    assert b'observe_exporter_series_folded{metric="observe_node_events"} 20000.0' in exporter.body


def test_without_slurm_the_cap_holds_and_known_nodes_keep_their_label(tmp_path):
    store = Store(tmp_path / "store")
    xids(store, REAL)
    metrics = StoreMetrics(store, max_series=100, known_nodes=lambda: None)
    exporter = Exporter(metrics)
    exporter.refresh()
    xids(store, FAKE)  # later: the nodes seen first keep their series
    exporter.refresh()
    series, by_node = exposition(exporter.body)
    for name in PER_NODE:
        assert series[name] <= 100 + 1, name
        assert all((name, n) in by_node for n in REAL), name
    assert sum(v for (name, _), v in by_node.items() if name == "observe_node_events") == len(FAKE) + len(REAL)
    assert b'observe_exporter_series_folded{metric="observe_gpu_xid"} 19904.0' in exporter.body


def test_names_that_are_no_node_names_are_folded(tmp_path):
    store = Store(tmp_path / "store")
    xids(store, ["gpu001", "bad\x1b[2Jname", "x" * 100])
    exporter = Exporter(StoreMetrics(store, known_nodes=lambda: None))
    exporter.refresh()
    _, by_node = exposition(exporter.body)
    assert {n for name, n in by_node if name == "observe_node_events"} == {"gpu001", "other"}


def test_the_cli_sets_the_cap(tmp_path):
    store = Store(tmp_path / "store")
    xids(store, FAKE[:50])
    body = subprocess.run([sys.executable, "-m", "observe.cli", "exporter", "central", "--store", str(store.root),
                           "--max-series", "10", "--once"], check=True, capture_output=True).stdout
    series, _ = exposition(body)
    assert all(series[name] <= 10 + 1 for name in PER_NODE)


def test_slurm_not_answering_keeps_the_list_it_gave(tmp_path):
    store = Store(tmp_path / "store")
    xids(store, REAL + FAKE[:10])
    answers = iter([set(REAL), None])
    metrics = StoreMetrics(store, known_nodes=lambda: next(answers))
    exporter = Exporter(metrics)
    exporter.refresh()
    metrics.known_at -= 3600  # the list is due to be read again, and Slurm does not answer
    exporter.refresh()
    _, by_node = exposition(exporter.body)
    assert {n for name, n in by_node if name == "observe_node_events"} == {*REAL, "other"}
