"""Collector inputs that are not growing files: /dev/kmsg (the real device, and recorded records
with a gap), the journal through the real journalctl, and polled commands (nvidia-smi, sacct)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import polars as pl
import pytest

from conftest import shipped
from observe.collect_config import Config
from observe.collect import NodeCollector, boot_time
from observe.store import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")


def _collector(tmp: Path, inputs: list[dict], name: str = "c") -> NodeCollector:
    doc = {"node": "gpu001", "spool": str(tmp / f"{name}-spool"), "store": str(tmp / "central"),
           "flush_interval": "0.1s", "input": inputs}
    return NodeCollector(Config.from_dict(doc))


def _once(tmp: Path, inputs: list[dict]) -> NodeCollector:
    node = _collector(tmp, inputs)
    try:
        node.run(once=True)
    finally:
        node.close()
    return node


def _events(tmp: Path, *sources: str) -> pl.DataFrame:
    return shipped(tmp / "central").scan(sources=sources or None).collect().filter(pl.col("source") != "health")


def test_kmsg_device_each_record_once(tmp_path: Path) -> None:
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg is not readable and writable here (root on Linux)")
    _once(tmp_path, [{"type": "kmsg"}])
    marker = f"observe-test {uuid.uuid4().hex}"
    with open("/dev/kmsg", "w") as f:  # a record of our own, as `observe health inject-fault` writes them
        f.write(f"<3>{marker}\n")
    node = _once(tmp_path, [{"type": "kmsg"}])
    df = _events(tmp_path, "kernel")
    assert df.filter(pl.col("message").str.contains(marker)).height == 1
    assert df.select("file_id", "offset").is_unique().all()
    assert df.get_column("file_id").n_unique() == 1
    mine = df.filter(pl.col("message").str.contains(marker)).row(0, named=True)
    assert mine["severity"] == "err"
    assert abs(mine["ts"].timestamp() - time.time()) < 120  # usec since boot + /proc/stat btime
    assert node.counters.source_lost == 0
    assert boot_time() is not None


def test_kmsg_records_overwritten_are_counted(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    real = (FIXTURES / "golden" / "kernel" / "kmsg.log").read_text()
    kmsg.write_text(real)
    inputs = [{"type": "kmsg", "path": str(kmsg)}]
    first = _once(tmp_path, inputs)
    seqs = [int(line.split(",")[1]) for line in real.splitlines() if line[:1].isdigit()]
    with open(kmsg, "a") as f:  # the ring buffer wrapped while the collector was down: 5 records gone
        f.write(f"4,{seqs[-1] + 6},9100000000,-;mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE\n")
        f.write(f"6,{seqs[-1] + 7},9100000100,c;NVRM: GPU at PCI:0000:3b:00: GPU-8a47641b\n SUBSYSTEM=pci\n")
    second = _once(tmp_path, inputs)
    df = _events(tmp_path, "kernel")
    assert sorted(df.get_column("offset")) == sorted(seqs + [seqs[-1] + 6, seqs[-1] + 7])
    assert first.counters.source_lost == 0 and second.counters.source_lost == 5
    assert df.filter(pl.col("offset") == seqs[-1] + 7).get_column("raw")[0].endswith("SUBSYSTEM=pci")


SENT_BY = {"kernel": "_TRANSPORT=kernel\n", "root": "_TRANSPORT=syslog\n_UID=0\n", "user": "_TRANSPORT=syslog\n_UID=1001\n"}


def _journal(path: Path, entries: list[tuple[str, str, str]], start_us: int, by: str = "") -> None:
    """Append entries (host, identifier, message) to a real journal file (systemd-journal-remote),
    with the fields journald itself sets for what sent them (``by``: kernel, root, user; default:
    the kernel for kernel lines, else root)."""
    export = "".join(
        f"__REALTIME_TIMESTAMP={start_us + i * 1_000_000}\n__MONOTONIC_TIMESTAMP={i + 1}\n"
        f"_BOOT_ID=0123456789abcdef0123456789abcdef\n_HOSTNAME={host}\nSYSLOG_IDENTIFIER={ident}\nPRIORITY=3\n"
        f"{SENT_BY[by or ('kernel' if ident == 'kernel' else 'root')]}MESSAGE={msg}\n\n"
        for i, (host, ident, msg) in enumerate(entries))
    subprocess.run([str(JOURNAL_REMOTE), "-o", str(path), "-"], input=export.encode(), check=True, capture_output=True)


@pytest.mark.skipif(not JOURNAL_REMOTE.exists() or not shutil.which("journalctl"),
                    reason="needs journalctl and systemd-journal-remote (apt-get install systemd-journal-remote)")
def test_journald_cursor_survives_restarts(tmp_path: Path) -> None:
    journal = tmp_path / "system.journal"
    now_us = int(time.time() * 1e6) - 600_000_000
    _journal(journal, [("gpu001", "kernel", f"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, line {i}") for i in range(3)], now_us)
    inputs = [{"type": "journald", "command": ["journalctl", f"--file={journal}", "-o", "json", "--follow"]}]
    node = _collector(tmp_path, inputs)
    try:
        for _ in range(100):  # the follower prints what the journal holds, then waits
            node.cycle()
            if node.counters.records >= 3:
                break
            time.sleep(0.05)
        _journal(journal, [("gpu001", "slurmd", f"error: line {i}") for i in range(3, 6)], now_us + 10_000_000)
        for _ in range(100):
            node.cycle()
            if node.counters.records >= 6:
                break
            time.sleep(0.05)
        node.ship()
    finally:
        node.close()
    _journal(journal, [("gpu001", "slurmd", f"error: line {i}") for i in range(6, 8)], now_us + 20_000_000)
    _once(tmp_path, inputs)  # a restart: from the committed cursor, without --follow
    df = _events(tmp_path)  # the journal's kernel lines are kernel events, slurmd's slurm events
    lines = sorted(df.get_column("message").str.extract(r"line (\d+)$").cast(pl.Int64))
    assert lines == list(range(8))
    assert df.select("file_id", "offset").is_unique().all()
    assert df.filter((pl.col("source") == "kernel") & (pl.col("kind") == "gpu_xid") & (pl.col("code") == 79)).height == 3


@pytest.mark.skipif(not JOURNAL_REMOTE.exists() or not shutil.which("journalctl"),
                    reason="needs journalctl and systemd-journal-remote (apt-get install systemd-journal-remote)")
def test_journal_lines_a_user_sent_are_not_the_kernels(tmp_path: Path) -> None:
    """``logger -t kernel 'NVRM: Xid ... 79'`` reaches the journal with _TRANSPORT=syslog and the
    user's _UID: it is the user's syslog line, not a kernel Xid, and opens no fault; ``logger -t
    slurmd`` is no Slurm daemon. The same words from the kernel transport are the kernel's."""
    from observe.health import faults
    from observe.health import policy

    journal = tmp_path / "system.journal"
    now_us = int(time.time() * 1e6) - 600_000_000
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    _journal(journal, [("gpu001", "kernel", xid), ("gpu001", "slurmd", "error: Node configuration differs")],
             now_us, by="user")
    _journal(journal, [("gpu001", "kernel", xid)], now_us + 10_000_000, by="kernel")
    _once(tmp_path, [{"type": "journald", "command": ["journalctl", f"--file={journal}", "-o", "json"]}])
    df = _events(tmp_path).sort("ts")
    assert df.select("source", "route").rows() == [("syslog", "journal_user"), ("syslog", "journal_user"),
                                                   ("kernel", "journal_kernel")]
    assert df.get_column("kind").to_list()[2] == "gpu_xid" and "gpu_xid" not in df.get_column("kind").to_list()[:2]
    forged = df.head(2).with_columns(pl.lit("kernel").alias("source"), pl.lit("gpu_xid").alias("kind"),
                                     pl.lit(79).cast(pl.Int32).alias("code"), pl.lit("0000:3b:00").alias("gpu"))
    decided = faults.decide(forged.lazy(), policy.load().faults, df.get_column("ts").max())
    assert decided.height == 0  # even typed as an Xid, a user's line drives nothing


