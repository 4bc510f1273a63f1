"""Store guarantees: idempotent ingest, atomic segments, compaction keeps rows, partition pruning."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
import pyarrow.parquet as pq

from conftest import CORPUS, parse_file
from observe.ingest import ingest
from observe.schema import FIELDS
from observe.store import Store, StoreBusy
from observe.store.compactor import Compactor
from observe.store.table import ORPHAN_HOURS

REAL = CORPUS / "real"
LOGS = [str(REAL / n) for n in ("xid.log", "nccl.log", "slurm.log", "oom.log", "ib_pcie.log")]


def _rows(store: Store) -> pl.DataFrame:
    return store.scan().collect().sort("file_id", "offset")


def test_ingest_twice_adds_nothing(store: Store) -> None:
    first = ingest(LOGS, store)
    before = _rows(store)
    second = ingest(LOGS, store)
    assert first.stored == before.height > 300
    assert second.stored == 0 and second.duplicates == first.records
    assert _rows(store).equals(before)
    assert before.columns == list(FIELDS)


def test_reingest_reads_the_store_once(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run's inputs already hold is read in one scan, not one per input."""
    lines = (REAL / "nccl.log").read_text().splitlines(keepends=True)
    jobs = []
    for i in range(30):
        jobs.append(tmp_path / f"slurm-{1000 + i}.out")
        jobs[-1].write_text("".join(lines[i:i + 20]))
    first = ingest([str(j) for j in jobs], store)
    scans: list[object] = []
    scan = pl.scan_parquet
    monkeypatch.setattr(pl, "scan_parquet", lambda *a, **k: scans.append(a) or scan(*a, **k))
    again = ingest([str(j) for j in jobs], store)
    assert first.stored > 0 and again.stored == 0 and again.duplicates == first.records
    assert len(scans) == 1


def test_appended_bytes_are_ingested_once(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "dmesg"
    lines = (REAL / "xid.log").read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:40]))
    ingest([str(log)], store, source="kernel", node="gpu001")
    log.write_text("".join(lines))
    s = ingest([str(log)], store, source="kernel", node="gpu001")
    assert s.duplicates > 0 and s.stored > 0
    assert _rows(store).height == parse_file(log, "kernel").height


def test_compaction_keeps_rows_identical(store: Store) -> None:
    for log in LOGS:
        ingest([log], store)
    ingest([LOGS[0]], store)  # a second pass adds nothing
    before = _rows(store)
    part = next(p for p in store.partitions() if len(store.segments(p.path)) > 1)
    segs = store.segments(part.path)
    replaced, rows = store.compactor.compact(part)
    assert replaced > 1 and len(store.segments(part.path)) == 1
    after = _rows(store)
    assert after.equals(before)
    rows = pl.read_parquet(store.segments(part.path)[0])
    assert rows.equals(rows.sort("file_id", "offset"))  # in input order: each input's lines together
    assert all(s.exists() for s in segs)  # replaced segments outlive the grace period ...
    assert store.compactor.compact(part) is None and store.upkeep.vacuum(grace_s=0)  # ... and go at a vacuum after it
    assert not any(s.exists() for s in segs) and len(list(part.path.glob("*.parquet"))) == 1


def test_compaction_drops_a_last_line_stored_while_it_was_written(store: Store, tmp_path: Path) -> None:
    """A running job's block-buffered output ends mid-line: the cut line is stored, then the whole
    line at the same offset by the next ingest; compaction keeps only the whole one."""
    log = tmp_path / "syslog"
    log.write_text("Nov 24 10:00:00 gpu001 kernel: first\nNov 24 10:00:01 gpu001 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=")
    ingest([str(log)], store)
    with log.open("a") as f:
        f.write("2, GPU has fallen off the bus.\nNov 24 10:00:02 gpu001 kernel: next\n")
    ingest([str(log)], store)
    assert _rows(store).height == 4  # until compaction, both texts of that offset
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1)
    rows = _rows(store)
    assert rows.get_column("message").to_list() == [
        "first", "NVRM: Xid (PCI:0000:2a:00): 79, pid=2, GPU has fallen off the bus.", "next"]


