"""Each row's ``copy_of``, written into the table so that any engine counts each record once.

observe reads each record once (:func:`observe.copies.one_per_record`: a kernel line kept by dmesg
and by the syslog is one event); DuckDB, Spark or polars reading the Delta table see every row. So
the store writes the same decision into the rows: ``copy_of`` is null for the row kept and names the
kept row's input for each copy, and ``count(*) WHERE copy_of IS NULL`` is observe's count.

A new input can change what older rows are (a dmesg that arrives after its syslog wins over the
syslog's rows, which were kept until then; a row can join two clusters), so marks are brought up to
date after the table changes: every partition that got new data since the version last marked
(``<root>/copies.json``), and whatever a caller names (compaction's, whose dropped duplicates change
an input's count), is read with its neighbours (the days on either side, and the source's rows
without a time, which a kernel uptime stamp ties to dated copies); the rows of those partitions, and
the neighbours' rows in a cluster with them, take their marks; a file whose marks change is
rewritten and swapped for the old one in one commit that changes no data, as compaction swaps files.
A store that never had marks (an older observe's) is marked whole the first time.

Runs under the store's compaction lock (only its holder removes files). A cluster that chains over
more than a day is marked from the days read: real copies never do, a user's own job output can
(its lines then count differently outside observe; docs/security.md, attack-24).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from itertools import accumulate
from datetime import date, timedelta
from pathlib import Path

import polars as pl

from observe.copies import KEY, STREAM, UPTIME, marks, near_another_input
from observe.store.layout import UNKNOWN_DATE
from observe.store.table import partition_of

MARKED = "copies.json"  # the table version whose changes are marked, and the partitions still due
REWRITE_ROWS = 2_000_000  # rows one pass rewrites at most (at least one file); the rest stays due for the next


def bring_up_to_date(store, also: Iterable[tuple[str, str]] = (), budget: int | None = None) -> int:
    """Mark the partitions changed since the last marked version, those a pass left due, and ``also``
    ((source, date) pairs); the caller holds the store's compaction lock. Returns how many files were
    rewritten.

    A pass rewrites at most ``budget`` rows (an ingest's: a few times what it stored), else
    REWRITE_ROWS and at least one file (compaction, retention, repair: what makes progress). Lines
    that keep turning other rows into copies and back (a user's two copies of their own output, one
    growing, then the other) then cost an ingest little more than they are, a compaction at most
    REWRITE_ROWS; their marks lag meanwhile (observe's own reads do not use them)."""
    version, rels = store.table.snapshot()
    if version < 0:
        return 0
    last, due = _state(store)
    added = None if last is None or last > version else store.table.added(last, version)
    changed = ({(p["source"], p["date"]) for p in map(partition_of, rels)} if added is None
               else {(p["source"], p["date"]) for p in map(partition_of, added)})
    rewritten, left = mark(store, changed | due | set(also), REWRITE_ROWS if budget is None else budget, budget is None)
    store.place.put(store.root / MARKED, json.dumps({"version": version, "due": sorted(left)}).encode())
    return rewritten


def mark(store, touched: set[tuple[str, str]], budget: int, one: bool) -> tuple[int, set[tuple[str, str]]]:
    """Set ``copy_of`` in the rows of the ``touched`` partitions (and their neighbours' rows that
    share a cluster with them); the files whose marks change are swapped in one commit, until
    ``budget`` rows were rewritten (the first file whatever its rows, with ``one``). Returns the files
    rewritten and the partitions left due."""
    live = store.live()
    scope = sorted(((source, day, f) for source, day, f in live if _near(source, day, touched)),
                   key=lambda s: s[1] == UNKNOWN_DATE)  # the files without times last
    if not touched or not scope:
        return 0, set()
    files = [f for _, _, f in scope]
    undated = [f for _, day, f in scope if day == UNKNOWN_DATE]
    rows = dict((store.events / rel, n) for rel, _, n, _ in store.table.files())
    starts = dict(zip(files, accumulate((rows[f] for f in files), initial=0)))  # each file's first _row
    scan = store.scan_files(files).with_row_index("_row")
    # the rows that may be copies, from narrow columns (streamed: memory is the candidates', not the partitions')
    narrow = scan.select("_row", "ts", *STREAM, "file_id")
    candidates, marked = pl.collect_all([
        pl.concat([near_another_input(narrow).select("_row"),
                   *([store.scan_files(undated).with_row_index("_row", offset=starts[undated[0]])
                      .filter(UPTIME.fill_null(False)).select("_row")] if undated else [])]),
        scan.filter(pl.col("copy_of").is_not_null()).select("_row", "copy_of")], engine="streaming")
    if not candidates.height and not marked.height:
        return 0, set()
    some = candidates.get_column("_row").implode()
    full = scan.filter(pl.col("_row").is_in(some)).select("_row", "ts", *KEY, "attrs", "route", "file_id",
                                                          "copy_of").collect(engine="streaming")
    found = marks(full.lazy()).collect()
    # where marks change: the rows of the touched partitions, and the rows of clusters one of them is in
    first = pl.Series([starts[f] for f in files], dtype=pl.Int64)
    base = (pl.concat([full.select("_row", "copy_of"), marked]).unique("_row")
            .with_columns((pl.lit(first).search_sorted(pl.col("_row").cast(pl.Int64), side="right") - 1).alias("_file"))
            .join(found, on="_row", how="left", suffix="_want"))
    own = pl.col("_file").is_in([i for i, (source, day, _) in enumerate(scope) if (source, day) in touched])
    hit = base.filter(own & pl.col("_c").is_not_null()).get_column("_c").unique().implode()
    want = pl.when(own | pl.col("_c").is_in(hit)).then(pl.col("copy_of_want")).otherwise(pl.col("copy_of"))
    changed = base.filter(pl.col("copy_of").ne_missing(want)).select("_file", "_row", want.alias("_want"))
    replaced, temps, left, spent = [], [], set(), 0
    for (i,), mine in sorted(changed.partition_by("_file", as_dict=True).items()):
        old = files[i]
        if spent + rows[old] > budget and (spent or not one):
            left.add(scope[i][:2])
            continue
        spent += rows[old]
        lo = starts[old]
        df = store.scan_files([old]).collect()
        copy_of = df.get_column("copy_of").scatter(mine.get_column("_row") - lo, mine.get_column("_want"))
        temps.append(store.write_file(df.with_columns(copy_of), old.parent, _renamed(old.name),
                                      compacted=old.name.startswith("c-"), durable=False))
        replaced.append(old)
    store.table.replace(replaced, store.durable(temps))
    return len(replaced), left


def _near(source: str, day: str, touched: set[tuple[str, str]]) -> bool:
    """Whether a partition is read to mark ``touched``: one of them, a day next to one of its
    source's, its source's rows without a time, or any of its source's days when those were touched."""
    days = {d for s, d in touched if s == source}
    if not days:
        return False
    if day == UNKNOWN_DATE or UNKNOWN_DATE in days or day in days:
        return True
    d = date.fromisoformat(day)
    return (d - timedelta(days=1)).isoformat() in days or (d + timedelta(days=1)).isoformat() in days


def _renamed(name: str) -> str:
    """A new unique name for a file rewritten with new marks, of the same kind (and, for a compacted
    file, the same place in name order)."""
    parts = Path(name).stem.split("-")
    if parts[0] == "c" and len(parts) == 4:
        return f"c-{parts[1]}-{uuid.uuid4().hex[:8]}-{parts[3]}.parquet"
    return f"{parts[0]}-{uuid.uuid4().hex}.parquet"


def current(store) -> bool:
    """Whether every row's mark is up to date: nothing added since the version last marked, nothing due
    (a reader may then count ``copy_of IS NULL`` instead of deciding again)."""
    version, _ = store.table.snapshot()
    last, due = _state(store)
    return version >= 0 and last is not None and last <= version and not due and store.table.added(last, version) == []


def _state(store) -> tuple[int | None, set[tuple[str, str]]]:
    """The version last marked (None: never, or a damaged record: mark everything) and the partitions due."""
    try:
        state = json.loads(store.place.read_bytes(store.root / MARKED))
        return int(state["version"]), {(str(s), str(d)) for s, d in state.get("due", [])}
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None, set()
