"""A seeded simulation of a Slurm GPU cluster that writes the raw logs such a cluster leaves behind,
with injected failures and their ground truth: the data of ``observe demo``, of the tests and of the
benches. :func:`generate` writes one cluster's logs, :func:`scenarios` many small ones with failures
of known root cause (:mod:`observe.simulate.accuracy` scores explain against them).

What each module holds: docs/architecture.md.
"""
from observe.simulate.catalog import FATAL_XIDS, FLEET_MIX, REGRESSION, SCENARIOS, TYPES
from observe.simulate.formats import REAL
from observe.simulate.generator import BENCH, FAST, FIRST_JOB_ID, generate, scenarios
from observe.simulate.manifest import InputFile, Manifest

__all__ = ["BENCH", "FAST", "FATAL_XIDS", "FIRST_JOB_ID", "FLEET_MIX", "REAL", "REGRESSION", "SCENARIOS", "TYPES",
           "InputFile", "Manifest", "generate", "scenarios"]
