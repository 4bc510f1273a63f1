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
and those are each boot's records. A cluster's inputs are ranked: an input of a trusted route
(observe/provenance.toml: the kernel's own log, not a syslog that relays what any process sends)
first, so that lines a user can write never hide the kernel's; then the input holding the most rows (a
burst of ten identical Xid lines is ten records, not one; an input that missed some of a burst loses to
the one that has them all); ties go to the input whose rows have times, then to the one with kernel
uptime stamps, then to the smaller ``file_id``. A row is a copy where a row of an input ranked before
its own lies within COPY_WINDOW of it (or shares its uptime stamp), not wherever the chain reaches.
The store writes the outcome into each row (``copy_of``, :mod:`observe.store.copy_marks`), so that
engines other than observe count each record once too.
Rows of one input are never merged; rows without a time (NCCL INFO lines) are left as they are,
unless an uptime stamp ties them to their copies (a dmesg read without its boot time).
"""
from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import polars as pl

from observe.provenance import trusted

COPY_WINDOW = timedelta(seconds=2)  # how far apart two routes stamp one record (a syslog's second, a clock step)
BUCKET_US = 2 * int(COPY_WINDOW.total_seconds() * 1_000_000)  # near_another_input's buckets: two windows wide
KEY = ("source", "node", "job_id", "rank", "message")
SOUGHT_ROWS = 4_000_000  # rows sought for copies at a time (their narrow columns: about half a gigabyte)
CLUSTERED_ROWS = 1_000_000  # rows that may be copies clustered at a time (see marks_by_stream)
BLOCK_US = 600_000_000  # a part holds a stream's rows ten minutes at a time (see candidates)
SPLIT_GROUP_ROWS = 1 << 16  # rows the split holds for each part before writing them (a few MB a part)
STREAM = KEY[:3]  # a node's own lines, or one job's output (job output has no node of its own): copies stay within one
# the key as clusters are made: the message as two hashes of it, so that the sorts and groups that make them do not
# carry the text (30,000 2-KB lines in two inputs held 1.5 GB: attack-35 F4); two 64-bit hashes of one text
CLUSTERED = (*KEY[:-1], "_m0", "_m1")


# How far apart the times of one record's copies with one uptime stamp may lie: a dmesg time is a boot
# time plus the stamp, and the kernel's clock drifts from the wall clock by up to DRIFT of the uptime
# (NTP tolerates 500 ppm); two boots' lines with one stamp lie a whole boot apart, at least the stamp
BOOT_APART_S = 60.0
DRIFT = 1e-3
UPTIME = pl.col("attrs").str.contains('"uptime"', literal=True)  # a kernel line's uptime stamp ties copies without a time


class SpillFailed(OSError):
    """:func:`candidates` could not write or read its temporary files (a full ``$TMPDIR``): one line, naming it."""


def near_another_input(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of ``lf`` with a time that lie near a row of another input of their stream (source, node
    and job: the parts of the record's key that are few), with their stream's and input's hashes (``_s``,
    ``_f``: :func:`hashed`, where ``lf`` does not carry them yet). Streams only one input wrote are left
    out first (one group-by); in the others, two grids of buckets two windows wide, offset by a window,
    hold any two rows within a window of each other in one bucket of one of them, so a bucket with one
    input has nothing to merge (integer keys: cheap beside grouping by message; two streams or inputs of
    one hash only make more rows candidates, which :func:`clusters` tells apart)."""
    timed = lf.filter(pl.col("ts").is_not_null())
    timed = timed if "_s" in lf.collect_schema() else hashed(timed)
    shared = timed.group_by("_s").agg(pl.col("_f").n_unique().alias("_n")).filter(pl.col("_n") > 1).select("_s")
    width, at, stream, inputs = BUCKET_US, pl.col("ts").dt.epoch("us"), pl.col("_s"), pl.col("_f")
    busy = pl.any_horizontal([inputs.min().over(b) != inputs.max().over(b)  # an integer key per bucket
                              for b in (stream + ((at + shift) // width).cast(pl.UInt64) * 0x9E3779B97F4A7C15
                                        for shift in (0, width // 2))])
    return timed.join(shared, on="_s", how="semi").filter(busy)


def sharing_a_stamp(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The kernel rows of ``lf`` with a time (``_row``) whose uptime stamp another input of their stream also
    holds: one record's copies, however far apart the kernel's clock drift placed them (dmesg's time is a boot
    time plus the stamp; :func:`clusters` tells boots apart), which :func:`near_another_input` does not find
    past its buckets (a 50 ppm drift put one Xid's dmesg and kern.log copies 21 s apart: counted twice,
    attack-35)."""
    up = pl.col("attrs").str.json_path_match("$.uptime")
    rows = (lf.filter(pl.col("source") == "kernel", pl.col("ts").is_not_null(), UPTIME.fill_null(False))
            .select("_row", *STREAM, "file_id", up.alias("_up")))
    shared = (rows.group_by(*STREAM, "_up").agg(pl.col("file_id").n_unique().alias("_n"))
              .filter(pl.col("_n") > 1).drop("_n"))
    return rows.join(shared, on=[*STREAM, "_up"], how="semi", nulls_equal=True).select("_row")


def hashed(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` with its rows' stream (``_s``) and input (``_f``) as hashes: what :func:`near_another_input` reads."""
    return lf.with_columns(_s=pl.struct(*STREAM).hash(), _f=pl.col("file_id").hash())


def clusters(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Rows (``_row`` and their ``file_id``) that may have a copy in another input, with their cluster
    ``_c``, whether their route is trusted (``_tr``) and whether they carry a time (``_t``) and an uptime
    stamp (``_u``). Only rows near a row of another input of their source and node are
    clustered (:func:`near_another_input`), rows whose uptime stamp another input holds (:func:`sharing_a_stamp`),
    and rows without a time that carry a kernel uptime stamp."""
    up = pl.col("attrs").str.json_path_match("$.uptime")
    close = pl.concat([near_another_input(lf).select("_row"), sharing_a_stamp(lf)]).unique("_row")
    timed = lf.join(close, on="_row", how="semi")
    untimed = lf.filter(pl.col("ts").is_null() & UPTIME)
    text = pl.col("message")
    candidates = pl.concat([timed, untimed]).select("_row", "file_id", "ts", *KEY[:-1], text.hash(0).alias("_m0"),
                                                    text.hash(1).alias("_m1"), up.alias("_up"), trusted().alias("_tr"))
    several = (candidates.group_by(CLUSTERED).agg(pl.col("file_id").n_unique().alias("_inputs"))
               .filter(pl.col("_inputs") > 1))
    rows = candidates.join(several.select(CLUSTERED), on=list(CLUSTERED), how="semi", nulls_equal=True)
    # copies that share an uptime stamp are placed at the earliest of their boot's times, so they chain: its
    # trusted rows' earliest where it has any (a relayed line a user dated back must not move where they lie)
    rows = rows.sort([*CLUSTERED, "_up", "ts"], nulls_last=True).with_columns(_boot=_boot())
    boot = [*CLUSTERED, "_up", "_boot"]
    earliest = pl.coalesce(pl.col("ts").filter("_tr").min().over(boot), pl.col("ts").min().over(boot))
    at = pl.when(pl.col("_up").is_not_null()).then(earliest).otherwise("ts")
    rows = rows.with_columns(at.alias("_at")).sort([*CLUSTERED, "_at", "_up"], nulls_last=True)
    same = pl.all_horizontal([pl.col(k).eq_missing(pl.col(k).shift(1)) for k in CLUSTERED])
    near = ((pl.col("_at") - pl.col("_at").shift(1)) <= COPY_WINDOW).fill_null(False) \
        | ((pl.col("_up") == pl.col("_up").shift(1)) & pl.col("_at").eq_missing(pl.col("_at").shift(1))).fill_null(False)
    return rows.select("_row", "file_id", (~(same & near)).cum_sum().alias("_c"), "_tr",
                       pl.col("ts").is_not_null().alias("_t"), pl.col("_up").is_not_null().alias("_u"), "_at", "_up")


def _boot() -> pl.Expr:
    """Which boot each row of one record key and uptime stamp is of (rows sorted by key, stamp and time).

    A node that reboots prints its first lines at the same stamps again; one record's copies lie within
    a clock's drift of each other (:data:`BOOT_APART_S`, :data:`DRIFT`), two boots' lines a whole boot
    apart. Boots are told apart by the trusted rows alone (the kernel's own logs: a chain of a user's
    forged lines a minute apart must not join two boots); a row of another route is of the trusted boot
    whose times lie within the drift of its own, else of none (a boot of its own route's rows); a row
    without a time (a dmesg read without its boot time) is of the latest trusted boot."""
    group = [*CLUSTERED, "_up"]
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
    null for the rows kept).

    The inputs of a cluster are ranked (see the module's docstring: a trusted route first, then the most
    rows, ...); a row copies a record where a row of an input ranked before its own lies within COPY_WINDOW of
    it, or shares its uptime stamp (a dmesg read without its boot time), and names the first such input. Not
    the whole cluster: a cluster is a chain, and rows at its two ends may be far apart (a user's lines every two
    seconds chained two trusted Xids ten minutes apart, in kern.log.1 and kern.log, into one cluster, and the
    second was taken for a copy of the first: attack-34)."""
    rows = clusters(lf)
    per_input = rows.group_by("_c", "file_id").agg(pl.col("_tr").any(), pl.len().alias("_n"),
                                                   pl.col("_t").sum().alias("_nt"), pl.col("_u").sum().alias("_nu"))
    order = ["_c", "_tr", "_n", "_nt", "_nu", "file_id"]
    ranked = (per_input.sort(order, descending=[False, True, True, True, True, False])
              .select("_c", "file_id", pl.int_range(pl.len()).over("_c").alias("_rank")))
    rows = rows.join(ranked, on=["_c", "file_id"]).sort("_c", "_at", "_rank", nulls_last=True)
    at, rank, up = pl.col("_at").dt.epoch("us"), pl.col("_rank"), pl.col("_up")
    # the first-ranked input with a row within the window (its rows sorted by time): any row for a row without
    # an uptime stamp; for one with a stamp, a row without one or with the same (two stamps are two records)
    window = f"{int(COPY_WINDOW.total_seconds() * 1e6) + 1}i"
    near = [pl.min_horizontal(r.rolling_min_by(at, window_size=window).over("_c"),
                              r.reverse().rolling_min_by(-at.reverse(), window_size=window).reverse().over("_c"))
            for r in (rank, pl.when(up.is_null()).then(rank))]
    same = rank.min().over("_c", "_up", "_at")  # one stamp, one place (its boot's earliest time, see clusters)
    timed = rows.filter(pl.col("_at").is_not_null()).with_columns(
        pl.when(up.is_null()).then(near[0]).otherwise(pl.min_horizontal(near[1], same)).alias("_first"))
    stamped = (rows.filter(pl.col("_at").is_null())
               .with_columns(pl.when(up.is_not_null()).then(rank.min().over("_c", "_up")).alias("_first")))
    first = pl.concat([timed, stamped]).join(ranked.rename({"_rank": "_first", "file_id": "_of"}), on=["_c", "_first"],
                                             how="left")
    return first.select("_row", "_c", pl.when(pl.col("_first") < rank).then(pl.col("_of")).alias("copy_of"))


def settled(rows: pl.LazyFrame, found: pl.LazyFrame) -> pl.LazyFrame:
    """``rows`` (``_row``, their ``copy_of`` as marked, and ``_mine``: the rows whose marks are decided
    again) with ``_want``, their marks once ``found`` (:func:`marks` of those that may be copies, with
    their ``_mine``) is taken where it counts: the rows of a cluster with a ``_mine`` row take the found
    mark, the other ``_mine`` rows are kept, the rest keep theirs (a row near a changed window keeps a
    cluster that nothing changed)."""
    hit = found.filter(pl.col("_mine")).select("_c").unique()
    taken = found.join(hit, on="_c", how="semi").select("_row", pl.col("copy_of").alias("_found"), _taken=pl.lit(True))
    want = (pl.when(pl.col("_taken").fill_null(False)).then(pl.col("_found"))
            .when(pl.col("_mine")).then(pl.lit(None, pl.String)).otherwise(pl.col("copy_of")))
    return (rows.join(taken, on="_row", how="left", maintain_order="left").with_columns(want.alias("_want"))
            .drop("_found", "_taken"))


def candidates(lf: pl.LazyFrame) -> pl.DataFrame:
    """The rows (``_row``) of ``lf`` that may have a copy: near a row of another input of their stream
    (:func:`near_another_input`), and the rows without a time that carry kernel uptime stamps.

    Their window functions hold what they read (deciding over a 2,560-node fleet's days at once held
    20 GB), so more than SOUGHT_ROWS dated rows are first written out, narrow and hashed, in parts (two
    passes over ``lf`` and a split of what they wrote, about 10 bytes a row, twice that at once, in a
    temporary folder) and sought one part at a time: a part holds some streams' ten minutes (BLOCK_US;
    one job's output is one stream, and may be millions of lines), each with the rows a bucket away in
    the minutes either side, which find its rows near an edge a copy there. (A pass that marks the store
    knows its files' times and seeks some hours at a time, reading only their row groups:
    :func:`observe.store.copy_marks.mark`, 0.78 GB and 7.1 s against 1.16 GB and 7.9 s this way over a
    53-million-row store.)"""
    untimed = pl.col("ts").is_null() & UPTIME.fill_null(False)
    n, stamped = (lf.select(pl.col("ts").is_not_null().sum().alias("n"), untimed.sum().alias("stamped"))
                  .collect(engine="streaming").row(0))
    narrow = hashed(lf.filter(pl.col("ts").is_not_null()).select("_row", "ts", *STREAM, "file_id")).select(
        "_row", "ts", "_s", "_f")
    found = [sharing_a_stamp(lf).collect(engine="streaming"),
             *([lf.filter(untimed).select("_row").collect(engine="streaming")] if stamped else [])]
    parts = -(-n // SOUGHT_ROWS)
    if parts <= 1:
        return pl.concat([near_another_input(narrow).select("_row").collect(engine="streaming"), *found])
    at = pl.col("ts").dt.epoch("us")
    block, into = at // BLOCK_US, at % BLOCK_US
    edge = pl.when(into < BUCKET_US).then(block - 1).when(into >= BLOCK_US - BUCKET_US).then(block + 1)
    part = (pl.struct("_s", "_b").hash() % parts).cast(pl.UInt32).alias("_p")
    try:
        with tempfile.TemporaryDirectory(prefix="observe-copies-") as folder:
            own, edges, split = Path(folder) / "rows.arrow", Path(folder) / "edges.arrow", Path(folder) / "parts"
            narrow.with_columns(_b=block, _own=pl.lit(True)).with_columns(part).sink_ipc(own, compression="lz4")
            (narrow.with_columns(_b=edge, _own=pl.lit(False)).filter(pl.col("_b").is_not_null()).with_columns(part)
             .sink_ipc(edges, compression="lz4"))  # a row near its block's edge, in the block beside too
            _split([own, edges], split)
            for written in (own, edges):  # split: no longer needed beside their parts
                written.unlink()
            found += [near_another_input(pl.scan_ipc(sorted(part.iterdir()))).filter("_own").select("_row")
                      .collect(engine="streaming") for part in split.iterdir()]
    except OSError as exc:  # a full or unwritable $TMPDIR (a user can fill /tmp): the machine's state, not a bug
        raise SpillFailed(f"deciding which of {n:,} rows are copies writes about {n * 20 // 1_000_000 + 1:,} MB "
                          f"to {tempfile.gettempdir()} (TMPDIR) and failed: {exc}") from None
    return pl.concat(found)


def _split(rows: list[Path], folder: Path) -> None:
    """The rows of the Arrow files ``rows`` written again in ``folder``, a folder for each value of ``_p``,
    some rows at a time (pyarrow's dataset writer: polars' partitioned sink is unstable)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    some = ds.dataset([str(r) for r in rows], format="ipc").scanner(
        batch_size=SPLIT_GROUP_ROWS, batch_readahead=1, fragment_readahead=1, use_threads=False)
    ds.write_dataset(some, folder, format="ipc", partitioning=ds.partitioning(pa.schema([("_p", pa.uint32())])),
                     file_options=ds.IpcFileFormat().make_write_options(compression="lz4"),
                     max_rows_per_group=SPLIT_GROUP_ROWS, min_rows_per_group=SPLIT_GROUP_ROWS // 2, use_threads=False)


def marks_by_stream(rows: pl.DataFrame) -> pl.DataFrame:
    """:func:`marks` of ``rows`` (those that may be copies, their key's columns read), some streams at a time:
    a cluster's rows are of one stream, and clustering sorts and groups by the messages (3 million rows,
    a 2,560-node month's, held 2 GB more at once). Clusters are numbered apart across the parts."""
    parts = -(-rows.height // CLUSTERED_ROWS)
    if parts <= 1:
        return marks(rows.lazy()).collect()
    part = pl.struct(*STREAM).hash() % parts
    apart = pl.col("_c").cast(pl.Int64)  # each part numbers its clusters from 1
    return pl.concat([marks(rows.lazy().filter(part == i)).collect().with_columns(apart + (i << 40)) for i in range(parts)])


def one_per_record(lf: pl.LazyFrame, mine: pl.Expr | None = None) -> pl.LazyFrame:
    """``lf`` (events) with the copies of each record read through other inputs left out. With ``mine``,
    only those rows (and the rows in a cluster with one) are decided; the others are as their ``copy_of``
    marks them (:func:`settled`: the store's marks, current outside ``mine``).

    ``lf`` is read a few times (the rows that may be copies first, then theirs alone, then all) rather
    than held: memory is what may be copies, not what is read. So it must give its rows in one order each
    time (a scan of files, a frame in memory, filters of those: no join or group-by without an order)."""
    lf = lf.with_row_index("_row")
    some = candidates(lf).get_column("_row").implode()
    full = lf.filter(pl.col("_row").is_in(some)).select("_row", "ts", *KEY, "attrs", "route", "file_id",
                                                        *(() if mine is None else (mine.alias("_mine"),)))
    full = full.collect(engine="streaming")
    found = marks_by_stream(full).lazy()
    if mine is None:
        dropped = found.filter(pl.col("copy_of").is_not_null()).select("_row").collect()
        return lf.join(dropped.lazy(), on="_row", how="anti", maintain_order="left").drop("_row")
    found = found.join(full.lazy().select("_row", "_mine"), on="_row").collect().lazy()
    return (settled(lf.with_columns(mine.alias("_mine")), found).filter(pl.col("_want").is_null())
            .drop("_row", "_mine", "_want"))
