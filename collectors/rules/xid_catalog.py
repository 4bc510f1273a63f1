"""The Xid catalog's generator, a tool kept beside the rules it writes (not a collector): ``xid.toml``
from NVIDIA's Xid table, transcribed in ``xid_catalog.psv``, and observe's own columns below (name, meaning, action, category,
severity, drivers, fatal_action, and a note for entries that depart from NVIDIA's resolution buckets).

``python collectors/rules/xid_catalog.py`` rewrites xid.toml; ``--check`` only compares, exiting 1 when the
file differs from what this module produces. Edit the table or this module, never xid.toml.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RULES = Path(__file__).resolve().parent
TABLE = RULES / "xid_catalog.psv"
CATALOG = RULES / "xid.toml"

ORDER = ["none", "application_error", "investigate", "reset_gpu", "drain_node"]
MONOTONE = ["action", "fatal_action"]  # site catalogs may only keep or lower these along ORDER
ATTACH = ["name", "action", "fatal_action", "category"]  # merged into events: what faults, causes, the exporter read
HEADER = """\
# Xid catalog, after NVIDIA's published Xid catalog for Ampere and newer GPUs
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: the "Xids" table and the
# "Xid 144-150 Decode" table), codes 1-172.
#
# Generated: edit collectors/rules/xid_catalog.psv (NVIDIA's table, transcribed) or observe's columns in
# collectors/rules/xid_catalog.py, then run `python collectors/rules/xid_catalog.py` (`--check`: is this file current?).
#
# Events of kind gpu_xid get the fields named in `attach` merged into attrs (an Xid storm repeats them on
# every line); the rest stay here, read at query time with observe.rules.catalog("gpu_xid"). `severity`
# sets the event severity (a syslog level).
#   name          NVIDIA's description (for codes it lists as "Unused": the pre-Ampere name, when known)
#   mnemonic      NVIDIA's mnemonic
#   meaning       what it means and what to do, in a line
#   action        observe's normalised action: none | application_error | investigate | reset_gpu | drain_node
#   fatal_action  Xid 144-150 only: the action when the message says "Fatal" (nvrm.toml puts the word in
#                 attrs.nvlink_severity and the unit, e.g. NETIR_LINK_EVT, in attrs.nvlink_unit); `action`
#                 is for "Nonfatal"
#   immediate     NVIDIA's "Resolution Bucket (Immediate Action)", verbatim (absent: the catalog gives none)
#   investigatory NVIDIA's "Resolution Bucket (Investigatory Action)", verbatim (absent: none, or "N/A; Unused")
#   category      gpu | memory | nvlink | driver | application
#   drivers       where behaviour differs by GPU generation or driver branch
#
# action from NVIDIA's immediate action: IGNORE -> none; RESTART_APP -> application_error;
# RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR -> reset_gpu; RESTART_BM, RESTART_VM, CHECK_MECHANICALS,
# CONTACT_SUPPORT, XID_154 -> drain_node; WORKFLOW_XID_45 (not solo: follow the other Xid) -> none;
# UPDATE_SWFW, CHECK_UVM, none given -> investigate. Exceptions carry a comment above their entry; in
# particular the codes NVIDIA lists as "Unused" (not logged by Ampere and newer; immediate CONTACT_SUPPORT,
# investigatory "N/A; Unused") are `investigate`, not drain_node, since on older GPUs they carry other
# meanings NVIDIA's current catalog gives no action for.
#
# Sources, in order of preference where they differ: NVIDIA's catalog page (above); NVIDIA/NVSentinel
# (distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv, an older export);
# leptonai/gpud (components/accelerator/nvidia/xid/catalog_generated.go, generated from the page on
# 2025-10-29, identical to it; pkg/nvidia-query/xid/xid.go for the pre-Ampere names). Differences:
# NVSentinel says UNEXPECTED_ERR_REPORT_ISSUE where the page says CONTACT_SUPPORT for unused codes; Xid 108
# NVSentinel: DESTINATION_FLA_TRANSLATION_ERROR / UNEXPECTED_ERR_REPORT_ISSUE, page: IGNORE; Xid 160
# NVSentinel: RESTART_BM, page: IGNORE; Xid 162 NVSentinel: RESET_GPU (no mnemonic), page: PSHC_REENGAGED
# with no bucket; Xid 137 NVSentinel names it NVLINK_FLA_PRIV_ERR. The page wins in each case.
# Driver-version notes: the page's "Xid 154 linkage" column (R565/CUDA 12.7, R570, R575/CUDA 12.9), the
# decode table's V1 (<R575) / V2 (>=R575) subcode encoding, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt
# (row remapping, containment) and docs.nvidia.com/deploy/dynamic-page-retirement (pre-Ampere Xid 63/64).
#
# Sites add or override entries by putting another gpu_xid catalog file in an OBSERVE_RULES directory:
# an entry there replaces this file's entry for the same code. `monotone` guards that: an override may
# keep or lower a code's action (and fatal_action) along `order`, never raise it ("none" suppresses a
# code); codes not in this file may have any action. A site file's own `attach` replaces this one."""

