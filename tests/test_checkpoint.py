"""observe checkpoint latest: the newest complete checkpoint, with real torch.distributed.checkpoint
directories and torch.save files, and the incomplete ones skipped with their reasons."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observe.checkpoint import latest
from observe.cli import app

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")


def _dcp(path: Path, step: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"w": torch.randn(64, 64), "step": torch.tensor(step)},
                 storage_writer=dcp.FileSystemWriter(str(path), thread_count=2))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    for step in (5, 10, 15, 20, 25):
        _dcp(tmp_path / f"step_{step:06d}", step)
    (tmp_path / "step_000015" / "__0_1.distcp").unlink()  # a shard lost
    (tmp_path / "step_000020" / ".metadata").unlink()  # the save never finished
    with open(tmp_path / "step_000025" / "__0_0.distcp", "r+b") as f:  # a shard cut short
        f.truncate(10)
    return tmp_path


def test_newest_complete_dcp_checkpoint(run_dir: Path) -> None:
    best, skipped = latest(run_dir)
    assert best is not None and Path(best.path).name == "step_000010" and best.kind == "dcp" and best.step == 10
    why = {Path(s.path).name: s.why for s in skipped}
    assert "missing shard(s): __0_1.distcp" in why["step_000015"]
    assert "no .metadata" in why["step_000020"]
    assert "shorter than the metadata" in why["step_000025"]
    state = {"w": torch.zeros(64, 64), "step": torch.tensor(0)}
    dcp.load(state, storage_reader=dcp.FileSystemReader(best.path))
    assert int(state["step"]) == 10


def test_untrusted_metadata_is_never_unpickled(run_dir: Path) -> None:
    """As root on someone else's files only structure counts: a shard missing from the metadata is
    not seen, but an empty one or a missing .metadata is."""
    (run_dir / "step_000010" / "__0_0.distcp").write_bytes(b"")
    best, skipped = latest(run_dir, trust=False)
    assert Path(best.path).name in ("step_000015", "step_000025")
    assert any(Path(s.path).name == "step_000010" and "empty shard" in s.why for s in skipped)


def test_torch_save_files(tmp_path: Path) -> None:
    for step in (100, 200, 300, 400):
        torch.save({"w": torch.randn(128, 128), "step": step}, tmp_path / f"model_step{step}.pt")
    data = (tmp_path / "model_step300.pt").read_bytes()
    (tmp_path / "model_step300.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "model_step400.pt").write_bytes(b"")
    (tmp_path / "model_step500.pt.tmp").write_bytes(data)
    best, skipped = latest(tmp_path)
    assert Path(best.path).name == "model_step200.pt" and best.kind == "torch.save"
    assert torch.load(best.path)["step"] == 200
    why = {Path(s.path).name: s.why for s in skipped}
    assert set(why) == {"model_step300.pt", "model_step400.pt", "model_step500.pt.tmp"}
    assert "zip" in why["model_step300.pt"] and why["model_step400.pt"] == "zero length"


def test_newest_by_time_when_names_have_no_step(tmp_path: Path) -> None:
    for name, age in (("last.ckpt", 10), ("best.ckpt", 100)):
        torch.save({"x": 1}, tmp_path / name)
        os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    assert Path(latest(tmp_path)[0].path).name == "last.ckpt"


def test_cli(run_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["checkpoint", "latest", str(run_dir)])
    assert done.exit_code == 0 and done.stdout.strip() == str(run_dir / "step_000010")
    done = runner.invoke(app, ["checkpoint", "latest", str(run_dir), "--format", "json"])
    doc = json.loads(done.stdout)
    assert doc["latest"]["step"] == 10 and len(doc["skipped"]) == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    done = runner.invoke(app, ["checkpoint", "latest", str(empty)])
    assert done.exit_code == 1 and "no complete checkpoint" in done.output
    done = runner.invoke(app, ["checkpoint", "latest", str(tmp_path / "nope")])
    assert done.exit_code == 2 and "not a directory" in done.output
