"""Every header form syslog daemons, journalctl and dmesg print, rendered from the emitter's own format
(the ``# source:`` comments in collectors/syslog.py and observe/timeparse.py cite them), through the
real collectors: ts, node, program, pid and message must come out right, and no node is made up
from a message word."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from conftest import parse_file

from observe.collector import Context, detect

REF = datetime(2024, 6, 1, 12, tzinfo=UTC)  # the year of year-less stamps
BOOT = datetime(2024, 3, 1, 9, tzinfo=UTC)


def _rows(tmp_path: Path, lines: list[str], collector: str = "syslog", **ctx: object) -> list[dict]:
    path = tmp_path / "input.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return parse_file(path, collector, Context(**{"reference_time": REF, **ctx})).to_dicts()  # type: ignore[arg-type]


def _fields(row: dict) -> tuple:
    return row["ts"], row["node"], row["program"], row["pid"], row["message"]


def _at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# rsyslog RSYSLOG_TraditionalFileFormat "%TIMESTAMP% %HOSTNAME% %syslogtag%%msg%" (tools/smtradfile.c),
# TIMESTAMP by runtime/datetime.c formatTimestamp3164 "%s %2d %2.2d:%2.2d:%2.2d"
def test_rsyslog_traditional_file_format(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Mar  1 10:00:00 node01 sshd[1327]: Accepted publickey for root",
                            "Mar 11 23:59:59 node01 sshd[1327]: Disconnected"])
    assert _fields(rows[0]) == (_at(2024, 3, 1, 10), "node01", "sshd", 1327, "Accepted publickey for root")
    assert _fields(rows[1]) == (_at(2024, 3, 11, 23, 59, 59), "node01", "sshd", 1327, "Disconnected")


@pytest.mark.parametrize(("tag", "program", "pid"), [
    ("/apps/x/gmetad[1682]:", "/apps/x/gmetad", 1682),  # a path
    ("sshd(pam_unix)[1327]:", "sshd(pam_unix)", 1327),  # a parenthesised part
    ("org.gnome.Shell.desktop[2345]:", "org.gnome.Shell.desktop", 2345),  # dots
    ("systemd-logind[977]:", "systemd-logind", 977),
    ("CRON:", "CRON", None),  # no pid
])
def test_rfc3164_tag_shapes(tmp_path: Path, tag: str, program: str, pid: int | None) -> None:
    for line in [f"Mar  1 10:00:00 node01 {tag} the message", f"Mär  1 10:00:00 node01 {tag} the message"]:
        (row,) = _rows(tmp_path, [line])  # the fast path and the regex path (localized month)
        assert _fields(row) == (_at(2024, 3, 1, 10), "node01", program, pid, "the message"), line


def test_rfc3164_kernel_tag_with_uptime(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, ["Apr 29 19:24:11 EVE kernel: [  123.456789] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."])
    assert _fields(row) == (_at(2024, 4, 29, 19, 24, 11), "EVE", "kernel", None,
                            "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
    assert row["source"] == "kernel" and '"uptime":"123.456789"' in row["attrs"]


# RSYSLOG_TraditionalForwardFormat "<%PRI%>%TIMESTAMP% %HOSTNAME% %syslogtag:1:32%%msg%" (runtime/rsconf.c)
def test_rsyslog_traditional_forward_format(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, ["<27>Mar  1 10:00:00 node01 slurmd[4242]: error: Node configuration differs"])
    assert _fields(row) == (_at(2024, 3, 1, 10), "node01", "slurmd", 4242, "error: Node configuration differs")
    assert row["severity"] == "err"


# RSYSLOG_FileFormat "%TIMESTAMP:::date-rfc3339% %HOSTNAME% %syslogtag%..." (tools/smfile.c)
def test_rsyslog_file_format(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, ["2024-03-01T10:00:00.123456+01:00 node01 sshd[1327]: Accepted publickey"])
    assert _fields(row) == (_at(2024, 3, 1, 9, 0, 0, 123456), "node01", "sshd", 1327, "Accepted publickey")


# RSYSLOG_ForwardFormat "<%PRI%>%TIMESTAMP:::date-rfc3339% %HOSTNAME% %syslogtag:1:32%%msg%" (runtime/rsconf.c)
def test_rsyslog_forward_format(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, ["<30>2024-03-01T10:00:00.123456-05:00 node01 nvidia-persistenced[812]: started"])
    assert _fields(row) == (_at(2024, 3, 1, 15, 0, 0, 123456), "node01", "nvidia-persistenced", 812, "started")
    assert row["severity"] == "info"


# syslog-ng lib/logwriter.c log_writer_format_log, file destination without template: BSD stamp
# (day zero-padded), HOST, "PROGRAM[PID]: " (nothing when there is no program), MESSAGE
def test_syslog_ng_default_file_format(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Mar 01 10:00:00 node01 ntpd[1001]: synchronized to 10.0.0.1",
                            "Mar 01 10:00:01 node01 -- MARK --"])
    assert _fields(rows[0]) == (_at(2024, 3, 1, 10), "node01", "ntpd", 1001, "synchronized to 10.0.0.1")
    assert _fields(rows[1]) == (_at(2024, 3, 1, 10, 0, 1), "node01", None, None, "-- MARK --")


# RFC 5424 section 6; rsyslog RSYSLOG_SyslogProtocol23Format
# "<%PRI%>1 %TIMESTAMP:::date-rfc3339% %HOSTNAME% %APP-NAME% %PROCID% %MSGID% %STRUCTURED-DATA% %msg%"
def test_rfc5424(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "<34>1 2024-03-01T10:00:00.123+01:00 host app 123 ID47 - msg",
        '<165>1 2024-03-01T09:00:00Z node01 evntslog - ID47 [exampleSDID@32473 iut="3"] \ufeffAn application event',
        "<13>1 2024-03-01T09:00:00Z - - - - -",
    ])
    assert _fields(rows[0]) == (_at(2024, 3, 1, 9, 0, 0, 123000), "host", "app", 123, "msg")
    assert rows[0]["severity"] == "crit"
    assert _fields(rows[1]) == (_at(2024, 3, 1, 9), "node01", "evntslog", None, "An application event")
    assert _fields(rows[2]) == (_at(2024, 3, 1, 9), None, None, None, "")


# systemd src/shared/logs-show.c: -o short strftime("%b %d %H:%M:%S"), -o short-precise + ".%06"
def test_journalctl_short_and_short_precise(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Mar 05 10:00:00 node01 systemd[1]: Started Session 3 of user root.",
                            "Mar 05 10:00:00.123456 node01 systemd[1]: Started Session 4 of user root."])
    assert _fields(rows[0]) == (_at(2024, 3, 5, 10), "node01", "systemd", 1, "Started Session 3 of user root.")
    assert _fields(rows[1]) == (_at(2024, 3, 5, 10, 0, 0, 123456), "node01", "systemd", 1, "Started Session 4 of user root.")


# glibc localedata/locales/<xx_YY> LC_TIME abmon (glibc 2.36): what %b prints under each locale
ABMON = {
    "de_DE": "Jan Feb Mär Apr Mai Jun Jul Aug Sep Okt Nov Dez",
    "de_AT": "Jän Feb Mär Apr Mai Jun Jul Aug Sep Okt Nov Dez",
    "fr_FR": "janv. févr. mars avril mai juin juil. août sept. oct. nov. déc.",
    "fr_CA": "jan fév mar avr mai jun jui aoû sep oct nov déc",
    "es_ES": "ene feb mar abr may jun jul ago sep oct nov dic",
    "it_IT": "gen feb mar apr mag giu lug ago set ott nov dic",
    "pt_BR": "jan fev mar abr mai jun jul ago set out nov dez",
    "nl_NL": "jan feb mrt apr mei jun jul aug sep okt nov dec",
    "pl_PL": "sty lut mar kwi maj cze lip sie wrz paź lis gru",
    "cs_CZ": "led úno bře dub kvě čen čec srp zář říj lis pro",
    "sk_SK": "jan feb mar apr máj jún júl aug sep okt nov dec",
    "hu_HU": "jan febr márc ápr máj jún júl aug szept okt nov dec",
    "ro_RO": "ian feb mar apr mai iun iul aug sep oct nov dec",
    "sv_SE": "jan feb mar apr maj jun jul aug sep okt nov dec",
    "nb_NO": "jan. feb. mars april mai juni juli aug. sep. okt. nov. des.",
    "fi_FI": "tammi helmi maalis huhti touko kesä heinä elo syys loka marras joulu",
    "tr_TR": "Oca Şub Mar Nis May Haz Tem Ağu Eyl Eki Kas Ara",
    "ru_RU": "янв фев мар апр мая июн июл авг сен окт ноя дек",
    "uk_UA": "січ лют бер кві тра чер лип сер вер жов лис гру",
    "el_GR": "Ιαν Φεβ Μαρ Απρ Μαΐ Ιουν Ιουλ Αυγ Σεπ Οκτ Νοε Δεκ",
    "zh_CN": "1月 2月 3月 4月 5月 6月 7月 8月 9月 10月 11月 12月",
    "ja_JP": "_1月 _2月 _3月 _4月 _5月 _6月 _7月 _8月 _9月 10月 11月 12月",  # "_": glibc's leading space
    "ko_KR": "_1월 _2월 _3월 _4월 _5월 _6월 _7월 _8월 _9월 10월 11월 12월",
}


@pytest.mark.parametrize("locale", sorted(ABMON))
def test_journalctl_short_under_locales(tmp_path: Path, locale: str) -> None:
    names = [n.replace("_", " ") for n in ABMON[locale].split()]
    lines = [f"{name} {month:02d} 10:00:00 node01 sshd[{month}]: month {month}" for month, name in enumerate(names, 1)]
    lines += [f"{names[2]} 05 10:00:00 sshd[99]: no hostname"]  # journalctl --no-hostname
    rows = _rows(tmp_path, lines, reference_time=datetime(2024, 12, 31, tzinfo=UTC))
    for month, row in enumerate(rows[:12], 1):
        assert _fields(row) == (_at(2024, month, month, 10), "node01", "sshd", month, f"month {month}"), (locale, row["raw"])
    assert _fields(rows[12]) == (_at(2024, 3, 5, 10), None, "sshd", 99, "no hostname")


# logs-show.c: -o short-iso strftime("%Y-%m-%dT%H:%M:%S") + "%+03d:%02d", -o short-iso-precise ".%06" before it
def test_journalctl_short_iso_and_precise(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["2024-03-01T10:00:00+01:00 node01 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
                            "2024-03-01T10:00:00.000042+01:00 node01 nv-fabricmanager[2001]: Connected"])
    assert _fields(rows[0]) == (_at(2024, 3, 1, 9), "node01", "kernel", None, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module")
    assert _fields(rows[1]) == (_at(2024, 3, 1, 9, 0, 0, 42), "node01", "nv-fabricmanager", 2001, "Connected")


# logs-show.c -o short-full: format_timestamp (src/basic/time-util.c): English weekday, " %Y-%m-%d %H:%M:%S",
# " UTC" or " " tm_zone
def test_journalctl_short_full(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Fri 2024-03-01 10:00:00 CET node01 sshd[1327]: Accepted publickey",
                            "Fri 2024-03-01 09:00:00 UTC node01 sshd[1327]: Accepted publickey",
                            "Fri 2024-03-01 12:00:00 +03 node01 sshd[1327]: Accepted publickey",
                            "Fri 2024-03-01 10:00:00 CET sshd[1327]: Accepted publickey"],
                 tz="Europe/Berlin")
    for row in rows[:3]:
        assert _fields(row) == (_at(2024, 3, 1, 9), "node01", "sshd", 1327, "Accepted publickey"), row["raw"]
    assert _fields(rows[3]) == (_at(2024, 3, 1, 9), None, "sshd", 1327, "Accepted publickey")


# logs-show.c output_timestamp_monotonic: "[%5llu.%06llu]", -o short-delta " <%5llu.%06llu%s>" inside
def test_journalctl_short_monotonic_and_delta(tmp_path: Path) -> None:
    lines = ["[  123.456789] node01 sshd[1327]: Accepted publickey",
             "[  123.456900 <    0.000111 >] node01 kernel: NVRM: GPU at PCI:0000:01:00: GPU-uuid",
             "[  124.000000] sshd[1327]: no hostname"]
    rows = _rows(tmp_path, lines, boot_time=BOOT)
    up = BOOT + timedelta(seconds=123, microseconds=456789)
    assert _fields(rows[0]) == (up, "node01", "sshd", 1327, "Accepted publickey")
    assert _fields(rows[1]) == (up + timedelta(microseconds=111), "node01", "kernel", None, "NVRM: GPU at PCI:0000:01:00: GPU-uuid")
    assert '"delta":"0.000111"' in rows[1]["attrs"] and rows[1]["source"] == "kernel"
    assert _fields(rows[2]) == (BOOT + timedelta(seconds=124), None, "sshd", 1327, "no hostname")
    unknown_boot = _rows(tmp_path, lines[:1])[0]
    assert unknown_boot["ts"] is None and '"uptime":"123.456789"' in unknown_boot["attrs"]


def test_journalctl_short_monotonic_in_the_kernel_collector(tmp_path: Path) -> None:
    """The kernel collector hands the lines that match the syslog sniff to the syslog parser: a
    short-monotonic line with a host and a ``tag[pid]:`` is one; a dmesg line (``usb 1-1:``) is not."""
    rows = _rows(tmp_path, ["[  123.456789] node01 sshd[1327]: Accepted publickey",
                            "[    5.123456] usb 1-1: new high-speed USB device number 2 using xhci_hcd"],
                 collector="kernel", boot_time=BOOT)
    assert _fields(rows[0]) == (BOOT + timedelta(seconds=123, microseconds=456789), "node01", "sshd", 1327, "Accepted publickey")
    assert _fields(rows[1]) == (BOOT + timedelta(seconds=5, microseconds=123456), None, "kernel", None,
                                "usb 1-1: new high-speed USB device number 2 using xhci_hcd")


# logs-show.c -o short-unix: "%10"PRI_TIME".%06"PRIu64
def test_journalctl_short_unix(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["1709283600.123456 node01 sshd[1327]: Accepted publickey",
                            "1709283600.000001 kernel: NVRM: no hostname"])
    assert _fields(rows[0]) == (_at(2024, 3, 1, 9, 0, 0, 123456), "node01", "sshd", 1327, "Accepted publickey")
    assert _fields(rows[1]) == (_at(2024, 3, 1, 9, 0, 0, 1), None, "kernel", None, "NVRM: no hostname")


def test_hostless_lines_make_no_node(tmp_path: Path) -> None:
    """A stamp followed by the tag (rsyslog's parser: a word ending with ``:`` is no host name)."""
    rows = _rows(tmp_path, ["Mar  1 10:00:00 kernel: usb 1-1: new high-speed USB device",
                            "Mar  1 10:00:00 sshd[1327]: Accepted publickey",
                            "2024-03-01T10:00:00Z sshd[1327]: Accepted publickey",
                            "<13>Mar  1 10:00:00 logger: hello"], node=None)
    assert _fields(rows[0]) == (_at(2024, 3, 1, 10), None, "kernel", None, "usb 1-1: new high-speed USB device")
    assert _fields(rows[1]) == (_at(2024, 3, 1, 10), None, "sshd", 1327, "Accepted publickey")
    assert _fields(rows[2]) == (_at(2024, 3, 1, 10), None, "sshd", 1327, "Accepted publickey")
    assert _fields(rows[3]) == (_at(2024, 3, 1, 10), None, "logger", None, "hello")
    given = _rows(tmp_path, ["Mar  1 10:00:00 sshd[1327]: Accepted publickey"], node="gpu7")[0]
    assert given["node"] == "gpu7"  # the node the context names


# systemd journalctl.c: "-- Logs begin at %s, end at %s. --" (to v245), "-- Journal begins at %s, ends at %s. --" (v246+),
# "-- No entries --", "-- Reboot --" and "-- Boot %s --" (v255+) between the entries: journalctl's text, not unparsed
def test_journalctl_banner_lines_are_its_text(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["-- Logs begin at Wed 2015-12-02 22:53:58 IST, end at Tue 2016-09-20 17:46:04 IST. --",
                            "Mar  1 10:00:00 node01 sshd[1327]: Accepted publickey for root",
                            "-- Reboot --", "-- Boot 0123456789abcdef0123456789abcdef --", "-- No entries --",
                            "-- not a banner"])
    assert [(r["kind"], r["program"]) for r in rows] == [
        ("log", "journalctl"), ("log", "sshd"), ("log", "journalctl"), ("log", "journalctl"), ("log", "journalctl"),
        ("unparsed", None)]


def test_lines_without_a_header_are_unparsed(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Mar  1 10:00:00 node01 sshd[1]: first", "a line without any header",
                            "Foo 99 10:00:00 not a month either"])
    for row in rows[1:]:
        assert row["kind"] == "unparsed" and row["ts"] is None and row["node"] is None and row["program"] is None
        assert row["message"] == row["raw"]


