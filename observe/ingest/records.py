"""Bytes to records: an input read in pieces that hold whole records (a record is a line and the
continuation lines its collector joins to it), several inputs' bytes as one frame of records."""
from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

import numpy as np
import polars as pl

from observe.collector import INPUT_BITS, Collector
from observe.ingest.summary import Summary
from observe.reader import CHUNK_BYTES, MAX_RECORD_BYTES, READ_ERRORS, lines_of

MAX_RECORD_LINES = 500
TAIL_BYTES = 1 << 20  # where a read's last record start is looked for
SAMPLE_LINES = 40


def record_pieces(stream: BinaryIO, c: Collector, summary: Summary,
                  progress: Callable[[int], None] | None = None) -> Iterator[tuple[memoryview, int]]:
    """``(bytes, offset)`` pieces of a stream of about CHUNK_BYTES that hold whole records (each
    ending with a newline): each read's last record, which may go on in the next bytes, starts the
    next piece (at the end, it joins the last one). Pieces are views of the reads: a plain file is
    read again from where the last record starts (a few bytes read twice, no copy of the piece);
    other streams copy those bytes in front of the next read. A damaged compressed input yields its
    whole lines before the damage, then raises."""
    rewind = isinstance(stream, io.BufferedReader) and stream.seekable() and stream is not sys.stdin.buffer
    pending, base, ready, seen = b"", 0, None, 0
    while True:
        try:
            data = stream.read(CHUNK_BYTES)
        except READ_ERRORS:  # a damaged input: its whole lines before the damage are kept, then it is said
            whole = pending[:pending.rfind(b"\n") + 1]
            if ready is not None or whole:
                yield (memoryview(b"".join([ready[0], whole])), ready[1]) if ready is not None else (memoryview(whole), base)
            raise
        if not data:
            break
        start = base + len(pending)  # where ``data`` starts in the input
        if start + len(data) > seen:  # count each byte once, though a rewind reads some twice
            new = start + len(data) - seen
            summary.bytes += new
            seen += new
            if progress:
                progress(new)
        end = data.rfind(b"\n") + 1
        cut = last_record_start(data, end, c) if end else None
        ended = True  # the piece ends with a newline
        if not cut:  # no record starts after the first here (a long one): join the reads
            pending = pending + data
            if not end and b"\n" not in pending:  # one line all along: its records so far (see lines_of)
                if len(pending) < max(CHUNK_BYTES, MAX_RECORD_BYTES):
                    continue
                data, pending, ended = pending, b"", False
                cut = len(data) // MAX_RECORD_BYTES * MAX_RECORD_BYTES
            else:
                if len(pending) <= 4 * CHUNK_BYTES:
                    continue
                data, pending, cut = pending, b"", pending.rfind(b"\n") + 1  # a record longer than that is cut
        view = memoryview(data)
        piece = view[:cut] if not pending else memoryview(b"".join([pending, view[:cut]]))
        taken = len(piece)
        if not ended:
            piece = memoryview(b"".join([piece, b"\n"]))
        pending = b""
        if rewind:  # the next read starts with the record this one cut off
            stream.seek(base + taken)
        else:
            pending = bytes(view[cut:])
        if taken:
            if ready is not None:
                yield ready
            ready = piece, base
            if not ended:  # its newline is not the input's: nothing joins it
                yield ready
                ready = None
            base += taken
    if pending:
        tail = pending if pending.endswith(b"\n") else pending + b"\n"
        ready = (memoryview(b"".join([ready[0], tail])), ready[1]) if ready is not None else (memoryview(tail), base)
    if ready is not None:
        yield ready


def last_record_start(data: bytes, end: int, c: Collector, window: int | None = None) -> int | None:
    """Where the last record in ``data[:end]`` (complete lines) starts, looking at its last
    ``window`` bytes (default TAIL_BYTES); None when none starts there. Formats without continuation
    lines: ``end``."""
    if type(c).continuation is Collector.continuation:
        return end
    window = TAIL_BYTES if window is None else window
    start = 0 if end <= window else data.rfind(b"\n", 0, end - window) + 1
    if start >= end:
        return None
    lines = lines_of(data[start:end], start)
    starts = lines.filter(~c.continuation(pl.col("raw")).fill_null(False)).get_column("offset")
    return int(starts[-1]) if len(starts) else None


