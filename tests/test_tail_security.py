"""What users control, read by root: links and FIFOs put where job output was, links to root-only
directories and link loops, lines that never end, one input flooding the others."""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe import reader, tail
from observe.collect_config import Config, ConfigError
from observe.collect import NodeCollector
from observe.ingest import ingest
from observe.store import Store

NOBODY = 65534


@pytest.fixture
def foreign(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """Makes a path look made by an untrusted user: given to nobody (as root), else only root trusted."""
    if os.geteuid() != 0:
        monkeypatch.setattr(reader, "trusted", lambda st: st.st_uid == 0)
    return lambda path: os.lchown(path, NOBODY, NOBODY) if os.geteuid() == 0 else None


def _line(text: str) -> str:
    return f"Nov 22 10:00:00 gpu001 app[7]: {text}\n"


def _node(tmp: Path, pattern: Path | str, source: str = "syslog", **extra) -> NodeCollector:
    doc = {"node": "gpu001", "spool": str(tmp / "spool"), "store": str(tmp / "central"), "partial_timeout": "60s",
           "input": [{"path": str(pattern), "source": source}], **extra}
    return NodeCollector(Config.from_dict(doc))


def _messages(tmp: Path) -> list[str]:
    central = tmp / "central"
    if not central.exists():
        return []
    return sorted(shipped(central).scan(sources=["syslog"]).collect().get_column("message").to_list())


def _secret(tmp: Path) -> Path:
    """A root-only file (what /etc/shadow stands for)."""
    secret = tmp / "shadow"
    secret.write_text(_line("SECRET root:$6$hash"))
    secret.chmod(0o600)
    return secret


def _in_time(run: Callable[[], object], fifo: Path, timeout: float = 10.0) -> None:
    """Run ``run`` in a thread; fail if it is still waiting after ``timeout`` (on ``fifo``, released then)."""
    done = threading.Event()
    failed: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 (raised again in the test's thread)
            failed.append(exc)
        done.set()

    threading.Thread(target=target, daemon=True).start()
    if not done.wait(timeout):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader blocked in open() goes on
        pytest.fail(f"blocked on the FIFO {fifo.name} for {timeout} s")
    if failed:
        raise failed[0]


# -- links ---------------------------------------------------------------------------------------
def test_collector_skips_a_users_link_to_a_root_only_file(tmp_path: Path, foreign) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "slurm-1.out").write_text(_line("job output"))
    (jobs / "slurm-999.out").symlink_to(_secret(tmp_path))
    foreign(jobs / "slurm-999.out")
    _node(tmp_path, jobs / "slurm-*.out").run(once=True)
    assert _messages(tmp_path) == ["job output"]


def test_collector_refuses_a_link_swapped_in_after_listing(tmp_path: Path, foreign, monkeypatch, capsys) -> None:
    """The file is regular when listed and a link when opened: O_NOFOLLOW refuses it, counted and
    told once; the other files are read."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "slurm-1.out").write_text(_line("job output"))
    victim = jobs / "slurm-999.out"
    victim.write_text(_line("harmless"))
    secret = _secret(tmp_path)
    listed = tail.find_files

    def listed_then_swapped(pattern: str) -> list[str]:
        found = listed(pattern)
        victim.unlink()
        victim.symlink_to(secret)
        foreign(victim)
        return found

    monkeypatch.setattr(tail, "find_files", listed_then_swapped)
    node = _node(tmp_path, jobs / "slurm-*.out")
    node.cycle()
    node.cycle()
    node.ship()
    assert _messages(tmp_path) == ["job output"]
    assert node.counters.refused_files == 1
    assert capsys.readouterr().err.count("symbolic link of uid") == 1


def test_collector_does_not_follow_a_users_link_to_a_root_only_directory(tmp_path: Path, foreign) -> None:
    """``/shared/jobs/**/slurm-*.out`` and ``/shared/jobs/*/slurm-*.out``: a user's link to a
    root-only directory is not walked into; links an admin made are."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "slurm-7.out").write_text(_line("SECRET root job"))
    shared = tmp_path / "shared-logs"
    shared.mkdir()
    (shared / "slurm-8.out").write_text(_line("admin linked"))
    jobs = tmp_path / "jobs"
    (jobs / "alice").mkdir(parents=True)
    (jobs / "alice" / "slurm-1.out").write_text(_line("alice's job"))
    (jobs / "alice" / "evil").symlink_to(private)
    foreign(jobs / "alice" / "evil")
    (jobs / "mallory").symlink_to(private)
    foreign(jobs / "mallory")
    (jobs / "admin").symlink_to(shared)
    for pattern in ("**/slurm-*.out", "*/slurm-*.out"):
        assert reader.find_files(str(jobs / pattern)) == [str(jobs / "admin" / "slurm-8.out"),
                                                          str(jobs / "alice" / "slurm-1.out")]
    _node(tmp_path, jobs / "**" / "slurm-*.out").run(once=True)
    assert _messages(tmp_path) == ["admin linked", "alice's job"]


def _private(tmp: Path, name: str) -> Path:
    """A root-only directory holding a job file named as a user's (``name``)."""
    private = tmp / "private"
    private.mkdir(mode=0o700)
    (private / name).write_text(_line("SECRET root's own job output"))
    return private


def test_a_users_directory_swapped_for_a_link_is_not_followed_to_rotated_copies(tmp_path: Path, foreign) -> None:
    """A known job file leaves the glob; its directory, looked in for rotated copies, is now the
    user's link to a root-only directory holding a file of the same name: not read."""
    private = _private(tmp_path, "slurm-1.out")
    jobs = tmp_path / "jobs"
    (jobs / "alice").mkdir(parents=True)
    (jobs / "alice" / "slurm-1.out").write_text(_line("alice's job"))
    node = _node(tmp_path, jobs / "*" / "slurm-*.out")
    node.cycle()
    (jobs / "alice").rename(tmp_path / "alice-moved")  # out of the glob's reach
    (jobs / "alice").symlink_to(private)
    foreign(jobs / "alice")
    node.cycle()
    node.cycle()
    node.ship()
    assert _messages(tmp_path) == ["alice's job"]
    assert node.counters.refused_files == 1


def test_a_directory_swapped_for_a_link_after_listing_is_not_followed(tmp_path: Path, foreign, monkeypatch) -> None:
    """The glob lists ``jobs/bob/slurm-2.out``; before it is opened, bob's directory becomes his link
    to a root-only one: the open walks the path a component at a time and refuses the link."""
    private = _private(tmp_path, "slurm-2.out")
    jobs = tmp_path / "jobs"
    (jobs / "bob").mkdir(parents=True)
    (jobs / "bob" / "slurm-2.out").write_text(_line("harmless"))
    (jobs / "carol").mkdir()
    (jobs / "carol" / "slurm-3.out").write_text(_line("carol's job"))
    listed = tail.find_files

    def listed_then_swapped(pattern: str) -> list[str]:
        found = listed(pattern)
        (jobs / "bob").rename(tmp_path / "bob-moved")
        (jobs / "bob").symlink_to(private)
        foreign(jobs / "bob")
        return found

    monkeypatch.setattr(tail, "find_files", listed_then_swapped)
    node = _node(tmp_path, jobs / "*" / "slurm-*.out")
    node.cycle()
    node.ship()
    assert _messages(tmp_path) == ["carol's job"]
    assert node.counters.refused_files == 1


def test_ingest_refuses_a_path_through_a_users_link_to_a_directory(tmp_path: Path, foreign) -> None:
    """``observe ingest /shared/jobs/mallory/slurm-7.out`` where mallory is a user's link to a
    root-only directory (named, or swapped in after a listing): refused in one line; an admin's
    link on the way is followed."""
    private = _private(tmp_path, "slurm-7.out")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "mallory").symlink_to(private)
    foreign(jobs / "mallory")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "slurm-8.out").write_text(_line("admin linked"))
    (jobs / "admin").symlink_to(shared)
    store = Store(tmp_path / "store")
    summary = ingest([str(jobs / "mallory" / "slurm-7.out"), str(jobs / "admin" / "slurm-8.out")], store, workers=1)
    assert summary.stored == 1 and len(summary.failed) == 1
    assert "slurm-7.out: a symbolic link of uid" in summary.failed[0]
    assert [m.endswith("admin linked") for m in store.scan().collect().get_column("message")] == [True]


