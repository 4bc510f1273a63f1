"""Log text reaches the operator's terminal as text: escape sequences, control characters and bidi
overrides written by users of the nodes are shown escaped in every text output and every column,
and kept exactly in JSON and CSV."""
from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from observe.cli import app
from observe.collector import Context
from observe.ingest import parse_bytes
from observe.printable import printable
from observe.store import Store

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
