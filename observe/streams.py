"""Inputs that are not growing files: ``/dev/kmsg``, ``journalctl -o json --follow`` and commands
polled every N seconds (``nvidia-smi -q -x``, ``dcgmi diag``, ``sacct``).

Each gives the collector records with a provenance offset of its own and a position to commit:
kmsg records by their sequence number (per boot; wall-clock time from ``/proc/stat`` btime),
journald entries by sequence number with the entry's cursor as the position, a command's output
by poll (one input per poll, named by its time). A restart re-reads from the committed position,
so nothing is lost or stored twice.
"""
from __future__ import annotations

import errno
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from observe.collector import Collector
from observe.ingest import joined_records
from observe.reader import fingerprint
from observe.tail import Checkpoint, complete

KMSG_READ = 8192  # a /dev/kmsg read returns one record; longer ones are truncated by the kernel
SEQ = r"^\d{1,4},(\d+),"


@dataclass
class Read:
    """What one input gave in one cycle: records (raw, offset) of one input, the position after them."""

    file_id: str
    records: pl.DataFrame
    position: int
    cursor: str = ""
    bytes: int = 0
    lost: int = 0  # records the source no longer had (kmsg ring buffer overwritten)
    header: str | None = None  # a command output's first line (sacct's column names)


def read_kmsg(fd: int, budget: int) -> bytes:
    """Up to about ``budget`` bytes of kmsg records from a non-blocking descriptor: one record per
    read; records overwritten before they were read are skipped (the caller counts the gap)."""
    chunks, size = [], 0
    while size < budget:
        try:
            chunk = os.read(fd, KMSG_READ)
        except BlockingIOError:
            break
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # the next record was overwritten: read on
                continue
            raise
        if not chunk:
            break  # end of a regular file
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``); kmsg sequence numbers restart with it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class _Lines:
    """Bytes read so far up to the last newline; the rest waits for the next read."""

    pending = b""

    def _whole_lines(self, data: bytes) -> bytes:
        data = self.pending + data
        body, used = complete(data, idle=False)
        self.pending = data[used:]
        return body


