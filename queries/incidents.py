"""Cluster incidents: fault events that belong together across nodes, with their blast radius and
the jobs they hit. 32 nodes losing their IB link within a minute is one incident with a likely
shared cause (a switch), not 32 problems."""
from __future__ import annotations

from datetime import timedelta

import polars as pl

from observe import provenance, sessions
from queries import jobs
from queries.causes import load_causes
from observe.hostlists import compact_nodes

GAP = timedelta(seconds=60)  # nodes whose faults of one category begin this close are one incident
LINGER = timedelta(minutes=15)  # repeats of a category on one node this close are one episode
SHARED = 3  # nodes hit at once from which a shared cause (switch, power, fabric) is likelier


def kinds_read() -> list[str]:
    """The only kinds :func:`incidents` looks at (catalogued causes, job runs): a search for them
    finds the same incidents, and reads two rows in a thousand of a fleet's store."""
    return sorted(set(load_causes().kinds()) | set(jobs.RUN_KINDS))


def faults(events: pl.LazyFrame, trusted_only: bool = False) -> pl.LazyFrame:
    """Events that are faults of the infrastructure in their own right: catalogued causes that are
    not symptoms, not the job's own fault (category user) and at least ``min_prior`` probable causes
    (causes.toml [nodes]), with ``trusted``: whether a trusted route carried them. A kernel line that came
    through a syslog file is evidence (the common central-syslog setup), shown unconfirmed; what acts or
    alerts passes ``trusted_only`` (a user's forged kernel line is no incident it pages for)."""
    causes = load_causes()
    ev = events.filter(pl.col("ts").is_not_null(), pl.col("node").is_not_null(), pl.col("kind").is_in(causes.kinds()))
    if trusted_only:
        ev = ev.filter(provenance.trusted())
    return ev.with_columns(provenance.trusted().alias("trusted")).collect().pipe(causes.annotate).filter(
        ~pl.col("symptom"), pl.col("prior") >= causes.nodes["min_prior"], pl.col("category") != "user").lazy()


def incidents(events: pl.LazyFrame, gap: timedelta = GAP, linger: timedelta = LINGER,
              trusted_only: bool = False) -> pl.DataFrame:
    """One row per incident, oldest first: when, what (category, kinds), where (nodes), how many
    events, which job runs it hit, whether a shared cause is likely, and whether it is ``unconfirmed``
    (no line of it came by a trusted route: see :func:`faults`).

    A node's repeated reports (slurmctld's "not responding" every 100 s) are one episode; episodes
    of one category on different nodes that begin within ``gap`` of each other are one incident.
    """
    found = faults(events, trusted_only).collect()
    if found.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    # trusted lines and untrusted ones make episodes and incidents apart: forged lines neither merge, stretch
    # nor hide what a trusted route carried
    episodes = (grouped_sessions(found, ["node", "category", "trusted"], "ts", linger)
                .agg(pl.col("ts").min().alias("start"), pl.col("ts").max().alias("end"),
                     pl.col("kind").unique(maintain_order=True), pl.len().alias("events")))
    grouped = (grouped_sessions(episodes, ["category", "trusted"], "start", gap)
               .agg(pl.col("start").min(), pl.col("end").max(),
                    pl.col("kind").list.explode(keep_nulls=False, empty_as_null=False).unique(maintain_order=True).str.join(",").alias("kinds"),
                    pl.col("node").n_unique().cast(pl.UInt32).alias("nodes"),
                    pl.col("node").unique().sort().alias("_nodes"), pl.col("events").sum().cast(pl.UInt32))
               .with_columns((~pl.col("trusted")).alias("unconfirmed"))
               .sort("start", "unconfirmed"))
    runs = jobs.runs(events)
    hit = [jobs.on_nodes(runs, row["_nodes"], row["start"], row["end"]).get_column("job_id").unique().sort().to_list()
           for row in grouped.select("_nodes", "start", "end").iter_rows(named=True)]
    return grouped.with_columns(
        pl.Series("jobs", hit, dtype=pl.List(pl.String)),
        pl.col("_nodes").map_elements(compact_nodes, return_dtype=pl.String).alias("nodelist"),
        (pl.col("nodes") >= SHARED).alias("shared_cause"),
    ).with_row_index("incident", offset=1).select(list(SCHEMA))


def grouped_sessions(df: pl.DataFrame, by: list[str], ts: str, gap: timedelta):
    """``df`` grouped by ``by`` plus session: rows within ``gap`` of the previous one stay together."""
    # ties stay as they came: a group's first row is the same however the rows were read
    keyed = df.sort(*by, ts, maintain_order=True).with_columns(
        sessions.numbered(ts, by, gap, undated_starts=True).alias("_session"))
    return keyed.group_by(*by, "_session", maintain_order=True)


SCHEMA = {"incident": pl.UInt32, "start": pl.Datetime("us", "UTC"), "end": pl.Datetime("us", "UTC"),
          "category": pl.String, "kinds": pl.String, "nodes": pl.UInt32, "nodelist": pl.String,
          "events": pl.UInt32, "jobs": pl.List(pl.String), "shared_cause": pl.Boolean, "unconfirmed": pl.Boolean}
