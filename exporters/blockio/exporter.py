"""The blockio exporter: picks a backend, joins it with the /sys topology, renders the metrics."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from exporters.base import Exporter, reusable
from exporters.hostfs import caps
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE, DiskInfo, SharedTopology, excluded
from exporters.hostfs.read import PROC_ROOT, SYS_ROOT

from .diskinfo import disk_info_metric
from .diskstats import DiskstatsBackend
from .lines import HistogramLines, SeriesLines
from .model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    OPS,
    SIZE_BOUNDS_BYTES,
    Backend,
    BackendUnavailable,
    DeviceStats,
)

log = logging.getLogger(__name__)

_SIZE_LE = (*(floatToGoString(b) for b in SIZE_BOUNDS_BYTES), "+Inf")


def le_labels(bounds: Sequence[float]) -> tuple[str, ...]:
    """The le label values of histogram bounds, +Inf last, as Go's client formats them."""
    return (*(floatToGoString(b) for b in bounds), "+Inf")


def open_backend(
    choice: str,
    max_inflight: int,
    sys_root: Path,
    proc_root: Path,
    lat_bounds: Sequence[float] = DEFAULT_LAT_BOUNDS_SECONDS,
    size_histogram: bool = False,
    core: Callable[[], Backend] | None = None,
) -> tuple[Backend, str]:
    """The backend to run and why not a better one: core (CO-RE, libbpf) where the kernel has
    BTF, else bcc, else /proc/diskstats; the reason is the first failure's short label.

    core: where the core backend comes from when it is tried (the agent's, built beforehand
    in a thread: collector/agent/early.py); by default it is built here.
    """
    if choice == "diskstats":
        return DiskstatsBackend(proc_root), "configured"
    reason = ""
    if choice in ("auto", "core"):
        try:
            if core is not None:
                return core(), ""
            from .core.backend import CoreBackend

            return CoreBackend(lat_bounds, size_histogram, sys_root, proc_root), ""
        except BackendUnavailable as exc:
            if choice == "core":
                raise
            log.warning("blockio: core backend unavailable, trying bcc: %s", exc.detail)
            reason = exc.reason
    try:
        from .bcc_backend import BccBackend

        backend = BccBackend(max_inflight, sys_root, proc_root, lat_bounds, size_histogram)
        return backend, reason
    except BackendUnavailable as exc:
        if choice == "bcc":
            raise
        log.warning("blockio: eBPF unavailable, falling back to /proc/diskstats: %s", exc.detail)
        return DiskstatsBackend(proc_root), reason or exc.reason


LAT_NAME = "wattbit_disk_io_latency_seconds"
SIZE_NAME = "wattbit_disk_io_size_bytes"


CLOCK_NAME = "wattbit_disk_io_latency_clock_info"


class Lines:
    """The busiest families' lines (every disk's, changed at every scrape under load), kept
    between renders (issue 35: lines.py)."""

    def __init__(self, lat_le: tuple[str, ...]) -> None:
        by_op = ("device", "op")
        self.lat = HistogramLines(LAT_NAME, lat_le)
        self.size = HistogramLines(SIZE_NAME, _SIZE_LE)
        self.bytes = SeriesLines("wattbit_disk_io_bytes", "counter", by_op)
        self.ios = SeriesLines("wattbit_disk_ios", "counter", by_op)
        self.errors = SeriesLines("wattbit_disk_io_errors", "counter", by_op)
        self.busy = SeriesLines("wattbit_disk_busy_seconds", "counter", ("device",))
        self.inflight = SeriesLines("wattbit_disk_inflight_requests", "gauge", ("device",))
        # one series per disk, the same scrape after scrape: its line kept, not re-built
        self.clock = SeriesLines(CLOCK_NAME, "gauge", ("device", "clock"))
        self.all: tuple[HistogramLines | SeriesLines, ...] = (self.lat, self.size, self.bytes)
        self.all += (self.ios, self.errors, self.busy, self.inflight, self.clock)

    def begin(self) -> None:
        """Start every family afresh."""
        for lines in self.all:
            lines.begin()


