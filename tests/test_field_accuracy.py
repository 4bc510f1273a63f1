"""bench/field_accuracy.py scores parsed fields against hand-written labels: a right parse counts
right, a wrong field is a miss, a start line the parser joined is a miss on every field, stale
labels are refused, and the real DEV labels give an overall figure."""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import CORPUS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import field_accuracy as fa  # noqa: E402

XID = "[19639.966193] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000003 intr 00041000"
DETAIL = "                 Channel ID 00000003 detail line"  # indented: the kernel collector joins it
SLURM = "[2022-05-27T10:42:30.155] _slurm_rpc_submit_batch_job: JobId=127441 InitPrio=5772 usec=1032"


def _xid_label(line: int = 1, **fields) -> dict:
    return {"line": line, "text": XID, "record": "start", "family": "nvrm", "kind": "gpu_xid",
            "fields": {"uptime": 19639.966193, "gpu": "0000:01:00", "code": 32, **fields},
            "message": "NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000003 intr 00041000"}


def _corpus(root: Path, stem: str, lines: list[str], labels: list[dict], folder: str = "real") -> tuple[Path, Path]:
    (root / folder / "labels").mkdir(parents=True, exist_ok=True)
    log = root / folder / f"{stem}.log"
    log.write_text("\n".join(lines) + "\n")
    lab = root / folder / "labels" / f"{stem}.jsonl"
    lab.write_text("".join(json.dumps(label) + "\n" for label in labels))
    return log, lab


def _score(root: Path, stem: str, lines: list[str], labels: list[dict]) -> fa.Result:
    log, lab = _corpus(root, stem, lines, labels)
    return fa.score_file(log, lab, fa.SOURCE[stem], "dev", root)


def test_a_right_parse_counts_right(tmp_path: Path) -> None:
    res = _score(tmp_path, "xid", [XID], [_xid_label()])
    assert {c["field"] for c in res.checks} == {"kind", "uptime", "gpu", "code", "message"}
    assert all(c["right"] for c in res.checks), res.checks
    assert res.records == [{"set": "dev", "file": "real/xid.log", "line": 1, "family": "nvrm", "record": "start",
                            "right": True, "stamped": False}]
    overall = fa.summary(res)["dev"]["overall"]
    assert (overall["checked"], overall["right"], overall["accuracy"]) == (5, 5, 100.0)


def test_time_job_and_message_of_a_slurm_line(tmp_path: Path) -> None:
    label = {"line": 1, "text": SLURM, "record": "start", "family": "slurm", "kind": "log",
             "fields": {"time": "2022-05-27 10:42:30.155", "job_id": "127441"},
             "message": "_slurm_rpc_submit_batch_job: JobId=127441 InitPrio=5772 usec=1032"}
    res = _score(tmp_path, "slurm", [SLURM], [label])
    assert all(c["right"] for c in res.checks), res.checks
    assert {c["field"] for c in res.checks} == {"kind", "time", "job_id", "message"}


def test_a_wrong_field_is_a_miss(tmp_path: Path) -> None:
    res = _score(tmp_path, "xid", [XID], [_xid_label(code=31, pid=1234)])
    wrong = fa.misses(res)
    assert [(m["field"], m["expected"], m["got"]) for m in wrong] == [("code", 31, 32), ("pid", 1234, None)]
    overall = fa.summary(res)["dev"]["overall"]
    assert (overall["checked"], overall["right"]) == (6, 4)
    assert fa.common(wrong)[0]["count"] == 1