def _record_ids(chunk: pl.DataFrame, c: Collector, first: pl.Expr | None = None) -> pl.Series:
    """Record number of each line; a record holds at most MAX_RECORD_LINES lines.

    ``first`` marks lines that start a record whatever they look like (a new file's first line).
    """
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    cont = c.continuation(pl.col("raw")).fill_null(False)
    if c.continuation_hint is not None:  # the full test on the lines that pass the cheap one
        raw = chunk.get_column("raw")
        rows = raw.str.contains(c.continuation_hint).fill_null(False).arg_true()
        tested = raw.gather(rows).to_frame().select(cont).to_series()
        cont = pl.lit(pl.Series(np.zeros(chunk.height, bool)).scatter(rows, tested))
    if first is not None:
        cont = cont & ~first.fill_null(True)
    first = pl.when(~cont).then(idx).forward_fill().fill_null(0)
    start = (~cont) | ((idx - first) % MAX_RECORD_LINES == 0)
    return chunk.select(start.cum_sum().alias("rid")).to_series()


def _join(lines: pl.DataFrame, rid: pl.Series) -> pl.DataFrame:
    """One row per record (``rid`` ascending, consecutive): each record's first line, its ``raw``
    replaced by all its lines joined where it has several (those few are grouped, nothing merged)."""
    if not lines.height or lines.height == int(rid[-1]) - int(rid[0]) + 1:
        return lines
    multi = ((rid == rid.shift(1)) | (rid == rid.shift(-1))).fill_null(False)
    joined = (pl.DataFrame({"_r": rid.filter(multi), "raw": lines.get_column("raw").filter(multi)})
              .group_by("_r", maintain_order=True).agg(pl.col("raw").str.join("\n")))
    out = lines.filter(rid.ne_missing(rid.shift(1)))
    at = joined.get_column("_r") - int(rid[0])  # records are numbered consecutively from rid[0]
    return out.with_columns(out.get_column("raw").scatter(at, joined.get_column("raw")))


def sample_of(head: bytes) -> list[str]:
    """The first lines of an input's first bytes, for format detection."""
    end = -1
    for _ in range(SAMPLE_LINES):  # decode only those lines
        end = head.find(b"\n", end + 1)
        if end < 0:
            end = len(head)
            break
    return head[:end].decode("utf-8", "replace").splitlines()[:SAMPLE_LINES]


def joined_records(datas: list[bytes] | list[memoryview], c: Collector, bases: list[int] | None = None,
                   sizes: list[int] | None = None, limit: int = MAX_RECORD_BYTES) -> pl.DataFrame:
    """Records of several inputs' bytes (each ending with a newline, starting at byte ``bases[i]``
    of its input, default 0), given one buffer each, or one holding them one after another
    (``sizes``); each offset carries its input's index in the high bits. Lines longer than
    ``limit`` are cut (:func:`observe.reader.lines_of`)."""
    starts = np.cumsum([0] + (sizes or [len(d) for d in datas])[:-1])
    lines = lines_of(datas[0] if len(datas) == 1 else b"".join(datas), limit=limit)
    index = np.searchsorted(starts, lines.get_column("offset").to_numpy(), side="right") - 1
    shift = starts[index] - (np.asarray(bases, dtype=np.int64)[index] if bases is not None else 0)
    lines = lines.with_columns(
        pl.Series("_in", index, dtype=pl.Int64),
        (pl.col("offset") - pl.Series(shift, dtype=pl.Int64)).alias("offset"),
    )
    rid = _record_ids(lines, c, first=pl.col("_in") != pl.col("_in").shift(1))
    return _join(lines, rid).with_columns(pl.col("offset") + pl.col("_in") * (1 << INPUT_BITS)).drop("_in")


def blank_lines(raw: pl.Series) -> pl.Series:
    """Lines of only white space (stripped only where the first character is white space)."""
    blank = raw.str.len_bytes() == 0
    maybe = raw.str.contains(r"^\s")
    if maybe.any():
        rows = maybe.arg_true()
        blank = blank.scatter(rows, raw.gather(rows).str.strip_chars() == "")
    return blank
