"""Partitions of a UTC month: readers skip within one by files' time ranges, stores written before
keep their day partitions beside the months, retention cuts the files that hold both sides of its
cutoff, and copy marks read by time, not by partition."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from observe.schema import conform
from observe.store import Store
from observe.store.layout import period

T0 = datetime(2026, 10, 25, tzinfo=timezone.utc)


def _rows(times: list[datetime], file_id: str, source: str = "syslog") -> pl.DataFrame:
    return conform(pl.DataFrame({
        "ts": pl.Series(times, dtype=pl.Datetime("us", "UTC")), "raw": [f"{file_id} line {i}" for i in range(len(times))],
        "message": [f"{file_id} line {i}" for i in range(len(times))], "offset": list(range(len(times))),
        "node": "gpu001", "source": source, "kind": "log", "file_id": file_id}))


def _hours(start: datetime, n: int, step_h: int = 7) -> list[datetime]:
    return [start + timedelta(hours=step_h * i) for i in range(n)]


def _mixed(tmp_path: Path) -> tuple[Store, pl.DataFrame]:
    """Three weeks across October's end, a month partition each, and a day partition of mid-November as a
    store written before months has (the same table)."""
    store = Store(tmp_path / "store")
    spread = _rows(_hours(T0, 72), "a")  # Oct 25 .. Nov 15
    store.write(spread)
    old = _rows(_hours(datetime(2026, 11, 16, 1, tzinfo=timezone.utc), 3), "b")  # one day, 01:00..15:00
    store.commit(store.durable([store.write_partition("syslog", "2026-11-16", old, durable=False)]))
    return store, pl.concat([spread, old])


def _count(store: Store, since: datetime | None = None, until: datetime | None = None) -> int:
    return store.scan(since=since, until=until).select(pl.len()).collect().item()


def _duckdb(store: Store, where: str = "true") -> int:
    events = DeltaTable(str(store.events)).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    return duckdb.sql(f"SELECT count(*) FROM events WHERE {where}").fetchall()[0][0]


def test_a_month_is_a_partition_and_days_written_before_are_read_beside_it(tmp_path: Path) -> None:
    store, rows = _mixed(tmp_path)
    assert sorted(p.date for p in store.partitions()) == ["2026-10", "2026-11", "2026-11-16"]
    assert period("2026-11") == (period("2026-11-01")[0], period("2026-12-01")[0]) and period("2026-13") is None
    windows = [(None, None), (T0 + timedelta(days=3), None), (None, datetime(2026, 11, 1, tzinfo=timezone.utc)),
               (datetime(2026, 10, 31, 22, tzinfo=timezone.utc), datetime(2026, 11, 1, 5, tzinfo=timezone.utc)),
               (datetime(2026, 11, 16, 2, tzinfo=timezone.utc), datetime(2026, 11, 16, 9, tzinfo=timezone.utc)),
               (datetime(2026, 11, 16, 5, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))), None)]
    for since, until in windows:
        ts, utc = rows.get_column("ts"), timezone.utc
        want = rows.filter((ts >= since.astimezone(utc)) if since else pl.lit(True),
                           (ts < until.astimezone(utc)) if until else pl.lit(True)).height
        assert _count(store, since, until) == want, (since, until)
    # a November window reads the month's file and the day's; a day of October's end, October's file alone
    nov = datetime(2026, 11, 16, 2, tzinfo=timezone.utc)
    assert {f.parent.name for f in store.files(since=nov, until=nov + timedelta(hours=1))} == {"date=2026-11-16"}
    assert {f.parent.name for f in store.files(since=T0, until=T0 + timedelta(days=1))} == {"date=2026-10"}
    store.compactor.compact_many(store.partitions(), min_segments=1)
    assert _count(store) == rows.height == _duckdb(store, "copy_of IS NULL")


def test_retention_cuts_the_files_that_hold_both_sides_of_its_cutoff(tmp_path: Path) -> None:
    store, rows = _mixed(tmp_path)
    version, _ = store.table.snapshot()
    cutoff = datetime(2026, 11, 5, tzinfo=timezone.utc)
    assert [p.date for p in store.upkeep.expire("2026-11-05", dry_run=True)] == ["2026-10", "2026-11"]
    assert _count(store) == rows.height  # a dry run changes nothing
    assert [p.date for p in store.upkeep.expire("2026-11-05")] == ["2026-10", "2026-11"]
    store = Store(store.root)
    kept = rows.filter(pl.col("ts") >= cutoff).sort("ts")
    assert store.scan().select("ts", "raw").collect().sort("ts").equals(kept.select("ts", "raw"))
    assert _duckdb(store) == kept.height and _duckdb(store, f"ts < TIMESTAMPTZ '{cutoff.isoformat()}'") == 0
    assert sorted(p.date for p in store.partitions()) == ["2026-11", "2026-11-16"]
    assert store.table.added(version, store.table.snapshot()[0]) == {}  # the cut file is no new data (the exporter)
    first = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=min(store.spans().values())[0])
    assert first == kept.get_column("ts").min() > cutoff  # the cut file's range is its own rows'

    assert [p.date for p in store.upkeep.expire("2026-11-17")] == ["2026-11", "2026-11-16"]  # the old day goes whole
    assert _count(Store(store.root)) == 0


@pytest.mark.parametrize("new_times, read_also", [
    ([datetime(2026, 11, 20, 10, tzinfo=timezone.utc), datetime(2026, 11, 20, 11, tzinfo=timezone.utc)], {"near"}),
    # a user's input with a line on the 1st and one on the 30th: two short windows, not the month between
    ([datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 30, 23, tzinfo=timezone.utc)], set()),
    # lines without a time and no kernel uptime stamp: no dated row of the source can be their copy
    ([None, None], set()),
])
def test_copy_marks_read_the_rows_near_what_changed_not_the_month(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  new_times: list, read_also: set[str]) -> None:
    """A fleet's ingest every few minutes must not read its month each time (attack-30 r2): a pass reads the
    source's files within a day of the new rows, and its files without a time."""
    from observe.store import copy_marks

    store = Store(tmp_path / "store")
    far = _rows(_hours(datetime(2026, 11, 8, tzinfo=timezone.utc), 10, 1), "far", "kernel")
    near = _rows(_hours(datetime(2026, 11, 19, 12, tzinfo=timezone.utc), 10, 1), "near", "kernel")
    other = _rows(_hours(datetime(2026, 11, 20, 10, tzinfo=timezone.utc), 3, 1), "other", "syslog")
    for df in (far, near, other):
        store.write(df)
    with store.lock("compact"):
        copy_marks.bring_up_to_date(store)
    read: list[Path] = []
    scan_files = Store.scan_files

    def recording(self: Store, files: list[Path], paths_as: str | None = None) -> pl.LazyFrame:
        read.extend(files)
        return scan_files(self, files, paths_as)

    monkeypatch.setattr(Store, "scan_files", recording)
    store.write(_rows(new_times, "new", "kernel"))
    with store.lock("compact"):
        copy_marks.bring_up_to_date(store)
    assert {pl.read_parquet(f).item(0, "file_id") for f in read} == {"new"} | read_also


