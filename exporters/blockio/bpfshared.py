"""What the two BPF backends (core and bcc) share: reading their programs' fdinfo, summing
per-CPU values, naming devices and telling present disks from gone ones."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from exporters.hostfs.blockdevs import devt_names
from exporters.hostfs.read import SYS_ROOT, HeldAttrs, read_attr

from . import devt

_U64 = (1 << 64) - 1
BPF_STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


def fdinfo(fd: int) -> dict[str, int]:
    """The numeric fields of /proc/self/fdinfo/FD (a BPF program's run_time_ns, run_cnt,
    recursion_misses)."""
    # os-level and bounded: read at every scrape for each program (a Path and a text file
    # cost 21 us here, this a third of it); a BPF program's fdinfo is ~300 bytes
    out = {}
    for line in _small(f"/proc/self/fdinfo/{fd}").splitlines():
        key, _, value = line.partition(":")
        try:
            out[key.strip()] = int(value)  # int() takes the blanks around a number
        except ValueError:  # prog_tag (hex) and the like
            continue
    return out


def bpf_stats_enabled(path: Path = BPF_STATS_SYSCTL) -> bool:
    """Whether the kernel counts BPF programs' run time (kernel.bpf_stats_enabled, or a
    process holding a BPF_ENABLE_STATS descriptor: both turn the same static key on)."""
    try:
        return _small(path).strip() == "1"
    except OSError:
        return False


def _small(path: str | Path) -> str:
    """A small /proc file's text (its first 4 KiB), os-level: both are read at every scrape."""
    f = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(f, 4096).decode("ascii", "replace")
    finally:
        os.close(f)


def prog_stats(fds: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]] | None:
    """(run_time_ns, run_cnt) per named program fd; None while the kernel does not count."""
    if not bpf_stats_enabled():
        return None
    out = {}
    for name, fd in fds:
        info = fdinfo(fd)
        out[name] = (info.get("run_time_ns", 0), info.get("run_cnt", 0))
    return out


def sum_percpu(
    percpu: memoryview | bytes, words: int, pick: Sequence[int] | None = None
) -> list[int]:
    """Sum the per-CPU copies of a value of `words` u64s, word by word, modulo 2^64 (as
    atomics would wrap); only the words in pick (all when None), in that order.

    The copies lie one after the other, so a strided memoryview hands each word's column of
    CPUs to sum() in C. Measured at 128 CPUs: 0.09 ms per value with a dozen words, 0.2 ms
    with 48; summing ctypes attributes CPU by CPU takes 0.8 ms. numpy is not a dependency.
    """
    flat = memoryview(percpu).cast("B").cast("Q")
    idx = range(words) if pick is None else pick
    return [sum(flat[i::words]) & _U64 for i in idx]


# How long a device /sys does not name (an NVMe multipath path device, which the kernel
# registers without a dev file) keeps its series after its last I/O.
UNNAMED_IDLE_SECONDS = 600.0

Identity = tuple[int, int]  # (kernel dev_t, diskseq): one disk, never reused (blockio.bpf.c)


def _diskseq(sys_root: Path, name: str, read: Callable[[str], str] = read_attr) -> int | None:
    """/sys/class/block/NAME/diskseq (Linux 5.15+), None where the kernel has none."""
    try:
        return int(read(f"{sys_root}/class/block/{name}/diskseq"))
    except ValueError:  # "" (missing, unreadable) or not a number
        return None


class LiveDisks:
    """Which disk identities in a BPF map are disks present now, and their kernel names.

    A disk leaves: its entries are dead and its series go (the backend deletes what it can).
    A disk comes back with the same dev_t: it is a new identity (a new diskseq), counted from
    zero. /sys/class/block is listed once per read (one directory read); the dev files are
    re-read only when that listing changed, never once per gone device.
    """

    def __init__(
        self,
        sys_root: Path,
        clock: Callable[[], float] = time.monotonic,
        unnamed_idle: float = UNNAMED_IDLE_SECONDS,
    ) -> None:
        self.sys_root = sys_root
        self._clock = clock
        self._idle = unnamed_idle
        self._listing: frozenset[str] | None = None
        self._names: dict[int, str] = {}  # kernel dev_t -> name, of the disks listed now
        self._hidden = False  # some listed device has no dev file (NVMe multipath paths)
        self._named: set[int] = set()  # devs /sys named once, still in the map
        self._activity: dict[Identity, tuple[int, float]] = {}  # unnamed: (ios, since)
        self._seq: dict[int, int] = {}  # diskseq at the last read, for maps without one
        # Each disk's diskseq is read on every read() (a loop device re-attached, a medium
        # changed: same name, new diskseq), through a held descriptor on the live /sys (one
        # pread, hostfs.HeldAttrs), all dropped when the listing changes.
        self._held = HeldAttrs() if sys_root == SYS_ROOT else None

    def _refresh(self) -> None:
        try:
            listing = frozenset(os.listdir(self.sys_root / "class" / "block"))
        except OSError:
            listing = frozenset()
        if listing == self._listing:
            return
        self._listing = listing
        if self._held is not None:
            self._held.clear()
        names = devt_names(self.sys_root)
        self._names = {devt.encode(*key): name for key, name in names.items()}
        self._hidden = len(names) < len(listing)

    def live(self, seen: Mapping[Identity, int]) -> dict[Identity, str]:
        """Of the identities in a map (with their summed I/Os), those to report, by name.

        Read the map first, then call this: a disk in the map was created before the listing
        is read here, so it is never taken for gone. Everything not returned is dead.
        """
        self._refresh()
        now = self._clock()
        by_dev: dict[int, list[int]] = {}
        for dev, seq in seen:
            by_dev.setdefault(dev, []).append(seq)
        out: dict[Identity, str] = {}
        for dev, seqs in by_dev.items():
            name = self._names.get(dev)
            if name is not None:
                self._named.add(dev)
                current = _diskseq(
                    self.sys_root, name, read_attr if self._held is None else self._held.read
                )
                if not current:  # no diskseq before 5.15: the dev_t alone names the disk
                    out[(dev, max(seqs))] = name
                elif seqs == [0]:
                    # A map without diskseq (bcc's tracepoints have none): a new diskseq
                    # since the last read means a new disk, whose predecessor's counts are
                    # dead; what the new one did before this read goes with them.
                    previous = self._seq.get(dev)
                    self._seq[dev] = current
                    if previous in (None, current):
                        out[(dev, 0)] = name
                elif current in seqs:
                    out[(dev, current)] = name
                continue  # (else the disk there now has done no I/O yet)
            if dev in self._named or not self._hidden:
                continue  # gone
            # Not named by /sys: a hidden path device, or a disk that came and went between
            # two reads. Shown as major:minor while it does I/O, dropped once idle.
            ident = (dev, max(seqs))
            ios = seen[ident]
            last = self._activity.get(ident)
            if last is None or last[0] != ios:
                self._activity[ident] = (ios, now)
            elif now - last[1] > self._idle:
                continue
            major, minor = devt.decode(dev)
            out[ident] = f"{major}:{minor}"
        self._named &= set(by_dev) | set(self._names)
        self._activity = {k: v for k, v in self._activity.items() if k in seen}
        self._seq = {k: v for k, v in self._seq.items() if k in self._names}
        return out

    def close(self) -> None:
        """Close the held diskseq descriptors."""
        if self._held is not None:
            self._held.close()


def kernel_at_least(major: int, minor: int, release: str | None = None) -> bool:
    """Whether the running kernel's release is major.minor or later (False if unparsable)."""
    release = os.uname().release if release is None else release
    try:
        got = tuple(int(part) for part in release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return got >= (major, minor)
