"""GPU state from ``nvidia-smi -q`` text and ``nvidia-smi -q -x`` XML, one document per file.

Sample: ``        Bus Id                            : 00000000:B1:00.0`` (text) or
``<gpu id="00000000:3B:00.0">`` (XML). Each GPU gives one ``gpu_health`` snapshot whose attrs hold
the readings found (numbers as numbers, N/A left out) and one row per fault it shows: ``gpu_ecc``,
``gpu_thermal``, ``gpu_pcie_degraded`` (a narrower link always; a slower one only while the GPU is
busy, since idle GPUs train their link down) and
``gpu_reset_required``. A GPU's rows sit at the byte offset of its block; faults at +1 .. +4.
Pasted fragments (no header, no ``GPU 0000...`` line, differently named fields of old drivers) still
parse; a blank line followed by an indented line starts a new fragment. ``gpu`` is null without a
bus id.
"""
from __future__ import annotations

import bisect
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import lru_cache

import polars as pl

from observe import timeparse as tp
from observe.collector import Collector, Context, register
from observe.pci import gpu_id
from observe.reader import read_lines
from observe.config import to_json

GPU_LINE = r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$"
KEY_VALUE = r"^(?P<ind> *)(?P<key>[^:\s][^:]*?)\s*:(?:\s+(?P<val>.*?))?\s*$"
SECTION = r"^(?P<ind> *)(?P<key>[A-Za-z][^:]*?)\s*$"
NOT_A_VALUE = r"(?i)^\[?(?:n/a|not supported|not available|unknown|unknown error|insufficient permissions)\]?$"
THROTTLE = r"^clocks_(?:event|throttle)_reasons/(?:clocks_(?:event|throttle)_reason_)?(?:gpu_)?(\w+)$"
THROTTLE_ATTR = "throttle_reasons_active"
HEADER = ("timestamp", "driver_version", "cuda_version")