def test_the_component_walk_follows_trusted_links_and_stops_at_loops(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "up").symlink_to(".")
    (tmp_path / "abs").symlink_to(tmp_path / "d")
    for path in ["up/up/d/f", "abs/../d/./f", "up/abs/f"]:
        with reader.open_file(str(tmp_path / path)) as f:
            assert f.read() == b"x"
    with pytest.raises(OSError, match="symbolic links"):
        reader.open_file(str(tmp_path / ("up/" * 41 + "d/f")))
    for directory in ["d/", "up/d/."]:
        with pytest.raises(OSError):
            reader.open_file(str(tmp_path / directory))


def test_read_new_reads_only_the_file_found(tmp_path: Path) -> None:
    """A file replaced between finding and reading (another inode at its path) is not read."""
    log = tmp_path / "slurm-1.out"
    log.write_text(_line("job output"))
    found = next(iter(tail.Finder(str(log), "gpu001", lambda p: None, lambda p, why: None).find([]).values()))
    other = tmp_path / "other"
    other.write_text(_line("SECRET swapped in") * 2)
    other.rename(log)
    assert tail.read_new(found, None, 1 << 20) == (0, b"")


def test_link_loops_do_not_make_globbing_endless(tmp_path: Path, foreign) -> None:
    """glob follows every link: three links to ``.`` are 3^40 paths under ``**``. Each directory is
    walked once; a user's links not at all."""
    jobs = tmp_path / "jobs"
    (jobs / "u").mkdir(parents=True)
    (jobs / "u" / "slurm-1.out").write_text(_line("x"))
    for name in "abc":
        (jobs / "u" / name).symlink_to(".")
    for name in "de":
        (jobs / "u" / name).symlink_to("..")
        foreign(jobs / "u" / name)
    found: list[list[str]] = []
    done = threading.Thread(target=lambda: found.append(reader.find_files(str(jobs / "**" / "slurm-*.out"))), daemon=True)
    done.start()
    done.join(20)
    assert not done.is_alive(), "globbing through link loops did not end"
    assert found == [[str(jobs / "u" / "slurm-1.out")]]


