"""Template mining: grouping accuracy on loghub's 2k samples against Drain's published figures, template
ids that do not depend on row order, mine() and compare() on small synthetic events."""
from __future__ import annotations

import json
import random
import string
import tomllib
from datetime import UTC, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal
import pytest
from conftest import CORPUS

from queries.patterns import (
    PATTERNS,
    compare,
    masked_counts,
    grouping_accuracy,
    masked,
    mine,
    template_ids,
)

LOGHUB = CORPUS / "loghub"
# Drain's grouping accuracy on the same 2k samples (Zhu et al., ICSE-SEIP 2019, Table II).
DRAIN = {"HPC": 0.887, "BGL": 0.963, "Thunderbird": 0.955, "Linux": 0.690}
T0 = datetime(2026, 11, 23, tzinfo=UTC)


def loghub(name: str) -> pl.DataFrame:
    return pl.read_csv(LOGHUB / f"{name}_2k.log_structured.csv", infer_schema=False)


@pytest.mark.parametrize("name", list(DRAIN))
def test_accuracy_at_least_drains(name: str) -> None:
    truth = loghub(name)
    got = template_ids(truth.get_column("Content"))
    acc = grouping_accuracy(got.get_column("template_id"), truth.get_column("EventId"))
    print(f"\n{name:12s} accuracy {acc:.3f}  Drain {DRAIN[name]:.3f}  templates {got['template_id'].n_unique()}"
          f" (truth {truth['EventId'].n_unique()})")
    assert acc >= DRAIN[name]


def test_ids_do_not_depend_on_order() -> None:
    content = loghub("Thunderbird").get_column("Content")
    a = template_ids(content)
    b = template_ids(content.reverse()).reverse()
    assert a.equals(b)


def test_rule_file_examples() -> None:
    doc = tomllib.loads(PATTERNS.read_text())
    for entry in doc["mask"]:
        got = pl.DataFrame({"m": entry["examples"]}).select(masked(pl.col("m"))).to_series()
        assert all("<*>" in g for g in got), entry["name"]
    for entry in doc["keep"]:
        assert pl.Series(entry["examples"]).str.contains(entry["pattern"]).all(), entry["name"]
    examples = pl.DataFrame({"m": ["job 123e4567-e89b-12d3-a456-426614174000 done", "from 10.1.2.3  port 22 "]})
    assert examples.select(masked(pl.col("m"))).to_series().to_list() == ["job <*> done", "from <*> port <*>"]


def test_free_text_variables_stay_one_template() -> None:
    rng = random.Random(1)
    word = lambda: "".join(rng.choices(string.ascii_lowercase, k=8))
    lines = [f"job {word()} of user {word()} finished in partition {word()}" for _ in range(3000)]
    lines += [f"cannot open file {word()} for {word()} {word()}" for _ in range(3000)]
    got = template_ids(pl.Series(lines))
    assert sorted(got.get_column("template").unique()) == [
        "cannot open file <*> for <*> <*>", "job <*> of user <*> finished in partition <*>"]


def test_empty() -> None:
    assert template_ids(pl.Series([], dtype=pl.String)).height == 0
    assert mine(events([])).height == 0
    assert compare(events([]), events([])).height == 0


def events(rows: list[tuple[int, str, str]]) -> pl.LazyFrame:
    """(seconds after T0, node, message) rows as events."""
    return pl.LazyFrame({"ts": [T0 + timedelta(seconds=s) for s, _, _ in rows],
                         "node": [n for _, n, _ in rows], "message": [m for _, _, m in rows]},
                        schema={"ts": pl.Datetime("us", "UTC"), "node": pl.String, "message": pl.String})


def steady(start: int, stop: int) -> list[tuple[int, str, str]]:
    return [(s, f"gpu{s % 4:03d}", f"heartbeat seq {s} from gpu{s % 4:03d} ok") for s in range(start, stop)]


def test_mine() -> None:
    out = mine(events(steady(0, 40) + [(50, "gpu001", "Xid 79 on 0000:3b:00 GPU has fallen off the bus")]))
    assert out.get_column("count").to_list() == [40, 1]
    top = out.row(0, named=True)
    assert top["template"] == "heartbeat seq <*> from <*> ok" and top["nodes"] == 4
    assert top["first_ts"] == T0 and top["last_ts"] == T0 + timedelta(seconds=39)


def test_compare_reports_new_and_frequent_not_steady() -> None:
    baseline = events(steady(0, 100) + [(s, "gpu002", f"link flap on port {s % 3}") for s in range(0, 100, 50)])
    xid = [(150 + i, "gpu003", f"NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, GPU has fallen off the bus.")
           for i in range(3)]
    flaps = [(s, "gpu002", f"link flap on port {s % 3}") for s in range(100, 200, 10)]
    out = compare(events(steady(100, 200) + xid + flaps), baseline)
    status = dict(zip(out["template"], out["status"]))
    assert out.row(0, named=True)["status"] == "new" and "Xid" in out.row(0, named=True)["template"]
    assert out.row(0, named=True)["count"] == 3 and out.row(0, named=True)["nodes"] == 1
    assert status["link flap on port <*>"] == "frequent"
    assert not any(t.startswith("heartbeat") for t in status)


def test_cli_patterns_reports_a_new_template(store) -> None:
    from typer.testing import CliRunner

    from observe.cli import app
    from observe.schema import conform

    t0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    steady = [(t0 + timedelta(minutes=m), f"session opened for user root(uid={m})") for m in range(0, 120, 2)]
    new = [(t0 + timedelta(minutes=100 + m), f"mlx5_core 0000:4d:00.0 mlx5_{m % 4}: Port: 1 Link DOWN") for m in range(5)]
    rows = [{"ts": ts, "node": "gpu001", "source": "syslog", "kind": "log", "severity": "info", "message": msg,
             "raw": msg, "file_id": "f", "offset": i} for i, (ts, msg) in enumerate(steady + new)]
    store.write(conform(pl.DataFrame(rows)))
    out = CliRunner().invoke(app, ["patterns", "--store", str(store.root), "--since", (t0 + timedelta(minutes=90)).isoformat(),
                                   "--until", (t0 + timedelta(minutes=120)).isoformat(), "--baseline", "90m", "--format", "json"])
    assert out.exit_code == 0, out.output
    found = [json.loads(line) for line in out.output.splitlines()]
    assert [(f["status"], f["count"]) for f in found] == [("new", 5)]
    assert "Link DOWN" in found[0]["template"]


def test_pieces_of_the_events_mine_and_compare_as_the_whole() -> None:
    """What an engine does with a fleet: count masked messages per node bucket, add the pieces up."""
    rows = sorted(steady(0, 200) + [(150 + i, "gpu003", f"NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, GPU has fallen off "
                                                     "the bus.") for i in range(3)]
                  + [(s, "gpu002", f"link flap on port {s % 3}") for s in [*range(0, 100, 25), *range(100, 200, 2)]])
    whole, start = events(rows), T0 + timedelta(seconds=100)
    nodes = [["gpu000", "gpu003"], ["gpu001"], ["gpu002"]]
    pieces = [masked_counts(whole.filter(pl.col("node").is_in(n)), start=start) for n in nodes]
    expected = compare(whole.filter(pl.col("ts") >= start), whole.filter(pl.col("ts") < start))
    assert expected.height >= 2
    assert_frame_equal(compare(pieces), expected)
    assert_frame_equal(compare(pieces[::-1]), expected)
    assert_frame_equal(mine([masked_counts(whole.filter(pl.col("node").is_in(n))) for n in nodes]), mine(whole))