def _script(tmp: Path, name: str, body: str) -> str:
    path = tmp / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


def test_polled_commands_nvidia_smi_and_sacct(tmp_path: Path) -> None:
    xml = FIXTURES / "nvidia_smi" / "a100_x2.xml"
    smi = _script(tmp_path, "nvidia-smi", f"import sys; sys.stdout.write(open({str(xml)!r}).read())\n")
    args = tmp_path / "sacct-args"
    sacct = _script(tmp_path, "sacct", (
        "import sys\n"
        f"open({str(args)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "print('JobID|JobName|User|Partition|State|ExitCode|Start|End|NodeList')\n"
        "print('5001|train|alice|gpu|NODE_FAIL|0:0|2026-11-22T10:00:00|2026-11-22T11:00:00|gpu[001-004]')\n"
    ))
    failing = _script(tmp_path, "dcgmi", "import sys; sys.exit('dcgmi: cannot connect to host engine')\n")
    inputs = [
        {"type": "command", "command": [smi, "-q", "-x"], "source": "nvidia_smi", "every": "1h"},
        {"type": "command", "command": [sacct, "-a", "-X", "--parsable2", "-S", "{since}", "-E", "{now}"],
         "source": "slurm_jobs", "every": "1h"},
        {"type": "command", "command": [failing, "diag", "-r", "1"], "source": "dcgm", "every": "1h"},
    ]
    first = _once(tmp_path, inputs)
    second = _once(tmp_path, inputs)  # not due again for an hour: nothing new
    gpu = _events(tmp_path, "gpu")
    assert gpu.filter(pl.col("kind") == "gpu_health").height == 2  # two GPUs in the recorded XML
    jobs = _events(tmp_path, "slurm")
    end = jobs.filter(pl.col("kind") == "slurm_job_end")
    assert end.height == 1 and end.get_column("job_id")[0] == "5001"
    called = args.read_text().splitlines()
    assert len(called) == 1 and "{since}" not in called[0] and "{now}" not in called[0]
    assert first.counters.command_failures == 1 and "cannot connect" in first.counters.last_error
    assert second.counters.command_failures == 0


def test_stream_config_errors(tmp_path: Path) -> None:
    from observe.collect_config import ConfigError

    base = {"spool": str(tmp_path / "s"), "store": str(tmp_path / "c")}
    for inp, match in [({"type": "command", "command": "nvidia-smi -q -x", "source": "nvidia_smi"}, "list of strings"),
                       ({"type": "command", "command": ["nvidia-smi"]}, "needs its 'source'"),
                       ({"type": "kmsg", "source": "syslog"}, "unknown key"),
                       ({"type": "tcp"}, "type 'tcp'"),
                       ({"path": "/x.xml", "source": "nvidia_smi"}, "whole documents")]:
        with pytest.raises(ConfigError, match=match):
            Config.from_dict({**base, "input": [inp]})
    assert json.dumps(Config.from_dict({**base, "input": [{"type": "journald"}]}).inputs[0].command) == \
        '["journalctl", "-o", "json", "--follow"]'