@pytest.mark.parametrize("line", [
    "Mär 01 10:00:00 node01 sshd[1]: x", " 3月 05 10:00:00 node01 sshd[1]: x", "janv. 05 10:00:00 node01 sshd[1]: x",
    "Fri 2024-03-01 10:00:00 CET node01 sshd[1]: x", "1709283600.123456 node01 sshd[1]: x",
    "2024-03-01T10:00:00+01:00 sshd[1]: x", "<34>1 2024-03-01T10:00:00.123+01:00 host app 123 ID47 - msg",
])
def test_auto_detection_picks_syslog(line: str) -> None:
    collector, score = detect([line] * 3)
    assert collector is not None and collector.name == "syslog" and score == 1.0, line


# util-linux sys-utils/dmesg.c print_record: "[%5ld.%06ld] " (default), "[%s] " record_ctime
# "%a %b %e %H:%M:%S %Y" (-T), iso_8601_time ISO_TIMESTAMP_COMMA_T (--time-format iso), "%-6s:%-6s: "
# facility:level before the stamp (-x), raw "<%d>[%5ld.%06ld] " (-r), reltime "[  %+8.06f] " deltas (-H)
@pytest.mark.parametrize(("line", "ts", "attr"), [
    ("[  123.456789] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", BOOT + timedelta(seconds=123.456789), '"uptime"'),
    ("[Fri Mar  1 10:00:00 2024] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", _at(2024, 3, 1, 10), None),
    ("2024-03-01T10:00:00,123456+01:00 NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", _at(2024, 3, 1, 9, 0, 0, 123456), None),
    ("kern  :err   : [  123.456789] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", BOOT + timedelta(seconds=123.456789), '"facility":"kern"'),
    ("<3>[  123.456789] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", BOOT + timedelta(seconds=123.456789), '"uptime"'),
    ("[  +0.000012] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", None, '"delta":"0.000012"'),
])
def test_dmesg_forms(tmp_path: Path, line: str, ts: datetime | None, attr: str | None) -> None:
    (row,) = _rows(tmp_path, [line], collector="kernel", boot_time=BOOT)
    assert _fields(row) == (ts, None, "kernel", None, "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
    assert row["kind"] == "gpu_xid"
    assert attr is None or attr in row["attrs"]


# util-linux sys-utils/dmesg.c: -H/--reltime's once-a-minute "[%b%e %H:%M] " (short_ctime), -d's
# "[%5ld.%06ld <%12.06f>] ", and the kernel's caller id "[    T1] " (CONFIG_PRINTK_CALLER) after the stamp
@pytest.mark.parametrize("line", [
    "[Mar 1 10:00] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
    "[Mar10 10:00] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
    "[  123.456789 <    0.000012>] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
    "[  123.456789] [    T1] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
])
def test_dmesg_reltime_delta_and_caller_id_forms(tmp_path: Path, line: str) -> None:
    (row,) = _rows(tmp_path, [line], collector="kernel", boot_time=BOOT)
    assert row["ts"] is not None and row["message"] == "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."


# A host before each dmesg line, from the tool that gathered them: talosctl dmesg (cmd/talosctl/cmd/talos/
# dmesg.go fmt.Printf("%s: %s", node, data.Bytes)) around machined's "%s: %7s: [%s]: %s" (facility, level,
# RFC3339Nano time, message), and pdsh's labels (src/pdsh/dsh.c out("%S: %s", a->host, buf)).
XID79 = "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."


@pytest.mark.parametrize(("line", "node", "ts", "attr"), [
    (f"192.168.11.119: kern: warning: [2024-03-01T10:00:00.599488292Z]: {XID79}", "192.168.11.119",
     _at(2024, 3, 1, 10, 0, 0, 599488), '"facility":"kern"'),
    (f"172.20.1.2: kern:    info: [2021-11-10T10:09:37.662764956Z]: {XID79}", "172.20.1.2",
     _at(2021, 11, 10, 10, 9, 37, 662764), '"facility":"kern"'),
    (f"kern: warning: [2024-03-01T10:00:00.5Z]: {XID79}", None, _at(2024, 3, 1, 10, 0, 0, 500000), '"facility":"kern"'),
    (f"b1360: [  123.456789] {XID79}", "b1360", BOOT + timedelta(seconds=123.456789), '"uptime":"123.456789"'),
    (f"gpu01: [Fri Mar  1 10:00:00 2024] {XID79}", "gpu01", _at(2024, 3, 1, 10), None),
])
def test_dmesg_gathered_from_nodes(tmp_path: Path, line: str, node: str | None, ts: datetime, attr: str | None) -> None:
    (row,) = _rows(tmp_path, [line], collector="kernel", boot_time=BOOT)
    assert _fields(row) == (ts, node, "kernel", None, XID79)
    assert row["kind"] == "gpu_xid"
    assert attr is None or attr in row["attrs"]


def test_a_word_before_a_colon_is_no_host_without_a_dmesg_stamp(tmp_path: Path) -> None:
    line = "mlx5_core: probe of 0000:03:00.0 failed with error -22"
    (row,) = _rows(tmp_path, [line], collector="kernel", boot_time=BOOT)
    assert row["node"] is None and row["message"] == line


def test_kernel_tag_left_before_the_text(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, [f"kernel: {XID79}"], collector="kernel", boot_time=BOOT)
    assert row["message"] == XID79 and row["kind"] == "gpu_xid"


# busybox syslogd timestamp_and_log: sprintf(printbuf, "%s %.64s %s %s\n", timestamp, hostname, res, msg),
# res = parse_fac_prio_20(pri) "<facility>.<level>" by name
def test_busybox_syslogd_facility_level(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Sep 13 14:34:10 ccgx user.err kernel: [43500.179242] INFO: task dbus:1339 blocked for more than 120 seconds.",
                            "Sep 13 14:34:10 ccgx daemon.warn sshd[812]: Connection reset by peer"], "kernel")
    assert _fields(rows[0]) == (_at(2023, 9, 13, 14, 34, 10), "ccgx", "kernel", 1339,
                                "INFO: task dbus:1339 blocked for more than 120 seconds.")
    assert rows[0]["severity"] == "err" and '"uptime":"43500.179242"' in rows[0]["attrs"]
    assert rows[0]["kind"] == "hung_task" and rows[0]["pid"] == 1339
    assert _fields(rows[1])[1:] == ("ccgx", "sshd", 812, "Connection reset by peer") and rows[1]["severity"] == "warning"


