"""An archive as sites keep it (``logs/<node>/dmesg``, a log collector's ``<node>/kern.log``): ``observe ingest
logs/`` takes each node-less file's node from its path, so the store is the one the demo builds from the same
files with every node given, and says how many kernel or GPU records ended with no node."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.ingest import archive, ingest_inputs
from observe.simulate import generate
from observe.store import Store
from queries.jobs import write_index

runner = CliRunner()
END = datetime(2026, 11, 20, 6, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A demo archive, the demo's own store of it (every file's node given) and ``observe ingest logs/``'s."""
    root = tmp_path_factory.mktemp("archive")
    manifest = generate(root / "logs", nodes=6, hours=12, seed=5, start=datetime(2026, 11, 19, 18, tzinfo=timezone.utc))
    given = Store(root / "given")
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], given)
    write_index(given)
    done = runner.invoke(app, ["ingest", str(root / "logs"), "--store", str(root / "walked")])
    assert done.exit_code == 0, done.output
    assert "with no node" not in done.output
    return root / "logs", root / "given", root / "walked"


@pytest.mark.parametrize("command", [["nodes", "--since", "2026-11-19T00:00", "--until", "2026-11-21T00:00"],
                                     ["incidents", "--since", "2026-11-19T00:00", "--until", "2026-11-21T00:00"],
                                     ["health", "faults", "--since", "2026-11-19T00:00"]])
def test_the_walked_archive_is_the_demos_store(demo, command: list[str]) -> None:
    _, given, walked = demo
    said = [runner.invoke(app, [*command, "--store", str(s), "--format", "json"]) for s in (given, walked)]
    assert [r.exit_code for r in said] == [0, 0], [r.output[-500:] for r in said]
    assert said[0].output == said[1].output
    assert "gpu002" in said[0].output  # its Xid 79, OOM kill and the rest: what a walk without nodes lost


def test_every_kernel_line_has_its_node_and_time(demo) -> None:
    _, given, walked = demo
    import polars as pl

    def counts(store: Path) -> pl.DataFrame:
        return (Store(store).scan().filter(pl.col("source").is_in(["kernel", "gpu"]))
                .group_by("node").agg(pl.len(), pl.col("ts").is_null().sum().alias("undated")).sort("node").collect())
    assert counts(walked).equals(counts(given)) and counts(walked).get_column("undated").sum() == 0
    assert counts(walked).get_column("node").null_count() == 0


def test_a_layout_names_the_node(tmp_path: Path) -> None:
    files = ["/a/gpu001/kern.log", "/a/nodes/gpu002/dmesg", "/a/gpu003-dmesg.txt", "/a/other/dmesg"]
    assert archive.layout_nodes(files, "{node}/kern.log") == {"/a/gpu001/kern.log": "gpu001"}
    assert archive.layout_nodes(files, "nodes/{node}/*") == {"/a/nodes/gpu002/dmesg": "gpu002"}
    assert archive.layout_nodes(files, "{node}-dmesg.txt") == {"/a/gpu003-dmesg.txt": "gpu003"}
    with pytest.raises(ValueError, match="one {node}"):
        archive.layout_nodes(files, "logs/*")


def test_a_kernel_log_no_path_names_says_so(tmp_path: Path) -> None:
    """A dmesg in a directory named after nothing: stored with no node, and the run says how many and what to do."""
    (tmp_path / "misc").mkdir()
    (tmp_path / "misc" / "dmesg").write_text("[   12.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    done = runner.invoke(app, ["ingest", str(tmp_path / "misc"), "--store", str(tmp_path / "s")])
    assert done.exit_code == 0, done.output
    assert "1 kernel or GPU record(s) stored with no node" in done.output and "--layout" in done.output
    again = runner.invoke(app, ["ingest", str(tmp_path / "misc"), "--store", str(tmp_path / "t"), "--layout", "{node}/dmesg"])
    assert again.exit_code == 0 and "with no node" not in again.output
    bad = runner.invoke(app, ["ingest", str(tmp_path / "misc"), "--store", str(tmp_path / "u"), "--layout", "x/*"])
    assert bad.exit_code == 2 and "one {node}" in bad.output and "Traceback" not in bad.output


def test_the_year_of_stamps_that_carry_none(tmp_path: Path) -> None:
    """RFC 3164 stamps have no year: a copied archive's files, last modified in 2025, date their lines 2025 and the
    run says so; --year 2024 dates them 2024 (each small file, batched or not) and the run says nothing of it."""
    import os

    import polars as pl

    logs = tmp_path / "logs"
    logs.mkdir()
    for node in ("gpu001", "gpu002"):
        f = logs / f"{node}.syslog"
        f.write_text(f"Mar  3 10:00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off "
                     "the bus.\n")
        os.utime(f, (datetime(2025, 6, 1, tzinfo=timezone.utc).timestamp(),) * 2)
    for year, store in ((None, "a"), (2024, "b")):
        done = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / store), *(["--year", str(year)] if year else [])])
        assert done.exit_code == 0, done.output
        years = Store(tmp_path / store).scan().select(pl.col("ts").dt.year()).collect().to_series().to_list()
        assert years == [year or 2025] * 2
        assert ("2 record(s) carry no year in their stamps: dated 2025" in done.output) is (year is None), done.output


