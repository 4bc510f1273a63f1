"""Records to events, pure functions: the collector's parse, then defaults, hints, rules and catalogs
(``finalize``); a parse unit's fresh events split by partition (``parse_unit``); what kernel lines
with both clocks tell of a node's boot time."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

import polars as pl

from observe import boot_copies
from observe import collector as registry
from observe import provenance, rules
from observe import timeparse as tp
from observe.collector import INPUT_BITS, Collector, Context, input_of, per_value
from observe.frames import attrs_json, merge_attrs
from observe.ingest.records import blank_lines, joined_records
from observe.pci import gpu_ids
from observe.schema import FIELDS, OUT_OF_RANGE, POLARS_SCHEMA, bounded, conform
from observe.store import buffered_parts, no_records



def short_host(expr: pl.Expr) -> pl.Expr:
    """Host names to short node names (``gpu001.cluster.local`` -> ``gpu001``); IPs kept."""
    return per_value(expr, lambda names: pl.when(names.str.contains(r"^[0-9.:]+$")).then(names)
                     .otherwise(names.str.extract(r"^([^.]+)", 1)))


def finalize(df: pl.DataFrame, c: Collector, ctx: Context, file_id: str | None = None) -> pl.DataFrame:
    """Fill defaults and hints, run the rules and catalogs, classify the rest as log/unparsed.

    ``file_id`` names the input; batches of inputs carry ``file_id`` and ``_job`` columns instead.
    """
    if "file_id" not in df.columns:
        df = df.with_columns(pl.lit(file_id, dtype=pl.String).alias("file_id"))
    job_hint = pl.col("_job") if "_job" in df.columns else pl.lit(ctx.job_id, dtype=pl.String)
    given = pl.lit(ctx.node, dtype=pl.String)  # the input's node (in a batch of many, each row's own)
    given = pl.coalesce("_node", given) if "_node" in df.columns else given
    df = df.with_columns(pl.lit(None, dtype=POLARS_SCHEMA[n]).alias(n) for n in FIELDS if n not in df.columns)
    parsed = pl.col("message").is_not_null()
    df = df.with_columns(
        parsed.alias("_ok"),
        pl.coalesce("message", "raw").alias("message"),
        short_host(pl.coalesce(pl.col("node"), given)).alias("node"),
        pl.coalesce(pl.col("job_id").cast(pl.String), job_hint).alias("job_id"),
        pl.coalesce(pl.col("source"), pl.lit(c.source)).alias("source"),
        _route(ctx, c).alias("route"),
    )
    df = bounded(df)  # a time or uptime out of range: none, with attrs.parse_error (before rules and boot times)
    df = provenance.clamp_future(_stated_time(rules.apply(df), ctx.tz))
    if provenance.user_written(ctx.route):
        # the node a user's text names, by its header or a rule's group (srun's "gpu042: task 0: Exited"), is only a
        # claim (attrs.claimed_node); its job is the one the file or --job says where one does (not a StepId it prints)
        claim = pl.when(short_host(pl.col("node")) != given.fill_null("")).then(short_host(pl.col("node")))
        df = df.with_columns(given.alias("node"), pl.coalesce(job_hint, "job_id").alias("job_id"),
                             merge_attrs(pl.col("attrs"), attrs_json([("claimed_node", claim)])).alias("attrs"))
    df = df.with_columns(
        pl.when(pl.col("kind").is_not_null()).then("kind")
        .when("_ok").then(pl.lit("log")).otherwise(pl.lit("unparsed")).alias("kind"),
        pl.coalesce("severity", pl.lit("info")).alias("severity"),
        per_value(pl.col("gpu"), gpu_ids).alias("gpu"),
    ).drop("_ok", *(c for c in ("_job", "_node") if c in df.columns))
    return conform(rules.enrich(df))


def _stated_time(df: pl.DataFrame, tz: str) -> pl.DataFrame:
    """A line with no stamp of its own that states when it happened (a rule's ``at``: slurmstepd's "CANCELLED AT
    2024-01-01T00:00:00" in a job's output) has that time: the first run's last lines of a requeued job's output
    then stay the first run's, not the next stamped line's (the second run's)."""
    undated = pl.col("ts").is_null() & pl.col("attrs").is_not_null()
    if not df.select(undated.any()).item():  # nearly every unit: its lines carry their stamps (a null check, no text)
        return df
    stated = undated & pl.col("attrs").str.contains('"at":"', literal=True).fill_null(False)
    if not df.select(stated.any()).item():
        return df
    return df.with_columns(pl.when(stated).then(tp.iso(pl.col("attrs").str.json_path_match("$.at"), tz))
                           .otherwise("ts").alias("ts"))


def _route(ctx: Context, c: Collector) -> pl.Expr:
    """Each record's route: the input's, or where the input itself is trusted (or is a stream of
    entries with no route of its own) the route a record says it took (journald's entries): a file a
    user may write cannot make its lines the kernel's."""
    given = pl.lit(provenance.input_route(ctx.route, c.relayed), dtype=pl.String)
    return pl.coalesce(pl.col("route"), given) if ctx.route is None or provenance.is_trusted(ctx.route) else given


def parse_bytes(data: bytes, source: str, ctx: Context) -> pl.DataFrame:
    """Events of one input's bytes parsed as ``source``, without a store (what checks and hooks read)."""
    fields = fields_of(data, source, ctx)
    return conform(pl.DataFrame()) if fields is None else finalize(fields, registry.get(source), ctx, "local")


def fields_of(data: bytes, source: str, ctx: Context) -> pl.DataFrame | None:
    """The fields ``source``'s collector reads from its own format in one input's bytes (a syslog header's
    host), before rules and defaults; None for bytes with no record."""
    if not data.strip():
        return None
    c = registry.get(source)
    recs = joined_records([data if data.endswith(b"\n") else data + b"\n"], c)
    return c.parse(recs.filter(~blank_lines(recs.get_column("raw"))), ctx)


@dataclass(frozen=True)
class ParseInput:
    """One input inside a parse unit: its identity, job and node hints and offsets already stored, and
    what the store's retention dropped (records before ``kept_from``; those without a time too when
    ``old``: the input's file was last written before it)."""

    file_id: str
    job: str | None
    node: str | None = None
    reference: datetime | None = None  # what dates its stamps without a year, where it differs from the unit's
    known: pl.DataFrame = field(default_factory=no_records)  # offset, text (hash of raw) already stored
    kept_from: datetime | None = None
    old: bool = False


@dataclass
class Parsed:
    """A parsed unit, ready to store: its fresh records by partition and what the summary counts."""

    parts: dict[tuple[str, str], pl.DataFrame] = field(default_factory=dict)
    blank: int = 0
    records: int = 0
    unparsed: int = 0
    duplicates: int = 0
    expired: int = 0
    stored: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    boots: dict[str, datetime] = field(default_factory=dict)  # what dates this input's later records
    copies: pl.DataFrame | None = None  # its kernel records with both clocks: what dates the run's dmesg files
    nbytes: int = 0  # the unit's text, which its rows (views into it) keep alive
    quarantined: int = 0  # records no parse could read, stored unparsed (attrs.parse_error)
    error: str = ""  # the first such record's reason
    bisections: int = 0
    no_node: int = 0  # records of a node's own log (kernel, GPU) that name no node: neither their lines nor a hint did
    yearless: int = 0  # records whose stamps carry no year, dated by the file's modification time's year
    years: set[int] = field(default_factory=set)  # those years


def parse_unit(recs: pl.DataFrame, inputs: list[ParseInput], c: Collector, ctx: Context) -> Parsed:
    """Parse, classify, drop what the store already holds and split by partition (on a worker)."""
    references = tuple(i.reference or ctx.reference_time for i in inputs)
    if len(set(references)) > 1:  # small files parsed together, each dated by its own last write
        ctx = replace(ctx, references=references)
    blank = blank_lines(recs.get_column("raw"))
    if blank.any():
        recs = recs.filter(~blank)
    if not recs.height:
        return Parsed(blank=int(blank.sum()))
    done = Parsed(blank=int(blank.sum()))

    def events(part: pl.DataFrame) -> pl.DataFrame:
        out = _events(part, inputs, c, ctx)
        _count_out_of_range(out, done)
        return out

    out = pl.concat(contained(recs, events, lambda r, why: _quarantined(r, why, inputs, c, ctx), done), how="vertical_relaxed")
    order, out = out.get_column("_order"), out.drop("_order")  # file order (a batch: input by input)
    done.records, done.kinds = out.height, dict(out.get_column("kind").value_counts().iter_rows())
    done.nbytes = int(recs.get_column("raw").str.len_bytes().sum())
    done.unparsed = done.kinds.get("unparsed", 0)
    known = [i.known.with_columns(pl.lit(i.file_id).alias("file_id")) for i in inputs if i.known.height]
    if known:  # a record is a duplicate only if the same input holds the same text at that offset
        keyed = out.with_columns(pl.col("raw").hash().alias("text"), order.alias("_order"))
        fresh = keyed.join(pl.concat(known), on=["file_id", "offset", "text"], how="anti", maintain_order="left")
        done.duplicates = out.height - fresh.height
        out, order = fresh.drop("text", "_order"), fresh.get_column("_order")
    if inputs[0].kept_from is not None:  # a re-ingest of an old file does not bring back what retention dropped
        old = [i.file_id for i in inputs if i.old]
        gone = out.select((pl.col("ts") < inputs[0].kept_from).fill_null(pl.col("file_id").is_in(old))).to_series()
        if gone.any():
            done.expired = int(gone.sum())
            out, order = out.filter(~gone), order.filter(~gone)
    done.stored = out.height
    done.no_node = int(out.select(pl.col("node").is_null() & pl.col("source").is_in(NODE_OWN)).to_series().sum())
    if not ctx.year_given and YEARLESS.match(recs.get_column("raw")[0] or ""):  # a unit's lines are of one format
        done.yearless = out.height
        done.years = {t.year for t in references}
    done.copies = boot_copies.learned(out)
    done.boots = boot_copies.boot_times(done.copies)
    done.parts = buffered_parts(out, order, ctx.tz)
    return done


# stamps without a year: RFC 3164 syslog ("Nov 22 10:00:00"), glog ("I1122 10:00:00.123456")
YEARLESS = re.compile(r"^(?:<\d{1,3}>)?(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d)")
NODE_OWN = ["kernel", "gpu"]  # sources whose records are one node's: without a node they are no one's


# A parse unit's records are bisected at most this many times to find the ones a parser fails on;
# past it, a failing part is set aside whole (a collector failing on every record costs no more).
BISECTIONS = 256


def contained(recs: pl.DataFrame, events: Callable[[pl.DataFrame], pl.DataFrame],
              aside: Callable[[pl.DataFrame, str], pl.DataFrame], done: Parsed) -> list[pl.DataFrame]:
    """``events`` of ``recs``; where it raises, of each half, down to the records it fails on alone,
    which ``aside`` stores as unparsed with the reason (``done.quarantined`` counts them, ``done.error``
    keeps the first reason). One record a parser cannot read never takes its neighbours, its input or
    the run with it, and never stops a collector on the same bytes again.

    A unit of many inputs (small files parsed together, whatever their nodes) is first cut between
    inputs, halving the inputs, outside the bisections' budget (at most twice as many parses as inputs):
    one input's records never set aside another's, nor parse in a part without the rest of their own
    input (a job's output dates its stamps by its own lines; attack-31 r1, r2)."""
    try:
        return [events(recs)]
    except (Exception, pl.exceptions.PanicException) as exc:  # polars' panics are BaseExceptions
        why = f"{type(exc).__name__}: {exc}"[:300]
        inputs = input_of(recs.get_column("offset"))  # in order: the unit's inputs one after another
        if inputs[0] != inputs[-1]:
            cut = int(inputs.search_sorted((inputs[0] + inputs[-1] + 1) // 2, side="left"))
            return contained(recs[:cut], events, aside, done) + contained(recs[cut:], events, aside, done)
        if recs.height == 1 or done.bisections >= BISECTIONS:
            done.quarantined += recs.height
            done.error = done.error or why
            return [aside(recs, why)]
        done.bisections += 1
        half = recs.height // 2
        return contained(recs[:half], events, aside, done) + contained(recs[half:], events, aside, done)


def _events(recs: pl.DataFrame, inputs: list[ParseInput], c: Collector, ctx: Context) -> pl.DataFrame:
    """The collector's parse, each input's hints, ``finalize``; ``_order``: the records' file order."""
    out = c.parse(recs, ctx)
    order = out.get_column("offset")
    return finalize(_with_inputs(out, inputs), c, ctx).with_columns(order.alias("_order"))


def _count_out_of_range(out: pl.DataFrame, done: Parsed) -> None:
    """Records a value of which was out of range (stored, that value left out: :func:`observe.schema.bounded`)
    count as quarantined, the first one's reason kept."""
    mark = out.get_column("attrs").str.contains(f'"parse_error":"{OUT_OF_RANGE}', literal=True).fill_null(False)
    n = int(mark.sum())
    if n:
        done.quarantined += n
        done.error = done.error or json.loads(out.get_column("attrs").filter(mark)[0])["parse_error"]


def _quarantined(recs: pl.DataFrame, why: str, inputs: list[ParseInput], c: Collector, ctx: Context) -> pl.DataFrame:
    """Records no parse could read, as unparsed events of their input with ``attrs.parse_error``."""
    out = recs.select("raw", "offset", pl.col("raw").alias("message"), pl.lit("unparsed").alias("kind"),
                      pl.lit(c.source).alias("source"), pl.lit("info").alias("severity"),
                      pl.lit(provenance.input_route(ctx.route, c.relayed), dtype=pl.String).alias("route"),
                      attrs_json([("parse_error", pl.lit(why))]).alias("attrs"))
    out = _with_inputs(out, inputs).with_columns(
        pl.col("_job").alias("job_id"), pl.coalesce("_node", pl.lit(ctx.node, dtype=pl.String)).alias("node"))
    return conform(out.drop("_job", "_node")).with_columns(recs.get_column("offset").alias("_order"))


def _with_inputs(out: pl.DataFrame, inputs: list[ParseInput]) -> pl.DataFrame:
    """``file_id``, ``_job`` and ``_node`` (the job and node hints) of each row's input."""
    if len(inputs) == 1:
        return out.with_columns(pl.lit(inputs[0].file_id).alias("file_id"), pl.lit(inputs[0].job, dtype=pl.String).alias("_job"),
                                pl.lit(inputs[0].node, dtype=pl.String).alias("_node"))
    # the input's index rides in the offset's high bits through the collector
    hints = pl.DataFrame({"_in": range(len(inputs)), "file_id": [i.file_id for i in inputs],
                          "_job": [i.job for i in inputs], "_node": [i.node for i in inputs]},
                         schema={"_in": pl.Int64, "file_id": pl.String, "_job": pl.String, "_node": pl.String})
    out = out.with_columns(input_of(pl.col("offset")).alias("_in"), (pl.col("offset") % (1 << INPUT_BITS)).alias("offset"))
    return out.join(hints, on="_in", how="left", maintain_order="left").drop("_in")
