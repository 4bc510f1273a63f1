"""What launchers and container runtimes put before the lines of the programs they run: srun's task
label, torch elastic's role label, mpirun/PMIx tags, Ray's and SkyPilot's process labels, docker
compose's and kubectl's prefixes and stamps. Header, not message; the rank, pid, host and time they
give are kept. A private module: the nccl and slurm collectors share it.
"""
from __future__ import annotations

from collections.abc import Callable

import polars as pl

from observe import timeparse as tp
from observe.collector import Context, input_of, split_header

# What a launcher puts before each task's lines: srun --label's right-aligned ``12: `` (task id),
# torchrun's ``[default3]:`` / ``[rank3]:``: source: pytorch/pytorch torch/distributed/elastic/multiprocessing/tail_log.py
#   TailLog (v1.9-v2.9): the prefix f"[{name}{local_rank}]:" by default, name the worker group's role (torchrun --role,
#   "default"; a launcher built on the agent names its own, such as torchx's "trainer"); c10d's "[rank%d]:"
#   (torch._logging rankprefix).
SRUN_LABEL = r"(?:\d{1,6}: )"
ROLE = r"(?:[A-Za-z][A-Za-z_-]*)"
TORCHRUN_LABEL = r"\[" + ROLE + r"\d+\]:"
TASK_LABEL = r"(?:" + TORCHRUN_LABEL + r"|\d{1,6}:)"  # either, without the space after it
# A container runtime's prefix and stamp before a line (job output, daemons in containers):
# source: docker/compose cmd/formatter/logs.go (v2) presenter.setPrefix: fmt.Sprintf("%-"+strconv.Itoa(width)+"s | ",
#   p.name) (the service's container name, not a host; width the longest name plus one); kubernetes/kubectl
#   pkg/cmd/logs/logs.go (--prefix, v1.17+) "[pod/%s/%s] " (pod and container); docker/cli and kubelet --timestamps:
#   the line's RFC 3339 time with nanoseconds and a space first.
COMPOSE_PREFIX = r"(?:[A-Za-z0-9][\w.-]* +\| )"
RUNTIME_PREFIX = (r"(?:" + COMPOSE_PREFIX + r"|\[pod/[^\]\s]+\] )?"
                  r"(?:(?P<rts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) )?")
