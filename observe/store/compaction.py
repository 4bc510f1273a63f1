"""Compaction's pieces: how long replaced segments stay, which files of a partition a compaction
merges, and how they are cut into files of bounded rows and memory."""
from __future__ import annotations

import polars as pl


COMPACT_FILE_ROWS = 1_000_000  # rows per compacted file at most


COMPACT_SLICE_BYTES = 32 << 20  # and at most this much uncompressed data: one step's memory (peak ~10x)


COMPACT_GRACE_S = 600.0  # replaced segments outlive a compaction this long, for queries already planned


def rows_in(footers: list, nbytes: int) -> int:
    """How many rows of the segments whose Parquet metadata are ``footers`` hold about ``nbytes``
    uncompressed (at least one: lines of a megabyte make slices of a few dozen, not of 10 GB: attack-27 r7)."""
    rows = size = 0
    for md in footers:
        rows += md.num_rows
        size += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    return max(1, int(nbytes * rows / size)) if size else nbytes


def settled(rows: int, file_rows: int) -> bool:
    """Whether a compacted file of ``rows`` is left as it is: at least half a file. Each compaction
    merges only a partition's new segments and smaller files (:func:`tiered`), so a partition that keeps
    growing (this month's, the undated one) is not rewritten whole each time."""
    return rows >= file_rows // 2


def tiered(fresh: int, small: list[int]) -> list[int]:
    """Which of a partition's small compacted files (``small``: their rows) a compaction of ``fresh``
    new rows merges, by index: in order of size, each no larger than what is merged so far (with no new
    rows, the smallest starts). As a binary counter carries, a row is rewritten about log2(half a file
    / new rows per run) times (9 times at 1,000 new rows a run) and a partition holds about as many
    small files; merging every small file each time rewrote a month's last file, up to half a file, for
    every new line in it (attack-30 r5)."""
    order = sorted(range(len(small)), key=lambda i: small[i])
    chosen, carry = [], fresh
    for i in order:
        if (chosen or fresh) and small[i] > carry:
            break
        chosen.append(i)
        carry += small[i]
    return chosen


def batches(rows: list[int], together: list[bool], batch_rows: int) -> list[list[int]]:
    """Files (by index, ``rows`` each) grouped into batches of about ``batch_rows`` rows, consecutive
    in their order, so that each file is read once; the files marked ``together`` (they share records
    to de-duplicate) make the first batch, however large."""
    out: list[list[int]] = []
    size = 0
    for i, n in enumerate(rows):
        if together[i]:
            continue
        if not out or (size and size + n > batch_rows):  # a file larger than a batch makes one alone
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    first = [i for i, t in enumerate(together) if t]
    return [first, *out] if first else out


def file_slices(scan: pl.LazyFrame, file_rows: int) -> list[pl.Expr]:
    """Filters cutting ``scan``'s rows into consecutive time slices of about ``file_rows`` rows
    (more only when one second holds more), from a per-second count of the ``ts`` column alone;
    rows without a time go with the first slice. An undated partition is cut by input instead."""
    per_second = (scan.group_by(pl.col("ts").dt.truncate("1s").alias("key")).len()
                  .sort("key", nulls_last=False).collect(engine="streaming"))
    total = int(per_second.get_column("len").sum())
    if total <= file_rows:
        return [pl.lit(True)]
    if per_second.get_column("key").null_count() == per_second.height:
        per_input = scan.group_by(pl.col("file_id").alias("key")).len().sort("key").collect(engine="streaming")
        return _ranges(pl.col("file_id"), _cuts(per_input, file_rows), with_nulls=False)
    return _ranges(pl.col("ts"), _cuts(per_second.drop_nulls("key"), file_rows), with_nulls=True)


def _cuts(counts: pl.DataFrame, file_rows: int) -> list:
    """The keys that start a new slice, from (key, len) rows sorted by key."""
    slice_no = ((pl.col("len").cum_sum() - pl.col("len")) // file_rows).alias("slice")
    starts = counts.with_columns(slice_no).group_by("slice", maintain_order=True).agg(pl.col("key").first())
    return starts.get_column("key").to_list()[1:]


def _ranges(key: pl.Expr, cuts: list, with_nulls: bool) -> list[pl.Expr]:
    """``[-inf, c1), [c1, c2), ..., [cn, +inf)`` over ``key`` as filters (nulls in the first)."""
    bounds = [None, *cuts, None]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        where = pl.lit(True) if lo is None else key >= lo
        if hi is not None:
            where = where & (key < hi)
        out.append(where | key.is_null() if lo is None and with_nulls else where)
    return out
