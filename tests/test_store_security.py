"""The store and the collector's spool hold every user's job output and root-only log lines, and
root writes them. Each test is an attack that worked before: files other users could read, a store
they could write, a symlink planted inside one that root followed (writing, reading or shipping
what it points to)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from conftest import CORPUS
from observe.cli import app
from observe.schema import conform
from observe.ship import Destination, ship, spool_files
from observe.store import Store, UnsafeStore

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="a defence of stores root writes: needs root (chown, other users)")
GROUP = 4242  # the store's group in these tests: a number, so that nothing is added to /etc/group
NOBODY = 65534
PROJECT = Path(__file__).resolve().parent.parent


def _events(message: str, day: int = 2) -> pl.DataFrame:
    return conform(pl.DataFrame([{"ts": datetime(2026, 1, day, tzinfo=timezone.utc), "node": "gpu001", "source": "kernel",
                          "kind": "gpu_xid", "message": message, "raw": message, "file_id": message, "offset": 0}]))


def _tree(root: Path) -> list[Path]:
    return [Path(d) / n for d, dirs, files in os.walk(root) for n in dirs + files]


@pytest.mark.parametrize("group", [None, pytest.param(GROUP, marks=needs_root)])
def test_what_the_store_creates_is_its_owner_and_group_s_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                group: int | None) -> None:
    """Segments, input markers, compaction outputs, the table's log, lock files: 0640, directories 0750
    (setgid with a group, so that files inherit it), whatever the umask."""
    if group is not None:
        monkeypatch.setenv("OBSERVE_STORE_GROUP", str(group))
    old = os.umask(0)  # the modes are the store's, not the umask's
    try:
        store = Store(tmp_path / "store")
        store.write(_events("Xid 79"))
        store.write(_events("Xid 48"))
        store.compactor.compact(store.partitions()[0], min_segments=1)
        store.upkeep.expire("2100-01-01")  # a commit as retention makes it (its files stay for the grace)
        with store.lock("ingest"):
            pass
    finally:
        os.umask(old)
    made = [store.root, *_tree(store.root)]
    names = {p.name for p in made}
    assert {".compact.lock", ".ingest.lock"} <= names and any(n.endswith(".ids") for n in names)
    assert "_delta_log" in names and any(n.endswith(".json") and n[:20].isdigit() for n in names)
    assert any(n.startswith("c-") and n.endswith(".parquet") for n in names)
    for path in made:
        st = path.lstat()
        want = (0o750 | (stat.S_ISGID if group else 0)) if stat.S_ISDIR(st.st_mode) else 0o640
        assert stat.S_IMODE(st.st_mode) == want, f"{path}: {oct(st.st_mode)}"
        assert st.st_gid == (group if group is not None else os.getegid()), path


@needs_root
def test_the_group_reads_the_store_and_other_users_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """``observe query`` as an unprivileged user: one in the store's group reads it, one outside does
    not. The child imports and warms up as root (the interpreter lives under /root), then drops to
    uid 65534 with the given groups before querying."""
    monkeypatch.setenv("OBSERVE_STORE_GROUP", str(GROUP))
    holder = Path(tempfile.mkdtemp(prefix="observe-group-"))  # /tmp/pytest-of-root is root's alone
    try:
        holder.chmod(0o755)
        store = Store(holder / "store")
        store.write(_events("Xid 79"))
        script = (
            "import os, sys\n"
            "from typer.testing import CliRunner\n"
            "from observe.cli import app\n"
            "args = ['query', '--store', sys.argv[1], '--format', 'json']\n"
            "assert CliRunner().invoke(app, args).exit_code == 0\n"
            "os.setgroups([int(g) for g in sys.argv[2:]]); os.setgid(65534); os.setuid(65534)\n"
            "r = CliRunner().invoke(app, args)\n"
            "print(r.exit_code, len(r.stdout.splitlines()), type(r.exception).__name__)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}

        def query_as_nobody(*groups: int) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-c", script, str(store.root), *map(str, groups)],
                                  env=env, capture_output=True, text=True, timeout=120)

        member, outsider = query_as_nobody(GROUP), query_as_nobody()
        assert member.returncode == 0 and member.stdout.split() == ["0", "1", "NoneType"], member.stderr
        assert outsider.returncode == 0 and outsider.stdout.split() == ["1", "0", "PermissionError"], outsider.stderr
    finally:
        shutil.rmtree(holder)


@needs_root
@pytest.mark.parametrize("how, why", [("chmod 777", "writable by everyone"), ("chmod 770", "writable by its group"),
                                      ("chown", f"owned by uid {NOBODY}")])
@pytest.mark.parametrize("command", [["query"], ["ingest", str(CORPUS / "real" / "xid.log")]])
def test_root_refuses_a_store_others_can_write(tmp_path: Path, how: str, why: str, command: list[str]) -> None:
    """Anyone who can write the store can plant in it what root then follows, reads or ships: one
    line, exit 2, nothing written."""
    root = tmp_path / "store"
    Store(root).write(_events("Xid 79"))
    if how == "chown":
        os.chown(root, NOBODY, -1)
    else:
        root.chmod(int(how.split()[1], 8))
    before = sorted(_tree(root))
    result = CliRunner().invoke(app, [*command, "--store", str(root)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and why in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output and sorted(_tree(root)) == before
    with pytest.raises(UnsafeStore, match=why):  # the collector's central store and its spool alike
        Destination.from_url(str(root))


@pytest.mark.parametrize("target", ["missing", "existing"])
def test_a_lock_file_planted_as_a_symlink_is_not_followed(tmp_path: Path, target: str) -> None:
    """Root opening ``.compact.lock`` through a link would create (``/etc/nologin``) or lock a file
    of the planter's choosing: refused, the target untouched."""
    store = Store(tmp_path / "store")
    store.write(_events("Xid 79"))
    victim = tmp_path / "victim"
    if target == "existing":
        victim.write_text("root's\n")
        victim.chmod(0o600)
    (store.root / ".compact.lock").symlink_to(victim)
    with pytest.raises(UnsafeStore, match="symlink"):
        store.compactor.compact(store.partitions()[0], min_segments=1)
    if target == "existing":
        assert victim.read_text() == "root's\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    else:
        assert not victim.exists()
    done = subprocess.run([sys.executable, "-m", "observe.cli", "compact", "--store", str(store.root)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "symlink" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout.count("Traceback")


def test_planted_symlinks_are_not_read_by_queries(tmp_path: Path) -> None:
    """A link named like a segment, or like a partition, pointing at files the querier may read and
    the planter may not: left out of every query."""
    store, secret = Store(tmp_path / "store"), Store(tmp_path / "secret")
    store.write(_events("Xid 79"))
    [segment] = secret.write(_events("root's secret"))
    [other] = secret.write(_events("root's other secret", day=3))
    (store.partitions()[0].path / "s-planted.parquet").symlink_to(segment)
    (store.events / "source=kernel" / "date=2026-01-03").symlink_to(other.parent, target_is_directory=True)
    (store.events / "source=gpu").symlink_to(secret.events / "source=kernel", target_is_directory=True)
    assert store.scan().collect().get_column("message").to_list() == ["Xid 79"]


def test_the_collector_ships_no_planted_symlink(tmp_path: Path) -> None:
    """A link in the spool would have root copy what it points to into the central store, where
    the store's group reads it."""
    spool, central = Store(tmp_path / "spool"), tmp_path / "central"
    spool.write_partition("kernel", "2026-01-02", _events("Xid 79"), tag="b0000000001")
    secret = tmp_path / "secret.parquet"
    secret.write_bytes(b"PAR1 root's secret PAR1")
    (spool.partitions()[0].path / "b0000000001-planted.parquet").symlink_to(secret)
    assert [p.name for p in spool_files(spool.root) if "planted" in p.name] == []
    result = ship(spool.root, Destination.from_url(str(central)), committed=1, max_bytes=1 << 30)
    assert not result.failed and result.shipped == 2  # the input marker and the one real segment
    assert [p.name for p in _tree(central) if "planted" in p.name] == []


def test_shipping_follows_no_link_planted_at_its_temporary_name(tmp_path: Path) -> None:
    """The temporary name a segment is copied to is predictable (name and pid): a link planted there
    would have root write the segment wherever it points."""
    spool, central = Store(tmp_path / "spool"), tmp_path / "central"
    [(segment, _)] = spool.durable([spool.write_partition("kernel", "2026-01-02", _events("Xid 79"),
                                                          tag="b0000000001", durable=False)])
    rel = "incoming" / segment.relative_to(spool.root)
    (central / rel).parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    (central / rel).with_name(f".{segment.name}.{os.getpid()}.tmp").symlink_to(victim)
    result = ship(spool.root, Destination.from_url(str(central)), committed=1, max_bytes=1 << 30)
    assert not result.failed and not victim.exists()
    assert (central / rel).is_file() and not (central / rel).is_symlink()
    assert stat.S_IMODE((central / rel).stat().st_mode) == 0o640


def test_the_collectors_spool_positions_and_stats_are_the_stores_modes(tmp_path: Path) -> None:
    from observe.collect_config import Config
    from observe.collect import NodeCollector

    log = tmp_path / "app.log"
    log.write_text("2026-11-22T10:00:00+00:00 gpu001 app[1]: hello\n")
    doc = {"node": "gpu001", "spool": str(tmp_path / "spool"), "store": str(tmp_path / "central"),
           "input": [{"path": str(log)}]}
    node = NodeCollector(Config.from_dict(doc))
    try:
        node.run(once=True)
    finally:
        node.close()
    spool = tmp_path / "spool"
    assert stat.S_IMODE(spool.stat().st_mode) & 0o777 == 0o750
    for name in ("positions.json", "stats.json"):
        assert stat.S_IMODE((spool / name).stat().st_mode) == 0o640, name