# rsyslog template_WallFmt "\r\n\7Message from syslogd@%HOSTNAME% at %timegenerated% ...\r\n %syslogtag%%msg%\n\r":
# the console broadcast's text line is " kernel:" + the message, no space between
@pytest.mark.parametrize(("line", "uptime"), [
    (" kernel:[55716.328117] watchdog: BUG: soft lockup - CPU#0 stuck for 27s! [node:1984]", "55716.328117"),
    ("kernel:[  964.133943] watchdog: BUG: soft lockup - CPU#2 stuck for 22s! [Xorg:1104]", "964.133943"),
    ("kernel:watchdog: BUG: soft lockup - CPU#2 stuck for 22s! [Xorg:1104]", None),
])
def test_rsyslog_wall_message_kernel_tag(tmp_path: Path, line: str, uptime: str | None) -> None:
    (row,) = _rows(tmp_path, [line], "kernel")
    assert row["message"].startswith("watchdog: BUG: soft lockup") and row["program"] == "kernel"
    assert row["kind"] == "soft_lockup" and row["attrs"] is not None
    assert (f'"uptime":"{uptime}"' in row["attrs"]) == (uptime is not None)


# A dmesg stamp starts a printk record whatever the indentation of its text (the hung-task report's
# "      Tainted:" line, call-trace lines); a pasted, indented line with a dev_printk prefix is a record too
def test_indented_kernel_lines_with_a_header_are_records(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["[26825.855448] INFO: task ntpd:11794 blocked for more than 120 seconds.",
                            "[26825.860651]       Tainted: G        W   E     4.19.0-6-amd64 #1 Debian 4.19.67-2+deb10u2",
                            "[34315.154331]  __schedule+0x282/0x870",
                            "     pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e5(Receiver ID)",
                            "     pcieport 0000:00:1c.5:   device [8086:9d15] error status/mask=00000001/00002000"], "kernel")
    assert [r["message"] for r in rows] == [
        "INFO: task ntpd:11794 blocked for more than 120 seconds.",
        "      Tainted: G        W   E     4.19.0-6-amd64 #1 Debian 4.19.67-2+deb10u2",
        " __schedule+0x282/0x870",
        "     pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e5(Receiver ID)",
        "     pcieport 0000:00:1c.5:   device [8086:9d15] error status/mask=00000001/00002000"]
    assert rows[3]["kind"] == "pcie_aer" and '"pci":"0000:00:1c.5"' in rows[3]["attrs"]
    assert '"pci":"0000:00:1c.5"' in rows[4]["attrs"]


