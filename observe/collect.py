"""The node collector: follows log files, writes typed events to a local spool, ships them on.

One cycle: find every input's files (rotated ones too), read what is new up to complete records,
parse it with the same collectors and rules as ``observe ingest``, write the events to the spool as
segments tagged with the next batch number, then commit the positions with that batch number.
A crash before the commit leaves segments of an uncommitted batch, which the next start deletes
before reading the same bytes again; so every line is stored exactly once. Committed segments
are shipped to the central store (:mod:`observe.ship`).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from observe import collector as registry
from observe import provenance
from observe.printable import printable
from observe.collector import Collector, Context
from observe.ingest import (InputError, ParseInput, choose, job_from_name, joined_records, last_record_start,
                            parse_unit, sample_of)
from observe.reader import peek_head
from observe.collect_config import Config, InputSpec
from observe.config import to_json
from observe.frames import merge_attrs
from observe.schema import POLARS_SCHEMA
from observe.ship import Destination, batch_of, ship, spool_files
from observe.store import Store, buffered_parts, write_atomic
from observe.streams import Command, Journal, Kmsg, Read
from observe.tail import FORGET_AFTER_S, Checkpoint, Finder, Found, Positions, complete, is_idle, long_line, read_new


@dataclass
class Counters:
    """The collector's own health, written to ``<spool>/stats.json`` after every cycle."""

    cycles: int = 0
    lines: int = 0
    bytes: int = 0
    records: int = 0
    unparsed: int = 0
    stored: int = 0
    lag_bytes: int = 0
    spool_files: int = 0
    spool_bytes: int = 0
    shipped_files: int = 0
    ship_failures: int = 0
    dropped_files: int = 0
    dropped_records: int = 0
    dropped_bytes: int = 0
    source_lost: int = 0  # records a source overwrote before they were read (kmsg ring buffer)
    truncated_records: int = 0  # lines longer than max_record, stored cut
    quarantined_records: int = 0  # records a parser failed on, stored unparsed (attrs.parse_error)
    refused_files: int = 0  # files not opened: a link or FIFO where a log was (each path once)
    command_failures: int = 0
    last_error: str = ""
    updated: float = 0.0


def _truncated(cut: set[str]) -> pl.Expr:
    """``attrs`` with ``"truncated": true`` added where a row's ``file_id@offset`` is in ``cut``."""
    hit = pl.concat_str([pl.col("file_id"), pl.col("offset").cast(pl.String)], separator="@").is_in(list(cut))
    attrs = pl.col("attrs")
    return pl.when(hit).then(merge_attrs(attrs, pl.lit('{"truncated":true}'))).otherwise(attrs).alias("attrs")


def _where(cp: Checkpoint | None) -> tuple | None:
    return None if cp is None else (cp.path, cp.dev, cp.ino, cp.offset, cp.cursor)


