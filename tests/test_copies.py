"""One event per real record: a node that keeps its kernel's lines in dmesg, the syslog and kern.log (and
a rotated syslog copied under another name) gives each record once in counts, explain's timeline, the
fault episodes and the exporter's Xid counter; repeats within one input stay repeats."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.copies import one_per_record
from observe.exporter.central import StoreMetrics
from observe.store import Store
from observe.store.copy_marks import stale

runner = CliRunner()
NOW = datetime.now(timezone.utc).replace(microsecond=0)
BOOT = NOW - timedelta(hours=3)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# (uptime, text): a burst of three identical Xid lines within a second, a link down, a later Xid 79
RECORDS = [(9000.000001, XID), (9000.400002, XID), (9000.800003, XID),
           (9100.5, "mlx5_core 0000:1a:00.0 mlx5_0: Port: 1 Link DOWN"), (9900.25, XID)]


def syslog_stamp(t: datetime) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """gpu001's kernel records in dmesg (with --boot-time), its syslog (rsyslog kept the uptime stamp,
    times to the second) and kern.log (no uptime stamp, stamped a second later), all ingested; job 77 ran
    on gpu001 and failed just after the burst."""
    root = tmp_path_factory.mktemp("copies")
    logs = root / "logs"
    logs.mkdir()
    at = [BOOT + timedelta(seconds=up) for up, _ in RECORDS]
    (logs / "dmesg").write_text("".join(f"[{up:12.6f}] {text}\n" for up, text in RECORDS))
    (logs / "syslog").write_text(
        f"{syslog_stamp(BOOT + timedelta(seconds=8000))} gpu001 systemd[1]: Started Daily apt activities.\n"
        + "".join(f"{syslog_stamp(t)} gpu001 kernel: [{up:12.6f}] {text}\n" for (up, text), t in zip(RECORDS, at)))
    (logs / "kern.log").write_text("".join(f"{syslog_stamp(t + timedelta(seconds=1))} gpu001 kernel: {text}\n"
                                           for (_, text), t in zip(RECORDS, at)))
    start, end = BOOT + timedelta(seconds=8500), BOOT + timedelta(seconds=9030)
    (logs / "slurmctld.log").write_text(
        f"[{start:%Y-%m-%dT%H:%M:%S}.000] sched: Allocate JobId=77 NodeList=gpu001 #CPUs=8 Partition=gpu\n"
        f"[{end:%Y-%m-%dT%H:%M:%S}.000] _job_complete: JobId=77 WEXITSTATUS 1\n")
    store = root / "store"
    for args in (["ingest", str(logs / "syslog"), str(logs / "kern.log"), str(logs / "slurmctld.log")],
                 ["ingest", str(logs / "dmesg"), "--source", "kernel", "--node", "gpu001",
                  "--boot-time", BOOT.isoformat()]):
        result = runner.invoke(app, [*args, "--store", str(store)])
        assert result.exit_code == 0, result.output
    return {"root": root, "logs": logs, "store": store}


def query(store: Path, *args: str) -> list[dict]:
    result = runner.invoke(app, ["query", "--format", "json", "--limit", "0", "--store", str(store), *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_store_keeps_every_copy_and_reading_gives_each_record_once(site: dict) -> None:
    raw = Store(site["store"]).scan(sources=["kernel"]).collect()
    assert raw.height == 3 * len(RECORDS)  # three inputs, each stored whole
    xids = query(site["store"], "--kind", "gpu_xid")
    assert len(xids) == 4  # the burst is three records, not one; the later Xid one more
    assert len(query(site["store"], "--kind", "ib_link_down")) == 1
    assert len({x["file_id"] for x in xids}) == 1  # one input's rows kept, not a mixture


def test_explain_lists_the_burst_once(site: dict) -> None:
    result = runner.invoke(app, ["explain", "77", "--format", "json", "--store", str(site["store"])])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["root_cause"]["kind"] == "gpu_xid" and report["root_cause"]["node"] == "gpu001"
    xids = [t for t in report["timeline"] if t["kind"] == "gpu_xid"]
    assert sum(t["count"] for t in xids) == 3, xids  # the burst before the job's end, not 9


def test_fault_episodes_count_lines_once(site: dict) -> None:
    result = runner.invoke(app, ["health", "faults", "--all", "--format", "json", "--since", "1d",
                                 "--store", str(site["store"])])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sum(r["lines"] for r in rows if r["kind"] == "gpu_xid") == 4, rows


def test_the_exporter_counts_each_xid_once_across_refreshes(site: dict, tmp_path: Path) -> None:
    """The syslog's copies arrive first (a route users can write: counted as evidence, without an
    action), dmesg's and kern.log's in a later refresh (the kernel's: counted once with the action)."""
    store = tmp_path / "store"
    first = runner.invoke(app, ["ingest", str(site["logs"] / "syslog"), "--store", str(store)])
    assert first.exit_code == 0, first.output
    metrics = StoreMetrics(Store(store), known_nodes=lambda: {"gpu001"})
    metrics.refresh()
    assert sum(metrics.xids.counts.values()) == 0 and dict(metrics.xids.untrusted) == {("gpu001", "79"): 4}
    later = runner.invoke(app, ["ingest", str(site["logs"] / "kern.log"), str(site["logs"] / "dmesg"), "--node",
                                "gpu001", "--boot-time", BOOT.isoformat(), "--store", str(store)])
    assert later.exit_code == 0, later.output
    metrics.refresh()
    assert dict(metrics.xids.counts) == {("gpu001", "79", "drain_node"): 4}, dict(metrics.xids.counts)
    at_once = StoreMetrics(Store(store), known_nodes=lambda: {"gpu001"})  # a restart reads all three at once
    at_once.refresh()
    assert dict(at_once.xids.counts) == dict(metrics.xids.counts)


def test_a_rotated_copy_under_another_name_is_read_once(site: dict, tmp_path: Path) -> None:
    shutil.copy(site["logs"] / "syslog", tmp_path / "syslog-20261120")
    store = tmp_path / "store"
    result = runner.invoke(app, ["ingest", str(site["logs"] / "syslog"), str(tmp_path / "syslog-20261120"),
                                 "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert Store(store).scan().collect().height == 2 * (len(RECORDS) + 1)
    assert len(query(store)) == len(RECORDS) + 1


def test_repeats_within_one_input_are_kept_and_an_input_missing_some_loses() -> None:
    """One input's rows are never merged; where inputs disagree, the one holding more of a burst wins."""
    at = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)
    rows = [("a", at), ("a", at), ("a", at + timedelta(seconds=1)),  # a repeats one line three times
            ("b", at + timedelta(seconds=1)), ("b", at + timedelta(seconds=2))]  # b missed one of them
    df = pl.DataFrame({"file_id": [f for f, _ in rows], "ts": [t for _, t in rows]}).with_columns(
        source=pl.lit("kernel"), node=pl.lit("gpu001"), job_id=pl.lit(None, pl.String), rank=pl.lit(None, pl.Int64),
        message=pl.lit(XID), attrs=pl.lit(None, pl.String), route=pl.lit("kmsg"))
    kept = one_per_record(df.lazy()).collect()
    assert kept.get_column("file_id").to_list() == ["a", "a", "a"]
    far = df.with_columns(pl.when(pl.col("file_id") == "b").then(pl.col("ts") + timedelta(minutes=5))
                          .otherwise("ts").alias("ts"))
    assert one_per_record(far.lazy()).collect().height == 5  # minutes apart: other records


@pytest.mark.parametrize("gap_ms", [0, 900, 1999])
def test_a_copy_pair_is_one_record_wherever_it_falls_on_the_bucket_grid(gap_ms: int) -> None:
    """dmesg's copy of a record and syslog's ``gap_ms`` later, at every 100 ms of two bucket widths (the grid
    copies.py sorts rows into before it compares them): one record each time, a pair straddling a bucket's edge
    (dmesg at :03.5, syslog at :04.5) included."""
    base = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)
    starts = [base + timedelta(minutes=i, milliseconds=100 * i) for i in range(80)]  # 0.0 s .. 7.9 s past a bucket
    rows = [(f, t + timedelta(milliseconds=gap_ms if f == "s" else 0)) for t in starts for f in ("d", "s")]
    df = pl.DataFrame({"file_id": [f for f, _ in rows], "ts": [t for _, t in rows]}).with_columns(
        source=pl.lit("kernel"), node=pl.lit("gpu001"), job_id=pl.lit(None, pl.String), rank=pl.lit(None, pl.Int64),
        message=pl.lit(XID), attrs=pl.lit(None, pl.String), route=pl.lit("kmsg"))
    assert one_per_record(df.lazy()).collect().height == len(starts)


@pytest.mark.parametrize("nodes", [1, 6])
def test_many_rows_are_sought_for_copies_a_part_at_a_time(monkeypatch, nodes: int) -> None:
    """More dated rows than SOUGHT_ROWS are written out narrow in parts (some streams' ten minutes each, one job's
    output being one stream) and sought for copies a part at a time (their window functions hold what they read:
    20 GB over a 2,560-node fleet's days at once), then clustered some streams at a time: the same records kept,
    in the same order, as when sought at once, pairs a block's edge splits included (dmesg 0.2 s before each
    minute, the syslog 0.1 s after), and where only some rows' marks are stale; rows without a time make no part."""
    import observe.copies as copies

    base = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)  # a ten-minute block's edge, as every tenth minute
    rows = [(f"gpu{n:03d}", f, base + timedelta(minutes=i, milliseconds=-200 if f == "d" else 100))
            for n in range(nodes) for i in range(25) for f in ("d", "s")]
    df = pl.DataFrame({"node": [n for n, _, _ in rows], "file_id": [f for _, f, _ in rows], "ts": [t for *_, t in rows]}
                      ).with_columns(source=pl.lit("kernel"), job_id=pl.lit(None, pl.String), rank=pl.lit(None, pl.Int64),
                                     message=pl.lit(XID), attrs=pl.lit(None, pl.String), route=pl.lit("kmsg"))
    marked = df.with_columns(copy_of=pl.lit(None, pl.String))  # stored marks that kept every row: stale on gpu000
    whole, mine = one_per_record(df.lazy()).collect(), pl.col("node") == "gpu000"
    whole_stale = one_per_record(marked.lazy(), mine=mine).collect()
    split, parts = copies._split, []
    monkeypatch.setattr(copies, "_split", lambda rows, folder: (split(rows, folder), parts.append(len(list(folder.iterdir())))))
    monkeypatch.setattr(copies, "SOUGHT_ROWS", 7)
    monkeypatch.setattr(copies, "CLUSTERED_ROWS", 5)  # and clustered some streams at a time
    parted = one_per_record(df.lazy()).collect()
    assert whole.height == 25 * nodes and parted.equals(whole) and len(parts) == 1 and parts[0] > 1, parts
    assert whole_stale.height == 25 + 50 * (nodes - 1)
    assert one_per_record(marked.lazy(), mine=mine).collect().equals(whole_stale) and len(parts) == 2
    undated = df.with_columns(pl.lit(None, pl.Datetime("us", "UTC")).alias("ts"))
    assert one_per_record(undated.lazy()).collect().height == undated.height and len(parts) == 2