# open-mpi/ompi orte/mca/iof/base/iof_base_output.c "[%s,%s]<%s>:" (jobid, vpid, stream), a collector's ISO stamp
# before it; horovodrun '{time}[{rank}]<{prefix}>:'; ray print_worker_logs "({actor} pid={pid}) "
def test_launcher_prefixes_are_header(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "2019-06-02T16:13:44.884Z: [1,12]<stdout>:node-57:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
        "2019-06-02T16:13:44.884Z: [1,12]<stdout>:",
        "[1,3]<stderr>:node-2:900:901 [3] NCCL INFO comm 0x7f0a8834b870 rank 3 nranks 4",
        "Sun Jun  2 16:13:44 2019[5]<stdout>:Epoch 1 done",
        "[36m(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 1] Timeout at NCCL work: 158046, "
        "last enqueued NCCL work: 158046, last completed NCCL work: 158045.",
        "(pid=77, ip=10.0.0.2) hello"], "nccl")
    got = [(r["rank"], r["pid"], r["node"], r["kind"], r["message"]) for r in rows]
    assert got[0] == (12, 815, "node-57", "nccl_net_error",
                      "transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error")
    assert rows[0]["ts"] == _at(2019, 6, 2, 16, 13, 44).replace(microsecond=884000)
    assert got[1][0] == 12 and got[1][4] == ""
    assert got[2][:4] == (3, 900, "node-2", "nccl_comm_init")
    assert got[3][0] == 5 and got[3][4] == "Epoch 1 done" and rows[3]["ts"] == _at(2019, 6, 2, 16, 13, 44)
    assert got[4][:2] == (1, 4009) and got[4][3] == "nccl_watchdog"
    assert got[5][1] == 77 and got[5][4] == "hello"


