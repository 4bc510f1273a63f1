"""Health results and drain decisions as store events (source ``health``)."""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl


def health_events(rows: list[dict]) -> pl.DataFrame:
    """Events from dicts with node, kind, severity, message, attrs and file_id; stamped now unless a
    row has its own ``ts``, each with its own provenance offset."""
    now = datetime.now(timezone.utc)
    base = int(now.timestamp() * 1e6) * 64
    df = pl.DataFrame([{"ts": now, **r, "source": "health", "offset": base + i} for i, r in enumerate(rows)])
    return df.with_columns(pl.col("ts").dt.cast_time_unit("us"), pl.col("message").alias("raw"))