def test_lines_a_user_can_write_never_hide_the_kernels() -> None:
    """A syslog relays what any process sends (``logger -t kernel``): however many copies of a kernel
    record it holds, the kernel's own log (a trusted route) is what is kept."""
    at = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)
    rows = [("kmsg", "k", at)] + [("syslog_file", "s", at + timedelta(milliseconds=100 * i)) for i in range(5)]
    df = pl.DataFrame({"route": [r for r, _, _ in rows], "file_id": [f for _, f, _ in rows],
                       "ts": [t for _, _, t in rows]}).with_columns(
        source=pl.lit("kernel"), node=pl.lit("gpu001"), job_id=pl.lit(None, pl.String), rank=pl.lit(None, pl.Int64),
        message=pl.lit(XID), attrs=pl.lit(None, pl.String))
    kept = one_per_record(df.lazy()).collect()
    assert kept.get_column("file_id").to_list() == ["k"]


def test_the_demos_store_gives_each_kernel_record_once(tmp_path: Path) -> None:
    """``observe demo`` keeps every node's kernel lines in dmesg and in its syslog: the store holds both
    copies; queries and the exporter's counter give each record once (dmesg's count)."""
    result = runner.invoke(app, ["demo", "--dir", str(tmp_path), "--nodes", "16", "--hours", "24", "--seed", "3"])
    assert result.exit_code == 0, result.output
    dmesg = {p.parent.name: p.read_text().count("NVRM: Xid") for p in (tmp_path / "logs" / "nodes").glob("*/dmesg")}
    syslog = {p.parent.name: p.read_text().count("NVRM: Xid") for p in (tmp_path / "logs" / "nodes").glob("*/syslog")}
    assert sum(dmesg.values()) >= 3 and syslog == dmesg
    truth = {node: n for node, n in dmesg.items() if n}
    store = tmp_path / "store"
    raw = Store(store).scan(sources=["kernel"]).filter(pl.col("kind") == "gpu_xid").collect()
    assert raw.height == 2 * sum(truth.values())
    assert dict(pl.DataFrame(query(store, "--kind", "gpu_xid")).group_by("node").len().iter_rows()) == truth
    metrics = StoreMetrics(Store(store), known_nodes=lambda: set(dmesg))
    metrics.refresh()
    counted: dict[str, int] = {}
    for (node, _, _), n in metrics.xids.counts.items():
        counted[node] = counted.get(node, 0) + n
    assert counted == truth