# openpmix src/common/pmix_iof.c (Open MPI 5): "[%s,%s]<%s>: " with the jobid or the whole nspace, "[%s,%s][%s:%s]<%s>: "
# (host and pid too), "[%s]" ctime before it; skypilot sky/skylet/executor/slurm.py "({node_name}, rank={rank}, pid={pid})"
# (a node's rank, not taken); pdsh dsh.c "%S: %s" (the host) before an NCCL line
def test_more_launcher_prefixes_are_header(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "[prterun-gpu01-1234@1,5]<stdout>: gpu01:11:12 [5] NCCL INFO Connected all rings",
        "[1,3][gpu07:4242]<stderr>: RuntimeError: boom",
        "[Mon Mar  3 12:00:01 2025][1,2]<stdout>: hello",
        "(worker1, rank=1, pid=2402, ip=10.0.0.2) gpu02:55:66 [0] NCCL INFO Bootstrap : Using eth0",
        "worker-3: gpu03:77:78 [1] NCCL INFO Channel 00/02 : 0 1",
        "[1,mpirank:3,algo-2]<stderr>:INFO:root:Reducer buckets have been rebuilt in this iteration.",
    ], "nccl")
    got = [(r["rank"], r["pid"], r["node"], r["message"]) for r in rows]
    assert got[0] == (5, 11, "gpu01", "NCCL INFO Connected all rings")
    assert got[1] == (3, 4242, "gpu07", "RuntimeError: boom")
    assert got[2] == (2, None, None, "hello") and rows[2]["ts"] == _at(2025, 3, 3, 12, 0, 1)
    assert got[3] == (None, 55, "gpu02", "NCCL INFO Bootstrap : Using eth0")
    assert got[4] == (None, 77, "gpu03", "NCCL INFO Channel 00/02 : 0 1")
    assert got[5] == (3, None, "algo-2", "Reducer buckets have been rebuilt in this iteration.")


