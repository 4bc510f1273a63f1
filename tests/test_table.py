"""The store as a Delta Lake table: other engines count exactly what observe counts, after ingest,
during and after compaction, after retention; collectors' segments become part of it in one central
commit; a store from before the table converts without losing an event."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from conftest import CORPUS
from observe.ingest import ingest
from observe.schema import conform, stored_raw
from observe.store import LegacyLayout, Store
from observe.store.convert import ConvertError, convert
from queries import jobs

LOGS = [str(CORPUS / "real" / n) for n in ("xid.log", "nccl.log", "slurm.log", "oom.log", "ib_pcie.log")]


def _observe_count(store: Store) -> int:
    return store.scan(undated=True).select(pl.len()).collect().item()


def _engines(store: Store) -> dict[str, int]:
    """What three other readers count: delta-rs itself, polars' scan_delta, DuckDB over delta-rs's dataset."""
    table = str(store.events)
    events = DeltaTable(table).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    return {"deltalake": DeltaTable(table).count(),
            "polars": pl.scan_delta(table).select(pl.len()).collect().item(),
            "duckdb": duckdb.sql("SELECT count(*) FROM events").fetchall()[0][0]}


def _agree(store: Store) -> int:
    n = _observe_count(store)
    assert _engines(store) == {"deltalake": n, "polars": n, "duckdb": n}
    return n


def test_other_engines_count_what_observe_counts(store: Store) -> None:
    for log in LOGS:
        ingest([log], store)
    ingest(LOGS[:2], store)  # stored already: adds nothing
    n = _agree(store)
    assert n > 100
    # a polars user rebuilds each line with observe's expression (headers kept as their shapes)
    xids = pl.scan_delta(str(store.events)).filter(pl.col("kind") == "gpu_xid").select(stored_raw().alias("raw")).collect()
    ours = store.scan().filter(pl.col("kind") == "gpu_xid").select("raw").collect()
    assert sorted(xids.get_column("raw").to_list()) == sorted(ours.get_column("raw").to_list())

    for part in store.partitions():  # every step of a compaction: replaced files stay on disk ...
        store.compactor.compact(part, min_segments=1, file_rows=5)
        assert _agree(store) == n
    on_disk = sum(1 for _ in store.events.rglob("*.parquet"))
    assert on_disk > len(store.files())  # ... but no reader counts them twice
    assert store.upkeep.vacuum(grace_s=0) > 0
    assert sum(1 for _ in store.events.rglob("*.parquet")) == len(store.files()) and _agree(store) == n

    dated = [p for p in store.partitions() if p.date != "unknown"]
    undated = store.scan().filter(pl.col("ts").is_null()).select(pl.len()).collect().item()
    assert dated and undated
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert store.upkeep.expire(today) == dated  # undated files written today stay ...
    assert _agree(store) == undated and all(p.date == "unknown" for p in store.partitions())
    assert {p.date for p in store.upkeep.expire("2100-01-01")} == {"unknown"}  # ... until written before the cutoff
    assert _agree(store) == 0


def test_the_job_index_is_a_table_too(store: Store) -> None:
    ingest([str(CORPUS / "real" / "slurm.log")], store)
    runs = jobs.write_index(store)
    assert runs > 0 and jobs.write_index(store) == runs  # rewritten whole: one commit, the same rows
    index = str(store.root / "index" / "jobs")
    assert DeltaTable(index).count() == runs == pl.scan_delta(index).select(pl.len()).collect().item()
    assert DeltaTable(index).version() == 1


def test_ingest_commits_or_shows_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest that dies between making its segments durable and committing them leaves no event
    for any reader; the next ingest of the same input stores every record, once."""
    expected = _observe_count(_ingested(Store(tmp_path / "clean"), LOGS[:1]))
    store = Store(tmp_path / "store")

    def crash(files):
        raise OSError("killed before the commit")

    with monkeypatch.context() as m:
        m.setattr(store.table, "append", crash)
        with pytest.raises(OSError, match="killed"):
            ingest(LOGS[:1], store)
    assert list(store.events.rglob("*.parquet")) and _observe_count(store) == 0
    ingest(LOGS[:1], store)
    assert _agree(store) == expected
    assert store.scan().select("file_id", "offset").collect().is_duplicated().sum() == 0


