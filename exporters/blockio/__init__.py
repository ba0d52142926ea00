"""Per-disk block I/O telemetry: a CO-RE eBPF program on the block-layer tracepoints (bcc where
the kernel has no BTF), /proc/diskstats as the last fallback, and wattbit_disk_info."""
