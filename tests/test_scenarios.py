"""Scenario mode of the simulator (observe.simulate): failures with a known root cause in realistic noise."""
from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from observe.simulate import FAST, FATAL_XIDS, REAL, REGRESSION, SCENARIOS, TYPES, Manifest, generate, scenarios

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "real"
DMESG = re.compile(r"^\[ *(\d+)\.(\d{6})\] (.*)$")
TIMEOUT = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+),")
TYPE_NAMES = {t for t in REGRESSION if t != "xid_noise"} | {"user_error"}


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    return scenarios(tmp_path_factory.mktemp("scenarios"), **FAST)


def _root(m: Manifest) -> Path:
    return m.files[0].path.parents[1]


def _incidents(manifests: list[Manifest], kind: str) -> list[tuple[Manifest, dict]]:
    return [(m, i) for m in manifests for i in m.incidents if i["type"] == kind]


def _dmesg(m: Manifest, node: str) -> list[tuple[datetime, str]]:
    """(true time, text) of a node's dmesg lines (the manifest's boot time is by the node's clock)."""
    f = next(f for f in m.files if f.format == "kernel" and f.node == node)
    boot = f.boot_time - timedelta(seconds=m.skew.get(node, 0.0))
    out = []
    for line in f.path.read_text().splitlines():
        s, us, text = DMESG.match(line).groups()
        out.append((boot + timedelta(seconds=int(s), microseconds=int(us)), text))
    return out


