"""Timestamp helpers: year roll-over, localized months, ISO variants, boot-relative stamps."""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from observe import timeparse as tp

UTC = timezone.utc


def _one(expr: pl.Expr) -> datetime:
    return pl.select(expr).item()


def test_december_lines_read_in_january_belong_to_last_year() -> None:
    ref = datetime(2026, 1, 2, 12, tzinfo=UTC)
    assert _one(tp.yearless(pl.lit("Dec"), pl.lit("31"), pl.lit("23:59:59"), ref)) == datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert _one(tp.yearless(pl.lit("Jan"), pl.lit(" 2"), pl.lit("10:00:00"), ref)) == datetime(2026, 1, 2, 10, tzinfo=UTC)


def test_localized_months() -> None:
    ref = datetime(2026, 11, 1, tzinfo=UTC)
    for name, month in [("kwi", 4), ("Mär", 3), ("déc", 12), ("okt", 10), ("мая", 5), ("Mai", 5)]:
        assert _one(tp.yearless(pl.lit(name), pl.lit("5"), pl.lit("07:56:59"), ref)).month == (month), name


def test_iso_variants() -> None:
    expected = datetime(2024, 1, 2, 9, 11, 12, 123456, tzinfo=UTC)
    for text in ["2024-01-02T10:11:12,123456+01:00", "2024-01-02T09:11:12.123456Z", "2024-01-02 09:11:12.123456",
                 "2024-01-02T10:11:12.123456+0100", "2024-01-02T09:11:12.123456789Z"]:
        assert _one(tp.iso(pl.lit(text))) == expected, text


def test_local_zone_converted() -> None:
    assert _one(tp.iso(pl.lit("2024-07-01T12:00:00"), "Europe/Berlin")) == datetime(2024, 7, 1, 10, tzinfo=UTC)


def test_since_boot_and_unknown_boot() -> None:
    boot = datetime(2026, 11, 22, tzinfo=UTC)
    assert _one(tp.since_boot(pl.lit(170.053881), boot)) == datetime(2026, 11, 22, 0, 2, 50, 53881, tzinfo=UTC)
    assert _one(tp.since_boot(pl.lit(1.0), None)) is None


def test_fast_paths_agree_with_the_general_parsers() -> None:
    """One chrono format takes a batch's common shape; every other shape, bad date, DST gap and
    last-year stamp must come out as the general parser gives it, in a batch that mixes them."""
    import itertools

    days = ["1", " 1", "01", "29", "30", "31", "7"]
    clocks = ["00:00:00", "23:59:59", "02:30:00", "12:34:56.5", "12:34:56.123456", "12:34:56.123456789", "1:02:03",
              "24:00:00"]
    months = ["Jan", "Feb", "feb", "MAR", "Mar", "Dec", "Nov", "Sept", "Mai", "kwi", "Foo", ""]
    rows = list(itertools.product(months, days, clocks))
    f = pl.DataFrame(rows, schema=["month", "day", "clock"], orient="row").with_columns(pl.lit(None, dtype=pl.Int64).alias("year"))
    for ref, tz in [(datetime(2026, 1, 2, 12, tzinfo=UTC), "UTC"), (datetime(2026, 11, 22, tzinfo=UTC), "Europe/Berlin"),
                    (datetime(2024, 3, 31, tzinfo=UTC), "America/New_York")]:
        fast = tp._yearless(f, ref, tz, has_year=False)
        general = tp._yearless_general(f, ref, tz, has_year=False)
        assert fast.to_list() == general.to_list(), (ref, tz)
        assert fast.null_count() < len(f)
    stamps = pl.Series(["2024-01-02 09:11:12,123", "2024-01-02 09:11:12,1234", "2024-01-02T09:11:12.123",
                        "2024-02-30 09:11:12,123", "2024-03-10 02:30:00,000", "2024-01-02 09:11:12",
                        "2024-01-02 09:11:12.123456", "2024-01-02T09:11:12Z", "2024-01-02 09:11:12,123+01:00",
                        "garbage", None, "2024-12-31 23:59:60,999", "2024-1-2 09:11:12,123"])
    for tz in ["UTC", "America/New_York"]:
        for first in range(len(stamps) - 1):  # each shape in turn sets the fast format
            batch = pl.concat([stamps[first:], stamps[:first]])
            assert tp._iso(batch, tz).to_list() == tp._iso_general(batch, tz).to_list(), (tz, batch[0])


