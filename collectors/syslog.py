"""Syslog and journald files: every header form collectors/_syslog.py parses (RFC 3164 with localized
months, RFC 5424, RFC 3339, journalctl's short modes and JSON).

Sample: ``Apr 29 19:24:11 EVE kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.``
Kernel lines become source ``kernel`` (their ``[uptime]`` kept in attrs), Slurm daemons ``slurm``.
"""
from __future__ import annotations

import polars as pl

from collectors._syslog import SNIFF, parse_syslog
from observe.collector import Collector, Context, register


@register
class Syslog(Collector):
    name = "syslog"
    source = "syslog"
    priority = 10
    relayed = True
    sniff = SNIFF

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Each record's syslog or journald header, then what the sources it carries refine."""
        return parse_syslog(records, ctx)