class TopologyCache:
    """/sys topology, re-read when stale or when a device we have not seen appears."""

    def __init__(
        self,
        sys_root: Path,
        ttl: float,
        clock: Callable[[], float],
        shared: SharedTopology | None = None,
    ) -> None:
        self.sys_root = sys_root
        self.ttl = ttl
        # the agent's, read by pcie too (issue 35); max_age 0: a read of its own every time
        self._source = shared if shared is not None else SharedTopology(sys_root, max_age=0.0)
        self._clock = clock
        self._at = float("-inf")
        self.infos: dict[str, DiskInfo] = {}

    def get(self, active: set[str]) -> dict[str, DiskInfo]:
        """The topology, fresh enough to describe every device in active (which did I/O)."""
        now = self._clock()
        # A device doing I/O that we have not seen, or saw unbound (a loop device attached
        # since), means /sys changed: re-read it now rather than at the next refresh.
        stale = any(n not in self.infos or self.infos[n].size_bytes == 0 for n in active)
        if now - self._at > self.ttl or stale:
            self.infos = self._source.read(force=stale)
            self._at = now
        return self.infos


class BlockioExporter(Exporter):
    """Per-disk latency and size histograms, bytes, I/Os, errors, busy time, topology."""

    name = "blockio"

    def __init__(
        self,
        backend: str = "auto",
        exclude: str = BLOCK_EXCLUDE,
        max_inflight: int = 65536,
        topology_refresh: float = 60.0,
        sys_root: Path = SYS_ROOT,
        proc_root: Path = PROC_ROOT,
        clock: Callable[[], float] = time.monotonic,
        latency_buckets: Sequence[float] = DEFAULT_LAT_BOUNDS_SECONDS,
        size_histogram: bool = False,
        topology: SharedTopology | None = None,
        core: Callable[[], Backend] | None = None,
    ) -> None:
        """core: the core backend built beforehand, if it was (open_backend)."""
        self.backend, self.reason = open_backend(
            backend, max_inflight, sys_root, proc_root, latency_buckets, size_histogram, core
        )
        self.lat_le = le_labels(latency_buckets)
        self.exclude = re.compile(exclude)
        self.topology = TopologyCache(sys_root, topology_refresh, clock, topology)
        # Devices still without a size after a fresh read (e.g. gone): don't re-read for them
        # on every scrape.
        self._unsized: set[str] = set()
        self._read_keep: frozenset[int] | None = None  # probed once, by kept_capabilities
        # The last render's inputs (a copy of every value: a backend may update its objects in
        # place) and its families, yielded again while the inputs are equal (issue 35)
        self._last: tuple[tuple[object, ...], tuple[Metric, ...]] | None = None
        self._lines = Lines(self.lat_le)
        # wattbit_disk_info and the DiskInfo it was built from (frozen: compared whole), yielded
        # again while they are equal: a host's disks rarely change, its scrapes come often
        self._info: tuple[tuple[DiskInfo, ...], Metric] | None = None

    def startup_note(self) -> str:
        """The backend in use, and why not eBPF if it is not ("backend: diskstats (missing
        CAP_BPF+CAP_PERFMON)"); the capability its map reads keep, if any."""
        note = f"backend: {self.backend.name}" + (f" ({self.reason})" if self.reason else "")
        if self._read_keep:
            kept = "+".join(caps.names(caps.mask(self._read_keep)))
            note += f"; keeps {kept} effective: {caps.bpf_read_reason()}"
        return note

    def kept_capabilities(self) -> frozenset[int]:
        """What the BPF backend's map reads need after the drop: CAP_BPF where this kernel
        refuses bpf() without it (caps.bpf_read_keep, tried once with a real read, before the
        drop); nothing for /proc/diskstats."""
        if self._read_keep is None:
            # the diskstats backend (and tests' fakes) read no BPF map
            probe = getattr(self.backend, "bpf_read_keep", None)
            self._read_keep = probe() if probe is not None else frozenset()
        return self._read_keep

    def kept_effective(self) -> dict[int, str]:
        """The map reads' capability (kept_capabilities), used by this process itself."""
        return {c: caps.bpf_read_reason() for c in self.kept_capabilities()}

    def close(self) -> None:
        """Detach BPF programs, if any."""
        self.backend.close()

    def _included(self, name: str, info: DiskInfo | None) -> bool:
        if self.exclude.search(name):
            return False
        if info is None:
            return True  # seen by the tracer: it is a real device even if /sys lags behind
        # Partitions carry no I/O of their own in either backend (request tracepoints report
        # the whole disk); unbound loop devices (size 0) are noise.
        return not info.parent and info.size_bytes > 0

    def collect(self) -> Iterator[Metric]:
        """Read the backend and yield every blockio metric family."""
        stats = self.backend.read()
        active = {n for n, d in stats.items() if any(o.ios or o.bytes for o in d.ops.values())}
        infos = self.topology.get(active - self._unsized)
        self._unsized = {n for n in active if n not in infos or infos[n].size_bytes == 0}
        devices = {
            name: dev for name, dev in stats.items() if self._included(name, infos.get(name))
        }
        missed, prog_stats = self.backend.missed_events(), self.backend.prog_stats()
        map_full = self.backend.map_full()
        key: tuple[object, ...] = (_stats_key(devices), self.backend.name, self.reason)
        key += (_items(missed), _items(prog_stats), _items(map_full))
        if self._last is None or self._last[0] != key:
            families = render(
                devices,
                self.backend.name,
                self.reason,
                missed,
                lat_le=self.lat_le,
                prog_stats=prog_stats,
                map_full=map_full,
                lines=self._lines,
            )
            self._last = (key, reusable(families))
        yield from self._last[1]
        shown = tuple(
            sorted(
                (i for i in infos.values() if i.size_bytes > 0 and not excluded(self.exclude, i)),
                key=lambda i: i.device,
            )
        )
        if self._info is None or self._info[0] != shown:
            self._info = (shown, reusable([disk_info_metric(shown)])[0])
        yield self._info[1]


