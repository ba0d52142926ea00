"""The eBPF backend: loads blockio.c with bcc and reads its maps (never clearing them)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..hostfs import caps
from .bpfshared import LiveDisks, fdinfo, kernel_at_least, prog_stats, sum_percpu
from .diskstats import DiskstatsBackend
from .layout import CLOCK_DEVICE, Layout
from .model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    OPS,
    SIZE_SLOTS,
    SIZE_UNIT,
    BackendUnavailable,
    DeviceStats,
    OpStats,
    caps_reason,
)
from .unseen import Unseen

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "blockio.c"
TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))


def _tracefs_ready() -> bool:
    for d in TRACEFS_DIRS:
        try:
            if (d / "events" / "block" / "block_rq_issue").is_dir():
                return True
        except PermissionError:
            # tracefs is mode 0700 root: bcc finds its tracepoints' ids there, which a process
            # holding only CAP_BPF and CAP_PERFMON cannot read (the core backend needs none).
            raise BackendUnavailable(
                "tracefs unreadable",
                f"{d} is readable by root only; bcc reads its tracepoint ids there "
                "(the core backend, on kernels with BTF, does not need it)",
            ) from None
    return False


def ensure_tracefs() -> None:
    """Mount tracefs if nothing is mounted (minimal systems); raise if the events are missing."""
    if _tracefs_ready():
        return
    # Mounting is what `perf` and bcc's tools expect the admin to have done; doing it here
    # saves a confusing fallback on hosts that simply never mounted it.
    subprocess.run(
        ["mount", "-t", "tracefs", "tracefs", str(TRACEFS_DIRS[0])],
        capture_output=True,
        check=False,
    )
    if not _tracefs_ready():
        raise BackendUnavailable(
            "no block tracepoints",
            "tracefs is not mounted (or has no block/block_rq_issue event) and mounting "
            f"it at {TRACEFS_DIRS[0]} failed",
        )


def percpu_stats_safe(release: str | None = None) -> bool:
    """Whether this kernel (6.1 or later) lets tracing programs use run-time allocated maps."""
    # Before 6.1 (bpf_mem_alloc) the verifier accepts them with a WARN_ONCE, a panic under
    # panic_on_warn, and PREEMPT_RT refuses them: blockio.c then keeps its shared,
    # preallocated statistics map. A backport we cannot see only costs the speed-up.
    return kernel_at_least(6, 1, release)


def lat_slot_macro(bounds_seconds: Sequence[float]) -> str:
    """LAT_SLOT(v) for blockio.c: how many bounds lie below v ns (Prometheus' le: the slot
    whose bound is the first >= v), as a sum of comparisons."""
    terms = " + ".join(f"((v) > {round(b * 1e9)}ULL)" for b in bounds_seconds)
    return f"-DLAT_SLOT(v)=({terms})"


MAX_STATS = 8192  # (device, op) pairs in the statistics map


def cflags(
    max_inflight: int,
    percpu_stats: bool | None = None,
    lat_bounds_seconds: Sequence[float] = DEFAULT_LAT_BOUNDS_SECONDS,
    max_stats: int = MAX_STATS,
) -> list[str]:
    """The compile flags that size blockio.c's maps and histograms (and pick the stats map)."""
    flags = [
        f"-I{HERE}",
        f"-DLAT_SLOTS={len(lat_bounds_seconds) + 1}",
        lat_slot_macro(lat_bounds_seconds),
        f"-DSIZE_SLOTS={SIZE_SLOTS}",
        f"-DSIZE_UNIT={SIZE_UNIT}ULL",
        f"-DMAX_INFLIGHT={max_inflight}",
        f"-DMAX_STATS={max_stats}",
    ]
    if percpu_stats_safe() if percpu_stats is None else percpu_stats:
        flags.append("-DPERCPU_STATS")
    return flags