def test_a_start_the_parser_joined_is_a_miss_on_every_field(tmp_path: Path) -> None:
    split = {"line": 2, "text": DETAIL, "record": "start", "family": "nvrm", "kind": "log",
             "fields": {"pid": 5}, "message": DETAIL.strip()}
    res = _score(tmp_path, "xid", [XID, DETAIL], [_xid_label(), split])
    on_two = [c for c in res.checks if c["line"] == 2]
    assert {c["field"] for c in on_two} == {"kind", "pid", "message"}
    assert not any(c["right"] for c in on_two)
    assert {c["why"] for c in on_two} == {"record split wrong"}
    assert fa.summary(res)["dev"]["overall"]["starts_found"] == 1
    # labelled as the continuation it is, the same line is joined right and checks no field
    cont = {"line": 2, "text": DETAIL, "record": "continuation", "family": "nvrm"}
    res = _score(tmp_path, "xid", [XID, DETAIL], [_xid_label(), cont])
    assert [r["right"] for r in res.records] == [True, True]
    assert all(c["line"] == 1 for c in res.checks)


def test_a_stamped_line_labelled_continuation_is_counted_against_the_convention(tmp_path: Path) -> None:
    second = XID.replace("19639.966193", "19639.966200")  # a printk record of its own
    cont = {"line": 2, "text": second, "record": "continuation", "family": "nvrm"}
    res = _score(tmp_path, "xid", [XID, second], [_xid_label(), cont])
    overall = fa.summary(res)["dev"]["overall"]
    assert (overall["stamped_continuations"], overall["stamped_started"]) == (1, 1)
    assert "1 lines labelled continuation carry a stamp of their own" in "\n".join(fa.table(fa.summary(res)))
    res = _score(tmp_path, "xid", [XID, DETAIL], [_xid_label(), {"line": 2, "text": DETAIL, "record": "continuation",
                                                               "family": "nvrm"}])
    assert fa.summary(res)["dev"]["overall"]["stamped_continuations"] == 0


def test_stale_labels_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = {**_xid_label(), "text": XID.replace("32,", "31,")}
    log, lab = _corpus(tmp_path, "xid", [XID], [stale])
    with pytest.raises(fa.StaleLabels, match="text differs from corpus line 1"):
        fa.score_file(log, lab, "kernel", "dev", tmp_path)
    assert fa.main(["--corpus", str(tmp_path), "--set", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "labels out of date" in err and "real/labels/xid.jsonl line 1" in err


def test_a_corpus_file_without_labels_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _corpus(tmp_path, "xid", [XID], [_xid_label()])
    (tmp_path / "real" / "oom.log").write_text(XID + "\n")
    assert fa.main(["--corpus", str(tmp_path), "--set", "dev", "--misses"]) == 0
    out = capsys.readouterr().out
    assert "skipped dev: real/oom.log (no labels)" in out and "overall: 5/5 fields right (100.0%)" in out


def test_times_compare_as_printed_and_across_an_offset() -> None:
    got = datetime(2024, 3, 5, 10, 0, 0, 123456, tzinfo=timezone.utc)
    assert fa.time_right("2024-03-05 10:00:00.1234567", got, "2024-03-05 10:00:00.1234567 host x")
    assert not fa.time_right("2024-03-05 10:00:00.123", got, "2024-03-05 10:00:00.123 host x")
    assert fa.time_right("03-05 10:00:00.123456", got, "Mar  5 10:00:00.123456 host x")
    assert fa.time_right("10:00:00.123456", got, "10:00:00.123456 x")
    assert fa.time_right("2024-03-05 12:00:00.123456", got, "2024-03-05T12:00:00.123456+02:00 host x")
    assert not fa.time_right("2024-03-05 12:00:00.123456", got, "2024-03-05T12:00:00.123456 host x")


def test_the_dev_labels_give_an_overall_accuracy(capsys: pytest.CaptureFixture[str]) -> None:
    if not list((CORPUS / "real" / "labels").glob("*.jsonl")):
        pytest.skip("no DEV labels yet")
    assert fa.main(["--set", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    overall = doc["sets"]["dev"]["overall"]
    assert overall["checked"] > 0 and 0 <= overall["accuracy"] <= 100
    print(f"DEV field accuracy {overall['accuracy']}% of {overall['checked']} fields")