def _syslog_times(m: Manifest, node: str) -> list[datetime]:
    lines = (_root(m) / "nodes" / node / "syslog").read_text().splitlines()
    return [datetime.strptime(f"{m.start.year} {x[:15]}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc) for x in lines]


def test_real_lines_come_from_the_corpus() -> None:
    for name, (file, lines, values) in REAL.items():
        text = (CORPUS / file).read_text()
        for k, line in enumerate(lines):
            assert line.format(**(values[k] if isinstance(values, tuple) else values)) in text, (name, line)


def test_fast_set_ground_truth(fast: list[Manifest]) -> None:
    incidents = [i for m in fast for i in m.incidents]
    counts = Counter(i["type"] for i in incidents)
    assert 40 <= len(incidents) <= 90 and set(counts) == TYPE_NAMES and min(counts.values()) >= 3, counts
    jobs = [i["job_id"] for i in incidents]
    assert len(jobs) == len(set(jobs))  # one record per failed job, job ids distinct over the clusters
    for a, b in zip(fast, fast[1:]):  # clusters follow each other in time
        assert a.end < b.start
    for m in fast:
        root = _root(m)
        for i in m.incidents:
            assert set(i) >= {"type", "node", "nodes", "gpu", "job_id", "ts", "kind", "code", "category"}
            assert i["node"] in i["nodes"] and m.start <= datetime.fromisoformat(i["ts"]) < m.end
            kind, category = TYPES[i["type"]]
            assert i["category"] == category and (kind is None or i["kind"] == kind)
            jobcomp = re.search(rf"^JobId={i['job_id']} .* JobState=(\w+)", (root / "slurm/jobcomp.log").read_text(), re.M)
            assert jobcomp and jobcomp.group(1) in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY"), i
            if i["type"] == "fatal_xid":
                assert i["code"] in FATAL_XIDS and i["category"] == "gpu"
                assert f"NVRM: Xid (PCI:{i['gpu']}): {i['code']}, " in (root / "nodes" / i["node"] / "dmesg").read_text()


def test_ib_switch_takes_down_a_leaf(fast: list[Manifest]) -> None:
    found = _incidents(fast, "ib_switch")
    assert found
    for m, i in found:
        ts = datetime.fromisoformat(i["ts"])
        downs = {}
        for node in i["switch_nodes"]:
            times = [t for t, x in _dmesg(m, node) if x.endswith("Link DOWN") and abs(t - ts) < timedelta(minutes=2)]
            if times:
                downs[node] = min(times)
        assert len(downs) >= 4 and set(i["nodes"]) <= set(downs)
        assert max(downs.values()) - min(downs.values()) <= timedelta(seconds=60)
        assert downs[i["node"]] == min(downs[n] for n in i["nodes"])
        job = (_root(m) / "jobs" / f"slurm-{i['job_id']}.out").read_text()
        assert "NCCL WARN NET/IB : Got completion from peer" in job


def test_hung_rank_only_sequence_numbers_tell(fast: list[Manifest]) -> None:
    found = _incidents(fast, "hung_rank")
    assert found
    for m, i in found:
        onset = datetime.fromisoformat(i["ts"])
        job = (_root(m) / "jobs" / f"slurm-{i['job_id']}.out").read_text()
        seqs = {int(r): int(s) for r, s in TIMEOUT.findall(job)}
        others = {s for r, s in seqs.items() if r != i["rank"]}
        assert len(others) == 1, seqs
        assert seqs.get(i["rank"], others.pop() - 1) == max(seqs.values()) - 1  # silent, or stuck one collective earlier
        window = [x for t, x in _dmesg(m, i["node"]) if onset - timedelta(minutes=1) <= t <= onset + timedelta(minutes=15)]
        assert not [x for x in window if re.search(r"NVRM|oom|Link|blocked for|mlx5", x)], window
        for line in (_root(m) / "slurm/slurmctld.log").read_text().splitlines():
            t = datetime.fromisoformat(line[1:20]).replace(tzinfo=timezone.utc)
            assert not (onset <= t <= onset + timedelta(minutes=15) and f"{i['node']} not responding" in line), line


def test_node_crash_silences_the_node(fast: list[Manifest]) -> None:
    found = _incidents(fast, "node_crash")
    assert found
    for m, i in found:
        onset, node, root = datetime.fromisoformat(i["ts"]), i["node"], _root(m)
        assert max(t for t, _ in _dmesg(m, node)) < onset
        skew = timedelta(seconds=m.skew.get(node, 0.0))
        assert max(_syslog_times(m, node)) <= onset + skew
        ctld = (root / "slurm/slurmctld.log").read_text()
        assert f"error: Nodes {node} not responding\n" in ctld and f"error: Nodes {node} not responding, setting DOWN" in ctld
        assert not (root / "nodes" / node / "nvidia-smi.xml").exists()
        job = (root / "jobs" / f"slurm-{i['job_id']}.out").read_text()
        assert not re.search(rf"^{node}:\d+:\d+ \[\d\] .*NCCL WARN", job, re.M)  # its ranks say nothing
        # nothing of its GPUs before it went (an earlier job's application Xid on the node is the fleet's background)
        assert not [x for t, x in _dmesg(m, node) if "NVRM" in x and t > onset - timedelta(minutes=15)]


def test_the_background_has_application_xids_of_jobs_that_did_not_fail(fast: list[Manifest]) -> None:
    """The generator's side of a healthy fleet's noise: application Xids (13, 31, 43) on GPUs where no
    failure of the ground truth is an app_xid. That explain does not blame them is measured on these
    scenarios by tests/test_explain_accuracy.py (the user-fault and benign types get no drain)."""
    noise = 0
    for m in fast:
        app = {(i["node"], i["gpu"]) for i in m.incidents if i["type"] == "app_xid"}
        for f in m.files:
            if f.format == "kernel":
                for x in f.path.read_text().splitlines():
                    g = re.search(r"NVRM: Xid \(PCI:([\w:]+)\): (13|31|43), ", x)
                    noise += bool(g and (f.node, g.group(1)) not in app)
    assert noise > 20


def test_clock_skew(tmp_path: Path) -> None:
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    m = generate(tmp_path, nodes=6, hours=3, seed=5, start=start, clock_skew_s=3.0, types=tuple(SCENARIOS))
    assert set(m.skew) == {f"gpu{i:03d}" for i in range(1, 7)} and len(set(m.skew.values())) == 6
    assert all(abs(s) <= 3.0 for s in m.skew.values())
    for node, skew in m.skew.items():  # nhc runs every 300 s on the true clock (+ under 0.5 s)
        lines = (tmp_path / "nodes" / node / "syslog").read_text().splitlines()
        for line in [x for x in lines if "CMD (/usr/sbin/nhc" in x][:5]:
            t = datetime.strptime(f"2026 {line[:15]}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
            off = (t - start).total_seconds() % 300
            off = off - 300 if off > 150 else off
            assert -1.0 <= off - skew <= 1.5, (node, line, skew)
    assert generate(tmp_path / "b", nodes=6, hours=3, seed=5, start=start).skew == {}
