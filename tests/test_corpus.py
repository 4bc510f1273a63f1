"""Parsers measured on real logs (tests/fixtures/corpus, see its SOURCES.md / README.md)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import polars as pl
import pytest

from conftest import CORPUS, parse_file
from observe.collector import Context

REAL = CORPUS / "real"
FILES = {"xid.log": "kernel", "oom.log": "kernel", "ib_pcie.log": "kernel", "nccl.log": "nccl",
         "slurm.log": "slurm"}


def _lines(name: str) -> list[str]:
    return [line for line in (REAL / name).read_text().splitlines() if line.strip()]


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"]) if row["attrs"] else {}


@pytest.mark.parametrize("name", sorted(FILES))
def test_no_line_lost_and_coverage_printed(name: str) -> None:
    out = parse_file(REAL / name, FILES[name])
    joined = "\n".join(out.get_column("raw").to_list())
    for line in _lines(name):
        assert line in joined
    typed = out.filter(~pl.col("kind").is_in(["log", "unparsed"])).height
    unparsed = out.filter(pl.col("kind") == "unparsed").height
    print(f"{name}: {out.height} records, {typed} typed events, {unparsed} unparsed "
          f"({100 * (out.height - unparsed) / out.height:.1f}% parsed)")
    assert unparsed <= 0.15 * out.height


def test_every_xid_line_gives_code_and_pci() -> None:
    out = parse_file(REAL / "xid.log", "kernel")
    xid_lines = [line for line in _lines("xid.log") if "NVRM: Xid" in line]
    xids = out.filter(pl.col("kind") == "gpu_xid")
    assert xids.height == len(xid_lines) == 48
    for row in xids.iter_rows(named=True):
        code = int(row["raw"].split("): ")[1].split(",")[0])
        pci = row["raw"].split("(PCI:")[1].split(")")[0].lower()
        assert row["code"] == code and row["gpu"] == pci[-10:], row["raw"]
        if code in (13, 31, 45, 79, 109, 120, 149):
            assert _attrs(row).get("action"), row["raw"]
    fell = out.filter(pl.col("kind") == "gpu_xid", pl.col("code") == 79)
    assert set(fell.get_column("gpu")) == {"0000:06:00", "0000:01:00"}
    assert set(fell.get_column("severity")) == {"crit"}


def test_every_watchdog_timeout_gives_rank_op_timeout() -> None:
    out = parse_file(REAL / "nccl.log", "nccl")
    lines = [line for line in _lines("nccl.log") if "Watchdog caught collective operation timeout" in line]
    got = out.filter(pl.col("kind") == "nccl_timeout")
    assert got.height == len(lines) == 12
    for row in got.iter_rows(named=True):
        a = _attrs(row)
        assert row["rank"] == int(row["raw"].split("[Rank ")[1].split("]")[0])
        assert a["op"] in row["raw"] and f"Timeout(ms)={a['timeout_ms']}" in row["raw"]
        assert a["seq"] in row["raw"]
    watch = out.filter(pl.col("kind") == "nccl_watchdog").sort("offset")
    assert [_attrs(r)["last_completed"] for r in watch.iter_rows(named=True)] == ["120048", "807", "7752", "80077"]


def test_glog_stamps_and_ranks() -> None:
    ctx = Context(reference_time=datetime(2026, 11, 1, tzinfo=timezone.utc))
    out = parse_file(REAL / "nccl.log", "nccl", ctx)
    row = out.filter(pl.col("raw").str.contains("E1206 18:44:12.715298746")).row(0, named=True)
    assert row["ts"] == datetime(2025, 12, 6, 18, 44, 12, 715298, tzinfo=timezone.utc)
    assert row["rank"] == 0 and row["severity"] == "err"
    tagged = out.filter(pl.col("raw").str.starts_with("[3] node2:22556"))
    assert tagged.row(0, named=True)["rank"] == 3 and tagged.row(0, named=True)["node"] == "node2"


def test_every_nccl_warn_is_a_nccl_event() -> None:
    out = parse_file(REAL / "nccl.log", "nccl")
    warns = out.filter(pl.col("raw").str.contains("NCCL WARN"))
    assert warns.height == len([line for line in _lines("nccl.log") if "NCCL WARN" in line]) == 24
    assert set(warns.get_column("kind")) <= {"nccl_warn", "nccl_net_error", "cuda_oom"}
    assert warns.filter(pl.col("kind") == "cuda_oom").get_column("raw").str.contains("Cuda failure 'out of memory'").all()
    assert warns.get_column("node").null_count() == 0 and warns.get_column("gpu").null_count() == 0
    traces = out.filter(pl.col("kind") == "nccl_error", pl.col("code").is_not_null())
    assert traces.height == 16 and set(traces.get_column("code")) == {1, 2, 3, 6}


def test_every_oom_kill_line_gives_pid_and_process() -> None:
    out = parse_file(REAL / "oom.log", "kernel")
    kill_lines = [line for line in _lines("oom.log") if "Killed process" in line or "oom-kill:" in line]
    kills = out.filter(pl.col("kind") == "oom_kill")
    assert kills.height == len(kill_lines) == 7
    for row in kills.iter_rows(named=True):
        assert row["pid"] is not None and f"{row['pid']}" in row["raw"]
        assert _attrs(row)["process"] in ("python", "python3")
    invoked = out.filter(pl.col("kind") == "oom_invoked")
    assert {_attrs(r)["process"] for r in invoked.iter_rows(named=True)} == {
        "node", "GC Thread#9", "sunloginclient", "python3", "CPU 0/KVM"}


def test_pcie_aer_and_ib() -> None:
    out = parse_file(REAL / "ib_pcie.log", "kernel")
    aer = out.filter(pl.col("kind") == "pcie_aer")
    assert {_attrs(r)["aer"] for r in aer.iter_rows(named=True)} == {"corrected", "non_fatal", "fatal"}
    assert out.filter(pl.col("kind") == "ib_link_up").height == 2  # an mlx5 port and an rxe device
    assert out.filter(pl.col("kind") == "ib_hca_error").height == 3


def test_slurm_events() -> None:
    out = parse_file(REAL / "slurm.log", "slurm")
    kinds = dict(out.get_column("kind").value_counts().iter_rows())
    # four slurmstepd cgroup OOM lines and srun's "nid001277: tasks 1-3: Out Of Memory"
    assert kinds["slurm_job_start"] == 2 and kinds["slurm_job_end"] == 1 and kinds["slurm_oom"] == 5
    start = out.filter(pl.col("kind") == "slurm_job_start").row(0, named=True)
    assert start["job_id"] == "127441" and _attrs(start)["nodes"] == "c014"
    end = out.filter(pl.col("kind") == "slurm_job_end").row(0, named=True)
    assert end["code"] == 9 and end["job_id"] == "127441"
    reason = out.filter(pl.col("kind") == "slurm_gpu_count_low").sort("offset").row(1, named=True)
    assert _attrs(reason)["reason_user"] == "slurm" and _attrs(reason)["reason_time"] == "2024-12-19T11:03:34"
    oom_jobs = set(out.filter(pl.col("kind") == "slurm_oom").get_column("job_id").drop_nulls())
    assert {"191", "11300781", "3756240", "440575"} <= oom_jobs
    assert "nid001277" in out.filter(pl.col("kind") == "slurm_oom").get_column("node").to_list()
    polish = parse_file(REAL / "xid.log", "kernel").filter(pl.col("node") == "testowy")
    assert polish.get_column("ts").dt.month().to_list() == [4] * 4


EXTRA2 = CORPUS / "extra2"
EXTRA2_FILES = {"slurm.log": "slurm", "aer_edac.log": "kernel", "nccl.log": "nccl"}
LABEL_KEYS = {"line", "text", "record", "family", "kind", "fields", "message", "emitter", "note"}


@pytest.mark.parametrize("name", sorted(EXTRA2_FILES))
def test_extra2_every_line_labelled_once_in_order(name: str) -> None:
    """extra2/labels/<stem>.jsonl (written by reading, LABELS.md): one label per non-blank line, same text."""
    lines = [(i, t) for i, t in enumerate((EXTRA2 / name).read_text().splitlines(), 1) if t.strip()]
    labels = [json.loads(x) for x in (EXTRA2 / "labels" / name.replace(".log", ".jsonl")).read_text().splitlines()]
    assert [(d["line"], d["text"]) for d in labels] == lines
    for d in labels:
        assert set(d) <= LABEL_KEYS and d["record"] in ("start", "continuation"), d
        assert ("kind" in d) == (d["record"] == "start"), d


@pytest.mark.parametrize("name", sorted(EXTRA2_FILES))
def test_extra2_no_line_lost(name: str) -> None:
    out = parse_file(EXTRA2 / name, EXTRA2_FILES[name])
    joined = "\n".join(out.get_column("raw").to_list())
    assert all(line in joined for line in (EXTRA2 / name).read_text().splitlines() if line.strip())
    assert out.filter(pl.col("kind") == "unparsed").height == 0


def test_extra2_machine_checks_and_daemon_failures() -> None:
    """Only a machine-check report's first line is an mce event (its TSC/PROCESSOR and CPER lines are details; of a
    firmware-first GHES record, the line that says its severity, not its header, which says none);
    slurmd's "slurmd initialization failed" ends the daemon, under any of the four wrappers the file holds."""
    kernel = parse_file(EXTRA2 / "aer_edac.log", "kernel")
    mce = kernel.filter(pl.col("kind") == "mce").get_column("message").to_list()
    assert len(mce) == 13 and not any("TSC " in m or "PROCESSOR " in m or "Error Source" in m for m in mce)
    assert "{1}[Hardware Error]: event severity: recoverable" in mce
    slurm = parse_file(EXTRA2 / "slurm.log", "slurm")
    fatal = slurm.filter(pl.col("kind") == "slurm_daemon_fatal")
    assert fatal.height == 4 and set(fatal.get_column("message")) == {"error: slurmd initialization failed"}
    drain = slurm.filter(pl.col("kind") == "slurm_node_drain").get_column("node").to_list()
    assert drain == ["ip-10-2-1-120", "ip-10-2-1-120"]
