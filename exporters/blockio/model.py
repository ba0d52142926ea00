"""What a blockio backend reads: per-device, per-op cumulative counts, and the bucket convention."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

OPS = ("read", "write", "flush", "discard")  # index = the op number in blockio.c

# The bcc program's own fine latency slots (upper bounds 1 us * 2^k, k = 0..24, then +Inf),
# kept for its bucket tests; the exported buckets are the configured bounds below.
LAT_UNIT_NS = 1000
LAT_SLOTS = 26
# Exported latency bounds by default: 1-2-5 per decade from 10 us to 1 s (16 bounds, then
# +Inf), log-spaced so a quantile's interpolation error is at most a factor 2.5 anywhere
# between an NVMe read and a struggling disk. Why 16: the series budget (docs/exporters/
# blockio.md): 48 disks doing reads and writes export 48 x (4 + 2 x (16 + 3 + 3)) = 2,304
# series, under 2,500. Configurable (blockio.latency_buckets), up to MAX_LAT_BOUNDS.
DEFAULT_LAT_BOUNDS_SECONDS: tuple[float, ...] = (
    10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6,
    1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3,
    1.0,
)  # fmt: skip
MAX_LAT_BOUNDS = 32  # LAT_MAX_BOUNDS in core/blockio.bpf.c
# Size buckets: upper bounds 512 B * 2^k for k = 0..15 (512 B .. 16 MiB), then +Inf.
SIZE_UNIT = 512
SIZE_SLOTS = 17


def slot(value: int, unit: int, nslots: int) -> int:
    """The histogram slot of value, the same arithmetic as wb_slot() in wattbit_buckets.h."""
    units = -(-value // unit) if value > 0 else 0
    k = 0 if units <= 1 else (units - 1).bit_length()
    return min(k, nslots - 1)


def bound_slot(value: int, bounds: list[int]) -> int:
    """The slot of value among sorted upper bounds (len(bounds) is +Inf): wb_bound_slot() in
    wattbit_buckets.h and LAT_SLOT in blockio.c do the same arithmetic."""
    return bisect.bisect_left(bounds, value)


def upper_bounds(unit: float, nslots: int) -> list[float]:
    """The finite upper bounds (in unit's own scale) of slots 0..nslots-2."""
    return [unit * (1 << k) for k in range(nslots - 1)]


LAT_BOUNDS_SECONDS = upper_bounds(LAT_UNIT_NS / 1e9, LAT_SLOTS)
SIZE_BOUNDS_BYTES = upper_bounds(float(SIZE_UNIT), SIZE_SLOTS)


@dataclass
class OpStats:
    """Cumulative counts of one (device, op); histograms are per-slot counts, not cumulative."""

    ios: int = 0
    bytes: int = 0
    errors: int | None = None  # None: the backend cannot see errors
    lat_slots: list[int] | None = None  # one per configured bound, then +Inf
    lat_sum_seconds: float = 0.0
    untimed: int = 0  # completions not in the histogram (no timestamp of the device's clock)
    unseen: int = 0  # completions the kernel counted that the BPF program was not run for
    size_slots: list[int] | None = None
    size_sum_bytes: int = 0
    time_seconds: float | None = None  # diskstats' summed request time, fallback only


@dataclass
class DeviceStats:
    """Cumulative counts of one device."""

    ops: dict[str, OpStats] = field(default_factory=dict)
    busy_seconds: float = 0.0
    inflight: int = 0
    # What the latency histogram measures: "device" (issue to the device until completion)
    # or "queue" (queue + device: allocation until completion, as iostat's await); None
    # while the device has no timed request yet.
    clock: str | None = None


class Backend(Protocol):
    """Where the per-device counts come from: BccBackend (eBPF) or DiskstatsBackend."""

    name: str  # the backend label of wattbit_blockio_backend_info
    size_histogram: bool  # whether read() fills size_slots

    def read(self) -> dict[str, DeviceStats]:
        """Cumulative per-device counts by kernel device name."""
        ...

    def missed_events(self) -> dict[str, int] | None:
        """Tracepoint events each BPF program skipped, by event; None: it runs no BPF program."""
        ...

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """Per program, (run_time_ns, run_cnt) as kernel.bpf_stats_enabled counts them; None:
        no BPF program, or the statistics are off."""
        ...

    def map_full(self) -> dict[str, int] | None:
        """Per BPF map, updates that failed because it was full; None: no BPF maps."""
        ...

    def close(self) -> None:
        """Release kernel resources."""
        ...


class BackendUnavailable(Exception):
    """A backend cannot run here; reason is a short, fixed label value, detail is for the log."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail or reason
        super().__init__(self.detail)


def caps_reason(missing: list[str]) -> str:
    """The reason label for missing capabilities ("missing CAP_BPF+CAP_PERFMON"): bounded, as
    the names come from exporters.hostfs.caps' fixed list."""
    return "missing " + "+".join(missing)
