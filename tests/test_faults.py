"""The fault policy (observe.health.faults), table-driven: dedup, recovery, the remedy ladder,
repetition, application Xids, clearing pairs, the breaker's stale faults and observe-only rules.

Fault lines are real driver / kernel line formats run through the kernel parser and the Xid catalog;
recoveries are the events ``observe health set-healthy`` writes."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from observe.collector import Context
from observe.health import faults, policy
from observe.health.recovery import fault_cleared
from observe.ingest import parse_bytes
from observe.schema import conform

T0 = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)
RULES = policy.load().faults
G1, G2, G3 = "0000:3b:00", "0000:5e:00", "0000:86:00"
XID = {
    48: "Ch 0000000a, DBE (double bit error) detected.",
    79: "GPU has fallen off the bus.",
    13: "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x17_00592000.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
}
DOWN = "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN"
UP = "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE"
UP_OTHER = "mlx5_core 0000:ab:00.0 mlx5_6: Port: 1 Link ACTIVE"


def xid(code: int, gpu: str = G1, pid: int = 4242, detail: str | None = None) -> str:
    return f"NVRM: Xid (PCI:{gpu}): {code}, pid={pid}, name=python, {detail or XID[code]}"


@dataclass
class Case:
    name: str
    lines: list[tuple[float, str]]  # (minutes after T0, kernel message)
    cleared: list[tuple[float, str | None, str]] = field(default_factory=list)  # (minutes, gpu, did)
    expect: list[tuple] = field(default_factory=list)  # (kind or Xid code, gpu, open, remedy, acting) in time order
    now: float = 60.0
    rules: dict = field(default_factory=dict)
    breaker_reset: float | None = None


def events(case: Case, node: str = "gpu1", route: str = "kmsg") -> pl.LazyFrame:
    text = "".join(f"{T0 + timedelta(minutes=m):%Y-%m-%dT%H:%M:%S.%f+00:00} {node} kernel: {line}\n"
                   for m, line in case.lines)
    frames = [parse_bytes(text.encode(), "kernel", Context(node=node, route=route))]
    for m, gpu, did in case.cleared:
        frames.append(fault_cleared(node, gpu, did, by="test").with_columns(
            pl.lit(T0 + timedelta(minutes=m)).dt.cast_time_unit("us").alias("ts")))
    return pl.concat([conform(f) for f in frames]).lazy()


def decide(case: Case) -> pl.DataFrame:
    reset = T0 + timedelta(minutes=case.breaker_reset) if case.breaker_reset is not None else None
    return faults.decide(events(case), replace(RULES, **{k: tuple(v) for k, v in case.rules.items()}), T0 + timedelta(minutes=case.now), reset)


CASES = [
    Case("one fatal Xid: its catalog remedy, acting",
         [(0, xid(48))], expect=[(48, G1, True, "reset", True)]),
    Case("repeated lines within the dedup window are one episode",
         [(m / 10, xid(48)) for m in range(40)], expect=[(48, G1, True, "reset", True)]),
    Case("a GPU recovery ends that GPU's fault only",
         [(0, xid(48)), (1, xid(48, G2))], cleared=[(10, G1, "reset")],
         expect=[(48, G1, False, "reset", False), (48, G2, True, "reset", True)]),
    Case("a node-wide recovery ends every GPU's fault before it, not after it",
         [(0, xid(48)), (1, xid(79, G2)), (30, xid(48, G3))], cleared=[(10, None, "reboot")],
         expect=[(48, G1, False, "reset", False), (79, G2, False, "reboot", False), (48, G3, True, "reset", True)]),
    Case("a reboot (kernel_boot line) ends faults like a recovery",
         [(0, xid(79)), (5, "Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP")],
         expect=[(79, G1, False, "reboot", False)]),
    Case("ladder: a fault that comes back after a reset calls for a reboot",
         [(0, xid(48)), (30, xid(48))], cleared=[(10, G1, "reset")],
         expect=[(48, G1, False, "reset", False), (48, G1, True, "reboot", True)]),
    Case("ladder: back again after the reboot: replace",
         [(0, xid(48)), (30, xid(48)), (90, xid(48))], cleared=[(10, G1, "reset"), (60, None, "reboot")],
         expect=[(48, G1, False, "reset", False), (48, G1, False, "reboot", False), (48, G1, True, "replace", True)],
         now=120),
    Case("ladder starts where the catalog says: Xid 79 reboots first, then replace",
         [(0, xid(79)), (30, xid(79))], cleared=[(10, None, "reboot")],
         expect=[(79, G1, False, "reboot", False), (79, G1, True, "replace", True)]),
    Case("repetition: the same fatal Xid 3 times in 24h on one GPU, even unremedied: replace",
         [(0, xid(48)), (60, xid(48)), (120, xid(48))],
         expect=[(48, G1, True, "reset", True), (48, G1, True, "reset", True), (48, G1, True, "replace", True)],
         now=130),
    Case("repetition counts the window: 3 episodes over 3 days stay a reset",
         [(0, xid(48)), (1500, xid(48)), (3000, xid(48))],
         expect=[(48, G1, True, "reset", True), (48, G1, True, "reset", True), (48, G1, True, "reset", True)],
         now=3010),
    Case("3 remediations of the node in 7 days: the next fault calls for replace",
         [(0, xid(48, G2)), (5000, xid(48, G3)), (8000, xid(48))],
         cleared=[(10, G2, "reset"), (5010, None, "reboot"), (7000, G3, "reset")],
         expect=[(48, G2, False, "reset", False), (48, G3, False, "reset", False), (48, G1, True, "replace", True)],
         now=8010),
    Case("a false alarm (--did none) ends the fault without counting as a remediation",
         [(0, xid(48)), (30, xid(48))], cleared=[(10, G1, "none")],
         expect=[(48, G1, False, "reset", False), (48, G1, True, "reboot", True)]),
    Case("application Xids spread over GPUs are the job's",
         [(0, xid(31, G1)), (10, xid(31, G2)), (20, xid(31, G3)), (30, xid(31, G1))],
         expect=[(31, G1, True, "app", False), (31, G2, True, "app", False), (31, G3, True, "app", False),
                 (31, G1, True, "app", False)]),
    Case("application Xids on one GPU alone, again and again: still the job's (a user faults a GPU at will)",
         [(0, xid(31, G1, pid=1)), (60, xid(31, G1, pid=2)), (120, xid(31, G1, pid=3)), (180, xid(31, G1, pid=4))],
         expect=[(31, G1, True, "app", False)] * 4, now=190),
    Case("one job's Xid 31, three episodes seven minutes apart on one GPU: the job's",
         [(0, xid(31)), (7, xid(31)), (14, xid(31))], expect=[(31, G1, True, "app", False)] * 3, now=20),
    Case("Xid 13 on the same GPC/TPC 3 times: the job's",
         [(0, xid(13, G1)), (60, xid(13, G1)), (120, xid(13, G1))],
         expect=[(13, G1, True, "app", False)] * 3, now=130),
    Case("a contained ECC error (94: restart the application, catalog: memory) on one GPU alone: hardware",
         [(0, xid(94, G1, pid=1)), (60, xid(94, G1, pid=2)), (120, xid(94, G1, pid=3))],
         expect=[(94, G1, True, "app", False), (94, G1, True, "app", False), (94, G1, True, "drain", True)],
         now=130),
    Case("... spread over GPUs: the application's",
         [(0, xid(94, G1)), (60, xid(94, G2)), (120, xid(94, G1)), (130, xid(94, G1))],
         expect=[(94, G1, True, "app", False), (94, G2, True, "app", False), (94, G1, True, "app", False),
                 (94, G1, True, "app", False)], now=140),
    Case("an IB port down and never up stays open",
         [(0, DOWN)],
         expect=[("ib_link_down", None, True, "drain", True)]),
    Case("a flapping port is one episode, open until quiet for 10 minutes after its last up",
         [(0, DOWN), (1, UP),
          (2, DOWN), (3, UP)],
         expect=[("ib_link_down", None, True, "drain", True)], now=8),
    Case("... and ended once quiet",
         [(0, DOWN), (1, UP),
          (2, DOWN), (3, UP)],
         expect=[("ib_link_down", None, False, "drain", False)], now=20),
    Case("another port coming up does not clear a down port",
         [(0, DOWN), (1, UP_OTHER)],
         expect=[("ib_link_down", None, True, "drain", True)], now=30),
    Case("faults before a breaker reset are stale: reported, not replayed",
         [(0, xid(48)), (30, xid(48, G2))], breaker_reset=10,
         expect=[(48, G1, True, "reset", False), (48, G2, True, "reset", True)]),
    Case("an observe-only rule decides but never acts",
         [(0, xid(48)), (1, xid(79, G2))], rules={"observe_only": ["xid:48"]},
         expect=[(48, G1, True, "reset", False), (79, G2, True, "reboot", True)]),
    Case("a kind can be observe-only as a whole",
         [(0, DOWN)], rules={"observe_only": ["ib_link_down"]},
         expect=[("ib_link_down", None, True, "drain", False)]),
    Case("Xid 154 takes the recovery action its line states, not the catalog's",
         [(0, f"NVRM: Xid (PCI:{G1}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),
          (1, f"NVRM: Xid (PCI:{G2}): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
          (2, f"NVRM: Xid (PCI:{G3}): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")],
         expect=[(154, G1, True, "reset", True), (154, G2, True, "reboot", True)]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fault_policy(case: Case) -> None:
    got = decide(case)
    rows = [(r["code"] if r["kind"] == "gpu_xid" else r["kind"], r["gpu"], r["open"], r["remedy"], r["acting"])
            for r in got.sort("first_ts", "gpu").iter_rows(named=True)]
    assert rows == case.expect, got.select("kind", "code", "gpu", "first_ts", "episodes", "ended", "remedy", "reason")


def test_reasons_are_typed_and_say_why() -> None:
    got = decide(CASES[6])  # the full ladder
    assert got.get_column("reason").to_list()[-1].startswith("[hardware] Xid 48 on 0000:3b:00: replace; 3 episodes")
    assert all(r.startswith("[user] Xid 31") for r in decide(CASES[13]).get_column("reason"))
    hw = decide(CASES[16]).get_column("reason").to_list()
    assert hw[0].startswith("[user] Xid 94") and hw[-1].startswith("[hardware] Xid 94") and "field diagnostics" in hw[-1]
    assert decide(CASES[18]).get_column("reason")[0].startswith("[node] ib_link_down")


def test_dedup_folds_800k_lines_into_29_episodes() -> None:
    """An Xid 95 storm: 800,000 lines in 29 bursts (each one 27,586-line burst at 100 lines/s, an
    hour apart) are 29 episodes with their line counts; past the 3rd in 24h the remedy is replace."""
    bursts, per = 29, 800_000 // 29
    start = pl.Series([T0 + timedelta(hours=h) for h in range(bursts)]).dt.cast_time_unit("us")
    ts = (start.repeat_by(per).explode() + pl.Series(list(range(per)) * bursts) * timedelta(milliseconds=10))
    n = len(ts)
    frame = pl.DataFrame({"ts": ts, "node": ["gpu1"] * n, "source": ["kernel"] * n, "kind": ["gpu_xid"] * n,
                          "gpu": [G1] * n, "code": [95] * n, "message": [xid(95, detail="Uncontained ECC error")] * n,
                          "attrs": ['{"action":"reset_gpu"}'] * n})
    frame = conform(frame)
    got = faults.decide(frame.lazy(), RULES, T0 + timedelta(hours=30))
    assert got.height == bursts and got.get_column("lines").sum() == per * bursts
    assert got.get_column("lines").to_list() == [per] * bursts
    assert got.get_column("remedy").to_list() == ["reset", "reset"] + ["replace"] * (bursts - 2)


def test_verdict_takes_the_gravest_remedy_per_node() -> None:
    got = faults.verdict(decide(Case("", [(0, xid(48)), (1, xid(79, G2)), (2, xid(31, G3))])))
    (row,) = got.rows(named=True)
    assert (row["node"], row["remedy"], row["category"], row["gpus"]) == ("gpu1", "reboot", "hardware", [G1, G2])
    assert row["reasons"][0].startswith("[hardware] Xid 79") and len(row["reasons"]) == 2


def test_an_undated_fault_ends_only_by_a_persons_statement() -> None:
    """A dmesg line without a time cannot be placed before or after a reboot line; set-healthy ends it."""
    undated = parse_bytes(f"NVRM: Xid (PCI:{G1}): 79, GPU has fallen off the bus.\n".encode(), "kernel",
                          Context(node="gpu1", route="kmsg"))
    assert undated["ts"][0] is None and undated["kind"][0] == "gpu_xid"
    boot = events(Case("", [(5, "Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP")])).collect()
    both = pl.concat([conform(undated), boot])
    now = T0 + timedelta(hours=1)
    assert faults.decide(both.lazy(), RULES, now)["open"].to_list() == [True]
    cleared = pl.concat([both, events(Case("", [], cleared=[(10, None, "reboot")])).collect()])
    assert faults.decide(cleared.lazy(), RULES, now)["open"].to_list() == [False]


def test_a_recovery_splits_lines_inside_the_dedup_window() -> None:
    """Lines a minute apart are two episodes when a recovery came between them (a drill's pace)."""
    got = decide(Case("", [(0, xid(48)), (2, xid(48))], cleared=[(1, G1, "reset")]))
    assert got.select("open", "remedy").rows() == [(False, "reset"), (True, "reboot")]


@pytest.mark.parametrize("route", ["journal_user", "user_file", "job_output", None])
def test_faults_and_recoveries_come_only_from_trusted_routes(route: str | None) -> None:
    """A fatal Xid a user wrote (``logger -t kernel``, a file they own, their job's output, or a
    route never recorded) opens no fault; a forged recovery ends no real one."""
    forged = events(Case("", [(0, xid(79))]), route=route).collect()
    assert faults.decide(forged.lazy(), RULES, T0 + timedelta(hours=1)).height == 0
    real = events(Case("", [(0, xid(79))])).collect()
    reboot = events(Case("", [(5, "Linux version 6.1.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP")]),
                    route=route).collect()
    got = faults.decide(pl.concat([real, reboot]).lazy(), RULES, T0 + timedelta(hours=1))
    assert got.select("open", "acting").rows() == [(True, True)]