def test_a_directory_named_after_a_node_slurm_knows(tmp_path: Path) -> None:
    """A log collector's tree of bare dmesg files (no syslog to name the host): the directory is gpu002's because
    Slurm's records in the store ran jobs there; a directory named after no node gives nothing."""
    (tmp_path / "ctl").mkdir()
    (tmp_path / "ctl" / "slurmctld.log").write_text(
        "[2026-11-20T10:00:00.000] sched: Allocate JobId=5 NodeList=gpu[001-002] #CPUs=16 Partition=gpu\n"
        "[2026-11-20T11:00:00.000] _job_complete: JobId=5 WEXITSTATUS 0\n")
    for d in ("gpu002", "gpu009"):
        (tmp_path / "kern" / d).mkdir(parents=True)
        (tmp_path / "kern" / d / "dmesg").write_text("[   12.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    store = str(tmp_path / "store")
    assert runner.invoke(app, ["ingest", str(tmp_path / "ctl"), "--store", store]).exit_code == 0
    done = runner.invoke(app, ["ingest", str(tmp_path / "kern"), "--store", store])
    assert done.exit_code == 0 and "1 kernel or GPU record(s) stored with no node" in done.output, done.output
    nodes = Store(store).scan(sources=["kernel"]).select("node").collect().to_series().to_list()
    assert sorted(nodes, key=lambda n: n or "") == [None, "gpu002"]


def test_the_lines_that_name_a_directorys_node(tmp_path: Path) -> None:
    """A directory is a node's where its files' lines name that host: a syslog header (the format's own field) or,
    in a Slurm log, a line only a rule reads a node from; a host no line names gives nothing."""
    (tmp_path / "gpu042").mkdir()
    (tmp_path / "gpu043").mkdir()
    slurmd, syslog = tmp_path / "gpu042" / "slurmd.log", tmp_path / "gpu043" / "syslog"
    slurmd.write_text("[2026-11-20T10:00:00.000] error: *** JOB 12 ON gpu042 CANCELLED AT 2026-11-20T10:00:00 ***\n")
    syslog.write_text("Nov 20 10:00:00 gpu043.cluster.local sshd[12]: Accepted publickey for root\n")
    assert archive.named_by_lines("gpu042", [str(slurmd)])
    assert archive.named_by_lines("gpu043", [str(syslog)])
    assert not archive.named_by_lines("gpu044", [str(syslog), str(slurmd)])


def test_what_users_write_names_no_directory(tmp_path: Path) -> None:
    """A directory is not a node's on a user's word (attack-27 r2): not by a job's output that prints a syslog-shaped
    line naming it, nor by a run a user's `logger -t slurmctld` line made up (the job index's untrusted runs)."""
    xid = "[ 5400.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    (tmp_path / "gpu043").mkdir()
    (tmp_path / "gpu043" / "syslog").write_text(
        "Nov 19 10:00:00 gpu043 slurmctld: sched: Allocate JobId=9 NodeList=job1234 #CPUs=1 Partition=gpu\n")
    store = str(tmp_path / "store")
    assert runner.invoke(app, ["ingest", str(tmp_path / "gpu043"), "--store", store, "--year", "2026"]).exit_code == 0
    (tmp_path / "archive" / "job1234").mkdir(parents=True)
    (tmp_path / "archive" / "job1234" / "dmesg").write_text(xid)
    (tmp_path / "archive" / "job1234" / "slurm-1234.out").write_text("Nov 20 10:00:00 job1234 train[7]: epoch 1 done\n")
    done = runner.invoke(app, ["ingest", str(tmp_path / "archive"), "--store", store, "--year", "2026"])
    assert done.exit_code == 0 and "1 kernel or GPU record(s) stored with no node" in done.output, done.output
    assert archive.named_by_lines("job1234", [str(tmp_path / "gpu043" / "syslog")]) is False
    (tmp_path / "archive" / "job1234" / "messages").write_text("Nov 20 10:00:00 job1234 kernel: hello\n")
    assert archive.named_by_lines("job1234", [str(tmp_path / "archive" / "job1234" / f) for f in ("slurm-1234.out", "messages")])


def test_many_nodes_files_are_parsed_together_each_row_its_own_node_and_year(tmp_path: Path, monkeypatch) -> None:
    """Small files of one format are parsed as one unit whatever their nodes and last writes (a unit costs about a
    tenth of a second however little it holds: a fleet's syslogs, a file per node, were a unit each; attack-31 r3:
    a user's files touched to a day each were a unit each); each row keeps its own file's node, and its stamps
    without a year are dated by its own file's last write: "Jun  1" 2024 in one, 2026 in the other."""
    import os

    import polars as pl

    from observe.ingest import pipeline

    units = []
    parse = pipeline.parse_unit
    monkeypatch.setattr(pipeline, "parse_unit", lambda recs, inputs, *a: units.append(len(inputs)) or parse(recs, inputs, *a))
    watchdog = "[rank0]:[E ProcessGroupNCCL.cpp:1182] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error\n"
    inputs = []
    for node in ("gpu001", "gpu002", "gpu003"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "train.log").write_text(watchdog)  # no host in the lines: the node is the file's
        inputs.append((str(tmp_path / node / "train.log"), {"node": node}))
    for node, written in (("gpu004", datetime(2025, 3, 5, tzinfo=timezone.utc)), ("gpu005", END)):
        f = tmp_path / node / "syslog"
        f.parent.mkdir()
        f.write_text(f"Jun  1 10:00:00 {node} sshd[7]: Accepted publickey for root\n")
        os.utime(f, (written.timestamp(),) * 2)
        inputs.append((str(f), {"node": node}))
    ingest_inputs(inputs, Store(tmp_path / "store"), workers=1)
    assert sorted(units) == [2, 3]
    rows = Store(tmp_path / "store").scan().select("node", "source", pl.col("ts").dt.year().alias("year")).sort("node").collect()
    assert rows.rows() == [("gpu001", "nccl", None), ("gpu002", "nccl", None), ("gpu003", "nccl", None),
                           ("gpu004", "syslog", 2024), ("gpu005", "syslog", 2026)]
