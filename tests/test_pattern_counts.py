"""The patterns' kept baseline (queries/pattern_counts.py): what it answers is what counting the events
again answers over the same whole hours, whether it counts every segment, some, ones compaction
replaced, or a store it cannot write to; and it counts each segment once per set of masks."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from observe.ingest import ingest_inputs
from observe.reader import input_files
from observe.simulate import generate
from observe.store import Store
from observe.store.copy_marks import stale
from observe.store.layout import segment_name
from observe.store.table import IndexTable
from queries import pattern_counts
from queries.engine import engine
from queries.patterns import compare, load_config, masked_counts
from queries.search import Match

START = datetime(2026, 11, 20, tzinfo=timezone.utc)


@pytest.fixture()
def store(fleet_store: Store) -> Store:
    return fleet_store


@pytest.fixture()
def counted(monkeypatch) -> list[int]:
    """How many segments each count read."""
    seen: list[int] = []
    count = pattern_counts._counted

    def spy(store, run, files, config):
        seen.append(len(files))
        return count(store, run, files, config)

    monkeypatch.setattr(pattern_counts, "_counted", spy)
    return seen


def _ask(store: Store, start: datetime, span: timedelta, end: datetime) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """(patterns from the kept baseline, patterns from the events counted again over the same hours, why not kept)."""
    match = Match(since=start - span, until=end, ordered=False, marked=stale(store))
    pieces, baseline_span, why = pattern_counts.pieces(store, engine("polars"), match, start, span)
    found = compare(pieces, window_span=end - start, baseline_span=baseline_span, min_count=1, min_ratio=1.5)
    since = pattern_counts.on_the_hour(start - span)
    assert baseline_span == start - since
    whole = replace(match, since=since)
    events = whole.events(whole.rows(store, whole.files(store)))
    direct = compare([masked_counts(events, start=start)], window_span=end - start, baseline_span=start - since,
                     min_count=1, min_ratio=1.5)
    return found, direct, why


def _window(store: Store) -> tuple[datetime, timedelta, datetime]:
    """50 minutes before the last event to after it, against a day and 20 minutes before (from 23:50 UTC the day
    before, so the kept baseline starts at 23:00)."""
    last = store.scan().select(pl.col("ts").max()).collect().item()
    return last - timedelta(minutes=50), timedelta(days=1, minutes=20), last + timedelta(seconds=1)


def test_the_kept_baseline_answers_as_the_events_counted_again(store: Store, counted: list[int]) -> None:
    start, span, end = _window(store)
    assert stale(store) == ()
    found, direct, why = _ask(store, start, span, end)
    assert why is None and direct.height >= 2 and set(direct.get_column("status")) == {"new", "frequent"}
    assert_frame_equal(found, direct)
    assert counted[-1] > 0
    again, _, _ = _ask(store, start, span, end)
    assert counted[-1] == 0  # every segment the baseline needs is counted already
    assert_frame_equal(again, direct)
    match = Match(since=start - span, until=end, ordered=False, marked=())
    pieces, baseline_span, _ = pattern_counts.pieces(store, engine("polars"), match, start, span)
    whole = replace(match, since=start - baseline_span)
    rows = whole.events(whole.rows(store, whole.files(store))).filter(pl.col("ts") < start).select(pl.len()).collect()
    assert sum(p.get_column("baseline_count").sum() for p in pieces) == rows.item() > 0  # every row of its span


def test_new_and_compacted_segments_are_counted_once(store: Store, tmp_path: Path, counted: list[int]) -> None:
    start, span, end = _window(store)
    _ask(store, start, span, end)
    more = tmp_path / "more"
    generate(more, nodes=4, hours=2, seed=6, start=START.replace(hour=1))
    ingest_inputs([(f, {}) for f in input_files([str(more)])], store)
    found, direct, _ = _ask(store, start, span, end)
    assert_frame_equal(found, direct)
    assert 0 < counted[-1] < len(store.live())  # only the new segments
    store.compactor.compact_many(store.partitions(), min_segments=1)
    assert pattern_counts.refresh(store, engine("polars"))[0] > 0  # what replaced counted segments, counted for the next call
    kept = store.index(pattern_counts.NAME).scan().collect().get_column(pattern_counts.SEGMENT).unique()
    assert set(kept) <= {segment_name(store.events, f) for _, _, f in store.live()}  # the replaced ones' rows dropped
    found, direct, _ = _ask(store, start, span, end)
    assert counted[-1] == 0
    assert_frame_equal(found, direct)
    assert pattern_counts.refresh(store, engine("polars")) == (0, None)


def test_other_masks_count_again(store: Store, tmp_path: Path, monkeypatch, counted: list[int]) -> None:
    start, span, end = _window(store)
    _ask(store, start, span, end)
    before = pattern_counts.fingerprint(load_config())
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "patterns.toml").write_text('[[mask]]\nname = "words of gpu"\npattern = "gpu[0-9]+"\n')
    monkeypatch.setenv("OBSERVE_RULES", str(rules))
    assert pattern_counts.fingerprint(load_config()) != before
    found, direct, _ = _ask(store, start, span, end)
    assert counted[-1] > 0
    assert_frame_equal(found, direct)


def test_a_store_it_cannot_write_to_gets_its_answer_and_the_reason(store: Store, monkeypatch, counted: list[int]) -> None:
    def refused(self, df, stats, note, **how):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(IndexTable, "_write", refused)
    start, span, end = _window(store)
    found, direct, why = _ask(store, start, span, end)
    assert_frame_equal(found, direct)
    assert "could not be kept (PermissionError" in why
    _ask(store, start, span, end)
    assert counted[-1] == counted[-2] > 0  # nothing kept: counted again


def test_a_search_of_some_nodes_counts_its_own(store: Store, counted: list[int]) -> None:
    start, span, end = _window(store)
    match = Match(since=start - span, until=end, nodes=["node001"], ordered=False, marked=())
    pieces, baseline_span, why = pattern_counts.pieces(store, engine("polars"), match, start, span)
    assert (baseline_span, why, counted) == (span, None, [])
    direct = [masked_counts(match.events(match.rows(store, match.files(store))), start=start)]
    assert_frame_equal(compare(pieces, min_count=1, min_ratio=1.5), compare(direct, min_count=1, min_ratio=1.5))


def test_a_window_given_in_a_zone_half_an_hour_off_utc_takes_utc_hours(store: Store) -> None:
    """The index's hours are UTC's: a start at 12:20+05:30 (06:50 UTC) has its baseline's kept hours end at 06:00 UTC,
    not at 12:00+05:30 (06:30 UTC), whose hour of the index holds the window's first ten minutes."""
    india = timezone(timedelta(hours=5, minutes=30))
    assert pattern_counts.on_the_hour(datetime(2026, 11, 20, 12, 20, tzinfo=india)) == datetime(2026, 11, 20, 6, tzinfo=timezone.utc)
    start, span, end = _window(store)
    start = start.replace(minute=20).astimezone(india)  # 20 past a UTC hour and 50 past a local one
    found, direct, _ = _ask(store, start, span, end)
    assert_frame_equal(found, direct)


