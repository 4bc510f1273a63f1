"""The fault policy: fault lines in, one decision per fault episode out (policy.toml [faults]).

- Dedup: lines of one fault (node, GPU, kind, code) closer than ``dedup_window`` are one episode, so
  800,000 Xid 95 lines in 29 bursts are 29 episodes, each with its line count.
- Remedy: an Xid's comes from the Xid catalog's action ([faults.xid_remedy]; an NVLink Xid whose line
  says Fatal takes the catalog's ``fatal_action``; Xid 154 the recovery action its line states,
  [faults.recovery_action]), other kinds' from [faults.kinds].
- Recovery: a later recovery event (a reboot, the driver loading, ``observe health set-healthy``)
  ends the episodes before it, on its GPU or, when it names none, on the whole node. A kind with
  ``cleared_by`` also ends at that event (same node and ``match`` attrs) once ``quiet`` has passed.
- Ladder: a fault that comes back after a recovery within ``repeat_window`` climbs one rung
  (reset -> reboot -> replace); ``repeat_count`` episodes in the window, or ``remediation_count``
  remediations of the node within ``remediation_window``, call for replace (hardware inspection/RMA).
- Application Xids (the Xid catalog's category ``application``: 13, 31, 43, ...) are the job's, however
  often they come: a user can make their own code fault the GPU at will. An Xid the catalog files under
  the GPU, memory or NVLink that only asks to restart the application (94, a contained ECC error) is
  hardware once it keeps hitting one GPU alone.
- Faults that ended before the last drain-breaker reset are stale: reported, never acted on.

Every step is a polars expression over the events, so a fleet's partitions can be decided apart.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl

from observe import provenance, sessions
from observe.rules import xid_action
from observe.health.policy import Faults
from observe.spans import parse_span

REMEDIES = ("none", "report", "app", "drain", "reset", "reboot", "replace")  # gravity order
ACTING = ("drain", "reset", "reboot", "replace")  # remedies that take the node out of service
CHECK_ACTION = {"reset": "reset", "reboot": "reboot", "replace": "drain", "drain": "drain"}  # a check's FAIL action
KEY = ["node", "gpu", "kind", "code"]
EPOCH = datetime(1970, 1, 1)
PROCESS_GRACE = timedelta(hours=1)  # an Xid's pid is that job's process if it logged within this of the Xid


def _attr(name: str) -> pl.Expr:
    return pl.col("attrs").str.json_path_match(f"$.{name}")


def _gravity(expr: pl.Expr) -> pl.Expr:
    return expr.replace_strict(list(REMEDIES), list(range(len(REMEDIES))), default=0, return_dtype=pl.Int8)


def _remedy(gravity: pl.Expr) -> pl.Expr:
    return gravity.replace_strict(list(range(len(REMEDIES))), list(REMEDIES), return_dtype=pl.String)


def fault_lines(events: pl.LazyFrame, rules: Faults) -> pl.LazyFrame:
    """The events that are faults, each with its first remedy and drain-reason category."""
    kinds = rules.kinds
    xid_remedy = rules.xid_remedy
    action = xid_action()
    stated = rules.recovery_action  # Xid 154's own words win over the catalog
    remedy = pl.when((pl.col("kind") == "gpu_xid") & _attr("recovery_action").is_in(list(stated))).then(
        _attr("recovery_action").replace_strict(list(stated), list(stated.values()), default=None, return_dtype=pl.String)
    ).when(pl.col("kind") == "gpu_xid").then(
        action.replace_strict(list(xid_remedy), list(xid_remedy.values()), default="report", return_dtype=pl.String))
    category = pl.when(pl.col("kind") == "gpu_xid").then(pl.lit("hardware"))
    for kind, spec in kinds.items():
        hit = pl.col("kind") == kind
        for name, value in spec.get("when", {}).items():  # only lines whose attrs say so
            hit = hit & (_attr(name) == str(value)).fill_null(False)
        for name, values in spec.get("unless", {}).items():  # not lines whose attrs say one of these
            hit = hit & ~_attr(name).is_in([str(v) for v in values]).fill_null(False)
        remedy = remedy.when(hit).then(pl.lit(spec["remedy"]))
        category = category.when(hit).then(pl.lit(spec["category"]))
    return (events.filter(pl.col("kind").is_in(["gpu_xid", *kinds]))
            .with_columns(remedy.alias("remedy"), category.alias("category"))
            .filter(pl.col("remedy").is_not_null() & (pl.col("remedy") != "none")))


def with_jobs(lines: pl.LazyFrame, events: pl.LazyFrame, grace: timedelta = PROCESS_GRACE) -> pl.LazyFrame:
    """``lines`` with ``job_id`` filled where a line names none: the job whose process it names (an
    Xid's ``pid`` among that job's logged lines on the node: the latest to start before the line and
    log within ``grace`` of it, or, for output without times, the only job that pid logged for), else
    the job that held its GPU (the last ``gpu_allocated`` of that GPU before the line, not
    ``gpu_released`` since)."""
    logged = (events.filter(pl.col("job_id").is_not_null() & pl.col("pid").is_not_null() & pl.col("node").is_not_null())
              .group_by("node", "pid", "job_id")
              .agg(pl.col("ts").min().alias("_p0"), pl.col("ts").max().alias("_p1"))
              .collect().lazy())
    procs = (logged.filter(pl.col("_p0").is_not_null())
             .select("node", "pid", pl.col("job_id").alias("_pjob"), "_p0", "_p1").sort("_p0"))
    undated = (logged.filter(pl.len().over("node", "pid") == 1)  # output without times (most NCCL lines):
               .select("node", "pid", pl.col("job_id").alias("_ujob")))  # only a pid no other job had
    held = (events.filter(pl.col("kind").is_in(["gpu_allocated", "gpu_released"]) & pl.col("ts").is_not_null())
            .select("node", "gpu", pl.col("ts").alias("_h"),
                    pl.when(pl.col("kind") == "gpu_allocated").then(pl.col("job_id")).alias("_hjob")).sort("_h"))
    dated = pl.col("ts").is_not_null()
    found = (lines.filter(dated).with_row_index("_i").sort("ts")
             .join_asof(procs, left_on="ts", right_on="_p0", by=["node", "pid"], strategy="backward",
                        check_sortedness=False)
             .join_asof(held, left_on="ts", right_on="_h", by=["node", "gpu"], strategy="backward",
                        check_sortedness=False)
             .join(undated, on=["node", "pid"], how="left")
             .with_columns(pl.coalesce("job_id", pl.when(pl.col("ts") <= pl.col("_p1") + grace).then("_pjob"), "_ujob",
                                       "_hjob").alias("job_id"))
             .sort("_i").drop("_i", "_pjob", "_p0", "_p1", "_ujob", "_h", "_hjob"))
    return pl.concat([found, lines.filter(~dated)], how="vertical_relaxed")


def episodes(lines: pl.LazyFrame, window: timedelta) -> pl.LazyFrame:
    """Fault lines folded into episodes: lines of one (node, GPU, kind, code) closer than ``window``
    are one, unless a recovery (``_epoch``: the time of the last one before the line) came between;
    with their first and last time and count (undated lines join their fault's first)."""
    epoch = pl.col("_epoch").fill_null(EPOCH)
    recovered = (epoch != epoch.shift().over(KEY)).fill_null(False)
    pid = pl.col("pid").cast(pl.String)
    return (lines.sort([*KEY, "ts"], nulls_last=False)
            .with_columns((sessions.starts("ts", KEY, window, undated_starts=False) | recovered).cum_sum().alias("_episode"))
            .with_columns(_attr("process").alias("_process"),
                          pl.col("message").str.extract(r"GPC (\d+), TPC (\d+)", 0).alias("_loc"))
            .group_by([*KEY, "_episode"])
            .agg(pl.col("ts").min().alias("first_ts"), pl.col("ts").max().alias("last_ts"), pl.len().alias("lines"),
                 pl.col("remedy").first(), pl.col("category").first(), pl.col("message").first(),
                 pl.col("attrs").first(), pl.col("job_id").drop_nulls().unique().sort().alias("jobs"),
                 pl.concat_str(pl.col("_process"), pid, separator=":").drop_nulls().unique().sort().alias("processes"),
                 pl.col("_loc").drop_nulls().mode().first().alias("location"))
            .drop("_episode"))


def _ended_by(eps: pl.LazyFrame, ends: pl.LazyFrame, by: list[str], name: str, at: str = "_at") -> pl.LazyFrame:
    """``eps`` with ``name``: the time of the first event of ``ends`` after each episode (its ``at``), equal on ``by``."""
    ends = ends.select(*by, pl.col("ts").alias(name)).drop_nulls().sort(name)
    return (eps.with_row_index("_i").sort(at)
            .join_asof(ends, left_on=at, right_on=name, by=by, strategy="forward", allow_exact_matches=False,
                       check_sortedness=False)
            .sort("_i").drop("_i"))


def _epochs(lines: pl.LazyFrame, recov: pl.LazyFrame) -> pl.LazyFrame:
    """``lines`` with ``_epoch``: the time of the last recovery (of the node, or of the line's GPU) before each."""
    out = lines.with_row_index("_i").sort("ts")
    names = []
    gpu = pl.col("gpu").is_not_null()
    scopes = ((["node"], recov.filter(~gpu)), (["node", "gpu"], recov.filter(gpu)))
    for by, part in scopes:
        name = f"_e{len(names)}"
        ends = part.select(*by, pl.col("ts").alias(name)).drop_nulls().sort(name)
        out = out.join_asof(ends, left_on="ts", right_on=name, by=by, strategy="backward", check_sortedness=False)
        names.append(name)
    return out.with_columns(pl.max_horizontal(*names).alias("_epoch")).drop(*names).sort("_i").drop("_i")


def _ends(eps: pl.LazyFrame, events: pl.LazyFrame, recov: pl.LazyFrame, rules: Faults, now: datetime) -> pl.LazyFrame:
    """``eps`` with ``ended_at`` and ``ended``: what ended each episode, a recovery on its GPU or
    node, or its kind's clearing event once quiet. A line without a time is ended only by a person's
    statement (source health), which covers all before it."""
    ends = []
    for said in (True, False):
        mine = recov.filter((pl.col("source") == "health") == said)
        at = "_at" if said else "last_ts"
        eps = _ended_by(eps, mine.filter(pl.col("gpu").is_null()), ["node"], f"_node_end{said:d}", at)
        eps = _ended_by(eps, mine.filter(pl.col("gpu").is_not_null()), ["node", "gpu"], f"_gpu_end{said:d}", at)
        ends += [f"_node_end{said:d}", f"_gpu_end{said:d}"]
    ended = pl.min_horizontal(*ends)
    ended_how = pl.when(ended.is_null()).then(None) \
        .when((ended == pl.col("_gpu_end1")) | (ended == pl.col("_gpu_end0"))).then(pl.lit("recovery on the GPU")) \
        .otherwise(pl.lit("recovery on the node"))
    clears = []
    for kind, spec in rules.kinds.items():
        if not spec.get("cleared_by"):
            continue
        match, col = list(spec.get("match", [])), f"_clear{len(clears)}"
        clear = events.filter(pl.col("kind") == spec["cleared_by"]).with_columns(_attr(m).alias(m) for m in match)
        mine = eps.filter(pl.col("kind") == kind).with_columns(_attr(m).alias(m) for m in match)
        quiet = now - parse_span(str(spec.get("quiet", "0s")))
        mine = _ended_by(mine, clear, ["node", *match], col).drop(match).with_columns(
            pl.when(pl.col("_at") <= quiet).then(col).alias(col))
        eps = pl.concat([eps.filter(pl.col("kind") != kind), mine], how="diagonal_relaxed")
        ended_how = pl.when(pl.col(col).is_not_null() & (ended.is_null() | (pl.col(col) < ended))) \
            .then(pl.lit(f"{spec['cleared_by']}, then quiet")).otherwise(ended_how)
        ended = pl.min_horizontal(ended, col)
        clears.append(col)
    eps = eps.with_columns(ended.alias("ended_at"), ended_how.alias("ended")).drop(*ends, *clears)

    return eps


def decide(events: pl.LazyFrame, rules: Faults, now: datetime, breaker_reset: datetime | None = None,
           confirmed: bool = True) -> pl.DataFrame:
    """One row per fault episode in ``events``: what it is, how many lines, whether it is still open
    (``ended`` says what ended it), its ``remedy`` and the drain-reason ``category``, ``acting``
    (an open fault whose remedy takes the node out, not observe-only, not stale) and ``reason``.

    Faults, recoveries and remediations come only from trusted routes (:mod:`observe.provenance`):
    a user's ``logger -t kernel 'NVRM: Xid ...'`` neither opens a fault nor ends one. Any event may
    tie an Xid's process to its job. ``confirmed=False`` decides the faults only routes users write
    carried instead (a kernel line in a syslog file): evidence to verify with an active check, never
    acting; a recovery from any route ends them."""
    now = now.astimezone(timezone.utc).replace(tzinfo=None) if now.tzinfo else now
    everything = events.with_columns(pl.col("ts").dt.replace_time_zone(None))
    events = everything.filter(provenance.trusted()) if confirmed else everything
    # the few recoveries and episodes are collected once: every step below reads them again
    recov = events.filter(pl.col("kind").is_in(list(rules.recovery))).select("node", "gpu", "ts", "source") \
        .collect().lazy()
    carried = events if confirmed else everything.filter(~provenance.trusted())
    lines = _epochs(with_jobs(fault_lines(carried, rules), everything), recov)
    eps = episodes(lines, rules.dedup_window).with_columns(pl.col("last_ts").fill_null(EPOCH).alias("_at")) \
        .collect().lazy()

    eps = _ends(eps, events, recov, rules, now)

    # repetition: episodes of the same fault in the window before each, and how many of them ended
    repeat = rules.repeat_window
    eps = eps.sort([*KEY, "_at"]).with_columns(
        pl.col("_at").is_not_null().cast(pl.Int32).rolling_sum_by("_at", repeat).over(KEY).alias("episodes"),
        pl.col("ended_at").is_not_null().cast(pl.Int32).rolling_sum_by("_at", repeat).over(KEY).alias("_ended_n"))
    eps = eps.with_columns((pl.col("_ended_n") - pl.col("ended_at").is_not_null().cast(pl.Int32)).alias("_came_back"))

    # remediations of the node in the window before each episode
    fixes = (events.filter((pl.col("kind") == "fault_cleared") & _attr("remedy").is_in(list(rules.ladder)))
             .select("node", pl.col("ts").alias("_at"), pl.lit(1).alias("_fix")))
    fixed = (pl.concat([eps.select("node", "_at", pl.lit(0).alias("_fix"), pl.int_range(pl.len()).alias("_i")),
                        fixes.with_columns(pl.lit(None, dtype=pl.Int64).alias("_i"))], how="diagonal_relaxed")
             .sort("_at").with_columns(pl.col("_fix").rolling_sum_by("_at", rules.remediation_window)
                                       .over("node").alias("remediations"))
             .filter(pl.col("_i").is_not_null()).sort("_i").select("remediations"))
    eps = pl.concat([eps, fixed], how="horizontal")

    # Xids left to the application: the job's; hardware only when the catalog files them elsewhere (no
    # category: not known to be hardware) and one GPU alone keeps getting them
    app = pl.col("remedy") == "app"
    suspect = app & (_attr("category") != "application").fill_null(False)
    eps = eps.sort("_at").with_columns(
        pl.when(suspect).then(1).otherwise(0).rolling_sum_by("_at", repeat).over(["node", "gpu"]).alias("_app_gpu"))
    gpus = (eps.filter(suspect).group_by("node").agg(pl.col("gpu").n_unique().alias("_app_gpus")))
    eps = eps.join(gpus, on="node", how="left")
    on_one = suspect & (pl.col("_app_gpu") >= rules.app_repeat_count) & (pl.col("_app_gpus") == 1)

    ladder = list(list(rules.ladder))
    rung = pl.col("remedy").replace_strict(ladder, list(range(len(ladder))), default=None, return_dtype=pl.Int32)
    climbed = pl.min_horizontal(rung + pl.col("_came_back"), pl.lit(len(ladder) - 1))
    replace = (pl.col("episodes") >= rules.repeat_count) | \
        (pl.col("remediations") >= rules.remediation_count)
    first = pl.col("remedy")
    remedy = (pl.when(on_one).then(pl.lit("drain"))
              .when(rung.is_not_null() & replace).then(pl.lit(ladder[-1]))
              .when(rung.is_not_null())
              .then(climbed.replace_strict(list(range(len(ladder))), ladder, return_dtype=pl.String))
              .otherwise(first))
    category = pl.when(on_one).then(pl.lit("hardware")).when(app).then(pl.lit("user")).otherwise("category")
    observe_only = pl.lit(False)
    for entry in rules.observe_only:
        kind, _, code = str(entry).partition(":")
        hit = pl.col("kind") == ("gpu_xid" if kind == "xid" else kind)
        observe_only = observe_only | ((hit & (pl.col("code") == int(code))) if code else hit)
    stale = pl.lit(False) if breaker_reset is None else pl.col("_at") <= breaker_reset.replace(tzinfo=None)
    eps = eps.with_columns(remedy.alias("remedy_now"), category.alias("category"),
                           observe_only.alias("observe_only"), stale.alias("stale"),
                           pl.col("ended_at").is_null().alias("open"))
    eps = eps.with_columns((pl.col("open") & pl.col("remedy_now").is_in(ACTING) & ~pl.col("observe_only")
                            & ~pl.col("stale") & confirmed).alias("acting"), pl.lit(confirmed).alias("confirmed"))
    return (eps.with_columns(_reason().alias("reason"))
            .select("node", "gpu", "kind", "code", "first_ts", "last_ts", "lines", "episodes", "remediations",
                    "open", "ended", "ended_at", pl.col("remedy").alias("first_remedy"),
                    pl.col("remedy_now").alias("remedy"),
                    "category", "acting", "confirmed", "observe_only", "stale", "reason", "message", "jobs", "processes",
                    "location")
            .sort("node", "first_ts", "gpu", "kind", "code", nulls_last=False)
            .collect())


def _reason() -> pl.Expr:
    """A one-line reason: what, where, how often, and why this remedy."""
    what = pl.when(pl.col("kind") == "gpu_xid").then(pl.format("Xid {}", pl.col("code"))).otherwise(pl.col("kind"))
    where = pl.when(pl.col("gpu").is_not_null()).then(pl.format(" on {}", pl.col("gpu"))).otherwise(pl.lit(""))
    why = (pl.when((pl.col("remedy") == "app") & (pl.col("remedy_now") == "drain"))
           .then(pl.lit("; keeps hitting this GPU alone: field diagnostics"))
           .when(pl.col("remedy_now") == "replace").then(
               pl.format("; {} episodes in the repeat window, {} remediations of the node: hardware inspection / RMA",
                         pl.col("episodes"), pl.col("remediations")))
           .when(pl.col("remedy_now") != pl.col("remedy")).then(pl.format("; came back after {} recoveries",
                                                                           pl.col("_came_back")))
           .otherwise(pl.lit("")))
    lines = pl.when(pl.col("lines") > 1).then(pl.format(" ({} lines)", pl.col("lines"))).otherwise(pl.lit(""))
    return pl.format("[{}] {}{}{}: {}{}", pl.col("category"), what, where, lines, pl.col("remedy_now"), why)


def verdict(decisions: pl.DataFrame) -> pl.DataFrame:
    """Per node: the gravest acting remedy and its reasons (nodes with nothing to act on are left out)."""
    acting = decisions.filter("acting").with_columns(_gravity(pl.col("remedy")).alias("_g"))
    return (acting.sort("_g", "last_ts", descending=[True, False])
            .group_by("node", maintain_order=True)
            .agg(_remedy(pl.col("_g").max()).alias("remedy"), pl.col("category").first(),
                 pl.col("reason").alias("reasons"), pl.col("gpu").drop_nulls().unique().sort().alias("gpus"))
            .sort("node"))
