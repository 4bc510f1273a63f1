"""Ingest behaviour: boot-time learning, job ids from file names, stdin, gzip, multi-line records."""
from __future__ import annotations

import gzip
import io
import os
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from conftest import CORPUS, parse_file
from observe.ingest import ingest, job_from_name
from observe.store import Store

UTC = timezone.utc


def _events(store: Store) -> pl.DataFrame:
    return store.scan().collect().sort("offset")


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."


def test_boot_time_learned_from_syslog_of_same_node(store: Store, tmp_path: Path) -> None:
    """rsyslog's copies of the dmesg's records (both clocks on each) date it."""
    (tmp_path / "dmesg").write_text(f"[  100.000000] usb 1-1: new device\n[  200.000000] {XID79}\n")
    (tmp_path / "syslog").write_text("Nov 22 10:00:00 gpu002 kernel: [  100.000000] usb 1-1: new device\n"
                                     f"Nov 22 10:01:40 gpu002 kernel: [  200.000000] {XID79}\n")
    ingest([str(tmp_path / "dmesg"), str(tmp_path / "syslog")], store, node="gpu002")
    for xid in _events(store).filter(pl.col("kind") == "gpu_xid").iter_rows(named=True):
        assert xid["ts"].replace(year=2000) == datetime(2000, 11, 22, 10, 1, 40, tzinfo=UTC)
        assert xid["node"] == "gpu002"


BOOTED = ["[    0.000000] Linux version 5.15.0", f"[ 6906.450310] {XID79}"]


def _dmesg_times(store: Store, tmp_path: Path, syslog: list[str], dmesg: list[str] = BOOTED) -> list[datetime | None]:
    """The times of a root-owned dmesg's records (a Linux version line, then an Xid), dated by ``syslog``'s lines."""
    (tmp_path / "dmesg").write_text("".join(f"{line}\n" for line in dmesg))
    (tmp_path / "syslog").write_text("".join(f"{line}\n" for line in syslog))
    ingest([str(tmp_path / "dmesg"), str(tmp_path / "syslog")], store, node="gpu003", year=2026)
    records = _events(store).filter(pl.col("raw").str.starts_with("["))
    assert records.height == len(dmesg)
    return records.get_column("ts").to_list()


def _near(times: list[datetime | None], expected: list[datetime]) -> bool:
    """Dated within a second of ``expected`` (a syslog stamps to the second)."""
    return all(t is not None and abs(t - e) < timedelta(seconds=1) for t, e in zip(times, expected, strict=True))


def test_a_users_kernel_tagged_lines_do_not_date_a_dmesg(store: Store, tmp_path: Path) -> None:
    """A node user's ``logger -t kernel '[100000000.000000] hi'`` is a kernel row of the syslog with both clocks:
    sixty of them, outnumbering rsyslog's real copies, once dated a trusted Xid three years back. Only copies of
    the dmesg's own records date it; a later copy of a real record moves nothing (the earliest copy counts)."""
    real = ["Nov 28 09:00:00 gpu003 kernel: [    0.000000] Linux version 5.15.0",
            f"Nov 28 10:55:06 gpu003 kernel: [ 6906.450310] {XID79}"]
    forged = [f"Nov 28 11:{m:02d}:30 gpu003 kernel: [100000000.000000] hi" for m in range(59)]
    late = [f"Nov 28 12:{m:02d}:00 gpu003 kernel: [ 6906.450310] {XID79}" for m in range(5)]  # a user's copies
    assert _near(_dmesg_times(store, tmp_path, real + forged + late),
                 [datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC), datetime(2026, 11, 28, 10, 55, 6, tzinfo=UTC)])


