"""Job output (``slurm-<job>.out``): NCCL debug lines, PyTorch distributed (ProcessGroupNCCL) messages
in the old ``[E ProcessGroupNCCL.cpp:NNN]`` and glog ``[rank3]:[E626 16:48:25.44 ...]`` styles,
Python tracebacks, and the srun/slurmstepd lines Slurm writes into the same file.

Sample: ``ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed``
Python ``logging`` lines (``[2026-11-08 19:02:39,710] [INFO] ...``) give their time and level. Free
text is kept as ``log``; the NCCL ``[N]`` device index goes to ``gpu``, ``[rankN]`` to ``rank``.
"""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone

import polars as pl

from collectors._launchers import HOST, ROLE, RUNTIME_PREFIX, SRUN_LABEL, TASK_LABEL, TORCHRUN_LABEL, launcher_cut
from collectors._slurm_text import SLURM_PROGRAMS, slurm_fields
from observe import timeparse as tp
from observe.collector import Collector, Context, input_of, register, split_header
from observe.frames import any_of, scatter_rows

# ASCII classes ([0-9], [A-Za-z]) where it counts: the regex engine runs them twice as fast as Unicode \w and \d
# NCCL's own header: source: NVIDIA/nccl src/debug.cc ncclDebugLog (2.4-2.28): "%s:%d:%d " (hostname cut at its
#   first ".", pid, tid), then "[%d] NCCL INFO ", "[%d] %s:%d NCCL WARN " (2.19+: "[%d] %s:%d (%s) NCCL WARN ", the
#   function too), "[%d] %f %s:%d NCCL TRACE " (cudaDev, milliseconds since init) or, for API calls at TRACE level,
#   "NCCL CALL " with no device. 2.26+ puts strftime(NCCL_DEBUG_TIMESTAMP_FORMAT, local time) first, by default
#   "[%F %T] " and on WARN lines only (NCCL_DEBUG_TIMESTAMP_LEVELS=WARN).
# Before it, a launcher's label (srun --label, torchrun) or the host pdsh puts first: source: chaos/pdsh
#   src/pdsh/dsh.c (rsh thread, with labels, the default): out("%S: %s", a->host, buf) (deepspeed's multi-node
#   launcher runs pdsh).
NCCL = (r"\s*" + RUNTIME_PREFIX + r"(?:(?P<srank>\d{1,6}): \s*)?(?:\[" + ROLE + r"(?P<lrank>\d+)\]:\s?|[A-Za-z0-9][\w.-]*: )?"
        r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] )?(?:\[(?P<tag>[0-9]+)\]\s*)?"
        r"(?P<host>[A-Za-z0-9_.-]+):(?P<pid>[0-9]+):(?P<tid>[0-9]+)(?: \[(?P<dev>[0-9]+)\])? ")