@pytest.mark.parametrize("lines", [50, 400_000])  # batched with other small files, and read on its own
def test_a_file_and_its_copytruncate_copy_in_one_run_store_each_record_once(tmp_path: Path, lines: int) -> None:
    """logrotate's copytruncate leaves ``syslog.1``, a copy of ``syslog`` as it was: one input (same first line, same
    log name), so one run in one process that reads both stores each record once."""
    from observe.ingest import ingest_inputs

    text = "".join(f"Nov 20 10:{i // 60 % 60:02d}:{i % 60:02d} gpu001 systemd[1]: Started session {i}.\n"
                   for i in range(lines))
    (tmp_path / "syslog").write_text(text)
    shutil.copy(tmp_path / "syslog", tmp_path / "syslog.1")
    store = Store(tmp_path / "store")
    summary = ingest_inputs([(str(tmp_path / n), {}) for n in ("syslog", "syslog.1")], store, workers=1)
    assert not summary.failed and summary.stored == lines and summary.duplicates == lines, summary
    assert store.scan().select(pl.len()).collect().item() == lines


def test_a_reboots_lines_at_the_same_uptime_are_records_of_each_boot(tmp_path: Path) -> None:
    """A node that rebooted prints its first lines at the same uptime stamps again: the syslog keeps both
    boots' lines, dmesg.0 the first boot's and dmesg the second's. Each boot's lines are records (two of
    each), read once each, and the copy marks say the same: one boot's stamp never ties it to another's."""
    first, second = NOW - timedelta(hours=5), NOW - timedelta(hours=2)
    boot = [(0.0, "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)"), (2.5, XID)]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "syslog").write_text("".join(f"{syslog_stamp(b + timedelta(seconds=up))} gpu001 kernel: [{up:12.6f}] {text}\n"
                                         for b in (first, second) for up, text in boot))
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(logs / "syslog"), "--store", str(store)]).exit_code == 0
    for name, at in (("dmesg.0", first), ("dmesg", second)):
        (logs / name).write_text("".join(f"[{up:12.6f}] {text}\n" for up, text in boot))
        args = ["ingest", str(logs / name), "--source", "kernel", "--node", "gpu001", "--boot-time", at.isoformat()]
        assert runner.invoke(app, [*args, "--store", str(store)]).exit_code == 0
    st = Store(store)
    assert stale(st) == ()
    rows = st.scan(sources=["kernel"]).collect()
    assert rows.height == 8
    assert one_per_record(rows.lazy()).collect().height == 4
    kept = pl.scan_delta(str(st.events)).filter(pl.col("copy_of").is_null() & (pl.col("source") == "kernel")).collect()
    assert kept.height == 4
    assert len(query(store, "--kind", "gpu_xid")) == 2