# docker compose logs.go "%-*s | ", kubectl logs --prefix "[pod/%s/%s] ", --timestamps' RFC 3339 time; torch elastic
# TailLog f"[{name}{local_rank}]:" for any role name; srun --label "%*d: "
def test_runtime_prefixes_and_role_labels(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "trainer-1  | gpu01:11:12 [0] NCCL INFO Bootstrap : Using eth0",
        "[pod/job-worker-0/pytorch] 2024-01-02T03:04:05.123456789Z gpu02:21:22 [1] NCCL INFO Init",
        "[trainer3]:gpu03:31:32 [3] NCCL INFO Connected all rings",
        " 12: gpu04:41:42 [2] NCCL INFO Connected all trees",
        "[trainer3]:[E ProcessGroupNCCL.cpp:1182] [Rank 3] boom",
    ], "nccl")
    got = [(r["rank"], r["pid"], r["node"], r["message"]) for r in rows]
    assert got[0] == (None, 11, "gpu01", "NCCL INFO Bootstrap : Using eth0")
    assert got[1] == (None, 21, "gpu02", "NCCL INFO Init")
    assert rows[1]["ts"] == _at(2024, 1, 2, 3, 4, 5).replace(microsecond=123456)
    assert got[2] == (3, 31, "gpu03", "NCCL INFO Connected all rings")
    assert got[3] == (12, 41, "gpu04", "NCCL INFO Connected all trees")
    assert got[4] == (3, None, None, "[ProcessGroupNCCL.cpp:1182] [Rank 3] boom")


# nccl src/debug.cc: 2.26+ "[%F %T] " (NCCL_DEBUG_TIMESTAMP_FORMAT's default, on WARN lines) before the header,
# "[%d] %s:%d (%s) NCCL WARN " (the function), "NCCL CALL " with no device
def test_nccl_timestamp_function_and_call_forms(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "[2025-03-01 12:34:56] gpu01:1234:1290 [3] transport/net_ib.cc:1696 (ncclIbIsend) NCCL WARN NET/IB : Got completion from peer 10.1.4.1<43521> with status=12",
        "gpu01:1234:1234 NCCL CALL ncclCommInitRank(0x1,8,0x2,3)",
    ], "nccl")
    assert (rows[0]["ts"], rows[0]["node"], rows[0]["pid"], rows[0]["gpu"]) == (_at(2025, 3, 1, 12, 34, 56), "gpu01", 1234, "3")
    assert rows[0]["message"].startswith("transport/net_ib.cc:1696 (ncclIbIsend) NCCL WARN")
    assert (rows[1]["node"], rows[1]["pid"], rows[1]["severity"], rows[1]["message"]) == (
        "gpu01", 1234, "debug", "NCCL CALL ncclCommInitRank(0x1,8,0x2,3)")


# The rank a message states: c10d logPrefix "[PG ID %d PG GUID %s(%s) Rank %d] ", NCCL init.cc "comm %p rank %d nRanks %d
# ...", Lightning rank_zero.py "[rank: {rank}] {message}"
def test_a_rank_the_message_states(tmp_path: Path) -> None:
    rows = _rows(tmp_path, [
        "gpu01:1234:1290 [3] NCCL INFO comm 0x5f5e rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        "[E ProcessGroupNCCL.cpp:1182] [PG ID 0 PG GUID 0(default_pg) Rank 6] Process group watchdog thread terminated",
        "[2024-01-01 00:00:00,000][__main__][INFO] - [rank: 2] Instantiating model",
        "[rank1]:[E ProcessGroupNCCL.cpp:1182] [Rank 1] label and text agree",
        "nothing about ranks here",
    ], "nccl")
    assert [r["rank"] for r in rows] == [3, 6, 2, 1, None]


