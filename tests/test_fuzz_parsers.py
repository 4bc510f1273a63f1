"""Every collector's parse, and the journald reader, on random and hostile text (property-based):
no exception escapes, and every record comes out with its offset. Lines are built from
pieces of the real formats (headers, JSON fields, tags, stamps, Xid lines) cut and joined at random,
with control characters, invalid UTF-8, huge numbers and nesting, so the parsers' own paths run."""
from __future__ import annotations

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