def _trusted_count(store: Path, *args: str) -> int:
    result = runner.invoke(app, ["query", *args, "--count-by", "route", "--store", str(store)])
    assert result.exit_code == 0, result.output
    return sum(int(line.split()[-1]) for line in result.stdout.splitlines() if line.startswith("system_file"))


def test_a_users_forged_lines_neither_split_a_record_nor_join_two_boots(tmp_path: Path) -> None:
    """(attack-25 r1, r3) A user's `logger -t kernel '[ 3906.450310] ...'` lines in the syslog, each beside a
    real kernel line (a segfault they cause) so that they are clustered, carry a trusted record's stamp and
    text: an hour later they must not split the record's kern.log and dmesg copies (dmesg read without its
    boot time); once a minute over two hours they must not join two boots' "Linux version" records."""
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    trap = "traps: a.out[{}] general protection fault ip:401000 sp:7ffd error:0 in a.out[401000+1000]"
    (tmp_path / "kern.log").write_text(f"Nov 28 12:00:02 gpu003 kernel: [ 3906.450310] {xid}\n"
                                       f"Nov 28 13:00:02 gpu003 kernel: [ 7506.120000] {trap.format(77)}\n")
    (tmp_path / "syslog").write_text(f"Nov 28 12:00:02 gpu003 kernel: [ 3906.450310] {xid}\n"
                                     f"Nov 28 13:00:02 gpu003 kernel: [ 3906.450310] {xid}\n"
                                     f"Nov 28 13:00:02 gpu003 kernel: [ 7506.120000] {trap.format(77)}\n")
    (tmp_path / "dmesg").write_text(f"[ 3906.450310] {xid}\n")
    one = tmp_path / "one"
    for args in (["kern.log", "--source", "kernel", "--node", "gpu003"], ["syslog"],
                 ["dmesg", "--source", "kernel", "--node", "gpu003"]):
        result = runner.invoke(app, ["ingest", str(tmp_path / args[0]), *args[1:], "--year", "2026", "--store", str(one)])
        assert result.exit_code == 0, result.output
    assert _trusted_count(one, "--kind", "gpu_xid") == 1

    version = "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) #101-Ubuntu SMP"
    (tmp_path / "dmesg.1").write_text(f"[    0.000000] {version}\n"
                                      + "".join(f"[ {60 * i:4d}.000000] {trap.format(i)}\n" for i in range(1, 120)))
    (tmp_path / "dmesg.2").write_text(f"[    0.000000] {version}\n")
    (tmp_path / "syslog.2").write_text("".join(f"Nov 28 {10 + i // 60}:{i % 60:02d}:00 gpu003 kernel: [    0.000000] {version}\n"
                                               for i in range(121)))
    two = tmp_path / "two"
    for name, boot in (("dmesg.1", "2026-11-28T10:00:00Z"), ("dmesg.2", "2026-11-28T12:00:00Z")):
        result = runner.invoke(app, ["ingest", str(tmp_path / name), "--source", "kernel", "--node", "gpu003",
                                     "--boot-time", boot, "--store", str(two)])
        assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["ingest", str(tmp_path / "syslog.2"), "--year", "2026", "--store", str(two)]).exit_code == 0
    assert _trusted_count(two, "--grep", "^Linux version") == 2


