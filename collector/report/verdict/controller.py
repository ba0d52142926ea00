"""The controller resource: a storage controller's own PCIe link, and its busy disks held back.

A controller's utilisation is the larger of its bytes/s against its link (:mod:`.pcie` reads
the link) and, when its busy disks (at least :data:`BUSY_DISK`) move together under
:data:`HELD_BACK` of what each moved when last seen alone (at least :data:`ALONE_BUSY`
busy, no other disk of the controller :data:`OTHERS_IDLE` busy), their mean busy: the time
they wait on it. The larger of the bytes and the requests share counts, so random I/O does
not. "Last seen alone" walks the steps in order from the recording rule's value before the
window (where the rules run), else from the window's own steps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..series import Bins, VerdictData
from . import steps as S
from .flows import Flows

HELD_BACK = 0.85  # busy disks moving less than this share of what they did alone wait
ALONE_BUSY, OTHERS_IDLE, BUSY_DISK = 0.9, 0.05, 0.5

# per bridge and step, each controller below: (bytes now, bytes alone, yield, mean busy)
Part = tuple[float, float, float, float]


@dataclass
class HeldBack:
    """Per (host, controller): the yield and, where under HELD_BACK, the mean busy per step;
    per (host, bridge above) and step, the parts of the controllers below it."""

    yields: dict[S.Key, Bins] = field(default_factory=dict)
    held: dict[S.Key, Bins] = field(default_factory=dict)
    parts: dict[S.Key, list[list[Part]]] = field(default_factory=dict)


def held_back(flows: Flows, data: VerdictData, ios: dict[S.Key, Bins]) -> HeldBack:
    """Controllers whose busy disks move less than alone (see the module's docstring)."""
    n = flows.n
    by_ctl: dict[S.Key, list[str]] = defaultdict(list)
    for (h, d), ctl in sorted(data.disk_controller.items()):
        if (h, d) in flows.busy:
            by_ctl[(h, ctl)].append(d)
    alone = dict(data.alone)
    out = HeldBack(
        yields=defaultdict(lambda: [None] * n),
        held=defaultdict(lambda: [None] * n),
        parts=defaultdict(lambda: [[] for _ in range(n)]),
    )
    for k in range(n):
        for (h, ctl), devs in by_ctl.items():
            b = {d: flows.busy[(h, d)][k] for d in devs}
            _seen_alone(flows, ios, alone, h, b, k)
            part = _part(flows, ios, alone, h, b, k)
            if part is None:
                continue
            y, mean_busy = part[2], part[3]
            out.yields[(h, ctl)][k] = y
            if y < HELD_BACK:
                out.held[(h, ctl)][k] = mean_busy
            up = data.links.get((h, ctl), {}).get("upstream", "")
            if up:
                out.parts[(h, up)][k].append(part)
    return out


def _seen_alone(
    flows: Flows,
    ios: dict[S.Key, Bins],
    alone: dict[S.Key, tuple[float, float]],
    h: str,
    b: dict[str, float | None],
    k: int,
) -> None:
    """Keep what a disk moved in step ``k`` if it was alone on its controller then."""
    active = [d for d, v in b.items() if v is not None and v >= OTHERS_IDLE]
    if len(active) == 1 and (b[active[0]] or 0) >= ALONE_BUSY:
        d = active[0]
        moved = S.at(flows.disk_bytes.get((h, d)), k)
        if moved is not None:
            alone[(h, d)] = (moved, S.at(ios.get((h, d)), k) or 0.0)


def _part(
    flows: Flows,
    ios: dict[S.Key, Bins],
    alone: dict[S.Key, tuple[float, float]],
    h: str,
    b: dict[str, float | None],
    k: int,
) -> Part | None:
    """(bytes now, bytes alone, yield, mean busy) of a controller's busy disks in step ``k``
    (None: no busy disk seen alone, or nothing to compare with)."""
    busy_devs = [d for d, v in b.items() if v is not None and v >= BUSY_DISK]
    seen = [d for d in busy_devs if (h, d) in alone]
    if not seen:
        return None
    now_b = math.fsum(S.at(flows.disk_bytes.get((h, d)), k) or 0.0 for d in seen)
    now_i = math.fsum(S.at(ios.get((h, d)), k) or 0.0 for d in seen)
    was_b = math.fsum(alone[(h, d)][0] for d in seen)
    was_i = math.fsum(alone[(h, d)][1] for d in seen)
    shares = [a / z for a, z in ((now_b, was_b), (now_i, was_i)) if z > 0]
    if not shares:
        return None
    mean_busy = math.fsum(b[d] or 0.0 for d in busy_devs) / len(busy_devs)
    return (now_b, was_b, max(shares), mean_busy)


def phrase(yields: Bins | None, subj: str, v: float, steps: list[int], link: str) -> str:
    """ "controller 0000:05:00.0 at 100 %, its busy disks moving 57 % of what they did alone"."""
    y = S.mean(yields, steps)
    held = f", its busy disks moving {S.pct(y)} of what they did alone" if y is not None else ""
    return f"controller {subj} at {S.pct(v)}{held}{link}"
