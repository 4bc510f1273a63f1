"""Headers kept as shapes (observe/header_shapes.py): every stored line is its input's bytes again,
on real lines, in any zone, before and after compaction; a header no shape renders is kept."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from observe import header_shapes
from observe.ingest import ingest
from observe.schema import conform, stored_raw, to_stored
from observe.store import Store

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
LOGS = [CORPUS / "loghub" / "Linux_2k.log", CORPUS / "loghub" / "Thunderbird_2k.log", CORPUS / "real" / "slurm.log",
        CORPUS / "real" / "oom.log", CORPUS / "real" / "ib_pcie.log", CORPUS / "extra" / "aer_edac.log"]


def _lines_are_the_inputs(store: Store, paths: list[Path]) -> pl.DataFrame:
    """Every stored row's raw text is an input's bytes at the row's offset; the rows."""
    data = [p.read_bytes() for p in paths]
    rows = store.scan(undated=True).select("offset", "raw").collect()
    for off, raw in rows.iter_rows():
        text = raw.encode()
        assert any(d[off:off + len(text)] == text for d in data), (off, raw)
    return rows


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_every_line_is_its_inputs_bytes_again(tmp_path: Path, zone: str) -> None:
    store = Store(tmp_path / "store")
    ingest([str(p) for p in LOGS], store, tz=zone)
    rows = _lines_are_the_inputs(store, LOGS)
    assert rows.height > 4000
    files = pl.scan_delta(str(store.events)).select("source", "node", "header", "shape").collect()
    shaped = files.filter(pl.col("shape").is_not_null())
    # loghub's Linux syslog (host "combo") is kept as shapes; Thunderbird's archive prefix ("- 1131566461
    # 2005.11.09 dn228 ...") is no shape, and the corpus's slurm and kernel lines, pasted from threads, are
    # partly shapes (slurmctld's "[2016-08-03T21:09:34.264] ", dmesg's "[   58.853590] ", journalctl's)
    combo = files.filter(pl.col("node") == "combo")
    assert combo.get_column("shape").null_count() < 0.02 * combo.height
    for source in ("slurm", "kernel"):
        assert files.filter(pl.col("source") == source).get_column("shape").drop_nulls().len() > 10
    assert shaped.get_column("header").null_count() == shaped.height
    if zone != "UTC":  # the zone the stamps were read in is the shape's
        timed = shaped.get_column("shape").filter(shaped.get_column("shape").str.contains("{ts", literal=True))
        assert timed.len() > 2000 and timed.str.contains("{ts@America/New_York:", literal=True).all()
    store.compactor.compact_many(store.partitions(), min_segments=1)
    assert _lines_are_the_inputs(store, LOGS).height == rows.height


def test_a_header_no_shape_renders_is_kept() -> None:
    ts = pl.Series([1_700_000_000_000_000, 1_700_000_000_000_000], dtype=pl.Datetime("us", "UTC"))
    # rsyslog's "buggy day" (a zero, not a space, before a one-digit day) and a host that is not the node
    raw = ["Nov 14 22:13:20 gpu1 sshd[7]: hello", "Nov 14 22:13:20 other sshd[7]: hello"]
    df = conform(pl.DataFrame({"ts": ts, "node": ["gpu1", "gpu1"], "program": ["sshd"] * 2, "pid": [7, 7],
                               "message": ["hello"] * 2, "raw": raw}))
    stored = to_stored(df)
    assert stored.get_column("shape").to_list() == ["{ts:%b %e %H:%M:%S} {node} {program}[{pid}]: ", None]
    assert stored.get_column("header").to_list() == [None, "Nov 14 22:13:20 other sshd[7]: "]
    assert stored.select(stored_raw()).to_series().to_list() == raw


def test_a_text_that_is_no_shape_renders_nothing() -> None:
    assert header_shapes.render("{ts:%H} {bogus}") is None
    assert header_shapes.render("plain") is None
    assert header_shapes.render("{node} }") is None
    ts = pl.Series([0], dtype=pl.Datetime("us", "UTC"))
    df = pl.DataFrame({"shape": ["{ts@No/Such_Zone:%H} {node}"], "ts": ts, "node": ["n"], "program": [None],
                       "pid": [None], "attrs": [None]}, schema_overrides={"program": pl.String, "pid": pl.Int64,
                                                                          "attrs": pl.String})
    assert df.select(header_shapes.rendered()).item() is None  # a zone polars does not know: no header, no error


def test_compaction_keeps_one_row_of_a_record_stored_with_its_header_and_as_a_shape(tmp_path: Path) -> None:
    """The same input's line at the same offset, stored once by an older observe (its header kept) and
    once as a shape: compaction keeps one; a line's two events (two messages) keep both."""
    ts = pl.Series([1_700_000_000_000_000] * 3, dtype=pl.Datetime("us", "UTC"))
    line = "Nov 14 22:13:20 gpu1 sshd[7]: hello"
    df = conform(pl.DataFrame({"ts": ts, "node": ["gpu1"] * 3, "source": ["syslog"] * 3, "program": ["sshd"] * 3,
                               "pid": [7] * 3, "message": ["hello", "hello", "sshd says hello"], "kind": ["log", "log", "other"],
                               "raw": [line] * 3, "file_id": ["f1"] * 3, "offset": [0, 40, 40]}))
    stored = to_stored(df)
    assert stored.get_column("shape").null_count() == 1  # the third row's raw is no header and message: kept whole
    older = stored.head(1).with_columns(pl.lit("Nov 14 22:13:20 gpu1 sshd[7]: ").alias("header"),
                                        pl.lit(None, pl.String).alias("shape"))
    store = Store(tmp_path / "store")
    day = "2023-11-14"
    for part in (older, stored):
        store.publish([store.write_partition("syslog", day, part, durable=False)])
    store.compactor.compact_many(store.partitions(), min_segments=1)
    rows = store.scan(undated=True).select("offset", "raw", "kind").collect().sort("offset", "kind")
    assert rows.rows() == [(0, line, "log"), (40, line, "log"), (40, line, "other")]