def _ingested(store: Store, logs: list[str]) -> Store:
    ingest(logs, store)
    return store


def test_collectors_segments_join_the_table_in_one_central_commit(tmp_path: Path) -> None:
    spool, central = Store(tmp_path / "spool"), Store(tmp_path / "central")
    ingest(LOGS[:2], spool)  # stands for what collectors spooled
    rows = _observe_count(spool)
    inbox = central.root / "incoming" / "events"
    for seg in spool.files():
        target = inbox / seg.relative_to(spool.events)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(seg.read_bytes())
    assert _observe_count(central) == 0  # shipped, not yet committed
    version = central.table.snapshot()[0]
    assert central.incoming.adopt() == len(spool.files())
    assert central.table.snapshot()[0] == version + 2  # the table's creation, then one commit for all
    assert _agree(central) == rows and not list(inbox.rglob("*.parquet"))
    seg = central.files()[0]  # a collector that crashed after its copy ships the segment again
    again = inbox / seg.relative_to(central.events)
    again.parent.mkdir(parents=True, exist_ok=True)
    again.write_bytes(seg.read_bytes())
    assert central.incoming.adopt() == 0 and _agree(central) == rows


def test_ingest_and_compaction_at_once_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """An ingest commits new segments while a compaction swaps others in the same partitions: both
    commits go through (a compaction's removes do not conflict with appends), every record once."""
    expected = _observe_count(_ingested(Store(tmp_path / "clean"), LOGS))
    store = _ingested(Store(tmp_path / "store"), LOGS[:3])
    code = ("import sys; from observe.ingest import ingest; from observe.store import Store; "
            "[ingest([log], Store(sys.argv[1])) for log in sys.argv[2:]]")
    writer = subprocess.Popen([sys.executable, "-c", code, str(store.root), *LOGS[3:], *LOGS[:3]],
                              stderr=subprocess.PIPE, text=True)
    rounds = 0
    while writer.poll() is None or rounds == 0:
        store.compactor.compact_many(store.partitions(), min_segments=1, file_rows=7 + rounds, wait_s=60)
        rounds += 1
    assert writer.wait() == 0, writer.stderr.read()
    assert _agree(store) == expected
    assert store.scan(undated=True).select("file_id", "offset").collect().is_duplicated().sum() == 0


WRITER = """
import sys, polars as pl
from datetime import datetime, timezone
from observe.store import Store
Store(sys.argv[1]).write(pl.DataFrame({"ts": [datetime.now(timezone.utc)], "node": [sys.argv[2]], "source": ["health"],
                                       "kind": ["health_check"], "message": ["m"], "raw": ["m"],
                                       "file_id": ["health:" + sys.argv[2]], "offset": [1]}))
"""


def test_hooks_writing_to_a_new_store_at_once_all_land(tmp_path: Path) -> None:
    """Every node's hook writes its first event to a store no one wrote before, at the same moment:
    the table is created once, every commit lands (two creators racing once broke the others' commits)."""
    for trial in range(3):
        root = tmp_path / f"store{trial}"
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), f"node{i}"], stderr=subprocess.PIPE, text=True)
                 for i in range(6)]
        assert all(p.wait(timeout=120) == 0 for p in procs), [p.stderr.read()[-300:] for p in procs]
        assert sorted(Store(root).scan().collect().get_column("node")) == [f"node{i}" for i in range(6)]
        assert _agree(Store(root)) == 6