def check_layout(leaf: Any, layout: Layout) -> None:
    """Raise if bcc compiled struct stat_val other than layout.py describes it."""
    got = {name: getattr(leaf, name).offset // 8 for name, *_ in leaf._fields_}
    want = {name: start for name, (start, _) in layout.offsets().items()}
    if got != want or ctypes.sizeof(leaf) != layout.words * 8:
        raise BackendUnavailable(
            "bpf load failed", f"{SOURCE.name}: struct stat_val is not layout.py's: {got}"
        )


class BccBackend:
    """Per-request latency, size, I/Os, bytes and errors from the block-layer tracepoints."""

    name = "bcc"

    def __init__(
        self,
        max_inflight: int = 65536,
        sys_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        lat_bounds_seconds: Sequence[float] = DEFAULT_LAT_BOUNDS_SECONDS,
        size_histogram: bool = False,
        max_stats: int = MAX_STATS,
    ) -> None:
        """max_stats: the statistics map's size (tests fill a small one)."""
        missing = caps.bpf_tracing_missing(caps.current().effective)
        if missing:
            raise BackendUnavailable(
                caps_reason(missing),
                f"loading and attaching tracing BPF programs needs {' and '.join(missing)}, "
                "which this process does not hold (docs/privileges.md)",
            )
        ensure_tracefs()
        try:
            from bcc import BPF
        except ImportError as exc:
            raise BackendUnavailable(
                "bcc not installed",
                f"cannot import bcc ({exc}); install Debian's python3-bpfcc and use a "
                "virtualenv with --system-site-packages",
            ) from exc
        try:
            self.bpf: Any = BPF(
                src_file=str(SOURCE).encode(),
                cflags=cflags(
                    max_inflight, lat_bounds_seconds=lat_bounds_seconds, max_stats=max_stats
                ),
            )
        except Exception as exc:
            # bcc prints the compiler's errors on stderr; the exception says which step failed.
            raise BackendUnavailable(
                "bpf load failed",
                f"compiling or loading {SOURCE.name} failed ({exc}); are kernel headers "
                f"present at /lib/modules/{os.uname().release}/build?",
            ) from exc
        self.lat_slots = len(lat_bounds_seconds) + 1
        self.layout = Layout(clocks=1, lat_slots=self.lat_slots, size_slots=SIZE_SLOTS)
        table = self.bpf[b"stats"]
        # A per-CPU table's Leaf is stat_val * CPUs (sLeaf is stat_val); a shared one's is
        # stat_val, which sum_percpu sums as one CPU.
        check_layout(getattr(table, "sLeaf", table.Leaf), self.layout)
        self.size_histogram = size_histogram
        self.disks = LiveDisks(sys_root)
        self.diskstats = DiskstatsBackend(proc_root)
        # Baseline the kernel's counts after the attach (unseen.py; docs/exporters/blockio.md)
        self.unseen = Unseen()
        self.unseen.start(self.diskstats.read())

    def _fds(self) -> list[tuple[str, int]]:
        out = []
        for fn_name, fn in self.bpf.funcs.items():
            name = fn_name.decode() if isinstance(fn_name, bytes) else str(fn_name)
            out.append((name.rsplit("__", 1)[-1].removeprefix("block_rq_"), fn.fd))
        return out

    def bpf_read_keep(self) -> frozenset[int]:
        """The capability the map reads need after the drop (caps.bpf_read_keep), found by one
        real read of the stats table without it (its first key: BPF_MAP_GET_NEXT_KEY)."""
        from bcc import libbcc

        table = self.bpf[b"stats"]

        def first_key() -> None:
            key = table.Key()
            ptr = ctypes.cast(ctypes.pointer(key), ctypes.c_void_p)
            if libbcc.lib.bpf_get_first_key(table.map_fd, ptr, ctypes.sizeof(key)) < 0:
                err = ctypes.get_errno()
                if err != errno.ENOENT:  # an empty table is a read that worked
                    raise OSError(err, os.strerror(err))

        return caps.bpf_read_keep(first_key)

    def missed_events(self) -> dict[str, int]:
        """Events each program skipped because another BPF program ran on the CPU."""
        return {event: fdinfo(fd).get("recursion_misses", 0) for event, fd in self._fds()}

    def read(self) -> dict[str, DeviceStats]:
        """Cumulative per-device statistics since the program was loaded."""
        out: dict[str, DeviceStats] = {}
        # /proc/diskstats before the maps (unseen.py): busy time and in flight, and the
        # kernel's completions the program's are compared with
        kernel = self.diskstats.read()
        table = self.bpf[b"stats"]
        lay = self.layout
        ios, nbytes, errors = lay.at("ios"), lay.at("bytes"), lay.at("errors")
        lat, lat_sum = lay.at("lat", CLOCK_DEVICE), lay.at("lat_sum_ns", CLOCK_DEVICE)
        size, size_sum = lay.at("size"), lay.at("size_sum")
        rows = [(key, sum_percpu(percpu, lay.words)) for key, percpu in table.items()]
        # The tracepoints carry no diskseq: every entry is (dev, 0), and LiveDisks tells a
        # re-created disk by its diskseq in /sys changing between reads.
        seen: dict[tuple[int, int], int] = {}
        for key, val in rows:
            seen[(key.dev, 0)] = seen.get((key.dev, 0), 0) + val[ios]
        live = self.disks.live(seen)
        for key, val in rows:
            name = live.get((key.dev, 0))
            if name is None:
                # Gone (or superseded): no completion can come for it any more.
                with contextlib.suppress(KeyError):
                    del table[key]
                continue
            if key.op >= len(OPS):
                continue
            dev = out.setdefault(name, DeviceStats(clock="device"))
            dev.ops[OPS[key.op]] = OpStats(
                ios=val[ios],
                bytes=val[nbytes],
                errors=val[errors],
                lat_slots=val[lat : lat + self.lat_slots],
                lat_sum_seconds=val[lat_sum] / 1e9,
                size_slots=val[size : size + SIZE_SLOTS] if self.size_histogram else None,
                size_sum_bytes=val[size_sum],
            )
        # Busy time and in-flight from the kernel's accounting (see blockio.c for why).
        for name, row in kernel.items():
            dev = out.setdefault(name, DeviceStats())
            dev.busy_seconds = row.busy_seconds
            dev.inflight = row.inflight
        # Completions the tracepoint did not run the program for (unseen.py): the same
        # account as the core backend's. The identity is (dev, 0): a re-created disk is left
        # out of one read by LiveDisks, which drops its baseline there.
        counted = {
            name: (ident, {op: s.ios for op, s in out[name].ops.items()})
            for ident, name in live.items()
            if name in out
        }
        for name, per_op in self.unseen.update(kernel, counted).items():
            for op_name, count in per_op.items():
                if count:
                    out[name].ops.setdefault(op_name, OpStats(errors=0)).unseen = count
        return out

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """run_time_ns and run_cnt of each program, when the kernel counts them."""
        return prog_stats(self._fds())

    def map_full(self) -> dict[str, int]:
        """Completions not counted because the statistics map was full (the start map is an
        LRU: when full it evicts, and an evicted request is only untimed)."""
        table = self.bpf[b"map_full"]
        return {"stats": int(table[table.Key(0)].value)}

    def close(self) -> None:
        """Detach the programs and free the maps."""
        self.bpf.cleanup()
        self.disks.close()
