"""Copies visible outside observe: every row's ``copy_of`` agrees with what observe reads once, so that
DuckDB and polars over the Delta table count with ``WHERE copy_of IS NULL`` exactly what observe counts,
after each ingest (a later input can turn older rows into copies), after compaction (which drops
duplicates), across midnight, and on a table an older observe wrote without the column."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from observe import ingest as ingest_module
from observe.cli import app
from observe.store import Store
from observe.store.copy_marks import MARKED, stale
from observe.store.table import LOG_DIR, table_schema

runner = CliRunner()
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
LINK = "mlx5_core 0000:1a:00.0 mlx5_0: Port: 1 Link DOWN"


def observe_count(store: Path) -> int:
    """What observe counts: each record once, every source, with or without a time."""
    result = runner.invoke(app, ["query", "--store", str(store), "--count-by", "source", "--format", "json"])
    assert result.exit_code == 0, result.output
    return sum(json.loads(line)["events"] for line in result.stdout.splitlines())


def outside_counts(store: Path) -> dict[str, int]:
    """What DuckDB (over delta-rs's dataset) and polars' scan_delta count with the copy filter, and all rows."""
    table = str(store / "events")
    events = DeltaTable(table).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    return {"duckdb": duckdb.sql("SELECT count(*) FROM events WHERE copy_of IS NULL").fetchall()[0][0],
            "polars": pl.scan_delta(table).filter(pl.col("copy_of").is_null()).select(pl.len()).collect().item(),
            "rows": DeltaTable(table).count()}


def agree(store: Path) -> dict[str, int]:
    n, seen = observe_count(store), outside_counts(store)
    assert (seen["duckdb"], seen["polars"]) == (n, n), (n, seen)
    return seen


def ingest(store: Path, *args: str) -> None:
    result = runner.invoke(app, ["ingest", *args, "--store", str(store)])
    assert result.exit_code == 0, result.output


def stamp(t: datetime) -> str:
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


def kernel_logs(logs: Path, boot: datetime, records: list[tuple[float, str]]) -> None:
    """One node's kernel records in dmesg (uptime stamps) and, as rsyslog relays them, in its syslog."""
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "dmesg").write_text("".join(f"[{up:12.6f}] {text}\n" for up, text in records))
    (logs / "syslog").write_text("".join(f"{stamp(boot + timedelta(seconds=up))} gpu001 kernel: [{up:12.6f}] {text}\n"
                                         for up, text in records))


def ingest_dmesg(store: Path, logs: Path, boot: datetime) -> None:
    """``kernel_logs``' dmesg of gpu001, its stamps dated by ``boot``."""
    ingest(store, str(logs / "dmesg"), "--source", "kernel", "--node", "gpu001", "--boot-time", boot.isoformat())


def ingest_unmarked(store: Path, monkeypatch, *args: str) -> None:
    """An ingest that finds a compaction holding the store: its rows stored, their marks left to the next pass."""
    monkeypatch.setattr(ingest_module, "MARK_WAIT_S", 0.0)
    with Store(store).lock("compact"):
        ingest(store, *args)