def _items(d: Mapping[str, object] | None) -> tuple[tuple[str, object], ...] | None:
    return None if d is None else tuple(sorted(d.items()))


# OpStats' fields, in _stats_key's order (tests/unit/test_blockio_reuse.py holds them to the
# dataclass: a field added there and not here would be served stale)
STATS_KEY_FIELDS = (
    "ios",
    "bytes",
    "errors",
    "lat_slots",
    "lat_sum_seconds",
    "untimed",
    "unseen",
    "size_slots",
    "size_sum_bytes",
    "time_seconds",
)


def _stats_key(devices: Mapping[str, DeviceStats]) -> tuple[object, ...]:
    """Every value render() writes of these devices, copied: equal keys, equal output.

    Compared by ==, so a value that equals another but is written otherwise would be served
    as the other: none is here (counts and sums of the kernel's, never -0.0; NaN never
    equals, so it is rendered afresh).
    """
    return tuple(
        (
            name,
            d.busy_seconds,
            d.inflight,
            d.clock,
            tuple(
                (
                    op,
                    s.ios,
                    s.bytes,
                    s.errors,
                    None if s.lat_slots is None else tuple(s.lat_slots),
                    s.lat_sum_seconds,
                    s.untimed,
                    s.unseen,
                    None if s.size_slots is None else tuple(s.size_slots),
                    s.size_sum_bytes,
                    s.time_seconds,
                )
                for op, s in d.ops.items()
            ),
        )
        for name, d in sorted(devices.items())
    )


