"""The core backend: blockio.bpf.o (compiled once at install) loaded through libbpf, CO-RE
against the running kernel's BTF; no LLVM and no kernel headers at run time."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import operator
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ...hostfs import caps, libbpf
from ..bpfshared import Identity, LiveDisks, fdinfo, kernel_at_least, prog_stats, sum_percpu
from ..diskstats import DiskstatsBackend
from ..layout import CLOCK_DEVICE, CLOCK_QUEUE, Layout
from ..model import (
    MAX_LAT_BOUNDS,
    OPS,
    SIZE_SLOTS,
    BackendUnavailable,
    DeviceStats,
    OpStats,
    caps_reason,
)
from ..unseen import Unseen

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
OBJECT = HERE / "blockio.bpf.o"  # built by scripts/build-bpf.sh (make bootstrap)
BTF = Path("/sys/kernel/btf/vmlinux")

# struct stat_val, in u64 words: where layout.py (the one description of the counters, which
# also generates the C struct) puts each field for this program's sizes.
LAYOUT = Layout(clocks=2, lat_slots=MAX_LAT_BOUNDS + 1, size_slots=SIZE_SLOTS)
KEY, SEQ, IOS, BYTES, ERRORS, UNTIMED, SSUM = (
    LAYOUT.at(name) for name in ("key", "seq", "ios", "bytes", "errors", "untimed", "size_sum")
)
LSUM_DEV, LSUM_Q = LAYOUT.at("lat_sum_ns", CLOCK_DEVICE), LAYOUT.at("lat_sum_ns", CLOCK_QUEUE)
LAT_DEV, LAT_Q = LAYOUT.at("lat", CLOCK_DEVICE), LAYOUT.at("lat", CLOCK_QUEUE)
SIZE = LAYOUT.at("size")
WORDS = LAYOUT.words
# The single words read() sums, first (then the histograms' slots); P_* are their positions
# in what it sums. A new counter: its word here and its P_ name below.
HEAD = (IOS, BYTES, ERRORS, UNTIMED, LSUM_DEV, LSUM_Q, SSUM)
P_IOS, P_BYTES, P_ERRORS, P_UNTIMED, P_LSUM_DEV, P_LSUM_Q, P_SSUM = range(len(HEAD))
_Key = tuple[int, int, int]  # (dev, op, diskseq)
_KEY = struct.Struct("=IIQ")  # struct stat_key: dev, op, seq (diskseq)
# the .rodata cfg: bounds, size_histogram, max_queues, stamps, ncpus
_CFG = struct.Struct(f"={MAX_LAT_BOUNDS}QQQQQ")
STAMP_DEVICE, STAMP_QUEUE = 1, 2
NOPS = 4  # slots per queue id in `slots`
MAX_SLOTS = 4096  # blockio.bpf.c's `used`
MAP_FULL = ("stats", "start")  # blockio.bpf.c's map_full[], by index
STATS_ENTRIES = 4096  # the hash map's max_entries in blockio.bpf.c
# The syscall program that sums the claimed slots' per-CPU copies in the kernel
# (blockio.bpf.c): bpf_map_lookup_percpu_elem is Linux 5.19; before, userspace sums.
SUM_PROGRAM = "sum"


def queue_slots(sys_root: Path = Path("/sys")) -> int:
    """How many request queue ids get an array slot: twice the block devices now (ids are
    dense and reused, so this leaves room for devices added later), a power of two from 64
    to 1024. Ids beyond it still count, through the hash map (~40 ns more per completion)."""
    try:
        n = sum(1 for _ in (sys_root / "block").iterdir())
    except OSError:
        n = 0
    want = max(64, 2 * n)
    return min(1024, 1 << (want - 1).bit_length())


_NO_BOUND = (1 << 64) - 1
_PREALLOC_ENTRIES = 1024  # before 6.1: 256 disks x 4 ops, preallocated per CPU


# Unclaimed slots a batch may read through rather than start another syscall: a slot costs a
# copy of WORDS words per CPU, a syscall ~1 us and its Python around it several.
_GAP = 6
# The copies of unchanged values _raw() keeps to skip their sums: 96 array slots on 2 CPUs are
# ~130 KiB; a 128-CPU host's 48 busy disks would need ~8 MiB, so there only some are kept.
MEMO_BYTES = 2 << 20


# The most bytes one batch of slots may return: 96 slots of a 128-CPU host's copies are 9 MB,
# which glibc then keeps in the heap after the second read (its mmap threshold rises to the
# size of a freed mapping), so the agent would hold them for good (issue 35).
_RUN_BYTES = 1 << 20


def _runs(indices: list[int], gap: int, most: int | None = None) -> list[tuple[int, int]]:
    """Sorted indices as (first, last) runs, joining runs at most gap indices apart, each
    at most `most` indices long."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i - runs[-1][1] <= gap + 1 and (most is None or i - runs[-1][0] < most):
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _by_key(value: bytes | memoryview, pick: list[int]) -> list[tuple[tuple[int, int], list[int]]]:
    """One array slot's per-CPU copies summed per claiming (key, diskseq): normally one, as
    every CPU claimed the slot for the same disk; after the queue id went to another disk,
    the CPUs that have not completed its I/O yet still hold the former's copies."""
    flat = memoryview(value).cast("B").cast("Q")
    claims = set(zip(flat[KEY::WORDS], flat[SEQ::WORDS], strict=True))
    claims = {c for c in claims if c[0]}
    if len(claims) <= 1:
        return [(c, sum_percpu(value, WORDS, pick)) for c in claims]
    ncpus = len(flat) // WORDS
    out = []
    for c in claims:
        mine = b"".join(
            bytes(flat[i * WORDS : (i + 1) * WORDS])
            for i in range(ncpus)
            if (flat[i * WORDS + KEY], flat[i * WORDS + SEQ]) == c
        )
        out.append((c, sum_percpu(mine, WORDS, pick)))
    return out


