"""One event per real record: the same record read through two routes is counted once.

A node's kernel writes each record once, but a site may keep it in several places: ``dmesg`` and the
syslog, ``kern.log`` and ``syslog``, ``/dev/kmsg`` and the journal, a file and a rotated copy of it
under another name. Each route is another input (another ``file_id``), so the store holds one row per
copy, with headers and times that differ (a syslog stamp is when the line was received, a dmesg time is
the boot time plus the kernel's uptime stamp). Every count, episode, timeline and metric reads events
through :func:`one_per_record`.

How copies are told apart from repeats: rows of one source, node, job, rank and message text are
*copies* when they come from different inputs and lie within COPY_WINDOW of each other in a chain
(a cluster), or carry the same kernel uptime stamp (``attrs.uptime``) at times as far apart as the
kernel's clock may drift from the wall clock over that uptime (a dmesg time is a boot time plus the
stamp; BOOT_APART_S and DRIFT): a node that reboots prints its first lines at the same stamps again,
and those are each boot's records. In each cluster an input of a
trusted route (observe/provenance.toml: the kernel's own log, not a syslog that relays what any
process sends) wins over the others, so that lines a user can write never hide the kernel's; then the
input holding the most rows (a burst of ten identical Xid lines is ten records, not one; an input
that missed some of a burst loses to the one that has them all); ties go to the input whose rows
have times, then to the one with kernel uptime stamps, then to the smaller ``file_id``. Its rows are kept, the other inputs' rows of the cluster are not.
The store writes the outcome into each row (``copy_of``, :mod:`observe.store.copy_marks`), so that
engines other than observe count each record once too.
Rows of one input are never merged; rows without a time (NCCL INFO lines) are left as they are,
unless an uptime stamp ties them to their copies (a dmesg read without its boot time).
"""
from __future__ import annotations

from datetime import timedelta

import polars as pl

from observe.provenance import trusted

COPY_WINDOW = timedelta(seconds=2)  # how far apart two routes stamp one record (a syslog's second, a clock step)
BUCKET_US = 2 * int(COPY_WINDOW.total_seconds() * 1_000_000)  # near_another_input's buckets: two windows wide
KEY = ("source", "node", "job_id", "rank", "message")
STREAM = KEY[:3]  # a node's own lines, or one job's output (job output has no node of its own): copies stay within one


# How far apart the times of one record's copies with one uptime stamp may lie: a dmesg time is a boot
# time plus the stamp, and the kernel's clock drifts from the wall clock by up to DRIFT of the uptime
# (NTP tolerates 500 ppm); two boots' lines with one stamp lie a whole boot apart, at least the stamp
BOOT_APART_S = 60.0
DRIFT = 1e-3
UPTIME = pl.col("attrs").str.contains('"uptime"', literal=True)  # a kernel line's uptime stamp ties copies without a time


