"""The analyses on Ray (a local ``ray.init`` with this machine's cores) give what the embedded polars
engine gives, frame for frame, on the same generated store; Ray Data counts the table as observe does."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from observe.ingest import ingest_inputs
from observe.simulate import generate
from observe.store import Store
from queries.engine import Engine, EngineError, Order, engine
from queries.incidents import incidents, kinds_read as incident_kinds
from queries.nodes import GPU_ORDER, NODE_ORDER, kinds_read, rank_gpus, rank_nodes
from queries.search import ORDER, Match, first

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A week of a 12-node demo cluster (faults on several nodes and GPUs), and a local Ray."""
    root = tmp_path_factory.mktemp("engine")
    start = (datetime.now(timezone.utc) - timedelta(days=7)).replace(minute=0, second=0, microsecond=0)
    manifest = generate(root / "logs", nodes=12, hours=7 * 24, seed=4, start=start)
    s = Store(root / "store")
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], s)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield s
    ray.shutdown()


MATCHES = [Match(), Match(kinds=["gpu_xid", "ib_link_down", "oom_kill"]), Match(sources=["kernel"], undated=True),
           Match(grep="(?i)error"), Match(copies=True, sources=["syslog", "kernel"])]


@pytest.mark.parametrize("match", MATCHES, ids=["all", "kinds", "kernel-undated", "grep", "copies"])
def test_a_search_on_ray_is_the_embedded_search(store: Store, match: Match) -> None:
    here = Engine("polars").by_node(store, match, first, Order(ORDER))
    there = Engine("ray").by_node(store, match, first, Order(ORDER))
    assert here.height > 0
    assert_frame_equal(there, here)


@pytest.mark.parametrize("engine_name", ["polars", "ray"])
def test_marks_stale_in_a_day_are_decided_again_there_on_either_engine(store: Store, engine_name: str) -> None:
    """Where the store says marks are stale (a day of kernel rows), each engine decides copies from the rows
    read there and reads the marks elsewhere: the events of deciding everywhere."""
    from observe.store.copy_marks import reach

    last = store.scan(["kernel"]).select(pl.col("ts").max()).collect().item()
    day = int((last - timedelta(days=1)).timestamp() * 1e6)
    stale = tuple(reach(store, {("kernel", day - 86_400_000_000, day)}).values())
    everywhere = Engine("polars").by_node(store, Match(sources=["kernel", "syslog"]), first, Order(ORDER))
    there = Engine(engine_name).by_node(store, Match(sources=["kernel", "syslog"], marked=stale), first, Order(ORDER))
    assert everywhere.height > 0
    assert_frame_equal(there, everywhere)


@pytest.mark.parametrize("buckets", [0, 1, 5])
def test_flaky_nodes_and_gpus_on_ray_are_the_embedded_ones(store: Store, buckets: int) -> None:
    for analysis, order in ((rank_nodes, NODE_ORDER), (rank_gpus, GPU_ORDER)):
        here = Engine("polars").by_node(store, Match(), analysis, order)
        there = Engine("ray", buckets=buckets).by_node(store, Match(), analysis, order)
        assert here.height >= 2
        assert_frame_equal(there, here)


def test_flaky_nodes_from_their_kinds_alone_are_those_from_every_event(store: Store) -> None:
    """What `observe nodes` reads (the causes' and drains' kinds) ranks as every event would,
    copies of one record and all (one_per_record then sees fewer rows)."""
    narrow = Match(kinds=kinds_read())
    assert narrow.rows(store, narrow.files(store)).select(pl.len()).collect().item() \
        < store.scan().select(pl.len()).collect().item() / 20
    for analysis, order in ((rank_nodes, NODE_ORDER), (rank_gpus, GPU_ORDER)):
        everything = Engine("polars").by_node(store, Match(), analysis, order)
        assert everything.height >= 2
        assert_frame_equal(Engine("polars").by_node(store, narrow, analysis, order), everything)
        assert_frame_equal(Engine("ray").by_node(store, narrow, analysis, order), everything)