def test_syslog_stamp_agrees_with_yearless() -> None:
    """The fixed RFC 3164 stamp parser gives what the general one gives, roll-over included, and
    null for text of another shape (which the syslog collector then parses by regex)."""
    stamps = pl.Series(["Jan  2 10:00:00", "Dec 31 23:59:59", "Feb 29 12:00:00", "Feb 30 12:00:00", "Sep 14 07:05:09",
                        "jun  1 00:00:00", "Mär  5 07:56:59", "Sep 4 17:00:00 ", "Sep  4 7:00:00 ", None])
    for ref, tz in [(datetime(2026, 1, 2, 12, tzinfo=UTC), "UTC"), (datetime(2024, 11, 3, 6, tzinfo=UTC), "America/New_York")]:
        got = tp.syslog_stamp(stamps, ref, tz).to_list()
        want = pl.select(tp.yearless(stamps.str.slice(0, 3), stamps.str.slice(4, 2), stamps.str.slice(7, 8), ref, tz)).to_series().to_list()
        assert got[:6] == want[:6], (ref, tz)
        assert got[6:] == [None] * 4
    assert tp.syslog_stamp(stamps, datetime(2026, 1, 2, tzinfo=UTC))[1] == datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_month_names_mean_one_month_each() -> None:
    """The locales' abmon lists (observe/timeparse.py cites glibc localedata) share no name between two months."""
    seen: dict[str, int] = {}
    for month, names in tp._MONTHS.items():
        for name in names.split():
            assert seen.setdefault(name, month) == month, name
    months = pl.Series(["janv.", " 3月", "10월", "Şub", "Mär", "maalis", "лис", "Foo"])
    assert pl.select(tp.month_number(pl.lit(months))).to_series().to_list() == [1, 3, 10, 2, 3, 3, 11, None]


def test_ctime_localized_and_epoch() -> None:
    """dmesg -T under a non-English LC_TIME (``%a %b %e``); journalctl -o short-unix seconds."""
    stamps = pl.Series(["Sat Oct 12 18:35:32 2024", "Fr Mär  1 10:00:00 2024", "ven. mars  1 10:00:00 2024", "garbage", None])
    got = pl.select(tp.ctime(pl.lit(stamps))).to_series().to_list()
    assert got == [datetime(2024, 10, 12, 18, 35, 32, tzinfo=UTC), datetime(2024, 3, 1, 10, tzinfo=UTC),
                   datetime(2024, 3, 1, 10, tzinfo=UTC), None, None]
    assert _one(tp.epoch(pl.lit("1709283600.000001"))) == datetime(2024, 3, 1, 9, 0, 0, 1, tzinfo=UTC)
    assert _one(tp.epoch(pl.lit("1709283600"))) == datetime(2024, 3, 1, 9, tzinfo=UTC)


def test_a_last_write_no_date_holds_dates_by_now() -> None:
    """A file's modification time dates its stamps without a year; one past what a date holds (a user's
    `touch -d @253402300800` on a file system that keeps it) is now, not an error that ends the run (attack-31 r5)."""
    from datetime import datetime, timezone

    from observe.timeparse import reference_time, year_basis

    now = datetime.now(timezone.utc)
    for mtime in (253402300800.0, float(2**63 - 1), -1e20):
        got = reference_time(mtime, None)
        assert abs((got - now).total_seconds()) < 60 and year_basis(got, "UTC")
    assert reference_time(1_700_000_000.0, None) == datetime.fromtimestamp(1_700_000_000, timezone.utc)
