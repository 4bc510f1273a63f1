"""Prometheus metrics: the central role counts the store, the node role reports one node."""
