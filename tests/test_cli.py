"""The CLI: help that teaches, one clear error line and exit 2 on bad input, search filters work."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import CORPUS
from observe.cli import app

runner = CliRunner()
README = Path(__file__).resolve().parent.parent / "README.md"
COMMANDS = [c.name for c in app.registered_commands] + [
    f"{g.name} {c.name}" for g in app.registered_groups for c in g.typer_instance.registered_commands]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_and_is_in_readme(command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0 and len(result.output) > 80
    assert f"observe {command}" in README.read_text()


@pytest.mark.parametrize("args, message", [
    (["ingest", "/nonexistent.log"], "no such file"),
    (["ingest", str(CORPUS / "real" / "SOURCES.md")], "cannot tell the log format"),
    (["ingest", str(CORPUS / "real" / "xid.log"), "--source", "bogus"], "unknown source 'bogus'"),
    (["ingest", str(CORPUS / "real" / "xid.log"), "--boot-time", "yesterday-ish"], "bad time"),
    (["ingest", str(CORPUS / "real" / "xid.log"), "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
    (["ingest", "-", "-"], "given more than once"),
    (["query", "--since", "last tuesday"], "bad time"),
    (["query", "--grep", "("], "bad regex"),
    (["query", "--node", "gpu[001-"], "bad node list"),
    (["query", "--format", "xml"], "unknown format"),
    (["query", "--since", "2026-11-02", "--until", "2026-11-01"], "is not after"),
    (["stats"], "no such directory"),
    (["query", "--source", "nvidia_smi"], "unknown source 'nvidia_smi'"),
    (["stats", "--store", "nosuch://bucket/x"], "nosuch"),
    (["query", "--store", str(CORPUS / "real" / "xid.log")], "not a directory"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    store = [] if "--store" in args else ["--store", str(tmp_path / "s")]
    result = runner.invoke(app, [*args, *store])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1


def test_an_empty_directory_ingests_nothing(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    result = runner.invoke(app, ["ingest", str(tmp_path / "logs"), "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert "0 file(s)" in result.output


def test_bad_file_does_not_lose_good_ones(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    result = runner.invoke(app, ["ingest", str(CORPUS / "real" / "SOURCES.md"), str(CORPUS / "real" / "xid.log"), "--store", store])
    assert result.exit_code == 2
    q = runner.invoke(app, ["query", "--kind", "gpu_xid", "--limit", "0", "--format", "json", "--store", store])
    assert len(q.output.splitlines()) == 48


def test_store_among_the_logs_is_not_ingested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``observe ingest .`` with the default store ``./observe-store`` under ``.``: the second run
    must not read the store's own Parquet and marker files as logs."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "xid.log").write_bytes((CORPUS / "real" / "xid.log").read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OBSERVE_STORE", raising=False)
    for args in (["."], ["."], ["**/*"]):
        result = runner.invoke(app, ["ingest", *args])
        assert result.exit_code == 0, result.output
        assert "1 file(s)" in result.output
    assert (tmp_path / "observe-store" / "events").is_dir()


def test_damaged_gzip_and_missing_path_do_not_stop_the_others(tmp_path: Path) -> None:
    """A truncated gzip, a corrupt one and a path that does not exist are each named on one line;
    the good input of the same run is stored; the exit code says something failed."""
    whole = gzip.compress((CORPUS / "real" / "xid.log").read_bytes())
    (tmp_path / "truncated.log.gz").write_bytes(whole[:2000])
    (tmp_path / "corrupt.log.gz").write_bytes(whole[:-6] + bytes([whole[-6] ^ 0xFF]) + whole[-5:])
    store = str(tmp_path / "s")
    result = runner.invoke(app, ["ingest", str(CORPUS / "real" / "oom.log"), str(tmp_path / "truncated.log.gz"),
                                 str(tmp_path / "corrupt.log.gz"), str(tmp_path / "nonexistent.log"), "--store", store])
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, result.output
    assert all(any(name in e for e in errors) for name in ("truncated.log.gz", "corrupt.log.gz", "nonexistent.log"))
    q = runner.invoke(app, ["query", "--kind", "oom_kill", "--format", "json", "--store", store])
    assert len(q.output.splitlines()) == 7


def test_gzip_on_stdin_is_decompressed(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    data = gzip.compress((CORPUS / "real" / "xid.log").read_bytes())
    result = runner.invoke(app, ["ingest", "-", "--store", store], input=data)
    assert result.exit_code == 0, result.output
    q = runner.invoke(app, ["query", "--kind", "gpu_xid", "--limit", "0", "--format", "json", "--store", store])
    assert len(q.output.splitlines()) == 48


def test_query_filters_and_json(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", str(CORPUS / "real" / "nccl.log"), "--store", store]).exit_code == 0
    result = runner.invoke(app, ["query", "--node", "H100-[1-2]", "--kind", "nccl_net_error", "--format", "json",
                                 "--store", store])
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert {r["node"] for r in rows} == {"H100-1", "H100-2"}
    assert all(r["code"] == 4 and r["source"] == "nccl" for r in rows)
    grep = runner.invoke(app, ["query", "--grep", r"ibv_create_qp", "--format", "csv", "--store", store])
    assert len(grep.output.strip().splitlines()) == 3
    stats = runner.invoke(app, ["stats", "--store", store])
    assert re.search(r"\d+ events", stats.output)


def test_help_imports_no_data_library() -> None:
    """`observe --help` and every command's --help load neither polars, pyarrow nor numpy (a third of a second of
    start-up on this machine): a command imports the library when it runs. Measured in bench/, asserted here."""
    probe = ("import sys\nfrom typer.testing import CliRunner\nfrom observe.cli import COMMANDS, app\n"
             "for args in [['--help']] + [[name, '--help'] for name in COMMANDS] + [['health', '--help']]:\n"
             "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
             "print(sorted(m for m in ('polars', 'pyarrow', 'numpy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])


def test_a_command_run_alone_has_the_help_and_errors_of_the_whole_app() -> None:
    """`observe CMD ...` runs an app of CMD alone (typer reads every command's signature to build any one: 36 ms
    of each call): its help, and its error on a bad option, are those of the whole app's CMD."""
    from observe.cli import COMMANDS, _asked

    for name in COMMANDS:
        for args in ([name, "--help"], [name, "--no-such-option"]):
            lean, whole = (CliRunner().invoke(a, args, prog_name="observe") for a in (_asked(args), app))
            assert _asked(args) is not app and (lean.exit_code, lean.output) == (whole.exit_code, whole.output), args
    assert _asked(["--help"]) is app and _asked(["querry"]) is app and _asked(["health", "--help"]) is app


