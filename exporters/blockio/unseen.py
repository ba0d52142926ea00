"""Completions the kernel counted that the core program was not run for.

Why: on 6.18 under heavy CPU load the kernel sometimes does not run a tracepoint's BPF
programs for a `block_rq_complete` that its ftrace event records, and counts that nowhere
(`recursion_misses` stays 0, `run_cnt` falls short by exactly the missing completions:
docs/exporters/blockio.md, "Completions the program is not run for"). /proc/diskstats is the
kernel's own per-disk count of completed requests (blk_account_io_done()), taken outside
the tracepoint, so the difference between its growth and the program's is what the program
could not see. Pure bookkeeping over what the backend read: no kernel access here.

Each value is a lower bound that is exact whenever the disk was quiet across a read: the
kernel is read *before* the program's maps (completions in between are the program's only,
so they can only make the difference smaller), and a disk's baseline pairs the program's
count at one read with the kernel's at the next (read later: the same argument). So the
counter never claims a completion the program saw, and it never decreases (the largest
difference seen so far). One /proc/diskstats read per scrape, the one the backend takes
for busy time and requests in flight anyway.
"""

from __future__ import annotations

from collections.abc import Mapping

from .bpfshared import Identity
from .model import DeviceStats

# The ops whose completions /proc/diskstats counts per request as the program does. Flushes
# are left out: diskstats counts flush sequences (blk_account_io_flush()), not requests.
CHECKED = ("read", "write", "discard")


def kernel_ios(dev: DeviceStats) -> dict[str, int]:
    """Completed requests per checked op, from a /proc/diskstats row."""
    return {op: dev.ops[op].ios for op in CHECKED if op in dev.ops}


class Unseen:
    """Per disk and op: kernel completions since the baseline minus the program's."""

    def __init__(self) -> None:
        """No baseline yet: start() takes one for the disks present."""
        # name -> (identity, or None while not yet seen by the program; kernel ios at the
        # baseline, None until the read after the program's; program ios at the baseline)
        self._base: dict[str, tuple[Identity | None, dict[str, int] | None, dict[str, int]]] = {}
        self._unseen: dict[str, dict[str, int]] = {}
        self._listed: set[str] = set()  # the disks of the last kernel read

    def start(self, kernel: Mapping[str, DeviceStats]) -> None:
        """Baseline every disk at the program's attach (kernel read after the attach: the
        program counted at most what the kernel did since)."""
        for name, dev in kernel.items():
            self._base[name] = (None, kernel_ios(dev), {})
        self._listed = set(kernel)

    def update(
        self,
        kernel: Mapping[str, DeviceStats],
        seen: Mapping[str, tuple[Identity, dict[str, int]]],
    ) -> dict[str, dict[str, int]]:
        """Unseen completions per disk and op. kernel: /proc/diskstats, read before the maps;
        seen: per disk the program counts, its identity and its ios by op."""
        for name, (ident, prog) in seen.items():
            base = self._base.get(name)
            if base is not None and base[0] is None:
                base = self._base[name] = (ident, base[1], base[2])  # the disk of the start
            if base is None and name in kernel and name not in self._listed:
                # Born since the last kernel read, so after the attach: the kernel and the
                # program have both counted it from zero (its new identity's entries), and
                # its first read is exact already (a CI run: 1 of 3,001 missed at once).
                base = self._base[name] = (ident, {}, {})
            elif base is None or base[0] != ident:
                # A disk first seen now, or re-created under the same name (a new diskseq:
                # its program counts restarted): the program's count now, the kernel's at the
                # next read (taken after these maps).
                self._base[name] = (ident, None, dict(prog))
                self._unseen.pop(name, None)
                continue
            row = kernel.get(name)
            if row is None:
                continue
            k_now, (_, k0, p0) = kernel_ios(row), base
            if k0 is None:
                self._base[name] = (ident, k_now, p0)
                continue
            unseen = self._unseen.setdefault(name, {})
            for op in CHECKED:
                diff = (k_now.get(op, 0) - k0.get(op, 0)) - (prog.get(op, 0) - p0.get(op, 0))
                if diff > unseen.get(op, 0):
                    unseen[op] = diff
        # What is kept per disk leaves with the disk: gone from the kernel, or (once seen)
        # from the program's maps (the backend forgets the entries of disks that left).
        gone = [n for n, b in self._base.items() if n not in kernel or (b[0] and n not in seen)]
        for name in gone:
            del self._base[name]
            self._unseen.pop(name, None)
        self._listed = set(kernel)
        return self._unseen