def test_a_users_chain_of_lines_never_makes_one_trusted_record_a_copy_of_another(tmp_path: Path) -> None:
    """(attack-34 F1) Two trusted Xid 79s ten minutes apart, one in kern.log.1 and one in kern.log (rotated between
    them), and a user's `logger -t kernel` of the same text every two seconds in between, which rsyslog wrote to
    syslog and user.log: the chain of the user's lines makes one cluster of them all, but a record is a copy only
    of a kept row within the copy window of it. Both trusted Xids count, and each shows in `health faults`."""
    t = datetime(2026, 11, 28, 2, 0, 0, tzinfo=timezone.utc)

    def line(at: datetime, text: str) -> str:
        return f"{at:%Y-%m-%dT%H:%M:%S.%f}+00:00 gpu001 kernel: {text}\n"

    (tmp_path / "kern.log.1").write_text(line(t - timedelta(minutes=5), "Linux version 6.8.0 (buildd@lcy02)") + line(t, XID))
    (tmp_path / "kern.log").write_text(line(t + timedelta(minutes=10), "eth0: renamed from veth3a1")
                                       + line(t + timedelta(minutes=10, seconds=1), XID))
    forged = "".join(line(t + timedelta(seconds=s), XID) for s in range(1, 602, 2))
    (tmp_path / "syslog").write_text(forged)
    (tmp_path / "user.log").write_text(forged)
    store = tmp_path / "store"
    for args in ([str(tmp_path / "kern.log.1"), str(tmp_path / "kern.log"), "--source", "kernel", "--node", "gpu001"],
                 [str(tmp_path / "syslog"), str(tmp_path / "user.log")]):
        result = runner.invoke(app, ["ingest", *args, "--store", str(store)])
        assert result.exit_code == 0, result.output
    assert _trusted_count(store, "--kind", "gpu_xid") == 2
    faults = runner.invoke(app, ["health", "faults", "--since", "2026-11-27", "--format", "json", "--store", str(store)])
    assert faults.exit_code == 0, faults.output
    confirmed = [json.loads(x) for x in faults.stdout.splitlines()]
    assert sorted(f["first_ts"] for f in confirmed if f["confirmed"]) == ["2026-11-28 02:00:00", "2026-11-28 02:10:01"]
    forged = [f for f in confirmed if not f["confirmed"]]  # the user's: evidence, each line once (syslog = user.log)
    assert len(forged) == 1 and forged[0]["lines"] < 301, forged