NCCL_BARE = r"(?P<host>[A-Za-z0-9_.-]+):(?P<pid>[0-9]+):(?P<tid>[0-9]+)(?: \[(?P<dev>[0-9]+)\])? "  # most lines: no prefix
NCCL_LEVEL = r"NCCL (INFO|WARN|TRACE|ABORT|ERROR|CALL)"
# NCCL 2.0-2.3 printed the level without "NCCL": source: NVIDIA/nccl src/include/debug.h 2.1-2.3
#   INFO: fprintf(ncclDebugFile,"%s:%d:%d [%d] INFO ", hostname, getpid(), gettid(), cudaDev);
#   WARN: fprintf(ncclDebugFile,"\n%s:%d:%d [%d] %s:%d WARN ", hostname, getpid(), gettid(), cudaDev, __FILE__, __LINE__)
OLD_LEVEL = r"^(?:[\w/.]+:\d+ )?(INFO|WARN|TRACE) "
OLD_NCCL = r"[\w.-]:\d+:\d+ \[\d+\] (?:[\w/.]+:\d+ )?(?:INFO|WARN|TRACE) "
# A GPU's PCI id as NCCL prints it ("busId %lx": the int64 of src/misc/utils.cc busIdToInt64, which
# int64ToBusId turns back with "%04lx:%02lx:%02lx.%01lx", id >> 20, (id & 0xff000) >> 12, (id & 0xff0) >> 4,
# id & 0xf): "busId e7000" is 0000:e7:00.0, the GPU the line is about (gpu, as dddd:bb:dd).
BUS_ID = r"\bbusId ([0-9a-f]{5,12})\b"
TORCH = (
    r"\s*" + SRUN_LABEL + r"?(?:\[" + ROLE + r"(?P<rank>\d+)\]:\s?)?(?P<pre>.*?)\[(?P<lvl>[EWIF])(?:(?P<md>\d{3,4}) "
    r"(?P<clock>\d\d:\d\d:\d\d\.\d+)(?: \d+)?)? ?(?P<src>[\w.]+\.(?:cpp|cc|h|hpp|py):\d+)\] "
)
# torch._logging's glog-like layout (torch.distributed.elastic's agent since v2.2), no brackets around the
# level and stamp: source: pytorch/pytorch torch/_logging/_internal.py TorchLogsFormatter.format (v2.2-v2.9):
#   f"{record.rankprefix}{shortlevel}{record.asctime}.{int(record.msecs*1000):06d} {record.thread} "
#   f"{os.path.relpath(record.pathname, ...)}:{record.lineno}]{record.traceid}{record.artifactprefix}"
#   (asctime "%m%d %H:%M:%S"; record.process instead of record.thread in later releases: the number is not
#   taken as a pid), rankprefix "[rank%d]:" under torch.distributed.
TORCH_LOGS = (
    r"\s*" + SRUN_LABEL + r"?(?:\[" + ROLE + r"(?P<rank>\d+)\]:\s?)?(?P<lvl>[EWIFDC])(?P<md>\d{4}) "
    r"(?P<clock>\d\d:\d\d:\d\d\.\d+) \d+ (?P<src>[\w./-]+\.py:\d+)\]\s?"
)
TORCH_LOGS_START = r"^\s*(?:" + TORCHRUN_LABEL + r")?" + r"[EWIFDC]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ [\w./-]+\.py:\d+\]"
# Python logging's basicConfig layout: source: python/cpython Lib/logging/__init__.py (2.x-3.13)
#   BASIC_FORMAT = "%(levelname)s:%(name)s:%(message)s" ("ERROR:torch.distributed.elastic.multiprocessing.api:...").
PY_BASIC = r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:[A-Za-z_][\w.]*):"
# [rank3]:, srun's 3:, or both (srun -l torchrun: srun's task, one per node, then torchrun's rank): the rank is the latter
RANK_PREFIX = r"^\s*(?:(\d{1,6}): )?(?:\[" + ROLE + r"(\d+)\]:\s?)?"
# An indented line without a launcher label continues the record above (a traceback frame, a wrapped line);
# a labelled one is a record of its own (the label is a header), except the lines of a Python traceback (one
# exception report that the launcher (srun's task, torchrun's rank, pdsh's host) labels line by line: source:
# python/cpython Lib/traceback.py
# StackSummary.format, 3.x: '  File "{}", line {}, in {}\n' then the source line indented by four) and the
# rows of torchrun's failure table, likewise one message: source: pytorch/pytorch
# torch/distributed/elastic/multiprocessing/errors/__init__.py (v1.9-v2.9) _format_failure:
# "[{idx}]:\n  time      : {time}\n  host      : {hostname}\n  rank      : {rank} (local_rank: {local_rank})\n
# exitcode  : {exitcode} (pid: {pid})\n  error_file: {error_file}\n  traceback : {message}" (keys padded to 10).
TRACEBACK_TAIL = r" {2}(?:File \"[^\"]+\", line \d+|  +\S)"
RANKED_INDENT = (r"^\s|^\s*" + TASK_LABEL + r"\s {2}[a-z_]{4,10} *: "
                 + r"|^\s*" + TASK_LABEL + r" ?" + TRACEBACK_TAIL + r"|^" + HOST + r": " + TRACEBACK_TAIL)
