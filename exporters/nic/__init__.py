"""Network telemetry: per-interface and per-queue counters (sysfs, netlink queue stats, ethtool),
queue IRQ -> CPU placement, softirqs and softnet per CPU, and TCP counters."""
