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