def boot_time() -> datetime | None:
    """This host's boot time from ``/proc/stat`` (btime), for boot-relative kernel stamps."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return datetime.fromtimestamp(int(line.split()[1]), timezone.utc)
    except (OSError, ValueError):
        pass
    return None


def _stream(spec: InputSpec, node: str) -> Kmsg | Journal | Command:
    c = registry.get(spec.source)
    if spec.type == "kmsg":
        return Kmsg(spec.path, node, c)
    if spec.type == "journald":
        return Journal(list(spec.command), node, c)
    return Command(list(spec.command), spec.every_s, node, c)


class NodeCollector:
    """Follows a config's inputs into its spool and ships the spool to the central store.

    Over 200 lines: a cycle updates the positions, the spool and the counters together (a batch is
    spooled, then its positions committed, then its counters), so they are one object's state; what
    needs none of it is in tail.py (following a file), streams.py (kmsg, the journal, commands) and
    ship.py (shipping)."""

    def __init__(self, config: Config):
        self.config = config
        self.spool = Store(config.spool)
        self.positions_path = config.spool / "positions.json"
        self.stats_path = config.spool / "stats.json"
        self.dest = Destination.from_url(config.store)
        self.finders = {spec.path: Finder(spec.path, config.node, lambda p, spec=spec: spec.job or job_from_name(p),
                                          self._refused)
                        for spec in config.inputs if spec.type == "file"}
        self.streams = {spec.key: _stream(spec, config.node) for spec in config.inputs if spec.type != "file"}
        self.kinds: dict[str, Collector] = {}
        self.relayed: dict[str, bool] = {}  # file_id: its format was told from a syslog daemon's lines
        self.counters = Counters()
        self.refused: set[str] = set()
        self.waiting: set[str] = set()  # files the byte budget left unread last cycle: read first
        self.stop = False
        self.once = False
        self.last_stats = 0.0
        self.boot = boot_time()
        self.spool.make_dirs(self.spool.root)  # the store's modes: it holds every user's job output
        self.positions = Positions.load(self.positions_path)
        self._recover()

    def _recover(self) -> None:
        """Delete segments of a batch that was written but never committed (a crash in between)."""
        for path in spool_files(self.config.spool):
            if path.suffix == ".parquet" and batch_of(path) > self.positions.batch:
                path.unlink(missing_ok=True)
        for tmp in self.config.spool.rglob(".*.tmp"):
            tmp.unlink(missing_ok=True)

    # -- one cycle -------------------------------------------------------------------------------
    def cycle(self) -> bool:
        """Read, parse, spool and commit what is new; True when the byte budget left some unread.

        Every input with something new gets a fair share of the cycle's budget (and at least a
        record's worth), so that one busy input cannot starve the others; inputs the budget did
        not reach are read first next cycle."""
        now = time.time()
        touched: dict[str, Checkpoint] = {}
        pending: list[tuple[InputSpec, Found, Checkpoint | None]] = []
        for spec in self.config.inputs:
            if spec.type != "file":
                continue
            known = [cp for cp in self.positions.checkpoints.values() if cp.input == spec.path]
            for found in self.finders[spec.path].find(known).values():
                cp = self.positions.checkpoints.get(found.file_id)
                touched[found.file_id] = Checkpoint(found.file_id, spec.path, found.path, found.dev, found.ino,
                                                    cp.offset if cp else 0, now)
                if found.size != touched[found.file_id].offset:
                    pending.append((spec, found, cp))
        pending.sort(key=lambda read: read[1].file_id not in self.waiting)
        streams = [spec for spec in self.config.inputs if spec.type != "file"]
        budget = self.config.max_batch_bytes
        share = max(budget // max(len(streams) + len(pending), 1), self.config.max_record_bytes + 1)
        streamed: list[tuple[InputSpec, Read]] = []
        for spec in streams:
            if budget > 0:
                budget -= self._read_stream(spec, touched, streamed, now, min(share, budget))
        groups: dict[tuple[str, str, str], list[tuple[Found, int, bytes, int, InputSpec]]] = {}
        cut: set[str] = set()  # file_id@offset of lines stored cut
        lag = 0
        more = False
        self.waiting = set()
        for spec, found, cp in pending:
            cap = min(share, budget)
            if cap <= 0:
                self.waiting.add(found.file_id)
                more = True
                continue
            c = self._collector(spec, found)
            start, data = read_new(found, cp, cap) if c is not None else (0, b"")
            if not data:
                continue
            if cap < share and start + len(data) < found.size:
                self.waiting.add(found.file_id)
            pieces, cut_here, long_next = self._records(c, data, is_idle(found, self.config.partial_timeout_s, now)
                                                        and start + len(data) >= found.size)
            used = sum(n for _, _, n in pieces)
            budget -= len(data)
            more = more or cut_here or long_next or start + len(data) < found.size
            lag += found.size - start - used
            for at, body, n in pieces:
                route = provenance.input_route(found.route, self.relayed.get(found.file_id, False))
                groups.setdefault((c.name, spec.tz, route), []).append((found, start + at, body, n, spec))
            if cut_here:
                cut.update(f"{found.file_id}@{start + at}" for at, _, _ in pieces)
                self.counters.truncated_records += len(pieces)
            touched[found.file_id].offset = start + used
        batch = self.positions.batch + 1
        for (name, tz, route), reads in groups.items():
            self._spool(registry.get(name), Context(tz=tz, route=route), reads, batch, now, cut)
        for spec, read in streamed:
            self._spool_stream(spec, read, batch, now)
        wrote = bool(groups) or any(read.records.height for _, read in streamed)
        if now - self.last_stats >= self.config.stats_interval_s:
            self._spool_stats(batch, now)
            wrote = True
        changed = any(_where(self.positions.checkpoints.get(k)) != _where(v) for k, v in touched.items())
        self.positions.checkpoints.update(touched)
        for key, cp in list(self.positions.checkpoints.items()):
            if key not in touched and now - cp.seen > FORGET_AFTER_S:
                del self.positions.checkpoints[key]
                changed = True
        if changed or wrote:
            self.positions.batch = batch
            self.positions.save(self.positions_path, self.spool)  # the commit: after every segment is durable
        self.counters.cycles += 1
        self.counters.lag_bytes = lag
        return more

    def _refused(self, path: str, why: str) -> None:
        """A file found but not opened (a link or FIFO where a log was): counted and told once."""
        if path not in self.refused:
            self.refused.add(path)
            self.counters.refused_files += 1
            self.counters.last_error = f"{path}: {why}"
            print(f"observe collect: {path}: {why}; skipped", file=sys.stderr, flush=True)

    def _collector(self, spec: InputSpec, found: Found) -> Collector | None:
        """The input's collector: configured, or detected once from the file's first lines (None,
        with a warning, when the format cannot be told: the file stays unread)."""
        if spec.source != "auto":
            return registry.get(spec.source)
        if found.file_id not in self.kinds:
            try:
                sample = sample_of(peek_head(found.path))
                c = choose("auto", sample, found.path, found.route)
                if c.whole_file:
                    raise InputError(f"{found.path}: {c.name} documents are not followed line by line")
                self.relayed[found.file_id] = c.relayed_for(sample)  # told from syslog-framed lines
            except (InputError, OSError) as exc:
                c = None
                self.counters.last_error = str(exc)
                print(f"observe collect: {exc}; set 'source' on its input", file=sys.stderr, flush=True)
            self.kinds[found.file_id] = c
        return self.kinds[found.file_id]

    def _records(self, c: Collector, data: bytes, idle: bool) -> tuple[list[tuple[int, bytes, int]], bool, bool]:
        """Complete records of ``data`` as (position, bytes, bytes of ``data`` taken) pieces, whether
        they are a long line's pieces, and whether a long line follows them (read next). Complete
        lines, less the last record while the file is still being written and that record may go on
        (multi-line formats); but a line longer than ``max_record`` is cut into records of that size:
        a line that never ends would otherwise be read again every cycle, and its file never get past it."""
        limit = self.config.max_record_bytes
        at = long_line(data, limit)
        if at == 0:
            end = data.find(b"\n")
            end = len(data) if end < 0 else end
            return [(pos, data[pos:pos + limit] + b"\n", limit) for pos in range(0, end - limit, limit)], True, False
        if at > 0:  # the records before a long line are complete: it is a record of its own
            data, idle = data[:at], True
        body, used = complete(data, idle)
        if body and not idle:
            used = last_record_start(body, len(body), c, window=len(body)) or 0
            body = body[:used]
        return [(0, body, used)] if body else [], False, at > 0

    def _read_stream(self, spec: InputSpec, touched: dict[str, Checkpoint], streamed: list, now: float,
                     budget: int) -> int:
        """Read up to about ``budget`` bytes of a kmsg, journald or command input; note its new
        position; the bytes it took."""
        stream = self.streams[spec.key]
        key = stream.key
        cp = self.positions.checkpoints.get(key)
        touched[key] = Checkpoint(key, spec.key, spec.path or spec.command[0], 0, 0, cp.offset if cp else 0, now,
                                  cp.cursor if cp else "")
        try:
            read = stream.read(cp, budget, now, follow=not self.once)
        except (OSError, subprocess.SubprocessError) as exc:
            self.counters.last_error = f"{spec.key}: {getattr(exc, 'strerror', None) or exc}"
            print(f"observe collect: {self.counters.last_error}", file=sys.stderr, flush=True)
            return 0
        if read is None:
            return 0
        if getattr(stream, "error", ""):
            self.counters.command_failures += 1
            self.counters.last_error = f"{spec.key}: {stream.error}"
        if read.lost:
            self.counters.source_lost += read.lost
            print(f"observe collect: {spec.key}: {read.lost} record(s) were overwritten before they could be read",
                  file=sys.stderr, flush=True)
        touched[key].offset, touched[key].cursor = read.position, read.cursor or touched[key].cursor
        streamed.append((spec, read))
        return read.bytes

    def _spool(self, c: Collector, hints: Context, reads: list, batch: int, now: float, cut: set[str]) -> None:
        recs = joined_records([body for _, _, body, _, _ in reads], c, [start for _, start, _, _, _ in reads],
                              limit=self.config.max_record_bytes)
        inputs = [ParseInput(found.file_id, spec.job or job_from_name(found.path)) for found, _, _, _, spec in reads]
        self._parse_and_spool(recs, inputs, c, hints, batch, now, sum(used for _, _, _, used, _ in reads), cut)

    def _spool_stream(self, spec: InputSpec, read: Read, batch: int, now: float) -> None:
        if read.records.height:
            stream = self.streams[spec.key]
            self._parse_and_spool(read.records, [ParseInput(read.file_id, spec.job)], stream.collector,
                                  Context(tz=spec.tz, header=read.header, route=stream.route), batch, now, read.bytes)

    def _parse_and_spool(self, recs: pl.DataFrame, inputs: list[ParseInput], c: Collector, hints: Context, batch: int,
                         now: float, nbytes: int, cut: set[str] = frozenset()) -> None:
        """Parse records with this node's context plus ``hints`` (tz, header, route), spool them, count them;
        the records at ``cut`` (``file_id@offset``) get ``"truncated": true`` in their attrs."""
        ctx = replace(hints, node=self.config.node, boot_time=self.boot if c.source == "kernel" else None,
                      reference_time=datetime.fromtimestamp(now, timezone.utc))
        parsed = parse_unit(recs, inputs, c, ctx)
        for (source, day), part in parsed.parts.items():
            if cut:
                part = part.with_columns(_truncated(cut))
            self._spooled(source, day, part, batch)
        self.counters.lines += recs.height + parsed.blank
        self.counters.bytes += nbytes
        self.counters.records += parsed.records
        self.counters.unparsed += parsed.unparsed
        self.counters.stored += parsed.stored
        if parsed.quarantined:
            self.counters.quarantined_records += parsed.quarantined
            self.counters.last_error = f"{c.name}: {parsed.quarantined} record(s) stored unparsed: {parsed.error}"
            print(f"observe collect: {printable(self.counters.last_error)}", file=sys.stderr, flush=True)

    def _spooled(self, source: str, day: str, part: pl.DataFrame, batch: int) -> None:
        """One durable segment of ``batch`` in the spool. The spool is no table: its commit is
        positions.json, and the central store commits what is shipped (Store.adopt)."""
        self.spool.durable([self.spool.write_partition(source, day, part, tag=f"b{batch:010d}", durable=False)])

    def _spool_stats(self, batch: int, now: float) -> None:
        """The collector's counters as a ``collector_stats`` health event."""
        self.last_stats = now
        attrs = to_json({k: v for k, v in asdict(self.counters).items() if k not in ("last_error", "updated")})
        ev = pl.DataFrame({
            "ts": [datetime.fromtimestamp(now, timezone.utc)], "node": [self.config.node], "source": ["health"],
            "severity": ["info"], "kind": ["collector_stats"],
            "message": [f"observe collector: {self.counters.lines} lines, {self.counters.stored} stored, "
                        f"{self.counters.lag_bytes} bytes behind, {self.counters.spool_files} segments spooled"],
            "attrs": [attrs], "file_id": [f"collector:{self.config.node}"], "offset": [int(now * 1e6)],
        }).with_columns(pl.col("ts").cast(POLARS_SCHEMA["ts"]))
        ev = ev.with_columns(pl.col("message").alias("raw"))
        for (source, day), part in buffered_parts(ev).items():
            self._spooled(source, day, part, batch)

    # -- shipping and the loop --------------------------------------------------------------------
    def ship(self) -> None:
        """Ship committed segments; count failures and drops; write the counters."""
        result = ship(self.config.spool, self.dest, self.positions.batch, self.config.spool_max_bytes)
        self.counters.shipped_files += result.shipped
        if result.failed:
            self.counters.ship_failures += 1
            self.counters.last_error = result.error
        self.counters.dropped_files += result.dropped_files
        self.counters.dropped_records += result.dropped_rows
        self.counters.dropped_bytes += result.dropped_bytes
        left = [p for p in spool_files(self.config.spool) if p.suffix == ".parquet"]
        self.counters.spool_files = len(left)
        self.counters.spool_bytes = sum(p.stat().st_size for p in left)
        self.counters.updated = time.time()
        write_atomic(self.stats_path, to_json(asdict(self.counters)).encode(), self.spool)

    def run(self, once: bool = False) -> Counters:
        """Collect until stopped (SIGTERM/SIGINT), or with ``once`` until everything readable now is
        spooled and shipped."""
        self.once = once
        while not self.stop:
            started = time.monotonic()
            more = self.cycle()
            self.ship()
            if once and not more:
                break
            if not more:
                while not self.stop and time.monotonic() - started < self.config.flush_interval_s:
                    time.sleep(min(0.2, self.config.flush_interval_s))
        return self.counters

    def close(self) -> None:
        """Stop the journal followers and close ``/dev/kmsg``."""
        for stream in self.streams.values():
            stream.close()

    def handle_signals(self) -> None:
        """Stop after the current cycle on SIGTERM or SIGINT."""
        def stop(signum, frame):
            self.stop = True
            print(f"observe collect: signal {signum}: stopping after this cycle", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