BUCKET_ACTION = {
    "IGNORE": "none", "RESTART_APP": "application_error", "RESET_GPU": "reset_gpu",
    "WORKFLOW_XID_48": "reset_gpu", "RESTART_VM": "drain_node", "RESTART_BM": "drain_node",
    "CONTACT_SUPPORT": "drain_node", "CHECK_MECHANICALS": "drain_node", "UPDATE_SWFW": "investigate",
    "WORKFLOW_XID_45": "none", "WORKFLOW_NVLINK_ERR": "reset_gpu", "CHECK_UVM": "investigate",
    "XID_154": "drain_node", "": "investigate",
}
SEVERITY = {"none": "info", "application_error": "warning", "investigate": "warning", "reset_gpu": "err",
            "drain_node": "crit"}

# Names NVIDIA's pre-Ampere Xid table gave codes that the Ampere+ catalog marks "Unused"
# (as transcribed in leptonai/gpud pkg/nvidia-query/xid/xid.go, "r555 (Sep 24, 2024)").
LEGACY = {
    1: "Invalid or corrupted push buffer stream", 2: "Invalid or corrupted push buffer stream",
    3: "Invalid or corrupted push buffer stream", 4: "Invalid or corrupted push buffer stream",
    6: "Invalid or corrupted push buffer stream", 7: "Invalid or corrupted push buffer address",
    9: "Driver error programming GPU", 12: "Driver error handling GPU exception", 16: "Display engine hung",
    18: "Bus mastering disabled in PCI Config Space", 19: "Display Engine error",
    20: "Invalid or corrupted Mpeg push buffer", 21: "Invalid or corrupted Motion Estimation push buffer",
    22: "Invalid or corrupted Video Processor push buffer", 24: "GPU semaphore timeout", 26: "Framebuffer timeout",
    27: "Video processor exception", 28: "Video processor exception", 29: "Video processor exception",
    30: "GPU semaphore access error", 33: "Internal micro-controller error", 34: "Video processor exception",
    35: "Video processor exception", 36: "Video processor exception", 42: "Video processor exception",
    47: "Video processor exception", 56: "Display Engine error", 57: "Error programming video memory interface",
    58: "Unstable video memory interface detected", 59: "Internal micro-controller error (older drivers)",
    61: "Internal micro-controller breakpoint/warning (newer drivers)", 65: "Video processor exception",
    73: "NVENC2 Error", 81: "VGA Subsystem Error", 111: "Display Bundle Error Event", 112: "Display Supervisor Error",
    113: "DP Link Training Error", 114: "Display Pipeline Underflow Error", 115: "Display Core Channel Error",
    116: "Display Window Channel Error", 117: "Display Cursor Channel Error", 118: "Display Pixel Pipeline Error",
    122: "SPI PMU RPC Read Failure", 123: "SPI PMU RPC Write Failure", 124: "SPI PMU RPC Erase Failure",
    125: "Inforom FS Failure",
}

