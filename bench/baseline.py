"""The plain approach observe's ingest is measured against: a per-line Python ``re`` parser.

Reads a directory laid out like ``observe.simulate`` writes it (slurm/slurmctld.log, slurm/jobcomp.log,
nodes/<node>/syslog|dmesg|nvidia-smi.xml, jobs/slurm-<id>.out), picks the format of each file from
its path, turns every line into one event row of observe's schema (classified with observe's own
rule files, ``collectors/rules/*.toml``, tried in order with Python ``re``; everything else kind
``log``) and writes ``OUT_DIR/events.parquet`` (zstd) through pyarrow, 100k rows at a time.

Usage: python bench/baseline.py INPUT_DIR OUT_DIR
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from observe.schema import arrow_schema  # noqa: E402

EVENT_SCHEMA = arrow_schema(stored=False)

BATCH_ROWS = 100_000
UTC = timezone.utc
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

SYSLOG = re.compile(r"^(\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\S+) ([^\s:\[]+)(?:\[(\d+)\])?: ?(.*)$")
UPTIME = re.compile(r"^\[\s*(\d+)\.(\d+)\] ?(.*)$")
SLURMCTLD = re.compile(r"^\[(\d{4}-\d\d-\d\dT[\d:.]+)\] (.*)$")
JOBCOMP = re.compile(r"(\w+)=(\S*)")
NCCL_LINE = re.compile(r"^(\S+):(\d+):\d+ \[(\d+)\] (.*NCCL (INFO|WARN).*)$")
TORCH_LINE = re.compile(r"^\[rank(\d+)\]:\[([EWIF])(\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d{6})\d* (\S+)\] (.*)$")
PY_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] ")
SLURM_CLIENTS = ("srun:", "slurmstepd:", "salloc:", "sbatch:")
JOB_FILE = re.compile(r"^slurm-(\d+(?:_\d+)?)\.out$")

def load_rules() -> dict[str, list[tuple]]:
    """observe's own detection rules (collectors/rules/*.toml), compiled with Python ``re``, per source:
    (kind, severity, literals, pattern, static attrs). The baseline classifies with the same rules as
    observe, so that both emit the same events."""
    from observe.rules import load

    rules: dict[str, list[tuple]] = {}
    for r in load()[0]:
        rules.setdefault(r.source, []).append((r.kind, r.severity, r.literals, re.compile(r.pattern), dict(r.attrs)))
    return rules


RULES = load_rules()
SEVERITY = {"E": "err", "W": "warning", "I": "info", "F": "crit", "INFO": "info", "WARN": "warning"}


def file_format(path: Path) -> str | None:
    """The demo layout's format of ``path``, from its name."""
    if path.name == "slurmctld.log":
        return "slurm"
    if path.name == "jobcomp.log":
        return "slurm_jobs"
    if path.name in ("syslog", "dmesg"):
        return path.name
    if path.suffix == ".xml":
        return "nvidia_smi"
    if JOB_FILE.match(path.name):
        return "nccl"
    return None


def boot_time(syslog: Path) -> datetime | None:
    """A node's boot time: the first syslog kernel line's stamp minus its uptime."""
    if not syslog.exists():
        return None
    year = datetime.fromtimestamp(syslog.stat().st_mtime, UTC).year
    with open(syslog, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SYSLOG.match(line)
            if m and m.group(7) == "kernel":
                up = UPTIME.match(m.group(9))
                if up:
                    return syslog_time(m, year) - timedelta(seconds=int(up.group(1)), microseconds=int(up.group(2)))
    return None


def syslog_time(m: re.Match, year: int) -> datetime:
    return datetime(year, MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), tzinfo=UTC)


def classify(source: str, message: str, row: dict) -> None:
    """Set kind, severity and the captured columns/attrs from the first matching rule of ``source``
    (a rule with literals is tried only on messages holding one of them, as its file says)."""
    for kind, severity, literals, pattern, static in RULES.get(source, ()):
        if literals and not any(x in message for x in literals):
            continue
        m = pattern.search(message)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            row["kind"], row["severity"] = kind, severity
            for col in ("job_id", "gpu", "node", "program"):
                if col in groups:
                    row[col] = groups.pop(col)
            for col in ("rank", "code", "pid"):  # integer columns (null where the text is no number, as in observe)
                if col in groups:
                    value = groups.pop(col)
                    row[col] = int(value) if value.isdigit() else None
            extra = {**static, **groups}
            row["attrs"] = json.dumps(extra) if extra else None
            return
    row["kind"] = "log"


def parse_line(fmt: str, raw: str, ctx: dict) -> dict:
    """One event row (without provenance) for one line of a file of format ``fmt``."""
    row = {"ts": None, "node": ctx.get("node"), "source": None, "severity": None, "kind": None, "job_id": ctx.get("job_id"),
           "rank": None, "gpu": None, "code": None, "program": None, "pid": None, "message": raw, "raw": raw, "attrs": None}
    source = {"slurm": "slurm", "slurm_jobs": "slurm", "syslog": "syslog", "dmesg": "kernel", "nvidia_smi": "gpu", "nccl": "nccl"}[fmt]
    if fmt == "syslog":
        m = SYSLOG.match(raw)
        if m:
            row.update(ts=syslog_time(m, ctx["year"]), node=m.group(6), program=m.group(7), message=m.group(9),
                       pid=int(m.group(8)) if m.group(8) else None)
            if m.group(7) == "kernel":
                source = "kernel"
                up = UPTIME.match(m.group(9))
                if up:
                    row["message"] = up.group(3)
            elif m.group(7).startswith("slurm"):
                source = "slurm"
    elif fmt == "dmesg":
        m = UPTIME.match(raw)
        if m:
            row.update(program="kernel", message=m.group(3))
            if ctx.get("boot"):
                row["ts"] = ctx["boot"] + timedelta(seconds=int(m.group(1)), microseconds=int(m.group(2)))
    elif fmt == "slurm":
        m = SLURMCTLD.match(raw)
        if m:
            row.update(ts=datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC), program="slurmctld", message=m.group(2))
    elif fmt == "slurm_jobs":
        fields = dict(JOBCOMP.findall(raw))
        if "JobId" in fields:
            end = fields.get("EndTime")
            row.update(ts=datetime.fromisoformat(end).replace(tzinfo=UTC) if end else None, job_id=fields["JobId"],
                       kind="slurm_job_end", severity="notice", program="slurmctld",
                       code=int(fields.get("ExitCode", "0:0").split(":")[0]),
                       attrs=json.dumps({"state": fields.get("JobState"), "nodes": fields.get("NodeList")}))
            row["source"] = source
            return row
    elif fmt == "nccl":
        m = NCCL_LINE.match(raw)
        t = TORCH_LINE.match(raw) if not m else None
        if m:
            row.update(node=m.group(1), pid=int(m.group(2)), gpu=m.group(3), message=m.group(4), program="nccl",
                       severity=SEVERITY[m.group(5)])
        elif t:
            row.update(rank=int(t.group(1)), severity=SEVERITY[t.group(2)], program="torch", message=f"[{t.group(6)}] {t.group(7)}",
                       ts=datetime.fromisoformat(f"{ctx['year']}-{t.group(3)}-{t.group(4)}T{t.group(5)}").replace(tzinfo=UTC))
        elif raw.startswith(SLURM_CLIENTS):  # srun/slurmstepd lines in job output are Slurm's, as in observe
            source, row["program"] = "slurm", raw.split(":", 1)[0]
        else:
            p = PY_STAMP.match(raw)
            if p:
                row["ts"] = datetime.fromisoformat(f"{p.group(1)}.{p.group(2)}").replace(tzinfo=UTC)
    row["source"] = source
    classify(source, row["message"], row)
    return row


def events(path: Path, fmt: str):
    """Rows of one file, with its fingerprint and each line's byte offset."""
    with open(path, "rb") as f:
        head = f.read(1024)
        f.seek(0)
        file_id = hashlib.sha256(str(path).encode() + head).hexdigest()[:16]
        ctx = {"year": datetime.fromtimestamp(path.stat().st_mtime, UTC).year,
               "node": path.parent.name if fmt in ("dmesg", "nvidia_smi", "syslog") else None}
        if fmt == "dmesg":
            ctx["boot"] = boot_time(path.parent / "syslog")
        if fmt == "nccl":
            ctx["job_id"] = JOB_FILE.match(path.name).group(1)
        route = "job_output" if fmt == "nccl" else "system_file"  # as observe tags them (observe/provenance.py)
        offset = 0
        for line in f:
            raw = line.decode("utf-8", "replace").rstrip("\r\n")
            if raw.strip():
                row = parse_line(fmt, raw, ctx)
                row["file_id"], row["offset"], row["route"] = file_id, offset, route
                yield row
            offset += len(line)


def run(input_dir: Path, out_dir: Path) -> int:
    """Parse every file under ``input_dir`` into ``out_dir/events.parquet``; returns the rows written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = EVENT_SCHEMA.names
    total = 0
    with pq.ParquetWriter(out_dir / "events.parquet", EVENT_SCHEMA, compression="zstd") as writer:
        batch: dict[str, list] = {n: [] for n in names}
        for root, _, files in sorted(os.walk(input_dir)):
            for name in sorted(files):
                path = Path(root) / name
                fmt = file_format(path)
                if fmt is None:
                    continue
                for row in events(path, fmt):
                    for n in names:
                        batch[n].append(row[n])
                    if len(batch["raw"]) >= BATCH_ROWS:
                        writer.write_table(pa.Table.from_pydict(batch, schema=EVENT_SCHEMA))
                        total += len(batch["raw"])
                        batch = {n: [] for n in names}
        if batch["raw"]:
            writer.write_table(pa.Table.from_pydict(batch, schema=EVENT_SCHEMA))
            total += len(batch["raw"])
    return total


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    rows = run(Path(argv[0]), Path(argv[1]))
    print(f"{rows} rows -> {Path(argv[1]) / 'events.parquet'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
