"""The demo cluster generator: deterministic, real formats, consistent ground truth, sized on demand."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from observe.simulate import Manifest, generate

START = datetime(2026, 11, 20, tzinfo=timezone.utc)
RFC3164 = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d gpu\d{3} [\w.-]+(?:\[\d+\])?: \S")
SLURMCTLD = re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+\] ")
DMESG = re.compile(r"^\[ *(\d+\.\d{6})\] ")
INCIDENT_KEYS = {"type", "node", "nodes", "gpu", "job_id", "ts", "kind", "code", "category"}


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    """A day of a 16-node cluster, shared by the tests that only read it."""
    return generate(tmp_path_factory.mktemp("demo"), start=START)


def _lines(manifest: Manifest, fmt: str) -> dict[Path, list[str]]:
    return {f.path: f.path.read_text().splitlines() for f in manifest.files if f.format == fmt}


def _syslog_time(line: str) -> datetime:
    return datetime.strptime(f"{START.year} {line[:15]}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = generate(tmp_path / "a", nodes=4, hours=6, seed=7, start=START)
    b = generate(tmp_path / "b", nodes=4, hours=6, seed=7, start=START)
    generate(tmp_path / "c", nodes=4, hours=6, seed=8, start=START)
    assert [f.path.relative_to(tmp_path / "a") for f in a.files] == [f.path.relative_to(tmp_path / "b") for f in b.files]
    for fa, fb in zip(a.files, b.files):
        assert fa.path.read_bytes() == fb.path.read_bytes(), fa.path.name
    assert a.incidents == b.incidents and a.bytes == b.bytes
    assert (tmp_path / "a/slurm/slurmctld.log").read_bytes() != (tmp_path / "c/slurm/slurmctld.log").read_bytes()


def test_the_same_seed_at_another_hour_is_the_same_logs_shifted(tmp_path: Path) -> None:
    """Started seven hours and a day later, the same seed gives the same logs moved in time: the same incidents at
    the same distance from the start, the same lines in every file, the kernel's (stamped since boot) byte for byte.
    (Periodic noise and pids counted from the wall clock made a demo run an hour later another demo.)"""
    later = START + timedelta(hours=31)
    a = generate(tmp_path / "a", nodes=4, hours=6, seed=7, start=START)
    b = generate(tmp_path / "b", nodes=4, hours=6, seed=7, start=later)
    shift = later - START

    def moved(inc: dict) -> dict:
        return {**inc, "ts": (datetime.fromisoformat(inc["ts"]) + shift).isoformat()}
    assert [moved(i)["ts"][:19] for i in a.incidents] == [i["ts"][:19] for i in b.incidents]
    assert [{k: v for k, v in i.items() if k != "ts"} for i in a.incidents] == \
        [{k: v for k, v in i.items() if k != "ts"} for i in b.incidents]
    for fa, fb in zip(a.files, b.files):
        assert len(fa.path.read_bytes().splitlines()) == len(fb.path.read_bytes().splitlines()), fa.path.name
        if fa.format == "kernel":
            assert fa.path.read_bytes() == fb.path.read_bytes(), fa.path.name


def test_layout_and_manifest(day: Manifest) -> None:
    root = day.files[0].path.parents[1]
    assert day.bytes == sum(f.path.stat().st_size for f in day.files)
    assert {f.path for f in day.files} == {p for p in root.rglob("*") if p.is_file()}
    formats = {f.path.relative_to(root).as_posix(): f.format for f in day.files}
    assert formats["slurm/slurmctld.log"] == "slurm" and formats["slurm/jobcomp.log"] == "slurm_jobs"
    for i in range(1, 17):
        node = f"gpu{i:03d}"
        assert (formats[f"nodes/{node}/syslog"], formats[f"nodes/{node}/dmesg"]) == ("syslog", "kernel")
        assert formats[f"nodes/{node}/nvidia-smi.xml"] == "nvidia_smi"
    jobs = [f for f in day.files if f.format == "nccl"]
    assert len(jobs) > 20 and all(f.path.name == f"slurm-{f.job}.out" for f in jobs)
    assert (day.start, day.end) == (START, START + timedelta(hours=24))


def test_incidents_ground_truth(day: Manifest) -> None:
    assert {i["type"] for i in day.incidents} >= {"xid79", "ib_link_down", "oom", "app_xid", "node_not_responding"}
    root = day.files[0].path.parents[1]
    expected = {"xid79": ("gpu_xid", 79), "ib_link_down": ("ib_link_down", None), "oom": ("oom_kill", None),
                "node_not_responding": ("slurm_node_not_responding", None)}
    for inc in day.incidents:
        assert set(inc) == INCIDENT_KEYS
        assert START <= datetime.fromisoformat(inc["ts"]) < day.end
        assert (root / "jobs" / f"slurm-{inc['job_id']}.out").exists()
        assert re.fullmatch(r"gpu\d{3}", inc["node"])
        if inc["type"] in expected:
            assert (inc["kind"], inc["code"]) == expected[inc["type"]]
        dmesg = (root / "nodes" / inc["node"] / "dmesg").read_text()
        if inc["type"] in ("xid79", "app_xid"):
            assert re.fullmatch(r"0000:[0-9a-f]{2}:00", inc["gpu"]) and inc["kind"] == "gpu_xid"
            assert f"NVRM: Xid (PCI:{inc['gpu']}): {inc['code']}, " in dmesg
        if inc["type"] == "xid79":
            assert f"NVRM: GPU {inc['gpu']}.0: GPU has fallen off the bus." in dmesg
            job = (root / "jobs" / f"slurm-{inc['job_id']}.out").read_text()
            assert "Watchdog caught collective operation timeout" in job and "ProcessGroupNCCL.cpp:1785" in job
        if inc["type"] == "ib_link_down":
            assert re.search(r"mlx5_core 0000:[0-9a-f]{2}:00\.0 mlx5_\d: Port: 1 Link DOWN", dmesg)
        if inc["type"] == "oom":
            assert "Out of memory: Killed process" in dmesg
        if inc["type"] == "node_not_responding":
            assert f"error: Nodes {inc['node']} not responding" in (root / "slurm/slurmctld.log").read_text()


def test_line_formats(day: Manifest) -> None:
    for path, lines in _lines(day, "syslog").items():
        bad = [x for x in lines if not RFC3164.match(x)]
        assert not bad, (path, bad[:3])
        stamps = [x[:15] for x in lines]  # one month: "Nov 20 09:..." sorts as text
        assert stamps == sorted(stamps), path
    for path, lines in _lines(day, "kernel").items():
        uptimes = [float(DMESG.match(x).group(1)) for x in lines]
        assert lines[0].startswith("[    0.000000] Linux version") and uptimes == sorted(uptimes), path
    ctld = _lines(day, "slurm")[day.files[0].path]
    assert all(SLURMCTLD.match(x) for x in ctld) and [x[:25] for x in ctld] == sorted(x[:25] for x in ctld)
    assert any(re.search(r"sched: Allocate JobId=\d+ NodeList=gpu\[\d{3}-\d{3}\] #CPUs=\d+ Partition=gpu", x) for x in ctld)
    assert any(re.search(r"_job_complete: JobId=\d+ (?:WEXITSTATUS|WTERMSIG) \d+$", x) for x in ctld)
    for line in next(iter(_lines(day, "slurm_jobs").values())):
        assert re.match(r"JobId=\d+ UserId=\w+\(\d+\) GroupId=.* JobState=[A-Z_]+ .* ExitCode=\d+:\d+$", line)
    for f in day.files:
        if f.format == "nvidia_smi":
            doc = ET.parse(f.path).getroot()
            gpus = doc.findall("gpu")
            assert doc.tag == "nvidia_smi_log" and len(gpus) == int(doc.findtext("attached_gpus")) == 8
            assert all(re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", g.get("id")) for g in gpus)


def test_boot_time_recoverable_from_syslog(day: Manifest) -> None:
    boots = {f.node: f.boot_time for f in day.files if f.format == "kernel"}
    for path, lines in _lines(day, "syslog").items():
        for line in lines:
            m = re.search(r" kernel: \[ *(\d+\.\d{6})\] ", line)
            if m:
                boot = _syslog_time(line) - timedelta(seconds=float(m.group(1)))
                assert timedelta(0) <= boots[path.parent.name] - boot < timedelta(seconds=1)


def test_target_bytes(tmp_path: Path) -> None:
    reported = []
    m = generate(tmp_path, nodes=4, seed=3, start=START, target_bytes=6_000_000, progress=reported.append)
    assert 6_000_000 <= m.bytes <= 6_600_000
    assert sum(reported) == m.bytes == sum(f.path.stat().st_size for f in m.files)
    assert m.end - m.start > timedelta(hours=24)


def test_small_run(tmp_path: Path) -> None:
    m = generate(tmp_path, nodes=2, hours=1, start=START)
    assert m.bytes > 10_000 and len([f for f in m.files if f.format == "syslog"]) == 2
