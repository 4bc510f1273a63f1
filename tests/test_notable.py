"""The notable index (observe/store/notable.py): reads of rare kinds give the segments' rows, whether the
index covers every segment, some, or ones compacted away since."""
from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from observe.ingest import ingest_inputs
from observe.reader import input_files
from observe.simulate import generate
from observe.store import Store, notable
from observe.store.layout import segment_name
from queries.search import search

START = datetime(2026, 11, 20, tzinfo=timezone.utc)
KINDS = ["gpu_xid", "slurm_job_start", "slurm_job_end", "nccl_timeout", "kernel_boot", "ib_link_down", "nccl_error"]
ORDER = ["file_id", "offset", "kind"]


def _direct(store: Store, kinds: list[str]) -> pl.DataFrame:
    """The rows of ``kinds`` read from the segments alone."""
    return store.scan().filter(pl.col("kind").is_in(kinds)).collect().sort(ORDER)


def _indexed(store: Store) -> set[str]:
    """The live segments of the sources the index covers."""
    return {segment_name(store.events, p) for source, _, p in store.live() if source in notable.SOURCES}


def _searched(store: Store, kinds: list[str]) -> pl.DataFrame:
    return search(store, kinds=kinds, copies=True).collect().sort(ORDER)


@pytest.fixture()
def store(fleet_store: Store) -> Store:
    return fleet_store


def test_ingest_leaves_the_index_covering_every_segment(store: Store) -> None:
    index = store.index(notable.NAME).scan().collect()
    assert index.get_column("kind").is_in(notable.BULK).sum() == 0
    covered = set(index.filter(pl.col("kind").is_null()).get_column(notable.SEGMENT))
    assert covered == _indexed(store)
    assert {s for s, _, _ in store.live()} - set(notable.SOURCES) == {"nccl"}  # jobs' output: read from its segments
    assert notable.refresh(store) == 0  # nothing new: no segment read again, those with nothing notable included
    expected = _direct(store, KINDS)
    assert expected.height > 20 and set(expected.get_column("kind")) >= {"slurm_job_start", "kernel_boot"}
    assert _searched(store, KINDS).equals(expected)


def test_an_index_behind_the_table_reads_the_rest_from_the_segments(store: Store, tmp_path: Path) -> None:
    """New segments the index does not cover, and segments compaction replaced, which it still holds rows of."""
    more = tmp_path / "more"
    generate(more, nodes=4, hours=2, seed=6, start=START.replace(hour=8))
    files = input_files([str(more)])
    before = store.index(notable.NAME).snapshot()[0]
    ingest_inputs([(f, {}) for f in files], store)
    assert store.index(notable.NAME).snapshot()[0] > before
    store.compactor.compact_many(store.partitions(), min_segments=1)
    live = _indexed(store)
    covered = notable._covered(store, store.index(notable.NAME).scan())
    assert live - covered and covered - live  # compacted: new segments uncovered, old ones gone
    assert _searched(store, KINDS).equals(_direct(store, KINDS))
    assert notable.refresh(store) == len(live - covered)
    assert notable._covered(store, store.index(notable.NAME).scan()) == live
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def test_a_read_of_plain_lines_does_not_use_the_index(store: Store) -> None:
    assert not notable.wanted(["log"]) and not notable.wanted(["gpu_xid", "unparsed"]) and not notable.wanted(None)
    assert notable.wanted(["gpu_xid"])
    mixed = ["log", "gpu_xid"]
    assert _searched(store, mixed).equals(_direct(store, mixed))


def _last_stats(root: Path) -> set[str]:
    """The columns the table's last commit keeps statistics of."""
    import json

    last = sorted((root / "_delta_log").glob("*.json"))[-1]
    adds = [json.loads(line)["add"] for line in last.read_text().splitlines() if '"add"' in line]
    return {c for a in adds for c in json.loads(a["stats"]).get("maxValues", {})}


def test_the_index_log_keeps_no_text_a_user_wrote(store: Store) -> None:
    """delta-rs keeps every column's min and max in each commit: a forged Xid with a long tail was copied into every
    commit after it. A table written before keeps statistics of the index's own columns from its next write."""
    from deltalake import write_deltalake

    table = store.index(notable.NAME)
    assert _last_stats(table.root) <= set(notable.STATS)
    rows = table.scan().collect()
    shutil.rmtree(table.root)
    write_deltalake(table.uri, rows.to_arrow())  # as observe wrote it before
    assert "message" in _last_stats(table.root)
    table = Store(store.root).index(notable.NAME)
    table.overwrite(rows, notable.STATS)
    assert _last_stats(table.root) <= set(notable.STATS)
    assert table._table().metadata().configuration["delta.dataSkippingStatsColumns"] == ",".join(notable.STATS)