def test_a_commit_that_loses_is_tried_again(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltalake.exceptions import CommitFailedError

    ingest(LOGS[:1], store)
    n = _agree(store)
    real, failures = DeltaTable.create_write_transaction, []

    def lose_once(self, *args, **kwargs):
        if not failures:
            failures.append(1)
            raise CommitFailedError("Protocol changed since last commit")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", lose_once)
    ingest(LOGS[1:2], store)
    assert failures and _agree(store) > n
    assert store.scan(undated=True).select("file_id", "offset").collect().is_duplicated().sum() == 0


def test_an_index_write_that_loses_is_tried_again_with_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index is written from its rows a slice at a time (Arrow's copy of them whole held 0.3 GB more at 2,560
    nodes): a commit tried again after losing to another writes every row again, not what the first try left."""
    import deltalake
    from deltalake.exceptions import CommitFailedError

    from observe.store import table as table_module

    real = deltalake.write_deltalake
    monkeypatch.setattr(table_module, "INDEX_GROUP_ROWS", 7)
    rows = pl.DataFrame({"kind": [f"k{i % 5}" for i in range(100)], "n": list(range(100))})
    store = Store(tmp_path / "store")
    store.make_dirs(store.root / "index")
    index, seen = store.index("test"), []

    def lose_first(uri, data, **kwargs):
        table = data.read_all()
        seen.append(table.num_rows)
        if len(seen) == 1:
            raise CommitFailedError("Protocol changed since last commit")
        return real(uri, table, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", lose_first)
    index.overwrite(rows, ("kind",))
    assert seen == [100, 100] and index.scan().collect().sort("n").equals(rows)


def test_an_index_keeps_its_times_and_offsets_as_deltas(tmp_path: Path) -> None:
    """An index's rows are a file's lines in order: its times and offsets are written as deltas, not as dictionaries
    of distinct values (delta-rs's default held the real-shaped syslog's notable index 17% larger)."""
    import pyarrow.parquet as pq

    store = Store(tmp_path / "store")
    store.make_dirs(store.root / "index")
    at = pl.datetime_range(datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 2, tzinfo=timezone.utc), "7s",
                           eager=True, time_zone="UTC")
    rows = pl.DataFrame({"kind": "gpu_xid", "ts": at, "offset": pl.int_range(0, len(at) * 93, 93, eager=True)})
    index = store.index("test")
    index.overwrite(rows, ("kind",))
    footer = pq.read_metadata(next((store.root / "index" / "test").glob("*.parquet"))).row_group(0)
    encodings = {footer.column(i).path_in_schema: footer.column(i).encodings for i in range(footer.num_columns)}
    assert "DELTA_BINARY_PACKED" in encodings["ts"] and "DELTA_BINARY_PACKED" in encodings["offset"], encodings
    assert "RLE_DICTIONARY" in encodings["kind"] and index.scan().collect().equals(rows)


def _legacy(tmp_path: Path) -> tuple[Path, int]:
    """A store in the layout observe wrote before the table: segments listed by directory, one
    compaction note whose outputs all exist (its replaced segments are gone from the reader's view)."""
    store = Store(tmp_path / "old")
    for log in LOGS:
        ingest([log], store)
    rows = _observe_count(store)
    part = max(store.partitions(), key=lambda p: len(store.segments(p.path)))
    segs = store.segments(part.path)
    merged = pl.read_parquet([str(s) for s in segs])
    (part.path / "c-0001.json").write_text(json.dumps({"replaces": [s.name for s in segs],
                                                        "outputs": ["c-0001-0000.parquet"]}))
    merged.write_parquet(part.path / "c-0001-0000.parquet")
    (part.path / "c-0002.json").write_text(json.dumps({"replaces": ["c-0001-0000.parquet"],
                                                        "outputs": ["c-0002-0000.parquet", "c-0002-0001.parquet"]}))
    merged.head(2).write_parquet(part.path / "c-0002-0000.parquet")  # a compaction that never completed
    for f in (store.events / "_delta_log").iterdir():
        f.unlink()
    (store.events / "_delta_log").rmdir()
    return store.root, rows


def test_a_first_write_in_progress_is_no_old_store(tmp_path: Path) -> None:
    """A reader that looks while the first writer has made its partition directory and temporary file,
    but not yet the table, sees an empty store, not one from before the table."""
    store = Store(tmp_path / "store")
    tmp = store.write_partition("health", "2026-01-01", pl.DataFrame({"source": ["health"], "message": ["m"], "raw": ["m"],
                                                                      "file_id": ["f"], "offset": [1]}).pipe(conform),
                                durable=False)
    assert tmp.exists() and not store.table.exists()
    assert Store(store.root).scan().collect().height == 0


def test_a_store_from_before_the_table_converts_and_loses_nothing(tmp_path: Path) -> None:
    root, rows = _legacy(tmp_path)
    with pytest.raises(LegacyLayout, match="observe convert"):
        Store(root).scan().collect()
    cli = [sys.executable, "-m", "observe.cli"]
    refused = subprocess.run([*cli, "query", "--store", str(root)], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "observe convert" in refused.stderr
    done = subprocess.run([*cli, "convert", "--store", str(root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{rows} events" in done.stdout
    store = Store(root)
    assert _agree(store) == rows
    assert not list(store.events.rglob("c-*.json")) and not list(store.events.rglob("c-0002-*.parquet"))
    with pytest.raises(ConvertError, match="already"):
        convert(store)


def test_commits_give_each_files_time_range_and_readers_skip_by_it(tmp_path: Path) -> None:
    """A commit gives its file's first and last time, widened to the log's whole milliseconds: observe
    and DuckDB over the table read only the files a window can hold rows of, and count what they count
    without the ranges (a row in the microseconds the widening covers included); a segment a collector
    shipped has its range from its footer; a file without a time has none and is read as before."""
    day = datetime(2026, 11, 20, tzinfo=timezone.utc)
    early, late, edge = day.replace(hour=1), day.replace(hour=5), day.replace(hour=5, microsecond=123456)

    def rows(*times: datetime | None) -> pl.DataFrame:
        return conform(pl.DataFrame([{"ts": t, "node": "gpu001", "source": "syslog", "message": f"m{i}",
                                      "file_id": f"f{i}{t}", "offset": 0} for i, t in enumerate(times)]))

    store = Store(tmp_path / "store")
    [first] = store.write(rows(early, early.replace(minute=30)))
    [second] = store.write(rows(late, edge))
    [undated] = store.write(rows(None))
    [shipped] = store.write(rows(day.replace(hour=9)), deliver=True)
    assert store.incoming.adopt() == 1
    stats = {a["path"]: json.loads(a["stats"]) for line in (store.events / "_delta_log").glob("*.json")
             for a in map(lambda t: json.loads(t).get("add"), line.read_text().splitlines()) if a}
    assert stats[second.relative_to(store.events).as_posix()] == {
        "numRecords": 2, "nullCount": {"ts": 0},
        "minValues": {"ts": "2026-11-20T05:00:00.000Z"}, "maxValues": {"ts": "2026-11-20T05:00:00.124Z"}}
    assert stats[undated.relative_to(store.events).as_posix()] == {"numRecords": 1, "nullCount": {"ts": 1}}
    shipped_stats = stats[next(p for p in stats if p.endswith(shipped.name))]
    assert shipped_stats["minValues"] == shipped_stats["maxValues"] == {"ts": "2026-11-20T09:00:00.000Z"}

    assert store.files(since=day.replace(hour=4), until=day.replace(hour=6)) == [second]
    assert store.files(until=day.replace(hour=2)) == [first]
    assert len(store.files(since=day.replace(hour=2), until=day.replace(hour=23))) == 2  # second, shipped
    later = {second, *store.files(since=day.replace(hour=8))}  # and the shipped one
    assert set(store.files(since=edge.replace(microsecond=123999))) == set(store.files(since=edge)) == later
    assert len(store.files(since=day, undated=True)) == 4
    at_edge = store.scan(since=edge).filter(pl.col("ts") >= edge).select(pl.len()).collect().item()
    events = DeltaTable(str(store.events)).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    in_duckdb = duckdb.sql("SELECT count(*) FROM events WHERE ts >= TIMESTAMPTZ '2026-11-20 05:00:00.123456+00'").fetchall()[0][0]
    assert at_edge == in_duckdb == 2  # the edge row and the shipped one
    assert duckdb.sql("SELECT count(*) FROM events WHERE ts IS NULL").fetchall()[0][0] == 1
    assert duckdb.sql("SELECT count(*) FROM events WHERE message LIKE 'm%'").fetchall()[0][0] == 6  # no statistics: read
    assert _agree(store) == 6