def test_compaction_in_bounded_time_slices(store: Store) -> None:
    for log in LOGS:
        ingest([log], store)
    before = _rows(store)
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1, file_rows=5)
    assert _rows(store).equals(before)
    part = max((p for p in store.partitions() if p.date != "unknown"),
               key=lambda p: sum(pq.read_metadata(f).num_rows for f in store.segments(p.path)))
    files = store.segments(part.path)
    assert len(files) > 2
    parts = [pl.read_parquet(f) for f in files]
    assert all(p.height and p.equals(p.sort("file_id", "offset")) for p in parts)  # input order within a file
    times = [p.get_column("ts") for p in parts]
    assert all(a.max() <= b.min() for a, b in zip(times, times[1:]))  # files are consecutive time slices


def _live_files(store: Store, part) -> set[Path]:
    return set(store.segments(part.path))


def test_compaction_merges_only_new_segments_and_small_files(store: Store, tmp_path: Path) -> None:
    """A partition that keeps growing is not rewritten whole: the files a compaction wrote that hold at
    least half a file stay as they are, and the next compaction merges the new segments with the rest."""
    log = tmp_path / "syslog"
    lines = [f"Nov 24 10:{m:02d}:{s:02d} gpu001 kernel: line {m} {s}\n" for m in range(10) for s in range(0, 60, 10)]
    log.write_text("".join(lines[:40]))
    ingest([str(log)], store)
    [part] = store.partitions()
    store.compactor.compact(part, min_segments=1, file_rows=10)
    first = _live_files(store, part)
    sizes = {f: pq.read_metadata(f).num_rows for f in first}
    assert sorted(sizes.values()) == [10, 10, 10, 10]
    with log.open("a") as f:
        f.write("".join(lines[40:]))
    ingest([str(log)], store)
    replaced, rows = store.compactor.compact(part, file_rows=10)
    assert (replaced, rows) == (1, 20)  # the new segment alone: no settled file was read again
    after = _live_files(store, part)
    assert first <= after and len(after) == 6
    assert _rows(store).get_column("message").to_list() == [line.split(": ", 1)[1].strip() for line in lines]
    assert store.compactor.compact(part, file_rows=10) is None  # nothing new, every file settled


def test_a_settled_file_holding_a_cut_line_is_merged_with_the_whole_one(store: Store, tmp_path: Path) -> None:
    """The cut last line was compacted into a file that is left as it is, then the whole line arrives in
    a new segment: that file joins the merge, and only the whole line stays (dated and undated alike)."""
    log, out = tmp_path / "syslog", tmp_path / "slurm-7.out"
    log.write_text("Nov 24 10:00:00 gpu001 kernel: first\nNov 24 10:00:01 gpu001 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=")
    out.write_text("gpu001:11:11 [0] NCCL INFO Bootstrap : Using eth0\ngpu001:11:11 [0] NCCL INFO NET/IB : No device")
    ingest([str(log), str(out)], store)
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1, file_rows=2)
    assert sorted(p.date == "unknown" for p in store.partitions()) == [False, True]
    with log.open("a") as f:
        f.write("2, GPU has fallen off the bus.\nNov 24 10:00:02 gpu001 kernel: next\n")
    with out.open("a") as f:
        f.write(" found\ngpu001:11:11 [0] NCCL INFO Using network Socket\n")
    ingest([str(log), str(out)], store)
    for part in store.partitions():
        replaced, _ = store.compactor.compact(part, file_rows=2)
        assert replaced == 2  # the new segment and the settled file holding the cut line
    messages = _rows(store).get_column("message").to_list()
    assert "NVRM: Xid (PCI:0000:2a:00): 79, pid=2, GPU has fallen off the bus." in messages
    assert not any(m.endswith("pid=") for m in messages) and len(messages) == 6, messages
    assert sum("No device found" in m for m in messages) == 1 and not any(m.endswith("No device") for m in messages)


