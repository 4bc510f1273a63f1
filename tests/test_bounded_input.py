"""No input exhausts memory or time: a gzip of one endless line, a decompression bomb and a plain file
of one endless line are read in bounded memory (the whole process under ``ulimit -v``), their lines
stored cut as the collector stores them, and the other inputs of the run stored with them."""
from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from observe.compressed import GzipInput
from observe.ingest import ingest
from observe.reader import MAX_RECORD_BYTES, input_files
from observe.store import Store

PATTERN = bytes(range(33, 127)) + b"0123456789abcd"  # 108 bytes, no newline: gzip makes ~300:1 of it
OTHER = "[rank0]: NCCL WARN another user's line\n"
# Address space, not memory used: polars' and the parse threads' reservations make a one-line ingest's
# VmPeak 2.7 GiB and a 126 MB file's 3.5 GiB (measured); a 768 MiB line buffered whole does not fit
VIRTUAL_BYTES = 5 << 30


def _members(path: Path, piece: bytes, mib_each: int, members: int) -> None:
    """A gzip of ``members`` members, each ``mib_each`` MiB of ``piece`` repeated (``cat a.gz a.gz``)."""
    member = gzip.compress(piece * ((mib_each << 20) // len(piece)), 6)
    with open(path, "wb") as f:
        for _ in range(members):
            f.write(member)


def _ingest_limited(tmp: Path, *paths: Path) -> subprocess.CompletedProcess:
    """``observe ingest`` in its own process, its address space limited to VIRTUAL_BYTES."""
    code = ("import resource, sys; from observe.cli import main; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({VIRTUAL_BYTES}, {VIRTUAL_BYTES})); "
            f"sys.argv = ['observe', 'ingest', *{[str(p) for p in paths]!r}, '--store', {str(tmp / 'store')!r}, "
            "'--workers', '1']; main()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)


def test_a_gzip_of_one_endless_line_among_job_files_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """17 MB of gzip named slurm-7.out held 4 GB of one line: buffered whole, MemoryError, and the
    other user's file was lost. Its line is stored as records of MAX_RECORD_BYTES; the run stays
    within the address space limit; the other file is stored."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    _members(jobs / "slurm-7.out", PATTERN, 16, 48)  # 768 MiB of one line, 2.6 MB on disk
    (jobs / "slurm-8.out").write_text(OTHER)
    run = _ingest_limited(tmp_path, jobs)
    assert run.returncode == 0, run.stderr[-2000:]
    df = Store(tmp_path / "store").scan().collect()
    cut = df.filter(pl.col("job_id") == "7").sort("offset")
    sizes = cut.get_column("raw").str.len_bytes().to_list()
    assert len(sizes) == 768 and set(sizes[:-1]) == {MAX_RECORD_BYTES} and sum(sizes) == 48 * ((16 << 20) // 108 * 108)
    assert cut.get_column("offset").to_list() == [i * MAX_RECORD_BYTES for i in range(768)]
    assert df.filter(pl.col("job_id") == "8").get_column("raw").to_list() == [OTHER.strip()]


def test_a_decompression_bomb_is_cut_where_it_passes_the_ratio(tmp_path: Path) -> None:
    """Deflate makes 1032 bytes of a byte repeated: past 64 MiB, over MAX_RATIO times what was read
    is a bomb. Its lines before the cut are kept, the input is named as failed, the others stored."""
    logs = tmp_path / "logs"
    logs.mkdir()
    line = b"Nov 22 10:00:00 gpu001 app[7]: "
    _members(logs / "bomb.log", line + b"A" * (4095 - len(line)) + b"\n", 16, 64)  # 1 GiB, 1 MB on disk
    (logs / "slurm-8.out").write_text(OTHER)
    store = Store(tmp_path / "store")
    summary = ingest(input_files([str(logs)]), store, workers=1)
    assert len(summary.failed) == 1 and "bomb.log: decompresses to over 400 times its size" in summary.failed[0]
    df = store.scan().collect()
    kept = df.filter(pl.col("job_id").is_null())
    assert 64 <= kept.height * 4096 / (1 << 20) <= 80  # what came before the cut, whole lines only
    assert df.filter(pl.col("job_id") == "8").height == 1


def test_a_plain_file_of_one_line_longer_than_a_read_ends(tmp_path: Path) -> None:
    """A plain file of one 80 MiB line without a newline: the reader once went back to the line's start
    for ever. Its records are cut at MAX_RECORD_BYTES, as the collector cuts them."""
    log = tmp_path / "slurm-9.out"
    with open(log, "wb") as f:
        f.write(PATTERN * ((80 << 20) // len(PATTERN)))
    run = _ingest_limited(tmp_path, log)
    assert run.returncode == 0, run.stderr[-2000:]
    df = Store(tmp_path / "store").scan().collect().sort("offset")
    assert df.height == 80 and df.get_column("offset").to_list() == [i * MAX_RECORD_BYTES for i in range(80)]
    assert df.get_column("raw").str.len_bytes().sum() == log.stat().st_size


def test_gzip_members_read_in_bounded_steps_give_every_byte() -> None:
    """Each step makes at most OUT_BYTES, the rest of its input kept for the next; a member's end
    and the next member are found across steps (the step after an end once read the end again)."""
    rng = random.Random(1)
    for trial in range(12):
        parts = [os.urandom(rng.randint(0, 2 << 20)) if rng.random() < 0.4 else b"line %d\n" % trial * rng.randint(1, 300_000)
                 for _ in range(rng.randint(1, 4))]
        f = GzipInput(io.BufferedReader(io.BytesIO(b"".join(gzip.compress(p, rng.choice([1, 6, 9])) for p in parts))))
        out = bytearray()
        while data := f.read(rng.choice([1000, 1 << 20, 16 << 20])):
            out += data
        assert bytes(out) == b"".join(parts), trial
        assert f.produced == len(out)


@pytest.mark.parametrize("compressed", [False, True])
def test_lines_longer_than_the_record_bound_are_stored_as_the_collector_stores_them(tmp_path: Path, compressed) -> None:
    """Ingest and the collector give a long line the same records (offsets every MAX_RECORD_BYTES from
    its start): a file the collector followed adds nothing when ingested."""
    from observe.collect import NodeCollector
    from observe.collect_config import Config
    from conftest import shipped

    text = b"Nov 22 10:00:00 gpu001 app[7]: short\n" + PATTERN * ((int(2.5 * MAX_RECORD_BYTES)) // len(PATTERN)) + b"\nNov 22 10:00:01 gpu001 app[7]: after\n"
    log = tmp_path / "syslog"
    log.write_bytes(text)
    doc = {"node": "gpu001", "spool": str(tmp_path / "spool"), "store": str(tmp_path / "central"),
           "input": [{"path": str(log), "source": "syslog"}]}
    node = NodeCollector(Config.from_dict(doc))
    node.run(once=True)
    central = shipped(tmp_path / "central")
    collected = central.scan().collect().filter(pl.col("source") != "health")
    if compressed:
        log.write_bytes(gzip.compress(text))
    again = ingest([str(log)], central, workers=1, source="syslog", node="gpu001")
    assert again.stored == 0 and again.duplicates == collected.height == 5
    assert sorted(collected.get_column("offset")) == [0, 37, 37 + MAX_RECORD_BYTES, 37 + 2 * MAX_RECORD_BYTES,
                                                      len(text) - 37]