def _counter_by(
    name: str, documentation: str, label: str, counts: Mapping[str, int]
) -> CounterMetricFamily:
    """A counter family with one series per key of counts, in key order."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key in sorted(counts):
        family.add_metric([key], float(counts[key]))
    return family


def render(
    devices: dict[str, DeviceStats],
    backend: str,
    reason: str,
    missed: dict[str, int] | None = None,
    lat_le: tuple[str, ...] = le_labels(DEFAULT_LAT_BOUNDS_SECONDS),
    prog_stats: dict[str, tuple[int, int]] | None = None,
    map_full: dict[str, int] | None = None,
    lines: Lines | None = None,
) -> Iterator[Metric]:
    """The metric families of a set of device statistics (pure but for ``lines``, what the
    last render wrote: new ones when not given; used by tests and bench)."""
    labels = ["device", "op"]
    w = Lines(lat_le) if lines is None else lines
    w.begin()
    untimed = CounterMetricFamily(
        "wattbit_disk_io_untimed",
        "Completions counted but not in the latency histogram (no timestamp of the "
        "device's clock); only where some were.",
        labels=labels,
    )
    unseen = CounterMetricFamily(
        "wattbit_disk_ios_unseen",
        "Completions /proc/diskstats counted that the BPF program was not run for (core "
        "backend; read, write, discard); only where some were.",
        labels=labels,
    )
    io_time = CounterMetricFamily(
        "wattbit_disk_io_time_seconds",
        "Summed time requests spent, from /proc/diskstats (fallback backend only).",
        labels=labels,
    )
    for name in sorted(devices):
        dev = devices[name]
        w.busy.add((name,), dev.busy_seconds)
        w.inflight.add((name,), float(dev.inflight))
        if dev.clock is not None:
            w.clock.add((name, dev.clock), 1.0)
        for op in OPS:
            s = dev.ops.get(op)
            # An op a device never did has no series: 48 disks x 4 ops of zeros cost
            # thousands of series for nothing.
            if s is None or (s.ios == 0 and s.bytes == 0 and not s.errors and not s.unseen):
                continue
            lv = [name, op]  # for the rare families below
            w.bytes.add((name, op), float(s.bytes))
            w.ios.add((name, op), float(s.ios))
            if s.errors is not None:
                w.errors.add((name, op), float(s.errors))
            if s.time_seconds is not None:
                io_time.add_metric(lv, s.time_seconds)
            if s.lat_slots is not None:
                w.lat.add(name, op, s.lat_slots, s.lat_sum_seconds)
            if s.untimed:
                untimed.add_metric(lv, float(s.untimed))
            if s.unseen:
                unseen.add_metric(lv, float(s.unseen))
            if s.size_slots is not None:
                w.size.add(name, op, s.size_slots, float(s.size_sum_bytes))
    backend_info = GaugeMetricFamily(
        "wattbit_blockio_backend_info",
        "The blockio backend in use (core, bcc or diskstats) and why not a better one.",
        labels=["backend", "reason"],
    )
    backend_info.add_metric([backend, reason], 1.0)
    lat = w.lat.family(
        "Block I/O latency until completion, from issue to the device or, where "
        "wattbit_disk_io_latency_clock_info says clock=queue, from queueing."
    )
    size = w.size.family("Size of block I/O requests.")
    clock = w.clock.family(
        "What the device's latency histogram measures: device (issue to the device until "
        "completion) or queue (queueing until completion, as iostat's await)."
    )
    yield from (
        lat,
        w.bytes.family("Bytes completed by the device."),
        w.ios.family("Requests completed by the device."),
        w.errors.family("Requests completed with an error."),
        w.busy.family("Time with at least one request in flight on the device."),
        w.inflight.family("Requests issued and not yet completed."),
        backend_info,
    )
    if size.count:
        yield size
    if clock.count:
        yield clock
    if untimed.samples:
        yield untimed
    if unseen.samples:
        yield unseen
    yield from _bpf_families(prog_stats, missed, map_full)
    if io_time.samples:
        yield io_time


def _bpf_families(
    prog_stats: dict[str, tuple[int, int]] | None,
    missed: dict[str, int] | None,
    map_full: dict[str, int] | None,
) -> Iterator[Metric]:
    """The BPF program's own cost and losses, where the backend has them (None: no family)."""
    if prog_stats is not None:
        run_time = CounterMetricFamily(
            "wattbit_blockio_bpf_run_seconds",
            "Kernel time spent in the agent's BPF program (counted while "
            "kernel.bpf_stats_enabled=1).",
            labels=["program"],
        )
        runs = CounterMetricFamily(
            "wattbit_blockio_bpf_runs",
            "Runs of the agent's BPF program (counted while kernel.bpf_stats_enabled=1).",
            labels=["program"],
        )
        for prog in sorted(prog_stats):
            ns, count = prog_stats[prog]
            run_time.add_metric([prog], ns / 1e9)
            runs.add_metric([prog], float(count))
        yield from (run_time, runs)
    if missed is not None:
        yield _counter_by(
            "wattbit_blockio_bpf_missed_events",
            "Tracepoint events the kernel skipped because another BPF program was running on "
            "the CPU (the program's recursion_misses).",
            "event",
            missed,
        )
    if map_full is not None:
        yield _counter_by(
            "wattbit_blockio_bpf_map_full",
            "Updates of the agent's BPF maps that failed because the map was full: "
            "completions not counted (map=stats) or requests not timed (map=start).",
            "map",
            map_full,
        )
