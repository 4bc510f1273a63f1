"""What a user would write instead of `observe ingest`: one columnar scan of every log line, one header regex,
the few fields a GPU cluster's operator asks for, zstd Parquet. The yardstick of bench/ingest.py.

    python bench/peers.py polars INPUT_DIR OUT_DIR   # polars: scan_csv + str.extract_groups, sink_parquet
    python bench/peers.py duckdb INPUT_DIR OUT_DIR   # DuckDB: read_csv + regexp_extract, COPY ... (FORMAT parquet)
    python bench/peers.py polars-kinds INPUT_DIR OUT_DIR   # polars, and each line's kind by observe's rules

Both read every file under INPUT_DIR as lines (a separator no log holds, no quoting), take the stamp (ISO 8601,
RFC 3164 with the year of the file's last change, or a bracketed one), host, program and pid from the header
where there is one, the Xid code and PCI id, the rank (``[rank12]:``) and the job id of ``slurm-<id>.out``, and
write one zstd Parquet file per input group. They do less than observe (no classification into kinds,
continuation lines, exactly-once offsets, partitions, copies): a floor, not a rival. ``polars-kinds`` also
names each line's kind as a polars user would with observe's own rules (collectors/rules/*.toml): the first
whose pattern the line matches, of the rules of the sources the group holds; the cost of classifying, apart.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

STAMP = (r"^(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
         r"|(?P<bsd>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)|\[(?P<bracket>[^\]]{8,40})\])?\s*")
HEADER = STAMP + r"(?:(?P<host>[\w.-]+) (?P<prog>[\w./-]+)(?:\[(?P<pid>\d+)\])?: )?(?P<msg>.*)$"
XID = r"Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)"
RANK = r"\[rank(\d+)\]:"
JOB = r"slurm-(\d+)\.out$"
SEP = "\x01"  # no log line holds it: every line is one field


def groups(root: Path) -> dict[str, list[str]]:
    """The input files, by what they are: job output, and everything else (node and Slurm logs)."""
    files = sorted(str(p) for p in root.rglob("*") if p.is_file())
    return {"jobs": [f for f in files if f.endswith(".out")], "logs": [f for f in files if not f.endswith(".out")]}


SOURCES = {"jobs": ("nccl", "slurm"), "logs": ("kernel", "slurm")}  # the rules a group's lines are tried against


def kinds(group: str):
    """Each line's kind: the first of the group's rules (observe's patterns, in observe's order) it matches."""
    import polars as pl

    from observe.rules import load

    rules = [r for r in load()[0] if r.source in SOURCES[group]]
    return pl.coalesce([pl.when(pl.col("message").str.contains(r.pattern)).then(pl.lit(r.kind)) for r in rules]
                       + [pl.lit("log")]).alias("kind")


def with_polars(files: list[str], out: Path, year: int, group: str | None = None) -> None:
    import polars as pl

    lines = pl.scan_csv(files, separator=SEP, has_header=False, quote_char=None, new_columns=["line"],
                        include_file_paths="file", infer_schema=False, truncate_ragged_lines=True)
    head = pl.col("line").str.extract_groups(HEADER)
    bsd = pl.concat_str(pl.lit(f"{year} "), pl.col("h").struct.field("bsd"))
    (lines.with_columns(head.alias("h"))
     .select(pl.coalesce(pl.col("h").struct.field("iso").str.to_datetime(strict=False, time_zone="UTC"),
                         bsd.str.to_datetime("%Y %b %e %H:%M:%S", strict=False, time_zone="UTC"),
                         pl.col("h").struct.field("bracket").str.to_datetime(strict=False, time_zone="UTC")).alias("ts"),
             pl.col("h").struct.field("host").alias("node"), pl.col("h").struct.field("prog").alias("program"),
             pl.col("h").struct.field("pid").cast(pl.Int64, strict=False).alias("pid"),
             pl.col("h").struct.field("msg").alias("message"),
             pl.col("line").str.extract(XID, 2).cast(pl.Int32, strict=False).alias("code"),
             pl.col("line").str.extract(XID, 1).alias("gpu"),
             pl.col("line").str.extract(RANK, 1).cast(pl.Int32, strict=False).alias("rank"),
             pl.col("file").str.extract(JOB, 1).alias("job_id"), "file")
     .pipe(lambda lf: lf.sink_parquet(out, compression="zstd") if group is None else
           # the kinds on the lines in one chunk: a chunk per file compiled every rule's regex again for each
           # (polars keeps 32 a thread): 97 CPU-s on the 6,000 job files
           lf.collect().rechunk().with_columns(kinds(group)).write_parquet(out, compression="zstd")))


def with_duckdb(files: list[str], out: Path, year: int) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 1")
    names = ["iso", "bsd", "bracket", "host", "prog", "pid", "msg"]  # HEADER's groups, in order
    con.execute(f"""
        COPY (SELECT
            coalesce(try_cast(nullif(h.iso, '') AS TIMESTAMPTZ),
                     try_strptime('{year} ' || nullif(h.bsd, ''), '%Y %b %d %H:%M:%S'),
                     try_cast(nullif(h.bracket, '') AS TIMESTAMPTZ)) AS ts,
            nullif(h.host, '') AS node, nullif(h.prog, '') AS program,
            try_cast(nullif(h.pid, '') AS BIGINT) AS pid, h.msg AS message,
            try_cast(nullif(regexp_extract(line, '{XID}', 2), '') AS INTEGER) AS code,
            nullif(regexp_extract(line, '{XID}', 1), '') AS gpu,
            try_cast(nullif(regexp_extract(line, '{RANK}', 1), '') AS INTEGER) AS rank,
            nullif(regexp_extract(filename, '{JOB}', 1), '') AS job_id, filename AS file
          FROM (SELECT line, filename, regexp_extract(line, '{HEADER}', {names}) AS h
                FROM read_csv(?, delim = '{SEP}', header = false, quote = '', escape = '',
                              columns = {{'line': 'VARCHAR'}}, filename = true, ignore_errors = true, parallel = false)))
        TO '{out}' (FORMAT parquet, COMPRESSION zstd)""", [files])


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in ("polars", "duckdb", "polars-kinds"):
        sys.exit(__doc__)
    engine, root, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    year = time.gmtime(max(p.stat().st_mtime for p in root.rglob("*") if p.is_file())).tm_year
    for name, files in groups(root).items():
        if files and engine == "duckdb":
            with_duckdb(files, out / f"{name}.parquet", year)
        elif files:
            with_polars(files, out / f"{name}.parquet", year, name if engine == "polars-kinds" else None)


if __name__ == "__main__":
    main()
