"""nvidia_smi collector on real ``nvidia-smi -q`` fragments and written text/XML documents."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from conftest import parse_file
from observe.collector import Context, detect, get
from observe.schema import FIELDS

DIR = Path(__file__).parent.parent / "fixtures" / "nvidia_smi"


def _parse(text: str) -> pl.DataFrame:
    return get("nvidia_smi").parse(pl.DataFrame({"raw": [text], "offset": [0]}), Context(node="n1"))


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"])


def _rows(out: pl.DataFrame, kind: str, gpu: str | None = None) -> list[dict]:
    sel = out.filter(pl.col("kind") == kind)
    if gpu is not None:
        sel = sel.filter(pl.col("gpu") == gpu)
    return sel.sort("offset").to_dicts()


def test_xml_driver_535_readings_and_faults() -> None:
    text = (DIR / "a100_x2.xml").read_text()
    out = _parse(text)
    assert out.get_column("offset").is_unique().all()
    healthy, sick = _rows(out, "gpu_health")
    assert (healthy["gpu"], sick["gpu"]) == ("0000:07:00", "0000:b1:00")
    assert healthy["ts"] == datetime(2024, 3, 5, 14, 2, 11, tzinfo=timezone.utc)
    a = _attrs(healthy)
    assert a["driver_version"] == "535.129.03" and a["cuda_version"] == "12.2"
    assert a["uuid"] == "GPU-2b4e5c0a-6f1d-4a57-9c1e-0f3e4d5a6b70" and a["serial"] == "1322221012345"
    assert (a["temp_c"], a["slowdown_temp_c"], a["shutdown_temp_c"], a["memory_temp_c"]) == (41, 89, 92, 50)
    assert a["power_w"] == 312.45 and a["power_limit_w"] == 400
    assert (a["ecc_volatile_uncorrectable"], a["ecc_aggregate_correctable"], a["ecc_aggregate_uncorrectable"]) == (0, 12, 0)
    assert a["throttle_reasons_active"] == [] and a["reset_required"] is False
    assert "retired_pages_sbe" not in a and "fan_speed_pct" not in a  # N/A is left out
    assert out.filter(pl.col("gpu") == "0000:07:00").height == 1

    start = text.encode().index(b'<gpu id="00000000:B1:00.0">')
    assert sick["offset"] == start and sick["raw"].startswith('<gpu id="00000000:B1:00.0">')
    assert sick["raw"].endswith("</gpu>") and "00000000:07:00.0" not in sick["raw"]
    s = _attrs(sick)
    assert (s["ecc_volatile_uncorrectable"], s["ecc_aggregate_uncorrectable"]) == (3, 6)
    assert (s["remapped_rows_correctable"], s["remapped_rows_uncorrectable"]) == (1, 2)
    assert s["remapped_rows_pending"] is True and s["remapped_rows_failure"] is False
    assert (s["pcie_gen_current"], s["pcie_gen_max"], s["link_width_current"], s["link_width_max"]) == (3, 4, 8, 16)
    assert s["throttle_reasons_active"] == ["hw_slowdown", "hw_thermal_slowdown"]

    faults = out.filter(pl.col("gpu") == "0000:b1:00", pl.col("kind") != "gpu_health").sort("offset")
    assert faults.select("kind", "severity", "offset").rows() == [
        ("gpu_ecc", "err", start + 1), ("gpu_thermal", "warning", start + 2),
        ("gpu_pcie_degraded", "warning", start + 3), ("gpu_reset_required", "crit", start + 4),
    ]
    ecc, thermal, pcie, reset = faults.to_dicts()
    assert _attrs(ecc)["ecc_volatile_uncorrectable"] == 3 and _attrs(ecc)["remapped_rows_pending"] is True
    assert "3 volatile uncorrectable ECC errors" in ecc["message"] and "row remapping pending" in ecc["message"]
    assert "90 C at or above slowdown 89 C" in thermal["message"] and "hw_thermal_slowdown" in thermal["message"]
    assert pcie["message"] == "0000:b1:00: PCIe link degraded at P0: Gen3 of max Gen4, x8 of max x16"
    assert _attrs(reset) == {"uuid": "GPU-9c7d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f", "reset_required": True,
                             "drain_and_reset_recommended": True}
    assert set(faults.get_column("ts")) == {healthy["ts"]}


def test_xml_driver_418_idle_gen_drop_is_not_degraded() -> None:
    out = _parse((DIR / "v100_driver418.xml").read_text())
    assert set(out.get_column("kind")) == {"gpu_health", "gpu_ecc"}
    (health,) = _rows(out, "gpu_health")
    a = _attrs(health)
    assert health["gpu"] == "0000:3b:00" and health["ts"] == datetime(2019, 11, 13, 2, 47, 55, tzinfo=timezone.utc)
    assert (a["pcie_gen_current"], a["pcie_gen_max"], a["performance_state"]) == (1, 3, "P8")
    assert a["throttle_reasons_active"] == ["idle"]
    assert (a["ecc_volatile_correctable"], a["ecc_volatile_uncorrectable"]) == (0, 0)
    assert (a["ecc_aggregate_correctable"], a["ecc_aggregate_uncorrectable"]) == (17, 1)
    assert (a["retired_pages_sbe"], a["retired_pages_dbe"], a["retired_pages_pending"]) == (0, 1, True)
    assert (a["temp_c"], a["slowdown_temp_c"], a["shutdown_temp_c"], a["power_w"]) == (33, 87, 90, 26.71)
    (ecc,) = _rows(out, "gpu_ecc")
    assert ecc["severity"] == "err" and ecc["offset"] == health["offset"] + 1
    assert ecc["message"] == "0000:3b:00: page retirement pending"


def test_text_two_gpus() -> None:
    text = (DIR / "h100_x2.txt").read_text()
    out = _parse(text)
    assert out.get_column("offset").is_unique().all()
    cool, hot = _rows(out, "gpu_health")
    assert (cool["gpu"], hot["gpu"]) == ("0000:18:00", "0000:9a:00")
    assert cool["ts"] == hot["ts"] == datetime(2024, 2, 12, 3, 14, 7, tzinfo=timezone.utc)
    assert cool["offset"] == text.encode().index(b"GPU 00000000:18:00.0")
    assert hot["offset"] == text.encode().index(b"GPU 00000000:9A:00.0")
    assert cool["raw"].startswith("GPU 00000000:18:00.0\n    Product Name") and "9A:00.0" not in cool["raw"]
    assert hot["raw"].endswith("Processes                             : None")
    a = _attrs(cool)
    assert a["product"] == "NVIDIA H100 80GB HBM3" and a["driver_version"] == "535.154.05"
    assert (a["pcie_gen_current"], a["pcie_gen_max"], a["link_width_current"], a["link_width_max"]) == (5, 5, 16, 16)
    assert (a["temp_c"], a["slowdown_temp_c"], a["shutdown_temp_c"], a["power_w"]) == (44, 87, 92, 512.33)
    assert (a["ecc_volatile_correctable"], a["ecc_volatile_uncorrectable"], a["ecc_aggregate_correctable"]) == (3, 0, 41)
    assert a["throttle_reasons_active"] == [] and a["ecc_mode"] == "Enabled" and a["reset_required"] is False
    assert out.filter(pl.col("gpu") == "0000:18:00").height == 1

    h = _attrs(hot)
    assert h["throttle_reasons_active"] == ["sw_thermal_slowdown"] and h["minor_number"] == 5
    assert (h["remapped_rows_uncorrectable"], h["remapped_rows_pending"]) == (1, True)
    kinds = out.filter(pl.col("gpu") == "0000:9a:00").sort("offset").get_column("kind").to_list()
    assert kinds == ["gpu_health", "gpu_ecc", "gpu_thermal", "gpu_pcie_degraded"]
    (pcie,) = _rows(out, "gpu_pcie_degraded")
    assert pcie["message"] == "0000:9a:00: PCIe link degraded at P0: x8 of max x16"
    (thermal,) = _rows(out, "gpu_thermal")
    assert _attrs(thermal)["temp_c"] == 88 and thermal["severity"] == "warning"


def test_real_fragments() -> None:
    text = (DIR / "real_nvidia-smi.txt").read_text()
    out = _parse(text)
    assert set(out.get_column("kind")) == {"gpu_health"}  # nothing here is a fault
    bart, dcgm152, exporter16, exllama, titan, gtx = out.sort("offset").to_dicts()
    assert bart["offset"] == 0 and bart["raw"] == "\n".join(text.splitlines()[:23])
    b = _attrs(bart)
    assert bart["gpu"] == "0000:b1:00" and bart["ts"] is None
    assert (b["pcie_gen_current"], b["pcie_gen_max"], b["link_width_current"], b["performance_state"]) == (1, 4, 16, "P8")

    d = _attrs(dcgm152)
    assert dcgm152["gpu"] is None and d["uuid"] == "GPU-072b19bd-4ccf-63cf-6435-cf462aff833d"
    assert (d["minor_number"], d["reset_required"], d["drain_and_reset_recommended"]) == (5, False, False)
    e = _attrs(exporter16)
    assert (e["temp_c"], e["slowdown_temp_c"], e["shutdown_temp_c"], e["power_w"]) == (24, 82, 85, 25.33)
    assert (e["retired_pages_sbe"], e["retired_pages_dbe"], e["retired_pages_pending"]) == (0, 0, False)
    x = _attrs(exllama)
    assert (x["ecc_volatile_correctable"], x["ecc_volatile_uncorrectable"], x["ecc_aggregate_uncorrectable"]) == (0, 0, 0)
    assert (x["remapped_rows_pending"], x["remapped_rows_failure"]) == (False, False)
    assert "retired_pages_sbe" not in x

    assert (titan["gpu"], gtx["gpu"]) == ("0000:41:00", "0000:04:00")
    assert titan["ts"] == datetime(2020, 8, 6, 20, 36, 3, tzinfo=timezone.utc)
    assert gtx["ts"] == datetime(2018, 6, 7, 10, 21, 52, tzinfo=timezone.utc)
    t, g = _attrs(titan), _attrs(gtx)
    assert (t["product"], t["driver_version"], t["cuda_version"], t["serial"]) == (
        "TITAN Xp", "450.51.06", "11.0", "0323917083949")
    assert (g["product"], g["driver_version"]) == ("GeForce GTX 1080 Ti", "390.48")
    assert "cuda_version" not in g and "serial" not in g


def test_gen_drop_is_degraded_when_busy() -> None:
    fragment = "\n".join((DIR / "real_nvidia-smi.txt").read_text().splitlines()[:23])
    out = _parse(fragment.replace("Performance State                     : P8", "Performance State                     : P0"))
    (row,) = _rows(out, "gpu_pcie_degraded")
    assert row["gpu"] == "0000:b1:00" and row["message"] == "0000:b1:00: PCIe link degraded at P0: Gen1 of max Gen4"


def test_truncated_xml_keeps_complete_gpus() -> None:
    text = (DIR / "a100_x2.xml").read_text()
    cut = text[: text.index("<temperature>", text.index('<gpu id="00000000:B1:00.0">'))]
    out = _parse(cut).sort("offset")
    assert out.get_column("kind").to_list() == ["gpu_health", None]
    assert out.row(1, named=True)["message"] is None and out.row(1, named=True)["raw"].startswith('<gpu id="00000000:B1:00.0">')


def test_other_text_is_unparsed(tmp_path: Path) -> None:
    text = "hello world\n  this is not nvidia-smi output\n"
    out = _parse(text)
    assert out.rows() == [(text, 0, None)]
    path = tmp_path / "x.txt"
    path.write_text(text)
    assert parse_file(path, "nvidia_smi").get_column("kind").to_list() == ["unparsed"]


def test_finalized_rows_conform() -> None:
    out = parse_file(DIR / "a100_x2.xml", "nvidia_smi", Context(node="gpu017.cluster"))
    assert tuple(out.columns) == FIELDS
    assert set(out.get_column("node")) == {"gpu017"} and set(out.get_column("source")) == {"gpu"}
    assert out.get_column("kind").value_counts().sort("kind").rows() == [
        ("gpu_ecc", 1), ("gpu_health", 2), ("gpu_pcie_degraded", 1), ("gpu_reset_required", 1), ("gpu_thermal", 1)]


def test_detected_as_nvidia_smi() -> None:
    for name in ("real_nvidia-smi.txt", "h100_x2.txt", "a100_x2.xml", "v100_driver418.xml"):
        best, score = detect(pl.Series((DIR / name).read_text().splitlines()[:200]))
        assert best is not None and best.name == "nvidia_smi" and score > 0.9, (name, score)


def _link(gen: int, width: str, util: str, pstate: str = "P0") -> str:
    return (f'<nvidia_smi_log><gpu id="00000000:18:00.0"><pci><pci_gpu_link_info><pcie_gen><max_link_gen>5</max_link_gen>'
            f"<current_link_gen>{gen}</current_link_gen></pcie_gen><link_widths><max_link_width>16x</max_link_width>"
            f"<current_link_width>{width}</current_link_width></link_widths></pci_gpu_link_info></pci>"
            f"<performance_state>{pstate}</performance_state><utilization><gpu_util>{util}</gpu_util></utilization>"
            f"</gpu></nvidia_smi_log>")


def test_idle_link_downtraining_is_not_a_fault() -> None:
    assert _rows(_parse(_link(1, "16x", "0 %")), "gpu_pcie_degraded") == []
    busy = _rows(_parse(_link(1, "16x", "97 %")), "gpu_pcie_degraded")
    assert len(busy) == 1 and "Gen1 of max Gen5" in busy[0]["message"]
    narrow = _rows(_parse(_link(5, "8x", "0 %")), "gpu_pcie_degraded")
    assert len(narrow) == 1 and "x8 of max x16" in narrow[0]["message"]