# torchrun's ChildFailedError prints each failure as an ``[i]:`` line and indented fields: the line
# continues the heading before it ("Root Cause (first observed failure):"), so one record holds both
FAILURE_INDEX = r"^\s*(?:" + TASK_LABEL + r"\s?)?\[\d+\]:\s*$"
# and the rules of its box (ChildFailedError.format_msg: boarder "=" * width, section "-" * width, 60 wide by
# default) belong to the same message.
FAILURE_RULE = r"^\s*(?:" + TASK_LABEL + r"\s?)?(?:={20,}|-{20,})\s*$"
# Lines of a multi-line exception message (no header of their own, not indented): PyTorch's reading of an
# NCCL result and NCCL's last error after "NCCL error ..." (NCCLUtils.cpp getNcclErrorDetailStr: interpret +
# "\nLast error:\n" + ncclGetLastError), and the advice c10 appends to a CUDA error (source: pytorch/pytorch
# c10/cuda/CUDAMiscFunctions.cpp get_cuda_check_suffix, v1.10-v2.9: "\nCUDA kernel errors might be asynchronously
# reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing
# CUDA_LAUNCH_BLOCKING=1"; c10/cuda/CUDAException.cpp v2.1+: "\nCompile with `TORCH_USE_CUDA_DSA` to enable
# device-side assertions.\n"), and the C++ backtrace a c10::Error carries in its text (source: pytorch/pytorch
# c10/util/Logging.cpp (v1.x-v2.9) Error::Error(SourceLocation, msg): str("Exception raised from ", source_location,
# " (most recent call first):\n", backtrace), source_location printed as "%s at %s:%d" (function, file, line;
# c10/util/Exception.cpp operator<<); the frames by c10/util/Backtrace.cpp: "frame #" << n << ": " << symbol).
EXCEPTION_TEXT = (
    r"^(?:nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError): |Last error:"
    r"|CUDA kernel errors might be asynchronously reported|For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    r"|Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions"
    r"|Exception raised from \S+ at \S+ \(most recent call first\):|frame #\d+: )"
)
RECORD_START = (
    r"^\s*(?:" + TASK_LABEL + r"\s?\S|(?:" + TORCHRUN_LABEL + r"\s?)?"
    r"(?:\[[EWIF][\d ]|\[\d+\]\s*[\w.-]+:\d+:\d+ |[\w.-]+:\d+:\d+ \[\d+\]))"
)
TORCH_LITERALS = ["ProcessGroup", "]:[", "[E ", "[W ", "[I ", "[F "]
GLOG_START = r"^\s*\[[EWIF]\d{3,4} "
PYLOG = (
    r"\s*" + SRUN_LABEL + r"?(?:\[" + ROLE + r"(?P<rank>\d+)\]:\s?)?\[?(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]?"
    r"\s*"
)
PYLOG_FIXED = r"(\[?)(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)(\]?) "  # the first line's layout
PYLOG_START = r"^\s*" + SRUN_LABEL + r"?(?:" + TORCHRUN_LABEL + r"\s?)?" + r"\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"
# After the stamp, the logger's name and the bracketed level are header too: source: pytorch/pytorch
#   torch/_logging/_internal.py / torch/_dynamo/logging.py (v2.0-v2.2, the handler torch.distributed.elastic's
#   loggers used then): TORCH_COMPILE_FORMATTER = logging.Formatter("[%(asctime)s] %(name)s: [%(levelname)s] %(message)s").
PY_NAME_LEVEL = r"^[A-Za-z_][\w.]*: \[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] "
PY_LEVEL = r"(?-u:\b)(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?-u:\b)"
PY_LEVEL_LEAD = r"^\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?-u:\b)"
PY_SEVERITY = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning", "ERROR": "err",
               "CRITICAL": "crit", "FATAL": "crit"}
