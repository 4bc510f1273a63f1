"""Where a job's ranks ran and which one broke: ranks placed on nodes (NCCL init lines, else
Slurm's block distribution) and on GPUs (the init line's busId), the rank that lagged or fell
silent (PyTorch watchdog sequence numbers), ranks in different collectives, the first process to
die, and the node other ranks' NCCL errors say they lost. Derived candidates for explain."""
from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl

from collectors.nccl import NAMED_RANK, TORCHRUN_LABEL
from observe import provenance
from queries.jobs import Run

AGENT_KINDS = ("torch_elastic_failed", "torch_elastic_root_cause")  # what torchrun's agent prints of its workers
MAX_PER_NODE = 256  # ranks a node can run (8 GPUs, a few processes each, CPU ranks): a larger world is no world
ADDRESS = r"(?:Bootstrap : Using|OOB) (?:\[\d+\])?[\w.-]+:(\S+?)<\d+>"  # a rank's own address, NCCL INFO at init


def place_ranks(events: pl.DataFrame, nodes: list[str], job_id: str | None = None) -> pl.DataFrame:
    """Fill ``node`` of rank-tagged events (PyTorch lines carry no host) from the job's
    ``nccl_comm_init`` lines, else by Slurm's default block distribution: ranks fill the run's nodes
    in order, ``world / nodes`` each (:func:`world_size`). Where srun ran torchrun, srun's label is
    its task, a node's agent, not a rank (:func:`_agents`)."""
    events = _agents(events, nodes)
    ranked = events.filter(pl.col("rank").is_not_null())
    if ranked.is_empty():
        return events
    init = events.filter(pl.col("kind") == "nccl_comm_init", pl.col("node").is_not_null())
    hosts = init.group_by("rank").agg(pl.col("node").first().alias("_host"))
    return (events.join(hosts, on="rank", how="left", maintain_order="left")
            .with_columns(pl.coalesce("node", "_host", pl.when(pl.col("rank").is_not_null())
                                      .then(_block(world_size(events, nodes, job_id), nodes))).alias("node"))
            .drop("_host"))


