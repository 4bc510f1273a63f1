"""The log lines the simulator writes, read from formats.toml: templates by emitter (slurmctld,
slurmd, slurmstepd, srun, the training script, Python, PyTorch, NCCL, the kernel, nvidia-smi) and
the real corpus lines used as templates. Kept as data so that a format can be read, checked against
its emitter and changed without reading the simulation; the code only fills in the fields."""
from __future__ import annotations

import tomllib
from pathlib import Path

_DATA = tomllib.loads(Path(__file__).with_name("formats.toml").read_text())
VERSIONS: dict[str, str] = _DATA["versions"]


def _versioned(value):
    """``value`` with the [versions] filled in (strings, lists and tables of them)."""
    if isinstance(value, str):
        for name, version in VERSIONS.items():
            value = value.replace("{" + name + "}", version)
        return value
    if isinstance(value, list):
        return [_versioned(v) for v in value]
    if isinstance(value, dict):
        return {k: _versioned(v) for k, v in value.items()}
    return value


SLURMCTLD, JOBCOMP, SLURMD = (_versioned(_DATA[k]) for k in ("slurmctld", "jobcomp", "slurmd"))
SLURMSTEPD, SRUN, TRAINING = (_versioned(_DATA[k]) for k in ("slurmstepd", "srun", "training"))
PYTHON, TORCH, NCCL = (_versioned(_DATA[k]) for k in ("python", "torch", "nccl"))
KERNEL, NVIDIA_SMI = _versioned(_DATA["kernel"]), _versioned(_DATA["nvidia_smi"])

BOOT = tuple((offset, text) for offset, text in KERNEL["boot"])  # (seconds after boot, dmesg text)
TRACEBACK = tuple(tuple(frame) for frame in PYTHON["frames"])  # (file, line, function, code) above the error
APP_ERRORS = tuple(tuple(error) for error in PYTHON["app_errors"])  # (kind, file, line, function, code, exception)
TRAINING_STEP, SETUP = tuple(PYTHON["training_step"]), tuple(PYTHON["setup"])  # the frame a CUDA error surfaces in
CUDA_ILLEGAL_ADDRESS = (PYTHON["illegal_address"], *PYTHON["cuda_hints"])
CUDA_ECC = (PYTHON["uncorrectable_ecc"], *PYTHON["cuda_hints"])
# Real lines (tests/fixtures/corpus/real) as templates: name -> (corpus file, lines, the values that give
# back the corpus lines: one dict for all lines or a tuple of one per line).
REAL = {name: (real["file"], tuple(real["lines"]),
               tuple(real["values"]) if isinstance(real["values"], list) else real["values"])
        for name, real in _DATA["real"].items()}


def real(sample: str, **values) -> list[str]:
    """The lines of real sample ``sample`` with generated values."""
    return [line.format(**values) for line in REAL[sample][1]]


def lines(templates: list[str], **values) -> list[str]:
    """Each template of a list with the same values."""
    return [t.format(**values) for t in templates]
