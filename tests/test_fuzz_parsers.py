"""Every collector's parse, and the journald reader, on random and hostile text (property-based):
no exception escapes, and every record comes out with its offset. Lines are built from
pieces of the real formats (headers, JSON fields, tags, stamps, Xid lines) cut and joined at random,
with control characters, invalid UTF-8, huge numbers and nesting, so the parsers' own paths run."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observe import collector as registry
from observe.collector import Context
from observe.ingest import finalize, joined_records, parse_unit
from observe.ingest.parse import ParseInput

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
FIXTURES = Path(__file__).parent / "fixtures"

# pieces of what each emitter prints, taken from the project's real fixtures, plus hostile ones
REAL = [line for path in sorted(GOLDEN.glob("*/*")) if path.suffix not in (".jsonl", ".json")
        for line in path.read_text(errors="replace").splitlines()[:40] if line.strip()]
HOSTILE = [
    '{"__REALTIME_TIMESTAMP":"1764300000000000","MESSAGE":["a",[104,105],null],"_UID":["0","1"]}',
    '{"__REALTIME_TIMESTAMP":"99999999999999999999999","_TRANSPORT":"kernel","MESSAGE":null,"PRIORITY":[1,2]}',
    '{"__REALTIME_TIMESTAMP":' + "[" * 3000 + "]" * 3000 + "}",
    '{"MESSAGE":{"nested":{"x":1}},"__REALTIME_TIMESTAMP":"-5"}', "{", "{}", "[]", '{"a":"\\ud800"}',
    "<999>1 - - - - - -", "<13>1 2026-13-45T99:99:99Z h t 1 - [a@1 x=\"\\\"]\"]", "<13>Nov 31 25:61:61 h t[x]: m",
    "Feb 30 10:00:00 host kernel: [99999999999.999999] NVRM: Xid (PCI:0000:zz:00): 99999999999999999999, pid=-1",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "6,18446744073709551616,-1,-;x", "4,1,2,c;\x00\x1b[31m", " SUBSYSTEM=pci", "\t at x",
    "JobId=1 UserId=(x) Name=JobState= JobState= NodeList=[ ExitCode=:", "JobID|JobName|State", "1|a|b|c|d|e|f|g",
    "[rank99999999999]:[E123 10:00:00.0 ProcessGroupNCCL.cpp:1] Watchdog Timeout(ms)=x ran for -5 milliseconds",
    "gpu1:1:1 [0] NCCL INFO comm 0x0 rank -1 nRanks 0 nNodes 0 localRanks 0 busId zzzz",
    "<nvidia_smi_log><gpu id='0'><ecc_errors>" + "<a>" * 200, "\u202e\u0000\ufffd\udcff",
    "slurmd[1]: error: _step_setup: JobId=4294967296 StepId=x", "[2026-11-28T99:00:00.000] error: Node gpu[001-",
]
piece = st.one_of(st.sampled_from(REAL), st.sampled_from(HOSTILE), st.text(max_size=40),
                  st.sampled_from([" ", ": ", "[", "]", "=", "|", ",", "\t", "\r", "\x1b", "{", "}", '"', "\\", "\ufeff"]),
                  st.integers(min_value=-2**70, max_value=2**70).map(str))
line = st.lists(piece, min_size=1, max_size=6).map(lambda parts: "".join(parts).replace("\n", " "))
raw_bytes = st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" "))
record = st.one_of(line, line, raw_bytes.map(lambda b: b.decode("utf-8", "replace")))
CTX = [Context(), Context(node="gpu001", boot_time=datetime(2026, 11, 1, tzinfo=timezone.utc), route="kmsg",
                          header="JobID|JobName|Partition|State|ExitCode|Start|End|NodeList"),
       Context(route="job_output", job_id="42", tz="Europe/Berlin"), Context(route=None, tz="Asia/Tokyo")]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _parsed(name: str, texts: list[str], ctx: Context) -> pl.DataFrame:
    c = registry.get(name)
    if c.whole_file:
        text = "\n".join(texts).encode("utf-8", "surrogatepass").decode("utf-8", "replace")  # as ingest decodes it
        recs = pl.DataFrame({"raw": [text], "offset": [0]}, schema={"raw": pl.String, "offset": pl.Int64})
    else:
        recs = joined_records(["".join(t + "\n" for t in texts).encode("utf-8", "surrogatepass")], c)
    out = finalize(c.parse(recs, ctx), c, ctx, "fuzz")
    if c.whole_file:  # a document is as many events as it holds
        assert out.get_column("offset").is_between(0, len(recs.get_column("raw")[0].encode()) + 1 << 16).all()
    else:  # every record, once (a job record also gives its start, one byte after)
        assert set(out.get_column("offset")) >= set(recs.get_column("offset"))
        assert out.height <= 2 * recs.height
    return out


@pytest.mark.parametrize("name", ["kernel", "syslog", "nccl", "slurm", "slurm_jobs", "nvidia_smi", "dcgm"])
@FUZZ
@given(texts=st.lists(record, min_size=1, max_size=12), ctx=st.sampled_from(CTX))
def test_every_collectors_parse_survives_anything(name: str, texts: list[str], ctx: Context) -> None:
    _parsed(name, texts, ctx)


@FUZZ
@given(st.lists(st.dictionaries(
    st.sampled_from(["MESSAGE", "SYSLOG_IDENTIFIER", "_TRANSPORT", "_UID", "PRIORITY", "_PID", "_HOSTNAME", "_COMM",
                     "__REALTIME_TIMESTAMP", "SYSLOG_PID", "OTHER"]),
    st.recursive(st.one_of(st.none(), st.text(max_size=20), st.integers(-300, 2**64), st.booleans(), st.floats()),
                 lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                 max_leaves=12)), min_size=1, max_size=8))
def test_journald_entries_of_any_shape_are_read(entries: list[dict]) -> None:
    """journalctl -o json as any sender can shape it (and any value a file claiming to be it holds):
    strings, arrays of bytes, several values, nulls, numbers, objects, in any field."""
    import json

    texts = [json.dumps({"__REALTIME_TIMESTAMP": "1764300000000000", **e}) for e in entries]
    out = _parsed("syslog", texts, Context(route=None))
    kernel = out.filter(pl.col("route") == "journal_kernel")
    assert all(e.get("_TRANSPORT") == "kernel" for e in entries) or kernel.height < len(entries)


@FUZZ
@given(st.lists(record, min_size=1, max_size=20))
def test_a_parse_unit_of_anything_stores_every_record(texts: list[str]) -> None:
    """Whatever the parser does, ingest's unit keeps every record (parsed, unparsed or set aside)."""
    c = registry.get("syslog")
    recs = joined_records(["".join(t + "\n" for t in texts).encode("utf-8", "surrogatepass")], c)
    done = parse_unit(recs, [ParseInput("fuzz", None)], c, Context())
    stored = sum(part.height for part in done.parts.values())
    assert stored == done.records == recs.height - done.blank


