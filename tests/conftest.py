"""Shared fixtures: paths, a temporary store, the golden-file switch, a parse helper."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from observe.collector import Context, get
from observe.ingest import Summary, finalize, joined_records, record_pieces
from observe.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = FIXTURES / "corpus"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden .jsonl files")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def fleet_store(tmp_path: Path) -> Store:
    """Six hours of four simulated nodes (from 2026-11-20, UTC), ingested as ingest does."""
    from datetime import datetime, timezone

    from observe.ingest import ingest_inputs
    from observe.simulate import generate

    manifest = generate(tmp_path / "logs", nodes=4, hours=6, seed=5, start=datetime(2026, 11, 20, tzinfo=timezone.utc))
    st = Store(tmp_path / "store")
    ingest_inputs([(str(f.path), {"source": f.format, "node": f.node, "job": f.job}) for f in manifest.files], st)
    return st


def parse_file(path: Path, collector: str, ctx: Context | None = None) -> pl.DataFrame:
    """Run one collector over a file the way ingest does, without a store."""
    c = get(collector)
    ctx = replace(ctx or Context(), header=path.read_text(errors="replace").split("\n", 1)[0])
    with open(path, "rb") as f:
        if c.whole_file:
            recs = [pl.DataFrame({"raw": [f.read().decode("utf-8", "replace")], "offset": [0]})]
        else:
            recs = [joined_records([body], c, [base]) for body, base in record_pieces(f, c, Summary())]
    frames = [finalize(c.parse(r, ctx), c, ctx, "test") for r in recs]
    return pl.concat(frames).sort("offset")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory any user may read (pytest's tmp_path is root's alone), for what runs as nobody."""
    d = Path(tempfile.mkdtemp(prefix="observe-shared-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def shipped(path: Path) -> Store:
    """The central store a collector shipped to, once it committed what was shipped (as `observe compact` does)."""
    store = Store(path)
    store.incoming.adopt()
    return store


def committed(store: Store | Path) -> Store:
    """``store`` once the central ``observe compact`` committed what hooks and collectors delivered to
    its ``incoming/`` (:meth:`Store.adopt`)."""
    store = store if isinstance(store, Store) else Store(store)
    with store.lock("compact", wait_s=30):
        store.incoming.adopt()
    return store