def test_a_users_replay_of_more_records_than_rsyslog_copied_does_not_date_a_dmesg(store: Store, tmp_path: Path) -> None:
    """The syslog holds rsyslog's copy of the Xid alone (the boot's lines rotated away); a user reads the dmesg and
    replays its first records with ``logger -t kernel`` an hour later, more of them than rsyslog's copies: a replay
    is stamped when it is received, after the record, so the earliest boot that copies a record past its first
    minute dates the dmesg."""
    first = [f"[    {n / 1000:.6f}] ACPI: table {n}" for n in range(30)]
    real = [f"Nov 28 10:55:06 gpu003 kernel: [ 6906.450310] {XID79}"]
    replay = [f"Nov 28 12:00:00 gpu003 kernel: {line}" for line in first]
    times = _dmesg_times(store, tmp_path, real + replay, dmesg=[*first, f"[ 6906.450310] {XID79}"])
    assert _near(times[-1:], [datetime(2026, 11, 28, 10, 55, 6, tzinfo=UTC)])


def test_kernel_lines_that_copy_none_of_a_dmesgs_records_do_not_date_it(store: Store, tmp_path: Path) -> None:
    """A syslog's kernel lines of a boot before the dmesg's (or a user's) copy none of its records: the dmesg is
    stored without times, not with the other boot's."""
    other_boot = [f"Nov 20 08:{m:02d}:00 gpu003 kernel: [ {100 + m * 60}.000000] eth0: link is up" for m in range(10)]
    assert _dmesg_times(store, tmp_path, other_boot) == [None, None]


def test_a_dmesg_is_dated_by_its_own_boots_copies(store: Store, tmp_path: Path) -> None:
    """A syslog holds two boots' kernel lines; the dmesg's records are copied by the second's."""
    first = ["Nov 20 08:00:00 gpu003 kernel: [    0.000000] Linux version 5.15.0",
             "Nov 20 09:55:06 gpu003 kernel: [ 6906.450310] eth0: link is up"] + [
        f"Nov 20 10:{m:02d}:00 gpu003 kernel: [ {7000 + m}.000000] eth0: link is up" for m in range(30)]
    second = ["Nov 28 09:00:00 gpu003 kernel: [    0.000000] Linux version 5.15.0",
              f"Nov 28 10:55:06 gpu003 kernel: [ 6906.450310] {XID79}"]
    assert _near(_dmesg_times(store, tmp_path, first + second)[1:], [datetime(2026, 11, 28, 10, 55, 6, tzinfo=UTC)])


def test_boot_time_learned_within_one_file(store: Store, tmp_path: Path) -> None:
    (tmp_path / "kern.log").write_text(
        "Nov 22 10:00:00 gpu001 kernel: [  100.000000] usb 1-1: new device\n"
        "[  170.053881] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000013, engmask 00000101, intr 10000000\n")
    ingest([str(tmp_path / "kern.log")], store)
    xid = _events(store).filter(pl.col("kind") == "gpu_xid").row(0, named=True)
    assert (xid["ts"].hour, xid["ts"].minute, xid["ts"].second) == (10, 1, 10)


def test_explicit_boot_time_and_unknown_boot(store: Store, tmp_path: Path) -> None:
    (tmp_path / "dmesg").write_text("[   10.500000] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN\n")
    ingest([str(tmp_path / "dmesg")], store, node="a")
    ingest([str(tmp_path / "dmesg")], store, node="b", boot_time=datetime(2026, 11, 22, tzinfo=UTC))
    rows = {r["node"]: r for r in _events(store).iter_rows(named=True)}
    assert rows["a"]["ts"] is None and '"uptime":"10.500000"' in rows["a"]["attrs"]
    assert rows["b"]["ts"] == datetime(2026, 11, 22, 0, 0, 10, 500000, tzinfo=UTC)
    assert rows["b"]["kind"] == "ib_link_down"


@pytest.mark.parametrize("name, job", [("slurm-1234.out", "1234"), ("slurm-99_7.out", "99_7"),
                                        ("slurm-5+1.err", "5+1"), ("train.log", None)])
def test_job_from_file_name(name: str, job: str | None) -> None:
    assert job_from_name(f"/jobs/{name}") == job