def test_ingest_skips_a_users_links_and_refuses_one_named(tmp_path: Path, foreign) -> None:
    """Directories and globs leave a user's links out (as they do FIFOs); a link named on the command
    line is refused, not followed, in one line."""
    secret = _secret(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "root.log").write_text(_line("SECRET in a root-only directory"))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "syslog").write_text(_line("plain"))
    (logs / "admin.log").symlink_to(logs / "syslog")  # an admin's link: followed
    for name, target in (("slurm-999.out", secret), ("private", private)):
        (logs / name).symlink_to(target)
        foreign(logs / name)
    expected = [str(logs / "admin.log"), str(logs / "syslog")]
    assert reader.input_files([str(logs)]) == expected
    assert reader.input_files([str(logs / "*")]) == expected
    store = Store(tmp_path / "store")
    summary = ingest([str(logs / "slurm-999.out")], store)
    assert summary.stored == 0 and len(summary.failed) == 1
    assert "slurm-999.out: a symbolic link of uid" in summary.failed[0] and "\n" not in summary.failed[0]


def test_ingest_refuses_a_hard_link_to_a_root_only_file(tmp_path: Path) -> None:
    """Where fs.protected_hardlinks is 0 a user can name root's 0600 file in their own job
    directory: its owner and mode are root's, its name is theirs. A file of several names is
    refused in one line; the user's own file beside it is stored."""
    secret = _secret(tmp_path)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    os.link(secret, jobs / "slurm-9.out")
    (jobs / "slurm-10.out").write_text(_line("my own output"))
    store = Store(tmp_path / "store")
    summary = ingest(reader.input_files([str(jobs)]), store, workers=1)
    assert any("slurm-9.out: a file with 2 names" in f for f in summary.failed), summary.failed
    messages = store.scan().collect().get_column("message").to_list()
    assert [m.endswith("my own output") for m in messages] == [True], messages


