"""Kernel ring buffer: dmesg ``[secs.usecs]`` since boot, ``dmesg -T`` ctime, ``dmesg --time-format
iso``, ``dmesg -x`` facility/level, relative ``[ +secs]``, ``/dev/kmsg`` records, unstamped lines and
kernel lines with a syslog header (``journalctl -k``).

Sample: ``[  170.053881] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000013, engmask 00000101, intr 10000000``
Boot-relative stamps become UTC given the boot time (``--boot-time``); otherwise ``ts`` stays null
and the seconds since boot are kept in attrs.uptime.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import polars as pl

from collectors._kernel_text import kernel_device
from collectors._syslog import SNIFF, parse_syslog, severity_from_pri
from observe import boot_copies
from observe import timeparse as tp
from observe.collector import Collector, Context, register, split_header
from observe.frames import attrs_json

# dmesg -x levels (util-linux "warn") and Talos's (go-kmsg Priority.String(): "warning")
LEVELS = "emerg|alert|crit|err|warning|warn|notice|info|debug"
FACILITIES = "kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local\\d"
# source: siderolabs/talos internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go (Dmesg, v0.x-v1.x):
#   fmt.Sprintf("%s: %7s: [%s]: %s", msg.Facility, msg.Priority, msg.Timestamp.Format(time.RFC3339Nano),
#   msg.Message): "kern: warning: [2026-04-22T21:26:20.599488292Z]: NVRM: ..." (facility, level right-aligned
#   to 7, the record's wall-clock time, then ``]: ``).
# rsyslog's wall message (omusrmsg, the console broadcast of emerg lines) puts the tag before the text
# with no space: source: rsyslog/rsyslog runtime/rsconf.c (v8) template_WallFmt "\r\n\7Message from
#   syslogd@%HOSTNAME% at %timegenerated% ...\r\n %syslogtag%%msg%\n\r" (`` kernel:[ 964.13] watchdog: ...``,
#   `` kernel:watchdog: ...``): the leading `` kernel:`` is header. A stamp takes one space after it;
#   a line with no header keeps its leading blanks (a pasted, indented dmesg line).
WALL_TAG = r"(?: ?kernel: ?)?"
DMESG = (
    WALL_TAG + r"(?:<(?P<pri>\d{1,3})>)?(?:(?P<fac>" + FACILITIES + r")\s*:\s*(?P<lvl>" + LEVELS + r")\s*:\s)?"
    # source: util-linux sys-utils/dmesg.c (2.23-2.40): "[%5ld.%06ld] " (uptime), with -d
    # "[%5ld.%06ld <%12.06f>] " (and the gap to the previous line), -H/--reltime "[%b%e %H:%M] " once a minute
    # (short_ctime) and "[  +%ld.%06ld] " between, --ctime "[%a %b %e %H:%M:%S %Y] "; the kernel's caller id
    # (CONFIG_PRINTK_CALLER, 5.1+) "[    T1] " or "[    C3] " follows the stamp
    r"(?:(?:\[\s*(?P<up>\d+\.\d+)(?: <\s*(?P<gap>\d+\.\d+)>)?\]|\[\s*\+\s*(?P<rel>\d+\.\d+)\]|"
    r"\[(?P<rmon>[A-Z][a-z]{2})(?P<rday>[ \d]?\d) (?P<rclock>\d\d:\d\d)\]|\[(?P<ct>\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]|"
    r"\[(?P<tiso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\]:|"
    r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+(?:Z|[+-]\d\d:?\d\d)?))\s?(?:\[\s*[TC]\d+\] )?)?"
    # the kernel's syslog tag (rsyslog's %syslogtag% "kernel:") left in front of the text of a syslog line
    # whose stamp and host were cut away
    r"(?:kernel: )?"
)
# A host name before a dmesg line, put there by the tool that gathered it from many nodes:
# source: siderolabs/talos cmd/talosctl/cmd/talos/dmesg.go (v0.x-v1.x): fmt.Printf("%s: %s", node, data.Bytes).
# source: chaos/pdsh src/pdsh/dsh.c (rsh thread, with labels, the default): out("%S: %s", a->host, buf)
#   (``pdsh -w n1,n2 dmesg``).
# Taken as a host only when a dmesg stamp or a facility:level follows (else ``mlx5_core: probe of`` ...).
NODE_PREFIX = (
    r"^(?P<host>[A-Za-z0-9][\w.-]*): (?:(?:" + FACILITIES + r")\s*:\s*(?:" + LEVELS + r")\s*:\s|"
    r"\[\s*\+?\s*\d+\.\d+\]|\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"
)
INDENTED_DEVICE = r"^\s+[\w.-]+ [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]: "
KMSG = r"(?P<kpri>\d{1,4}),(?P<seq>\d+),(?P<usec>\d+),[^;]*;"
STAMP = r"^(?:<\d{1,3}>)?(?:\[\s*\+?\s*\d+\.\d+(?: <\s*\d+\.\d+>)?\]|\[[A-Z][a-z]{2}[ \d]?\d \d\d:\d\d\]|\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}|\d{1,4},\d+,\d+,[^;]*;)"


@register
class Kernel(Collector):
    name = "kernel"
    source = "kernel"
    priority = 20
    batchable = False  # each node's dmesg has its own boot time
    sniff = (STAMP + r"|^NVRM: |^(?:\p{L}{3} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ kernel: )"
             r"|^[a-z]+\d?\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*: ")  # dmesg -x

    def continuation(self, line: pl.Expr) -> pl.Expr:
        """Indented lines without a header (wrapped text, ``NVRM:     ...``, kmsg ``KEY=value`` dictionary
        lines). A line with a dmesg stamp is a printk record of its own however indented its text (the
        ``      Tainted:`` and `` __schedule+0x..`` lines of a report), and so is an indented line that
        starts with a dev_printk device prefix (``     pcieport 0000:00:1c.5: ...``, a pasted dmesg line)."""
        return (line.str.contains(r"^(?: {2,}\S|(?:\[[^\]]*\])?\s?NVRM: {2,}\S)|^ [A-Z_]+=")
                & ~line.str.contains(INDENTED_DEVICE))

    def relayed_for(self, sample: list[str]) -> bool:
        """Syslog-framed kernel lines (``host kernel: ...``) in a file found, not named ``kernel``, are a
        syslog daemon's file: ``logger -t kernel`` writes the same (kern.log is trusted as named)."""
        return bool(sample) and pl.Series(sample, dtype=pl.String).str.contains(SNIFF).any()

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Route syslog-framed lines to the syslog parser and parse the others' dmesg/kmsg prefix."""
        framed = records.get_column("raw").str.contains(SNIFF)
        parts = []
        if framed.any():
            parts.append(_kernel_tag(parse_syslog(records.filter(framed), ctx)).with_columns(pl.lit("kernel").alias("source")))
            if ctx.boot_time is None:  # lines carrying both stamps tell the boot time for the others
                ctx = replace(ctx, boot_time=_boot_from(parts[0]))
        if not framed.all():
            parts.append(_dmesg(records.filter(~framed), ctx))
        return pl.concat(parts, how="diagonal_relaxed")