# Stamps no real event carries, in each format's own place: years 0000..9999 (and 0001 east of UTC,
# which is year 0 in UTC), uptimes of any float (huge, negative, inf, nan), journald realtimes of any
# Int64 and beyond, epoch seconds that overflow microseconds. They must leave the record's time (or
# uptime) out, never the run: partitions, boot times and the store see times within 1970..2200 only.
LOW, HIGH = datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(2200, 1, 1, tzinfo=timezone.utc)
year = st.one_of(st.sampled_from([0, 1, 1677, 1969, 2199, 2200, 2262, 9999]), st.integers(0, 9999))
zone = st.sampled_from(["", "Z", "+14:00", "-14:00", "+00:00"])
uptime = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x:.6f}" if abs(x) < 1e300 else repr(x)),
    st.integers(0, 10**40).map(lambda n: f"{n}.000000"), st.sampled_from(["99999999999999999999.0", "inf", "nan", "-5.0",
                                                                          "7258118400.000001", "0.000000"]))
big = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-10**30, 10**30),
                st.sampled_from([-2**63, 2**63 - 1, -1, 0, 10**16, -62135596800000000]))


def _ymd(y: int) -> str:
    return f"{y:04d}-01-01"


STAMPED = {  # source -> strategy of one hostile line
    "nccl": st.one_of(st.builds(lambda y: f"[{_ymd(y)} 00:00:00] gpu001:11:12 [0] NCCL WARN x", year),
                      st.builds(lambda y: f"[{_ymd(y)} 23:59:59,999] gpu001:11:12 [0] NCCL INFO x", year)),
    "kernel": st.one_of(st.builds(lambda y, z: f"{_ymd(y)}T00:00:00,000000{z} NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y", year, zone),
                        st.builds(lambda y: f"[Mon Jan  1 00:00:00 {y:04d}] kernel x", year),
                        st.builds(lambda u: f"[{u}] NVRM: x", uptime),
                        st.builds(lambda n: f"6,1,{n},-;NVRM: x", big),
                        st.builds(lambda u: f"Nov 28 09:20:00 gpu001 kernel: [{u}] x", uptime)),
    "syslog": st.one_of(st.builds(lambda u: f"Nov 28 09:20:00 gpu001 kernel: [{u}] x", uptime),
                        st.builds(lambda y, z: f"<13>1 {_ymd(y)}T00:00:00{z or 'Z'} h a 1 - - x", year, zone),
                        st.builds(lambda y, z: f"{_ymd(y)}T00:00:00.000000{z} h kernel: x", year, zone),
                        st.builds(lambda n: '{"__REALTIME_TIMESTAMP":"%d","_TRANSPORT":"kernel","MESSAGE":"x"}' % n, big),
                        st.builds(lambda n: f"{n}.000000 gpu001 kernel: x", big),
                        st.builds(lambda u: f"[{u}] gpu001 kernel: x", uptime)),
    "slurm": st.builds(lambda y: f"[{_ymd(y)}T00:00:00.000] sched: Allocate JobId=1 NodeList=gpu001 #CPUs=2 Partition=gpu", year),
    "slurm_jobs": st.builds(lambda a, b: f"1|x|FAILED|1:0|{_ymd(a)}T00:00:00|{_ymd(b)}T00:00:00|gpu001", year, year),
    "slurm_jobs/jobcomp": st.builds(lambda a, b: f"JobId=1 UserId=a(1) GroupId=a(1) Name=x JobState=COMPLETED Partition=p TimeLimit=1 "
                               f"StartTime={_ymd(a)}T00:00:00 EndTime={_ymd(b)}T00:00:00 NodeList=gpu001 NodeCnt=1 "
                               "ProcCnt=1 WorkDir=/ ReservationName= Tres= Account= QOS= WcKey= Cluster= "
                               f"SubmitTime={_ymd(a)}T00:00:00 EligibleTime={_ymd(a)}T00:00:00 DerivedExitCode=0:0 "
                               "ExitCode=0:0", year, year),
}
GOOD_LINE = {  # a record of the same input that must be stored, with its time
    "nccl": "[2026-11-28 09:00:00] gpu001:11:12 [0] NCCL WARN GOODMARK",
    "kernel": "2026-11-28T09:00:00,000000+00:00 NVRM: GOODMARK",
    "syslog": "Nov 28 09:20:01 gpu001 kernel: [  12.000000] GOODMARK",
    "slurm": "[2026-11-28T09:00:00.000] GOODMARK",
    "slurm_jobs": "2|GOODMARK|COMPLETED|0:0|2026-11-28T09:00:00|2026-11-28T10:00:00|gpu001",
    "slurm_jobs/jobcomp": "JobId=2 UserId=a(1) GroupId=a(1) Name=GOODMARK JobState=COMPLETED Partition=p TimeLimit=1 "
                          "StartTime=2026-11-28T09:00:00 EndTime=2026-11-28T10:00:00 NodeList=gpu001 NodeCnt=1 "
                          "ProcCnt=1 WorkDir=/ ReservationName= Tres= Account= QOS= WcKey= Cluster= "
                          "SubmitTime=2026-11-28T09:00:00 EligibleTime=2026-11-28T09:00:00 DerivedExitCode=0:0 ExitCode=0:0",
}
SACCT_HEADER = "JobID|JobName|State|ExitCode|Start|End|NodeList"
STAMP_CTX = [Context(node="gpu001"), Context(node="gpu001", tz="Asia/Tokyo"),
             Context(node="gpu001", boot_time=datetime(2026, 11, 1, tzinfo=timezone.utc), route="kmsg",
                     header="JobID|JobName|State|ExitCode|Start|End|NodeList"),
             Context(node="gpu001", route="job_output", job_id="5", tz="Pacific/Kiritimati")]