def _days(store: Store) -> dict[str, set[str]]:
    """The index's files by day."""
    _, files = store.index(pattern_counts.NAME).snapshot()
    out: dict[str, set[str]] = {}
    for f in files:
        out.setdefault(f.split("/")[0], set()).add(f)
    return out


def _stats_columns(root: Path) -> set[str]:
    """Every column the table's log holds statistics of."""
    import json

    seen: set[str] = set()
    for commit in sorted((root / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                stats = json.loads(add["stats"])
                seen |= set(stats.get("minValues", {})) | set(stats.get("maxValues", {}))
    return seen


@pytest.fixture()
def two_days(tmp_path: Path) -> Store:
    """Four simulated nodes from 22:00 to 02:00: two days' partitions."""
    manifest = generate(tmp_path / "logs", nodes=4, hours=4, seed=7, start=START.replace(hour=22))
    st = Store(tmp_path / "store")
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], st)
    return st


def test_a_call_writes_anew_only_the_days_it_counted(two_days: Store, tmp_path: Path, counted: list[int]) -> None:
    store = two_days
    start, span, end = _window(store)
    _ask(store, start, span, end)
    before = _days(store)
    assert set(before) == {"date=2026-11-02", "date=2026-11-20", "date=2026-11-21"}  # a segment's first day: dmesg's boot
    more = tmp_path / "more"
    generate(more, nodes=2, hours=1, seed=8, start=START.replace(day=21, hour=0), first_node=5)  # the second day only
    ingest_inputs([(f, {}) for f in input_files([str(more)])], store)
    found, direct, why = _ask(store, start, span, end)
    assert why is None and counted[-1] > 0
    assert_frame_equal(found, direct)
    after = _days(store)
    assert after["date=2026-11-02"] == before["date=2026-11-02"]
    assert after["date=2026-11-20"] == before["date=2026-11-20"]  # the first day's file: not read, not written
    assert after["date=2026-11-21"] != before["date=2026-11-21"]
    assert _stats_columns(store.root / "index" / pattern_counts.NAME) <= set(pattern_counts.STATS)  # no user text
    store.upkeep.expire("2026-11-21")  # retention: the first day goes (the files holding both days are cut)
    assert pattern_counts.refresh(store, engine("polars"))[1] is None
    assert set(_days(store)) == {"date=2026-11-21"}  # the cut files start on the 21st