R565 = "From R565 (CUDA 12.7) followed by Xid 154 giving the recovery action."
LINK = {"R565": R565, "R570": "From R570 followed by Xid 154 giving the recovery action.",
        "R575": "From R575 (CUDA 12.9) followed by Xid 154 giving the recovery action.",
        "INTRO": "Followed by Xid 154 giving the recovery action since the Xid was introduced."}
NVL5 = ("The unit is also encoded in IntrInfo (the first word in parentheses): bits 9:5 before R575, "
        "bits 6:0 from R575; some units are named differently before/from R575 (NETIR_LINK_EVT/NETIR_LINK_DOWN, "
        "NETIR/NETIR_INT, TLW_RX/TLW_RX_PIPE0, NVLPW_CTRL/NVLPW). ") + R565

# code: observe's columns (name, meaning, action, category, severity, drivers, fatal_action, note)
OBSERVE: dict[int, dict[str, str]] = {
    8: dict(category="gpu",
            meaning="A GPU engine stopped processing (idle timeout): restart the application; contact support if it "
                    "recurs."),
    11: dict(category="application",
             meaning="Invalid or corrupted push buffer stream: usually the application passing bad data to the GPU; "
                     "restart it."),
    13: dict(category="application",
             meaning="Usually an application fault (out-of-bounds access, illegal instruction or register); repeats on "
                     "one GPU/GPC/TPC across jobs suggest hardware (WORKFLOW_XID_13)."),
    14: dict(name="Fake error (injected from userspace)", category="application",
             meaning="A fake or injected error from userspace: no action."),
    25: dict(category="application", meaning="Invalid or illegal push buffer stream: usually the application; restart it."),
    31: dict(category="application",
             meaning="MMU fault: usually an application bug (illegal memory access), rarely driver or hardware; repeats "
                     "on one GPU across jobs suggest hardware (WORKFLOW_XID_31)."),
    32: dict(action="investigate", category="gpu", severity="err",
             note="NVIDIA: RESTART_APP, but its trigger text blames PCIe quality, not the application: investigate",
             meaning="Fault reported by the DMA controller between driver and GPU over PCIe: mostly PCIe quality issues, "
                     "not the application; restart the application and look at the PCIe link."),
    37: dict(category="driver",
             meaning="Driver firmware error (unimplemented firmware method): no recovery action; check the "
                     "application/CUDA if it recurs."),
    38: dict(category="driver",
             meaning="Driver firmware error (FECS watchdog timeout): no recovery action per NVIDIA; contact support if "
                     "it recurs."),
    43: dict(category="application",
             meaning="A user application hit a software-induced fault and had to stop; the GPU remains healthy."),
    44: dict(category="gpu",
             meaning="Graphics engine fault during a context switch: no recovery action; contact support if it recurs."),
    45: dict(category="driver", note="WORKFLOW_XID_45: not solo, follow the other Xid; solo, restart Fabric Manager. "
                                     "The driver's cleanup once a process ended: category driver, not the application's",
             meaning="Channels torn down after the application aborted (Ctrl-C, kill, GPU reset) or after another error: "
                     "usually follows another Xid; seen alone, restart Fabric Manager."),
    46: dict(category="gpu",
             meaning="The GPU stopped processing (timeout): reset the GPU; contact support if it persists."),
    48: dict(category="memory", severity="crit",
             meaning="Uncorrectable (double bit) ECC error, also reported to the application: reset the GPU; with Xid "
                     "63/64 drain the node and reset. SRAM errors: check the SRAM threshold flag (run field diagnostics "
                     "when set).",
             drivers="A100 and newer: with error containment the driver also logs Xid 94 (contained) or 95 (uncontained); "
                     "Volta and older retire pages (Xid 63/64), Ampere and newer remap rows. Xid 171/172 (newer drivers) "
                     "say DRAM or SRAM. " + R565),
    54: dict(category="gpu",
             meaning="Auxiliary power is not connected to the GPU board: check seating and power connections."),
    60: dict(category="application",
             meaning="SEC2 (video processor) exception: restart the application; investigate user or NVIDIA software if "
                     "it recurs."),
    61: dict(action="reset_gpu", severity="err", note="Unused on Ampere+; older NVIDIA guidance: report and reset the GPU",
             meaning="Internal micro-controller (PMU) breakpoint/warning; unused on Ampere and newer. Older GPUs: report "
                     "a GPU issue and reset the GPU."),
    62: dict(category="gpu", severity="crit",
             meaning="Internal micro-controller (PMU) halted: reset the GPU; contact support if it persists."),
    63: dict(category="memory", severity="info",
             meaning="A row remap (Ampere and newer) or page retirement (older GPUs) was recorded: informational; it "
                     "takes effect at the next GPU reset (driver reload on older GPUs).",
             drivers="Ampere and newer: row remapping, applied at GPU reset; Volta and older: dynamic page retirement, "
                     "applied at driver reload. " + R565),
    64: dict(category="memory", severity="crit", note="NVIDIA now says RESET_GPU (older guidance: reboot/drain)",
             meaning="Recording a row remap (Ampere and newer) or page retirement (older GPUs) failed: reset the GPU; "
                     "contact support if it persists.",
             drivers="Ampere and newer: row remapping failure; Volta and older: page retirement failure. " + R565),
    66: dict(category="driver",
             meaning="Illegal register access by the driver: no recovery action; investigate user or NVIDIA software if "
                     "it recurs."),
    67: dict(category="driver",
             meaning="Illegal access by the driver (verification violation): no recovery action; contact support if it "
                     "recurs."),
    68: dict(category="application", meaning="Video decoder (NVDEC0) exception: restart the application."),
    69: dict(category="application",
             meaning="Graphics engine class error (illegal class use): restart the application, check the "
                     "application/CUDA."),
    74: dict(category="nvlink", severity="crit",
             note="WORKFLOW_NVLINK_ERR: reset the GPU or reboot the node; decode the bits of the hex words",
             meaning="NVLink connection problem to a GPU or NVSwitch, possibly the peer's fault: a GPU reset or node "
                     "reboot clears it; contact the hardware vendor if it repeats (decode the hex words: "
                     "WORKFLOW_NVLINK_ERR)."),
    78: dict(category="driver",
             meaning="vGPU failed to start (guest/host driver mismatch or unsupported vGPU type): update software and "
                     "firmware."),
    79: dict(category="gpu",
             meaning="The GPU is no longer reachable over PCIe (link or GPU failure): restart the node (bare metal); "
                     "contact support if it persists."),
    80: dict(category="application",
             meaning="Corrupted data sent to the GPU (push buffer CRC mismatch): restart the application, check the "
                     "application/CUDA."),
    92: dict(category="memory", severity="notice",
             meaning="High rate of corrected single-bit ECC errors: informational; contact support if it persists."),
    93: dict(category="gpu",
             meaning="InfoROM update refused: the provisioned InfoROM wear limit was hit (nvflash erase-limit session); "
                     "clear it with nvflash."),
    94: dict(category="memory",
             meaning="Uncorrectable ECC error contained to one application: restart that application; other applications "
                     "are unaffected; reset the GPU when convenient.",
             drivers="Only on GPUs with error containment (A100 and newer); older GPUs report the error as Xid 48 "
                     "alone. " + R565),
    95: dict(category="memory", severity="crit",
             meaning="Uncorrectable ECC error that could not be contained: several applications are affected; reset the "
                     "GPU before restarting them.",
             drivers="Only on GPUs with error containment (A100 and newer); older GPUs report the error as Xid 48 "
                     "alone. " + R565),
    106: dict(category="gpu", meaning="SMBPBI test message: no action."),
    107: dict(category="gpu", meaning="SMBPBI test message (silent): no action."),
    108: dict(name="NVLink remote translation error", category="application",
              meaning="Listed as unused; investigation as for Xid 137 (illegal NVLink peer access, usually the "
                      "application)."),
    109: dict(category="gpu", meaning="Context switch timeout: reset the GPU; contact support if it persists."),
    110: dict(category="gpu", severity="crit",
              meaning="Security fault, uncommon unless hardware failed: reset the GPU (revert recent hardware changes, "
                      "cold reset); contact the vendor if it persists."),
    119: dict(category="gpu", severity="crit",
              meaning="The GPU System Processor (GSP) did not answer an RPC in time: reset the GPU (power-cycle the node "
                      "if it persists)."),
    120: dict(category="gpu", severity="crit",
              meaning="Error in code running on the GPU System Processor (GSP): reset the GPU (power-cycle the node if "
                      "it persists)."),
    121: dict(category="nvlink", severity="notice",
              meaning="Corrected errors on the C2C NVLink to a Grace CPU: no operational impact; reset the GPU in a "
                      "service window to retrain the link."),
    123: dict(action="reset_gpu", severity="err", note="Unused on Ampere+; older NVIDIA guidance: report and reset the GPU",
              meaning="SPI PMU RPC write failure; unused on Ampere and newer. Older GPUs: report a GPU issue and reset "
                      "the GPU."),
    136: dict(category="nvlink",
              meaning="NVLink link training (ALI) failed: reset the GPU; investigate the link's signal integrity if it "
                      "recurs."),
    137: dict(category="application",
              meaning="Illegal NVLink peer-to-peer access reported by the remote MMU: usually an application bug, rarely "
                      "driver or hardware."),
    140: dict(category="memory", severity="crit",
              meaning="Uncorrectable memory error that kept the driver from retiring pages or remapping rows: reset the "
                      "GPU; contact the vendor if it persists."),
    141: dict(category="driver", meaning="CUDA fast path error: no recovery action; contact support if it recurs."),
    142: dict(category="gpu", meaning="Video encoder (NVENC3) error on GB200: no automated recovery; contact support."),
    143: dict(category="gpu", severity="crit", note="NVIDIA: RESET_GPU (this file used to drain)",
              meaning="The GPU failed to initialize: reset the GPU; contact support if it persists."),
    151: dict(category="gpu",
              meaning="Confidential-computing key rotation failed: restart the VM owning the GPU (the node, on bare "
                      "metal)."),
    152: dict(category="gpu", meaning="DLA SMMU error: no recovery action."),
    153: dict(category="gpu", meaning="DLA timeout: no recovery action."),
    154: dict(category="gpu", severity="crit",
              note="XID_154 (follow the guidance in the message, which names the recovery action): drain, the worst case",
              meaning="The driver changed the GPU's recovery action (None, Drain P2P, Drain and Reset, GPU Reset "
                      "Required, Node Reboot Required): follow the action in the message; it summarises another Xid.",
              drivers="Summarises the Xids linked to it from R565 (CUDA 12.7), 109 from R570, 143/160/161 from R575; "
                      "R610 and later drivers report further recovery actions."),
    155: dict(category="nvlink",
              meaning="NVLink link went down flagged as intentional (including to SLEEP): reset the GPU; investigate "
                      "software or users if unexpected."),
    156: dict(category="memory", meaning="A resource was retired: reset the GPU for it to take effect."),
    157: dict(category="memory",
              meaning="A resource could not be retired (no spare resources left): workloads may run, but the same Xid "
                      "may come back."),
    158: dict(category="gpu", meaning="GPU fatal timeout: reset the GPU; contact support if it persists."),
    159: dict(category="nvlink", note="CHECK_UVM: reset the GPU when UVM/vGPU is in use, else ignore",
              meaning="CHI non-data error, may be seen on any C2C link-connected GPU: reset the GPU if UVM/vGPU is in "
                      "use, else ignore; usually sympathetic to another error."),
    160: dict(category="driver", meaning="A channel was retired: no recovery action; investigate user or NVIDIA software."),
    161: dict(category="driver",
              meaning="A channel could not be retired: no recovery action; investigate user or NVIDIA software."),
    # 162-172: listed without resolution buckets; actions by judgement from NVIDIA's trigger notes.
    162: dict(action="none", category="gpu", meaning="Power smoothing circuitry capability reengaged: informational."),
    163: dict(action="investigate", category="gpu",
              meaning="Power smoothing circuitry disengaged: no GPU reset required; resolve the thermal events to get it "
                      "back, or reload the driver / reset the GPU if it was disabled by a timeout."),
    164: dict(action="investigate", category="gpu",
              meaning="Power smoothing circuitry low lifetime reached: power smoothing will be disabled soon; monitor "
                      "power swings, expect to replace the GPU if smoothing is needed."),
    165: dict(action="investigate", category="gpu",
              meaning="Power smoothing circuitry lifetime exhausted: the driver disables power smoothing and power "
                      "swings will occur; replace the GPU if they are not acceptable."),
    166: dict(action="investigate", category="nvlink",
              meaning="Confidential-computing traffic seen before the link was configured for encryption (CC mode only)."),
    167: dict(action="investigate", category="gpu", note="no resolution bucket in the catalog",
              meaning="PCIe fatal timeout (no resolution given in NVIDIA's catalog)."),
    168: dict(action="investigate", category="memory",
              meaning="Errors found in the write protected region, reducing memory capacity: should only be seen with "
                      "ECC disabled; enable ECC (for row remapping) or boot again with a shifted WPR."),
    169: dict(action="investigate", category="gpu",
              note="no resolution bucket in the catalog (the PMU halt, Xid 62, is RESET_GPU)",
              meaning="Internal micro-controller (SEC2) halt (no resolution given in NVIDIA's catalog)."),
    170: dict(action="investigate", category="nvlink",
              meaning="Interrupt seen in confidential-computing mode (CC mode only)."),
    171: dict(action="none", category="memory", note="detail for Xid 48, which carries the action",
              meaning="Uncorrectable DRAM error: detail for Xid 48 (framebuffer; follow Xid 63/64)."),
    172: dict(action="investigate", category="memory", note="detail for Xid 48; SRAM: check the SRAM threshold flag",
              meaning="Uncorrectable SRAM error: detail for Xid 48; check the SRAM error threshold flag (nvidia-smi "
                      "sram_threshold_exceeded) and run field diagnostics when set."),
}

