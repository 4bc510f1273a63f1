"""Syslog headers, shared by the collectors whose lines may come framed by syslog or journald (syslog,
kernel, slurm): RFC 3164 (localized months, space-padded days), RFC 5424, RFC 3339 / journald short-iso,
journalctl's other ``short`` modes, ``journalctl -o json``, and the Sandia archive prefix
(``- 1131566461 2005.11.09 dn228 ...``).

Sample: ``Apr 29 19:24:11 EVE kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.``
Kernel lines become source ``kernel`` (their ``[uptime]`` kept in attrs), Slurm daemons ``slurm``.

Each header form below names where its emitter prints it (``# source:``). After the stamp comes
``HOSTNAME SP TAG``; the host is optional (``journalctl --no-hostname``, BSD senders that leave it
out): as rsyslog's parser decides (source: rsyslog/rsyslog tools/pmrfc3164.c parse2, "there are
certain characters which are frequently used in TAG (e.g. ':'), which are *invalid* in host names"),
a first word that ends with ``:`` is the tag, never a host. A line with no header is unparsed
(message null), its node whatever the context says.

A private module (discovery skips it): it registers no collector. The refinements of other sources'
lines that syslog carries (kernel devices and uptimes, Slurm daemons' severity, job and node, NVIDIA
daemons' GPU) are made in one step, ``parse_syslog``.
"""
from __future__ import annotations

import json

import polars as pl

from observe import boot_copies, provenance
from observe import timeparse as tp
from collectors._kernel_text import kernel_lines
from collectors._slurm_text import slurm_fields
from observe.collector import Context, per_value, split_header
from observe.frames import attrs_json, scatter_rows
from observe.pci import BUS_ID

# TAG as rsyslog writes %syslogtag% and journalctl ``identifier[pid]: ``: a program name (paths,
# dots, dashes: ``/apps/x/gmetad[1682]:``), a parenthesised part (``sshd(pam_unix)[1327]:``), the
# pid optional (``kernel:``).
TAG = r"(?:(?P<tag>[^\s:\[\]]+(?:\([^)\s]*\))?)(?:\[(?P<pid>\d+)\])?: ?)?"
# HOSTNAME, optional: a word that holds no ``[`` and does not end with ``:`` (else it is the tag).
HOST = r"(?:(?P<host>[^\s\[]*[^\s\[:]) )?"
# source: rsyslog/rsyslog tools/smtradfile.c (RSYSLOG_TraditionalFileFormat,
#   "%TIMESTAMP% %HOSTNAME% %syslogtag%%msg:::sp-if-no-1st-sp%%msg:::drop-last-lf%\n"), the stamp by
#   runtime/datetime.c formatTimestamp3164 ("%s %2d %2.2d:%2.2d:%2.2d": English month, day space-padded);
#   RSYSLOG_TraditionalForwardFormat "<%PRI%>%TIMESTAMP% %HOSTNAME% %syslogtag:1:32%%msg%" (runtime/rsconf.c).
# source: syslog-ng/syslog-ng lib/logwriter.c log_writer_format_log (a9b2bc66), file destination without
#   template: stamp (ts-format, default BSD "Mmm dd HH:MM:SS", day zero-padded), " ", HOST, " ",
#   MSGHDR or "PROGRAM[PID]: ", MESSAGE (no program: no tag).
# source: systemd/systemd src/shared/logs-show.c (002951ce) output_timestamp_realtime, journalctl -o short
#   strftime("%b %d %H:%M:%S") and -o short-precise (+ ".%06"PRIu64), then output_short: " hostname"
#   (left out with --no-hostname), " identifier" (or comm, or "unknown"), "[pid]", ": ", message; %b is
#   the locale's abmon (observe/timeparse.py MONTHS), `` 3月`` (ja_JP) padded with a space.
# Also the Sandia archive prefix (``- 1131566461 2005.11.09 dn228 ``) and a year after the clock.
# busybox syslogd writes the facility and level between host and message, by name (syslog.h's
# facilitynames/prioritynames, the first name of each value: "err", "warn", "emerg"): source: mirror/busybox
#   sysklogd/syslogd.c timestamp_and_log (1.x): parse_fac_prio_20(pri, res); sprintf(G.printbuf,
#   "%s %.64s %s %s\n", timestamp, G.hostname, res, msg) (``Sep 13 14:34:10 ccgx user.err kernel: ...``).
BUSYBOX_PRIO = (r"(?:(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|mark|security|local[0-7])"
                r"\.(?P<blvl>emerg|panic|alert|crit|err|error|warn|warning|notice|info|debug) )")