class Kmsg(_Lines):
    """``/dev/kmsg`` (or a file of kmsg records, for tests and replays), read without blocking.

    The position is the next sequence number; a restart reads the ring buffer again from its
    start and skips what was committed. Records overwritten before they were read are counted.
    """

    route = "kmsg"  # only the kernel writes its ring buffer

    def __init__(self, path: str, node: str, collector: Collector):
        self.path = path
        self.collector = collector
        self.file_id = self.key = fingerprint(f"kmsg {boot_id()}\n".encode(), node, None, "kmsg")
        self.fd: int | None = None

    def read(self, cp: Checkpoint | None, budget: int, now: float, follow: bool) -> Read | None:
        """Records with a sequence number at or past the checkpoint's (the next one wanted)."""
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        position = cp.offset if cp is not None else None
        body = self._whole_lines(read_kmsg(self.fd, budget))
        if not body:
            return None
        recs = joined_records([body], self.collector)
        seq = pl.col("raw").str.extract(SEQ, 1).cast(pl.Int64)
        recs = recs.with_columns(seq.alias("offset")).filter(pl.col("offset").is_not_null())
        if position is not None:
            recs = recs.filter(pl.col("offset") >= position)
        if not recs.height:
            return None
        seqs = recs.get_column("offset")
        expected = position if position is not None else int(seqs[0])
        overwritten = int(seqs[0]) - expected + int((seqs.diff().drop_nulls() - 1).clip(0).sum())
        return Read(self.file_id, recs, int(seqs[-1]) + 1, bytes=len(body), lost=max(overwritten, 0))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Journal(_Lines):
    """``journalctl -o json --follow`` from the committed cursor; entries keyed by their sequence
    number (the cursor's ``i=``).

    The follower runs as a child process; each cycle takes the complete lines it has printed.
    """

    route = None  # each entry's own: journald's _TRANSPORT and _UID say who sent it (collectors.syslog)

    def __init__(self, argv: list[str], node: str, collector: Collector):
        self.argv = argv
        self.collector = collector
        self.file_id = self.key = fingerprint(b"journald\n", node, None, "journald")
        self.proc: subprocess.Popen | None = None

    def read(self, cp: Checkpoint | None, budget: int, now: float, follow: bool) -> Read | None:
        """Entries after the checkpoint's cursor (all the journal holds without one); without
        ``follow``, what ``journalctl`` prints before it exits (``--once``)."""
        cursor = cp.cursor if cp is not None else ""
        if follow:
            if self.proc is None or self.proc.poll() is not None:
                self._start(cursor)
            data = self._drain(budget)
        else:
            argv = [a for a in self._argv(cursor) if a not in ("--follow", "-f")]
            data = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=600, check=True).stdout
        body = self._whole_lines(data)
        if not body:
            return None
        recs = joined_records([body], self.collector)
        cursor = pl.col("raw").str.json_path_match("$.__CURSOR")
        recs = recs.with_columns(cursor.alias("_cursor")).with_columns(  # i=: the entry's sequence number, hex
            pl.col("_cursor").str.extract(r"(?:^|;)i=([0-9a-f]+)", 1).str.to_integer(base=16, strict=False).alias("offset"))
        last = recs.get_column("_cursor").drop_nulls()
        recs = recs.filter(pl.col("offset").is_not_null()).drop("_cursor")
        if not len(last):
            return None
        return Read(self.file_id, recs, 0, cursor=str(last[-1]), bytes=len(body))

    def _argv(self, cursor: str) -> list[str]:
        return [*self.argv, f"--after-cursor={cursor}"] if cursor else [*self.argv, "--no-tail"]

    def _start(self, cursor: str) -> None:
        self.pending = b""
        self.proc = subprocess.Popen(self._argv(cursor), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        os.set_blocking(self.proc.stdout.fileno(), False)

    def _drain(self, budget: int) -> bytes:
        fd, chunks, size = self.proc.stdout.fileno(), [], 0
        while size < budget and select.select([fd], [], [], 0.05)[0]:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


class Command:
    """A command run every ``every_s`` seconds; each run's output is one input named by its time.

    ``{since}`` and ``{now}`` in the arguments become the previous run's time (less ``overlap_s``)
    and this run's, as ``YYYY-MM-DDTHH:MM:SS`` local time (what ``sacct -S/-E`` takes). The position
    is the time of the last run, in microseconds.
    """

    route = "command"  # observe ran it: its output is the tool's, not a user's

    def __init__(self, argv: list[str], every_s: float, node: str, collector: Collector, overlap_s: float = 600.0):
        self.argv = argv
        self.every_s = every_s
        self.node = node
        self.collector = collector
        self.overlap_s = overlap_s
        self.error = ""
        self.key = fingerprint(f"{' '.join(argv)}\n".encode(), node, None, "command")

    def close(self) -> None:
        """Nothing is left running between polls."""

    def read(self, cp: Checkpoint | None, budget: int, now: float, follow: bool) -> Read | None:
        """Run the command if it is due; its output's records (none when it failed: see ``error``)."""
        last = cp.offset / 1e6 if cp is not None and cp.offset else None
        if last is not None and now - last < self.every_s:
            return None
        since = (last if last is not None else now - max(self.every_s, 3600.0)) - self.overlap_s
        argv = [a.replace("{since}", _local(since)).replace("{now}", _local(now)) for a in self.argv]
        stamp = int(now * 1e6)
        try:
            run = subprocess.run(argv, capture_output=True, timeout=max(self.every_s, 30.0), stdin=subprocess.DEVNULL)
            self.error = "" if run.returncode == 0 else f"exit {run.returncode}: {run.stderr.decode(errors='replace').strip()[-200:]}"
            out = run.stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error, out = str(exc), b""
        if self.error:
            print(f"observe collect: {argv[0]}: {self.error}", file=sys.stderr, flush=True)
        file_id = fingerprint(f"{' '.join(self.argv)} {stamp}\n".encode(), self.node, None, Path(argv[0]).name)
        if not out.strip():
            return Read(file_id, pl.DataFrame(schema={"raw": pl.String, "offset": pl.Int64}), stamp)
        if self.collector.whole_file:
            recs = pl.DataFrame({"raw": [out.decode("utf-8", "replace")], "offset": [0]},
                                schema={"raw": pl.String, "offset": pl.Int64})
        else:
            recs = joined_records([out if out.endswith(b"\n") else out + b"\n"], self.collector)
        header = out.split(b"\n", 1)[0].decode("utf-8", "replace")
        return Read(file_id, recs, stamp, bytes=len(out), header=header)


def _local(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S")