# (attr, type, regex on the normalised path: lower case, "_" for other characters, "/" between
# sections). Text and XML names both match; the first spec that matches a path wins.
SPECS: list[tuple[str, str, str]] = [
    ("product", "str", r"^product_name$"),
    ("serial", "str", r"^serial(?:_number)?$"),
    ("uuid", "str", r"^(?:gpu_)?uuid$"),
    ("vbios_version", "str", r"^vbios_version$"),
    ("minor_number", "num", r"^minor_number$"),
    ("bus_id", "str", r"(?:^|/)(?:pci_)?bus_id$"),
    ("performance_state", "str", r"^performance_state$"),
    ("gpu_util_pct", "num", r"^utilization/gpu(?:_util)?$"),
    ("fan_speed_pct", "num", r"^fan_speed$"),
    ("pcie_gen_current", "num", r"(?:^|/)pcie_gen(?:eration)?/(?:current|current_link_gen)$"),
    ("pcie_gen_max", "num", r"(?:^|/)pcie_gen(?:eration)?/(?:max|max_link_gen)$"),
    ("link_width_current", "num", r"(?:^|/)link_widths?/(?:current|current_link_width)$"),
    ("link_width_max", "num", r"(?:^|/)link_widths?/(?:max|max_link_width)$"),
    ("temp_c", "num", r"(?:^|/)(?:gpu_current_temp|gpu_temp)$|^temperature/gpu$"),
    ("slowdown_temp_c", "num", r"(?:^|/)(?:gpu_slowdown_temp|gpu_temp_slow_threshold)$"),
    ("shutdown_temp_c", "num", r"(?:^|/)(?:gpu_shutdown_temp|gpu_temp_max_threshold)$"),
    ("memory_temp_c", "num", r"(?:^|/)(?:memory_current_temp|memory_temp)$"),
    ("power_w", "num", r"^(?:(?:gpu_)?power_readings/)?(?:power_draw|average_power_draw|instant\w*_power_draw)$"),
    ("power_limit_w", "num", r"^(?:(?:gpu_)?power_readings/)?(?:power_limit|current_power_limit)$"),
    ("ecc_mode", "str", r"^ecc_mode/current(?:_ecc)?$"),
    ("ecc_volatile_correctable", "sum", r"^ecc_errors/volatile/(?:single_bit/total|(?:sram|dram)_correctable)$"),
    ("ecc_volatile_uncorrectable", "sum", r"^ecc_errors/volatile/(?:double_bit/total|(?:sram|dram)_uncorrectable\w*)$"),
    ("ecc_aggregate_correctable", "sum", r"^ecc_errors/aggregate/(?:single_bit/total|(?:sram|dram)_correctable)$"),
    ("ecc_aggregate_uncorrectable", "sum", r"^ecc_errors/aggregate/(?:double_bit/total|(?:sram|dram)_uncorrectable\w*)$"),
    ("retired_pages_sbe", "num", r"^retired_pages/(?:single_bit_ecc|multiple_single_bit_retirement/retired_count)$"),
    ("retired_pages_dbe", "num", r"^retired_pages/(?:double_bit_ecc|double_bit_retirement/retired_count)$"),
    ("retired_pages_pending", "bool", r"^retired_pages/pending\w*$"),
    ("remapped_rows_correctable", "num", r"^remapped_rows/(?:correctable_error|remapped_row_corr)$"),
    ("remapped_rows_uncorrectable", "num", r"^remapped_rows/(?:uncorrectable_error|remapped_row_unc)$"),
    ("remapped_rows_pending", "bool", r"^remapped_rows/(?:pending|remapped_row_pending)$"),
    ("remapped_rows_failure", "bool", r"^remapped_rows/(?:remapping_failure_occurred|remapped_row_failure)$"),
    ("reset_required", "bool", r"(?:^|/)reset_required$"),
    ("drain_and_reset_recommended", "bool", r"(?:^|/)drain_and_reset_recommended$"),
]
TYPES = {name: kind for name, kind, _ in SPECS} | {THROTTLE_ATTR: "list"}
SLOTS = {"gpu_ecc": 1, "gpu_thermal": 2, "gpu_pcie_degraded": 3, "gpu_reset_required": 4}


