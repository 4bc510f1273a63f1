"""The notable index: every row of the nodes' and Slurm's logs of a kind other than plain ``log`` (or
``unparsed``), in one small table.

A fleet's month is 99% lines no rule names; the faults, recoveries, job records and health results that
``explain``, ``nodes`` and ``health faults`` ask for are the other 1%, spread over every day's
segments. Reading them from the segments costs a footer read per file (explain's fourteen days of a
node's past: 140 files, a quarter of a second); reading them from here, one file sorted by kind.
Jobs' own output (source ``nccl``) is left out: a failing job's output is mostly such rows (NCCL
errors and warnings, tracebacks), the index would nearly double it, and it is read by job, not by kind.

Maintained as the store grows: each refresh reads only the segments it does not cover yet and drops
the rows of segments no longer live (compacted, re-marked, expired). Each covered segment has one
row with no kind, so that a segment with nothing notable is not read again. A read uses the index for
the segments it covers and reads the others from the segments themselves, so an index behind the
table is never wrong, only slower; the rows are those of the segments, copy marks included.
"""
from __future__ import annotations

import polars as pl

from observe.store.layout import scan_segments, segment_name

NAME = "notable"
BULK = ("log", "unparsed")  # the kinds the index leaves out: almost every row
SOURCES = ("slurm", "syslog", "kernel", "gpu", "health")  # the sources it covers: all but jobs' output (nccl)
SEGMENT = "_segment"  # which live segment (path below the events table) a row is of
SEGMENT_PATH = r"(source=[^/]+/date=[^/]+/[^/]+)$"  # that path, the end of a segment's path or URL
REFRESH_WAIT_S = 120.0  # how long a refresh waits for another to end (a fleet's index is written anew in seconds)
APPENDS = 32  # refreshes' appends since the index was last written anew, before a refresh writes it anew
APPENDED, ANEW = "appended", "anew"  # the notes of a refresh's append and of the commits that write the index anew
SEGMENTS_A_READ = 4  # segments an index written anew reads at a time
COMMIT_ROWS = 250_000  # and rows it commits at a time, about: a commit covers its segments whole
COMMIT_BYTES = 256 << 20  # or bytes of rows in memory: nvidia-smi's records are kilobytes (250,000 rows held 1.1 GB)
STATS = ("kind", SEGMENT)  # the columns the index's log keeps statistics of: never text a user wrote


def wanted(kinds: list[str] | None) -> bool:
    """Whether a read of ``kinds`` can take them from the index (none of them a bulk kind)."""
    return bool(kinds) and not set(kinds) & set(BULK)


def scan(store, files: list, kinds: list[str]) -> pl.LazyFrame:
    """The rows of ``kinds`` in ``files`` (live segments), in the stored layout: from the index for the
    segments it covers, from the segments for the rest."""
    index, covered = _index(store)
    rel = {f: segment_name(store.events, f) for f in files}
    inside = [r for r in rel.values() if r in covered]
    outside = [f for f, r in rel.items() if r not in covered]
    parts = []
    if inside:
        parts.append(index.filter(pl.col("kind").is_in(kinds), pl.col(SEGMENT).is_in(inside)).drop(SEGMENT))
    if outside or not parts:
        parts.append(store.scan_files(outside))
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")


def refresh(store, wait_s: float = REFRESH_WAIT_S) -> int:
    """Bring the index up to date with the live segments; returns the segments read. The new segments' rows
    are appended while every segment the index covers is live and fewer than APPENDS appends followed its last
    rewrite (an ingest's refresh costs what it added: rewriting a 2,560-node month's 2.4 million rows cost each
    one-line ingest 3.8 s); otherwise (a compaction replaced segments, or the appends piled up) it is written anew,
    SEGMENTS_A_READ segments read at a time and about COMMIT_ROWS rows or COMMIT_BYTES committed at a time
    (each commit whole for the segments it covers: a read takes the others from the segments meanwhile;
    that month's index at once held 8 GB). One refresh at a time (two appended the same segments twice: attack-32 F1);
    StoreBusy when another held it ``wait_s``."""
    with store.lock(NAME, wait_s=wait_s):
        return _refresh(store)


def _refresh(store) -> int:
    live = {segment_name(store.events, path): path for source, _, path in store.live() if source in SOURCES}
    index, covered = _index(store)
    new = {rel for rel in live if rel not in covered}
    if not new and covered <= set(live):
        return 0
    table = store.index(NAME)
    if index is not None and covered <= set(live) and not _piled_up(table) and _appended(
            table, index.collect_schema(), _ordered(_read(store, [live[rel] for rel in sorted(new)])), APPENDED):
        return len(new)
    if not _written_anew(store, table, live, index, covered):  # an older index's columns: from the segments alone
        _written_anew(store, table, live, None, set())
    return len(new)