def _hostile_stamps(source: str) -> st.SearchStrategy[list[str]]:
    """Hostile lines of ``source`` with the good line somewhere among them."""
    return st.tuples(st.lists(STAMPED[source], min_size=1, max_size=8), st.integers(0, 8)).map(
        lambda t: [*t[0][:t[1]], GOOD_LINE[source], *t[0][t[1]:]])


def _sane_times(df: pl.DataFrame) -> None:
    out = df.filter(pl.col("ts").is_not_null() & ~pl.col("ts").is_between(LOW, HIGH))
    assert out.is_empty(), out.select("ts", "raw").head(3).to_dicts()


def _written(done, tmp: Path) -> int:
    """``done``'s parts written as the collector spools them (then made durable); their rows."""
    from observe.store import Store

    spool = Store(tmp)
    temps = []
    for (source, day), part in done.parts.items():
        assert day == "unknown" or "1970-01" <= day < "2200-01", day
        _sane_times(part)
        temps.append(spool.write_partition(source, day, part, tag="b1", durable=False))
    return sum(w.rows for _, w in spool.durable(temps))


@pytest.mark.parametrize("source", sorted(STAMPED))
@FUZZ
@given(data=st.data())
def test_times_out_of_range_never_stop_the_parse_or_the_write(source: str, data) -> None:
    """The collector's path (parse unit, boot times, partitions, spool segments) on lines whose stamps
    are out of any range, the good line beside them stored with its time."""
    import tempfile

    texts, ctx = data.draw(_hostile_stamps(source)), data.draw(st.sampled_from(STAMP_CTX))
    ctx = replace(ctx, header=SACCT_HEADER if source == "slurm_jobs" else None)  # sacct rows are read by their header
    c = registry.get(source.split("/")[0])
    recs = joined_records(["".join(t + "\n" for t in texts).encode()], c)
    done = parse_unit(recs, [ParseInput("fuzz", None)], c, ctx)
    assert all(LOW <= boot <= HIGH for boot in done.boots.values()), done.boots
    rows = pl.concat([p.drop("header") for p in done.parts.values()], how="vertical_relaxed")
    _sane_times(rows)
    good = rows.filter(pl.col("message").str.contains("GOODMARK", literal=True) | pl.col("raw").str.contains("GOODMARK", literal=True))
    assert good.height >= 1 and good.get_column("ts").is_not_null().all(), good.select("ts", "raw").to_dicts()
    with tempfile.TemporaryDirectory() as tmp:
        assert _written(done, Path(tmp)) == done.stored == rows.height


