"""Collector contract and registry: one module per source in ``collectors/``, each a pure parser."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import polars as pl


INPUT_BITS = 40  # a batch's record offsets carry their input's index above these bits (observe/ingest/records.py)


def input_of(offset: pl.Expr | pl.Series) -> pl.Expr | pl.Series:
    """The index, in its unit, of the input a record's ``offset`` (as a collector is given it) is in."""
    return offset // (1 << INPUT_BITS)


UNIT_INPUTS = 1 << 16  # inputs in one parse unit at most: far below the 2**23 indices the offsets hold, whatever the files' sizes


@dataclass(frozen=True)
class Context:
    """What a parser may know besides the lines: hints from the command line or the file."""

    node: str | None = None
    job_id: str | None = None
    boot_time: datetime | None = None
    # the run's other inputs' copies of kernel records (observe/boot_copies.py): what dates a dmesg without boot_time
    boot_copies: pl.DataFrame | None = None
    reference_time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))  # stamps without a year take its
    year_given: bool = False  # whether the user said that year (--year), not the file's modification time
    tz: str = "UTC"
    header: str | None = None  # the input's first line (column headers of sacct output)
    route: str | None = None  # how the input reached observe (observe/provenance.toml); None: unknown, untrusted
    # each input's reference_time, by the input index records' offsets carry, where a unit of many inputs
    # (small files parsed together) holds files last written on different days: each dated by its own
    references: tuple[datetime, ...] = ()

    def reference(self) -> datetime | pl.Expr:
        """What dates the stamps without a year of the rows an expression is evaluated on (a frame with ``offset``):
        ``reference_time``, or each row's input's."""
        return self.reference_time if not self.references else pl.lit(self._references()).gather(input_of(pl.col("offset")))

    def reference_of(self, offsets: pl.Series) -> datetime | pl.Series:
        """:meth:`reference` for the rows of ``offsets``."""
        return self.reference_time if not self.references else self._references().gather(input_of(offsets))

    def _references(self) -> pl.Series:
        return pl.Series(self.references, dtype=pl.Datetime("us", "UTC"))


class Collector:
    """A pure, vectorised parser for one input format: the contract every module of ``collectors/``
    implements (subclass, set the attributes below, implement ``parse``, decorate with ``@register``).
    A collector imports this contract and the package's private helper modules, never another collector.
    """

    # The ``--source`` value that names it.
    name: str = ""
    # The schema's ``source`` of its events unless a line says otherwise.
    source: str = ""
    # A regex typical lines match: ``--source auto`` picks the collector whose sniff matches most of a
    # file's first lines.
    sniff: str = ""
    # Which collector ``--source auto`` prefers when several match equally (higher wins).
    priority: int = 0
    # Record-level formats (XML documents, tables) set this: the reader hands whole records.
    whole_file: bool = False
    # Small files of this format may be parsed together (False when a file's header matters).
    batchable: bool = True
    # A daemon writes these files for any local process that asks (syslog): what a line says of its
    # sender (``kernel:``, ``slurmd[1]:``) is that process's claim, so a system file of this format
    # is route ``syslog_file``, not ``system_file`` (observe/provenance.toml).
    relayed: bool = False

    # A cheap regex every continuation line matches (a necessary condition), when ``continuation``
    # is costly: it is then evaluated on those lines only.
    continuation_hint: str | None = None

    def relayed_for(self, sample: list[str]) -> bool:
        """Whether an input whose format was told from ``sample`` (its first lines), not named, is a
        syslog daemon's file though the format is not ``relayed`` (whose parse routes each record
        itself): a format that also reads syslog-framed lines (``host kernel: ...``) says so."""
        return False

    def continuation(self, line: pl.Expr) -> pl.Expr:
        """True for lines that continue the previous record (joined to it with a newline)."""
        return pl.lit(False)

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Turn records (``raw``, ``offset``) into schema columns; ``message`` null means unparsed."""
        raise NotImplementedError


def per_value(expr: pl.Expr, fn: Callable[[pl.Expr], pl.Expr], default: str | None = None) -> pl.Expr:
    """``fn`` applied to each distinct string of ``expr`` once (host names, programs, GPU ids: a few
    per chunk); nulls become ``default``."""
    def apply(values: pl.Series) -> pl.Series:
        distinct = values.unique().drop_nulls()
        done = pl.select(fn(pl.lit(distinct))).to_series()
        return values.replace_strict(distinct, done, default=default, return_dtype=pl.String)

    return expr.map_batches(apply, return_dtype=pl.String, is_elementwise=True)


def split_header(records: pl.DataFrame, header: str) -> pl.DataFrame:
    """``records`` plus the named groups of ``header`` (a regex matched at the start of ``raw``) and
    ``msg``, the text after it (null where the header does not match).

    Only the header is captured: capture groups spanning whole records cost several times more.
    """
    groups = pl.col("raw").str.extract_groups(f"(?s)^(?P<_head>{header})").alias("_h")
    return (records.with_columns(groups).unnest("_h")
            .with_columns(pl.col("raw").str.strip_prefix(pl.col("_head")).alias("msg")).drop("_head"))


_REGISTRY: dict[str, Collector] = {}
_LOADED: list[bool] = []


def register(cls: type[Collector]) -> type[Collector]:
    """Class decorator: make a collector available under its ``name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def collectors() -> dict[str, Collector]:
    """All registered collectors, importing every public module in the ``collectors`` package once
    (a ``_module`` holds parsing helpers several collectors share, and registers none)."""
    if not _LOADED:  # every module, even when some were imported directly before
        import collectors as pkg

        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"collectors.{mod.name}")
        _LOADED.append(True)
    return _REGISTRY


def get(name: str) -> Collector:
    """The collector called ``name``; ValueError listing the known ones otherwise."""
    known = collectors()
    if name not in known:
        raise ValueError(f"unknown source {name!r}; known: {', '.join(sorted(known))}, auto")
    return known[name]


def detect(sample: list[str]) -> tuple[Collector | None, float]:
    """The collector whose format best matches ``sample`` (an input's first lines) and its score."""
    return detect_many([sample])[0][:2]


def detect_many(samples: list[list[str]]) -> list[tuple[Collector | None, float, dict[str, float]]]:
    """:func:`detect` for many inputs at once (one regex pass per collector); also every score."""
    frame = pl.DataFrame({
        "_in": pl.Series([i for i, s in enumerate(samples) for _ in range(len(s))], dtype=pl.Int64),
        "line": pl.Series([line for s in samples for line in s], dtype=pl.String),
    }).filter(pl.col("line").str.strip_chars() != "")
    ranked = sorted(collectors().values(), key=lambda c: -c.priority)
    scores = frame.group_by("_in").agg(
        [pl.col("line").str.contains(c.sniff).mean().alias(c.name) for c in ranked if c.sniff])
    by_input = {row["_in"]: row for row in scores.iter_rows(named=True)}
    out = []
    for i in range(len(samples)):
        row = by_input.get(i, {})
        best, best_score = None, 0.0
        for c in ranked:
            if (row.get(c.name) or 0.0) > best_score:
                best, best_score = c, row[c.name]
        out.append((best, best_score, {c.name: row.get(c.name) or 0.0 for c in ranked}))
    return out
