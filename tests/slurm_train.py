"""A small CPU training job for the requeue test, one rank per Slurm task (gloo): it checkpoints
with torch.distributed.checkpoint every N steps and, started again after a requeue, resumes from
the newest complete checkpoint observe finds. The task on the node named in FAULT_NODE dies the way
a process whose GPU fell off the bus does, once the file FAULT exists (first run only).

usage: slurm_train.py CKPT_DIR STEPS EVERY STEPS_LOG FAULT FAULT_NODE
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from observe.checkpoint import latest

warnings.filterwarnings("ignore")


def main() -> None:
    ckpt_dir, steps, every, steps_log, fault, fault_node = sys.argv[1:7]
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    run = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    node = os.environ.get("SLURMD_NODENAME", "?")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    best, _ = latest(ckpt_dir)
    if best is not None:
        dcp.load(state, checkpoint_id=best.path)
        model.load_state_dict(state["model"])
    start = int(state["step"])
    print(f"run {run} rank {rank} on {node}: starting at step {start + 1} ({best.path if best else 'no checkpoint'})",
          flush=True)
    for step in range(start + 1, int(steps) + 1):
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(64, 16, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if rank == 0:
            with open(steps_log, "a") as f:
                f.write(f"{run} {step} {time.time():.3f} {loss.item():.5f}\n")
        if step % int(every) == 0:
            state["step"] = torch.tensor(step)
            dcp.save(state, checkpoint_id=os.path.join(ckpt_dir, f"step_{step:06d}"))
        if run == 0 and node == fault_node and os.path.exists(fault):
            print(f"rank {rank} on {node}: RuntimeError: CUDA error: unspecified launch failure", flush=True)
            os._exit(1)
        time.sleep(0.3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