def test_a_growing_months_compactions_rewrite_each_row_a_few_times(tmp_path: Path) -> None:
    """Every compaction of a few new rows merged the month's last file whole (attack-30 r5: a user's line in
    an old month rewrote half a file); merged as a binary counter carries, a row is rewritten about log2 times."""
    store = Store(tmp_path / "store")
    store.write(_rows(_hours(datetime(2026, 11, 1, tzinfo=timezone.utc), 1000, 0), "base"))
    [part] = store.partitions()
    assert store.compactor.compact(part, file_rows=100_000) == (1, 1000)
    written = 0
    for i in range(32):
        store.write(_rows(_hours(datetime(2026, 11, 2, tzinfo=timezone.utc) + timedelta(hours=i), 10, 0), f"new{i}"))
        written += store.compactor.compact(part, file_rows=100_000)[1]
    assert written < 32 * 10 * 7 and _count(store) == 1000 + 32 * 10  # merging the last file whole: 32 * 1,000 and more
    assert len(store.segments(part.path)) <= 7  # the counter's bits: about log2 of the new runs


def test_what_collectors_ship_from_before_the_retention_is_not_stored_again(tmp_path: Path) -> None:
    """A collector knows no cutoff: the central commit leaves out what retention dropped, as ingest does
    (attack-30 r3: a job output's line per month since 1990 made a partition each, bounded by nothing)."""
    store = Store(tmp_path / "store")
    store.write(_rows([datetime(2026, 11, 20, tzinfo=timezone.utc)], "there"))
    assert store.upkeep.expire("2026-11-05") == []
    old = _rows(_hours(datetime(1990, 1, 1, tzinfo=timezone.utc), 3, 24 * 40), "old")  # three months of 1990
    both = _rows(_hours(datetime(2026, 11, 1, tzinfo=timezone.utc), 10, 24), "both")  # Nov 1 .. Nov 10
    new = _rows([datetime(2026, 11, 21, tzinfo=timezone.utc)], "new")
    for df in (old, both, new):
        store.write(df, deliver=True)
    assert store.incoming.adopt() == 2 and not store.incoming.shipped()
    kept = store.scan().select("ts", "file_id").collect()
    assert kept.get_column("ts").min() >= datetime(2026, 11, 5, tzinfo=timezone.utc)
    assert sorted(kept.get_column("file_id").value_counts().rows()) == [("both", 6), ("new", 1), ("there", 1)]
    assert sorted(p.date for p in store.partitions()) == ["2026-11"]