BUSYBOX_SEVERITY = {"emerg": "emerg", "panic": "emerg", "alert": "alert", "crit": "crit", "err": "err",
                    "error": "err", "warn": "warning", "warning": "warning", "notice": "notice", "info": "info",
                    "debug": "debug"}
MONTH = r"(?P<mon>\p{L}{2,6}\.?|\d{1,2}[月월])"
RFC3164 = (
    r"(?:(?P<tb_label>\S+) (?P<tb_epoch>\d{9,11}) (?P<tb_date>\d{4}\.\d\d\.\d\d) (?P<tb_node>\S+) )?"
    r"(?:<(?P<pri>\d{1,3})>)? ?" + MONTH + r" {1,2}(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?) "
    r"(?:(?P<year>\d{4}) )?" + HOST + BUSYBOX_PRIO + "?" + TAG
)
# source: rsyslog/rsyslog tools/smfile.c (RSYSLOG_FileFormat,
#   "%TIMESTAMP:::date-rfc3339% %HOSTNAME% %syslogtag%%msg:::sp-if-no-1st-sp%%msg:::drop-last-lf%\n") and
#   RSYSLOG_ForwardFormat "<%PRI%>%TIMESTAMP:::date-rfc3339% %HOSTNAME% %syslogtag:1:32%%msg%" (runtime/rsconf.c).
# source: systemd/systemd src/shared/logs-show.c output_timestamp_realtime, journalctl -o short-iso
#   strftime("%Y-%m-%dT%H:%M:%S") + "%+03d:%02d" (tm_gmtoff), -o short-iso-precise with ".%06" before the offset.
RFC3339 = (
    r"(?:<(?P<pri>\d{1,3})>)?(?P<stamp>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) "
    + HOST + TAG
)
# source: RFC 5424 section 6 (HEADER = PRI VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID,
#   then SP STRUCTURED-DATA [SP MSG], "-" for a nil value, MSG optionally BOM-prefixed); rsyslog's
#   RSYSLOG_SyslogProtocol23Format "<%PRI%>1 %TIMESTAMP:::date-rfc3339% %HOSTNAME% %APP-NAME% %PROCID%
#   %MSGID% %STRUCTURED-DATA% %msg%\n" (rsyslog/rsyslog runtime/rsconf.c).
RFC5424 = (
    r"(?s)^<(?P<pri>\d{1,3})>1 (?P<stamp>\S+) (?P<host>\S+) (?P<tag>\S+) (?P<pid>\S+) (?P<msgid>\S+) "
    r"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: \x{FEFF}?(?P<msg>.*))?$"
)
# source: systemd/systemd src/shared/logs-show.c output_timestamp_realtime, journalctl -o short-full (and
#   -o with-unit): format_timestamp() (src/basic/time-util.c format_timestamp_style, 003b845c): an English
#   weekday from its own table ("Sun".."Sat", not the locale's), strftime(" %Y-%m-%d %H:%M:%S"), then
#   " UTC" (--utc) or " " tm_zone (``CET``, ``EDT``, ``+03``; left out when it does not fit).
SHORT_FULL = (
    r"(?:Sun|Mon|Tue|Wed|Thu|Fri|Sat) (?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)"
    r"(?: (?P<zone>[A-Z]{2,6}|[+-]\d\d(?:\d\d)?))? " + HOST + TAG
)
# source: systemd/systemd src/shared/logs-show.c output_timestamp_monotonic, journalctl -o short-monotonic
#   "[%5"PRI_USEC".%06"PRI_USEC"]" (seconds since boot), -o short-delta adds " <%5"PRI_USEC".%06"PRI_USEC"%s>"
#   (" " or "*") inside the brackets; then output_short's " hostname identifier[pid]: message".
SHORT_MONOTONIC = r"\[\s*(?P<up>\d+\.\d+)(?: <\s*(?P<delta>\d+\.\d+)[ *]>)?\] " + HOST + TAG
# source: systemd/systemd src/shared/logs-show.c output_timestamp_realtime, journalctl -o short-unix
#   "%10"PRI_TIME".%06"PRIu64 (seconds since the epoch), then output_short's " hostname identifier[pid]: ".
SHORT_UNIX = r"\s*(?P<epoch>\d{9,11}\.\d{1,6}) " + HOST + TAG
# journalctl's own lines between the entries: source: systemd/systemd src/journal/journalctl.c (v2xx-v245) printf("--
#   Logs begin at %s, end at %s. --\n"), (v246+) "-- Journal begins at %s, ends at %s. --\n" and "-- Journal begins at
#   %s. --\n" (--follow), "-- No entries --\n", and at a boot change "-- Reboot --" (v255+: "-- Boot %s --", the boot id):
#   a known line with no header, kept as journalctl's text.
JOURNAL_BANNER = (r"^-- (?:Logs begin at .*|Journal begins at .*|No entries|Reboot|Boot [0-9a-f]{32}) --$")
SLURM_DAEMONS = r"^slurm(?:ctld|d|stepd|dbd|restd)?$"
SEVERITY_BY_PRI = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]

