"""allreduce: torch.distributed all_reduce over a sweep of sizes, every result checked.

NCCL across the node's GPUs, gloo on the CPU. Run alone it spawns one process per GPU (two on a
machine without one); under ``srun`` (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS set) each task
is one rank and the slowest node is named. Bandwidth as nccl-tests defines it: algbw = bytes /
time, busbw = algbw * 2(n-1)/n.
"""
from __future__ import annotations

import os
import socket
import time

from observe.health.result import Result, Status, unknown
from observe.hostname import this_node

NAME = "allreduce"
UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def size_bytes(text: str | int) -> int:
    """``"16MB"`` -> 16777216 (binary units, as nccl-tests prints them)."""
    if isinstance(text, int):
        return text
    t = text.strip().upper()
    for unit, mult in UNITS.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def run(opts: dict) -> Result:
    """Sweep the sizes; FAIL on a wrong sum or a bus bandwidth under the policy's floor."""
    try:
        import torch
        import torch.distributed  # noqa: F401 - builds without it: UNKNOWN, not a crash in the ranks
        import torch.multiprocessing as mp
    except ImportError:
        return unknown(NAME, "torch is not installed (pip install 'observe[health]')")
    gpu = opts.get("device", "auto") != "cpu" and torch.cuda.is_available()
    sizes = [size_bytes(s) for s in opts["sizes"]]
    if not gpu:
        sizes = sorted({min(s, size_bytes(opts["cpu_max"])) for s in sizes})
    plan = {"sizes": sizes, "iterations": int(opts["iterations"]), "warmup": int(opts["warmup"]),
            "backend": "nccl" if gpu else "gloo"}
    env = _slurm_rank()
    if env is not None:  # one rank of a job step: this process takes part directly
        rank, world = env
        _rendezvous_from_slurm()
        rows = _rank_main(rank, world, plan, None)
        if rows is None:
            return unknown(NAME, "not rank 0: rank 0 reports")
    else:
        world = int(opts.get("processes") or (torch.cuda.device_count() if gpu else 2))
        if world < 2:
            return unknown(NAME, f"one {'GPU' if gpu else 'process'}: nothing to all-reduce with")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(opts.get("port") or _free_port())
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_rank_main, args=(world, plan, queue), nprocs=world, join=True)
        rows = queue.get()
    return _verdict(rows, world, plan, opts)


def _verdict(rows: dict, world: int, plan: dict, opts: dict) -> Result:
    factor = 2 * (world - 1) / world
    table, problems = [], []
    for size, r in sorted(rows["sizes"].items()):
        t = r["seconds"]
        algbw = size / t / 1e9
        table.append({"bytes": size, "seconds": t, "algbw_gbps": algbw, "busbw_gbps": algbw * factor,
                      "wrong": r["wrong"]})
        if r["wrong"]:
            problems.append(f"{r['wrong']} rank(s) got a wrong sum at {size} bytes: {', '.join(r['wrong_nodes'])}")
    floor = float(opts["min_busbw_gbps"])
    top = table[-1]
    if floor and top["busbw_gbps"] < floor:
        problems.append(f"busbw {top['busbw_gbps']:.2f} GB/s at {top['bytes']} bytes, below the floor {floor}")
    slowest = max(rows["per_node"].items(), key=lambda kv: kv[1]) if rows["per_node"] else None
    evidence = {"backend": plan["backend"], "ranks": world, "sizes": table, "node_seconds": rows["per_node"],
                "slowest_node": slowest[0] if slowest else None}
    if problems:
        return Result(NAME, Status.FAIL, "; ".join(problems), evidence)
    return Result(NAME, Status.PASS, f"{world} ranks ({plan['backend']}): busbw {top['busbw_gbps']:.2f} GB/s at "
                  f"{top['bytes'] >> 20} MB, every sum right; slowest node {evidence['slowest_node']}", evidence)


def _rank_main(rank: int, world: int, plan: dict, queue) -> dict | None:
    """One rank: all_reduce each size, check the sum, time it; rank 0 gathers and reports."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(plan["backend"], rank=rank, world_size=world)
    try:
        dev = torch.device(f"cuda:{rank % torch.cuda.device_count()}") if plan["backend"] == "nccl" else torch.device("cpu")
        expected = world * (world + 1) / 2
        out, total = {}, 0.0
        for size in plan["sizes"]:
            x = torch.empty(size // 4, dtype=torch.float32, device=dev)
            for _ in range(plan["warmup"]):
                x.fill_(rank + 1)
                dist.all_reduce(x)
            _sync(torch, dev)
            elapsed, wrong = 0.0, 0
            for _ in range(plan["iterations"]):
                x.fill_(rank + 1)
                _sync(torch, dev)
                start = time.perf_counter()
                dist.all_reduce(x)
                _sync(torch, dev)
                elapsed += time.perf_counter() - start
                wrong += int(not bool((x == expected).all()))
            total += elapsed
            out[size] = (elapsed / plan["iterations"], wrong)
        node = this_node()
        mine = {"node": node, "rank": rank, "sizes": out, "seconds": total}
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    sizes = {}
    for size in plan["sizes"]:
        wrong_nodes = sorted({f"{g['node']}:rank{g['rank']}" for g in gathered if g["sizes"][size][1]})
        sizes[size] = {"seconds": max(g["sizes"][size][0] for g in gathered), "wrong": len(wrong_nodes),
                       "wrong_nodes": wrong_nodes}
    per_node: dict[str, float] = {}
    for g in gathered:
        per_node[g["node"]] = max(per_node.get(g["node"], 0.0), g["seconds"])
    rows = {"sizes": sizes, "per_node": per_node}
    if queue is not None:
        queue.put(rows)
    return rows


def _sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _slurm_rank() -> tuple[int, int] | None:
    """(rank, world size) when this process is one task of a distributed launch."""
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID")
    world = os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS")
    if rank is None or world is None or int(world) < 2:
        return None
    return int(rank), int(world)


def _rendezvous_from_slurm() -> None:
    """MASTER_ADDR (the step's first node) and MASTER_PORT (from the job id: concurrent checks in
    different jobs do not collide) unless the launcher set them."""
    nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if nodes and "MASTER_ADDR" not in os.environ:
        from observe.hostlists import expand_nodes

        os.environ["MASTER_ADDR"] = expand_nodes(nodes)[0]
    os.environ.setdefault("MASTER_PORT", str(29500 + int(os.environ.get("SLURM_JOB_ID", "0") or 0) % 2000))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
