"""A healthy fleet's alarming-looking kernel lines, drawn from real labelled records when a scenario
run has them: a corrected PCIe or memory error the hardware fixed, a link that flaps and comes back
within seconds, the OOM killer taking some other process than the job's; and, before some failures,
such a line on another node of the failing job. They make explain tell a real fault from the noise
every fleet shows. Drawn from the run's own random stream, so they leave the rest of a run unchanged."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from observe.simulate.clock import HOUR, MINUTE, S
from observe.simulate.fleet import HCA_BUS, Node, Run
from observe.simulate.real_lines import Record, rehome

if TYPE_CHECKING:
    from observe.simulate.cluster import Cluster

# Per node-hour rates (our judgement of orders of magnitude, not a measurement).
BACKGROUND = {"aer_corrected": 0.05, "ecc_corrected": 0.02, "ib_flap": 0.01, "oom_other": 0.004}
DISTRACTED = 0.3  # of failures with real records: an unrelated alarming line on another node of the job, minutes before


def corrected(record: Record) -> bool:
    """An EDAC/MCE record of a corrected error (``CE``, ``Corrected``), not an uncorrected one."""
    return bool(re.search(r"\bCE\b|(?<![Uu]n)[Cc]orrected", record.texts[0]))


def background(sim: Cluster, t0: int, t1: int) -> None:
    """The hour's background records on the nodes still alive."""
    rng = sim.quiet_rng
    for name, rate in BACKGROUND.items():
        for _ in range(rng.poisson(rate * len(sim.nodes) * (t1 - t0) / HOUR)):
            node, t = sim.nodes[int(rng.integers(len(sim.nodes)))], int(rng.integers(t0, t1))
            if t < sim.dead_at[node.index]:
                QUIET[name](sim, t, node, rng)


def _aer_corrected(sim: Cluster, t: int, node: Node, rng: np.random.Generator) -> None:
    quiet(sim, t, node, rng, sim.real.pick(rng, "pcie_aer", aer="corrected"), node.gpus[int(rng.integers(len(node.gpus)))].pci)


def _ecc_corrected(sim: Cluster, t: int, node: Node, rng: np.random.Generator) -> None:
    quiet(sim, t, node, rng, sim.real.pick(rng, "memory_ecc", test=corrected), None)


def _ib_flap(sim: Cluster, t: int, node: Node, rng: np.random.Generator) -> None:
    hca = f"0000:{HCA_BUS[int(rng.integers(node.hcas))]}:00"
    down, up = sim.real.pick(rng, "ib_link_down"), sim.real.pick(rng, "ib_link_up")
    if down and up:
        quiet(sim, t, node, rng, down, hca)
        quiet(sim, t + int(rng.integers(S, 5 * S)), node, rng, up, hca)


def _oom_other(sim: Cluster, t: int, node: Node, rng: np.random.Generator) -> None:
    quiet(sim, t, node, rng, sim.real.pick(rng, "oom_kill", test=lambda r: "python" not in r.texts[0]), None)


QUIET = {"aer_corrected": _aer_corrected, "ecc_corrected": _ecc_corrected, "ib_flap": _ib_flap, "oom_other": _oom_other}


def quiet(sim: Cluster, t: int, node: Node, rng: np.random.Generator, record: Record | None, pci: str | None) -> None:
    """``record`` re-homed onto ``node`` (its device ``pci``) in the node's kernel log at ``t``."""
    if record is not None:
        sim.kernel(node, t, *rehome(record, pci=pci, host=node.name, pid=int(rng.integers(2000, 4_000_000))))


def distract(sim: Cluster, t: int, run: Run, culprit: str) -> None:
    """An unrelated alarming line on another node of a failing job, minutes before its failure:
    an uncorrected but non-fatal PCIe error, a corrected one, a corrected memory error."""
    others = [n for n in run.nodes if n.name != culprit]
    if not others or sim.real is None:
        return
    rng = sim.quiet_rng
    node = others[int(rng.integers(len(others)))]
    at = t - int(rng.integers(MINUTE, 10 * MINUTE))
    pick = int(rng.integers(3))
    record = (sim.real.pick(rng, "pcie_aer", aer="non_fatal") if pick == 0 else
              sim.real.pick(rng, "pcie_aer", aer="corrected") if pick == 1 else
              sim.real.pick(rng, "memory_ecc", test=corrected))
    quiet(sim, at, node, rng, record, node.gpus[int(rng.integers(len(node.gpus)))].pci)
