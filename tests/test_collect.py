"""The node collector: exactly-once under SIGKILL and rotation, an unreachable store, a full spool,
many collectors into one store."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe.collect_config import Config, ConfigError
from observe.collect import NodeCollector
from observe.store import Store

ROOT = Path(__file__).resolve().parent.parent


def _config(tmp: Path, name: str = "c", store: Path | None = None, **extra) -> Path:
    lines = [f'node = "{extra.pop("node", "gpu001")}"', f'spool = "{tmp / (name + "-spool")}"',
             f'store = "{store or tmp / "central"}"', 'flush_interval = "0.1s"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    lines += ["[[input]]", f'path = "{tmp / (name + "-logs") / "syslog"}"', 'source = "syslog"']
    path = tmp / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    (tmp / (name + "-logs")).mkdir(exist_ok=True)
    return path


def _line(i: int, host: str = "gpu001") -> str:
    return f"Nov 22 10:{i // 60 % 60:02d}:{i % 60:02d} {host} app[7]: line {i}\n"


def _write(log: Path, lines: range, host: str = "gpu001") -> None:
    with open(log, "a") as fh:
        fh.write("".join(_line(i, host) for i in lines))


def _collect(config: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(config), "--once"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, **kw)


def _numbers(store: Path, host: str | None = None) -> pl.Series:
    df = shipped(store).scan(sources=["syslog"]).collect()
    if host:
        df = df.filter(pl.col("node") == host)
    return df.get_column("message").str.extract(r"line (\d+)$").cast(pl.Int64).sort()


def _exactly_once(nums: pl.Series, n: int) -> None:
    counts = nums.value_counts()
    twice = counts.filter(pl.col("count") > 1)
    missing = sorted(set(range(n)) - set(nums.to_list()))
    assert twice.is_empty(), f"stored more than once: {twice.head(10).to_dicts()}"
    assert not missing, f"{len(missing)} lines lost, e.g. {missing[:10]}"


def test_rotation_by_rename_and_copytruncate_and_partial_lines(tmp_path: Path) -> None:
    config = _config(tmp_path, partial_timeout="60s")
    log = tmp_path / "c-logs" / "syslog"
    _write(log, range(0, 100))
    with open(log, "a") as fh:
        fh.write(_line(100)[:20])  # half a line: held until its newline
    assert _collect(config).returncode == 0
    assert len(_numbers(tmp_path / "central")) == 100
    with open(log, "a") as fh:
        fh.write(_line(100)[20:])
    _write(log, range(101, 150))
    os.rename(log, log.with_name("syslog.1"))  # rotation by rename: the tail is read from syslog.1
    _write(log, range(150, 200))
    assert _collect(config).returncode == 0
    _write(log, range(200, 250))
    shutil.copy(log, log.with_name("syslog.1"))  # copytruncate: the tail is read from the copy
    log.write_text("")
    _write(log, range(250, 300))
    assert _collect(config).returncode == 0
    _exactly_once(_numbers(tmp_path / "central"), 300)
    log.write_text("")  # truncated in place, then new lines
    _write(log, range(300, 310))
    assert _collect(config).returncode == 0
    _exactly_once(_numbers(tmp_path / "central"), 310)


def _writer(log: Path, n: int, stop: threading.Event, seed: int) -> None:
    """Writes ``n`` lines in small bursts, rotating every 400 lines (by rename or copytruncate)."""
    rng = random.Random(seed)
    i = rotation = 0
    while i < n and not stop.is_set():
        k = min(n - i, rng.randint(1, 40))
        _write(log, range(i, i + k))
        i += k
        if i // 400 > rotation:
            rotation += 1
            rotated = log.with_name(f"syslog.{rotation}")
            if rotation % 2:
                os.rename(log, rotated)
                log.touch()
            else:
                shutil.copy(log, rotated)
                with open(log, "r+") as fh:
                    fh.truncate(0)
        time.sleep(rng.uniform(0.0, 0.02))


def test_sigkill_at_random_moments_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """30 SIGKILLs of a live collector while the log grows and rotates; every line stored once."""
    config = _config(tmp_path, partial_timeout="1s")
    log = tmp_path / "c-logs" / "syslog"
    log.touch()
    n, kills = 6000, 30
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(log, n, stop, 7), daemon=True)
    writer.start()
    rng = random.Random(11)
    try:
        for _ in range(kills):
            proc = subprocess.Popen([sys.executable, "-m", "observe.cli", "collect", "--config", str(config)],
                                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.6, 2.5))  # start-up takes about 0.6 s: kills land in every phase
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        writer.join(timeout=120)
        stop.set()
    time.sleep(1.1)  # the last partial line, if any, is complete once the file is idle
    done = _collect(config)
    assert done.returncode == 0, done.stderr
    _exactly_once(_numbers(tmp_path / "central"), n)


def test_store_down_then_back_loses_nothing(tmp_path: Path) -> None:
    central = tmp_path / "central"
    central.write_text("not a directory")  # the store is unreachable: every put fails
    config = _config(tmp_path, partial_timeout=0)
    log = tmp_path / "c-logs" / "syslog"
    for part in range(3):
        _write(log, range(part * 100, part * 100 + 100))
        assert _collect(config).returncode == 0
    stats = json.loads((tmp_path / "c-spool" / "stats.json").read_text())
    assert stats["ship_failures"] == 1 and stats["spool_files"] >= 3, stats
    central.unlink()
    assert _collect(config).returncode == 0
    stats = json.loads((tmp_path / "c-spool" / "stats.json").read_text())
    assert stats["spool_files"] == 0 and stats["ship_failures"] == 0, stats
    _exactly_once(_numbers(central), 300)


def test_full_spool_drops_oldest_with_a_log_line_and_counts_it(tmp_path: Path) -> None:
    central = tmp_path / "central"
    central.write_text("unreachable")
    config = _config(tmp_path, partial_timeout=0, spool_max="6KB", stats_interval="1h")
    log = tmp_path / "c-logs" / "syslog"
    dropped = 0
    for part in range(6):
        _write(log, range(part * 100, part * 100 + 100))
        done = _collect(config)
        assert done.returncode == 0
        if "dropped the" in done.stderr:
            assert "oldest segment(s)" in done.stderr and "records" in done.stderr
        dropped += json.loads((tmp_path / "c-spool" / "stats.json").read_text())["dropped_records"]
    assert dropped > 0
    central.unlink()
    assert _collect(config).returncode == 0
    nums = _numbers(central)
    assert nums.n_unique() == len(nums)  # nothing twice
    health = dropped  # every line is either stored or counted as dropped (stats events are dropped too)
    assert len(nums) + health >= 600
    assert len(nums) < 600


def test_eight_collectors_into_one_store(tmp_path: Path) -> None:
    configs = []
    for k in range(8):
        host = f"gpu{k:03d}"
        config = _config(tmp_path, name=f"n{k}", node=host, partial_timeout=0)
        _write(tmp_path / f"n{k}-logs" / "syslog", range(500), host)
        configs.append(config)
    procs = [subprocess.Popen([sys.executable, "-m", "observe.cli", "collect", "--config", str(c), "--once"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in configs]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    for k in range(8):
        _exactly_once(_numbers(tmp_path / "central", f"gpu{k:03d}"), 500)


def test_config_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('spool = "/tmp/x"\nstore = "/tmp/y"\nflush_interval = "soon"\n[[input]]\npath = "/var/log/syslog"\n')
    with pytest.raises(ConfigError, match="flush_interval"):
        Config.load(bad)
    bad.write_text('spool = "/tmp/x"\nstore = "/tmp/y"\n')
    with pytest.raises(ConfigError, match="no \\[\\[input\\]\\]"):
        Config.load(bad)
    done = subprocess.run([sys.executable, "-m", "observe.cli", "collect", "--config", str(bad)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "no [[input]]" in done.stderr


def test_crash_between_segment_and_commit_is_undone(tmp_path: Path) -> None:
    """Segments of a batch whose positions were never committed are deleted at start."""
    config = Config.load(_config(tmp_path, partial_timeout=0))
    log = tmp_path / "c-logs" / "syslog"
    _write(log, range(50))
    node = NodeCollector(config)
    node.positions.save = lambda path, store=None: (_ for _ in ()).throw(OSError("killed before the commit"))
    with pytest.raises(OSError):
        node.cycle()
    assert list((tmp_path / "c-spool" / "events").rglob("b*.parquet"))
    NodeCollector(config).run(once=True)
    _exactly_once(_numbers(tmp_path / "central"), 50)


def test_ships_to_an_s3_compatible_store_on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real S3 server (moto's standalone server) on 127.0.0.1, through pyarrow's S3 filesystem."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"}
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        url = f"s3://observe/store?endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(url + "&allow_bucket_creation=true")
        fs.create_dir("observe")  # the bucket
        config = _config(tmp_path, store=url, partial_timeout=0)  # type: ignore[arg-type]
        log = tmp_path / "c-logs" / "syslog"
        _write(log, range(200))
        assert _collect(config, env=env).returncode == 0
        _write(log, range(200, 300))
        assert _collect(config, env=env).returncode == 0
        local = tmp_path / "fetched"
        for info in fs.get_file_info(pafs.FileSelector("observe/store", recursive=True)):
            if info.type == pafs.FileType.File:
                target = local / info.path.removeprefix("observe/store/")
                target.parent.mkdir(parents=True, exist_ok=True)
                with fs.open_input_stream(info.path) as src:
                    target.write_bytes(src.read())
        _exactly_once(_numbers(local), 300)
        assert json.loads((tmp_path / "c-spool" / "stats.json").read_text())["spool_files"] == 0
    finally:
        server.stop()


def test_multi_line_record_joined_across_reads(tmp_path: Path) -> None:
    """An NVRM record whose detail lines arrive in later reads is still one record."""
    log = tmp_path / "kern.log"
    doc = {"node": "gpu001", "spool": str(tmp_path / "spool"), "store": str(tmp_path / "central"),
           "partial_timeout": "1s", "input": [{"path": str(log), "source": "kernel"}]}
    node = NodeCollector(Config.from_dict(doc))
    head = "[  170.053881] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    details = ["[  170.053882] NVRM:     GPU at PCI:0000:3b:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d\n",
               "[  170.053883] NVRM:     GPU Board Serial Number: 1324520031567\n"]
    nxt = "[  171.000000] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN\n"
    log.write_text(head + details[0])
    node.cycle()  # the record may go on: held back
    with open(log, "a") as f:
        f.write(details[1])
    node.cycle()
    with open(log, "a") as f:
        f.write(nxt)
    node.cycle()  # a new record started: the first is complete
    time.sleep(1.1)
    node.cycle()  # the file is idle: its last record is complete too
    node.ship()
    df = shipped(tmp_path / "central").scan(sources=["kernel"]).collect().sort("offset")
    assert df.height == 2
    assert df.get_column("raw")[0] == (head + "".join(details)).rstrip("\n")
    assert df.get_column("kind").to_list() == ["gpu_xid", "ib_link_down"]