def severity_from_pri(pri: pl.Expr) -> pl.Expr:
    """Syslog PRI (facility*8+level) or bare level to a severity name."""
    return (pri.cast(pl.Int32, strict=False) % 8).replace_strict(
        dict(enumerate(SEVERITY_BY_PRI)), default=None, return_dtype=pl.String)

def source_of(program: pl.Expr) -> pl.Expr:
    """Schema source for a syslog program name (worked out once per distinct name)."""
    return per_value(program, lambda names: pl.when(names == "kernel").then(pl.lit("kernel"))
                     .when(names.str.contains(SLURM_DAEMONS)).then(pl.lit("slurm")).otherwise(pl.lit("syslog")),
                     default="syslog")

def _nil(e: pl.Expr) -> pl.Expr:
    return pl.when(e != "-").then(e)


# What a syslog- or journald-framed line starts with (the syslog collector's sniff; the kernel and slurm
# collectors route such lines to parse_syslog by it)
SNIFF = (
    r"^(?:\S+ \d{9,11} \d{4}\.\d\d\.\d\d \S+ )?(?:<\d{1,3}>)? ?(?:\p{L}{2,6}\.?|\d{1,2}[月월]) {1,2}\d{1,2} "
    r"\d\d:\d\d:\d\d(?:\.\d{1,9})? |"
    r"^(?:<\d{1,3}>1? ?)?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S* (?:\S+ [^\s:]+|[^\s:\[]+\[\d+\]): |"
    r"^<\d{1,3}>1 (?:\d{4}-\d\d-\d\dT\S+|-) \S+ \S+ \S+ \S+ |"  # RFC 5424: no tag's colon
    r"^(?:Sun|Mon|Tue|Wed|Thu|Fri|Sat) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? |"  # short-full
    r"^\s*\d{9,11}\.\d{6} (?:[^\s\[:]+ )?[^\s:\[]+(?:\[\d+\])?: |"  # short-unix
    # short-monotonic only with a host and a pid (or ``kernel:``): the same stamp starts every
    # dmesg line (``[    5.1] usb 1-1: ...``), whose lines the kernel collector routes here by this
    r"^\[\s*\d+\.\d{6}(?: <\s*\d+\.\d{6}[ *]>)?\] [^\s\[:]+ (?:kernel|[^\s:\[]+\[\d+\]): |"
    r"^\{.*\"__REALTIME_TIMESTAMP\""
)