def test_a_later_trusted_input_turns_the_stored_rows_into_copies(tmp_path: Path) -> None:
    """The syslog comes first and its rows are the records; dmesg (the kernel's own log) comes next and
    wins: the syslog's rows, stored by the earlier run, now name dmesg's input."""
    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    kernel_logs(tmp_path / "logs", boot, [(9000.000001, XID), (9000.4, XID), (9100.5, LINK)])
    store = tmp_path / "store"
    ingest(store, str(tmp_path / "logs" / "syslog"))
    assert agree(store) == {"duckdb": 3, "polars": 3, "rows": 3}
    ingest_dmesg(store, tmp_path / "logs", boot)
    assert agree(store) == {"duckdb": 3, "polars": 3, "rows": 6}
    rows = pl.scan_delta(str(store / "events")).select("file_id", "copy_of", "program").collect()
    dmesg = rows.filter(pl.col("copy_of").is_null()).get_column("file_id").unique().to_list()
    assert len(dmesg) == 1 and rows.filter(pl.col("copy_of").is_not_null()).get_column("copy_of").unique().to_list() == dmesg
    result = runner.invoke(app, ["compact", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert agree(store) == {"duckdb": 3, "polars": 3, "rows": 6}


MIDNIGHT = datetime(2026, 11, 20, tzinfo=timezone.utc)


def across_midnight(tmp_path: Path, uptime: float, syslog_at: datetime, first: str) -> Path:
    """One Xid, in dmesg at ``uptime`` (booted 10,000 s before midnight) and in rsyslog's copy stamped
    ``syslog_at``; ``first`` is ingested first."""
    boot = MIDNIGHT - timedelta(seconds=10_000)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "syslog").write_text(f"{stamp(syslog_at)} gpu001 kernel: {XID}\n")
    (logs / "dmesg").write_text(f"[{uptime:12.6f}] {XID}\n")
    store = tmp_path / "store"
    runs = {"syslog": [str(logs / "syslog"), "--year", "2026"],
            "dmesg": [str(logs / "dmesg"), "--source", "kernel", "--node", "gpu001", "--boot-time", boot.isoformat()]}
    for name in sorted(runs, key=lambda n: n != first):
        ingest(store, *runs[name])
    return store


def test_a_copy_pair_across_midnight_is_marked_when_only_the_later_day_is_ingested(tmp_path: Path) -> None:
    """A record the syslog stamped 23:59:59 and dmesg dates 00:00:00.6 the next day: the second run adds
    to the later day only, yet the first day's syslog row becomes the copy."""
    store = across_midnight(tmp_path, 10_000.6, MIDNIGHT - timedelta(seconds=1), "syslog")
    rows = pl.scan_delta(str(store / "events")).select("ts", "file_id", "copy_of").collect().sort("ts")
    assert rows.get_column("file_id").n_unique() == 2 and rows.get_column("ts").dt.day().to_list() == [19, 20]
    assert rows.get_column("copy_of").is_null().to_list() == [False, True]
    assert agree(store) == {"duckdb": 1, "polars": 1, "rows": 2}


def test_copies_are_sought_some_hours_at_a_time_and_found_across_their_edges(tmp_path: Path, monkeypatch) -> None:
    """A pass seeks copies in a bounded time range at a time (a 2,560-node fleet's month, 265 million rows
    grouped at once, held 19 GB), each read with the seconds either side its buckets reach: the pair either
    side of midnight, sought an hour at a time, is still one record."""
    from observe.store import copy_marks

    monkeypatch.setattr(copy_marks, "CHUNK_ROWS", 0)  # every hour apart
    sought = []
    near = copy_marks._near
    monkeypatch.setattr(copy_marks, "_near", lambda narrow, chunks: sought.append(chunks) or near(narrow, chunks))
    store = across_midnight(tmp_path, 10_000.6, MIDNIGHT - timedelta(seconds=1), "syslog")
    hour = 3_600_000_000
    at_midnight = int(MIDNIGHT.timestamp()) * 1_000_000
    assert sought[-1] == [(at_midnight - hour, at_midnight), (at_midnight, at_midnight + hour)]
    rows = pl.scan_delta(str(store / "events")).select("ts", "copy_of").collect().sort("ts")
    assert rows.get_column("copy_of").is_null().to_list() == [False, True]
    assert agree(store) == {"duckdb": 1, "polars": 1, "rows": 2}


def test_the_demos_store_counts_the_same_in_every_engine_after_ingest_and_compaction(tmp_path: Path) -> None:
    """The demo keeps every node's kernel lines in dmesg and in its syslog."""
    result = runner.invoke(app, ["demo", "--dir", str(tmp_path), "--nodes", "16", "--hours", "24",
                                 "--end", "2026-11-20T00:00"])
    assert result.exit_code == 0, result.output
    store = tmp_path / "store"
    seen = agree(store)
    assert seen["rows"] - seen["duckdb"] >= 100  # there are copies to leave out
    result = runner.invoke(app, ["compact", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert agree(store) == seen


def test_a_compaction_holding_the_store_marks_what_an_ingest_could_not(tmp_path: Path, monkeypatch) -> None:
    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    kernel_logs(tmp_path / "logs", boot, [(9000.0, XID), (9100.5, LINK)])
    store = tmp_path / "store"
    ingest_dmesg(store, tmp_path / "logs", boot)
    monkeypatch.setattr(ingest_module, "MARK_WAIT_S", 0.0)
    with Store(store).lock("compact"):
        result = runner.invoke(app, ["ingest", str(tmp_path / "logs" / "syslog"), "--store", str(store)])
    assert result.exit_code == 0 and "marks them when it ends" in result.output, result.output
    assert outside_counts(store)["duckdb"] == 4  # the syslog's copies are not marked yet
    result = runner.invoke(app, ["compact", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert agree(store) == {"duckdb": 2, "polars": 2, "rows": 4}


def test_a_table_an_older_observe_wrote_gains_the_column_and_its_marks(tmp_path: Path) -> None:
    """Files and a log without ``copy_of`` (as observe wrote them before it): the next ingest adds the
    column to the table's schema, keeps its properties, and marks the old rows too."""
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    kernel_logs(tmp_path / "logs", boot, [(9000.0, XID), (9000.5, XID), (9100.5, LINK)])
    store = tmp_path / "store"
    ingest(store, str(tmp_path / "logs" / "syslog"))
    ingest_dmesg(store, tmp_path / "logs", boot)
    events = store / "events"
    adds = pl.DataFrame(DeltaTable(str(events)).get_add_actions(flatten=True)).to_dicts()
    for add in adds:  # the files and the table as an older observe left them
        path = events / add["path"]
        pq.write_table(pq.read_table(path).drop_columns(["copy_of"]), path)
    for f in (events / LOG_DIR).iterdir():
        f.unlink()
    (events / LOG_DIR).rmdir()
    (store / MARKED).unlink()
    old = table_schema()
    old = old.remove(old.get_field_index("copy_of"))
    create_table_with_add_actions(
        str(events), Schema.from_arrow(old),
        [AddAction(a["path"], (events / a["path"]).stat().st_size, {"source": a["partition.source"],
                   "date": a["partition.date"]}, a["modification_time"], True,
                   json.dumps({"numRecords": a["num_records"]})) for a in adds],
        mode="ignore", partition_by=["source", "date"],
        configuration={"delta.deletedFileRetentionDuration": "interval 600 seconds"})
    assert "copy_of" not in DeltaTable(str(events)).schema().to_arrow().names
    kernel_logs(tmp_path / "more", boot, [(9500.0, LINK)])
    ingest(store, str(tmp_path / "more" / "syslog"))
    table = DeltaTable(str(events))
    assert "copy_of" in table.schema().to_arrow().names
    assert table.metadata().configuration == {"delta.deletedFileRetentionDuration": "interval 600 seconds",
                                              "delta.dataSkippingStatsColumns": "ts"}  # commits' statistics: ts alone
    assert agree(store) == {"duckdb": 4, "polars": 4, "rows": 7}


def test_after_compaction_drops_a_duplicate_the_marks_keep_the_row_observe_keeps(tmp_path: Path) -> None:
    """Input ``z`` held a record twice (the same line at the same offset, stored twice) and won over
    ``a``'s copy by its count; compaction drops the duplicate, the inputs tie, and ``a`` (the smaller
    id) is what observe keeps: the marks follow."""
    from observe.copies import one_per_record
    from observe.schema import conform

    at = datetime(2026, 11, 20, 10, tzinfo=timezone.utc)
    row = {"ts": at, "node": "gpu001", "source": "kernel", "message": XID, "raw": f"kernel: {XID}", "route": "syslog"}
    store = Store(tmp_path / "store")
    store.write(conform(pl.DataFrame([{**row, "file_id": "z", "offset": 0}])))
    store.write(conform(pl.DataFrame([{**row, "file_id": "z", "offset": 0}, {**row, "file_id": "a", "offset": 7}])))
    store.compactor.mark_copies()
    kept = pl.scan_delta(str(store.events)).filter(pl.col("copy_of").is_null()).collect()
    assert kept.get_column("file_id").to_list() == ["z", "z"]
    store.compactor.compact_many(store.partitions(), min_segments=1)
    ours = one_per_record(store.scan()).collect().get_column("file_id").to_list()
    kept = pl.scan_delta(str(store.events)).filter(pl.col("copy_of").is_null()).collect()
    assert ours == ["a"] and kept.get_column("file_id").to_list() == ours


def midnight_pair(tmp_path: Path) -> Path:
    """The kernel's dmesg keeps an Xid at 23:59:59.5; rsyslog's copy of it is stamped 00:00:01 the next day."""
    store = across_midnight(tmp_path, 9_999.5, MIDNIGHT + timedelta(seconds=1), "dmesg")
    assert agree(store) == {"duckdb": 1, "polars": 1, "rows": 2}
    return store


def test_retention_that_drops_the_kept_row_makes_its_copy_the_record(tmp_path: Path) -> None:
    store = midnight_pair(tmp_path)
    assert Store(store).upkeep.expire(MIDNIGHT.strftime("%Y-%m-%d"))
    assert agree(store) == {"duckdb": 1, "polars": 1, "rows": 1}


def test_repair_that_sets_the_kept_rows_file_aside_makes_its_copy_the_record(tmp_path: Path) -> None:
    """A damaged dmesg segment: an ingest meanwhile stores its records and says why it could not mark; repair
    sets the segment aside and the syslog's copy is the record."""
    store = midnight_pair(tmp_path)
    [kept] = [f for f in (store / "events").glob("source=kernel/date=2026-11/*.parquet")
              if pl.read_parquet(f).get_column("ts").min() < MIDNIGHT]
    kept.write_bytes(kept.read_bytes()[:100])
    (tmp_path / "more").write_text(f"{stamp(MIDNIGHT + timedelta(seconds=60))} gpu001 kernel: {LINK}\n")
    result = runner.invoke(app, ["ingest", str(tmp_path / "more"), "--year", "2026", "--store", str(store)])
    assert result.exit_code == 0 and "not marked yet" in result.output and "Traceback" not in result.output, result.output
    result = runner.invoke(app, ["repair", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert agree(store) == {"duckdb": 2, "polars": 2, "rows": 2}


def test_a_pass_rewrites_a_bounded_number_of_rows_and_leaves_the_rest_due(tmp_path: Path, monkeypatch) -> None:
    """Three months' syslog rows, each month's file turned into copies by one later dmesg. An ingest rewrites at most a
    few times the rows it stored (here none: a user's few lines must not have root rewrite every user's files);
    what is left is due, a later ingest marks only what it added (reading what was due cost each one-line ingest 7
    s at 2,560 nodes), and each compaction's pass (at least one file) takes up to its budget (here one row: one
    file) until none is."""
    from observe.store import copy_marks

    boot = datetime(2026, 8, 17, tzinfo=timezone.utc)
    kernel_logs(tmp_path / "logs", boot, [(86_400.0 * 31 * month + 3600, XID) for month in range(3)])
    store = tmp_path / "store"
    ingest(store, str(tmp_path / "logs" / "syslog"), "--year", "2026")
    monkeypatch.setattr(copy_marks, "REWRITE_ROWS", 1)
    monkeypatch.setattr(ingest_module, "MARK_REWRITE_FACTOR", 0)
    ingest_dmesg(store, tmp_path / "logs", boot)
    due = lambda: json.loads((store / MARKED).read_text())["due"]  # noqa: E731
    assert len(due()) == 3 and outside_counts(store)["duckdb"] == 6
    asked = []
    mark = copy_marks.mark
    monkeypatch.setattr(copy_marks, "mark", lambda st, touched, *a: asked.append(touched) or mark(st, touched, *a))
    (tmp_path / "other").write_text(f"{stamp(boot)} gpu002 sshd[7]: Accepted publickey for root\n")
    left = {tuple(w) for w in due()}
    ingest(store, str(tmp_path / "other"), "--year", "2026")  # marks its own window, not the months left due
    assert len(asked) == 1 and asked[0] and not asked[0] & left and {tuple(w) for w in due()} == left
    s = Store(store)
    for left in (2, 1, 0):
        with s.lock("compact"):
            copy_marks.bring_up_to_date(s)
        assert len(due()) == left
    assert agree(store) == {"duckdb": 4, "polars": 4, "rows": 7}


def test_queries_read_current_marks_and_decide_again_otherwise(tmp_path: Path, monkeypatch) -> None:
    """With every mark current, `observe query` counts kept rows and never runs the read-time decision; once an
    ingest could not mark (a compaction held the store), it decides again from the rows, and counts the same."""
    import queries.search

    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    kernel_logs(tmp_path / "logs", boot, [(9000.0, XID), (9000.5, XID), (9100.5, LINK)])
    store = tmp_path / "store"
    ingest_dmesg(store, tmp_path / "logs", boot)
    ingest(store, str(tmp_path / "logs" / "syslog"))
    decide = queries.search.one_per_record

    def refused(rows):
        raise AssertionError("decided again though the marks are current")

    monkeypatch.setattr(queries.search, "one_per_record", refused)
    assert stale(Store(store)) == () and observe_count(store) == 3
    kernel_logs(tmp_path / "more", boot, [(9500.0, LINK)])
    ingest_unmarked(store, monkeypatch, str(tmp_path / "more" / "syslog"))
    assert stale(Store(store)) != ()
    monkeypatch.setattr(queries.search, "one_per_record", decide)
    assert observe_count(store) == 4


def test_a_query_decides_again_only_where_marks_are_stale(tmp_path: Path, monkeypatch) -> None:
    """Marks stale in a day (an ingest that could not mark: a compaction held the store) are decided again from
    that day's rows and those a day either side; the rest are read as marked. Deciding over every row read
    held 20 GB on a 2,560-node month whose marks were due."""
    import queries.search

    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=10)
    early, late = 9000.0, 9000.0 + 8 * 86400  # eight days apart
    kernel_logs(tmp_path / "a", boot, [(early, XID), (early + 0.5, XID), (early + 100, LINK)])
    kernel_logs(tmp_path / "b", boot, [(late, XID), (late + 100, LINK)])
    store = tmp_path / "store"
    for part in ("a", "b"):
        ingest_dmesg(store, tmp_path / part, boot)
    ingest(store, str(tmp_path / "a" / "syslog"))
    ingest_unmarked(store, monkeypatch, str(tmp_path / "b" / "syslog"))  # copies of b's dmesg, not marked as such yet
    assert stale(Store(store)) != ()
    decide, decided = queries.search.one_per_record, []

    def watched(rows, **mine):
        decided.append(rows.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi"), pl.len()).collect().row(0))
        return decide(rows, **mine)

    monkeypatch.setattr(queries.search, "one_per_record", watched)
    assert observe_count(store) == 5
    (lo, hi, n), = decided
    assert lo >= boot + timedelta(seconds=late - 86400) and hi <= boot + timedelta(seconds=late + 86400 + 100), (lo, hi)
    assert n == 4  # b's two records, read through dmesg and the syslog
    assert outside_counts(store)["duckdb"] == 7  # the stored marks alone count b's syslog rows too
    for args in (["--source", "slurm"], ["--since", "2099-01-01"], ["--until", "2000-01-01"]):  # no file to read
        empty = runner.invoke(app, ["query", "--store", str(store), "--count-by", "source", *args])
        assert empty.exit_code == 0 and "0 row(s)" in empty.output, (args, empty.output)
    assert runner.invoke(app, ["compact", "--store", str(store)]).exit_code == 0
    assert stale(Store(store)) == () and agree(store)["duckdb"] == 5


def test_a_log_that_no_longer_says_what_changed_makes_every_mark_stale(tmp_path: Path, monkeypatch) -> None:
    """Where the table's log no longer holds the commits since the version last marked (cleaned up), what changed
    is unknown: every mark may be stale, and a query decides copies everywhere rather than read them (review 13:
    the stale marks were read as current, and the syslog's unmarked copies counted twice)."""
    from observe.store.table import EventTable

    boot = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    kernel_logs(tmp_path / "logs", boot, [(9000.0, XID), (9100.5, LINK)])
    store = tmp_path / "store"
    ingest_dmesg(store, tmp_path / "logs", boot)
    ingest_unmarked(store, monkeypatch, str(tmp_path / "logs" / "syslog"))
    monkeypatch.setattr(EventTable, "added", lambda self, after, upto: None)
    assert stale(Store(store)) is None and observe_count(store) == 2


def test_a_time_bound_between_two_copies_counts_the_record_where_its_kept_row_lies(tmp_path: Path, monkeypatch) -> None:
    """A record dmesg stamps at 09:59:59.6 and the syslog at 10:00:00 lies before 10:00, as its kept row (the
    kernel's own) says: with the marks stale, `--since 10:00` reads the rows a bucket past the bound to decide
    copies, then cuts, and counts what the current marks count."""
    boot = datetime(2026, 11, 20, 9, 0, 0, tzinfo=timezone.utc)
    kernel_logs(tmp_path / "logs", boot, [(3599.6, XID)])
    store = tmp_path / "store"
    ingest_dmesg(store, tmp_path / "logs", boot)
    ingest_unmarked(store, monkeypatch, str(tmp_path / "logs" / "syslog"), "--year", "2026")

    def counted(*args: str) -> list[int]:
        result = runner.invoke(app, ["query", "--store", str(store), "--count-by", "source", "--format", "json", *args])
        assert result.exit_code == 0, result.output
        return [sum(json.loads(line)["events"] for line in result.stdout.splitlines())]

    asked = [(), ("--since", "2026-11-20T10:00:00Z"), ("--until", "2026-11-20T10:00:00Z")]
    assert stale(Store(store)) != ()
    before = [counted(*a) for a in asked]
    assert runner.invoke(app, ["compact", "--store", str(store)]).exit_code == 0 and stale(Store(store)) == ()
    assert before == [counted(*a) for a in asked] == [[1], [0], [1]]


def test_a_time_filter_of_many_ranges_keeps_exactly_them_and_a_read_keeps_them_all() -> None:
    """Up to 64 time ranges are tested one by one (polars streams that, and prunes by row groups' times:
    a lookup held a 53-million-row scope whole, 3 GB); more are looked up where rows are marked, and merged
    into 64 that hold them all where rows are only read around them."""
    from observe.store.copy_marks import WITHIN_TERMS, _fewer, _within

    ranges = [(i * 100, i * 100 + 10) for i in range(200)]
    frame = pl.DataFrame({"ts": pl.Series(range(0, 20_000, 5)).cast(pl.Datetime("us", "UTC"))})
    inside = [t % 100 <= 10 for t in range(0, 20_000, 5)]
    assert frame.select(_within(ranges)).to_series().to_list() == inside
    assert frame.select(_within(ranges[:WITHIN_TERMS])).to_series().to_list() == [
        t % 100 <= 10 and t < WITHIN_TERMS * 100 for t in range(0, 20_000, 5)]
    merged = _fewer(ranges, WITHIN_TERMS)
    assert len(merged) == WITHIN_TERMS and merged[0][0] == 0 and merged[-1][1] == ranges[-1][1]
    read = frame.select(_within(ranges, exact=False)).to_series().to_list()
    assert all(r for r, i in zip(read, inside) if i) and sum(read) > sum(inside)
    # a range a third of a day long every third day, for years: what is read around them keeps to their days,
    # not to the merged ranges, which hold most of the years
    day = 86_400_000_000
    sparse = [(3 * i * day, 3 * i * day + day // 3) for i in range(500)]
    days = pl.DataFrame({"ts": pl.Series([d * day + day // 4 for d in range(1500)]).cast(pl.Datetime("us", "UTC"))})
    assert days.select(_within(sparse, exact=False)).to_series().to_list() == [d % 3 == 0 for d in range(1500)]
    assert days.select(_within(_fewer(sparse, WITHIN_TERMS))).to_series().sum() > 1300  # of 1,500 days; 500 above
