"""The disk resource: each whole disk's busy share (iostat's %util), and its evidence."""

from __future__ import annotations

from ..series import Bins, PerSeries, VerdictData
from . import steps as S
from .flows import Flows


def utilisation(flows: Flows, data: VerdictData) -> dict[str, dict[S.Key, Bins]]:
    """Per host, ``("disk", device)``: busy per step, whole disks only (where the agent says
    which disks are whole: partitions move their disk's bytes)."""
    has_info = {h for h, _d in data.whole_disks}
    out: dict[str, dict[S.Key, Bins]] = {}
    for (h, d), b in flows.busy.items():
        if h not in has_info or (h, d) in data.whole_disks:
            out.setdefault(h, {})[("disk", d)] = b
    return out


def requests(rates: dict[str, PerSeries], n: int) -> dict[S.Key, Bins]:
    """Requests/s per (host, device): reads plus writes."""
    return {(k[0], k[1]): b for k, b in S.by(rates, "ios", ("host", "device"), n).items()}


def phrase(
    disk_bytes: Bins | None, disk_ios: Bins | None, subj: str, v: float, steps: list[int]
) -> str:
    """ "disk sda 100 % busy at 2.05 MB/s in 8 KiB requests"."""
    mb = S.mean(disk_bytes, steps)
    moved = f" at {S.rate(mb)}" if mb is not None else ""
    ios = S.mean(disk_ios, steps)
    if mb is not None and ios:
        # small requests say "random I/O": busy, and few bytes for it
        moved += f" in {mb / ios / 1024:.3g} KiB requests"
    return f"disk {subj} {S.pct(v)} busy{moved}"