def test_an_undated_partition_is_compacted_in_batches_read_once(store: Store, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Job output without times (one undated partition that grows forever) is merged in batches of
    whole segments, each segment read by one rewrite; rows are kept, duplicates across batches dropped."""
    for job in range(12):
        (tmp_path / f"slurm-{job}.out").write_text(
            "".join(f"gpu{job:03d}:11:11 [{r}] NCCL INFO Channel {r:02d}/0 : 0[0] -> 1[1] via P2P\n" for r in range(8)))
        ingest([str(tmp_path / f"slurm-{job}.out")], store)
    rows = parse_file(tmp_path / "slurm-3.out", "nccl").with_columns(pl.lit("replayed").alias("file_id"))
    store.write(rows)
    store.write(rows)  # one input's rows stored twice, in two segments
    before = _rows(store).unique(subset=["file_id", "offset"], keep="first", maintain_order=True)
    [part] = [p for p in store.partitions() if p.date == "unknown"]
    segments = store.segments(part.path)
    assert len(segments) == 14
    read: list[Path] = []
    rewrite = Compactor.rewrite
    monkeypatch.setattr(Compactor, "rewrite", lambda self, d, segs, n, held=None: read.extend(segs) or rewrite(self, d, segs, n, held))
    replaced, rows_written = store.compactor.compact(part, file_rows=20)
    assert replaced == 14 and sorted(read) == sorted(segments)  # each segment read by one rewrite
    assert rows_written == before.height == 12 * 8 + 8
    assert _rows(store).equals(before)
    sizes = sorted(pq.read_metadata(f).num_rows for f in store.segments(part.path))
    assert sizes[-1] <= 24 and len(sizes) >= 5  # batches of about 20 rows (whole 8-row segments)


@pytest.mark.parametrize("workers", [1, 2])
def test_what_retention_dropped_is_not_stored_again(store: Store, tmp_path: Path, workers: int) -> None:
    """Old files read again (rotated copies kept for months, a cron's ingest of /var/log) bring back
    nothing retention dropped: no record before its cutoff, and no record without a time from a file
    last written before it; a file written since keeps its lines without a time."""
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert store.upkeep.expire(today) == [] and store.upkeep.expired_before().strftime("%Y-%m-%d") == today
    old, new = tmp_path / "kern.log.4", tmp_path / "slurm-9.out"
    old.write_bytes(Path(LOGS[0]).read_bytes())  # dated lines from past years, and lines without a time
    os.utime(old, (0, 1_600_000_000))
    new.write_bytes(Path(LOGS[1]).read_bytes())  # NCCL lines without a time
    done = ingest([str(old), str(new)], Store(store.root), workers=workers)
    kept = _rows(store)
    assert done.records > done.stored > 0 and done.expired == done.records - done.stored
    assert set(kept.get_column("file_id")) == {kept.filter(pl.col("source") == "nccl").item(0, "file_id")}
    assert kept.get_column("ts").null_count() == kept.height


def test_queries_during_compaction_see_each_record_once(store: Store) -> None:
    """Readers in another process query while compactions (re)write the store's partitions."""
    for i in range(3):
        for log in LOGS:
            ingest([log], store)
    expected = _rows(store).height
    script = (
        "import sys, time; from observe.store import Store\n"
        "s = Store(sys.argv[1]); bad = 0; end = time.time() + float(sys.argv[2])\n"
        "while time.time() < end:\n"
        "    df = s.scan().select('file_id', 'offset', 'raw').collect()\n"
        "    bad += df.height != int(sys.argv[3]) or df.unique().height != df.height\n"
        "print(bad)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    reader = subprocess.Popen([sys.executable, "-c", script, str(store.root), "12", str(expected)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = 0
    while reader.poll() is None:
        for part in store.partitions():
            store.compactor.compact(part, min_segments=1, file_rows=5 + rounds % 40)
        rounds += 1
    out, err = reader.communicate()
    assert reader.returncode == 0, err
    assert rounds >= 3 and out.strip() == "0"  # each round: a compaction commit per partition


def test_one_compaction_at_a_time(store: Store) -> None:
    ingest(LOGS[:1], store)
    script = ("import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
              "print('locked', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(store.root / ".compact.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreBusy):
            store.compactor.compact(store.partitions()[0], min_segments=1)
    finally:
        holder.kill()
        holder.wait()


def test_a_compaction_that_crashed_before_its_commit_changes_nothing(store: Store) -> None:
    """Its outputs are written and durable but no commit names them: readers never see them, and a
    vacuum deletes them once they are older than any write in flight could be."""
    ingest(LOGS[:2], store)
    ingest(LOGS[2:], store)
    before = _rows(store)
    part = max(store.partitions(), key=lambda p: len(store.segments(p.path)))
    segs = store.segments(part.path)
    df = pl.read_parquet([str(s) for s in segs])
    [(crashed, _)] = store.durable([store.write_file(df, part.path, "c-crash.parquet", durable=False)])
    assert _rows(store).equals(before)
    store.compactor.compact(part, min_segments=1)
    store.upkeep.vacuum(grace_s=0)
    assert _rows(store).equals(before) and crashed.exists()  # too young to be sure it is a stray
    old = time.time() - (ORPHAN_HOURS + 1) * 3600
    os.utime(crashed, (old, old))
    store.upkeep.vacuum(grace_s=0)
    assert _rows(store).equals(before) and not crashed.exists()


def test_killed_writer_leaves_no_partial_file(store: Store, tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    line = "[2024-10-22T12:26:42.994] sched: Allocate JobId=127441 NodeList=c014 #CPUs=2 Partition=gpu\n"
    big.write_text(line * 400_000)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for delay in (0.5, 1.0, 1.5, 2.5):
        proc = subprocess.Popen([sys.executable, "-m", "observe.cli", "ingest", str(big), "--store", str(store.root)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for f in store.files():
            pq.read_metadata(f)  # every visible segment is complete
        assert all(p.name.startswith(".") for p in store.events.rglob("*.tmp"))
    ingest([str(big)], store)
    assert _rows(store).height == 400_000


def test_time_filter_prunes_partitions(store: Store) -> None:
    ingest(LOGS, store)
    since = datetime(2026, 1, 1, tzinfo=timezone.utc)
    files = store.files(since=since)
    assert files and all("date=2026" in str(f) for f in files)
    got = store.scan(since=since).collect()
    assert got.height and got.get_column("ts").min() >= since
    assert store.files(sources=["nccl"]) and all("source=nccl" in str(f) for f in store.files(sources=["nccl"]))


def test_inputs_sharing_a_first_line_lose_nothing(store: Store, tmp_path: Path) -> None:
    banner = "NCCL version 2.21.5+cuda12.4\n"
    for name, body in [("a.log", "gpu001:1:1 [0] NCCL INFO first\n"), ("b.log", "gpu002:2:2 [0] NCCL INFO second\n")]:
        (tmp_path / name).write_text(banner + body)
    paths = [str(tmp_path / "a.log"), str(tmp_path / "b.log")]
    ingest(paths, store, source="nccl")
    again = ingest(paths, store, source="nccl")
    rows = _rows(store)
    assert rows.get_column("file_id").n_unique() == 2
    assert sorted(rows.get_column("message")) == sorted([banner.strip(), banner.strip(), "NCCL INFO first", "NCCL INFO second"])
    assert again.stored == 0
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1)
    assert _rows(store).height == 4


def test_rotated_copy_is_the_same_input(store: Store, tmp_path: Path) -> None:
    text = (REAL / "slurm.log").read_text()
    (tmp_path / "slurmctld.log").write_text(text)
    ingest([str(tmp_path / "slurmctld.log")], store, node="ctl")
    (tmp_path / "slurmctld.log").rename(tmp_path / "slurmctld.log.1")
    again = ingest([str(tmp_path / "slurmctld.log.1")], store, node="ctl")
    assert again.stored == 0 and again.duplicates > 40


def test_writer_keeps_chunks_within_its_budget_and_writes_each_partition_once(store: Store) -> None:
    """Rows waiting in the writer keep their chunk alive: past the budget, every partition holding the
    oldest chunk's rows is written (freeing it); within it, each partition is one segment however many
    chunks touched it; every row is written once."""
    from observe.schema import conform
    from observe.store import buffered_parts

    day = datetime(2026, 11, 1, tzinfo=timezone.utc)
    sent = []
    for unit in range(6):
        n = 2_000  # every chunk touches three days
        chunk = pl.DataFrame({"raw": [f"unit {unit} line {i} " + "x" * 40 for i in range(n)], "offset": range(n)})
        sent.append(conform(chunk.with_columns(
            (pl.lit(day, dtype=pl.Datetime("us", "UTC")) + pl.duration(days=pl.col("offset") % 3 * 31)).alias("ts"),
            pl.lit("syslog").alias("source"), pl.lit("log").alias("kind"), pl.col("raw").alias("message"),
            pl.lit(f"f{unit}").alias("file_id"))))
    tight = store.writer(max_rows=10_000_000, budget_bytes=2_500)
    for events in sent:
        tight.add_parts(buffered_parts(events), 1_000)
        assert sum(tight.held.values()) <= 2_500
    tight.close()
    assert tight.segments == 2 * 3  # the budget filled after the 3rd and the 6th chunk: all three months each time
    expected = pl.concat(sent).sort("file_id", "offset")
    assert _rows(store).sort("file_id", "offset").equals(expected)
    roomy = Store(store.root.parent / "roomy").writer(max_rows=10_000_000)
    for events in sent:
        roomy.add_parts(buffered_parts(events), 1_000)
    roomy.close()
    assert roomy.segments == 3  # one per day
    for f in store.files():  # plain Parquet strings on disk, whatever the writer was handed (no string views)
        schema = pq.ParquetFile(f).schema
        message = schema.column(schema.names.index("message"))
        assert (message.physical_type, str(message.logical_type)) == ("BYTE_ARRAY", "String")


def test_compaction_keeps_one_of_rows_stored_twice(store: Store) -> None:
    """The same rows written twice (two collectors, a replayed spool) are one set after compaction."""
    rows = parse_file(Path(LOGS[0]), "kernel").with_columns(pl.lit("f0").alias("file_id"))
    store.write(rows)
    store.write(rows)
    assert _rows(store).height == 2 * rows.height
    for part in store.partitions():
        store.compactor.compact(part, min_segments=1)
    assert _rows(store).height == rows.height


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """observe.store.atomic_file: the old content until the new one is whole; a failure part-way leaves
    the old file and no hidden temporary behind."""
    from observe.store import atomic_file, write_atomic

    target = tmp_path / "index.parquet"
    write_atomic(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write(b"half of the new")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.parquet"]
    with atomic_file(target) as f:
        f.write(b"new")
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["index.parquet"]


def test_a_compaction_slice_is_bounded_by_bytes_whatever_its_rows(tmp_path: Path) -> None:
    """Lines of a megabyte make slices of a few rows, not of 10,000 (10 GB, on each of a compaction's threads:
    attack-27 r7)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from observe.store.compaction import rows_in

    pq.write_table(pa.table({"message": [f"{i:06d}" + "x" * 100_000 for i in range(50)]}), tmp_path / "big.parquet",
                   compression="zstd", use_dictionary=False)
    assert 5 <= rows_in([pq.read_metadata(tmp_path / "big.parquet")], 1_000_000) <= 15