def parse_sums(data: bytes, pick: Sequence[int]) -> tuple[list[tuple[_Key, list[int]]], list[int]]:
    """The records `sum` wrote (struct stat_val each, its key and seq words saying whose):
    ((dev, op, diskseq), the words in pick order) per record, and the array slots whose
    copies claim different disks (key 0, the slot's index in seq), for userspace to sum
    itself. A trailing partial record, or a key naming no op, is dropped."""
    size = WORDS * 8
    flat = memoryview(data)[: len(data) // size * size].cast("Q")
    get = operator.itemgetter(*pick)
    out: list[tuple[_Key, list[int]]] = []
    mixed: list[int] = []
    for at in range(0, len(flat), WORDS):
        rec = flat[at : at + WORDS]
        c = rec[KEY]
        if not c:
            mixed.append(rec[SEQ])
        elif 0 < c & 0xFF <= NOPS:
            out.append(((c >> 8, (c & 0xFF) - 1, rec[SEQ]), list(get(rec))))
    return out, mixed


def _ns(bounds_seconds: Sequence[float]) -> list[int]:
    return [round(b * 1e9) for b in bounds_seconds]


class CoreBackend:
    """Per-request latency (the kernel's own timestamps), I/Os, bytes and errors, from one
    program at tp_btf/block_rq_complete."""

    name = "core"

    def __init__(
        self,
        lat_bounds_seconds: Sequence[float],
        size_histogram: bool = False,
        sys_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        obj_path: Path = OBJECT,
        btf_path: Path = BTF,
        stamps: int = STAMP_DEVICE | STAMP_QUEUE,
        max_queues: int | None = None,
        stats_entries: int = STATS_ENTRIES,
        beside: bool = False,
        kernel_sums: bool = True,
    ) -> None:
        """stamps: the kernel timestamps to use; tests clear bits to exercise the queue clock
        and the issue-side timing on devices that carry both. max_queues: queue ids with an
        array slot (default: queue_slots(); 0 sends everything through the hash map).
        stats_entries: the hash map's size (tests fill a small one). beside: the object's
        load (the verifier) goes on in a thread of its own and finish() completes the
        backend (collector/agent/early.py: while the agent imports the rest). kernel_sums:
        the array slots' per-CPU copies summed in the kernel (`sum`) where it can (tests
        compare with userspace's sums)."""
        missing = caps.bpf_tracing_missing(caps.current().effective)
        if missing:
            raise BackendUnavailable(
                caps_reason(missing),
                f"loading and attaching tracing BPF programs needs {' and '.join(missing)}, "
                "which this process does not hold (docs/privileges.md)",
            )
        if not btf_path.exists():
            raise BackendUnavailable(
                "no kernel BTF", f"{btf_path} is missing (a kernel built without BTF)"
            )
        if not obj_path.exists():
            raise BackendUnavailable(
                "not built", f"{obj_path} is missing: build it with scripts/build-bpf.sh"
            )
        bounds = _ns(lat_bounds_seconds)
        if not 0 < len(bounds) <= MAX_LAT_BOUNDS or bounds != sorted(set(bounds)):
            raise ValueError(f"latency bounds: 1 to {MAX_LAT_BOUNDS} distinct, increasing")
        try:
            libbpf.lib()
        except OSError as exc:
            raise BackendUnavailable("no libbpf", f"cannot load libbpf.so.1 ({exc})") from exc
        self.nbounds = len(bounds)
        self.size_histogram = size_histogram
        self.max_queues = queue_slots(sys_root) if max_queues is None else max_queues
        if not 0 <= self.max_queues * NOPS <= MAX_SLOTS:
            raise ValueError(f"max_queues: 0 to {MAX_SLOTS // NOPS}")
        if not 0 < stats_entries <= STATS_ENTRIES:
            raise ValueError(f"stats_entries: 1 to {STATS_ENTRIES}")
        self.stats_entries = stats_entries
        self.ncpus = libbpf.possible_cpus()
        # Whether `sum` sums the slots: decided before the load, undone where its load or
        # its first run fails (then userspace sums, as before Linux 5.19).
        self.kernel_sums = kernel_sums and kernel_at_least(5, 19)
        self._sum_lock = threading.Lock()  # a run of `sum` and the read of what it wrote
        self._roots = (sys_root, proc_root)
        self._reopen = (obj_path, bounds, size_histogram, stamps)
        self.obj = self._open(obj_path, bounds, size_histogram, stamps)
        self._loading: libbpf.Loading | None = self.obj.start_load() if beside else None
        self._finished = False
        if not beside:
            self.finish()

    def finish(self) -> None:
        """The load waited for (or run now), the program attached, the reads set up."""
        if self._finished:
            return
        loading, self._loading = self._loading, None
        self.obj = self._loaded(self.obj, loading)
        sys_root, proc_root = self._roots
        self._stats = self.obj.map("stats")
        self._slots = self.obj.map("slots")
        self._used = self.obj.map(".data.used")
        self._full = self.obj.map(".data.full")
        self._complete = self.obj.program("complete")
        self._issue = self.obj.program("issue")
        try:
            self._complete.attach()
        except OSError as exc:
            self.obj.close()
            raise BackendUnavailable(
                "attach failed", f"attaching tp_btf/block_rq_complete failed ({exc})"
            ) from exc
        self._sum = self.obj.program(SUM_PROGRAM)
        self._sums = self.obj.map("sums")
        if self.kernel_sums:
            try:
                self._sum.run()
            except OSError as exc:  # a kernel or a seccomp filter refusing BPF_PROG_TEST_RUN
                self.kernel_sums = False
                log.info("blockio: running `sum` failed (%s): userspace sums", exc)
        self.disks = LiveDisks(sys_root)
        self.diskstats = DiskstatsBackend(proc_root)
        # The clock each disk's histogram is in, fixed at its first timed request (a disk's
        # series must not change meaning between scrapes); forgotten when the disk goes.
        self.clocks: dict[Identity, str] = {}
        self._pick = self._words()
        self._no_batch = False  # the kernel refused a batch lookup of the array: one by one
        # the last read's values (key, bytes) -> their sums (_raw), within MEMO_BYTES
        self._memo: dict[tuple[_Key | None, bytes], list[tuple[_Key, list[int]]]] = {}
        # Completions the kernel counts that the program is not run for, baselined now
        # (unseen.py; docs/exporters/blockio.md).
        self.unseen = Unseen()
        self.unseen.start(self.diskstats.read())
        self._finished = True

    def _loaded(self, obj: libbpf.Object, loading: libbpf.Loading | None) -> libbpf.Object:
        """obj loaded (its load waited for, if started); a failed load is tried again without
        `sum`, then run again with libbpf's messages on, for the verifier's log in the
        error."""
        try:
            if loading is None:
                obj.load(messages=False)  # quiet: libbpf's ~170 debug lines cost the GIL each
            else:
                loading.wait()
            return obj
        except OSError:
            obj.close()
        if self.kernel_sums:
            self.kernel_sums = False
            obj = self._open(*self._reopen)
            try:
                obj.load(messages=False)
                log.info("blockio: `sum` did not load: userspace sums")
                return obj
            except OSError:
                obj.close()
        obj_path = self._reopen[0]
        obj = self._open(*self._reopen)
        try:
            obj.load()
        except OSError as exc:
            obj.close()
            tail = libbpf.last_messages()
            raise BackendUnavailable(
                "bpf load failed", f"loading {obj_path.name} failed ({exc}); libbpf said:\n{tail}"
            ) from exc
        return obj

    def _open(
        self, obj_path: Path, bounds: list[int], size_histogram: bool, stamps: int
    ) -> libbpf.Object:
        """The object opened, its configuration and map sizes set: ready to load."""
        try:
            obj = libbpf.Object(obj_path)
        except OSError as exc:
            raise BackendUnavailable("bpf load failed", f"opening {obj_path}: {exc}") from exc
        try:
            rodata = obj.map(".rodata").initial_value()
            if len(rodata) != _CFG.size:
                raise BackendUnavailable(
                    "bpf load failed", f"{obj_path.name}: .rodata is not the expected config"
                )
            padded = bounds + [_NO_BOUND] * (MAX_LAT_BOUNDS - len(bounds))
            cfg = _CFG.pack(*padded, int(size_histogram), self.max_queues, stamps, self.ncpus)
            ctypes.memmove(rodata, cfg, _CFG.size)
            if obj.map("slots").value_size() != WORDS * 8:
                raise BackendUnavailable(
                    "bpf load failed", f"{obj_path.name}: struct stat_val is not layout.py's"
                )
            obj.map("slots").set_max_entries(max(1, self.max_queues * NOPS))
            stats = obj.map("stats")
            stats.set_max_entries(self.stats_entries)
            if not kernel_at_least(6, 1):
                # Run-time allocated maps in tracing programs are safe only since 6.1
                # (bpf_mem_alloc): before, preallocate a smaller map instead.
                stats.set_flags(0)
                stats.set_max_entries(min(self.stats_entries, _PREALLOC_ENTRIES))
            obj.program("empty").set_autoload(False)
            obj.program(SUM_PROGRAM).set_autoload(self.kernel_sums)
            # one record per slot, not per CPU (377 KB for 128 queue ids); none without `sum`
            sums = max(1, self.max_queues * NOPS) if self.kernel_sums else 1
            obj.map("sums").set_max_entries(sums)
        except BackendUnavailable:
            obj.close()
            raise
        except OSError as exc:
            obj.close()
            raise BackendUnavailable(
                "bpf load failed", f"preparing {obj_path.name} failed ({exc})"
            ) from exc
        return obj

    def _words(self) -> list[int]:
        """The value words read() sums: counters, both clocks' used slots, sizes if on."""
        n = self.nbounds + 1
        pick = list(HEAD)
        pick += range(LAT_DEV, LAT_DEV + n)
        pick += range(LAT_Q, LAT_Q + n)
        if self.size_histogram:
            pick += range(SIZE, SIZE + SIZE_SLOTS)
        return pick

    def values(self) -> Iterator[tuple[tuple[int, int, int] | None, bytes | memoryview]]:
        """The raw per-CPU values: each claimed array slot (key None: its copies say whose
        they are), then the hash map's entries by (dev, op, diskseq)."""
        yield from ((None, v) for v in self._slot_values())
        yield from self._entry_values()

    def _slot_values(self) -> Iterator[bytes | memoryview]:
        """Each claimed array slot's per-CPU copies."""
        value_size = WORDS * 8 * self.ncpus
        used = self._used.lookup(b"\0\0\0\0", MAX_SLOTS * 8) or b""
        # queue ids are dense from 0: past the last claimed slot (a few hundred on a large
        # host) the 4096 words are zeros, not worth unpacking one by one
        used = used[: (len(used.rstrip(b"\0")) + 7) // 8 * 8]
        claimed = [i for i, c in enumerate(struct.unpack(f"={len(used) // 8}Q", used)) if c]
        for first, last in _runs(claimed, _GAP, max(1, _RUN_BYTES // value_size)):
            # One syscall per run of claimed slots (BPF_MAP_LOOKUP_BATCH) instead of one per
            # slot: a 48-disk host's 96 slots in a few calls.
            run = (
                None
                if self._no_batch
                else self._slots.lookup_array_run(first, last - first + 1, value_size)
            )
            if run is None:
                self._no_batch = True
                for idx in range(first, last + 1):
                    slot = self._slots.lookup(struct.pack("=I", idx), value_size)
                    if slot and idx in claimed:
                        yield slot
                continue
            for idx in claimed:
                if first <= idx <= last:
                    at = (idx - first) * value_size
                    yield run[at : at + value_size]

    def _entry_values(self) -> Iterator[tuple[_Key, memoryview]]:
        """The hash map's entries' per-CPU copies, by (dev, op, diskseq)."""
        for raw_key, value in self._stats.lookup_batch(_KEY.size, WORDS * 8 * self.ncpus):
            yield _KEY.unpack(raw_key), value

    def _raw(self) -> dict[tuple[int, int, int], list[int]]:
        """(dev, op, diskseq) -> summed words in _pick order, added up where both the array
        and the hash map hold one."""
        out: dict[tuple[int, int, int], list[int]] = {}
        summed = None
        if self.kernel_sums:
            try:
                summed = self._kernel_summed() + list(self._user_summed(self._entry_values()))
            except OSError as exc:  # refused now (never seen): this read and the next by hand
                self.kernel_sums = False
                log.warning("blockio: running `sum` failed (%s): userspace sums from now", exc)
        if summed is None:
            summed = list(self._user_summed(self.values()))
        for k, val in summed:
            have = out.get(k)
            if have is not None:
                val = [a + b for a, b in zip(have, val, strict=True)]
            out[k] = val
        return out

    def _kernel_summed(self) -> list[tuple[_Key, list[int]]]:
        """The claimed slots, summed by `sum` and read in one batch; a slot whose copies
        claim different disks read and summed here."""
        size = WORDS * 8
        with self._sum_lock:
            n = min(self._sum.run(), self.max_queues * NOPS)  # never more than `sums` holds
            data = self._sums.lookup_array_run(0, n, size) if n else b""
            if data is None:  # no batch lookups of arrays (before 5.6, so never with `sum`)
                data = b"".join(
                    self._sums.lookup(struct.pack("=I", i), size) or b"" for i in range(n)
                )
            summed, mixed = parse_sums(bytes(data), self._pick)
        for idx in mixed:
            if idx >= self.max_queues * NOPS:  # not a slot: never written so
                continue
            slot = self._slots.lookup(struct.pack("=I", idx), size * self.ncpus)
            if slot:
                summed += [
                    ((c >> 8, (c & 0xFF) - 1, seq), v) for (c, seq), v in _by_key(slot, self._pick)
                ]
        return summed

    def _user_summed(
        self, values: Iterable[tuple[_Key | None, bytes | memoryview]]
    ) -> Iterator[tuple[_Key, list[int]]]:
        """Each value's per-CPU copies summed here (key None: an array slot's, whose copies
        say whose they are)."""
        memo = self._memo
        self._memo = {}
        budget = MEMO_BYTES
        for key, value in values:
            # A value whose bytes are those of the last read (an idle disk's, most of a large
            # host's between two scrapes) has the same sums: compared whole, never guessed
            # from a counter (a completion on another CPU may be half-written at a read).
            raw = bytes(value)
            sums = memo.get((key, raw))
            if sums is None:
                if key is None:
                    sums = [
                        ((c >> 8, (c & 0xFF) - 1, seq), v)
                        for (c, seq), v in _by_key(raw, self._pick)
                    ]
                else:
                    sums = [(key, sum_percpu(raw, WORDS, self._pick))]
            if budget >= len(raw):  # bounded: at most MEMO_BYTES of copies kept
                budget -= len(raw)
                self._memo[(key, raw)] = sums
            yield from sums

    def _forget(self, dead: list[tuple[int, int, int]]) -> None:
        """Delete the hash map entries of disks that are gone (no more completions can come
        for them: their queue is gone, or their diskseq superseded). Array slots are reset
        by the program itself when their queue id's next disk completes I/O."""
        for dev, op, seq in dead:
            try:
                self._stats.delete(_KEY.pack(dev, op, seq))
            except OSError as exc:  # never fatal to a scrape
                log.debug("blockio: deleting a gone disk's entry: %s", exc)

    def bpf_read_keep(self) -> frozenset[int]:
        """The capability the map reads need after the drop (caps.bpf_read_keep), found by one
        real read of the .data.full map (and a run of `sum`, where the kernel sums) without
        it."""

        def read() -> None:
            self._full.lookup(b"\0\0\0\0", 8 * len(MAP_FULL))
            if self.kernel_sums:
                self._sum.run()

        return caps.bpf_read_keep(read)

    def map_full(self) -> dict[str, int]:
        """Updates that failed because a map was full, by map: stats (completions not
        counted) and start (requests not timed)."""
        raw = self._full.lookup(b"\0\0\0\0", 8 * len(MAP_FULL)) or bytes(8 * len(MAP_FULL))
        return dict(zip(MAP_FULL, struct.unpack(f"={len(MAP_FULL)}Q", raw), strict=True))

    def read(self) -> dict[str, DeviceStats]:
        """Cumulative per-device statistics since the program was loaded."""
        n = self.nbounds + 1
        h = len(HEAD)  # positions in _pick order
        lat_dev = slice(h, h + n)
        lat_q = slice(h + n, h + 2 * n)
        size = slice(h + 2 * n, h + 2 * n + SIZE_SLOTS)
        # /proc/diskstats before the maps (unseen.py): busy time and in flight, and the
        # kernel's completions the program's are compared with
        kernel = self.diskstats.read()
        raw = self._raw()
        seen: dict[Identity, int] = {}
        for dev, _op, seq in raw:
            seen[(dev, seq)] = seen.get((dev, seq), 0) + raw[(dev, _op, seq)][P_IOS]
        live = self.disks.live(seen)
        self._forget([k for k in raw if (k[0], k[2]) not in live])
        by_disk: dict[Identity, dict[int, list[int]]] = {}
        for (dev, op, seq), val in raw.items():
            if 0 <= op < len(OPS) and (dev, seq) in live:
                by_disk.setdefault((dev, seq), {})[op] = val
        self.clocks = {k: v for k, v in self.clocks.items() if k in live}
        out: dict[str, DeviceStats] = {}
        untimed_seen = False
        for ident, ops in by_disk.items():
            clock = self.clocks.get(ident)
            if clock is None:
                if any(sum(v[lat_dev]) for v in ops.values()):
                    clock = self.clocks[ident] = "device"
                elif any(sum(v[lat_q]) for v in ops.values()):
                    clock = self.clocks[ident] = "queue"
            stats = out.setdefault(live[ident], DeviceStats())
            stats.clock = clock
            for op, v in ops.items():
                dev_slots, q_slots = v[lat_dev], v[lat_q]
                if clock == "queue":
                    slots, lsum, other = q_slots, v[P_LSUM_Q], sum(dev_slots)
                else:
                    slots, lsum, other = dev_slots, v[P_LSUM_DEV], sum(q_slots)
                untimed = v[P_UNTIMED] + other
                untimed_seen |= v[P_UNTIMED] > 0
                stats.ops[OPS[op]] = OpStats(
                    ios=v[P_IOS],
                    bytes=v[P_BYTES],
                    errors=v[P_ERRORS],
                    lat_slots=slots if clock else None,
                    lat_sum_seconds=lsum / 1e9,
                    untimed=untimed,
                    size_slots=v[size] if self.size_histogram else None,
                    size_sum_bytes=v[P_SSUM],
                )
        if untimed_seen and not self._issue.attached:
            # Some requests carry no kernel timestamp (iostats off on a queue that keeps no
            # statistics): time those at issue, with a map, from now on.
            try:
                self._issue.attach()
                log.info("blockio: timing requests without kernel timestamps at issue")
            except OSError as exc:
                log.warning("blockio: cannot attach the issue-side program: %s", exc)
        for name, row in kernel.items():
            d = out.setdefault(name, DeviceStats())
            d.busy_seconds = row.busy_seconds
            d.inflight = row.inflight
        self._add_unseen(out, kernel, live, by_disk)
        return out

    def _add_unseen(
        self,
        out: dict[str, DeviceStats],
        kernel: dict[str, DeviceStats],
        live: dict[Identity, str],
        by_disk: dict[Identity, dict[int, list[int]]],
    ) -> None:
        """Completions the kernel counted and the program was not run for (unseen.py)."""
        counted = {
            live[ident]: (ident, {OPS[o]: v[P_IOS] for o, v in ops.items()})
            for ident, ops in by_disk.items()
        }
        for name, per_op in self.unseen.update(kernel, counted).items():
            for op_name, count in per_op.items():
                if count:
                    out[name].ops.setdefault(op_name, OpStats(errors=0)).unseen = count

    def _programs(self) -> list[tuple[str, int]]:
        progs = [("complete", self._complete.fd)]
        if self._issue.attached:
            progs.append(("issue", self._issue.fd))
        return progs

    def missed_events(self) -> dict[str, int]:
        """Events each program skipped because another BPF program ran on the CPU."""
        return {name: fdinfo(fd).get("recursion_misses", 0) for name, fd in self._programs()}

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """run_time_ns and run_cnt of each attached program, when the kernel counts them."""
        return prog_stats(self._programs())

    def close(self) -> None:
        """Detach the programs and free the maps (after a load still going on: finished)."""
        if self._loading is not None:
            with contextlib.suppress(OSError):
                self._loading.wait()
            self._loading = None
        self.obj.close()
        if self._finished:
            self.disks.close()
