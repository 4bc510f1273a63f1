"""Vectorised timestamp parsing shared by collectors: ISO, ctime, year-less syslog, boot-relative."""
from __future__ import annotations

from datetime import datetime

import polars as pl

# Three-letter month abbreviations as syslog and journalctl print them under common locales.
_MONTHS = {
    1: "jan janv ene gen sty янв",
    2: "feb fév févr fev lut фев",
    3: "mar mär mrt мар",
    4: "apr avr abr kwi апр",
    5: "may mai mag maj mei мая май",
    6: "jun juin giu cze июн",
    7: "jul juil lug lip июл",
    8: "aug aoû août ago sie авг",
    9: "sep sept set wrz сен",
    10: "oct okt ott out paź paz окт",
    11: "nov lis ноя",
    12: "dec déc dez dic gru дек",
}
MONTHS: dict[str, int] = {name: n for n, names in _MONTHS.items() for name in names.split()}
MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_UTC = "UTC"


def localize(naive: pl.Expr, tz: str) -> pl.Expr:
    if tz == _UTC:
        return naive.dt.replace_time_zone(_UTC)
    return naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.convert_time_zone(_UTC)


def iso(s: pl.Expr, tz: str = _UTC) -> pl.Expr:
    """ISO 8601 text (``T`` or space, ``.``/``,`` fraction, optional ``Z``/offset) to UTC."""
    norm = (
        s.str.strip_chars()
        .str.replace(",", ".", literal=True)
        .str.replace(r"^(\d{4}-\d\d-\d\d) ", "${1}T")
        .str.replace(r"Z$", "+00:00")
        .str.replace(r"([+-]\d\d)(\d\d)$", "${1}:${2}")
    )
    aware = norm.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%z", time_unit="us", time_zone=_UTC, strict=False)
    naive = norm.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="us", strict=False)
    return pl.coalesce(aware, localize(naive, tz))


def ctime(s: pl.Expr, tz: str = _UTC) -> pl.Expr:
    """``Sat Oct 12 18:35:32 2024`` (dmesg -T, nvidia-smi) to UTC."""
    norm = s.str.strip_chars().str.replace_all(r"\s+", " ").str.replace(r"^[A-Za-z]{3} ", "")  # weekday not checked
    return localize(norm.str.to_datetime("%b %d %H:%M:%S %Y", time_unit="us", strict=False), tz)


def month_number(name: pl.Expr) -> pl.Expr:
    """Localized three-letter month name to 1..12 (null when unknown)."""
    key = name.str.to_lowercase().str.strip_chars_end(".")
    return key.replace_strict(MONTHS, default=None, return_dtype=pl.Int32)


def yearless(month: pl.Expr, day: pl.Expr, clock: pl.Expr, reference: datetime, tz: str = _UTC,
             year: pl.Expr | None = None) -> pl.Expr:
    """Syslog ``Mon dd HH:MM:SS[.frac]`` to UTC, the year taken from ``reference``.

    A stamp more than a day after the reference belongs to the previous year (December lines
    read in January).
    """
    y = year if year is not None else pl.lit(reference.year)
    text = pl.format("{}-{}-{}T{}", y, month_number(month), day.str.strip_chars(), clock)
    naive = text.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="us", strict=False)
    ts = localize(naive, tz)
    if year is not None:
        return ts
    limit = pl.lit(reference).dt.replace_time_zone(_UTC) if reference.tzinfo is None else pl.lit(reference)
    limit = limit.dt.convert_time_zone(_UTC).dt.cast_time_unit("us") + pl.duration(days=1)
    return pl.when(ts > limit).then(ts.dt.offset_by("-1y")).otherwise(ts)


def since_boot(seconds: pl.Expr, boot_time: datetime | None) -> pl.Expr:
    """Seconds since boot to UTC given the boot time; null when the boot time is unknown."""
    if boot_time is None:
        return pl.lit(None, dtype=pl.Datetime("us", _UTC))
    base = pl.lit(boot_time).dt.convert_time_zone(_UTC).dt.cast_time_unit("us")
    return base + pl.duration(microseconds=(seconds * 1_000_000).round(0).cast(pl.Int64))