SLURM_LITERALS = ["slurm", "srun:", "salloc:", "sbatch:", "scancel:", "scontrol:", "sbcast:", "sattach:", "sstat:"]
SLURM_PROGRAM = r"^(" + SLURM_PROGRAMS + r")(?:-\S+)?: "
MONTHS = {i: m for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
# An NCCL result the text names, as ncclResult_t (collectors/rules/nccl_results.toml): PyTorch's exceptions
# print ncclGetErrorString's text, not the number, and then its own reading of the result.
# source: NVIDIA/nccl src/init.cc (ncclGetErrorString, 2.4+): "unhandled cuda error", "unhandled system error",
#   "internal error", "invalid argument", "invalid usage" (each followed, in later releases, by " (run with
#   NCCL_DEBUG=... for details)" or " - please report this issue to the NCCL developers"), "remote process
#   exited or there was a network error" (2.12+), "NCCL operation in progress" (2.14+).
# source: pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclErrorDetailStr (v1.13-v2.9):
#   "ncclUnhandledCudaError: ...", "ncclSystemError: ...", "ncclInternalError: ...", "ncclInvalidArgument: ...",
#   "ncclInvalidUsage: ...", "ncclRemoteError: ...".
NCCL_RESULT_TEXT = {"unhandled cuda error": 1, "unhandled system error": 2, "internal error": 3, "invalid argument": 4,
                    "invalid usage": 5, "remote process exited or there was a network error": 6,
                    "NCCL operation in progress": 7}
NCCL_RESULT_NAME = {"ncclUnhandledCudaError": 1, "ncclSystemError": 2, "ncclInternalError": 3, "ncclInvalidArgument": 4,
                    "ncclInvalidUsage": 5, "ncclRemoteError": 6, "ncclInProgress": 7}
NCCL_RESULT = (r"NCCL [Ee]rror(?: in: [^,\s]+,| \d+:)?:? (" + "|".join(re.escape(t) for t in NCCL_RESULT_TEXT) + r")"
               r"|(?:^|[\s:\]])(" + "|".join(NCCL_RESULT_NAME) + r"): ")
NCCL_RESULT_LITERALS = ["NCCL error", "NCCL Error", *(f"{n}: " for n in NCCL_RESULT_NAME)]
GLOG_SEVERITY = {"E": "err", "W": "warning", "I": "info", "F": "crit"}
NCCL_SEVERITY = {"WARN": "warning", "INFO": "info", "TRACE": "debug", "CALL": "debug", "ABORT": "crit", "ERROR": "err"}


# a full date, year first, near a line's start: an ISO or Python logging stamp, or torchrun's failure block
# ("time      : 2025-03-03_02:13:41": torch/distributed/elastic/multiprocessing/errors ProcessFailure,
# time.strftime("%Y-%m-%d_%H:%M:%S"))
DATED_READ = 4096
DATED = r"(?m)^[^\n]{0,40}?(?:19|20)\d\d-[01]\d-[0-3]\d[T _][0-2]\d:[0-5]\d:[0-5]\d"


@register
class Nccl(Collector):
    name = "nccl"
    source = "nccl"
    priority = 5
    sniff = r"NCCL (?:INFO|WARN)|ProcessGroupNCCL|^\[rank\d+\]:"

    continuation_hint = RANKED_INDENT + "|" + FAILURE_INDEX + "|" + FAILURE_RULE + "|" + EXCEPTION_TEXT

    def continuation(self, line: pl.Expr) -> pl.Expr:
        """Indented lines (tracebacks, wrapped messages) that do not start a record themselves,
        ChildFailedError's ``[i]:`` lines and the unlabelled lines of an exception's message (EXCEPTION_TEXT)."""
        return ((line.str.contains(RANKED_INDENT) & ~line.str.contains(RECORD_START)) | line.str.contains(FAILURE_INDEX)
                | line.str.contains(FAILURE_RULE) | line.str.contains(EXCEPTION_TEXT))

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """A launcher's prefix (collectors/_launchers.py) is header: cut away, its rank, pid and time
        kept, before the line's own header is read. Stamps without a year (glog's ``E0303 02:13:40``)
        take it from the output's own dated lines (torchrun's, Python logging's), else from the file's
        time (a copied archive's file time says nothing of the year its job ran)."""
        inputs = records.select(input_of(pl.col("offset")).alias("_in"), _latest_date().alias("_dated"))
        per_input = inputs.group_by("_in").agg(pl.col("_dated").max())
        days = per_input.get_column("_dated").unique()
        if days.len() <= 1:
            return launcher_cut(records, _dated(days[0] if days.len() else None, ctx), self._parse)
        # a batch of many users' outputs: each output's own dates, never another's (inputs of one day together)
        day = inputs.join(per_input, on="_in", how="left").get_column("_dated_right")
        parts = [launcher_cut(records.filter(day.eq_missing(d)), _dated(d, ctx), self._parse) for d in days]
        return pl.concat(parts, how="diagonal_relaxed").sort("offset")

    def _parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """NCCL, PyTorch and Slurm client prefixes; any other text is a valid message.

        Cheap literal tests route each record to the one header regex that can match it.
        """
        raw = pl.col("raw")
        routes = [(_nccl, raw.str.contains("NCCL ", literal=True) | raw.str.contains(OLD_NCCL)),
                  (_torch, raw.str.contains(any_of(TORCH_LITERALS)) | raw.str.contains(GLOG_START)
                   | raw.str.contains(TORCH_LOGS_START)),
                  (_pylog, raw.str.contains(PYLOG_START)), (_slurm, raw.str.contains(any_of(SLURM_LITERALS)))]
        parts, rest = [], records
        for parser, test in routes:  # each test only on the records the ones before did not take
            hit = rest.select(test).to_series()
            if hit.any():
                parts.append(parser(rest.filter(hit), ctx))
                rest = rest.filter(~hit)
            if not rest.height:
                break
        if rest.height:
            parts.append(_text(rest, ctx))
        return _named_rank(_closing_pid(_nccl_result(pl.concat(parts, how="diagonal_relaxed"))))


# torchrun's agent stopping its workers: the worker the line is about (pid). source: pytorch/pytorch
#   torch/distributed/elastic/multiprocessing/api.py (PContext close, v1.9-v2.9): logger.warning("Sending process
#   %s closing signal %s", handler.proc.pid, death_sig.name)
CLOSING = r"Sending process (\d+) closing signal SIG[A-Z]+"


def _latest_date() -> pl.Expr:
    """The latest day a record's full dates name near a line's start (of every line of its first DATED_READ
    characters: torchrun's block is one record with its traceback; a record cut from an endless line is not
    read whole), as ``YYYY-MM-DD``; null where none. A day is all a year-less stamp needs."""
    return pl.col("raw").str.slice(0, DATED_READ).str.extract_all(DATED).list.eval(pl.element().str.tail(19)).list.max() \
        .str.slice(0, 10)


def _dated(latest: str | None, ctx: Context) -> Context:
    """``ctx`` with ``latest`` (the latest day an output's own full dates name) as the reference for year-less
    stamps."""
    if latest is None:
        return ctx
    try:
        return replace(ctx, reference_time=datetime.fromisoformat(latest).replace(tzinfo=timezone.utc), references=())
    except ValueError:
        return ctx


def _from_message(df: pl.DataFrame, name: str, dtype: pl.DataType, literals: list[str], found: pl.Expr) -> pl.DataFrame:
    """``name`` where it is null, from ``found`` (an expression over ``message``), computed only on the few
    rows whose message holds one of ``literals``."""
    have = name in df.columns
    current = pl.col(name) if have else pl.lit(None, dtype=dtype)
    rows = df.select(current.is_null() & pl.col("message").str.contains_any(literals).fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    df = df.with_columns((pl.col(name) if have else pl.lit(None)).cast(dtype, strict=False).alias(name))
    fixed = df.select("message").gather(rows).select(found.cast(dtype, strict=False).alias(name))
    return scatter_rows(df, rows, fixed)


def _closing_pid(df: pl.DataFrame) -> pl.DataFrame:
    """``pid``: the worker an agent's "Sending process N closing signal" line names."""
    return _from_message(df, "pid", pl.Int64, ["Sending process "], pl.col("message").str.extract(CLOSING, 1))


# The rank a message states as its own, where no label gave one:
# source: pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp createLogPrefix/logPrefix (v1.13-v2.9):
#   "[Rank " << rank_ << "] ", "[PG " << uid_ << " Rank " << rank_ << "] " (v2.2), "[PG ID ", local_id_, " PG GUID ",
#   pg_uid_, "(", pg_desc_, ") Rank ", rank_, "] " (v2.4+).
# source: NVIDIA/nccl src/init.cc (2.4-2.28): INFO(NCCL_INIT, "comm %p rank %d nranks %d cudaDev %d busId %lx - Init
#   COMPLETE"), "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d", "%s comm %p rank %d nranks %d
#   cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START", "comm %p rank %d nranks %d cudaDev %d busId %lx -
#   Destroy COMPLETE" (and Abort): the communicator's rank of this process.
# source: Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/rank_zero.py rank_prefixed_message (v1.8+):
#   f"[rank: {rank}] {message}".
NAMED_RANK = r"\[(?:PG [^\]]*? )?Rank (\d+)\]|\bcomm 0x[0-9a-f]+ rank (\d+)\b|\[rank: (\d+)\]"
NAMED_RANK_LITERALS = ["Rank ", " rank ", "[rank: "]


def _named_rank(df: pl.DataFrame) -> pl.DataFrame:
    """``rank``: the rank a message names as its own (NAMED_RANK), on the rows no label gave one."""
    groups = pl.col("message").str.extract_groups(NAMED_RANK)
    return _from_message(df, "rank", pl.Int32, NAMED_RANK_LITERALS,
                         pl.coalesce(groups.struct.field(f) for f in ("1", "2", "3")))


def _nccl_result(df: pl.DataFrame) -> pl.DataFrame:
    """``code``: the NCCL result a message names by its text (NCCL_RESULT)."""
    msg = pl.col("message")
    return _from_message(df, "code", pl.Int64, NCCL_RESULT_LITERALS, pl.coalesce(
        msg.str.extract(NCCL_RESULT, 1).replace_strict(NCCL_RESULT_TEXT, default=None, return_dtype=pl.Int64),
        msg.str.extract(NCCL_RESULT, 2).replace_strict(NCCL_RESULT_NAME, default=None, return_dtype=pl.Int64)))


def _rank(raw: pl.Expr) -> pl.Expr:
    return pl.coalesce(raw.str.extract(RANK_PREFIX, 2), raw.str.extract(RANK_PREFIX, 1)).cast(pl.Int32, strict=False)


def _text(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    raw = pl.col("raw")
    text = part.select("raw", "offset", _rank(raw).alias("rank"),
                       raw.str.replace(RANK_PREFIX, "").str.strip_chars_end().alias("message"))
    level = text.get_column("message").str.extract(PY_BASIC, 1)
    if level.is_null().all():
        return text
    basic = level.is_not_null()
    return text.with_columns(  # Python logging's "LEVEL:logger:" layout is header
        pl.when(basic).then(pl.col("message").str.replace(PY_BASIC, "")).otherwise(pl.col("message")).alias("message"),
        level.replace_strict(PY_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
        pl.when(basic).then(pl.lit("python")).alias("program"))


def _nccl_header(part: pl.DataFrame) -> pl.DataFrame:
    """split_header(part, NCCL), the full regex only on the lines the bare header does not start (the same
    rows, in the same order)."""
    g = split_header(part, NCCL_BARE)
    bare = g.get_column("msg").is_not_null()
    if not bare.all():  # in the input's order: callers filter ``part`` by masks of the result
        g = (pl.concat([g.with_row_index("_i").filter(bare), split_header(part.with_row_index("_i").filter(~bare), NCCL)],
                       how="diagonal_relaxed").sort("_i").drop("_i"))
    return g.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in ("stamp", "rts", "tag", "lrank", "srank")
                          if c not in g.columns)


def _nccl(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    msg = pl.col("msg")
    g = _nccl_header(part).with_columns(
        pl.coalesce(msg.str.extract(NCCL_LEVEL, 1), msg.str.extract(OLD_LEVEL, 1)).alias("level"))
    ok = pl.col("level").is_not_null()
    if not part.height or g.get_column("level").null_count() == part.height:
        return _torch(part, ctx)
    return pl.concat([
        g.filter(ok).select(
            "raw", "offset", pl.coalesce(tp.iso(pl.col("stamp"), ctx.tz), tp.iso(pl.col("rts"), ctx.tz)).alias("ts"),
            pl.col("host").alias("node"),
            pl.coalesce("tag", "lrank", "srank").cast(pl.Int32, strict=False).alias("rank"),
            pl.coalesce(_bus_id(pl.col("msg")), pl.col("dev")).alias("gpu"), pl.col("pid").cast(pl.Int64, strict=False).alias("pid"),
            pl.lit("nccl").alias("program"),
            pl.col("level").replace_strict(NCCL_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
            pl.col("msg").alias("message"),
        ),
        _torch(part.filter(g.get_column("level").is_null()), ctx),
    ], how="diagonal_relaxed")


def _bus_id(msg: pl.Expr) -> pl.Expr:
    """``busId e7000`` (NCCL's int64 form of a PCI id) as ``0000:e7:00``; null where the line names none."""
    hexid = msg.str.extract(BUS_ID, 1).str.zfill(9)
    return pl.concat_str(hexid.str.head(-5).str.zfill(4), pl.lit(":"), hexid.str.slice(-5, 2), pl.lit(":"),
                         hexid.str.slice(-3, 2))


def _torch(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, TORCH)
    ok = g.get_column("msg").is_not_null()
    rest = part.filter(~ok)
    logs = split_header(rest, TORCH_LOGS) if rest.height else None
    done = logs.get_column("msg").is_not_null() if logs is not None else None
    if done is None or not done.any():
        return pl.concat([_glog(g.filter(ok), ctx), _text(rest, ctx)], how="diagonal_relaxed")
    return pl.concat([_glog(g.filter(ok), ctx), _glog(logs.filter(done), ctx), _text(rest.filter(~done), ctx)],
                     how="diagonal_relaxed")


def _glog(g: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    month = pl.col("md").str.head(-2).cast(pl.Int32, strict=False).replace_strict(MONTHS, default=None, return_dtype=pl.String)
    ts = tp.yearless(month, pl.col("md").str.tail(2), pl.col("clock"), ctx.reference(), ctx.tz)
    return g.select(
        "raw", "offset", ts.alias("ts"), pl.col("rank").cast(pl.Int32, strict=False).alias("rank"), pl.lit("torch").alias("program"),
        pl.col("lvl").replace_strict(GLOG_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
        pl.format("[{}] {}", pl.col("src"), pl.col("msg")).alias("message"),
    )


def _pylog(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Python ``logging`` lines: ``[2026-11-08 19:02:39,710] [INFO] [train.py:48] message``.

    Lines laid out like the first (stamp at the same place, then one space) are cut at fixed
    positions; the others go through the regex.
    """
    fixed, g = _pylog_fixed(part, ctx)
    if g.height:
        g = split_header(g, PYLOG).with_columns(tp.iso(pl.col("stamp"), ctx.tz).alias("ts"))
        g = pl.concat([fixed, g.select("raw", "offset", "ts", "rank", "msg")], how="diagonal_relaxed") if fixed.height else g
    else:
        g = fixed
    return g.select(
        "raw", "offset", "ts", pl.col("rank").cast(pl.Int32, strict=False).alias("rank"),
        _py_level(g.get_column("msg")).replace_strict(PY_SEVERITY, default=None, return_dtype=pl.String).alias("severity"),
        pl.col("msg").str.replace(PY_NAME_LEVEL, "").alias("message"), pl.lit("python").alias("program"),
    )


def _py_level(msg: pl.Series) -> pl.Series:
    """The first level name in a message's first 60 characters; where the message starts with it
    (``[INFO] ...``, nearly always) an anchored regex finds it at once."""
    return tp.or_general(msg.str.extract(PY_LEVEL_LEAD, 1), msg,
                         lambda rows: msg.gather(rows).str.slice(0, 60).str.extract(PY_LEVEL, 1))


def _pylog_fixed(part: pl.DataFrame, ctx: Context) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(raw, offset, ts, rank, msg) of the lines whose stamp sits where the first line's does, and
    the other lines."""
    first = re.match(PYLOG_FIXED, part.item(0, "raw")) if part.height else None
    if first is None:
        return pl.DataFrame(), part
    at, length, head = first.start(2), len(first.group(2)), first.end()
    raw = part.get_column("raw")
    ts = tp.iso_plain(raw.str.slice(at, length), ctx.tz)
    ok = (ts.is_not_null() & (raw.str.slice(0, at) == first.group(1))
          & (raw.str.slice(at + length, head - at - length) == first.group(3) + " ")
          & (raw.str.slice(head, 1) != " ")).fill_null(False)
    fixed = part.with_columns(ts.alias("ts"), pl.lit(None, dtype=pl.String).alias("rank"),
                              raw.str.slice(head).alias("msg")).filter(ok)
    return fixed, part.filter(~ok)


def _slurm(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    text = _text(part, ctx)
    prog = text.get_column("message").str.extract(SLURM_PROGRAM, 1)
    ok = prog.is_not_null()
    slurm = slurm_fields(text.filter(ok).with_columns(prog.filter(ok).alias("program"), pl.lit("slurm").alias("source")))
    return pl.concat([slurm, text.filter(~ok)], how="diagonal_relaxed")
