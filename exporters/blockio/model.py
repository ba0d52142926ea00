"""What a blockio backend reads: per-device, per-op cumulative counts, and the bucket convention."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

OPS = ("read", "write", "flush", "discard")  # index = the op number in blockio.c

# Latency buckets: upper bounds 1 us * 2^k for k = 0..24 (1 us .. 16.8 s), then +Inf.
LAT_UNIT_NS = 1000
LAT_SLOTS = 26
# Size buckets: upper bounds 512 B * 2^k for k = 0..15 (512 B .. 16 MiB), then +Inf.
SIZE_UNIT = 512
SIZE_SLOTS = 17


def slot(value: int, unit: int, nslots: int) -> int:
    """The histogram slot of value, the same arithmetic as wb_slot() in wattbit_buckets.h."""
    units = -(-value // unit) if value > 0 else 0
    k = 0 if units <= 1 else (units - 1).bit_length()
    return min(k, nslots - 1)


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
    lat_slots: list[int] | None = None
    lat_sum_seconds: float = 0.0
    size_slots: list[int] | None = None
    size_sum_bytes: int = 0
    time_seconds: float | None = None  # diskstats' summed request time, fallback only


@dataclass
class DeviceStats:
    """Cumulative counts of one device."""

    ops: dict[str, OpStats] = field(default_factory=dict)
    busy_seconds: float = 0.0
    inflight: int = 0


class Backend(Protocol):
    """Where the per-device counts come from: BccBackend (eBPF) or DiskstatsBackend."""

    name: str  # the backend label of wattbit_blockio_backend_info

    def read(self) -> dict[str, DeviceStats]:
        """Cumulative per-device counts by kernel device name."""
        ...

    def missed_events(self) -> dict[str, int] | None:
        """Tracepoint events each BPF program skipped, by event; None: it runs no BPF program."""
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
