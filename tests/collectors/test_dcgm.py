"""dcgm collector on real DCGM output (diag table, nvvs log, health events) and written samples."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from conftest import parse_file
from observe.collector import Context, detect, get
from observe.schema import FIELDS

DIR = Path(__file__).parent.parent / "fixtures" / "dcgm"


def _parse(name: str) -> pl.DataFrame:
    text = (DIR / name).read_text()
    return get("dcgm").parse(pl.DataFrame({"raw": [text], "offset": [0]}), Context(node="n1"))


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"]) if row["attrs"] else {}


def _one(out: pl.DataFrame, *preds: pl.Expr) -> dict:
    (row,) = out.filter(*preds).to_dicts()
    return row


def test_real_go_dcgm_table() -> None:
    out = _parse("real_dcgm.txt")
    fail = _one(out, pl.col("kind") == "dcgm_diag", pl.col("severity") == "err")
    assert (fail["gpu"], fail["message"]) == ("0", "GPU Memory: Fail - GPU: 0")
    assert _attrs(fail) == {"test": "GPU Memory", "result": "fail", "gpus": "0", "section": "Hardware"}
    assert fail["raw"] == "|                           | Fail - GPU: 0                                  |"
    ok = _one(out, pl.col("kind") == "dcgm_diag", pl.col("gpu") == "1")
    assert ok["message"] == "GPU Memory: Pass - GPU: 1" and ok["severity"] == "info"
    deployment = out.filter(pl.col("kind") == "dcgm_diag", pl.col("attrs").str.contains('"section":"Deployment"'))
    assert deployment.height == 7 and set(deployment.get_column("severity")) == {"info"}

    warning = _one(out, pl.col("message").str.starts_with("Warning: "))
    assert warning["message"] == (
        "Warning: GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable device(s) is/are busy or "
        "unavailable'.")
    assert (warning["severity"], warning["gpu"], warning["kind"]) == ("warning", "0", None)
    assert _attrs(warning)["test"] == "GPU Memory" and warning["raw"].count("\n") == 4
    bandwidth = _one(out, pl.col("message").str.contains("bidirectional"))
    assert bandwidth["message"] == ("Info: GPU 1 GPU to Host bandwidth:  12.33 GB/s, GPU 1 Host to GPU bandwidth:  "
                                    "13.15 GB/s, GPU 1 bidirectional bandwidth: 22.63 GB/s")
    orphan = _one(out, pl.col("message").str.starts_with("able'''"))  # excerpt starts mid-cell
    assert orphan["attrs"] is None and orphan["message"].endswith(". Reset GPU. Restart DCGM. Rerun diagnostics.")
    assert _one(out, pl.col("message") == "DCGM Version: 3.3.1")["kind"] is None
    assert not out.filter(pl.col("raw").str.contains(r"^\+|Diagnostic  |-----  ")).height  # decoration dropped


def test_real_nvvs_log_lines() -> None:
    out = _parse("real_dcgm.txt")
    first = out.row(0, named=True)
    assert first["ts"] == datetime(2026, 1, 16, 9, 51, 43, 78000, tzinfo=timezone.utc)
    assert (first["pid"], first["severity"], first["kind"], first["program"]) == (3279516, "debug", None, "dcgm")
    assert first["message"] == "[[diagnostic]] computeTime: 20.06779384613037, InitBufferTime: 0"
    assert _attrs(first) == {"tid": "3280376", "src": "/builds/dcgm/dcgm/nvvs/plugin_src/diagnostic/DiagnosticPlugin.cpp:1421",
                             "func": "GpuBurnWorker::run"}
    created = _one(out, pl.col("message").str.starts_with("Created thread"))
    assert created["severity"] == "info" and created["offset"] == 207


def test_real_health_events() -> None:
    out = _parse("real_dcgm.txt")
    xid, power = out.filter(pl.col("kind") == "dcgm_health").sort("offset").to_dicts()
    assert (xid["code"], xid["gpu"], xid["severity"], xid["node"]) == (145, "0", "err", "ip-....internal")
    assert xid["ts"] == datetime(2026, 6, 2, 19, 47, 38, 25768, tzinfo=timezone.utc)
    assert xid["message"] == "Detected XID 145 for GPU 0 Please consult the documentation for details of this XID."
    a = _attrs(xid)
    assert (a["error_code"], a["xid"], a["check"], a["fatal"]) == ("DCGM_FR_XID_ERROR", "145", "DcgmDiagnosticMemory", "true")
    assert a["uuid"] == "GPU-95d4eaef-812a-5157-fec0-7d64667313dc"
    assert (power["code"], power["gpu"], power["severity"]) == (None, "0000:0f:00", "warning")
    p = _attrs(power)
    assert (p["error_code"], p["check"], p["action"]) == ("DCGM_FR_CLOCK_THROTTLE_POWER", "GpuPowerWatchIsNotHealthy", "NONE")


def test_real_file_loses_no_content() -> None:
    out = parse_file(DIR / "real_dcgm.txt", "dcgm", Context(node="n1"))
    assert tuple(out.columns) == FIELDS and out.get_column("offset").is_unique().all()
    assert "unparsed" not in set(out.get_column("kind"))
    joined = "\n".join(out.get_column("raw"))
    for line in (DIR / "real_dcgm.txt").read_text().splitlines():
        if line.strip() and not line.startswith(("+", "|-----", "| Diagnostic ")):
            assert line in joined, line


def test_diag_table_wrapping_and_results() -> None:
    out = _parse("diag_r3.txt")
    diag = out.filter(pl.col("kind") == "dcgm_diag")
    assert diag.height == 15
    results = [(a["test"], a["result"], a.get("gpus")) for a in map(_attrs, diag.to_dicts())]
    assert results[9:] == [("PCIe", "warn", "3"), ("GPU Memory", "pass", "All"), ("Diagnostic", "fail", "1, 2"),
                           ("Targeted Stress", "skip", "All"), ("Targeted Power", "pass", "All"),
                           ("Memory Bandwidth", "pass", "All")]
    assert diag.get_column("severity").to_list()[9:] == ["warning", "info", "err", "info", "info", "info"]
    assert diag.get_column("gpu").to_list()[9:12] == ["3", None, None]
    warns = out.filter(pl.col("message").str.starts_with("Warning: ")).sort("offset")
    assert warns.get_column("message").to_list() == [
        "Warning: GPU 3 PCIe link width is x8, expected x16. Check the seating of the GPU in its slot.",
        "Warning: GPU 1 Found 2 double bit errors in device memory. Drain the GPU and reset it or reboot the node.",
    ]
    assert warns.get_column("gpu").to_list() == ["3", "1"]
    assert [_attrs(r)["test"] for r in warns.to_dicts()] == ["PCIe", "Diagnostic"]
    assert out.filter(pl.col("kind").is_null()).get_column("message").to_list() == [
        "Successfully ran diagnostic for group.", *warns.get_column("message")]


def test_hostengine_and_exporter_lines() -> None:
    out = _parse("hostengine_exporter.log")
    xid = _one(out, pl.col("kind") == "dcgm_health")
    assert (xid["code"], xid["gpu"], xid["severity"], xid["pid"]) == (79, "2", "err", 41234)
    assert xid["message"] == "Detected XID 79 on GPU 2: DCGM_FR_XID_ERROR"
    assert xid["ts"] == datetime(2024, 3, 5, 14, 2, 11, 532000, tzinfo=timezone.utc)
    assert _attrs(xid)["func"] == "DcgmHealthWatch::MonitorXids"
    warn = _one(out, pl.col("severity") == "warning", pl.col("pid").is_not_null())
    assert warn["kind"] is None and warn["message"] == "Could not open /var/log/nvidia-dcgm/stats_persist"
    metric = _one(out, pl.col("raw").str.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
    assert (metric["gpu"], metric["node"]) == ("2", "gpu017.cluster.local")
    assert _attrs(metric) == {"uuid": "GPU-9c7d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f", "metric": "DCGM_FI_DEV_GPU_TEMP",
                              "value": "61"}
    js = _one(out, pl.col("raw").str.starts_with("{"))
    assert (js["kind"], js["severity"]) == (None, "warning")
    assert js["message"] == "Not collecting DCP metrics: profiling module returned an error"
    assert js["ts"] == datetime(2024, 3, 5, 14, 2, 13, 250000, tzinfo=timezone.utc)
    assert out.filter(pl.col("message").is_null()).get_column("raw").to_list() == ["this line is not DCGM output"]
    final = parse_file(DIR / "hostengine_exporter.log", "dcgm", Context(node="n1"))
    assert final.get_column("kind").to_list() == ["dcgm_health", "log", "log", "log", "log", "log", "unparsed"]
    assert final.get_column("node").to_list() == ["n1", "n1", "n1", "n1", "gpu017", "n1", "n1"]


def test_detected_as_dcgm() -> None:
    for name in ("real_dcgm.txt", "diag_r3.txt"):
        best, score = detect(pl.Series((DIR / name).read_text().splitlines()[:200]))
        assert best is not None and best.name == "dcgm" and score > 0.9, (name, score)
