"""Prometheus metrics: the central role counts the store, the node role reports one node."""

MAX_SERIES = 10_000  # default of `exporter central --max-series`: series of one per-node metric before the rest fold