# A launcher's prefix before each line of a rank's output:
# source: open-mpi/ompi orte/mca/iof/base/iof_base_output.c (v1.3-v4.1, mpirun --tag-output, --timestamp-output):
#   snprintf(starttag, ORTE_IOF_BASE_TAG_MAX, "[%s,%s]<%s>:", ORTE_LOCAL_JOBID_PRINT(name->jobid),
#   ORTE_VPID_PRINT(name->vpid), suffix) (suffix "stdout", "stderr" or "stddiag"; the vpid is the rank), with
#   --timestamp-output "%s[%s,%s]<%s>:" after ctime(&mytime) less its newline.
# source: horovod/horovod horovod/runner/common/util/safe_shell_exec.py prefix_connection (v0.20+, horovodrun's gloo
#   launcher): '{time}[{rank}]<{prefix}>:' (time: time.asctime() with --prefix-output-with-timestamp, else '').
#   A collector in front of either may stamp each line in ISO 8601 first (``2019-06-02T16:13:44.884Z: ``).
# source: openpmix/openpmix src/common/pmix_iof.c pmix_iof_prep_output (v4-v5,
#   Open MPI 5's mpirun/prterun --output tag, tag-detailed, tag-fullname, rank, timestamp): "[%s,%s]<%s>: " (the
#   jobid after the nspace's "@", or the whole nspace ``prterun-host-123@1``; the rank), "[%s,%s][%s:%s]<%s>: " (also
#   host and pid), "[%s]<%s>: " (the rank alone), each after "[%s]" (ctime, less its newline) with timestamp.
# source: skypilot-org/skypilot sky/skylet/executor/slurm.py (and the Ray backend's job driver, v0.5+): colorama.Fore.CYAN
#   + "(setup pid={pid})", "({task name}, pid={pid})", "({node_name}, rank={rank}, pid={pid})" or with ", ip={ip}",
#   then colorama.Style.RESET_ALL and a space (the rank there is the node's, not a process rank: not taken).
# SageMaker's distributed training runs mpirun whose tag carries the rank and the host: "[1,mpirank:0,algo-1]<stdout>:"
#   (as aws/sagemaker-training-toolkit test/unit/test_process.py test_watch expects it).
# source: ray-project/ray python/ray/_private/worker.py print_worker_logs (v1.x-v2.x): "{}{}({}{}{}){} {}".format(
#   colorama.Style.DIM, color, prefix_for(data) ("pid=", after the actor or task name and a space), pid,
#   ", ip=" + ip when the worker is on another node, colorama.Style.RESET_ALL, line) (the SGR escapes may lose
#   their ESC in a paste: ``[36m(RayWorkerWrapper pid=4009) ``). A paste that lost the ``(pid=N)`` label keeps
#   only colorama.Style.RESET_ALL ("\x1b[0m") and the space before the line: ``[0m ip-10-0-0-1:14605:14673 [0] ...``.
SGR = r"(?:\x1b?\[[0-9;]*m)*"
LAUNCHER = (
    SGR + r"(?:\((?:[^()]*?[ ,])?pid=(?P<_lpid>\d+)(?:, ip=[\w.:-]+)?\)" + SGR + r" ?"
    r"|\x1b?\[0m "
    r"|(?:(?P<_liso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?): "
    r"|\[?(?P<_lctime>(?:Sun|Mon|Tue|Wed|Thu|Fri|Sat) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]?)?"
    r"\[(?:[^\[\],\s]+,)?(?:mpirank:)?(?P<_lrank>\d+)(?:,(?P<_lhost2>[\w.-]+))?\](?:\[(?P<_lhost>[\w.-]+):(?P<_lpid2>\d+)\])?"
    r"<(?:stdout|stderr|stddiag)>: ?)"
)
LAUNCHER_LITERALS = ["pid=", "]<std", "[0m "]
# pdsh's label before every line a remote host prints (deepspeed's multi-node launcher runs pdsh): source: chaos/pdsh
#   src/pdsh/dsh.c _flush_lines (2.x): outf("%S: %s", th->host, buf); its own errors about a host: src/common/pipecmd.c
#   err("%p: %S: %s exited with exit code %d\n", ...), dsh.c err("%p: %S: command timeout\n", ...) (%p: "pdsh@<host>").
# A word and a colon begin many lines ("ValueError: ..."), so a word is pdsh's host only where the output names it
# so (PDSH_HOSTS): pdsh's own error lines, deepspeed's runner (microsoft/DeepSpeed deepspeed/launcher/
# multinode_runner.py PDSHRunner.get_cmd, v0.3-v0.16: logger.info("Running on the following workers: %s" %
# active_workers), the hosts joined by ","; pdsh_cmd_args = ['pdsh', '-S', '-f', str(PDSH_MAX_FAN_OUT), '-w',
# active_workers], which deepspeed/launcher/runner.py main logs as logger.info(f"cmd = {' '.join(cmd)}")), or an NCCL
# line under the label whose own header (NCCL's hostname, cut at its first ".") names the same host.
HOST = r"[A-Za-z0-9][\w.-]*"
PDSH_LABEL = r"(" + HOST + r"): "
PDSH_HOSTS = [("pdsh@", r"^pdsh@[\w.-]+: (" + HOST + r"): "),
              ("following workers: ", r"Running on the following workers: ([\w.-]+(?:,[\w.-]+)*)"),
              ("cmd = pdsh ", r"cmd = pdsh -S -f \d+ -w ([\w.-]+(?:,[\w.-]+)*) ")]
PDSH_NCCL = r"^(" + HOST + r"): (" + HOST + r"):\d+:\d+ "
PDSH_MAX_HOSTS = 4096  # hosts taken from one line that lists them (deepspeed's fan-out is 1024: PDSH_MAX_FAN_OUT)
# A labelled traceback's frames continue its record (collectors/nccl.py RANKED_INDENT); their labels go with it.
PDSH_CONTINUED = r"\n" + HOST + r": (\s)"

def launcher_cut(records: pl.DataFrame, ctx: Context,
                 parse: Callable[[pl.DataFrame, Context], pl.DataFrame]) -> pl.DataFrame:
    """``parse`` over ``records`` with each line's launcher prefix cut away first (pdsh's host label where the
    output names its hosts, then LAUNCHER), the rank, pid, host and time it gave kept where the line's own
    header gives none."""
    host = _pdsh_host(records)
    if host is None or host.null_count() == host.len():  # hosts named, but no line under their label
        return _launcher_cut(records, ctx, parse)
    labelled = records.filter(host.is_not_null())
    labels = host.filter(host.is_not_null())
    raw = labelled.get_column("raw")
    cut = labelled.with_columns(
        raw.str.slice(labels.str.len_chars() + 2).str.replace_all(PDSH_CONTINUED, "\n$1").alias("raw"))
    inner = _launcher_cut(cut, ctx, parse).drop("raw")  # the line as it was written is what is kept
    inner = inner.join(labelled.select("offset", "raw").with_columns(labels.alias("_phost")), on="offset", how="left")
    node = pl.coalesce("node", "_phost") if "node" in inner.columns else pl.col("_phost")
    inner = inner.with_columns(node.alias("node")).drop("_phost")
    rest = records.filter(host.is_null())
    return pl.concat([_launcher_cut(rest, ctx, parse), inner] if rest.height else [inner], how="diagonal_relaxed")