def test_a_damaged_index_is_read_around_and_written_anew(store: Store) -> None:
    """A file of the index gone (an operator's find -delete, a restore that missed it): reads go to the segments,
    and the next refresh writes the index anew from them (it failed every read and refresh before)."""
    for f in (store.root / "index" / notable.NAME).glob("*.parquet"):
        f.unlink()
    assert _searched(store, KINDS).equals(_direct(store, KINDS))
    assert notable.refresh(store) == len(_indexed(store))
    assert notable._covered(store, store.index(notable.NAME).scan()) == _indexed(store)
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def _xid_log(path: Path, node: str) -> Path:
    """A syslog of one Xid line of ``node``'s, three days after the store's hours: one notable row."""
    path.write_text(f"2026-11-23T11:00:00.000000+00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    return path


def test_a_refresh_appends_what_an_ingest_added_and_a_compaction_writes_it_anew(store: Store, tmp_path: Path,
                                                                              monkeypatch) -> None:
    """An ingest's refresh appends the new segments' rows (rewriting the whole index cost each one-line ingest 3.8
    s at 2,560 nodes); once segments it covers are compacted away, or APPENDS files piled up, it is written anew
    in one file. Reads give the segments' rows throughout."""
    table = store.index(notable.NAME)
    files = len(table.snapshot()[1])
    more = tmp_path / "more"
    generate(more, nodes=4, hours=2, seed=6, start=START.replace(hour=8))
    ingest_inputs([(f, {}) for f in input_files([str(more)])], store)
    assert len(table.snapshot()[1]) == files + 1
    assert notable._covered(store, table.scan()) == _indexed(store)
    assert _searched(store, KINDS).equals(_direct(store, KINDS))
    store.compactor.compact_many(store.partitions(), min_segments=1)
    assert notable.refresh(store) > 0 and len(table.snapshot()[1]) == 1
    assert _searched(store, KINDS).equals(_direct(store, KINDS))
    monkeypatch.setattr(notable, "APPENDS", 1)
    assert not notable._piled_up(table)  # just written anew: no append followed
    # a node's own syslog line: the run's copy marks rewrite no segment the index covers (the generator's dmesg
    # without a boot time shares uptime stamps with the earlier runs', and a segment replaced writes it anew too)
    ingest_inputs([(str(_xid_log(tmp_path / "again.log", "gpu091")), {})], store)
    assert len(table.snapshot()[1]) == 2 and notable._piled_up(table)  # one append: the next refresh writes it anew
    ingest_inputs([(str(_xid_log(tmp_path / "third.log", "gpu092")), {})], store)
    assert len(table.snapshot()[1]) == 1 and notable._covered(store, table.scan()) == _indexed(store)
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def test_an_index_written_anew_in_many_small_commits_is_appended_to_after(store: Store, tmp_path: Path,
                                                                         monkeypatch) -> None:
    """(attack-34 F3) A rewrite cut into commits by COMMIT_BYTES (kilobyte records: nvidia-smi's, or a user's
    long lines a rule names) leaves small files, as appends do: taken for appends piled up, they made every later
    refresh, each one-line ingest's, a rewrite that made the same small files again. The commits say which
    they are: the next ingest's refresh appends."""
    monkeypatch.setattr(notable, "COMMIT_BYTES", 1)  # every read of segments its own commit
    monkeypatch.setattr(notable, "SEGMENTS_A_READ", 1)
    table = store.index(notable.NAME)
    shutil.rmtree(table.root)
    store = Store(store.root)
    table = store.index(notable.NAME)
    assert notable.refresh(store) == len(_indexed(store))
    written = set(table.snapshot()[1])
    monkeypatch.setattr(notable, "APPENDS", len(written) - 1)  # fewer than the rewrite's commits
    assert len(written) > notable.APPENDS and not notable._piled_up(table)
    ingest_inputs([(str(_xid_log(tmp_path / "more.log", "gpu093")), {})], store)
    assert written < set(table.snapshot()[1]) and len(table.snapshot()[1]) == len(written) + 1
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


@pytest.mark.parametrize("by", ["COMMIT_ROWS", "COMMIT_BYTES"])
def test_an_index_written_anew_is_written_some_segments_at_a_time(store: Store, monkeypatch, by: str) -> None:
    """Written anew, the index reads SEGMENTS_A_READ segments at a time and commits about COMMIT_ROWS rows or
    COMMIT_BYTES at a time (a 2,560-node month's index at once held 8 GB; 250,000 of its rows, nvidia-smi's
    records of kilobytes, 1.1 GB); each commit covers its segments whole, and reads give the segments' rows."""
    monkeypatch.setattr(notable, "SEGMENTS_A_READ", 1)
    monkeypatch.setattr(notable, by, 1)  # a segment a commit
    shutil.rmtree(store.root / "index" / notable.NAME)
    live = _indexed(store)
    assert notable.refresh(store) == len(live) >= 2
    table = store.index(notable.NAME)
    assert len(table.snapshot()[1]) == len(live) and notable._covered(store, table.scan()) == live
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def test_an_index_of_fewer_columns_is_written_anew_from_the_segments(store: Store, monkeypatch) -> None:
    """An index an older observe wrote, without a column the segments have: written anew a part at a time, a
    part of its kept rows must not fix the columns of the rest (the segments' are read again instead)."""
    monkeypatch.setattr(notable, "SEGMENTS_A_READ", 1)
    monkeypatch.setattr(notable, "COMMIT_ROWS", 1)
    table = store.index(notable.NAME)
    older = table.scan().collect().drop("shape")
    last = sorted(_indexed(store))[-1]
    table.overwrite(older.filter(pl.col(notable.SEGMENT) != last), notable.STATS)  # the last segment not covered
    assert notable.refresh(store) == 1
    assert "shape" in table.scan().collect_schema().names()
    assert notable._covered(store, table.scan()) == _indexed(store)
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def test_two_refreshes_at_once_add_each_segment_once(store: Store, tmp_path: Path, monkeypatch) -> None:
    """Refreshes take turns (attack-32 F1: two that saw the same uncovered segments both appended them, and
    an ingest during a compaction's rewrite appended what the rewrite then wrote again: counts doubled)."""
    import threading
    import time

    more = tmp_path / "more"
    generate(more, nodes=4, hours=2, seed=6, start=START.replace(hour=8))
    monkeypatch.setattr(notable, "refresh", lambda st, wait_s=0: 0)  # the ingest leaves the index behind
    ingest_inputs([(f, {}) for f in input_files([str(more)])], store)
    monkeypatch.undo()
    read = notable._read
    monkeypatch.setattr(notable, "_read", lambda st, segments: time.sleep(0.3) or read(st, segments))
    done = []
    threads = [threading.Thread(target=lambda: done.append(notable.refresh(Store(store.root)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(done)[0] == 0
    rows = store.index(notable.NAME).scan().collect()
    assert not rows.select(pl.struct(notable.SEGMENT, "file_id", "offset", "kind").is_duplicated().any()).item()
    assert _searched(store, KINDS).equals(_direct(store, KINDS))


def test_a_reader_pairs_the_covered_segments_with_the_files_it_lists(store: Store, monkeypatch) -> None:
    """A rewrite's first commit landing between a reader's listing of the index and its reading of the covered
    segments (attack-32 F2: the covered list of every segment was kept under the version of a commit holding a
    few segments' rows, and the others' faults were gone from the reader's answers until the next commit)."""
    reader = Store(store.root)
    expected = _direct(store, KINDS)

    class Killed(BaseException):
        pass

    def first_commit_only() -> None:  # `observe compact` writing the index anew, killed after its first commit
        writer = Store(store.root)
        live = {segment_name(writer.events, p): p for s, _, p in writer.live() if s in notable.SOURCES}
        table = writer.index(notable.NAME)
        monkeypatch.setattr(table, "append", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            notable._written_anew(writer, table, live, None, set())

    monkeypatch.setattr(notable, "SEGMENTS_A_READ", 1)
    monkeypatch.setattr(notable, "COMMIT_ROWS", 1)
    covered, landed = notable._covered, []
    monkeypatch.setattr(notable, "_covered", lambda st, index, version=None: (
        landed or landed.append(first_commit_only()) or True) and covered(st, index, version))
    search(reader, kinds=KINDS, copies=True).collect()
    assert landed and _searched(reader, KINDS).equals(expected)