@FUZZ
@given(data=st.data())
def test_ingest_of_times_out_of_range_stores_every_other_record(data) -> None:
    """``observe ingest``'s own run (planning, boot times told across files, the writer) on a file of
    hostile stamps beside a good file: nothing raises, the good file is stored whole."""
    import tempfile

    from observe.ingest import ingest
    from observe.store import Store

    source = data.draw(st.sampled_from(sorted(STAMPED)))
    texts = data.draw(_hostile_stamps(source))
    tz = data.draw(st.sampled_from(["UTC", "Asia/Tokyo", "America/Los_Angeles"]))
    with tempfile.TemporaryDirectory() as tmp:
        bad, good = Path(tmp) / "bad.log", Path(tmp) / "good.log"
        header = SACCT_HEADER + "\n" if source == "slurm_jobs" else ""
        bad.write_text(header + "".join(t + "\n" for t in texts))
        good.write_text(header + GOOD_LINE[source] + "\n")
        store = Store(Path(tmp) / "store")
        summary = ingest([str(bad), str(good)], store, workers=1, source=source.split("/")[0], node="gpu001", tz=tz)
        assert not summary.failed, summary.failed
        df = store.scan().collect()
        _sane_times(df)
        marked = df.filter(pl.col("raw").str.contains("GOODMARK", literal=True))
        assert marked.get_column("file_id").n_unique() == 2 and marked.get_column("ts").is_not_null().all()
