"""What dates a dmesg: its records' copies in the run's other inputs.

A dmesg stamps its records with seconds since boot. A syslog's kernel lines carry both clocks
(rsyslog's time of receipt and printk's ``[seconds]``), so each copy of a dmesg record there says
when the node booted. Only copies count: a kernel row that copies no record of the dmesg being
dated tells nothing of it. A node user's ``logger -t kernel '[100000000.000000] hi'`` is a kernel
row of the syslog with any uptime it likes (the median over every such row once let sixty of them
date a trusted Xid three years back); a previous boot's lines are kernel rows too, and its first
ones (``[    0.000000] Linux version ...``) are the same records again. So the copies' boot times
are grouped into boots (a record's copies lie within a clock's drift of each other, as in
:mod:`observe.copies`), and the earliest boot that copies a record printed after the boot's first
minute dates the dmesg: rsyslog and journald stamp a local message when they receive it, so a
user's replay of records they read (``logger -t kernel`` with the text ``dmesg`` shows them) is
later than the kernel's own copies, however many records it replays; and no two boots print the
same text at the same microsecond a minute in. Where every boot's copies lie in their first minute
(a node just booted), the latest boot dates it, since earlier boots print the same first records. Where nothing copies the dmesg's records, the boot time its node's
trusted kernel rows tell (a journal's kernel transport) dates it, and else nothing does: its
records are stored without a time. What this rests on: stamps of receipt. A syslog file written by
a daemon that keeps a sender's own stamp (a central rsyslog taking messages over the network) lets
a user write earlier times, and a dmesg dated by it is no better than that file.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from observe import provenance
from observe.copies import BOOT_APART_S, DRIFT
from observe import timeparse as tp

COPIES = {"node": pl.String, "up_us": pl.Int64, "text": pl.UInt64, "trusted": pl.Boolean, "boot_us": pl.Int64}
RECORD = ["up_us", "text"]  # one kernel record of one boot: its stamp and its text
KEY = ["node", *RECORD, "trusted"]
SETTLED_US = 60_000_000  # past a boot's first minute no other boot prints the same text at the same microsecond


def _record(uptime: pl.Expr, message: pl.Expr) -> list[pl.Expr]:
    up_us = (tp.sane_uptime(uptime) * 1_000_000).round(0).cast(pl.Int64, strict=False)
    return [up_us.alias("up_us"), message.str.strip_chars().hash(seed=0).alias("text")]


def learned(events: pl.DataFrame) -> pl.DataFrame:
    """Per node, each kernel row with both clocks (``COPIES``): its record's stamp and a hash of its text, whether a
    trusted route carried it, and the boot time it tells, in microseconds (each once). Times and uptimes out of
    range tell nothing."""
    kernel = events.filter(pl.col("source") == "kernel")  # first: the text test only on its rows
    both = kernel.filter(pl.col("ts").is_not_null(), pl.col("node").is_not_null(),
                         pl.col("attrs").str.contains('"uptime"', literal=True))
    if both.is_empty():
        return pl.DataFrame(schema=COPIES)
    at = pl.when(tp.in_range(pl.col("ts"))).then(pl.col("ts").dt.epoch("us"))
    # the uptime read out of attrs once (an eager select evaluates each use of an expression: three reads of the JSON)
    both = both.select("node", "ts", "message", "route", pl.col("attrs").str.json_path_match("$.uptime").alias("_up"))
    return (both.select("node", *_record(pl.col("_up"), pl.col("message")),
                        provenance.trusted().alias("trusted"), at.alias("_at"))
            .select(*KEY, (pl.col("_at") - pl.col("up_us")).alias("boot_us")).drop_nulls().unique().cast(COPIES))


class Copies:
    """The run's copies so far, a list of frames per node, joined when a node's are asked for: a run adds a
    parse unit's at a time, and merging every row seen so far at each unit made a run's cost grow with the
    square of its kernel files (attack-26 r4)."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[pl.DataFrame]] = {}

    def add(self, copies: pl.DataFrame | Copies | None) -> None:
        """Add a unit's copies (:func:`learned`), or another part of the run's."""
        if isinstance(copies, Copies):
            for node, frames in copies.by_node.items():
                self.by_node.setdefault(node, []).extend(frames)
        elif copies is not None and copies.height:
            for (node,), part in copies.partition_by("node", as_dict=True).items():
                self.by_node.setdefault(node, []).append(part)

    def of(self, node: str | None) -> pl.DataFrame | None:
        """The copies of ``node``'s records; None when there are none."""
        frames = self.by_node.get(node or "")
        if not frames:
            return None
        if len(frames) > 1:
            frames[:] = [pl.concat(frames).unique()]
        return frames[0]


def boot_times(copies: pl.DataFrame) -> dict[str, datetime]:
    """Each node's boot time, the median over its records (one input's own lines, which date its later records)."""
    boots = copies.group_by("node").agg(pl.col("boot_us").median())
    return {node: t for node, us in boots.iter_rows() if (t := _time(us)) is not None}


def boot_time(records: pl.DataFrame, uptime: pl.Expr, message: pl.Expr, copies: pl.DataFrame | None) -> datetime | None:
    """The boot time the copies of ``records`` (their ``uptime`` seconds and ``message``) tell: of the
    earliest boot that copies a record past its first minute (else of the latest boot), the median over
    its records past their first minute where there are any (a syslog daemon receives the boot's first
    records only once it starts), each by its earliest copy. Copies a trusted route carried, where any
    copy a record, decide alone. Where none is copied, the median over the trusted rows; else None."""
    if copies is None or copies.is_empty():
        return None
    mine = records.select(*_record(uptime, message)).drop_nulls().unique()
    copied = mine.join(copies.select(*RECORD, "trusted", "boot_us"), on=RECORD).sort("boot_us")
    if copied.is_empty():
        return _time(copies.filter(pl.col("trusted")).get_column("boot_us").median())
    if copied.get_column("trusted").any():
        copied = copied.filter(pl.col("trusted"))
    apart = BOOT_APART_S * 1e6 + DRIFT * pl.col("up_us")
    boots = copied.with_columns((pl.col("boot_us").diff() > apart).fill_null(False).cum_sum().alias("_boot"))
    told = boots.group_by("_boot").agg((pl.col("up_us") >= SETTLED_US).any().alias("_late"),
                                        pl.col("boot_us").min().alias("_first"))
    late = told.filter(pl.col("_late"))
    best = late.sort("_first").item(0, "_boot") if late.height else told.sort("_first").item(-1, "_boot")
    earliest = boots.filter(pl.col("_boot") == best).group_by(RECORD).agg(pl.col("boot_us").min())
    settled = earliest.filter(pl.col("up_us") >= SETTLED_US)
    return _time((settled if settled.height else earliest).get_column("boot_us").median())


def _time(us: float | None) -> datetime | None:
    if us is None:
        return None
    t = tp.TS_MIN + timedelta(microseconds=round(us))
    return t if tp.TS_MIN <= t <= tp.TS_MAX else None
