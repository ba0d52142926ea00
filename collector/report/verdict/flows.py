"""What the report's own tracks give the verdict: disk busy and bytes, NIC bytes, per step."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..series import BUSY, DISK_IO, NIC, Bins, Track
from . import steps as S


@dataclass
class Flows:
    """The tracks the verdict reads, by host and subject, one value per step."""

    n: int
    busy: dict[S.Key, Bins] = field(default_factory=dict)  # (host, device): busy share
    disk_bytes: dict[S.Key, Bins] = field(default_factory=dict)  # reads plus writes, B/s
    reads: dict[S.Key, Bins] = field(default_factory=dict)
    writes: dict[S.Key, Bins] = field(default_factory=dict)
    nic: dict[tuple[str, str, str], Bins] = field(default_factory=dict)  # (h, iface, rx|tx)
    hosts: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, tracks: Iterable[Track], n: int) -> Flows:
        """Index ``tracks`` (a grid of ``n`` steps)."""
        f = cls(n)
        dbytes: dict[S.Key, Bins] = defaultdict(lambda: [None] * n)
        dread: dict[S.Key, Bins] = defaultdict(lambda: [None] * n)
        dwrite: dict[S.Key, Bins] = defaultdict(lambda: [None] * n)
        for tr in tracks:
            h = tr.host
            if tr.metric == BUSY:
                f.busy[(h, tr.labels.get("device", ""))] = S.clamp(tr.rates)
            elif tr.metric == DISK_IO and tr.labels.get("op") in ("read", "write"):
                key = (h, tr.labels.get("device", ""))
                S.add(dbytes[key], tr.rates)
                S.add((dread if tr.labels["op"] == "read" else dwrite)[key], tr.rates)
            elif tr.metric == NIC:
                f.nic[(h, tr.labels.get("interface", ""), tr.labels.get("direction", ""))] = (
                    tr.rates
                )
            else:
                continue
            f.hosts.add(h)
        f.disk_bytes, f.reads, f.writes = dict(dbytes), dict(dread), dict(dwrite)
        return f