# slurm src/common/log.c "[%M] ": LogTimeFormat short "%b %d %T", thread_id "%.15s.%-6d %5d %-*s %p", clock a number
@pytest.mark.parametrize(("line", "ts"), [
    ("[Mar 03 12:00:01] error: Nodes gpu01 not responding", _at(2024, 3, 3, 12, 0, 1)),
    ("[Mar  3 12:00:01.123456  4242 rpcmgr       0x7f1234567890] error: Nodes gpu01 not responding",
     _at(2024, 3, 3, 12, 0, 1).replace(microsecond=123456)),
    ("[1234567] error: Nodes gpu01 not responding", None),
])
def test_slurm_log_time_formats(tmp_path: Path, line: str, ts: datetime | None) -> None:
    (row,) = _rows(tmp_path, [line], "slurm")
    assert (row["ts"], row["kind"], row["node"], row["message"]) == (
        ts, "slurm_node_not_responding", "gpu01", "error: Nodes gpu01 not responding")


# nvidia-persistenced.c syslog "device %s - registered" (pci_info "%04x:%02x:%02x.%x"); the nvidia driver's own
# dev_printk "nvidia 0000:3b:00.0: ..." (drivers/base/core.c "%s %s: " driver and device): the GPU the line names
def test_the_gpu_an_nvidia_daemon_or_the_driver_names(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["May 31 05:33:40 kino1 nvidia-persistenced[19176]: device 0000:3D:00.0 - registered",
                            "May 31 05:33:41 kino1 kernel: nvidia 0000:3b:00.0: enabling device (0000 -> 0003)",
                            "May 31 05:33:42 kino1 kernel: mlx5_core 0000:5e:00.0: firmware version: 28.39.1002",
                            "May 31 05:33:43 kino1 sshd[1]: device 0000:3d:00.0 is not a GPU daemon's"])
    assert [r["gpu"] for r in rows] == ["0000:3d:00", "0000:3b:00", None, None]


# pytorch torch/_dynamo/logging.py TORCH_COMPILE_FORMATTER "[%(asctime)s] %(name)s: [%(levelname)s] %(message)s"
def test_torch_compile_formatter_name_and_level_are_header(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, ["[2024-05-08 08:47:31,261] torch.distributed.elastic.multiprocessing.api: [WARNING] "
                              "Sending process 5938 closing signal SIGTERM"], "nccl")
    assert row["message"] == "Sending process 5938 closing signal SIGTERM"
    assert row["severity"] == "warning" and row["pid"] == 5938


# A task label is header: each labelled line is a record of its own, except the lines of a Python
# traceback (cpython Lib/traceback.py StackSummary.format: '  File "{}", line {}, in {}' and the source
# line under it) and the rows of torchrun's failure table, which continue their record
def test_a_labelled_traceback_is_one_record(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["[rank2]: Traceback (most recent call last):",
                            '[rank2]:   File "/lus/bench.py", line 301, in <module>',
                            "[rank2]:     main()",
                            "[rank2]: RuntimeError: boom",
                            "[rank2]: an ordinary line"], "nccl")
    assert [(r["rank"], r["kind"], r["message"].count("\n")) for r in rows] == [
        (2, "python_traceback", 2), (2, "python_exception", 0), (2, "log", 0)]


# pdsh dsh.c _flush_lines outf("%S: %s", th->host, buf) before every line of a remote host, pipecmd.c "%p: %S: %s
# exited with exit code %d", deepspeed PDSHRunner.get_cmd "Running on the following workers: %s": a word is a host
# label only where the output names it one of pdsh's hosts (an exception's name before its colon stays the text)
@pytest.mark.parametrize("named", [
    "[2025-01-05 10:00:00,001] [INFO] [multinode_runner.py:80:get_cmd] Running on the following workers: dgx-07,dgx-08",
    "pdsh@dgx-07: dgx-08: ssh exited with exit code 1",
    "[2025-01-05 10:00:00,002] [INFO] [runner.py:600:main] cmd = pdsh -S -f 1024 -w dgx-07,dgx-08 export NCCL_DEBUG=WARN; "
    "cd /home/u; /usr/bin/python -u -m deepspeed.launcher.launch --node_rank=%n fit.py",
    "dgx-08: dgx-08:4410:4410 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.8<0>",
])
def test_pdsh_host_labels_are_header_where_the_output_names_the_hosts(tmp_path: Path, named: str) -> None:
    lines = [named,
             "dgx-08: Traceback (most recent call last):",
             'dgx-08:   File "/home/u/fit.py", line 12, in <module>',
             "dgx-08:     run(cfg)",
             "dgx-08: KeyError: 'optimizer'",
             "dgx-08: fit.py: error: unrecognized arguments: --lr-warm 3",
             "KeyError: 'scheduler'"]
    rows = _rows(tmp_path, lines, "nccl")[1:]
    got = [(r["node"], r["kind"], r["message"]) for r in rows]
    assert got[0] == ("dgx-08", "python_traceback",
                      'Traceback (most recent call last):\n  File "/home/u/fit.py", line 12, in <module>\n    run(cfg)')
    assert got[1] == ("dgx-08", "python_exception", "KeyError: 'optimizer'")
    assert got[2] == ("dgx-08", "usage_error", "fit.py: error: unrecognized arguments: --lr-warm 3")
    assert got[3] == (None, "python_exception", "KeyError: 'scheduler'")
    assert [r["raw"].split("\n")[0] for r in rows[:3]] == lines[1:2] + lines[4:6]  # the lines as written are kept