def test_a_damaged_index_is_counted_again_and_says_so(store: Store, counted: list[int]) -> None:
    start, span, end = _window(store)
    _ask(store, start, span, end)
    for f in (store.root / "index" / pattern_counts.NAME).rglob("*.parquet"):
        f.unlink()  # an operator's find -delete, a restore that missed them
    found, direct, why = _ask(store, start, span, end)
    assert_frame_equal(found, direct)
    assert "could not be read (FileNotFoundError" in why and counted[-1] > 0
    again, _, why = _ask(store, start, span, end)  # written anew whole: read again as kept
    assert why is None and counted[-1] == 0
    assert_frame_equal(again, direct)


def test_a_time_given_in_another_zone_reads_the_utc_days_it_falls_in(two_days: Store) -> None:
    """Partitions are UTC months, files' ranges UTC times: 05:00+05:30 on the 21st is 23:30 UTC on the 20th (attack-28 r6)."""
    from queries.search import search

    india, newfoundland = timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=3, minutes=30))
    since, until = datetime(2026, 11, 21, 5, tzinfo=india), datetime(2026, 11, 20, 21, 30, tzinfo=newfoundland)
    assert {d for _, d, _ in two_days._files(None, since, until, False)} == {"2026-11"}
    found = search(two_days, since=since, until=until).select(pl.len()).collect().item()
    utc = search(two_days, since=since.astimezone(timezone.utc), until=until.astimezone(timezone.utc))
    assert found == utc.select(pl.len()).collect().item() > 0


def test_a_baseline_under_a_day_is_read_from_the_segments(store: Store, counted: list[int]) -> None:
    """As asked, to the second: the part hour at its start would be a large share of it, and the index saves reading
    at most two days' files."""
    start, _, end = _window(store)
    span = timedelta(hours=3, minutes=20)
    match = Match(since=start - span, until=end, ordered=False, marked=())
    pieces, baseline_span, why = pattern_counts.pieces(store, engine("polars"), match, start, span)
    assert (baseline_span, why, counted) == (span, None, [])
    direct = [masked_counts(match.events(match.rows(store, match.files(store))), start=start)]
    assert_frame_equal(compare(pieces, min_count=1, min_ratio=1.5), compare(direct, min_count=1, min_ratio=1.5))
