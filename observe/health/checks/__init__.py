"""One module per health check; each has NAME and ``run(opts) -> Result``. A check is added by adding
its module here (and its section in ``observe/health/policy.toml``): ``NAMES`` lists them."""
from __future__ import annotations

import pkgutil

NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))
