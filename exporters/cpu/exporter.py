"""The cpu exporter (opt-in): node_exporter's node_cpu_seconds_total as wattbit_cpu_seconds_total.

For hosts without node_exporter, so rules can still join per-CPU busy time with the agent's
IRQ -> CPU series. Names and semantics are node_exporter's cpu collector's
(collector/cpu_linux.go over prometheus/procfs ProcStat): labels cpu ("0", "1", … as the
kernel numbers them) and mode, seconds = USER_HZ ticks / 100, guest and guest_nice not
exported (the kernel already counts them in user and nice), and idle and iowait never go
backwards (the kernel's can, on NO_HZ accounting; node_exporter keeps the last value then).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs.numbers import note_malformed, parse_u64
from exporters.hostfs.read import PROC_ROOT, read_proc

# /proc/stat "cpuN" columns in order (Documentation/filesystems/proc.rst, "1.7 Miscellaneous
# kernel statistics in /proc/stat"); older kernels print fewer (steal: 2.6.11).
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_MONOTONIC = ("idle", "iowait")
# procfs fixes USER_HZ at 100, as the kernel does for every architecture's /proc/stat
# (include/asm-generic/param.h USER_HZ); sysconf(_SC_CLK_TCK) says the same where asked.
USER_HZ = 100


def parse_proc_stat(text: str) -> dict[int, dict[str, float]]:
    """{cpu: {mode: seconds}} from /proc/stat text; malformed cpuN lines are skipped."""
    out: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        label, *fields = line.split()
        cpu = parse_u64(label[3:])
        values = [parse_u64(f) for f in fields[: len(MODES)]]
        if cpu is None or cpu >= 1 << 32 or len(values) < 4 or None in values:
            note_malformed("/proc/stat cpu line")
            continue
        out[cpu] = {m: v / USER_HZ for m, v in zip(MODES, values, strict=False) if v is not None}
    return out


class CpuExporter(Exporter):
    """Reads /proc/stat on each scrape."""

    name = "cpu"

    def __init__(self, proc_root: Path = PROC_ROOT) -> None:
        self.proc_root = proc_root
        self._last: dict[int, dict[str, float]] = {}

    def _text(self) -> str:
        return read_proc(self.proc_root / "stat")  # ~150 bytes per CPU

    def collect(self) -> Iterator[Metric]:
        """One series per online CPU and mode."""
        stats = parse_proc_stat(self._text())
        for cpu, modes in stats.items():
            last = self._last.get(cpu, {})
            for mode in _MONOTONIC:
                if mode in modes and modes[mode] < last.get(mode, 0.0):
                    modes[mode] = last[mode]  # node_exporter: "CPU Idle counter jumped backwards"
        self._last = stats  # offline CPUs leave, as their lines do
        family = CounterMetricFamily(
            "wattbit_cpu_seconds",
            "Seconds each CPU spent in each mode (/proc/stat, as node_cpu_seconds_total).",
            labels=["cpu", "mode"],
        )
        for cpu in sorted(stats):
            for mode, seconds in stats[cpu].items():
                family.add_metric([str(cpu), mode], seconds)
        yield family