def test_hosts_named_with_no_line_under_their_label_parse_as_ever(tmp_path: Path) -> None:
    """deepspeed names its workers, but no line carries a pdsh label (a single node, output captured another way)."""
    rows = _rows(tmp_path, ["[2025-01-05 10:00:00,001] [INFO] [multinode_runner.py:80:get_cmd] Running on the following "
                            "workers: " + ",".join(f"w{i}" for i in range(20_000)), "KeyError: 'x'"], "nccl")
    assert [r["kind"] for r in rows][-1] == "python_exception" and all(r["node"] is None for r in rows)


def test_a_word_before_a_colon_is_no_pdsh_host_unless_named(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["dgx-08: KeyError: 'optimizer'", "RuntimeError: boom"], "nccl")
    assert [(r["node"], r["message"]) for r in rows] == [(None, "dgx-08: KeyError: 'optimizer'"), (None, "RuntimeError: boom")]


# submitit/core/logger.py "%(name)s %(levelname)s (%(asctime)s) - %(message)s"; srun --label "%*d: "
def test_submitit_and_srun_label_in_job_output(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["submitit WARNING (2022-08-12 02:06:11,453) - Bypassing signal SIGCONT",
                            "  0: slurmstepd: error: *** STEP 25551887.0 ON h19c25 CANCELLED AT 2021-11-23T19:29:13 DUE TO TIME LIMIT ***",
                            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"], "slurm")
    assert rows[0]["message"] == "Bypassing signal SIGCONT" and rows[0]["severity"] == "warning"
    assert rows[0]["ts"] == _at(2022, 8, 12, 2, 6, 11).replace(microsecond=453000)
    assert rows[1]["program"] == "slurmstepd" and rows[1]["message"].startswith("error: *** STEP 25551887.0")
    assert rows[2]["kind"] == "log" and rows[2]["message"] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"


# torch/distributed/elastic/multiprocessing/errors/__init__.py ChildFailedError.format_msg: the "=" * 60 and
# "-" * 60 rules of the failure box are lines of the same message
def test_child_failed_box_rules_continue_the_block(tmp_path: Path) -> None:
    rows = _rows(tmp_path, ["Root Cause (first observed failure):", "[0]:", "  time      : 2024-03-05_07:01:51",
                            "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 69811)", "=" * 60], "nccl")
    assert len(rows) == 1 and rows[0]["raw"].endswith("=" * 60)


def test_job_output_stamps_without_a_year_take_the_outputs_own(tmp_path: Path) -> None:
    """glog's ``E0303 02:13:40`` (c10 logging: month and day, no year) in a job output copied a year later
    takes the year of the torchrun lines dated around it, not the file's time; alone, the file's."""
    glog = "[rank0]:[E0303 02:13:40.000000675 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 Rank 0] Process group watchdog"
    dated = "[2025-03-03 02:23:49,123] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)"
    late = {"reference_time": datetime(2026, 11, 28, tzinfo=UTC)}
    rows = _rows(tmp_path, [glog, dated], "nccl", **late)
    assert rows[0]["ts"] == datetime(2025, 3, 3, 2, 13, 40, tzinfo=UTC), rows[0]
    assert _rows(tmp_path, [glog], "nccl", **late)[0]["ts"].year == 2026


def test_a_kernel_line_whose_host_and_tag_were_cut_keeps_its_drivers_prefix(tmp_path: Path) -> None:
    """``Jan  2 03:04:05 NVRM: Xid ...`` (a stamp, then the kernel's text: no host, no ``kernel:`` tag): the
    driver's ``NVRM:`` stays the message's start, so the Xid rule reads it; a line with a host keeps its tag."""
    rows = _rows(tmp_path, ["Jan  2 03:04:05 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                            "Jan  2 03:04:06 gpu01 sshd[7]: Accepted publickey"], "kernel")
    assert rows[0]["message"].startswith("NVRM: Xid (PCI:0000:3b:00): 79") and rows[0]["program"] == "kernel", rows[0]
    assert rows[1]["program"] == "sshd"


def test_torchruns_failure_block_dates_the_outputs_year_less_stamps(tmp_path: Path) -> None:
    """torchrun's ChildFailedError block carries the failure's full date (``time : 2025-03-03_02:13:41``):
    the glog stamps around it take its year."""
    lines = ["[rank0]:[E0303 02:13:40.000000675 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 Rank 0] boom",
             "  time      : 2025-03-03_02:13:41"]
    rows = _rows(tmp_path, lines, "nccl", reference_time=datetime(2026, 11, 28, tzinfo=UTC))
    assert rows[0]["ts"] == datetime(2025, 3, 3, 2, 13, 40, tzinfo=UTC), rows[0]


def test_one_outputs_dates_never_move_anothers_stamps(tmp_path: Path) -> None:
    """Many users' small outputs are parsed together: the year one output's dated line gives its own
    year-less stamps never reaches another's (a user cannot move other jobs' lines in time)."""
    from observe.ingest import ingest
    from observe.store import Store

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "slurm-201.out").write_text("[2020-01-01 00:00:00,000] starting\n")
    glog = "[E1128 10:00:00.123456 1234 ProcessGroupNCCL.cpp:1414] [PG 0 Rank 3] boom\n"
    (tmp_path / "b" / "slurm-202.out").write_text(glog)
    store = Store(tmp_path / "store")
    ingest([str(tmp_path / "a" / "slurm-201.out"), str(tmp_path / "b" / "slurm-202.out")], store, node="gpu001",
           source="nccl", workers=1)
    mine = store.scan().filter(pl.col("job_id") == "202").collect()
    assert mine.height == 1 and mine.get_column("ts")[0].year != 2019, mine.select("ts", "message")
