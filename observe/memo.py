"""``once``: functools.cache for what threads share. functools.cache computes a value again in every
thread that asks before the first has stored it: ingest's parse threads, started together, each loaded
and compiled the 109 rules (four loads where one does)."""
from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache, wraps
from typing import TypeVar

T = TypeVar("T")


def once(f: Callable[..., T]) -> Callable[..., T]:
    """``f`` cached per arguments; a caller that asks while another computes the value waits for it."""
    cached = cache(f)
    lock = threading.RLock()  # re-entrant: a cached function may call itself with other arguments

    @wraps(f)
    def wrapper(*args, **kwargs):
        with lock:
            return cached(*args, **kwargs)

    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper
