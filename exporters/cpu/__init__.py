"""Per-CPU time by mode from /proc/stat for hosts without node_exporter (docs/exporters/pcie.md)."""
