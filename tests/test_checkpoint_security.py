"""observe.checkpoint against a hostile checkpoint directory (root hooks scan users' directories):
headers that lie about their length, symbolic links out of the directory, a FIFO in a file's place,
and a scan made slow or memory-hungry on purpose. ``latest_as`` is tested as root, with a real
unprivileged user (nobody) for the scan."""
from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observe.checkpoint import HEADER_MAX, ScanError, latest, latest_as
from observe.cli import app

NOBODY = (65534, 65534)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


def safetensors(path: Path, header: dict | None = None, data: bytes = b"\0" * 8) -> Path:
    """A complete safetensors file (one F32 tensor of two values unless ``header`` says otherwise)."""
    body = json.dumps(header or {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, len(data)]}}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


def within(seconds: float, fn: Callable):
    """``fn()``, or TimeoutError once ``seconds`` pass (a scan that blocks must not hang the test)."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def root_only(tmp_path: Path) -> Path:
    """Root's own directory (0700) holding a complete checkpoint of a high step."""
    d = tmp_path / "root-only"
    safetensors(d / "model.safetensors")
    safetensors(d / "secret_step999.safetensors")
    d.chmod(0o700)
    return d


def dense(path: Path, tensors: int) -> Path:
    """A safetensors file whose header (under HEADER_MAX) is ``tensors`` entries: slow and memory-hungry to parse."""
    body = ("{" + ",".join(f'"t{i}":{{"data_offsets":[0,0]}}' for i in range(tensors)) + "}").encode()
    assert len(body) < HEADER_MAX
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    return path


def traced_scan(directory: Path):
    """:func:`latest` of ``directory`` and the peak memory it allocated."""
    tracemalloc.start()
    try:
        best, skipped = latest(directory)
        return best, skipped, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_header_claiming_6_gb_in_a_1_kb_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "model_step100.safetensors"
    path.write_bytes(struct.pack("<Q", 6_000_000_000) + b"{" + b" " * 1000 + b"}")
    started = time.monotonic()
    best, skipped, peak = traced_scan(tmp_path)
    assert best is None and "truncated: the header says it is 6000000000 bytes" in skipped[0].why
    assert peak < 1 << 20 and time.monotonic() - started < 1, peak


def test_a_header_over_the_format_limit_is_not_read(tmp_path: Path) -> None:
    """The file is as long as the header claims (sparse), but no safetensors header is that large."""
    path = tmp_path / "model_step100.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", HEADER_MAX + 1))
        f.truncate(8 + HEADER_MAX + 1024)
    best, skipped, peak = traced_scan(tmp_path)
    assert best is None and f"a {HEADER_MAX + 1}-byte header" in skipped[0].why
    assert peak < 1 << 20, peak


def test_a_zip_claiming_a_huge_central_directory_is_corrupt_and_not_read(tmp_path: Path) -> None:
    """zipfile reads no central directory larger than the file: guards that the torch.save check keeps to it."""
    path = tmp_path / "model_step100.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"x" * 100)
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 12, 0xFFFFFFF0)  # the central directory's size
    path.write_bytes(bytes(data))
    best, skipped, peak = traced_scan(tmp_path)
    assert best is None and "corrupt zip" in skipped[0].why and peak < 1 << 20, (skipped, peak)


def test_symbolic_links_out_of_the_directory_are_not_followed(tmp_path: Path, root_only: Path) -> None:
    """A user's links to root's directory and to root's file: not listed, not read (root runs this scan
    in `observe checkpoint latest`; the hooks run it as the user, and do not follow them either)."""
    run = tmp_path / "run"
    safetensors(run / "step-50" / "model.safetensors")
    (run / "step-100").symlink_to(root_only)
    (run / "model_step900.safetensors").symlink_to(root_only / "secret_step999.safetensors")
    (run / "step-60").mkdir()
    (run / "step-60" / "model.safetensors").symlink_to(root_only / "model.safetensors")
    best, skipped = latest(run)
    assert Path(best.path).name == "step-50", best
    assert not any(str(root_only) in s.path or "step-100" in s.path for s in skipped)


def test_a_fifo_in_a_checkpoints_place_does_not_block_the_scan(tmp_path: Path) -> None:
    """A guard: only regular files are listed, and opened without waiting should a FIFO replace one."""
    safetensors(tmp_path / "step-50" / "model.safetensors")
    os.mkfifo(tmp_path / "model_step100.safetensors")
    os.mkfifo(tmp_path / "step-50" / "optimizer.bin")
    best, _ = within(5, lambda: latest(tmp_path))
    assert Path(best.path).name == "step-50"