@register
class NvidiaSmi(Collector):
    name = "nvidia_smi"
    source = "gpu"
    whole_file = True
    sniff = (
        r"NVSMI LOG|^GPU [0-9A-Fa-f]{8}:|^\s*<(?:\?xml|/?nvidia_smi_log|gpu[ >])|^\s*</?[a-z_][a-z_0-9]*>"
        r"|^ *[A-Z][\w .()/+-]*? {2,}: | {4,}[A-Z][\w .()/+-]*[\w)] *$"
    )

    def parse(self, records: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """One ``gpu_health`` row per GPU plus its fault rows; a document of neither format is unparsed."""
        frames = [_document(raw, offset, ctx) for raw, offset in records.select("raw", "offset").iter_rows()]
        return pl.concat(frames, how="diagonal_relaxed")


def _document(text: str, base: int, ctx: Context) -> pl.DataFrame:
    blocks, leaves = (([], None) if not text.strip() else
                      _xml(text, base) if re.search(r"<nvidia_smi_log\b|<gpu\b", text) else _text(text, base))
    readings = _readings(leaves) if leaves is not None else {}
    if not readings:
        return pl.DataFrame({"raw": [text], "offset": [base], "message": [None]},
                            schema={"raw": pl.String, "offset": pl.Int64, "message": pl.String})
    rows = []
    for block in blocks:
        r = readings.get(block["g"], {})
        gpu = gpu_id(block["bus"] or r.get("bus_id"))
        header = {k: block[k] for k in ("driver_version", "cuda_version") if block[k]}
        health = {"ts": block["timestamp"], "gpu": gpu, "raw": block["raw"], "offset": block["offset"]}
        rows.append(health | {
            "kind": "gpu_health" if r else None, "severity": "info",
            "message": _summary(gpu, r) if r else None, "attrs": to_json(header | r) if r else None,
        })
        for kind, severity, message, attrs in _faults(gpu or "GPU", r):
            rows.append(health | {"kind": kind, "severity": severity, "message": message,
                                  "offset": block["offset"] + SLOTS[kind], "attrs": to_json(_pick(r, ("uuid",)) | attrs)})
    schema = {"ts": pl.String, "gpu": pl.String, "raw": pl.String, "offset": pl.Int64, "kind": pl.String,
              "severity": pl.String, "message": pl.String, "attrs": pl.String}
    return pl.DataFrame(rows, schema=schema).with_columns(
        tp.ctime(pl.col("ts"), ctx.tz).alias("ts"), pl.lit("gpu").alias("source"), pl.lit("nvidia-smi").alias("program"),
    )


def _text(text: str, base: int) -> tuple[list[dict], pl.DataFrame]:
    """GPU blocks and their (g, path, value) leaves from ``nvidia-smi -q`` text, indentation giving the path."""
    lines = pl.concat(list(read_lines(io.BytesIO(text.encode()), start=base)))
    raw = pl.col("raw")
    kv = raw.str.extract_groups(KEY_VALUE)
    sec = raw.str.extract_groups(SECTION)
    lines = lines.with_columns(
        raw.str.extract(GPU_LINE, 1).alias("bus"),
        (raw.str.strip_chars() == "").alias("blank"),
        kv.struct.field("val").alias("val"),
        kv.struct.field("key").is_null().alias("is_sec"),
        pl.coalesce(kv.struct.field("key"), sec.struct.field("key")).str.to_lowercase()
        .str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_").alias("key"),
        (pl.coalesce(kv.struct.field("ind"), sec.struct.field("ind")).str.len_chars() // 4).alias("level"),
    ).with_columns((pl.col("level") >= 1).fill_null(False).alias("content"))
    top = pl.col("level") == 0
    lines = lines.with_columns(
        raw.str.contains("NVSMI LOG").cum_sum().alias("doc"),
        (pl.col("bus").is_not_null() | (pl.col("content") & pl.col("blank").shift(1).fill_null(False)))
        .cum_sum().alias("g"),
    ).with_columns(pl.when(top & (pl.col("key") == h)).then("val").forward_fill().over("doc").alias(h) for h in HEADER)
    depth = lines.get_column("level").max() or 0
    reset = pl.col("bus").is_not_null() | pl.col("blank")
    ancestors = [
        pl.when(pl.col("is_sec") & (pl.col("level") == lvl)).then("key")
        .when(reset | (pl.col("level") <= lvl)).then(pl.lit("")).forward_fill()
        for lvl in range(1, depth)
    ]
    path = pl.concat_str(
        [pl.when((pl.col("level") > lvl) & (a != "")).then(a) for lvl, a in enumerate(ancestors, 1)] + [pl.col("key")],
        separator="/", ignore_nulls=True,
    )
    leaves = lines.with_columns(path.alias("path")).filter("content", ~pl.col("is_sec")).select(
        "g", "path", pl.col("val").alias("value"))
    content = pl.col("content")
    spans = lines.filter(content | pl.col("bus").is_not_null()).group_by("g", maintain_order=True).agg(
        pl.col("offset").min().alias("start"),
        (pl.col("offset") + pl.col("raw").str.len_bytes()).max().alias("end"),
        pl.col("bus").drop_nulls().first(),
        *[pl.col(h).filter(content).first() for h in HEADER],
    )
    data = text.encode()
    blocks = [
        {"g": s["g"], "offset": s["start"], "raw": data[s["start"] - base: s["end"] - base].decode("utf-8", "replace"),
         "bus": s["bus"]} | {h: s[h] for h in HEADER}
        for s in spans.iter_rows(named=True)
    ]
    return blocks, leaves


def _xml(text: str, base: int) -> tuple[list[dict], pl.DataFrame]:
    """GPU blocks and leaves from ``nvidia-smi -q -x``; each ``<gpu>`` element is parsed on its own."""
    heads = {h: [(m.start(), m.group(1).strip()) for m in re.finditer(rf"<{h}>(.*?)</{h}>", text, re.S)] for h in HEADER}
    blocks, leaves = [], []
    pos, offset = 0, base
    for g, m in enumerate(re.finditer(r"<gpu\b[^>]*>(?:.*?</gpu>|.*\Z)", text, re.S)):
        offset += len(text[pos: m.start()].encode())
        pos = m.start()
        try:
            el = ET.fromstring(m.group(0))
        except ET.ParseError:  # a truncated paste: the block stays, unparsed
            el = None
        blocks.append({"g": g, "offset": offset, "raw": m.group(0),
                       "bus": el.get("id") if el is not None else None}
                      | {h: _last_before(heads[h], m.start()) for h in HEADER})
        leaves.extend((g, path, value) for path, value in (_flatten(el) if el is not None else ()))
    return blocks, pl.DataFrame(leaves, schema={"g": pl.Int64, "path": pl.String, "value": pl.String}, orient="row")


def _last_before(found: list[tuple[int, str]], pos: int) -> str | None:
    i = bisect.bisect_left(found, (pos, ""))
    return found[i - 1][1] if i else None


def _flatten(el: ET.Element, prefix: str = "") -> Iterator[tuple[str, str]]:
    for child in el:
        path = prefix + child.tag.lower()
        if len(child):
            yield from _flatten(child, path + "/")
        elif child.text and child.text.strip():
            yield path, child.text.strip()


@lru_cache(maxsize=4096)
def _field_of(path: str) -> str | None:
    """The reading a leaf's path names: THROTTLE_ATTR, the first SPECS entry whose regex matches, or
    None. A document has a few hundred leaves of a few hundred paths, the same in every poll: each
    path is looked up once per process, where polars would compile the 35 regexes again for each
    document (35 ms of a 24 KB document's 43)."""
    if re.search(THROTTLE, path):
        return THROTTLE_ATTR
    return next((name for name, _, rx in SPECS if re.search(rx, path)), None)


def _readings(leaves: pl.DataFrame) -> dict[int, dict]:
    """Per block ``g``: the readings named in SPECS (numbers, booleans, strings, active throttle reasons)."""
    path = pl.col("path")
    paths = leaves.get_column("path").unique().to_list()
    field = path.replace_strict(paths, [_field_of(p) for p in paths], default=None, return_dtype=pl.String)
    val = pl.col("value").str.strip_chars()
    val = pl.when((val != "") & ~val.str.contains(NOT_A_VALUE)).then(val)
    val = pl.when(field == THROTTLE_ATTR).then(pl.when(val == "Active").then(path.str.extract(THROTTLE, 1))).otherwise(val)
    num = val.str.extract(r"^([-+]?\d+(?:\.\d+)?)\s*[A-Za-z%/]*$", 1).cast(pl.Float64, strict=False)
    grouped = (
        leaves.select("g", field.alias("field"), val.alias("val"), num.alias("num"))
        .filter(pl.col("field").is_not_null())
        .group_by("g", "field", maintain_order=True)
        .agg(
            pl.col("val").drop_nulls().first().alias("str"),
            pl.col("num").drop_nulls().first().alias("first"),
            pl.when(pl.col("num").count() > 0).then(pl.col("num").sum()).alias("sum"),
            pl.col("val").drop_nulls().alias("list"),
        )
    )
    out: dict[int, dict] = {}
    for row in grouped.iter_rows(named=True):
        kind = TYPES[row["field"]]
        if kind == "num":
            value = row["first"]
        elif kind == "bool":
            value = {"yes": True, "no": False}.get((row["str"] or "").lower())
        else:
            value = row[kind]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None:
            out.setdefault(row["g"], {})[row["field"]] = value
    return out


def _summary(gpu: str | None, r: dict) -> str:
    parts = [f"{r['temp_c']} C" if "temp_c" in r else "", f"{r['power_w']} W" if "power_w" in r else "",
             r.get("performance_state", "")]
    if "pcie_gen_current" in r:
        parts.append(f"PCIe Gen{r['pcie_gen_current']}/{r.get('pcie_gen_max', '?')}")
    if "ecc_volatile_uncorrectable" in r:
        parts.append(f"ECC volatile uncorrectable {r['ecc_volatile_uncorrectable']}")
    detail = ", ".join(p for p in parts if p)
    return f"{r.get('product', 'GPU')} {gpu or '(no bus id)'}" + (f": {detail}" if detail else "")


def _faults(gpu: str, r: dict) -> list[tuple[str, str, str, dict]]:
    """(kind, severity, message, attrs) for each fault condition the readings show."""
    faults = []
    ecc = [why for why, hit in [
        (f"{r.get('ecc_volatile_uncorrectable')} volatile uncorrectable ECC errors", r.get("ecc_volatile_uncorrectable", 0) > 0),
        ("page retirement pending", r.get("retired_pages_pending")),
        ("row remapping pending", r.get("remapped_rows_pending")),
        ("row remapping failed", r.get("remapped_rows_failure")),
    ] if hit]
    if ecc:
        keys = ("ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable", "retired_pages_dbe", "retired_pages_pending",
                "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure")
        faults.append(("gpu_ecc", "err", f"{gpu}: " + "; ".join(ecc), _pick(r, keys) | {"reasons": ecc}))
    thermal = [name for name in r.get(THROTTLE_ATTR, []) if "thermal" in name]
    hot = "temp_c" in r and "slowdown_temp_c" in r and r["temp_c"] >= r["slowdown_temp_c"]
    if hot or thermal:
        why = ([f"{r['temp_c']} C at or above slowdown {r['slowdown_temp_c']} C"] if hot else []) + \
              ([f"thermal throttling active ({', '.join(thermal)})"] if thermal else [])
        faults.append(("gpu_thermal", "warning", f"{gpu}: " + "; ".join(why),
                       _pick(r, ("temp_c", "slowdown_temp_c", "shutdown_temp_c", THROTTLE_ATTR))))
    # An idle GPU trains its link down to save power (even at P0), so a lower generation counts only
    # while the GPU is busy; a narrower link is a fault at any time.
    pstate = re.fullmatch(r"P(\d+)", r.get("performance_state", ""))
    if "gpu_util_pct" in r:
        busy = r["gpu_util_pct"] > 0
    else:
        busy = pstate is not None and int(pstate.group(1)) < 8 and "idle" not in r.get(THROTTLE_ATTR, [])
    slow = [f"{unit}{r[cur]} of max {unit}{r[top]}" for unit, cur, top, always in [
        ("Gen", "pcie_gen_current", "pcie_gen_max", False), ("x", "link_width_current", "link_width_max", True)
    ] if cur in r and top in r and r[cur] < r[top] and (always or busy)]
    if slow:
        faults.append(("gpu_pcie_degraded", "warning",
                       f"{gpu}: PCIe link degraded at {r.get('performance_state', 'unknown P-state')}: " + ", ".join(slow),
                       _pick(r, ("pcie_gen_current", "pcie_gen_max", "link_width_current", "link_width_max",
                                 "performance_state", "gpu_util_pct"))))
    if r.get("reset_required"):
        faults.append(("gpu_reset_required", "crit", f"{gpu}: GPU reset required",
                       _pick(r, ("reset_required", "drain_and_reset_recommended"))))
    return faults


def _pick(r: dict, keys: tuple[str, ...]) -> dict:
    return {k: r[k] for k in keys if k in r}