def test_the_route_is_the_read_files_not_the_listed_paths(tmp_path: Path, monkeypatch) -> None:
    """A user flips their file with a link to a root-owned file between the path's stat and its
    open: the stat (what ``path_route`` sees) says root's, the open (no link followed) reads the
    user's forged kernel line. Its route is that of what was read: a user's, untrusted."""
    from observe import provenance

    forged = tmp_path / "dmesg"
    forged.write_text("2026-11-22T10:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    os.chown(forged, NOBODY, NOBODY) if os.geteuid() == 0 else None
    if os.geteuid() != 0:
        monkeypatch.setattr(provenance, "system_account", lambda uid: uid == 0)
    monkeypatch.setattr(provenance, "path_route", lambda path, job: "system_file")  # the stat saw root's file
    store = Store(tmp_path / "store")
    ingest([str(forged)], store, source="kernel", node="gpu001", workers=1)
    routes = store.scan().collect().get_column("route").to_list()
    assert routes and not any(provenance.is_trusted(r) for r in routes), routes


# -- FIFOs ---------------------------------------------------------------------------------------
def test_collector_skips_a_fifo_swapped_in_after_listing(tmp_path: Path, monkeypatch) -> None:
    """A FIFO where a job's output was (after the listing saw a file) is skipped at once, counted;
    open() would wait for a writer forever."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "slurm-1.out").write_text(_line("job output"))
    fifo = jobs / "slurm-5.out"
    os.mkfifo(fifo)
    isfile = os.path.isfile
    monkeypatch.setattr(os.path, "isfile", lambda p: os.fspath(p) == str(fifo) or isfile(p))
    node = _node(tmp_path, jobs / "slurm-*.out")
    _in_time(node.cycle, fifo)
    _in_time(node.cycle, fifo)
    node.ship()
    assert _messages(tmp_path) == ["job output"]
    assert node.counters.refused_files == 1


def test_ingest_refuses_a_users_fifo(tmp_path: Path, foreign) -> None:
    """A FIFO an untrusted user made is not waited on, even named (a FIFO root made still is:
    tests/test_ingest.py::test_pipes_and_fifos_are_read_once)."""
    fifo = tmp_path / "slurm-5.out"
    os.mkfifo(fifo)
    foreign(fifo)
    summaries = []
    _in_time(lambda: summaries.append(ingest([str(fifo)], Store(tmp_path / "store"))), fifo)
    assert len(summaries[0].failed) == 1 and "not a regular file" in summaries[0].failed[0]


# -- long lines and fair shares ------------------------------------------------------------------
def _offset(node: NodeCollector, path: Path) -> int:
    return next((cp.offset for cp in node.positions.checkpoints.values() if cp.path == str(path)), 0)


def test_an_endless_line_is_stored_cut_and_never_read_again(tmp_path: Path) -> None:
    """5 MB without a newline: stored as 1 MiB records marked truncated, its position moving on
    each cycle; the other file's lines are stored too."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    endless = jobs / "slurm-1.out"
    endless.write_bytes(b"x" * 5_000_000)
    other = jobs / "slurm-2.out"
    other.write_text(_line("epoch 1") + _line("epoch 2"))
    node = _node(tmp_path, jobs / "slurm-*.out", max_batch="8MiB", max_record="1MiB")
    assert node.cycle()  # more to cut
    assert _offset(node, endless) == 3 << 20 and _offset(node, other) == other.stat().st_size
    node.cycle()
    assert _offset(node, endless) == 4 << 20
    assert not node.cycle()  # what is left fits in a record: it waits for its newline
    assert _offset(node, endless) == 4 << 20 and node.counters.truncated_records == 4
    node.ship()
    rows = shipped(tmp_path / "central").scan(sources=["syslog"]).collect().sort("file_id", "offset")
    cut = rows.filter(pl.col("raw").str.starts_with("x"))
    assert cut.get_column("offset").to_list() == [0, 1 << 20, 2 << 20, 3 << 20]
    assert set(cut.get_column("raw").str.len_bytes()) == {1 << 20}
    assert all(json.loads(a)["truncated"] is True for a in cut.get_column("attrs"))
    assert rows.filter(~pl.col("raw").str.starts_with("x")).get_column("message").to_list() == ["epoch 1", "epoch 2"]


def test_one_input_cannot_starve_the_others(tmp_path: Path) -> None:
    """A job writing more than the whole batch budget every cycle: another file's lines are still
    read in the first cycle (each input its share of the budget)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    flood, quiet = jobs / "slurm-1.out", jobs / "slurm-2.out"
    flood.write_text("start\n")
    quiet.write_text(_line("quiet"))
    node = _node(tmp_path, jobs / "slurm-*.out", max_batch="2MiB", max_record="64KiB")
    with open(flood, "ab") as f:
        f.write(b"y" * 3_000_000)
    node.cycle()
    assert _offset(node, quiet) == quiet.stat().st_size
    assert 0 < _offset(node, flood) < flood.stat().st_size


def test_every_input_gets_its_turn(tmp_path: Path) -> None:
    """More busy inputs than the budget holds shares of: those left out are read first next cycle."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    files = [jobs / f"slurm-{i:02d}.out" for i in range(20)]
    node = _node(tmp_path, jobs / "slurm-*.out", max_batch="1MiB", max_record="64KiB")
    for _ in range(3):
        for path in files:
            with open(path, "a") as f:
                f.write(_line("busy " + "z" * 70) * 1500)  # about 150 kB each, every cycle
        node.cycle()
    assert all(_offset(node, path) > 0 for path in files)


def test_max_record_must_fit_in_a_batch(tmp_path: Path) -> None:
    doc = {"spool": str(tmp_path / "s"), "store": str(tmp_path / "c"), "input": [{"path": "/var/log/syslog"}]}
    assert Config.from_dict({**doc, "max_record": "2MiB"}).max_record_bytes == 2 << 20
    assert Config.from_dict({**doc, "max_batch": "512KiB"}).max_record_bytes == 256 << 10
    with pytest.raises(ConfigError, match="max_record .* below max_batch"):
        Config.from_dict({**doc, "max_batch": "1MiB", "max_record": "1MiB"})
