"""What the kernel prints before a message, read from kernel lines whatever carried them (dmesg,
/dev/kmsg, a syslog, the journal): the ``[uptime]`` stamp and the device a line is about. A private
helper of the collectors (discovery skips ``_`` modules)."""
from __future__ import annotations

import polars as pl

from observe.frames import attrs_json, merge_attrs, scatter_rows

UPTIME = r"^\[\s*(\d+\.\d+)\]\s?"


def kernel_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Kernel rows' leading ``[ 12.345678]`` into attrs.uptime, then their device prefix (see
    :func:`kernel_device`): one gather and one scatter of the kernel rows, the others untouched."""
    rows = df.select((pl.col("source") == "kernel").fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    for name, dtype in (("pid", pl.Int64), ("gpu", pl.String), ("attrs", pl.String)):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=dtype).alias(name))
    msg = pl.col("message")
    part = df.select("message", "attrs", "pid", "gpu").gather(rows).with_columns(
        pl.when(msg.str.starts_with("[")).then(msg.str.extract(UPTIME, 1)).alias("_up"))
    part = part.with_columns(
        pl.when(pl.col("_up").is_not_null()).then(msg.str.replace(UPTIME, "")).otherwise(msg).alias("message"),
        merge_attrs(pl.col("attrs"), attrs_json([("uptime", pl.col("_up"))])).alias("attrs"),
    ).drop("_up")
    return scatter_rows(df, rows, kernel_device(part))


# The device a kernel line is about, from the prefix its printing helper puts before the message:
# source: torvalds/linux drivers/base/core.c __dev_printk (v3.x-v6.x): dev_printk_emit(level, dev,
#   "%s %s: %pV", dev_driver_string(dev), dev_name(dev), vaf): "<driver> <dev_name>: " ("mlx5_core
#   0000:03:00.0: ", "pcieport 0000:00:03.0: "; a PCI device's dev_name is its "%04x:%02x:%02x.%d"
#   address: attrs.pci). A device without a driver prints its class name: an InfiniBand device on
#   itself "infiniband rxe0: " (rdma_rxe, drivers/infiniband/sw/rxe/rxe_net.c dev_info(&rxe->ib_dev.dev,
#   "set active\n")): attrs.device.
# source: torvalds/linux drivers/infiniband/core/device.c __ibdev_printk (v5.1+): dev_printk_emit(level,
#   ibdev->dev.parent, "%s %s %s: %pV", dev_driver_string(parent), dev_name(parent), dev_name(&ibdev->dev),
#   vaf): "mlx5_core 0000:ab:00.0 mlx5_5: " (attrs.pci, attrs.device).
# source: torvalds/linux drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.h mlx5_core_err/_dbg/_info
#   (v4.x-v6.x): dev_err(dev, "%s:%d:(pid %d): " format, __func__, __LINE__, current->pid): the task
#   that printed (pid), after the device prefix ("mlx5_core_warn": "%s:%s:%d:(pid %d): " with the name).
# source: NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/include/os-interface.h NV_DEV_PRINTF:
#   nv_printf(level, "NVRM: GPU " NV_PCI_DEV_FMT ": " format, ...), NV_PCI_DEV_FMT "%04x:%02x:%02x.%x"
#   (kernel-open/common/inc/nv.h): the GPU (gpu); so is the device of the nvidia driver's own dev_printk lines
#   ("nvidia 0000:3b:00.0: ...", the driver string "nvidia").
PCI_ADDRESS = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
DEVICE_PREFIX = (
    r"^\s*(?:(?P<driver>[\w.-]+) (?P<pci>" + PCI_ADDRESS + r")(?: (?P<ibdev>[\w.-]+))?|infiniband (?P<classdev>[\w.-]+)): "
    r"(?:(?:[\w.-]+:)?\w+:\d+:\(pid (?P<dpid>\d+)\): )?"
)
NVRM_GPU = r"^NVRM: GPU (?P<nvgpu>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
_DEVICE_LINE = r"^\s*(?:[\w.-]+ [0-9a-f]{4}:[0-9a-f]{2}:|infiniband [\w.-]+: |NVRM: GPU [0-9a-fA-F]{4}:)"


def kernel_device(df: pl.DataFrame) -> pl.DataFrame:
    """Kernel lines' device prefix (see DEVICE_PREFIX) into attrs.pci and attrs.device, the mlx5
    printer's pid into pid, an NVRM GPU prefix or the nvidia driver's device into gpu (only the lines
    that have one are touched)."""
    for name, dtype in (("pid", pl.Int64), ("gpu", pl.String), ("attrs", pl.String)):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=dtype).alias(name))
    rows = df.select(pl.col("message").str.contains(_DEVICE_LINE).fill_null(False)).to_series().arg_true()
    if not len(rows):
        return df
    msg = pl.col("message")
    part = df.select("message", "attrs", "pid", "gpu").gather(rows).with_columns(
        msg.str.extract_groups(DEVICE_PREFIX).alias("_d"), msg.str.extract(NVRM_GPU, 1).alias("_gpu")).unnest("_d")
    fixed = part.select(
        merge_attrs(pl.col("attrs"), attrs_json([("pci", pl.col("pci")),
                                                 ("device", pl.coalesce("ibdev", "classdev"))])).alias("attrs"),
        pl.coalesce(pl.col("pid"), pl.col("dpid").cast(pl.Int64, strict=False)).alias("pid"),
        pl.coalesce(pl.col("gpu"), pl.col("_gpu"),
                    pl.when(pl.col("driver") == "nvidia").then(pl.col("pci"))).alias("gpu"),
    )
    return scatter_rows(df, rows, fixed)