def test_a_command_ended_by_sigterm_removes_its_temporary_files() -> None:
    """A SIGTERM (`timeout`, systemd, a job's time limit) ends a command as an error does: its temporary folder
    (a read that decides copies spills there) is removed, and it exits 143."""
    import signal

    child = ("import sys, tempfile, time\nimport observe.cli as cli\n"
             "def held():\n    with tempfile.TemporaryDirectory() as d:\n        print(d, flush=True)\n        time.sleep(60)\n"
             "cli.COMMANDS['stats'] = held\nsys.argv = ['observe', 'stats']\ncli.main()\n")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143 and not folder.exists()
    # a command that does not end on the first (a cleanup that hangs) ends at the second
    stuck = child.replace("time.sleep(60)\n", "try:\n            time.sleep(60)\n        except SystemExit:\n"
                                               "            print('stuck', flush=True)\n            time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", stuck], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stuck"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM


def test_reading_commands_import_no_pyarrow(tmp_path: Path) -> None:
    """What only reads the store (query, a count, explain, stats) needs polars and delta-rs, not pyarrow or numpy
    (0.1 s of every such command's start-up); what writes imports them when it writes."""
    store = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", str(CORPUS / "real" / "xid.log"), "--store", store]).exit_code == 0
    probe = ("import sys\nfrom typer.testing import CliRunner\nfrom observe.cli import app\n"
             f"for args in [['query', '--kind', 'gpu_xid'], ['query', '--count-by', 'node,kind'], ['stats']]:\n"
             f"    assert CliRunner().invoke(app, [*args, '--store', {store!r}]).exit_code == 0, args\n"
             "print(sorted(m for m in ('polars', 'pyarrow', 'numpy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "['polars']", (done.stdout, done.stderr[-2000:])


def test_query_counts_what_it_would_list(tmp_path: Path) -> None:
    """--count-by node,kind counts the events the same query lists, one row per value pair, most first (a kernel
    line kept in two inputs is one event either way); an unknown column is a one-line error."""
    from collections import Counter

    store = str(tmp_path / "s")
    logs = [str(CORPUS / "real" / name) for name in ("xid.log", "nccl.log")]
    assert runner.invoke(app, ["ingest", *logs, "--store", store]).exit_code == 0
    listed = [json.loads(line) for line in runner.invoke(app, ["query", "--limit", "0", "--format", "json", "--store",
                                                               store]).output.splitlines()]
    result = runner.invoke(app, ["query", "--count-by", "node,kind", "--limit", "0", "--format", "json", "--store", store])
    counted = [json.loads(line) for line in result.output.splitlines()]
    assert {(r["node"], r["kind"]): r["events"] for r in counted} == Counter((r["node"], r["kind"]) for r in listed)
    assert [r["events"] for r in counted] == sorted((r["events"] for r in counted), reverse=True) and len(counted) > 3
    table = runner.invoke(app, ["query", "--count-by", "kind", "--kind", "gpu_xid", "--store", store])
    assert table.exit_code == 0 and re.search(r"^gpu_xid\s+48$", table.stdout, re.M), table.output
    bad = runner.invoke(app, ["query", "--count-by", "node,message", "--store", store])
    assert bad.exit_code == 2 and "unknown column 'message'" in bad.output and "Traceback" not in bad.output


def test_retention_drops_old_days_and_keeps_lines_without_a_time_written_since(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    logs = [str(CORPUS / "real" / name) for name in ("xid.log", "nccl.log")]
    assert runner.invoke(app, ["ingest", *logs, "--store", store]).exit_code == 0
    dry = runner.invoke(app, ["retention", "--keep", "1d", "--dry-run", "--store", store])
    assert dry.exit_code == 0 and "would drop kernel/" in dry.output and "unknown" not in dry.output, dry.output
    done = runner.invoke(app, ["retention", "--keep", "1d", "--store", store])
    assert done.exit_code == 0 and "dropped kernel/" in done.output, done.output
    left = runner.invoke(app, ["stats", "--store", store]).output  # every dated partition went; lines
    assert re.search(r"nccl\s+unknown", left) and not re.search(r"\s\d{4}-\d\d-\d\d\s", left), left  # without a time stay


def test_rules_check_passes() -> None:
    result = runner.invoke(app, ["rules", "--check"])
    assert result.exit_code == 0 and "0 problem(s)" in result.output


def test_log_text_is_printed_as_is_not_as_markup(tmp_path: Path) -> None:
    """Messages may hold anything that looks like rich markup: printed literally, never parsed."""
    log = tmp_path / "slurm-555.out"
    log.write_text("[2026-11-08 19:02:39,710] [INFO] [train.py:48] checkpoint saved to [/scratch/ckpt]\n"
                   "[2026-11-08 19:02:40,001] [INFO] [train.py:49] [bold]done[/bold]\n")
    store = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", str(log), "--store", store]).exit_code == 0
    for command in (["query"], ["patterns", "--all", "--since", "3650d"]):
        result = runner.invoke(app, [*command, "--store", store])
        assert result.exit_code == 0, result.output
        assert "[/scratch/ckpt]" in result.output and "[bold]done[/bold]" in result.output


def test_damaged_segment_is_named(tmp_path: Path) -> None:
    """A segment cut short outside observe (a bad copy, a full disk on a shared file system): the
    command says which file it is, in one line, instead of an internal error."""
    store = tmp_path / "s"
    assert runner.invoke(app, ["ingest", str(CORPUS / "real" / "oom.log"), "--store", str(store)]).exit_code == 0
    segment = sorted(store.rglob("*.parquet"))[0]
    segment.write_bytes(segment.read_bytes()[:100])
    for command in (["query"], ["stats"]):
        result = subprocess.run([sys.executable, "-m", "observe.cli", *command, "--store", str(store)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "damaged segment" in result.stderr and segment.name in result.stderr and "Traceback" not in result.stderr
        assert "observe repair" in result.stderr and result.stderr.count("\n") == 1
    repaired = subprocess.run([sys.executable, "-m", "observe.cli", "repair", "--store", str(store)],
                              capture_output=True, text=True, timeout=120)
    assert repaired.returncode == 0 and "1 segment(s) dropped" in repaired.stdout, repaired.stderr
    assert (store / "damaged" / segment.relative_to(store / "events")).exists()  # kept for a person to look at
    for command in (["query"], ["stats"]):
        result = subprocess.run([sys.executable, "-m", "observe.cli", *command, "--store", str(store)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr


def test_limit_says_when_more_rows_match(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", str(CORPUS / "real" / "xid.log"), "--store", store]).exit_code == 0
    cut = runner.invoke(app, ["query", "--kind", "gpu_xid", "--limit", "5", "--format", "json", "--store", store])
    assert len(cut.stdout.splitlines()) == 5 and "more match" in cut.stderr
    whole = runner.invoke(app, ["query", "--kind", "gpu_xid", "--limit", "48", "--format", "json", "--store", store])
    assert len(whole.stdout.splitlines()) == 48 and "more match" not in whole.stderr


def test_empty_messages_and_carriage_returns_list(tmp_path: Path) -> None:
    """A line with an empty message, and one with a carriage return inside: the table lists both."""
    log = tmp_path / "syslog"
    log.write_bytes(b"Nov 24 10:00:00 gpu001 prog: \nNov 24 10:00:01 gpu001 prog: a\rb\n")
    store = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", str(log), "--store", store]).exit_code == 0
    result = runner.invoke(app, ["query", "--store", store])
    assert result.exit_code == 0, result.output
    assert "a\\rb" in result.stdout and "2 row(s)" in result.stderr


def _tour() -> list[str]:
    """The commands of the README's five-minute tour, comments cut."""
    text = README.read_text()
    block = text[text.index("## A five-minute tour"):].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("observe ")]


def test_the_readmes_tour_runs_on_the_demo_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command the README's tour shows runs on the demo's store, exits 0 and prints what it is about; JOB is
    a job the demo says it failed."""
    done = runner.invoke(app, ["demo", "--dir", str(tmp_path / "demo")])
    assert done.exit_code == 0, done.output[-2000:]
    job = re.search(r"job (\d+)\s+\w+\s+node=", done.output).group(1)
    monkeypatch.setenv("OBSERVE_STORE", str(tmp_path / "demo" / "store"))
    tour = _tour()
    assert len(tour) >= 8 and any(c.startswith("observe explain JOB") for c in tour), tour
    expect = {"query": "gpu_xid", "explain": f"job {job}", "incidents": "category", "nodes": "advice",
              "patterns": "template", "health": "remedy", "exporter": "# HELP"}
    for command in tour:
        args = command.replace("JOB", job).split()[1:]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (command, result.output[-1000:])
        word = expect[args[0]] if args[0] != "query" or "--count-by" not in args else "events"
        assert word in result.output or (args[0] == "explain" and '"job_id"' in result.output), (command, result.output[:500])
    # the tour's outside engine counts what observe counts, source by source
    code = README.read_text().split("## A five-minute tour", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("observe-demo/store", str(tmp_path / "demo" / "store"))
    names: dict = {}
    exec(compile(code.rstrip().replace("\nduckdb.sql(", "\nresult = duckdb.sql(", 1), "README", "exec"), names)
    theirs = dict(names["result"].fetchall())
    counted = runner.invoke(app, ["query", "--count-by", "source", "--format", "json"])
    ours = {row["source"]: row["events"] for row in map(json.loads, counted.stdout.splitlines())}
    assert theirs == ours and sum(ours.values()) > 10_000, (theirs, ours)


def test_the_demo_at_two_ends_is_the_same_demo(tmp_path: Path) -> None:
    """``observe demo --end``: the same seed ending at two different hours ingests as many events and injects the
    same incidents (their times aside); a bad --end is a one-line error."""
    said = []
    for end in ("2026-11-20T00:00", "2026-11-23T07:00"):
        done = runner.invoke(app, ["demo", "--dir", str(tmp_path / end[:10]), "--nodes", "4", "--hours", "6", "--end", end])
        assert done.exit_code == 0, done.output[-2000:]
        text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d", "T", done.output).replace(end[:10], "D")
        said.append(re.sub(r"in [\d.]+s \([\d.]+ [KMG]?B/s\)", "", text))  # how long it took aside
    assert said[0] == said[1] and "Injected incidents" in said[0]
    bad = runner.invoke(app, ["demo", "--dir", str(tmp_path / "x"), "--end", "soon"])
    assert bad.exit_code == 2 and "bad time 'soon'" in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize("hook", ["epilog", "prolog", "healthcheck"])
def test_a_hook_whose_policy_does_not_parse_exits_0_and_says_why(tmp_path: Path, hook: str) -> None:
    """Slurm drains a node whose hook exits non-zero: a site policy that does not parse leaves the node alone, and
    the hook's log says what stopped it (in process: the real-Slurm test sees it through slurmd)."""
    bad = tmp_path / "policy.toml"
    bad.write_text("[epilog\n")
    log = tmp_path / "hook.log"
    done = runner.invoke(app, ["slurm", hook, "--store", str(tmp_path / "store"), "--policy", str(bad), "--log", str(log)],
                         env={"SLURM_JOB_ID": "5", "SLURMD_NODENAME": "gpu001"})
    assert done.exit_code == 0, done.output
    assert f"{hook}" in log.read_text() and "not run: PolicyError" in log.read_text(), log.read_text()


def test_a_store_with_files_of_a_newer_layout_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A file a newer observe wrote (a column this one does not know, as an upgraded collector's would be)
    is not read as if it were of this layout: one line that says so, exit 2, whichever command met it."""
    import polars as pl

    from observe.store import Store

    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(CORPUS / "real" / "xid.log"), "--store", str(store)]).exit_code == 0
    seg = Store(store).live()[0][2]
    pl.read_parquet(seg).with_columns(pl.lit("x").alias("future")).write_parquet(seg)
    done = subprocess.run([sys.executable, "-m", "observe.cli", "query", "--store", str(store)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: the store holds files a newer observe wrote (column 'future'): read it with that version or a later one"]
