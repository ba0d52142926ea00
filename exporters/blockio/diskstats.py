"""The /proc/diskstats fallback: every counter the kernel keeps, without BPF.

Field layout: Documentation/admin-guide/iostats.rst. Kernels >= 4.18 add discard fields,
>= 5.5 add flush fields; older rows simply lack those ops.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from exporters.hostfs.read import PROC_MAX, read_bytes

from .model import DeviceStats, OpStats

log = logging.getLogger(__name__)

SECTOR = 512
U64 = 1 << 64  # the kernel prints unsigned longs: anything larger is a malformed field
_DIGITS = frozenset("0123456789")
_noted = False


def parse_u64(token: str) -> int | None:
    """An unsigned decimal below 2^64 (ASCII digits only), or None."""
    significant = token.lstrip("0")
    if not token or len(significant) > 20 or not set(token) <= _DIGITS:
        return None  # also keeps int() from its 4300-digit ValueError
    value = int(significant or "0")
    return value if value < U64 else None


@dataclass(frozen=True)
class DiskstatsRow:
    """One /proc/diskstats line."""

    major: int
    minor: int
    name: str
    fields: tuple[int, ...]  # the counters after the name, in iostats.rst order

    def get(self, index: int) -> int | None:
        """Counter number index (1-based as in iostats.rst), None if this kernel lacks it."""
        return self.fields[index - 1] if len(self.fields) >= index else None


# A well-formed line: major, minor, name, then at least 11 counters of ASCII digits (20 at most:
# int() never sees a 4,300-digit token). One match per line instead of a check per token: the
# core backend reads it on every scrape (also for unseen.py), on hosts with hundreds of disks.
_LINE = re.compile(
    r"\s*([0-9]{1,20})\s+([0-9]{1,20})\s+(\S+)((?:\s+[0-9]{1,20}){11,})\s*", re.ASCII
)


def parse_diskstats(text: str) -> dict[str, DiskstatsRow]:
    """Parse /proc/diskstats text; malformed lines (also a number of 2^64 or more) are skipped,
    and the first one is logged (debug) — never a 0 in place of a number."""
    global _noted
    rows: dict[str, DiskstatsRow] = {}
    for line in text.splitlines():
        m = _LINE.fullmatch(line)
        if m is None:
            if len(line.split()) >= 14 and not _noted:
                _noted = True
                log.debug("skipped a malformed /proc/diskstats line (logged once)")
            continue
        fields = tuple(map(int, m.group(4).split()))
        major, minor = int(m.group(1)), int(m.group(2))
        if max(fields) >= U64 or major >= U64 or minor >= U64:
            if not _noted:
                _noted = True
                log.debug("skipped a malformed /proc/diskstats line (logged once)")
            continue
        rows[m.group(3)] = DiskstatsRow(major, minor, m.group(3), fields)
    return rows


# (op, ios completed, sectors, ms spent): 1-based field numbers of iostats.rst
_OP_FIELDS = (
    ("read", 1, 3, 4),
    ("write", 5, 7, 8),
    ("discard", 12, 14, 15),
    ("flush", 16, None, 17),
)


def device_stats(row: DiskstatsRow) -> DeviceStats:
    """The counters of one row as the backend-neutral model."""
    dev = DeviceStats(busy_seconds=(row.get(10) or 0) / 1000.0, inflight=row.get(9) or 0)
    for op, ios_f, sectors_f, ms_f in _OP_FIELDS:
        ios = row.get(ios_f)
        if ios is None:
            continue
        sectors = row.get(sectors_f) if sectors_f else 0
        ms = row.get(ms_f)
        dev.ops[op] = OpStats(
            ios=ios,
            bytes=(sectors or 0) * SECTOR,
            time_seconds=None if ms is None else ms / 1000.0,
        )
    return dev


def line_stats(line: str) -> tuple[str, DeviceStats] | None:
    """One line's name and device_stats(), or None where parse_diskstats skips it.

    The same as device_stats(parse_diskstats(line)[name]) (tests/unit/test_devt_diskstats.py),
    without the row in between: under load every disk's line changes at every scrape, and
    the core backend parses them all for busy time and unseen.py (issue 35: ~15 us a line
    that way, cold).
    """
    global _noted
    m = _LINE.fullmatch(line)
    f = None if m is None else [int(x) for x in m.group(4).split()]
    if m is None or f is None or max(f) >= U64 or int(m.group(1)) >= U64 or int(m.group(2)) >= U64:
        if (m is not None or len(line.split()) >= 14) and not _noted:
            _noted = True
            log.debug("skipped a malformed /proc/diskstats line (logged once)")
        return None
    n = len(f)  # at least 11 (_LINE)
    dev = DeviceStats(busy_seconds=f[9] / 1000.0, inflight=f[8])
    ops = dev.ops
    ops["read"] = OpStats(ios=f[0], bytes=f[2] * SECTOR, time_seconds=f[3] / 1000.0)
    ops["write"] = OpStats(ios=f[4], bytes=f[6] * SECTOR, time_seconds=f[7] / 1000.0)
    if n >= 12:  # 4.18+: discards
        ops["discard"] = OpStats(
            ios=f[11],
            bytes=f[13] * SECTOR if n >= 14 else 0,
            time_seconds=f[14] / 1000.0 if n >= 15 else None,
        )
    if n >= 16:  # 5.5+: flushes (no sectors)
        ops["flush"] = OpStats(ios=f[15], time_seconds=f[16] / 1000.0 if n >= 17 else None)
    return m.group(3), dev


class DiskstatsBackend:
    """Reads /proc/diskstats on every scrape."""

    name = "diskstats"
    size_histogram = False

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.path = proc_root / "diskstats"
        # the last read's lines and what each gave (its name and stats; None: malformed)
        self._lines: dict[str, tuple[str, DeviceStats | None]] = {}

    def read(self) -> dict[str, DeviceStats]:
        """Counters of every device the kernel lists, by kernel name.

        A line equal to one of the last read's gives that read's DeviceStats object again
        (issue 35: an idle disk's line is the same scrape after scrape; parsing the host's 58
        lines cost ~0.3 ms a scrape here): callers read them, never change them.
        """
        # bounded; a missing or refused file raises, and the scrape says so (exporter up 0)
        text = read_bytes(self.path, PROC_MAX).decode("utf-8", "replace")
        last, now = self._lines, {}
        out: dict[str, DeviceStats] = {}
        for line in text.splitlines():
            hit = last.get(line)
            if hit is None:
                hit = line_stats(line) or ("", None)
            now[line] = hit
            if hit[1] is not None:
                out[hit[0]] = hit[1]
        self._lines = now  # only the lines of this read: a device that left leaves
        return out

    def missed_events(self) -> dict[str, int] | None:
        """No BPF programs: nothing to miss (and no such metric)."""
        return None

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """No BPF programs: no run time to report."""
        return None

    def map_full(self) -> dict[str, int] | None:
        """No BPF maps: nothing to fill (and no such metric)."""
        return None

    def close(self) -> None:
        """Nothing to release."""