def _agents(events: pl.DataFrame, nodes: list[str]) -> pl.DataFrame:
    """``srun -l torchrun``: srun labels the lines of its tasks (``2: ``), and each task is a torchrun agent, one per
    node, whose workers are the ranks; a line with srun's label alone (no ``[rankN]:`` of torchrun's after it)
    ran on the task's node, under a rank no line says. Told by the agent's own lines in the output (torchrun's
    ``failed (exitcode: ...)`` and root-cause block); ``srun -l python`` has none, and its tasks are ranks."""
    if not nodes or "raw" not in events.columns or not events.get_column("kind").is_in(list(AGENT_KINDS)).any():
        return events
    task = pl.col("raw").str.extract(r"^\s*(\d{1,6}): ", 1).cast(pl.Int32, strict=False)
    alone = (task == pl.col("rank")) & ~pl.col("raw").str.contains(r"^\s*\d{1,6}: \s*" + TORCHRUN_LABEL)
    named = pl.col("message").str.extract_groups(NAMED_RANK)  # the line's own words say its rank: kept
    said = pl.coalesce(named.struct.field(f) for f in ("1", "2", "3")).cast(pl.Int32, strict=False)
    tasks = int(events.select(task.filter(alone).max()).item() or 0) + 1
    per_node = max(1, math.ceil(tasks / len(nodes)))
    node = pl.lit(pl.Series(nodes, dtype=pl.String)).gather((task // per_node).clip(0, len(nodes) - 1))
    return events.with_columns(pl.when(alone).then(pl.coalesce("node", node)).otherwise("node").alias("node"),
                               pl.when(alone.fill_null(False)).then(said).otherwise("rank").alias("rank"))


def world_size(events: pl.DataFrame, nodes: list[str], job_id: str | None = None, per_node: int = 8) -> int:
    """How many ranks the job has: NCCL's nranks at init, else one per GPU Slurm gave the job (its record's
    ``gpus``: torchrun and srun start a process per GPU) when no line names a rank beyond them, else ranks 0
    to the highest any line names, rounded up to fill the run's nodes evenly (a world is whole nodes of
    ranks, as many on each as the lines placed on one node show: the ranks of a silent last node are the
    highest) when most of that world printed something (a watchdog timeout every rank reports); else
    ``per_node`` (a GPU node's eight) on each node. The GPUs come before the ranks seen: a node whose
    ranks all hung printed none, and its ranks are the highest."""
    attr = pl.col("attrs").str.json_path_match
    nranks = events.filter(pl.col("kind") == "nccl_comm_init").select(
        attr("$.nranks").cast(pl.Int64, strict=False).max()).item()
    n = max(len(nodes), 1)
    if nranks and nranks <= MAX_PER_NODE * n:  # a line the job printed: bounded before it sizes anything
        return int(nranks)
    ranks = events.get_column("rank").drop_nulls()
    top = int(ranks.max() or 0) + 1
    gpus = events.filter(pl.col("kind").is_in(["slurm_job_end", "slurm_job_start"]), pl.col("job_id").eq_missing(job_id)).select(
        attr("$.gpus").cast(pl.Int64, strict=False).max()).item()  # this job's record: others end in the window too
    if gpus and top <= gpus:
        return int(gpus)
    # the most ranks one node shows on lines a launcher's label placed there (not the node a collector gave the file)
    labelled = (pl.col("attrs").str.json_path_match("$.claimed_node") == pl.col("node")).fill_null(False)
    on_node = (events.filter(pl.col("rank").is_not_null(), pl.col("node").is_in(nodes), labelled)
               .group_by("node").agg(pl.col("rank").n_unique()).get_column("rank").max())
    world = max(-(-top // n) * n, int(on_node or 0) * n)
    return world if ranks.n_unique() * 2 >= world else per_node * n


def _block(world: int, nodes: list[str]) -> pl.Expr:
    """The node of ``rank`` under Slurm's block distribution of ``world`` ranks over ``nodes``."""
    if not nodes:
        return pl.lit(None, dtype=pl.String)
    per_node = max(1, math.ceil(world / len(nodes)))
    return pl.lit(pl.Series(nodes, dtype=pl.String)).gather((pl.col("rank") // per_node).clip(0, len(nodes) - 1))


def expected_ranks(events: pl.DataFrame, nodes: list[str], job_id: str | None = None) -> pl.DataFrame:
    """The job's ranks and their nodes: those NCCL's init lines name, else every rank of the world
    (:func:`world_size`) placed as :func:`place_ranks` places them, so that a rank that printed
    nothing at all is in it."""
    init = events.filter(pl.col("kind") == "nccl_comm_init", pl.col("rank").is_not_null())
    if init.height or not nodes or events.get_column("rank").is_null().all():
        return init.select("rank", "node").unique("rank")
    world = world_size(events, nodes, job_id)
    return pl.DataFrame({"rank": pl.Series(range(world), dtype=pl.Int32)}).with_columns(_block(world, nodes).alias("node"))


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema={"node": pl.String, "kind": pl.String, "code": pl.Int32, "gpu": pl.String,
                                "ts": pl.Datetime("us", "UTC"), "count": pl.UInt32, "message": pl.String,
                                "category": pl.String, "action": pl.String, "node_action": pl.String,
                                "symptom": pl.Boolean, "context": pl.Boolean,
                                "rank": pl.Int32, "trusted": pl.Boolean, "score": pl.Float64, "probability": pl.Float64,
                                "evidence": pl.List(pl.String), "shared": pl.Boolean, "xid_action": pl.String})


def first_failed(own: pl.DataFrame, skew: timedelta, nodes: list[str]) -> tuple[str, datetime | None] | None:
    """The node of the job's first process to die of its own, and when the line saying so was logged: torchrun's
    root-cause block (the first observed failure), else the first task srun saw exit other than by being killed;
    one of the run's ``nodes``, said in the job's own output or by a trusted route (a ``logger`` line naming the
    job's step says nothing of it). None when a process on another node died within ``skew`` of it (clocks that
    close order nothing)."""
    signal = pl.col("attrs").str.json_path_match("$.signal").fill_null("")
    said = (pl.col("route") == "job_output") | provenance.trusted()
    died = own.filter(pl.col("node").is_in(nodes), said, (pl.col("kind") == "torch_elastic_root_cause")
                      | ((pl.col("kind") == "slurm_task_exit") & ~signal.is_in(["Killed", "Terminated"])))
    if died.is_empty():
        return None
    root = died.filter(pl.col("kind") == "torch_elastic_root_cause")
    died = (root if root.height else died).sort("ts", nulls_last=True)
    node, ts = died.row(0)[died.columns.index("node")], died.get_column("ts")[0]
    if ts is not None and died.filter(pl.col("node") != node, pl.col("ts") <= ts + skew).height:
        return None
    return node, ts


def lost_peers(events: pl.DataFrame, run: Run, sc: dict) -> pl.DataFrame:
    """The node that ranks' NCCL network errors name as the peer they lost. NCCL names it by address
    (``Got completion from peer 10.1.4.1<43521>``, ``Connection closed by remote peer
    gpu004-ib.cluster<51159>``); each rank printed its own (``Bootstrap : Using ib0:10.1.4.1<0>``,
    ``OOB ib0:...``) at init, on its node. A peer that is on none of the job's nodes names nothing."""
    own = events.filter(pl.col("job_id") == run.job_id, pl.col("node").is_in(run.nodes or []))
    addresses = dict(own.select(pl.col("message").str.extract(ADDRESS, 1).alias("addr"), "node")
                     .drop_nulls().unique("addr").iter_rows())
    attr = pl.col("attrs").str.json_path_match
    errors = (events.filter(pl.col("kind") == "nccl_net_error", pl.col("job_id") == run.job_id)
              .with_columns(attr("$.peer").str.replace(r"<\d+>$", "").alias("_peer")).drop_nulls("_peer"))
    if errors.is_empty():
        return empty().drop("score", "probability")
    short = pl.col("_peer").str.extract(r"^([^.:%]+?)(?:-ib)?(?:\.|$)", 1)  # gpu004-ib.cluster -> gpu004
    named = errors.with_columns(
        pl.coalesce(pl.col("_peer").replace_strict(addresses, default=None, return_dtype=pl.String),
                    pl.when(short.is_in(run.nodes or [])).then(short)).alias("_lost")).drop_nulls("_lost")
    # the culprit's own ranks name each peer they talked to; every other node's ranks name the culprit: the
    # node named from the most other nodes is the one they lost (of two, the one more errors name)
    namers = (named.filter(pl.col("node").ne_missing(pl.col("_lost"))).group_by("_lost")
              .agg(pl.col("node").drop_nulls().n_unique().alias("_from"), pl.len().alias("_errors"))
              .sort("_from", "_errors", descending=True))
    if namers.height and namers.item(0, "_from"):
        top = namers.row(0, named=True)
        lost = set(namers.filter(pl.col("_from") == top["_from"], pl.col("_errors") == top["_errors"]).get_column("_lost"))
    else:
        lost = set(named.get_column("_lost"))
    rows = [{"node": node, "kind": "nccl_peer_lost", "ts": part.get_column("ts").min(), "count": part.height,
             "message": f"{part.get_column('rank').n_unique()} rank(s) lost their NCCL peer on {node} "
                        f"({part.get_column('_peer').first()})",
             "prior": float(sc["peer_lost_prior"]), "category": "network", "node_action": "watch",
             "action": "the ranks' network errors name this node as the peer they lost: check whether it crashed, "
                       "its HCA and its link", "symptom": False}
            for (node,), part in named.group_by("_lost", maintain_order=True) if node in lost]
    if not rows:
        return empty().drop("score", "probability")
    return pl.DataFrame(rows, schema_overrides={"ts": pl.Datetime("us", "UTC"), "count": pl.UInt32})


def rank_gpus(events: pl.DataFrame) -> dict[int, str]:
    """Each rank's GPU (``0000:3b:00``) from its NCCL init line's busId: NCCL prints the PCI id
    with its separators dropped, as hex (src/misc/utils.cc busIdToInt64: ``0000:3b:00.0`` -> 3b000)."""
    bus = (events.filter(pl.col("kind") == "nccl_comm_init", pl.col("rank").is_not_null())
           .select("rank", pl.col("attrs").str.json_path_match("$.bus_id").str.zfill(9).alias("_bus")).drop_nulls())
    pci = pl.format("{}:{}:{}", pl.col("_bus").str.slice(0, 4), pl.col("_bus").str.slice(4, 2), pl.col("_bus").str.slice(6, 2))
    return dict(bus.select("rank", pci.alias("gpu")).unique("rank").iter_rows())


def _watchdog(events: pl.DataFrame) -> pl.DataFrame:
    """The PyTorch watchdog's lines of ranks (its timeout and its exception)."""
    return events.filter(pl.col("kind").is_in(["nccl_timeout", "nccl_watchdog"]), pl.col("rank").is_not_null())


def _per_rank(wd: pl.DataFrame) -> pl.DataFrame:
    """Each rank that reported: the collective it waited in (``seq``: the first it had not completed), its node, and
    when its wait began (``ts``: the watchdog's line less how long the collective ran)."""
    attr = pl.col("attrs").str.json_path_match
    began = pl.col("ts") - pl.duration(milliseconds=attr("$.ran_ms").cast(pl.Int64, strict=False).fill_null(0))
    return wd.group_by("rank").agg(
        pl.coalesce(attr("$.last_completed").cast(pl.Int64, strict=False) + 1,
                    attr("$.seq").cast(pl.Int64, strict=False)).min().alias("seq"),
        pl.col("node").drop_nulls().first(), began.min().alias("ts"))


def in_step(events: pl.DataFrame) -> list[str]:
    """Nodes every reporting rank of which waited in the furthest collective any rank reached: their ranks were alive
    and as far on as any when the job hung, so their node was working then."""
    per_rank = _per_rank(_watchdog(events)).filter(pl.col("node").is_not_null(), pl.col("seq").is_not_null())
    if per_rank.is_empty():
        return []
    top = per_rank.get_column("seq").max()
    return (per_rank.group_by("node").agg((pl.col("seq") == top).all().alias("_ok")).filter("_ok")
            .get_column("node").sort().to_list())


def stalls(events: pl.DataFrame, run: Run, sc: dict) -> pl.DataFrame:
    """Hung ranks from the PyTorch watchdog: a rank whose last collective lags the others', or the
    ranks that never reported the timeout every other rank reported. A rank's time is when its wait
    began (the watchdog's line less how long the collective ran), not when the watchdog printed it."""
    attr = pl.col("attrs").str.json_path_match
    wd = _watchdog(events)
    if wd.is_empty():
        return empty().drop("score", "probability")
    began = pl.col("ts") - pl.duration(milliseconds=attr("$.ran_ms").cast(pl.Int64, strict=False).fill_null(0))
    per_rank = _per_rank(wd)
    gpus = rank_gpus(events)
    top = per_rank.get_column("seq").max()
    rows = []
    ops = (wd.filter(pl.col("kind") == "nccl_timeout")
           .select("rank", "node", began.alias("ts"), attr("$.seq").alias("_seq"), attr("$.op").alias("_op"))
           .drop_nulls(["_seq", "_op"]))  # the mismatch was there when the collectives began
    for (seq,), part in ops.group_by("_seq"):
        if part.get_column("_op").n_unique() > 1:  # ranks waiting in different collectives at the same step
            kinds = ", ".join(f"{op} on {n} rank(s)" for op, n in part.group_by("_op").len().sort("_op").iter_rows())
            rows.append({"node": None, "kind": "collective_mismatch", "rank": None, "gpu": None, "ts": part.get_column("ts").min(),
                         "count": part.height, "message": f"collective {seq}: ranks called different collectives ({kinds})",
                         "prior": float(sc["mismatch_prior"]), "category": "user",
                         "action": "none for the node: the job's ranks called different collectives at the same step (a "
                                   "code path some ranks skip); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL",
                         "node_action": "none", "symptom": False})
    if top is not None:
        for r in per_rank.filter(pl.col("seq") < top).iter_rows(named=True):
            rows.append({"node": r["node"], "kind": "nccl_timeout", "rank": r["rank"], "gpu": gpus.get(r["rank"]),
                         "ts": r["ts"], "count": 1,
                         "message": f"rank {r['rank']} stalled at collective {r['seq']} while other ranks reached {top}",
                         "prior": float(sc["lagging_rank_prior"]), "category": "software",
                         "action": "a rank hung before the collective (dataloader, deadlock, slow GPU): py-spy dump it; "
                                   "drain its node if it repeats", "node_action": "watch", "symptom": False})
    ranks = expected_ranks(events, run.nodes, run.job_id)
    quiet = ranks.join(per_rank.select("rank"), on="rank", how="anti")
    began = per_rank.get_column("ts").min()  # the silent ranks were stuck when the others' collective began
    if ranks.height and per_rank.height >= ranks.height / 2 and 0 < quiet.height <= ranks.height / 2:
        for node, part in quiet.group_by("node"):
            rank = int(part.get_column("rank").min())
            rows.append({"node": node[0], "kind": "nccl_timeout", "rank": rank, "gpu": gpus.get(rank),
                         "ts": began, "count": part.height,
                         "message": f"{part.height} rank(s) on {node[0]} never reported the timeout that "
                                    f"{per_rank.height} other ranks reported",
                         "prior": float(sc["missing_rank_prior"]), "category": "node",
                         "action": "the ranks went silent: check whether their node crashed or hung",
                         "node_action": "watch", "symptom": False})
    if not rows:
        return empty().drop("score", "probability")
    return pl.DataFrame(rows, schema_overrides={"rank": pl.Int32, "gpu": pl.String, "ts": pl.Datetime("us", "UTC"),
                                                "count": pl.UInt32})
