"""Per-disk block I/O telemetry: eBPF on the block-layer tracepoints, /proc/diskstats fallback."""