def test_job_output_gets_job_id_and_stdin_works(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "slurm-4242.out"
    out.write_text("epoch 1 loss 2.3\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                   "    main()\nValueError: bad shape\n")
    ingest([str(out)], store)
    rows = _events(store)
    assert set(rows.get_column("job_id")) == {"4242"}
    assert rows.get_column("kind").to_list() == ["log", "python_traceback", "python_exception"]
    assert "main()" in rows.row(1, named=True)["raw"]
    data = b"[  1.000000] Kernel panic - not syncing: Fatal exception\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    ingest(["-"], store, source="kernel", node="n9")
    assert _events(store).filter(pl.col("node") == "n9").get_column("kind").to_list() == ["kernel_panic"]


@pytest.mark.parametrize("kind", ["fifo", "pipe"])
def test_pipes_and_fifos_are_read_once(store: Store, tmp_path: Path, kind: str) -> None:
    """``observe ingest <(zcat syslog.gz)`` and named FIFOs: planning must not consume what the
    ingest then reads (a peek at a pipe takes its bytes), and a pipe is not handed to a worker."""
    data = b"Nov 22 10:00:00 gpu003 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n" * 3
    if kind == "fifo":
        path = tmp_path / "fifo.log"
        os.mkfifo(path)
        writer = threading.Thread(target=path.write_bytes, args=(data,))
    else:
        r, w = os.pipe()
        path = Path(f"/dev/fd/{r}")
        writer = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
    done: dict = {}
    run = threading.Thread(target=lambda: done.update(s=ingest([str(path)], store, workers=2)), daemon=True)
    run.start()
    writer.start()
    writer.join()
    run.join(60)
    if run.is_alive():  # the FIFO was opened again after its bytes were taken, and waits for a writer
        open(path, "wb").close()
        pytest.fail("ingest of a FIFO hung")
    if kind == "pipe":
        os.close(r)
    s = done["s"]
    assert (s.records, s.stored) == (3, 3)
    assert _events(store).get_column("kind").to_list() == ["gpu_xid"] * 3


def test_gzip_rotated_log(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "syslog.2.gz"
    with gzip.open(path, "wt") as f:
        f.write("Nov 22 10:00:00 gpu003 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    ingest([str(path)], store)
    row = _events(store).row(0, named=True)
    assert (row["node"], row["kind"], row["code"]) == ("gpu003", "gpu_xid", 79)


def test_invalid_utf8_kept(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "dmesg"
    path.write_bytes(b"[  1.0] ok line\n[  2.0] bad \xff\xfe bytes\n[  3.0] after\n")
    s = ingest([str(path)], store, source="kernel", node="n1")
    assert s.records == 3 and _events(store).get_column("offset").to_list() == [0, 16, 37]


def test_small_files_batched_keep_their_identity(store: Store, tmp_path: Path) -> None:
    for job in range(20):
        (tmp_path / f"slurm-{job}.out").write_text(f"step {job}\n[rank{job}]:[E1122 10:33:05.123456789 ProcessGroupNCCL.cpp:616] "
                                                   f"[Rank {job}] Watchdog caught collective operation timeout: WorkNCCL("
                                                   f"SeqNum=8, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600020 milliseconds "
                                                   f"before timing out.\n")
    first = ingest([str(p) for p in sorted(tmp_path.glob("*.out"))], store)
    again = ingest([str(p) for p in sorted(tmp_path.glob("*.out"))], store)
    rows = _events(store).filter(pl.col("kind") == "nccl_timeout")
    assert first.files == 20 and first.stored == 40 and again.stored == 0 and again.duplicates == 40
    assert sorted(zip(rows.get_column("job_id").cast(pl.Int64), rows.get_column("rank"))) == [(j, j) for j in range(20)]
    assert set(rows.get_column("offset")) == {len(f"step {j}\n") for j in range(20)}
    assert rows.get_column("file_id").n_unique() == 20


@pytest.mark.parametrize("chunk", [97, 1000, 1 << 20])
def test_records_across_read_boundaries_are_whole(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 chunk: int) -> None:
    """Reads cut a file anywhere; a multi-line record (NVRM continuation lines, tracebacks) cut by
    one is still stored whole, with the offset of its first line, as when the file is read at once."""
    from observe.ingest import pipeline, records

    for name, source in [("xid.log", "kernel"), ("nccl.log", "nccl")]:
        whole = parse_file(CORPUS / "real" / name, source)
        monkeypatch.setattr(records, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(pipeline, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(records, "TAIL_BYTES", 4 * chunk)
        s = Store(tmp_path / f"{name}-{chunk}")
        ingest([str(CORPUS / "real" / name)], s, source=source, node="gpu001" if source == "kernel" else None)
        got = s.scan().collect().sort("offset")
        assert got.get_column("raw").to_list() == whole.get_column("raw").to_list(), name
        assert got.get_column("offset").to_list() == whole.get_column("offset").to_list()
        assert whole.get_column("raw").str.contains("\n").any()  # there are multi-line records to cut
        monkeypatch.undo()


def test_runs_into_one_store_at_once_store_each_record_once(tmp_path: Path) -> None:
    """Two ingests of the same logs at the same time (a cron run overlapping the last): they take
    turns, so the second finds the first's records instead of storing them again."""
    files = [str(CORPUS / "real" / name) for name in ("xid.log", "oom.log", "nccl.log")]
    root = tmp_path / "store"
    start = threading.Barrier(2)
    results: list = []

    def run() -> None:
        start.wait()
        results.append(ingest(files, Store(root), workers=1))

    runs = [threading.Thread(target=run) for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join(120)
    assert len(results) == 2 and sorted(s.stored for s in results)[0] == 0
    assert _events(Store(root)).height == results[0].records == max(s.stored for s in results)


def test_boot_time_without_offset_is_in_tz() -> None:
    """``--boot-time "$(uptime -s)"`` prints the node's local time: without an offset it is read in --tz."""
    from observe.spans import parse_time

    boot = parse_time("2026-11-24 08:00:00", tz="Europe/Berlin")
    assert boot == datetime(2026, 11, 24, 7, 0, tzinfo=timezone.utc)
    assert parse_time("2026-11-24T08:00:00+00:00", tz="Europe/Berlin") == datetime(2026, 11, 24, 8, 0, tzinfo=timezone.utc)


def test_each_boot_of_a_node_is_its_own_kernel_log(store: Store, tmp_path: Path) -> None:
    """Every boot's dmesg starts with the same ``Linux version`` line: given boot times tell two
    boots apart (a second's wavering of ``uptime -s`` does not)."""
    dmesg = tmp_path / "dmesg"
    dmesg.write_text("[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02) #45-Ubuntu SMP\n"
                     "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz root=/dev/sda1\n")
    boots = [datetime(2026, 11, 20, 8, 0, 0, tzinfo=timezone.utc), datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone.utc),
             datetime(2026, 11, 24, 12, 0, 1, tzinfo=timezone.utc)]
    stored = [ingest([str(dmesg)], store, source="kernel", node="gpu001", boot_time=b).stored for b in boots]
    assert stored == [2, 2, 0]
    assert sorted(_events(store).filter(pl.col("kind") == "kernel_boot").get_column("ts").to_list()) == boots[:2]


def test_directories_are_walked_through_symbolic_links(tmp_path: Path) -> None:
    """``/var/log/slurm`` is often a link to a shared file system: followed, a link loop once."""
    from observe.reader import input_files

    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "slurmctld.log").write_text("[2026-11-24T10:00:00.000] x\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "syslog").write_text("Nov 24 10:00:00 gpu001 prog: x\n")
    (tmp_path / "logs" / "slurm").symlink_to(tmp_path / "real")
    (tmp_path / "logs" / "loop").symlink_to(tmp_path / "logs")
    assert input_files([str(tmp_path / "logs")]) == [str(tmp_path / "logs" / "slurm" / "slurmctld.log"),
                                                     str(tmp_path / "logs" / "syslog")]


@pytest.mark.parametrize("lines, expected", [
    (["<13>1 2026-11-24T10:15:30.123Z gpu03 kernel - - - NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, Graphics SM Warp Exception",
      "<165>1 2026-11-24T10:15:31.003-05:00 gpu03 slurmctld 1234 ID47 [exampleSDID@32473 iut=\"3\"] update_node: node gpu03 state set to DRAINED"],
     "syslog"),  # RFC 5424: its PRI once read as an XML tag (nvidia_smi)
    (["Nov 24 10:15:30.123456 gpu05 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>'",
      "Nov 24 10:15:32.500000 gpu05 slurmd[777]: error: Unable to register"], "syslog"),  # journalctl -o short-precise
    (["kern  :err   : [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 62, pid=1", "kern  :info  : [ 1235.000000] x"], "kernel"),  # dmesg -x
    ([" 0: gpu01:1234:1300 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
      "12: [rank12]:[E1014 09:12:01.123456789 ProcessGroupNCCL.cpp:683] [Rank 12] Watchdog caught collective operation timeout"],
     "nccl"),  # srun --label
    (["<?xml version=\"1.0\" ?>", "<nvidia_smi_log>", "<gpu id=\"00000000:3B:00.0\">"], "nvidia_smi"),
    (["JobID|JobName|State|ExitCode", "1234|train|FAILED|1:0", "1234.batch|batch|FAILED|1:0", "1235|eval|COMPLETED|0:0"],
     "slurm_jobs"),  # sacct --parsable2: once only its header line matched
])
def test_format_detection(lines: list[str], expected: str) -> None:
    from observe import collector as registry

    best, score = registry.detect(lines)
    assert best is not None and best.name == expected and score >= 0.5, (best and best.name, score)


def test_a_small_file_grown_after_the_plan_is_read_as_planned(store: Store, tmp_path: Path, monkeypatch) -> None:
    """A batched file is read up to the size it had when planned (attack-31 r4): a user who extends their job
    output after the plan (a sparse `truncate -s 6G`, no disk used) made root's ingest allocate and read all of
    it, and a MemoryError stored none of the other inputs; what a file gains after the plan waits for the next run."""
    from contextlib import contextmanager

    from observe.ingest import pipeline

    lines = [f"step {i} loss {i / 7:.4f}\n" for i in range(1200)]  # over the planning's head: opened again
    out = tmp_path / "slurm-7.out"
    out.write_text("".join(lines))
    planned = out.stat().st_size
    opened = pipeline._opened

    @contextmanager
    def grown(p):
        os.truncate(p.path, 1 << 30)  # after the plan, before it is read
        with opened(p) as got:
            yield got

    monkeypatch.setattr(pipeline, "_opened", grown)
    done = ingest([str(out)], store, workers=1)
    assert done.bytes == planned and done.stored == len(lines)


def test_many_tiny_files_make_units_of_a_bounded_count(store: Store, tmp_path: Path, monkeypatch) -> None:
    """A unit holds at most UNIT_INPUTS inputs, however small: offsets carry the input's index in 23 bits, and a
    unit of 16 MiB held 2**23 files of one byte (attack-31's note); each row keeps its own file's node."""
    from observe.ingest import pipeline

    units = []
    parse = pipeline.parse_unit
    monkeypatch.setattr(pipeline, "parse_unit", lambda recs, inputs, *a: units.append(len(inputs)) or parse(recs, inputs, *a))
    monkeypatch.setattr(pipeline, "UNIT_INPUTS", 2)
    inputs = []
    for i in range(5):
        f = tmp_path / f"gpu{i:03d}.log"
        f.write_text(f"2026-11-20T06:00:0{i}+00:00 gpu{i:03d} sshd[7]: Accepted publickey for root\n")
        inputs.append(str(f))
    done = ingest(inputs, store, workers=1)
    assert sorted(units) == [1, 2, 2] and done.stored == 5
    rows = store.scan().select("node", pl.col("ts").dt.second()).sort("node").collect().rows()
    assert rows == [(f"gpu{i:03d}", i) for i in range(5)]