def near_another_input(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of ``lf`` with a time that lie near a row of another input of their stream (source, node
    and job: the parts of the record's key that are few). Streams only one input wrote are left out
    first (one group-by); in the others,
    two grids of buckets two windows wide, offset by a window, hold any two rows within a window of each
    other in one bucket of one of them, so a bucket with one input has nothing to merge (integer keys,
    over the stream, ``ts`` and ``file_id`` alone: cheap beside grouping by message)."""
    timed = lf.filter(pl.col("ts").is_not_null())
    shared = (timed.group_by(STREAM).agg(pl.col("file_id").n_unique().alias("_n"))
              .filter(pl.col("_n") > 1).drop("_n"))
    width = BUCKET_US
    stream, at = pl.struct(*STREAM).hash(), pl.col("ts").dt.epoch("us")
    inputs = pl.col("file_id").hash()
    busy = pl.any_horizontal([inputs.min().over(b) != inputs.max().over(b)  # an integer key per bucket
                              for b in (stream + ((at + shift) // width).cast(pl.UInt64) * 0x9E3779B97F4A7C15
                                        for shift in (0, width // 2))])
    return timed.join(shared, on=list(STREAM), how="semi", nulls_equal=True).filter(busy)


def clusters(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Rows (``_row`` and their ``file_id``) that may have a copy in another input, with their cluster
    ``_c``, whether their route is trusted (``_tr``) and whether they carry a time (``_t``) and an uptime
    stamp (``_u``). Only rows near a row of another input of their source and node are
    clustered (:func:`near_another_input`), and rows without a time that carry a kernel uptime stamp."""
    up = pl.col("attrs").str.json_path_match("$.uptime")
    timed = near_another_input(lf)
    untimed = lf.filter(pl.col("ts").is_null() & UPTIME)
    candidates = pl.concat([timed, untimed]).select("_row", "file_id", "ts", *KEY, up.alias("_up"),
                                                    trusted().alias("_tr"))
    several = candidates.group_by(KEY).agg(pl.col("file_id").n_unique().alias("_inputs")).filter(pl.col("_inputs") > 1)
    rows = candidates.join(several.select(KEY), on=list(KEY), how="semi", nulls_equal=True)
    # copies that share an uptime stamp are placed at the earliest of their boot's times, so they chain
    rows = rows.sort([*KEY, "_up", "ts"], nulls_last=True).with_columns(_boot=_boot())
    at = pl.when(pl.col("_up").is_not_null()).then(pl.col("ts").min().over([*KEY, "_up", "_boot"])).otherwise("ts")
    rows = rows.with_columns(at.alias("_at")).sort([*KEY, "_at", "_up"], nulls_last=True)
    same = pl.all_horizontal([pl.col(k).eq_missing(pl.col(k).shift(1)) for k in KEY])
    near = ((pl.col("_at") - pl.col("_at").shift(1)) <= COPY_WINDOW).fill_null(False) \
        | ((pl.col("_up") == pl.col("_up").shift(1)) & pl.col("_at").eq_missing(pl.col("_at").shift(1))).fill_null(False)
    return rows.select("_row", "file_id", (~(same & near)).cum_sum().alias("_c"), "_tr",
                       pl.col("ts").is_not_null().alias("_t"), pl.col("_up").is_not_null().alias("_u"))


def _boot() -> pl.Expr:
    """Which boot each row of one record key and uptime stamp is of (rows sorted by key, stamp and time).

    A node that reboots prints its first lines at the same stamps again; one record's copies lie within
    a clock's drift of each other (:data:`BOOT_APART_S`, :data:`DRIFT`), two boots' lines a whole boot
    apart. Boots are told apart by the trusted rows alone (the kernel's own logs: a chain of a user's
    forged lines a minute apart must not join two boots); a row of another route is of the trusted boot
    whose times lie within the drift of its own, else of none (a boot of its own route's rows); a row
    without a time (a dmesg read without its boot time) is of the latest trusted boot."""
    group = [*KEY, "_up"]
    ts, trusted_row = pl.col("ts"), pl.col("_tr") & pl.col("ts").is_not_null()
    allow = pl.duration(microseconds=((BOOT_APART_S + pl.col("_up").cast(pl.Float64, strict=False).fill_null(0) * DRIFT)
                                      * 1e6).cast(pl.Int64))
    mine = pl.when(trusted_row).then(ts)
    before = mine.forward_fill().over(group)  # the latest trusted time at or before the row
    opens = trusted_row & ((ts - mine.shift(1).forward_fill().over(group)) > allow).fill_null(True)
    boot = opens.cum_sum().over(group)  # the trusted boot at or before the row (0: none yet)
    after = mine.backward_fill().over(group)  # the next trusted time
    with_earlier = trusted_row | ts.is_null() | ((ts - before) <= allow).fill_null(False)
    with_later = ((after - ts) <= allow).fill_null(False)
    alone = ~with_earlier & ~with_later
    own = (alone & ((ts - pl.when(alone).then(ts).shift(1).forward_fill().over(group)) > allow).fill_null(True)).cum_sum().over(group)
    return (pl.when(with_earlier).then(boot * 2).when(with_later).then((boot + 1) * 2)
            .otherwise(own * 2 + 1))


def marks(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of ``lf`` (numbered ``_row``) that may have a copy in another input, with their cluster
    ``_c`` and, for each row that copies a record another input's row holds, that input (``copy_of``;
    null for the rows kept)."""
    rows = clusters(lf)
    per_input = rows.group_by("_c", "file_id").agg(pl.col("_tr").any(), pl.len().alias("_n"),
                                                   pl.col("_t").sum().alias("_nt"), pl.col("_u").sum().alias("_nu"))
    order = ["_c", "_tr", "_n", "_nt", "_nu", "file_id"]
    winner = (per_input.sort(order, descending=[False, True, True, True, True, False])
              .unique("_c", keep="first").select("_c", pl.col("file_id").alias("_keep")))
    copy_of = pl.when(pl.col("file_id") != pl.col("_keep")).then(pl.col("_keep")).alias("copy_of")
    return rows.join(winner, on="_c").select("_row", "_c", copy_of)


def one_per_record(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` (events) with the copies of each record read through other inputs left out."""
    lf = lf.with_row_index("_row").cache()  # read once, though the plan below uses it twice
    dropped = marks(lf).filter(pl.col("copy_of").is_not_null()).select("_row")
    return lf.join(dropped, on="_row", how="anti", maintain_order="left").drop("_row")