def _pdsh_host(records: pl.DataFrame) -> pl.Series | None:
    """Each record's pdsh host label (PDSH_LABEL), null where it has none or its output never names that word as
    one of pdsh's hosts (PDSH_HOSTS, PDSH_NCCL); None where no record has one."""
    raw = pl.col("raw")
    named = []
    for literal, pattern in PDSH_HOSTS:
        found = records.lazy().filter(raw.str.contains(literal, literal=True)).select(
            "offset", raw.str.extract(pattern, 1).str.split(",").list.head(PDSH_MAX_HOSTS).alias("host")).explode("host")
        named.append(found)
    nccl = records.lazy().filter(raw.str.contains(" NCCL ", literal=True)).select(
        "offset", raw.str.extract_groups(PDSH_NCCL).alias("g")).unnest("g")
    named.append(nccl.filter((pl.col("1") == pl.col("2")) | pl.col("1").str.starts_with(pl.col("2") + "."))
                 .select("offset", pl.col("1").alias("host")))
    hosts = (pl.concat(named).drop_nulls().select(input_of(pl.col("offset")).alias("_in"), "host")
             .unique().collect())
    if not hosts.height:
        return None
    label = records.select(input_of(pl.col("offset")).alias("_in"),
                           raw.str.extract("^" + PDSH_LABEL, 1).alias("host"))
    hit = label.join(hosts.with_columns(pl.lit(True).alias("_hit")), on=["_in", "host"], how="left",
                     maintain_order="left").get_column("_hit")
    return label.with_columns(hit.fill_null(False).alias("_hit")).select(
        pl.when(pl.col("_hit")).then(pl.col("host")).alias("host")).to_series()


def _launcher_cut(records: pl.DataFrame, ctx: Context,
                  parse: Callable[[pl.DataFrame, Context], pl.DataFrame]) -> pl.DataFrame:
    """``parse`` over ``records`` with LAUNCHER cut away (launcher_cut's second step)."""
    maybe = records.select(pl.col("raw").str.contains_any(LAUNCHER_LITERALS)).to_series()
    if not maybe.any():
        return parse(records, ctx)
    g = split_header(records.filter(maybe), LAUNCHER)
    has = g.get_column("msg").is_not_null()
    if not has.any():
        return parse(records, ctx)
    pre = g.filter(has)
    groups = ["_lpid", "_lpid2", "_lhost", "_lhost2", "_lrank", "_liso", "_lctime"]
    inner = parse(pre.drop(*groups, "msg").with_columns(pre.get_column("msg").alias("raw")), ctx)
    info = pre.select("offset", "raw", *groups)
    inner = inner.drop("raw").join(info, on="offset", how="left")
    for name, dtype in (("rank", pl.Int32), ("pid", pl.Int64), ("node", pl.String)):
        if name not in inner.columns:
            inner = inner.with_columns(pl.lit(None, dtype=dtype).alias(name))
    ts = pl.coalesce(tp.iso(pl.col("_liso"), ctx.tz), tp.ctime(pl.col("_lctime"), ctx.tz))
    inner = inner.with_columns(
        pl.coalesce(pl.col("rank").cast(pl.Int32, strict=False), pl.col("_lrank").cast(pl.Int32, strict=False)).alias("rank"),
        pl.coalesce(pl.col("pid").cast(pl.Int64, strict=False), pl.col("_lpid").cast(pl.Int64, strict=False),
                    pl.col("_lpid2").cast(pl.Int64, strict=False)).alias("pid"),
        pl.coalesce("node", "_lhost", "_lhost2").alias("node"),
        (pl.coalesce(pl.col("ts"), ts) if "ts" in inner.columns else ts).alias("ts"),
    ).drop(*groups)
    done = pre.get_column("offset")
    rest = records.filter(~pl.col("offset").is_in(done.implode()))
    return pl.concat([parse(rest, ctx), inner] if rest.height else [inner], how="diagonal_relaxed")
