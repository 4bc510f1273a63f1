"""Failures whose root cause is a GPU, one function per shape: the GPU falls off the bus (xid79),
a fatal ECC or GSP Xid (fatal_xid), the application's own Xid (app_xid), an Xid the job survives
(xid_noise), a fault one job leaves for the next (prior_fault), and a GPU failure whose node's logs
never arrive (logs_lost). Each takes the cluster, the time and a running job's run."""
from __future__ import annotations

from typing import TYPE_CHECKING

from observe.simulate.catalog import APP_XIDS, FATAL_XIDS, HANG_XIDS
from observe.simulate.clock import HOUR, MINUTE, S, glog, iso
from observe.simulate.fleet import Run
from observe.simulate.formats import (CUDA_ECC, CUDA_ILLEGAL_ADDRESS, KERNEL, SLURMCTLD, SLURMD, TRAINING_STEP, lines,
                                      real)
from observe.simulate.joblog import abort, all_time_out, timeout_lines, traceback
from observe.simulate.real_lines import rehome
from observe.simulate.slurm import drain, fail, repaired

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster


def xid79(sim: Cluster, t: int, run: Run) -> None:
    """A GPU falls off the bus: collectives hang, every rank's watchdog fires after 10 minutes,
    the job fails, the stuck process makes the node drain with 'Kill task failed'."""
    rng = sim.rng
    rank, node, g, pid = sim.pick(run)
    gpu = node.gpus[g]
    node.fallen, node.state = g, "drain"
    record = sim.real_record("gpu_xid", code=79)
    if record is not None:
        sim.kernel(node, t, *rehome(record, pci=gpu.pci, host=node.name, pid=pid))
    elif sim.scenario and rng.random() < 0.5:  # the real sample's shape: no pid, a sanity-check line after
        sim.kernel(node, t, *real("xid79", pci=gpu.pci, uuid=gpu.uuid, serial=gpu.serial))
    else:
        sim.kernel(node, t, *lines(KERNEL["xid79"], pci=gpu.pci, uuid=gpu.uuid, serial=gpu.serial, pid=pid))
    sim.kernel(node, t + 123 * S, *lines(KERNEL["hung_task"], pid=pid, ppid=pid - g - 1))
    seq, numel = int(rng.integers(800, 90_000)), int(rng.choice([9801523, 2106881, 544997376, 5056]))
    fired = t + 600 * S - int(rng.integers(0, 3 * S))
    times, text = [], []
    for r in range(run.ranks):
        w = fired + int(rng.integers(0, 900_000))
        values = dict(rank=r, seq=seq, op="ALLREDUCE", numel=numel, timeout=600000, ran=600_000 + (w - fired) // 1000 + 20,
                      enqueued=seq + 3, completed=seq - 1)
        text += timeout_lines(glog, w + run.skew(r), values, new=False)
        times += [w, w + 2500, w + 2600, w + 2700, w + 3000, w + 3000]
    sim.job(run, times, text)
    done = abort(sim, run, fired + 2 * S, (rank + 1) % run.ranks, "Aborted (core dumped)")
    end = done + 30 * S
    fail(sim, run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
    stuck = end + int(rng.integers(60, 90)) * S
    k = run.nodes.index(node)
    sim.syslog(node, stuck, SLURMD["not_ending"].format(pid=run.stepd[k], job=run.id, node=node.name, at=iso(stuck + node.skew)))
    sim.ctl(stuck + 2000, SLURMCTLD["kill_task_failed"].format(job=run.id, node=node.name),
            *lines(SLURMCTLD["drain"], node=node.name, reason=SLURMCTLD["kill_task_reason"]))
    sim.at(stuck + int(rng.integers(2 * HOUR, 6 * HOUR)), repaired, node, [SLURMCTLD["idle"].format(node=node.name)])
    sim.record("xid79", t, run, node, gpu, "gpu_xid", 79)


def fatal_xid(sim: Cluster, t: int, run: Run) -> None:
    """A node-fault Xid on one GPU: uncorrectable ECC (48, 64, 94, 95: the rank's CUDA call fails, the
    job aborts) or the GSP stops answering (119, 120: the GPU hangs, every rank's watchdog fires)."""
    rng = sim.rng
    rank, node, g, pid = sim.pick(run)
    gpu, code = node.gpus[g], int(rng.choice(FATAL_XIDS))
    addr = int(rng.integers(0x1000000, 0xfffffffff))
    text = [KERNEL["gpu_at"].format(pci=gpu.pci, uuid=gpu.uuid)]
    record = sim.real_record("gpu_xid", test=lambda r: r.fields.get("code") in FATAL_XIDS + HANG_XIDS)
    if record is not None:
        code = record.fields["code"]
        text = rehome(record, pci=gpu.pci, host=node.name, pid=pid)
    elif code == 48:
        text.append(KERNEL["xid48"].format(pci=gpu.pci, addr=addr, partition=int(rng.integers(0, 20)),
                                           subpartition=int(rng.integers(0, 4))))
        if rng.random() < 0.5:
            text.append(KERNEL["xid63"].format(pci=gpu.pci, addr=addr))
    elif code == 64:
        text.append(KERNEL["xid64"].format(pci=gpu.pci, addr=addr, bank=int(rng.integers(0, 16))))
    elif code in (94, 95):
        text.append(KERNEL[f"xid{code}"].format(pci=gpu.pci, pid=pid))
    elif code == 119:
        rpc = KERNEL["xid119"].format(pci=gpu.pci, pid=pid, gpu=g, control=int(rng.choice([0x20802a02, 0x20809004, 0x90cc0301])),
                                      arg=int(rng.integers(1, 0x700)))
        text.append(rpc)
        sim.kernel(node, t + 6 * S, rpc)
        sim.kernel(node, t + 12 * S, rpc)
    else:  # 120: the real sample
        store = bool(rng.random() < 0.5)
        text = real("xid120", pci=gpu.pci, uuid=gpu.uuid, access="store" if store else "load",
                    cause="0xf" if store else "0xd", pc=f"0x{int(rng.integers(0x1300000, 0x1500000)):x}",
                    part=int(rng.integers(2, 5)), task=3, libos=int(rng.integers(4, 6)), ts=(t - node.boot) // S)
    sim.kernel(node, t, *text)
    if code in HANG_XIDS:
        node.state = "drain"
        end = gpu_hang(sim, t, run, rank)
        drain(sim, node, end + int(rng.integers(60, 90)) * S, SLURMCTLD["kill_task_reason"])
    else:
        traceback(sim, run, t + S // 2, rank, TRAINING_STEP, CUDA_ECC)
        done = abort(sim, run, t + S, rank, "Exited with exit code 1")
        end = done + int(rng.integers(5, 30)) * S
        fail(sim, run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
        if code != 94:  # a contained error leaves the GPU usable
            node.state = "drain"
            drain(sim, node, end + int(rng.integers(20, 120)) * S, SLURMCTLD["nhc_reason"].format(gpu=g, code=code))
    sim.record("fatal_xid", t, run, node, gpu, "gpu_xid", code)


def gpu_hang(sim: Cluster, t: int, run: Run, rank: int) -> int:
    """The GPU of ``rank`` stops: every rank's watchdog times out 10 minutes later, the job fails."""
    rng = sim.rng
    last = all_time_out(sim, run, t + 600 * S - int(rng.integers(0, 3 * S)), 4)
    done = abort(sim, run, last + 2 * S, (rank + 1) % run.ranks, "Aborted (core dumped)")
    end = done + 30 * S
    fail(sim, run, t, end, "FAILED", "WEXITSTATUS 1", "1:0")
    return end


def app_xid(sim: Cluster, t: int, run: Run) -> None:
    """An application fault the driver reports as Xid 13 or 31: the job's own bug, not the GPU's."""
    rng = sim.rng
    rank, node, g, pid = sim.pick(run)
    gpu, code = node.gpus[g], int(rng.choice([13, 31]))
    gpc, tpc = int(rng.integers(0, 8)), int(rng.integers(0, 9))
    record = sim.real_record("gpu_xid", test=lambda r: r.fields.get("code") in APP_XIDS)
    if record is not None:
        code = record.fields["code"]
        sim.kernel(node, t, *rehome(record, pci=gpu.pci, host=node.name, pid=pid))
    elif code == 13:
        sim.kernel(node, t, *lines(KERNEL["app_xid13"], pci=gpu.pci, pid=pid, gpc=gpc, tpc=tpc))
    else:
        sim.kernel(node, t, KERNEL["app_xid31"].format(pci=gpu.pci, pid=pid, ch=int(rng.integers(8, 64)), gpc=gpc,
                                                       addr=int(rng.integers(16, 255))))
    traceback(sim, run, t + S // 2, rank, TRAINING_STEP, CUDA_ILLEGAL_ADDRESS)
    done = abort(sim, run, t + S, rank, "Exited with exit code 1")
    fail(sim, run, t, done + int(rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("app_xid", t, run, node, gpu, "gpu_xid", code)


def xid_noise(sim: Cluster, t: int, run: Run) -> None:
    """An application Xid (13 or 31) that the job survives; no incident."""
    rng = sim.rng
    _, node, g, pid = sim.pick(run)
    gpu = node.gpus[g]
    run.noisy = True
    v = int(rng.integers(3))
    if v < 2:
        text = real("xid13", pci=gpu.pci, pid="'<unknown>'" if v == 0 else pid, name="<unknown>" if v == 0 else "python",
                    gpc=int(rng.integers(0, 8)), tpc=int(rng.integers(0, 9)))
    else:
        text = real("xid31", pci=gpu.pci, pid=pid, name="python", ch=f"{int(rng.integers(8, 64)):08x}",
                    addr=f"0x7f{int(rng.integers(16, 255)):02x}_{int(rng.integers(0, 1 << 32)):08x}")
    sim.kernel(node, t, *text)


def prior_fault(sim: Cluster, t: int, run: Run) -> None:
    """A GPU fails uncorrectably in one job and Slurm does not notice (no drain): the job fails of
    it (a fatal_xid incident), and the next job to land on the node fails minutes into its run with
    a misleading CUDA error on that GPU (:func:`observe.simulate.slurm.inherited`). The previous
    job's Xid explains the next job's failure."""
    rank, node, g, _ = sim.pick(run)
    gpu, code = node.gpus[g], int(sim.rng.choice((48, 64, 95)))
    record = sim.real_record("gpu_xid", test=lambda r: r.fields.get("code") in (48, 64, 95))
    if record is not None:
        code = record.fields["code"]
    text = (rehome(record, pci=gpu.pci, host=node.name) if record is not None else
            [KERNEL["dbe"].format(pci=gpu.pci, code=code, addr=int(sim.rng.integers(1 << 24, 1 << 36)))])
    sim.kernel(node, t, *text)
    traceback(sim, run, t + S // 2, rank, TRAINING_STEP, CUDA_ECC)
    done = abort(sim, run, t + S, rank, "Exited with exit code 1")
    fail(sim, run, t, done + int(sim.rng.integers(5, 30)) * S, "FAILED", "WEXITSTATUS 1", "1:0")
    sim.record("fatal_xid", t, run, node, gpu, "gpu_xid", code)
    node.broken = (g, t, code)


def logs_lost(sim: Cluster, t: int, run: Run) -> None:
    """A GPU falls off the bus on a node whose kernel and syslog lines of the hour never reach the
    store (its log shipping broke, its disk filled): every rank's watchdog fires, nothing names the
    node. The honest verdict is undetermined, naming the node whose logs are missing."""
    before = len(sim.incidents)
    xid79(sim, t, run)
    if len(sim.incidents) > before:  # its lines are still in the outbox: lose them
        incident = sim.incidents[-1]
        sim.lost[next(n.index for n in run.nodes if n.name == incident["node"])] = (t - 20 * MINUTE, t + HOUR)
        incident.update(type="logs_lost", unsure_ok=True)
