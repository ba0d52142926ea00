"""Metric sources; each sub-package is one source. Never imports ``collector``."""
