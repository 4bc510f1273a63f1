"""``python -m observe.health.worker CHECK``: run one check with JSON options from stdin and print
its result as one JSON line (what :mod:`observe.health.runner` runs in a child process)."""
from __future__ import annotations

import importlib
import json
import sys
import time

from observe.health.result import unknown


def main() -> None:
    name = sys.argv[1]
    opts = json.loads(sys.stdin.read() or "{}")
    started = time.monotonic()
    try:
        module = importlib.import_module(f"observe.health.checks.{name}")
        result = module.run(opts)
    except Exception as exc:  # noqa: BLE001 - any internal error is UNKNOWN, never a FAIL
        result = unknown(name, f"internal error: {type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - started
    print(result.to_json(), flush=True)


if __name__ == "__main__":
    main()