# code: (action for "Nonfatal", severity, meaning); "Fatal" is reset_gpu (fatal_action)
NVLINK = {
    144: ("none", "err", "NVLink SAW error (unit such as SAW_MVB). Nonfatal: no action (may lead to Xid 48/94/95); "
                         "Fatal: reset the GPU."),
    145: ("application_error", "err",
          "NVLink RLW error (units RLW_CTRL, RLW_REMAP, RLW_RSPCOL, RLW_RXPIPE, RLW_SRC_TRACK, RLW_TAGSTATE). Nonfatal: "
          "no action, or the application crashed (follow Xid 154 if logged, else restart it); Fatal: reset the GPU."),
    146: ("none", "err", "NVLink TLW error (units TLW_CTRL, TLW_RX, TLW_TX). Nonfatal: no action (may lead to Xid "
                         "48/94/95); Fatal: reset the GPU."),
    147: ("none", "err", "NVLink TREX error: Nonfatal, no action (not expected in production)."),
    148: ("none", "err", "NVLink NVLPW_CTRL error: Nonfatal, no action."),
    149: ("none", "crit", "NVLink network interface error: link events (NETIR_LINK_EVT/NETIR_LINK_DOWN) are link-fatal: "
                          "drain and reset the GPU; NETIR_BER_EVENT is nonfatal (check link signal integrity and cables)."),
    150: ("investigate", "err", "NVLink MSE (management firmware) error such as MSE_WATCHDOG: fatal, reset the GPU."),
}
NVLINK_NOTE = """\
144-150 (WORKFLOW_NVLINK5_ERR): per NVIDIA's decode table, Fatal units are RESET_GPU (except two
NETIR_LINK_EVT subcodes), Nonfatal ones IGNORE, or XID_154_EVAL (follow Xid 154, else restart the
application) for some RLW units; action is the Nonfatal case, fatal_action the Fatal one. severity
covers the Fatal case (the entry cannot tell them apart)."""


def _q(value: str | list[str]) -> str:
    """A TOML string or array of strings (JSON's escaping is valid TOML)."""
    return json.dumps(value, ensure_ascii=False)


def _entry(code: int, mnemonic: str, desc: str, immediate: str, investigatory: str, link: str) -> list[str]:
    """The lines of one ``[[entry]]`` (after its note, as comments) from a row of the table and observe's columns."""
    o = dict(OBSERVE.get(code, {}))
    unused = desc == "Unused" and immediate == "CONTACT_SUPPORT"
    if code in NVLINK:
        action, severity, meaning = NVLINK[code]
        o.update(category="nvlink", action=action, severity=severity, meaning=meaning, fatal_action="reset_gpu",
                 drivers=NVL5, **({"note": NVLINK_NOTE} if code == 144 else {}))
    name = o.pop("name", None) or (LEGACY.get(code, "Unused") if unused else desc)
    if unused:
        o.setdefault("action", "investigate")
        o.setdefault("category", "memory" if code in (57, 58) else "gpu")
        legacy = " The name is its meaning on older GPUs." if code in LEGACY else ""
        o.setdefault("meaning", "Not logged by Ampere and newer GPUs (NVIDIA: unused; contact support if seen)." + legacy)
    action = o.get("action") or BUCKET_ACTION.get(immediate)
    if action not in ORDER:
        raise ValueError(f"Xid {code}: action {action!r} (immediate {immediate!r}) not one of {', '.join(ORDER)}")
    app_unit = any(unit in mnemonic for unit in ("CE", "NVDEC", "NVJPG", "OFA"))
    category = o.get("category") or ("application" if immediate == "RESTART_APP" or app_unit else "gpu")
    meaning = o.get("meaning")
    if not meaning:
        if immediate != "RESTART_APP":
            raise ValueError(f"Xid {code}: no meaning")
        meaning = f"{desc}: restart the application; contact support if it recurs."
    drivers = o.get("drivers") or (LINK[link] if link else None)
    lines = [f"# {line}" for line in o.get("note", "").splitlines()]
    lines += ["[[entry]]", f"code = {code}", f"name = {_q(name)}", f"mnemonic = {_q(mnemonic)}",
              f"meaning = {_q(meaning)}", f"action = {_q(action)}"]
    if o.get("fatal_action"):
        lines.append(f"fatal_action = {_q(o['fatal_action'])}")
    if immediate:
        lines.append(f"immediate = {_q(immediate)}")
    if investigatory and not unused:
        lines.append(f"investigatory = {_q(investigatory)}")
    lines += [f"category = {_q(category)}", f"severity = {_q(o.get('severity') or SEVERITY[action])}"]
    if drivers:
        lines.append(f"drivers = {_q(drivers)}")
    return lines


def render(table: Path = TABLE) -> str:
    """The text of xid.toml generated from ``table``."""
    out = [HEADER, 'catalog = "gpu_xid"', 'key = "code"', f"attach = {_q(ATTACH)}",
           f"monotone = {_q(MONOTONE)}", f"order = {_q(ORDER)}", ""]
    for n, line in enumerate(table.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        row = line.split("|")
        if len(row) != 6 or not row[0].isdigit():
            raise ValueError(f"{table}:{n}: want code|mnemonic|description|immediate|investigatory|linkage")
        out += _entry(int(row[0]), *row[1:]) + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Rewrite xid.toml, or with ``--check`` return 1 (and say so) when it is not what :func:`render` gives."""
    parser = argparse.ArgumentParser(prog="python collectors/rules/xid_catalog.py",
                                     description="Generate collectors/rules/xid.toml from the Xid table.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when xid.toml is out of date")
    args = parser.parse_args(argv)
    text = render()
    if not args.check:
        CATALOG.write_text(text)
    elif not CATALOG.is_file() or CATALOG.read_text() != text:
        print(f"{CATALOG} is out of date with {TABLE.name} and collectors/rules/xid_catalog.py: run "
              "python collectors/rules/xid_catalog.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
