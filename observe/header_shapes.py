"""Headers the store rebuilds rather than keeps: a syslog line's "Nov 28 12:00:01 gpu003 sshd[4242]: "
repeats what the row's ts, node, program and pid hold (a kernel line's "[ 3906.450310] " its uptime),
and was 37-41% of a syslog store's bytes. A row whose header one of ``header_shapes.toml``'s shapes
renders exactly keeps the shape instead (one of a few values per file); every other keeps its
header. Rendering is exact by construction: a shape is kept only where it gave back the header byte
for byte."""
from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

import polars as pl

CATALOG = Path(__file__).with_name("header_shapes.toml")
COLUMNS = ("ts", "node", "program", "pid", "attrs")  # what a shape renders from
_PLACE = re.compile(r"\{(?:(node|program|pid|uptime)|ts(?:@([A-Za-z0-9_+\-/]+))?:([^{}]*))\}")
# the kernel's printk stamp, "[%5lu.%06lu]" (kernel/printk/printk.c, print_time), whose text the
# kernel collector keeps in attrs.uptime without the padding
UPTIME = pl.col("attrs").str.json_path_match("$.uptime").str.pad_start(12)


@cache
def templates() -> tuple[str, ...]:
    """The catalog's templates, in the order they are tried."""
    with CATALOG.open("rb") as f:
        return tuple(s["template"] for s in tomllib.load(f)["shape"])


def in_zone(template: str, zone: str) -> str:
    """``template`` rendering its times in ``zone`` (UTC needs no name)."""
    return template if zone == "UTC" else template.replace("{ts:", "{ts@" + zone + ":")


@cache
def render(shape: str) -> pl.Expr | None:
    """The header ``shape`` gives each row, from its own columns (null where one it names is null);
    None for a text that is no shape, or names a zone this polars does not know."""
    parts: list[pl.Expr] = []
    at = 0
    for m in _PLACE.finditer(shape):
        if "{" in shape[at:m.start()] or "}" in shape[at:m.start()]:
            return None
        if m.start() > at:
            parts.append(pl.lit(shape[at:m.start()]))
        name, zone, fmt = m.groups()
        if name == "uptime":
            parts.append(UPTIME)
        elif name:
            parts.append(pl.col(name).cast(pl.String))
        else:
            try:
                ts = pl.col("ts") if zone is None else pl.col("ts").dt.convert_time_zone(zone)
            except pl.exceptions.PolarsError:  # a zone this polars does not know
                return None
            parts.append(ts.dt.strftime(fmt))
        at = m.end()
    rest = shape[at:]
    if not parts or "{" in rest or "}" in rest:
        return None
    return pl.concat_str([*parts, pl.lit(rest)]) if rest else pl.concat_str(parts)


@cache
def _literal_ends(shape: str) -> tuple[str, str]:
    """The text before the first place of ``shape`` and after its last."""
    places = list(_PLACE.finditer(shape))
    return shape[:places[0].start()], shape[places[-1].end():]


def shapes_of(df: pl.DataFrame, zone: str) -> pl.Series:
    """Each row's shape: the first of the catalog's (times in ``zone``) that renders its ``header``
    exactly; null where none does. Each shape is tried on the rows no earlier one rendered."""
    out = pl.Series("shape", [None] * df.height, dtype=pl.String)
    rest = df.select(pl.col("header").is_not_null()).to_series().arg_true()
    if not len(rest):
        return out
    left = df.select("header", *COLUMNS).gather(rest)  # the rows no shape rendered yet, and their places
    for template in templates():
        shape = in_zone(template, zone)
        rendering = render(shape)
        if rendering is None:  # a zone this polars does not know: the headers are kept
            return out
        head, tail = _literal_ends(shape)  # what every header the shape renders starts and ends with: a cheap test
        fits = left.select(pl.col("header").str.starts_with(head) & pl.col("header").str.ends_with(tail)).to_series()
        if not fits.any():
            continue
        tried = fits.arg_true()
        try:
            same = (left if len(tried) == left.height else left.gather(tried)).select(
                (rendering == pl.col("header")).fill_null(False)).to_series()
        except pl.exceptions.PolarsError:  # a time out of what the zone's rules cover
            return out
        if len(tried) < left.height:
            same = fits.scatter(tried, same)
        if same.any():
            out = out.scatter(rest.filter(same), shape)
            rest, left = rest.filter(~same), left.filter(~same)
            if not len(rest):
                break
    return out


def rendered() -> pl.Expr:
    """Each stored row's header rendered from its ``shape`` (null where it has none)."""
    return pl.struct("shape", *COLUMNS).map_batches(_render_rows, return_dtype=pl.String, is_elementwise=True)


def _render_rows(rows: pl.Series) -> pl.Series:
    df = rows.struct.unnest()
    shapes = df.get_column("shape").drop_nulls().unique().to_list()
    if not shapes:
        return pl.Series(rows.name, [None] * len(df), dtype=pl.String)
    done = [pl.when(pl.col("shape") == s).then(e) for s in shapes if (e := render(s)) is not None]
    if not done:
        return pl.Series(rows.name, [None] * len(df), dtype=pl.String)
    try:
        return df.select(pl.coalesce(done).alias(rows.name)).to_series()
    except pl.exceptions.PolarsError:  # a zone this polars does not know: the rows' text is their message
        return pl.Series(rows.name, [None] * len(df), dtype=pl.String)
