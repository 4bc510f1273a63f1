"""A store in an object store, end to end, against a real S3-compatible server on loopback (moto's).

Every command that reads or writes the store runs on ``s3://`` and gives what it gives on a local
directory holding the same logs; other engines (delta-rs, polars' ``scan_delta``) count from the
object store what observe counts.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe.health import hooks
from observe.simulate import generate
from observe.store import Store, notable
from observe.store.layout import segment_name
from queries import pattern_counts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 and a bucket; the store URL's options (the collectors' form)."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3.start()
    host, port = s3.get_host_and_port()
    query = f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in CREDENTIALS.items():
            mp.setenv(k, v)
        fs, _ = pafs.FileSystem.from_uri(f"s3://observe?{query}&allow_bucket_creation=true")
        fs.create_dir("observe")
        yield query
    s3.stop()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small demo cluster's logs (a job that fails among them), ending an hour ago."""
    root = tmp_path_factory.mktemp("s3logs")
    start = (datetime.now(timezone.utc) - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    generate(root, nodes=4, hours=4, seed=3, start=start)  # seed 3: a job fails
    return root


def observe(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The CLI as a user runs it (credentials from the environment)."""
    import os

    done = subprocess.run([sys.executable, "-m", "observe.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **CREDENTIALS})
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def stores(server: str, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same logs ingested into a local store and into one on the S3 server."""
    local = str(tmp_path_factory.mktemp("local") / "store")
    remote = f"s3://observe/fleet?{server}"
    for store in (local, remote):
        observe("ingest", str(logs), "--store", store)
    return local, remote


def _count(store: Store) -> int:
    return store.scan().select(pl.len()).collect().item()


def test_every_reading_command_gives_what_it_gives_on_a_local_store(stores: tuple[str, str]) -> None:
    local, remote = stores
    assert _count(Store(remote)) == _count(Store(local)) > 1000
    there = Store(remote)  # its notable index was written on the server too, covering every segment it takes
    assert notable._covered(there, there.index(notable.NAME).scan()) == {
        segment_name(there.events, p) for source, _, p in there.live() if source in notable.SOURCES}
    failed = pl.read_csv(observe("query", "--store", local, "--kind", "slurm_job_end", "--format", "csv",
                                 "--limit", "0").stdout.encode()).filter(pl.col("severity") != "info")
    explained = (json.loads(observe("explain", j, "--format", "json", "--store", local).stdout)
                 for j in failed.get_column("job_id").cast(pl.String).unique().sort())
    job = next(e["job_id"] for e in explained if e["root_cause"])  # a failure with a cause found
    for args in (["query", "--format", "csv", "--limit", "0"], ["query", "--kind", "gpu_xid"], ["nodes"],
                 ["incidents"], ["explain", job, "--format", "json"], ["stats"]):
        here, there = observe(*args, "--store", local), observe(*args, "--store", remote)
        strip = (lambda t: t.replace(local, "STORE").replace("s3://observe/fleet", "STORE")) if args == ["stats"] else str
        assert strip(there.stdout) == strip(here.stdout), args
    last = Store(local).scan().select(pl.col("ts").max()).collect().item()
    window = ["patterns", "--since", (last - timedelta(minutes=50)).isoformat(), "--until",
              (last + timedelta(seconds=1)).isoformat(), "--baseline", "1d", "--format", "json", "--limit", "0"]
    counted = observe(*window, "--store", remote)  # the baseline counted, and kept on the server
    assert counted.stdout == observe(*window, "--store", local).stdout and counted.stdout.count("\n") >= 1, counted
    assert not counted.stderr and Store(remote).index(pattern_counts.NAME).scan() is not None
    assert observe(*window, "--store", remote).stdout == counted.stdout  # read back from what was kept
    for args in (["query", "--grep", "error", "--format", "csv", "--limit", "0"],  # Ray's readers on the S3 server
                 ["patterns", "--since", "1d", "--all", "--format", "json", "--limit", "0"],
                 ["nodes", "--since", "1d"], ["incidents", "--since", "1d"]):  # these two: no fault in 4 hours
        on_ray = observe(*args, "--store", remote, "--engine", "ray").stdout
        assert on_ray == observe(*args, "--store", local).stdout and on_ray.count("\n") > (1 if args[0] in (
            "query", "patterns") else 0), (args, on_ray)


def test_other_engines_count_from_the_object_store_what_observe_counts(stores: tuple[str, str], server: str) -> None:
    from deltalake import DeltaTable

    store = Store(stores[1])
    options = store.table.options
    assert options == {"aws_region": "us-east-1", "aws_endpoint_url": options["aws_endpoint_url"], "aws_allow_http": "true"}
    uri = f"{store.name}/events"
    assert DeltaTable(uri, storage_options=options).count() == _count(store)
    assert pl.scan_delta(uri, storage_options=options).select(pl.len()).collect().item() == _count(store)


def test_reingest_adds_nothing_and_compaction_retention_keep_the_count(server: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"  # across a midnight: a day for retention to drop
    generate(logs, nodes=2, hours=4, seed=1, start=datetime(2026, 3, 1, 22, tzinfo=timezone.utc))
    remote = f"s3://observe/maintained?{server}"
    for node in ("gpu001", "gpu002"):  # two runs: two segments in each partition to compact
        observe("ingest", str(logs / "nodes" / node), "--store", remote)
    observe("ingest", str(logs / "nodes"), "--store", remote)
    before = _count(Store(remote))
    again = observe("ingest", str(logs / "nodes"), "--store", remote)
    assert f"0 stored, {before} already in the store" in again.stdout.replace(",", "") or " 0 stored" in again.stdout
    assert _count(Store(remote)) == before
    files = len(Store(remote).files(undated=True))
    observe("compact", "--store", remote, "--grace", "0s")
    store = Store(remote)
    assert _count(store) == before and len(store.files(undated=True)) < files
    assert all(f.name.startswith("c-") for f in store.files(undated=True))
    # replaced segments were vacuumed: only what the table names (and its log) is left under events/
    on_s3 = {i.path for i in store.place.files(store.events, recursive=True) if "/_delta_log/" not in i.path}
    assert on_s3 == {str(f) for f in store.files(undated=True)}
    days = sorted(store.scan().select(pl.col("ts").dt.date().drop_nulls().unique().cast(pl.String)).collect().to_series())
    kept = store.scan(since=datetime.fromisoformat(days[-1]).replace(tzinfo=timezone.utc)).select(pl.len())
    undated = store.scan().filter(pl.col("ts").is_null()).select(pl.len())
    expected = kept.collect().item() + undated.collect().item()
    # the two days of logs, and before them the nodes' boots (their dmesg, dated once the directories named the nodes)
    assert days[-2:] == ["2026-03-01", "2026-03-02"] and all(d < "2026-03-01" for d in days[:-2])
    # the cutoff falls within March's partition: its files holding both days are cut in the object store
    assert Store(remote).upkeep.expire(days[-1]) and _count(Store(remote)) == expected < before


def test_collectors_ship_to_the_object_store_and_compact_commits_it(server: str, logs: Path, tmp_path: Path) -> None:
    remote = f"s3://observe/shipped?{server}"
    syslog = logs / "nodes" / "gpu001" / "syslog"
    config = tmp_path / "collector.toml"
    config.write_text(f'node = "gpu001"\nspool = "{tmp_path / "spool"}"\nstore = "{remote}"\npartial_timeout = "0s"\n'
                      f'[[input]]\npath = "{syslog}"\nsource = "syslog"\n')
    observe("collect", "--config", str(config), "--once")
    assert _count(Store(remote)) == 0  # shipped, not committed: no reader sees half a batch
    observe("compact", "--store", remote)
    central = tmp_path / "central"  # the same collector shipping to a directory, for the count
    config.write_text(config.read_text().replace(remote, str(central)).replace(str(tmp_path / "spool"), str(tmp_path / "s2")))
    observe("collect", "--config", str(config), "--once")
    assert _count(Store(remote)) == _count(shipped(central)) > 100
    assert not Store(remote).place.files(Store(remote).root / "incoming", recursive=True)


def test_the_exporter_counts_an_object_store(stores: tuple[str, str]) -> None:
    local, remote = stores

    def metrics(store: str) -> list[str]:
        text = observe("exporter", "central", "--store", store, "--once").stdout
        return sorted(line for line in text.splitlines() if line.startswith(("observe_events_total", "observe_gpu_xid")))

    assert metrics(remote) == metrics(local) and metrics(remote)


def test_an_unreachable_object_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"s3://observe/none?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    for args in (["query", "--store", url], ["ingest", str(tmp_path), "--store", url]):
        (tmp_path / "syslog").write_text("Nov 27 10:00:00 gpu001 kernel: hello\n")
        done = observe(*args, check=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in done.stderr, done.stderr


def test_hooks_refuse_an_object_store(server: str) -> None:
    with pytest.raises(OSError, match="local or shared directory"):
        hooks._probe(Store(f"s3://observe/hooks?{server}"))


def test_a_damaged_object_is_named_and_repair_sets_it_aside(server: str, logs: Path) -> None:
    remote = f"s3://observe/damaged?{server}"
    observe("ingest", str(logs / "nodes" / "gpu001"), "--store", remote)
    store = Store(remote)
    victim = next(f for f in store.files() if "source=syslog" in str(f))
    store.place.put(victim, b"PAR1 cut short by a bad copy")
    done = observe("query", "--store", remote, check=False)
    assert done.returncode == 2 and "damaged segment" in done.stderr and victim.name in done.stderr
    assert "1 segment" in observe("repair", "--store", remote).stdout
    assert store.place.exists(store.root / "damaged" / victim.relative_to(store.events))
    assert observe("query", "--store", remote).returncode == 0