def parse_syslog(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Syslog-framed records as events. Split headers: lines of the common RFC 3164 shape (the stamp
    parses, a space follows) at fixed positions, the others by their format; the rest of each record is
    the message. Then the refinements of the sources syslog carries, in this one step."""
    raw = records.get_column("raw")
    ts = tp.syslog_stamp(raw.str.slice(0, 15), ctx.reference_of(records.get_column("offset")), ctx.tz)
    fast = (ts.is_not_null() & (raw.str.slice(15, 1) == " ")).fill_null(False)
    if fast.all():  # nearly always: no format detection, split or concatenation
        out = _rfc3164_fast(records.with_columns(ts.alias("_ts")))
    else:
        out = pl.concat([_rfc3164_fast(records.with_columns(ts.alias("_ts")).filter(fast)),
                         _by_format(records.filter(~fast), ctx)], how="diagonal_relaxed")
    return _gpu_daemon_lines(_slurm_lines(kernel_lines(out.with_columns(_source(out)))))


def _source(df: pl.DataFrame) -> pl.Expr:
    """The source of each line by its program; a journal entry a user sent is syslog whatever
    program it names (``logger -t kernel``, ``logger -t slurmd``)."""
    source = source_of(pl.col("program"))
    if "route" not in df.columns:
        return source.alias("source")
    return pl.when(pl.col("route") == "journal_user").then(pl.lit("syslog")).otherwise(source).alias("source")


def _slurm_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Slurm daemons' lines (``slurmd[777]: error: ...``) with Slurm's severity and job id."""
    rows = df.select((pl.col("source") == "slurm").fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    part = df.select("message", "severity", "node", *(["job_id"] if "job_id" in df.columns else [])).gather(rows)
    fixed = slurm_fields(part).select("severity", "job_id", "node")
    if "job_id" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("job_id"))
    return scatter_rows(df, rows, fixed)


def _by_format(records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """Lines of any other shape, each by its format's parser."""
    raw = pl.col("raw")
    kinds = records.with_columns(
        pl.when(raw.str.starts_with("{")).then(pl.lit("json"))
        .when(raw.str.contains(r"^<\d{1,3}>1 ")).then(pl.lit("5424"))
        .when(raw.str.contains(r"^(?:<\d{1,3}>)?\d{4}-\d\d-\d\d[T ]")).then(pl.lit("3339"))
        .when(raw.str.contains(r"^(?:Sun|Mon|Tue|Wed|Thu|Fri|Sat) \d{4}-\d\d-\d\d ")).then(pl.lit("full"))
        .when(raw.str.contains(r"^\[\s*\d+\.\d+(?: <[^>]*>)?\] ")).then(pl.lit("mono"))
        .when(raw.str.contains(r"^\s*\d{9,11}\.\d+ ")).then(pl.lit("unix"))
        .when(raw.str.starts_with("-- ")).then(pl.lit("banner"))
        .otherwise(pl.lit("3164")).alias("_fmt")
    )
    parsers = {"json": _json, "5424": _rfc5424, "3339": _rfc3339, "3164": _rfc3164_regex,
               "full": _short_full, "mono": _short_monotonic, "unix": _short_unix, "banner": _journal_banner}
    return pl.concat([parsers[fmt](part.drop("_fmt"), ctx) for (fmt,), part in kinds.group_by("_fmt")],
                     how="diagonal_relaxed")


def _journal_banner(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """journalctl's banner and boot lines (JOURNAL_BANNER) as its text; other lines unparsed."""
    banner = pl.col("raw").str.contains(JOURNAL_BANNER)
    return part.select("raw", "offset", pl.when(banner).then(pl.col("raw")).alias("message"),
                       pl.when(banner).then(pl.lit("journalctl")).alias("program"))


# NVIDIA's daemons name the GPU a line is about by its PCI address: source: NVIDIA/nvidia-persistenced
#   nvidia-persistenced.c (v3xx-v5xx): syslog(LOG_NOTICE, "device %s - registered", pci_info) and "device %s -
#   persistence mode enabled", "... disabled", "device %s - failed to open." (pci_info "%04x:%02x:%02x.%x").
GPU_DAEMONS = ["nvidia-persistenced"]


def _gpu_daemon_lines(df: pl.DataFrame) -> pl.DataFrame:
    """``gpu``: the GPU a GPU daemon's line names (GPU_DAEMONS), on those rows only."""
    if "program" not in df.columns:
        return df
    rows = df.select(pl.col("program").is_in(GPU_DAEMONS).fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    if "gpu" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("gpu"))
    fixed = df.select("message", "gpu").gather(rows).select(pl.coalesce(
        "gpu", pl.col("message").str.extract(BUS_ID, 0)).alias("gpu"))  # observe.pci's form made by finalize
    return scatter_rows(df, rows, fixed)


def _header(part: pl.DataFrame, pattern: str) -> pl.DataFrame:
    return part.with_columns(pl.col("raw").str.extract_groups(pattern).alias("_h")).unnest("_h")

def _common(g: pl.DataFrame, ts: pl.Expr, host: pl.Expr, severity: pl.Expr,
            attrs: pl.Expr | None = None) -> pl.DataFrame:
    return g.select(
        "raw", "offset", ts.alias("ts"), host.alias("node"), severity.alias("severity"),
        pl.col("tag").alias("program"), pl.col("pid").cast(pl.Int64, strict=False).alias("pid"),
        pl.col("msg").alias("message"), (attrs if attrs is not None else pl.lit(None, dtype=pl.String)).alias("attrs"),
    )

def _rfc3164_fast(part: pl.DataFrame) -> pl.DataFrame:
    """``Mmm dd hh:mm:ss host tag[pid]: msg`` (time already in ``_ts``) by fixed positions and
    splits, no regex captures."""
    raw = pl.col("raw")
    g = part.with_columns(
        raw.str.slice(16).str.splitn(" ", 2).struct.rename_fields(["host", "body"]).alias("_h")
    ).unnest("_h")
    hostless = pl.col("host").str.ends_with(":")  # ``Mar 01 10:00:00 sshd[1]: ...``: the word is the tag
    if g.select(hostless.any()).item():
        g = g.with_columns(pl.when(hostless).then(raw.str.slice(16)).otherwise(pl.col("body")).alias("body"),
                           pl.when(~hostless).then(pl.col("host")).alias("host"))
    tagged = pl.col("msg").is_not_null() & (pl.col("tagpart") != "") & ~pl.col("tagpart").str.contains(" ", literal=True)
    g = _tag_split(g).with_columns(tagged.alias("_tagged"))
    severity = pl.lit(None, dtype=pl.String)
    if not g.get_column("_tagged").all():  # a few lines: busybox's ``user.err`` before the tag?
        g = g.with_columns(pl.when(~pl.col("_tagged")).then(pl.col("body")).str.extract(r"^" + BUSYBOX_PRIO, 1).alias("_blvl"))
        if g.get_column("_blvl").null_count() < g.height:
            g = _tag_split(g.drop("tagpart", "msg").with_columns(
                pl.when(pl.col("_blvl").is_not_null()).then(pl.col("body").str.splitn(" ", 2).struct.field("field_1"))
                .otherwise(pl.col("body")).alias("body"))).with_columns(tagged.alias("_tagged"))
            severity = pl.col("_blvl").replace_strict(BUSYBOX_SEVERITY, default=None, return_dtype=pl.String)
    g = g.with_columns(
        pl.when(pl.col("_tagged")).then(pl.col("tagpart").str.splitn("[", 2)).alias("_p")
    ).unnest("_p")
    g = g.with_columns(
        pl.col("field_0").alias("tag"),
        pl.col("field_1").str.strip_suffix("]").alias("pid"),
        pl.when(pl.col("_tagged")).then(pl.col("msg")).otherwise(pl.col("body")).alias("msg"),
    )
    return _common(g, pl.col("_ts"), pl.col("host"), severity)


def _tag_split(g: pl.DataFrame) -> pl.DataFrame:
    return g.with_columns(
        pl.col("body").str.splitn(": ", 2).struct.rename_fields(["tagpart", "msg"]).alias("_t")
    ).unnest("_t")


def _rfc3164_regex(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """The general RFC 3164 shape: PRI, archive prefix, localized months, optional year."""
    g = split_header(part, RFC3164)
    year = pl.coalesce(pl.col("year"), pl.col("tb_date").str.slice(0, 4))
    ts = pl.coalesce(
        tp.yearless(pl.col("mon"), pl.col("day"), pl.col("clock"), ctx.reference(), ctx.tz, year=year),
        tp.yearless(pl.col("mon"), pl.col("day"), pl.col("clock"), ctx.reference(), ctx.tz),
    )
    host = pl.coalesce(pl.col("tb_node"), pl.col("host").str.extract(r"^([^/]+)", 1))
    ok = pl.col("msg").is_not_null() & tp.month_number(pl.col("mon")).is_not_null()  # else no header at all
    g = g.with_columns(pl.when(ok).then(pl.col(c)).alias(c) for c in ["msg", "tag", "pid", "host", "pri"])
    severity = pl.coalesce(severity_from_pri(pl.col("pri")),
                           pl.col("blvl").replace_strict(BUSYBOX_SEVERITY, default=None, return_dtype=pl.String))
    return _common(g, ts, host, severity)

def _rfc3339(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, RFC3339)
    return _common(g, tp.iso(pl.col("stamp"), ctx.tz), pl.col("host"), severity_from_pri(pl.col("pri")))

def _short_full(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """journalctl ``-o short-full``: the zone ``UTC`` or a numeric one is exact; an abbreviation
    (``CET``) names the local zone, which is ``ctx.tz``."""
    g = split_header(part, SHORT_FULL)
    zone = pl.col("zone")
    offset = pl.when(zone.is_in(["UTC", "GMT"])).then(pl.lit("Z")).when(zone.str.contains(r"^[+-]")).then(zone)
    stamp = pl.concat_str(pl.col("stamp"), offset.fill_null(""))
    return _common(g, tp.iso(stamp, ctx.tz), pl.col("host"), pl.lit(None, dtype=pl.String))

def _short_monotonic(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """journalctl ``-o short-monotonic`` / ``short-delta``: seconds since boot (a time given the
    boot time), kept in attrs.uptime (and attrs.delta) as the kernel collector keeps dmesg's."""
    g = split_header(part, SHORT_MONOTONIC)
    up = pl.col("up").cast(pl.Float64, strict=False)
    ts = tp.since_boot(up, ctx.boot_time or boot_copies.boot_time(g, up, pl.col("msg"), ctx.boot_copies))
    attrs = attrs_json([("uptime", pl.col("up")), ("delta", pl.col("delta"))])
    return _common(g, ts, pl.col("host"), pl.lit(None, dtype=pl.String), attrs)

def _short_unix(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = split_header(part, SHORT_UNIX)
    return _common(g, tp.epoch(pl.col("epoch")), pl.col("host"), pl.lit(None, dtype=pl.String))

def _rfc5424(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    g = part.with_columns(pl.col("raw").str.extract_groups(RFC5424).alias("_h")).unnest("_h").with_columns(
        _nil(pl.col("tag")).alias("tag"), _nil(pl.col("pid")).alias("pid"),
        pl.coalesce(pl.col("msg"), pl.when(pl.col("pri").is_not_null()).then(pl.lit(""))).alias("msg"),
    )
    return _common(g, tp.iso(pl.col("stamp")), _nil(pl.col("host")), severity_from_pri(pl.col("pri")))

# journalctl -o json, as systemd's own code prints a field (source: systemd/systemd src/shared/logs-show.c
#   (002951ce) update_json_data and output_json): a string when its value is printable UTF-8, else an array
#   of its bytes (json_variant_new_array_bytes); null when name and value reach JSON_THRESHOLD (4096 bytes)
#   and --all was not given; and a field an entry holds more than once (any sender may: ``MESSAGE=`` twice
#   in one datagram) an array of those values. The fields read here, and whether a value is anything but a
#   string (then the entry is decoded in Python: such entries are rare, and a user may send any of them).
JOURNAL_FIELDS = ("__REALTIME_TIMESTAMP", "_TRANSPORT", "_UID", "_HOSTNAME", "PRIORITY", "SYSLOG_IDENTIFIER", "_COMM",
                  "_PID", "SYSLOG_PID", "MESSAGE")
NOT_A_STRING = r'"(?:' + "|".join(JOURNAL_FIELDS) + r')"\s*:\s*[^\s"]'


def journal_value(value: object) -> str | None:
    """One journal field's text from its JSON value (see JOURNAL_FIELDS): bytes decoded (invalid
    UTF-8 replaced), several values one per line, an omitted one (null) None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        if value and all(isinstance(b, int) and 0 <= b < 256 for b in value):
            return bytes(value).decode("utf-8", "replace")
        texts = [t for t in (journal_value(v) if not isinstance(v, list) or _flat(v) else None for v in value) if t is not None]
        return "\n".join(texts) if texts else None
    return str(value) if isinstance(value, (int, float)) else None  # no form journald prints


def _flat(values: list) -> bool:
    return all(not isinstance(v, (list, dict)) for v in values)


def _journal_entry(raw: str) -> dict[str, str | None]:
    """The fields of one entry that holds a value other than a string; a line that is no JSON
    object gives none (the line is then unparsed)."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(entry, dict):
        return {}
    fields = {name: journal_value(entry.get(name)) for name in JOURNAL_FIELDS}
    # journald sets "_" fields itself, each once: anything else there is no statement of journald's
    fields.update({name: entry[name] if isinstance(entry.get(name), str) else None for name in ("_TRANSPORT", "_UID")})
    for one in ("SYSLOG_IDENTIFIER", "_COMM", "_PID", "SYSLOG_PID", "PRIORITY", "_HOSTNAME", "__REALTIME_TIMESTAMP"):
        fields[one] = (fields[one] or "").split("\n", 1)[0] or None  # several: the first
    fields["omitted"] = "MESSAGE" if "MESSAGE" in entry and entry["MESSAGE"] is None else None
    return fields


def _json(part: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    raw = pl.col("raw")
    odd = part.select(raw.str.contains(NOT_A_STRING).fill_null(False)).to_series().arg_true()
    fields = part.select(raw.str.json_path_match(f"$.{name}").alias(name) for name in JOURNAL_FIELDS)
    fields = fields.with_columns(pl.lit(None, dtype=pl.String).alias("omitted"))
    if len(odd):
        decoded = [_journal_entry(r) for r in part.get_column("raw").gather(odd)]
        fixed = pl.DataFrame({name: [d.get(name) for d in decoded] for name in fields.columns},
                             schema={name: pl.String for name in fields.columns})
        fields = scatter_rows(fields, odd, fixed)
    f = pl.col
    usec = f("__REALTIME_TIMESTAMP").cast(pl.Int64, strict=False)
    ts = pl.from_epoch(usec, time_unit="us").dt.replace_time_zone("UTC")
    # journald sets the fields that start with "_" itself; SYSLOG_IDENTIFIER is whatever the sender
    # said (``logger -t kernel``): only the kernel transport makes a kernel line, only a system
    # account's entry a Slurm daemon's
    kernel = (f("_TRANSPORT") == "kernel").fill_null(False)
    system = (f("_UID").cast(pl.Int64, strict=False) <= provenance.policy()["system_uid_max"]).fill_null(False)
    route = pl.when(kernel).then(pl.lit("journal_kernel")).when(system).then(pl.lit("journal_system")) \
        .otherwise(pl.lit("journal_user"))
    tag = pl.when(kernel).then(pl.lit("kernel")).otherwise(pl.coalesce(f("SYSLOG_IDENTIFIER"), f("_COMM")))
    entry = f("__REALTIME_TIMESTAMP").is_not_null()
    message = pl.when(f("omitted").is_not_null()).then(pl.lit("")).otherwise(f("MESSAGE"))
    return pl.concat([part.select("raw", "offset"), fields], how="horizontal").select(
        "raw", "offset", ts.alias("ts"), f("_HOSTNAME").alias("node"),
        severity_from_pri(f("PRIORITY")).alias("severity"), tag.alias("program"),
        pl.coalesce(f("_PID"), f("SYSLOG_PID")).cast(pl.Int64, strict=False).alias("pid"),
        pl.when(entry).then(message).alias("message"), attrs_json([("omitted", f("omitted"))]).alias("attrs"),
        pl.when(entry).then(route).alias("route"),
    )
