"""Where an analysis runs: in this process with polars (the default), or on a Ray cluster with the
same polars functions (``--engine ray`` or ``OBSERVE_ENGINE=ray``; ``--ray-address`` or
``RAY_ADDRESS`` names a running cluster, else a local one is started with this machine's cores).

On Ray an analysis runs in two rounds of tasks. Readers each scan a share of the segments the
table's log names for the search (partitions pruned by the log, row groups by the filters, as the
embedded engine reads them) and split the matching rows by node into buckets. Then one task per
bucket runs the analysis, the same function the embedded engine calls, on every matching row of
its nodes. The analyses run this way read one node's events together and no other's (a search, with
its copies of one record found per node; flaky nodes and GPUs), so the buckets' results together
are the whole result; they are concatenated and put in the analysis's order. An analysis across
nodes (incidents) gets every row the readers found in one task: it reads only the faults' kinds.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import polars as pl

from observe.store import Store
from queries.search import Match

ENGINES = ("polars", "ray")
Analysis = Callable[[pl.LazyFrame], pl.DataFrame]


class EngineError(ValueError):
    """An engine that cannot run here (unknown, or Ray not installed or not reachable)."""


@dataclass(frozen=True)
class Order:
    """How an analysis sorts its result: applied again to the buckets' results put together."""

    by: tuple[str, ...]
    descending: tuple[bool, ...] | bool = False

    def apply(self, df: pl.DataFrame | pl.LazyFrame):
        descending = list(self.descending) if isinstance(self.descending, tuple) else self.descending
        return df.sort(list(self.by), descending=descending, nulls_last=True)


@dataclass(frozen=True)
class Engine:
    name: str = "polars"
    address: str | None = None
    buckets: int = 0  # node buckets on Ray (0: two per CPU of the cluster)

    def by_node(self, store: Store, match: Match, analysis: Analysis, order: Order) -> pl.DataFrame:
        """``analysis`` of the events ``match`` finds in ``store`` (as :meth:`Match.events` gives
        them), computed here or in node buckets on Ray: the same frame either way."""
        if self.name == "polars":
            return _here(store, match, analysis)
        return order.apply(_on_ray(self, store, match, analysis))

    def together(self, store: Store, match: Match, analysis: Analysis) -> pl.DataFrame:
        """``analysis`` of every event ``match`` finds at once, for analyses across nodes (incidents
        join episodes of many nodes by time). On Ray the readers scan in parallel and one task runs
        the analysis on all they found: for searches that keep few rows (a kind filter keeps a
        fleet's faults and job runs, two rows in a thousand), not for every message of a month."""
        if self.name == "polars":
            return _here(store, match, analysis)
        return _on_ray(replace(self, buckets=1), store, match, analysis)

    def map_files(self, store: Store, files: list, read: Callable[..., Any], *args: Any, share: int = 256) -> Iterator[Any]:
        """``read(store, some_files, *args)`` for ``files`` in shares of at most ``share``, in the files'
        order: here one share after another (memory bounded by a share), on Ray every share at once.
        For reads whose results add up (counts per key, a few kept rows)."""
        shares = [files[i:i + share] for i in range(0, len(files), share)]
        pool = self.pool()
        if pool is None:
            yield from (read(store, s, *args) for s in shares)
        else:
            yield from pool.map(_read_files, repeat(store.location), repeat(read), shares, repeat(args))

    def pool(self) -> RayPool | None:
        """Where work in many independent parts runs (a compaction's partitions): None for here, one
        after another; on Ray, every part at once."""
        return None if self.name == "polars" else RayPool(_ray(self))


class RayPool:
    """An executor's ``map`` on Ray: one task per call, all submitted at once, results in order."""

    def __init__(self, ray) -> None:
        self.ray = ray

    def map(self, fn: Callable, *iterables) -> Iterator:
        task = self.ray.remote(fn)
        refs = [task.remote(*args) for args in zip(*iterables)]
        return (self.ray.get(ref) for ref in refs)


def engine(name: str | None = None, address: str | None = None) -> Engine:
    """The engine the user asked for (``name``, else $OBSERVE_ENGINE, else polars)."""
    chosen = name or os.environ.get("OBSERVE_ENGINE") or "polars"
    if chosen not in ENGINES:
        raise EngineError(f"unknown engine {chosen!r}: use {' or '.join(ENGINES)}")
    return Engine(chosen, address or os.environ.get("RAY_ADDRESS") or None)


def _here(store: Store, match: Match, analysis: Analysis) -> pl.DataFrame:
    return analysis(match.events(match.rows(store, match.files(store))))


def _ray(eng: Engine):
    """Ray, connected to the engine's cluster (or a new local one)."""
    try:
        import ray
    except ImportError:
        raise EngineError("the ray engine needs Ray: pip install 'observe[ray]'") from None
    if not ray.is_initialized():
        import logging

        try:
            ray.init(address=eng.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineError(f"Ray at {eng.address or 'a new local cluster'}: {exc}") from None
    return ray


def _on_ray(eng: Engine, store: Store, match: Match, analysis: Analysis) -> pl.DataFrame:
    ray = _ray(eng)
    files = match.files(store)
    if not files:
        return analysis(match.events(match.rows(store, [])))
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    buckets = eng.buckets or 2 * cpus
    readers = min(len(files), 2 * cpus)
    shares = [files[i::readers] for i in range(readers)]
    read = ray.remote(_read_share).options(num_returns=buckets) if buckets > 1 else ray.remote(_read_share)
    pieces = [read.remote(store.location, share, match, buckets) for share in shares]
    pieces = [p if buckets > 1 else [p] for p in pieces]
    run = ray.remote(_run_bucket)
    results = ray.get([run.remote(match, analysis, *(p[b] for p in pieces)) for b in range(buckets)])
    return pl.concat(results, how="vertical_relaxed")


def _read_share(location: str, files: list, match: Match, buckets: int) -> list[pl.DataFrame] | pl.DataFrame:
    """A reader task: the matching rows of ``files``, split into node buckets (by the node's hash)."""
    store = Store(location)
    rows = match.rows(store, files).with_columns(
        (pl.col("node").hash(seed=0) % buckets).alias("_bucket")).collect()
    parts = rows.partition_by("_bucket", as_dict=True, include_key=False)
    split = [parts.get((b,), rows.clear().drop("_bucket")) for b in range(buckets)]
    return split if buckets > 1 else split[0]


def _read_files(location: str, read: Callable[..., Any], files: list, args: tuple) -> Any:
    """A task of :meth:`Engine.map_files`: ``read`` of a share of the store's files."""
    return read(Store(location), files, *args)


def _run_bucket(match: Match, analysis: Analysis, *pieces: pl.DataFrame) -> pl.DataFrame:
    """A bucket's task: the analysis on every matching row of its nodes."""
    return analysis(match.events(pl.concat(pieces).lazy()))
