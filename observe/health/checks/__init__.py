"""One module per health check; each has NAME and ``run(opts) -> Result``."""
