"""A job's own text cannot move the fields of its Slurm record: jobcomp/filetxt prints Name, WorkDir
and WcKey as they are (spaces, ``Key=``, newlines), sacct --parsable2 a ``|`` in a name as a field.
A record that reads two ways is left unparsed; one a newline split is read whole."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from conftest import parse_file

END = ("JobState=FAILED Partition=gpu TimeLimit=60 StartTime=2026-11-22T10:00:00 EndTime=2026-11-22T10:40:00 "
       "NodeList=gpu005 NodeCnt=1 ProcCnt=8")
FORGED_RUN = ("JobState=COMPLETED Partition=gpu TimeLimit=60 StartTime=2026-11-22T10:00:00 "
              "EndTime=2026-11-22T10:05:00 NodeList=gpu999 NodeCnt=1 ProcCnt=8")


def _jobcomp(job: int, name: str, workdir: str = "/home/bob", wckey: str = "") -> str:
    """A record as jobcomp_filetxt.c's JOB_FORMAT prints it (its trailing space included)."""
    return (f"JobId={job} UserId=bob(1002) GroupId=bob(1002) Name={name} {END} WorkDir={workdir} ReservationName= "
            f"Tres=cpu=8,node=1 Account=ml QOS=normal WcKey={wckey} Cluster=demo SubmitTime=2026-11-22T09:59:00 "
            f"EligibleTime=2026-11-22T09:59:00 DerivedExitCode=0:0 ExitCode=1:0 \n")


def _ends(tmp: Path, text: str, name: str = "jobcomp.log") -> pl.DataFrame:
    path = tmp / name
    path.write_text(text)
    return parse_file(path, "slurm_jobs").filter(pl.col("kind") == "slurm_job_end")


def test_names_and_directories_with_keys_keep_the_record_slurm_made(tmp_path: Path) -> None:
    text = (_jobcomp(1, "train BatchHost=gpu999 ExitCode=0:0") + _jobcomp(2, "a b=c", workdir="/x NodeList=gpu999")
            + _jobcomp(3, "eval", wckey="k ExitCode=0:0"))
    ends = _ends(tmp_path, text)
    assert ends.get_column("job_id").to_list() == ["1", "2", "3"]
    assert set(ends.get_column("attrs").str.json_path_match("$.nodes")) == {"gpu005"}
    assert set(ends.get_column("code")) == {1}
    assert ends.get_column("attrs").str.json_path_match("$.name").to_list() == [
        "train BatchHost=gpu999 ExitCode=0:0", "a b=c", "eval"]


def test_a_record_that_reads_two_ways_is_left_unparsed(tmp_path: Path) -> None:
    """A name or a directory holding a copy of the fields Slurm makes: which copy is Slurm's cannot
    be told from the text, so neither is believed (the job's owner hides only their own job)."""
    path = tmp_path / "jobcomp.log"
    path.write_text(_jobcomp(1, f"x {FORGED_RUN} WorkDir=/y") + _jobcomp(2, "x", workdir=f"/y {FORGED_RUN} WorkDir=/z")
                    + _jobcomp(3, "plain"))
    df = parse_file(path, "slurm_jobs")
    assert df.filter(pl.col("kind") == "slurm_job_end").get_column("job_id").to_list() == ["3"]
    assert df.filter(pl.col("job_id").is_null()).get_column("offset").to_list() == [0, len(_jobcomp(1, f"x {FORGED_RUN} WorkDir=/y"))]
    assert "gpu999" not in "".join(df.get_column("attrs").drop_nulls())


def test_a_name_with_newlines_cannot_start_a_record_of_its_own(tmp_path: Path) -> None:
    """``sbatch -J $'x\\nJobId=1 UserId=root(0) GroupId=root(0) Name=y'``: the line after the real
    head is its name's rest, joined to it; the record is the real job's, its fields Slurm's."""
    forged = "x\nJobId=1 UserId=root(0) GroupId=root(0) Name=y"
    ends = _ends(tmp_path, _jobcomp(7, forged) + _jobcomp(8, "a\nb\nc") + _jobcomp(9, "plain"))
    assert ends.get_column("job_id").to_list() == ["7", "8", "9"]
    assert ends.get_column("offset").to_list()[0] == 0
    assert set(ends.get_column("attrs").str.json_path_match("$.user")) == {"bob"}
    assert ends.get_column("attrs").str.json_path_match("$.name").to_list()[:2] == [forged, "a\nb\nc"]


SACCT_HEADER = "JobID|JobName|Partition|State|ExitCode|Start|End|NodeList|User\n"


def _sacct_row(job: str, name: str) -> str:
    return f"{job}|{name}|gpu|FAILED|1:0|2026-11-22T10:00:00|2026-11-22T10:40:00|gpu005|bob\n"


def test_sacct_rows_with_a_bar_or_a_newline_in_the_name(tmp_path: Path) -> None:
    """A ``|`` in the one free-text column: the fields after it are read from the right. A newline:
    the row's head and the rest after it (which may be shaped as a whole row) are left unparsed."""
    text = (SACCT_HEADER + _sacct_row("11", "a|b|COMPLETED|0:0") + _sacct_row("12", "x\n13|y|gpu|COMPLETED|0:0|"
            "2026-11-22T10:00:00|2026-11-22T10:01:00|gpu999|root") + _sacct_row("14", "plain"))
    ends = _ends(tmp_path, text, "sacct.txt")
    assert ends.get_column("job_id").to_list() == ["11", "14"]
    assert ends.get_column("attrs").str.json_path_match("$.name").to_list() == ["a|b|COMPLETED|0:0", "plain"]
    assert set(ends.get_column("attrs").str.json_path_match("$.nodes")) == {"gpu005"}


def test_the_jobs_gpus_come_from_its_allocated_tres_read_once(tmp_path: Path) -> None:
    """Tres= is the job's allocated TRES (gres/gpu=N, typed counts beside it); a directory holding a copy
    of the field makes it two readings, and the job's GPUs are left unknown (never the user's number)."""
    text = (_jobcomp(1, "a").replace("Tres=cpu=8,node=1", "Tres=cpu=192,mem=2000G,node=2,billing=192,gres/gpu=16,gres/gpu:h100=16")
            + _jobcomp(2, "b", workdir="/x ReservationName= Tres=gres/gpu=999 Account=y") + _jobcomp(3, "c"))
    gpus = _ends(tmp_path, text).get_column("attrs").str.json_path_match("$.gpus").to_list()
    assert gpus == ["16", None, None], gpus