def _kernel_tag(framed: pl.DataFrame) -> pl.DataFrame:
    """A line with a stamp and no host (``Sep 18 20:07:01 NVRM: Xid ...``: its host and ``kernel:`` tag cut
    away) has no tag either: the word the header reader took for one is the start of the kernel's own text
    (its driver's prefix), put back in front of the message. Lines with a host keep their tag (a journal's
    other programs in ``journalctl -o short-monotonic`` output)."""
    other = pl.col("program").is_not_null() & (pl.col("program") != "kernel") & pl.col("node").is_null()
    return framed.with_columns(pl.when(other).then(pl.format("{}: {}", "program", "message")).otherwise("message").alias("message"),
                               pl.when(other).then(pl.lit("kernel")).otherwise("program").alias("program"))


def _boot_from(framed: pl.DataFrame) -> datetime | None:
    return framed.select(tp.boot_time_of()).item()


def _dmesg(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    raw = pl.col("raw")
    host = raw.str.extract(NODE_PREFIX, 1)
    records = records.with_columns(host.alias("_node"))
    if records.get_column("_node").null_count() < records.height:  # the header regexes read the line after the host
        records = records.with_columns(
            pl.when(pl.col("_node").is_not_null()).then(raw.str.slice(pl.col("_node").str.len_chars() + 2)).otherwise(raw).alias("raw"),
            raw.alias("_raw"))
    else:
        records = records.with_columns(raw.alias("_raw"))
    g = split_header(split_header(records, KMSG).rename({"msg": "kmsg"}), DMESG)
    kmsg = pl.col("kmsg").is_not_null()
    up = pl.when(kmsg).then(pl.col("usec").cast(pl.Float64, strict=False) / 1e6).otherwise(pl.col("up").cast(pl.Float64, strict=False))
    minute = tp.yearless(pl.col("rmon"), pl.col("rday").str.strip_chars(), pl.col("rclock") + ":00", ctx.reference(), ctx.tz)
    boot = ctx.boot_time or boot_copies.boot_time(g, up, pl.coalesce("kmsg", "msg"), ctx.boot_copies)
    ts = pl.coalesce(tp.iso(pl.coalesce("tiso", "iso"), ctx.tz), tp.ctime(pl.col("ct"), ctx.tz), tp.since_boot(up, boot),
                     pl.when(pl.col("rmon").is_not_null()).then(minute))
    severity = pl.coalesce(
        severity_from_pri(pl.coalesce("kpri", "pri")),
        pl.col("lvl").replace({"warn": "warning"}),
    )
    attrs = attrs_json([
        ("uptime", pl.coalesce(pl.col("up"), (pl.col("usec").cast(pl.Float64, strict=False) / 1e6).cast(pl.String))), ("seq", pl.col("seq")), ("delta", pl.coalesce("rel", "gap")),
        ("facility", pl.col("fac")),
    ])
    return kernel_device(g.select(
        pl.col("_raw").alias("raw"), "offset", ts.alias("ts"), pl.col("_node").alias("node"), severity.alias("severity"),
        pl.lit("kernel").alias("program"),
        pl.coalesce("kmsg", "msg").alias("message"), attrs.alias("attrs"), pl.lit("kernel").alias("source"),
    ))