def _written_anew(store, table, live: dict, index: pl.LazyFrame | None, covered: set[str]) -> bool:
    """Write the index anew (see :func:`refresh`), its rows of ``covered`` segments from ``index``; False where
    those hold fewer columns than the segments' (an index an older observe wrote: it is then written from the
    segments alone)."""
    rels, held, schema = sorted(live), [], None
    for at in range(0, max(len(rels), 1), SEGMENTS_A_READ):
        part = rels[at:at + SEGMENTS_A_READ]
        if index is not None:
            held.append(index.filter(pl.col(SEGMENT).is_in([rel for rel in part if rel in covered])).collect(engine="streaming"))
        held.append(_read(store, [live[rel] for rel in part if rel not in covered]))
        if (sum(f.height for f in held) >= COMMIT_ROWS or sum(f.estimated_size() for f in held) >= COMMIT_BYTES
                or at + SEGMENTS_A_READ >= len(rels)):
            fresh, held = _ordered(*held), []  # what was read, let go before it is written
            if schema is None:
                table.overwrite(fresh, STATS, note=ANEW)
                schema = fresh.schema
            elif not _appended(table, schema, fresh, ANEW):  # the first commit's columns, in its order
                return False
    return True


def _piled_up(table) -> bool:
    """Whether the last APPENDS commits were all refreshes' appends: the files they added are many, and writing
    the index anew makes them few. Told by the commits' notes, not the files' sizes: a rewrite's commits cut
    by COMMIT_BYTES may compress small too, and taken for appends they made every later refresh a rewrite
    (attack-34 F3)."""
    notes = table.notes(APPENDS)
    return len(notes) == APPENDS and all(note == APPENDED for note in notes)


def _read(store, segments: list) -> pl.DataFrame:
    """The notable rows of ``segments`` and a row with no kind for each (it is covered), unordered."""
    if not segments:
        return pl.DataFrame()
    rows = (scan_segments([store.uri(p) for p in segments], store.table.options, paths_as=SEGMENT)
            .filter(~pl.col("kind").is_in(BULK)).collect(engine="streaming")
            .with_columns(pl.col(SEGMENT).str.extract(SEGMENT_PATH)))
    if rows.get_column(SEGMENT).null_count():
        raise OSError(f"{store.name}: a segment's path is not of the table's layout (source=/date=/file)")
    marks = pl.DataFrame({SEGMENT: [segment_name(store.events, p) for p in segments]}, schema={SEGMENT: pl.String})
    return pl.concat([rows, marks], how="diagonal_relaxed")


def _ordered(*frames: pl.DataFrame) -> pl.DataFrame:
    """The index's rows of ``frames``, by kind and a file's lines together."""
    return pl.concat([f for f in frames if f.width], how="diagonal_relaxed").sort("kind", "file_id", "offset", nulls_last=True)


def _appended(table, schema: pl.Schema, fresh: pl.DataFrame, note: str) -> bool:
    """Whether ``fresh`` was appended to the index as columns ``schema`` in a commit noted ``note`` (False where
    it holds a column the index does not: an index an older observe wrote, to be written anew)."""
    from deltalake.exceptions import SchemaMismatchError

    if not set(fresh.columns) <= set(schema.names()):
        return False
    try:
        aligned = fresh if fresh.schema == schema else pl.concat([pl.DataFrame(schema=schema), fresh],
                                                                   how="diagonal_relaxed").cast(schema)
        table.append(aligned, STATS, note=note)
    except SchemaMismatchError:
        return False
    return True


def _index(store) -> tuple[pl.LazyFrame | None, set[str]]:
    """The index and the segments it covers, both of one version; (None, nothing) where there is none, or it
    cannot be read (a file gone or cut short, a damaged log): then every read goes to the segments, and the next
    refresh writes it anew from them."""
    from deltalake.exceptions import DeltaError

    try:
        table = store.index(NAME)
        snapshot = table.snapshot()
        index = table.scan(snapshot=snapshot)
        return index, _covered(store, index, snapshot[0])
    except (OSError, DeltaError, pl.exceptions.PolarsError):
        return None, set()


def _covered(store, index: pl.LazyFrame | None, version: int | None = None) -> set[str]:
    """The segments the index covers (its rows without a kind), read once per index version: ``version``, the
    one ``index`` was listed at (a version read after the listing paired a rewrite's first commit's rows with
    the next version's: attack-32 F2), else the latest."""
    if index is None:
        return set()
    version = store.index(NAME).snapshot()[0] if version is None else version
    cached = store.notable_covered
    if cached is None or cached[0] != version:
        segments = index.filter(pl.col("kind").is_null()).select(SEGMENT).collect().get_column(SEGMENT)
        store.notable_covered = cached = version, set(segments.to_list())
    return cached[1]