@as_root
def test_the_bounded_scan_reads_only_what_the_user_may(shared: Path, root_only: Path) -> None:
    """Root's own directory inside the user's (a real one, not a link): the scan as the user does not
    see it; the same scan as root would pick it (the newest step)."""
    safetensors(shared / "step-50" / "model.safetensors")
    planted = shared / "step-100"
    shutil.copytree(root_only, planted)
    planted.chmod(0o700)
    assert Path(latest(shared)[0].path).name == "step-100"  # what root itself sees
    best = latest_as(shared, NOBODY, timeout_s=30, memory_bytes=256 << 20)
    assert best is not None and Path(best.path).name == "step-50", best


@as_root
def test_the_bounded_scan_is_killed_past_its_time(shared: Path) -> None:
    dense(shared / "model_step100.safetensors", 500_000)
    started = time.monotonic()
    with pytest.raises(ScanError, match="did not finish within 0.3s"):
        latest_as(shared, NOBODY, timeout_s=0.3, memory_bytes=8 << 30)
    assert time.monotonic() - started < 2


@as_root
def test_the_bounded_scan_stops_at_its_memory(shared: Path) -> None:
    """The header too big for the scan's memory is skipped; the checkpoint beside it is found."""
    safetensors(shared / "model_step50.safetensors")
    dense(shared / "model_step100.safetensors", 500_000)
    best = latest_as(shared, NOBODY, timeout_s=60, memory_bytes=32 << 20)
    assert best is not None and best.step == 50, best


def test_a_header_of_200k_nested_brackets_is_skipped_and_the_scan_goes_on(tmp_path: Path) -> None:
    """Issue 39: json.loads recursed into it (RecursionError) and `observe checkpoint latest` failed for
    the whole directory. Its depth is checked first (linear), and the good checkpoint beside it wins."""
    safetensors(tmp_path / "model_step100.safetensors")
    body = b"[" * 200_000
    (tmp_path / "model_step200.safetensors").write_bytes(struct.pack("<Q", len(body)) + body)
    best, skipped = latest(tmp_path)
    assert best.step == 100 and [s.why for s in skipped] == ["corrupt: the header's brackets nest over 4 deep or do not close"]
    done = CliRunner().invoke(app, ["checkpoint", "latest", str(tmp_path)])
    assert done.exit_code == 0 and done.stdout.strip() == best.path, done.output


def test_brackets_inside_a_headers_strings_do_not_count(tmp_path: Path) -> None:
    """Metadata may hold JSON text (LoRA trainers store their settings so), escaped quotes and all."""
    meta = {"ss_tag_frequency": json.dumps({"a": {"b": [[[[[1]]]]]}}), "q": '\\"]]]]"[[[[\\'}
    path = safetensors(tmp_path / "lora_step3.safetensors",
                       {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "__metadata__": meta})
    best, skipped = latest(tmp_path)
    assert best is not None and best.path == str(path) and not skipped


def test_a_zip_naming_an_entry_in_bad_utf8_is_skipped_and_the_scan_goes_on(tmp_path: Path) -> None:
    """A torch.save zip whose central directory flags a name UTF-8 that is not: zipfile raises
    UnicodeDecodeError, which stopped the whole scan; now that file alone is skipped, in one line."""
    safetensors(tmp_path / "model_step100.safetensors")
    path = tmp_path / "model_step200.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"x" * 100)
    data = bytearray(path.read_bytes())
    entry = data.rfind(b"PK\x01\x02")
    struct.pack_into("<H", data, entry + 8, struct.unpack_from("<H", data, entry + 8)[0] | 0x800)  # names are UTF-8
    data[entry + 46:entry + 48] = b"\xff\xfe"
    path.write_bytes(bytes(data))
    best, skipped = latest(tmp_path)
    assert best.step == 100 and [s.why.split(":")[:2] for s in skipped] == [["unreadable", " UnicodeDecodeError"]]


@as_root
def test_the_bounded_scan_reports_an_unreadable_directory(shared: Path) -> None:
    shared.chmod(0o700)
    with pytest.raises(ScanError, match="PermissionError"):
        latest_as(shared, NOBODY, timeout_s=30, memory_bytes=256 << 20)


def test_the_bounded_scan_without_a_user_switch(tmp_path: Path) -> None:
    """Not root (a user's own `observe`, or no job user): the same child, as whoever runs it."""
    safetensors(tmp_path / "model_step7.safetensors")
    best = latest_as(tmp_path, None, timeout_s=30, memory_bytes=256 << 20)
    assert best.step == 7 and best.kind == "safetensors"
    (tmp_path / "empty").mkdir()
    assert latest_as(tmp_path / "empty", None, timeout_s=30, memory_bytes=256 << 20) is None
    with pytest.raises(ScanError, match="not a directory"):
        latest_as(tmp_path / "nope", None, timeout_s=30, memory_bytes=256 << 20)