def test_a_full_temporary_folder_is_one_line_naming_it(monkeypatch, capsys) -> None:
    """(attack-34 F4) Deciding copies over many rows spills to $TMPDIR, which users can fill: that is said in one
    line naming the folder, exit 2, not as an internal error."""
    import sys

    import observe.cli as cli
    import observe.copies as copies

    def full(rows, folder):
        raise OSError(28, "No space left on device")

    at = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)
    df = pl.DataFrame({"file_id": ["d", "s"] * 8, "ts": [at + timedelta(minutes=i // 2) for i in range(16)]}).with_columns(
        source=pl.lit("kernel"), node=pl.lit("gpu001"), job_id=pl.lit(None, pl.String), rank=pl.lit(None, pl.Int64),
        message=pl.lit(XID), attrs=pl.lit(None, pl.String), route=pl.lit("kmsg"))
    monkeypatch.setattr(copies, "SOUGHT_ROWS", 4)
    monkeypatch.setattr(copies, "_split", full)
    with pytest.raises(copies.SpillFailed, match=r"16 rows .* to .* \(TMPDIR\) and failed: .*No space left"):
        one_per_record(df.lazy()).collect()

    def asked(argv):
        return lambda: one_per_record(df.lazy()).collect()

    monkeypatch.setattr(cli, "_asked", asked)
    monkeypatch.setattr(sys, "argv", ["observe", "query"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    lines = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "TMPDIR" in lines[0], lines


def _kernel_lines(path: Path, boot: datetime, records: list[tuple[float, str]], wall: float = 1.0,
                  stamped: bool = True) -> None:
    """kern.log as rsyslog writes it (RFC 3339 times), each line's time the boot plus its uptime times ``wall`` (the
    kernel's clock against the wall clock), with or without the kernel's uptime stamp."""
    path.write_text("".join(f"{boot + timedelta(seconds=up * wall):%Y-%m-%dT%H:%M:%S.%f}+00:00 gpu001 kernel: "
                            + (f"[{up:12.6f}] " if stamped else "") + f"{text}\n" for up, text in records))


def _ingested(store: Path, *args: str) -> None:
    result = runner.invoke(app, ["ingest", *args, "--store", str(store)])
    assert result.exit_code == 0, result.output


def test_one_uptime_stamp_is_one_record_however_far_the_clock_drifted(tmp_path: Path) -> None:
    """(attack-35 F1) dmesg and kern.log keep one Xid 48 with its uptime stamp; the kernel's clock ran 50 ppm slow
    for ten days, so dmesg, dated by kern.log's copies, places it 43 s from kern.log's line: one record (the copies of
    a stamp may lie a minute and a thousandth of the uptime apart), not two rows two seconds apart or none."""
    boot = datetime(2026, 11, 18, tzinfo=timezone.utc)
    xid = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."
    records = [(3600.0 * (1 - 50e-6), "mlx5_core 0000:1a:00.0 mlx5_0: Port: 1 Link UP"), (864000.0 * (1 - 50e-6), xid)]
    _kernel_lines(tmp_path / "kern.log", boot, records, wall=1 / (1 - 50e-6))
    (tmp_path / "dmesg").write_text("".join(f"[{up:12.6f}] {text}\n" for up, text in records))
    store = tmp_path / "store"
    _ingested(store, str(tmp_path / "kern.log"), str(tmp_path / "dmesg"), "--source", "kernel", "--node", "gpu001")
    assert _trusted_count(store, "--kind", "gpu_xid") == 1


def test_a_relayed_line_dated_back_does_not_move_a_trusted_records_copies_apart(tmp_path: Path) -> None:
    """(attack-35 F2) A central syslog keeps the sender's time: a user sends one Xid's text and uptime stamp dated 20 s
    before the kernel printed it. Its copies in dmesg (stamped) and kern.log (unstamped) are still one trusted record,
    before and after compaction: where a stamp's copies are placed is the trusted rows' earliest time."""
    boot = datetime(2026, 11, 28, tzinfo=timezone.utc)
    trap = "traps: a.out[{}] general protection fault ip:401000 sp:7ffd error:0 in a.out[401000+1000]"
    records = sorted([(7150.5 + 3 * i, trap.format(1000 + i)) for i in range(20)] + [(7200.123456, XID)])
    (tmp_path / "dmesg").write_text("".join(f"[{up:12.6f}] {text}\n" for up, text in records))
    _kernel_lines(tmp_path / "kern.log", boot, records, stamped=False)
    (tmp_path / "remote.log").write_text(f"{boot + timedelta(seconds=7180.123456):%Y-%m-%dT%H:%M:%S.%f}+00:00 gpu001 "
                                         f"kernel: [ 7200.123456] {XID}\n")
    store = tmp_path / "store"
    _ingested(store, str(tmp_path / "kern.log"), "--source", "kernel", "--node", "gpu001")
    _ingested(store, str(tmp_path / "dmesg"), "--source", "kernel", "--node", "gpu001", "--boot-time", boot.isoformat())
    _ingested(store, str(tmp_path / "remote.log"))
    assert _trusted_count(store, "--kind", "gpu_xid") == 1
    assert runner.invoke(app, ["compact", "--store", str(store)]).exit_code == 0
    assert _trusted_count(store, "--kind", "gpu_xid") == 1


def test_two_uptime_stamps_are_two_records_however_close(tmp_path: Path) -> None:
    """(attack-35 F3) A storm of one identical Xid 119 a second, each line with its own uptime stamp: a saved dmesg
    holds the first 61, kern.log the last 70 less six it missed. Lines a second apart with different stamps are two
    records, not copies: 101, and a `--since` read counts the same from the store's marks and deciding again."""
    boot = datetime(2026, 11, 28, tzinfo=timezone.utc)
    xid = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=2031, name=python, Timeout after 6s of waiting for RPC response from "
           "GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).")
    ups = [7200.0 + i + 0.000001 * i for i in range(101)]
    _kernel_lines(tmp_path / "kern.log", boot, [(u, xid) for i, u in enumerate(ups) if i >= 31 and not 35 <= i <= 40])
    (tmp_path / "dmesg").write_text("".join(f"[{u:12.6f}] {xid}\n" for u in ups[:61]))
    store = tmp_path / "store"
    _ingested(store, str(tmp_path / "kern.log"), "--source", "kernel", "--node", "gpu001")
    _ingested(store, str(tmp_path / "dmesg"), "--source", "kernel", "--node", "gpu001", "--boot-time", boot.isoformat())
    assert _trusted_count(store, "--kind", "gpu_xid") == 101
    since = (boot + timedelta(seconds=7250)).isoformat()
    assert _trusted_count(store, "--kind", "gpu_xid", "--since", since) == 51
    (store / "copies.json").unlink()  # every mark stale: decided again at read time
    assert _trusted_count(store, "--kind", "gpu_xid", "--since", since) == 51
