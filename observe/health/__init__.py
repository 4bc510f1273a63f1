"""Node health checks: each returns PASS, FAIL or UNKNOWN (could not run) with evidence and its
duration. Checks live in :mod:`observe.health.checks`, one module each; the policy (thresholds,
which failures drain, reset or reboot) is the data file ``policy.toml``.
"""
