"""A damaged compressed input (a rotation interrupted, a disk full, a bad block) keeps every whole record
before the damage, whatever the run's split (one process or workers, one piece or several, alone or in a
batch of small files), and says what happened in one ``error:`` line."""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.compressed import DamagedInput, GzipInput
from observe.reader import CHUNK_BYTES
from observe.store import Store

runner = CliRunner()


def slurm_lines(n: int, first: int = 0) -> bytes:
    return b"".join(b"[2026-11-20T10:%02d:%02d.%03d] sched: Allocate JobId=%d NodeList=gpu%03d #CPUs=8 Partition=gpu\n"
                    % (i // 60 % 60, i % 60, i % 1000, 100000 + i, i % 512) for i in range(first, first + n))


def syslog_lines(n: int) -> bytes:
    """Plain daemon lines: the cheapest to parse, for an input larger than a read."""
    return b"".join(b"Nov 20 10:%02d:%02d gpu%03d CRON[%d]: (root) CMD (run-parts /etc/cron.hourly)\n"
                    % (i // 60 % 60, i % 60, i % 512, 1000 + i % 30000) for i in range(n))


def whole_lines_before_the_cut(compressed: bytes) -> int:
    part = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(compressed)
    return part[:part.rfind(b"\n") + 1].count(b"\n")


def stored(store: Path) -> int:
    return Store(store).scan().select(pl.len()).collect().item()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_cut_gzip_keeps_every_whole_line_before_the_cut(tmp_path: Path, workers: str) -> None:
    """Larger than a read (CHUNK_BYTES): the cut falls in the second piece, so the first piece and the
    second's whole lines before the cut are stored."""
    data = syslog_lines(int(1.2 * CHUNK_BYTES / 70))
    assert len(data) > CHUNK_BYTES
    whole = gzip.compress(data, compresslevel=1)
    cut = whole[:int(len(whole) * 0.95)]
    (tmp_path / "syslog.1.gz").write_bytes(cut)
    expected = whole_lines_before_the_cut(cut)
    assert CHUNK_BYTES / 70 < expected < data.count(b"\n")
    result = runner.invoke(app, ["ingest", str(tmp_path / "syslog.1.gz"), "--store", str(tmp_path / "s"),
                                 "--workers", workers])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {tmp_path / 'syslog.1.gz'}: compressed file ended before the end-of-stream "
                      "marker was reached"], result.output
    assert stored(tmp_path / "s") == expected


def test_a_cut_small_gzip_among_small_files_keeps_its_whole_lines(tmp_path: Path) -> None:
    """Small files are read in batches (each read whole): the cut one keeps its whole lines, the others all."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(3):
        (logs / f"slurmctld-{i}.log.gz").write_bytes(gzip.compress(slurm_lines(500, 1000 * i)))
    whole = gzip.compress(slurm_lines(2000, 5000))
    cut = whole[:len(whole) // 2]
    (logs / "slurmctld-cut.log.gz").write_bytes(cut)
    result = runner.invoke(app, ["ingest", str(logs), "--source", "slurm", "--store", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        f"error: {logs / 'slurmctld-cut.log.gz'}: compressed file ended before the end-of-stream marker was reached"]
    assert stored(tmp_path / "s") == 1500 + whole_lines_before_the_cut(cut)


def test_gzip_members_one_after_another_are_all_read(tmp_path: Path) -> None:
    """``cat a.gz b.gz`` is one valid gzip stream of both (logrotate's delaycompress and appends make them)."""
    (tmp_path / "both.log.gz").write_bytes(gzip.compress(slurm_lines(300)) + gzip.compress(slurm_lines(200, 300)))
    result = runner.invoke(app, ["ingest", str(tmp_path / "both.log.gz"), "--store", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert stored(tmp_path / "s") == 500


def test_the_reader_gives_the_bytes_before_a_damage_then_raises(tmp_path: Path) -> None:
    data = slurm_lines(5000)
    whole = gzip.compress(data)
    (tmp_path / "cut.gz").write_bytes(whole[:len(whole) // 2])
    with open(tmp_path / "cut.gz", "rb") as raw:
        f = GzipInput(raw)
        got = f.read()
        assert 0 < len(got) < len(data) and data.startswith(got)
        with pytest.raises(DamagedInput, match="ended before the end-of-stream marker"):
            f.read(1)
    bad = bytearray(whole)
    bad[-6] ^= 0xFF  # the CRC: found only at the member's end, after its bytes
    (tmp_path / "crc.gz").write_bytes(bytes(bad))
    with open(tmp_path / "crc.gz", "rb") as raw:
        f = GzipInput(raw)
        assert f.read() == data
        with pytest.raises(DamagedInput, match="corrupt gzip data"):
            f.read(1)
