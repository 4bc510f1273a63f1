"""How long NCCL's InfiniBand transport rides out a link that is down before it fails the job's work, as the job's
own output sets it: a link back up sooner flapped under NCCL and cannot have failed the job.

Each work request is retried ``NCCL_IB_RETRY_CNT`` times after its first try, each after the queue pair's local ACK
timeout, ``4.096 us x 2^NCCL_IB_TIMEOUT`` (the InfiniBand spec's encoding that ibv_modify_qp takes):
source: NVIDIA/nccl src/transport/net_ib.cc ncclIbRtsQp (2.3-2.30): qpAttr.timeout = ncclParamIbTimeout();
  qpAttr.retry_cnt = ncclParamIbRetryCnt(); NCCL_PARAM(IbTimeout, "IB_TIMEOUT", 14) in 2.3-2.14, 18 in 2.15-2.24,
  20 since 2.25; NCCL_PARAM(IbRetryCnt, "IB_RETRY_CNT", 7) throughout (0.5 s, 8.6 s and 34 s in all).
source: NVIDIA/nccl src/misc/param.cc (2.12+): INFO(NCCL_ENV,"%s set by environment to %lld.", env, value);
  src/init.cc VERSION_STRING "NCCL version %d.%d.%d%s+cuda%d.%d"; PyTorch's NCCL errors end ", NCCL version x.y.z"
  (torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclVersion).
"""
from __future__ import annotations

from datetime import timedelta

import polars as pl

ACK_TIMEOUT_S = 4.096e-6
DEFAULT_RETRY_CNT = 7
DEFAULT_IB_TIMEOUT = [((2, 25), 20), ((2, 15), 18), ((0, 0), 14)]  # (first version, NCCL_IB_TIMEOUT), newest first
VERSION = r"NCCL version (\d+)\.(\d+)\.\d+"


def _env(own: pl.DataFrame, name: str) -> int | None:
    """The value the job's NCCL says its environment set for ``name`` (the last it printed)."""
    found = own.select(pl.col("message").str.extract(rf"\b{name} set by environment to (\d{{1,3}})\b", 1)
                       .cast(pl.Int64, strict=False).drop_nulls().last()).item()
    return int(found) if found is not None else None


def retry_span(own: pl.DataFrame) -> timedelta | None:
    """How long the job's NCCL retries an IB link (``own``: the job's output events), from the timeout and retry
    count its environment set, else its version's defaults; None when its output names neither."""
    if own.is_empty() or "message" not in own.columns:
        return None
    timeout = _env(own, "NCCL_IB_TIMEOUT")
    if timeout is None:
        version = own.select(pl.col("message").str.extract_groups(VERSION).alias("v")).unnest("v").drop_nulls()
        if version.is_empty():
            return None
        major, minor = (int(v) for v in version.row(0))
        timeout = next(t for first, t in DEFAULT_IB_TIMEOUT if (major, minor) >= first)
    if not 0 < timeout <= 31:  # a 5-bit field; 0 waits forever
        return None
    retries = _env(own, "NCCL_IB_RETRY_CNT")
    tries = min(DEFAULT_RETRY_CNT if retries is None else retries, 7) + 1  # a 3-bit field
    return timedelta(seconds=ACK_TIMEOUT_S * 2 ** timeout * tries)
