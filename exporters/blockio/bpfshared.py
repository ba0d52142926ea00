"""What the two BPF backends (core and bcc) share: reading their programs' fdinfo, summing
per-CPU values, naming devices."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import devt
from .topology import devt_names

_U64 = (1 << 64) - 1
BPF_STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


def fdinfo(fd: int) -> dict[str, int]:
    """The numeric fields of /proc/self/fdinfo/FD (a BPF program's run_time_ns, run_cnt,
    recursion_misses)."""
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        key, _, value = line.partition(":")
        with contextlib.suppress(ValueError):
            out[key.strip()] = int(value.strip())
    return out


def bpf_stats_enabled(path: Path = BPF_STATS_SYSCTL) -> bool:
    """Whether the kernel counts BPF programs' run time (kernel.bpf_stats_enabled, or a
    process holding a BPF_ENABLE_STATS descriptor: both turn the same static key on)."""
    try:
        return path.read_text().strip() == "1"
    except OSError:
        return False


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


class DevNames:
    """Kernel device names by the kernel's internal dev_t, re-read when a device appears."""

    def __init__(self, sys_root: Path) -> None:
        self.sys_root = sys_root
        self._names: dict[tuple[int, int], str] = {}

    def __call__(self, dev: int) -> str:
        """The name of dev (major << 20 | minor), or "major:minor" if /sys has no such disk."""
        key = devt.decode(dev)
        name = self._names.get(key)
        if name is None:
            self._names = devt_names(self.sys_root)  # a device appeared: re-read the index
            name = self._names.get(key, f"{key[0]}:{key[1]}")
        return name


def kernel_at_least(major: int, minor: int, release: str | None = None) -> bool:
    """Whether the running kernel's release is major.minor or later (False if unparsable)."""
    release = os.uname().release if release is None else release
    try:
        got = tuple(int(part) for part in release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return got >= (major, minor)