def test_incidents_from_their_kinds_alone_on_either_engine_are_those_from_every_event(store: Store) -> None:
    everything = Engine("polars").together(store, Match(), incidents)
    assert everything.height >= 2 and everything.get_column("jobs").list.len().sum() > 0
    narrow = Match(kinds=incident_kinds())
    assert_frame_equal(Engine("polars").together(store, narrow, incidents), everything)
    assert_frame_equal(Engine("ray").together(store, narrow, incidents), everything)


def test_the_exporters_full_count_on_ray_is_the_embedded_one(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from observe.exporter import central

    monkeypatch.setattr(central, "READ_FILES", 3)  # shares of 3 segments: several tasks
    later = store.scan().select(pl.col("ts").max()).collect().item().timestamp() + 86400

    def samples(engine: Engine) -> list:
        metrics = central.StoreMetrics(store, clock=lambda: later, known_nodes=lambda: None, engine=engine)
        metrics.refresh()
        return sorted((s.name, tuple(sorted(s.labels.items())), s.value) for f in metrics.collect() for s in f.samples)

    assert len(store.files(undated=True)) > 3
    here = samples(Engine("polars"))
    assert any(name == "observe_gpu_xid_total" and value > 0 for name, _, value in here)
    assert samples(Engine("ray")) == here


def test_compaction_on_ray_writes_what_the_embedded_compaction_writes(tmp_path: Path) -> None:
    """Two stores of the same logs; one compacted here, the other by `observe compact --engine ray`."""
    start = datetime(2026, 11, 20, 22, tzinfo=timezone.utc)  # across a midnight: partitions of two days
    manifest = generate(tmp_path / "logs", nodes=3, hours=4, seed=5, start=start)
    inputs = [(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files]
    here, there = Store(tmp_path / "here"), Store(tmp_path / "there")
    for s in (here, there):
        ingest_inputs(inputs, s, workers=2)
    assert len(here.partitions()) >= 6
    here.compactor.compact_many(here.partitions())
    here.upkeep.vacuum(grace_s=0)
    done = subprocess.run([sys.executable, "-m", "observe.cli", "compact", "--engine", "ray", "--grace", "0s",
                           "--store", str(there.root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    key = ["file_id", "offset", "kind"]
    for s in (here, there):
        assert all(f.name.startswith("c-") for f in s.files(undated=True))
    assert sorted(f.relative_to(there.root).parent for f in there.files(undated=True)) == \
        sorted(f.relative_to(here.root).parent for f in here.files(undated=True))
    assert_frame_equal(there.scan(undated=True).collect().sort(key), here.scan(undated=True).collect().sort(key))


def test_ray_data_counts_the_table_as_observe_does(store: Store) -> None:
    import ray.data

    assert ray.data.read_delta(str(store.events)).count() == store.scan().select(pl.len()).collect().item()


def test_the_engine_is_chosen_by_option_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVE_ENGINE", "ray")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert engine() == Engine("ray", "ray://head:10001")
    assert engine("polars") == Engine("polars", "ray://head:10001")
    with pytest.raises(EngineError, match="unknown engine 'spark'"):
        engine("spark")


def test_the_cli_prints_the_same_on_either_engine(store: Store) -> None:
    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "observe.cli", *args, "--store", str(store.root)],
                              capture_output=True, text=True, env={**os.environ, "OBSERVE_ENGINE": "polars"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    last = store.scan().select(pl.col("ts").max()).collect().item()
    window = ["--since", (last - timedelta(days=2)).isoformat(), "--until", (last + timedelta(seconds=1)).isoformat()]
    for args in (["nodes", "--since", "30d", "--format", "json"], ["query", "--kind", "gpu_xid", "--format", "csv"],
                 ["query", "--count-by", "kind,node", "--limit", "0", "--format", "json"],
                 ["incidents", "--since", "30d", "--format", "json"],
                 ["patterns", *window, "--baseline", "3d", "--format", "json", "--limit", "0"],
                 ["patterns", "--since", "8d", "--all", "--format", "json", "--limit", "0"]):
        here = run(*args)
        shutil.rmtree(store.root / "index" / "patterns", ignore_errors=True)  # Ray's tasks count the baseline again
        assert run(*args, "--engine", "ray") == here and here.count("\n") > 1
