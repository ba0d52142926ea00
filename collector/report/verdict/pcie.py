"""The pcie resource, and the controllers' own links: bytes through each PCIe link against
its usable bytes/s, and a bridge whose controllers are all held back.

Bytes through each PCI function per direction: "up" from the device to the host (disk reads,
NIC rx), "down" to the device (disk writes, NIC tx); a function that is both a storage
controller and a NIC's counts as a controller, on its own host. A function's own link is
its own (a controller's is the controller's utilisation); the bridge directly above each
device and the root port at the top of its chain carry the sum of every device below them,
shared only where two or more functions are below (a port's own link figures are of its link
to the one device below it). A bridge with two or more controllers below it, every one held
back and together under HELD_BACK, is a PCIe limit: the mean busy of their disks (the PCI-X
slots behind one bridge, which have no PCIe figure).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..series import Bins, VerdictData
from . import steps as S
from .controller import HELD_BACK, Part
from .flows import Flows

Way = tuple[str, str, str]  # (host, PCI address, up|down)
SHARED_BY = 2  # a bridge's link is shared, and can be the common factor, from two devices


@dataclass
class Links:
    """Per host, ``("controller" | "pcie", address)``: bytes against usable bytes/s per step,
    uncapped (above 1 the usable figure cannot be true)."""

    measured: dict[str, dict[S.Key, Bins]] = field(default_factory=dict)


def links(flows: Flows, data: VerdictData) -> Links:
    """Every link with bytes through it and a usable figure, own and shared."""
    n = flows.n
    through: dict[Way, Bins] = defaultdict(lambda: [None] * n)
    controllers = {(h, ctl) for (h, _d), ctl in data.disk_controller.items()}
    for (h, d), ctl in data.disk_controller.items():
        S.add(through[(h, ctl, "up")], flows.reads.get((h, d), []))
        S.add(through[(h, ctl, "down")], flows.writes.get((h, d), []))
    for (h, iface), pci in data.nic_pci.items():
        if (h, pci) in controllers:
            continue  # a function that is both counts as a controller
        S.add(through[(h, pci, "up")], flows.nic.get((h, iface, "rx"), []))
        S.add(through[(h, pci, "down")], flows.nic.get((h, iface, "tx"), []))
    out = Links()
    for (h, pci), ways in sorted(_shared(through, data).items()):
        if (usable := data.usable.get((h, pci))) is not None:
            out.measured.setdefault(h, {})[("pcie", pci)] = S.busier(ways, usable)
    for (h, pci), usable in data.usable.items():
        ways = [through[(h, pci, d)] for d in ("up", "down") if (h, pci, d) in through]
        if not ways:
            continue
        b = S.busier(ways, usable)
        mine = out.measured.setdefault(h, {})
        if data.links.get((h, pci), {}).get("role") == "controller" or (h, pci) in controllers:
            mine[("controller", pci)] = b
        else:
            S.max_into(mine, ("pcie", pci), b)
    return out


def _shared(through: dict[Way, Bins], data: VerdictData) -> dict[S.Key, list[Bins]]:
    """Per (host, bridge or root port) with two or more functions below: the sums of their
    bytes per direction."""
    n = len(next(iter(through.values()), []))
    below: dict[S.Key, set[str]] = defaultdict(set)
    for h, pci, _d in through:
        for above in _above(data, h, pci):
            below[(h, above)].add(pci)
    shared: dict[Way, Bins] = defaultdict(lambda: [None] * n)
    for (h, pci, d), b in list(through.items()):
        for above in _above(data, h, pci):
            if len(below[(h, above)]) >= SHARED_BY:
                S.add(shared[(h, above, d)], b)
    out: dict[S.Key, list[Bins]] = {}
    for h, pci in sorted({(h, pci) for h, pci, _d in shared}):
        out[(h, pci)] = [shared[(h, pci, d)] for d in ("up", "down") if (h, pci, d) in shared]
    return out


def _above(data: VerdictData, h: str, pci: str) -> set[str]:
    info = data.links.get((h, pci), {})
    return {info.get("upstream", ""), info.get("root", "")} - {"", pci}


def bridges(
    parts: dict[S.Key, list[list[Part]]], n: int
) -> tuple[dict[S.Key, Bins], dict[S.Key, Bins]]:
    """Per (host, bridge): the yield of the controllers below it together, and where two or
    more are below and every one is held back, the mean busy of their disks (the plateau)."""
    yields: dict[S.Key, Bins] = {}
    plateaus: dict[S.Key, Bins] = {}
    for key, steps in parts.items():
        plateau: Bins = [None] * n
        yb: Bins = [None] * n
        for k, vals in enumerate(steps):
            now_b, was_b = math.fsum(v[0] for v in vals), math.fsum(v[1] for v in vals)
            if not vals or was_b <= 0:
                continue
            y = yb[k] = now_b / was_b
            # two or more controllers, every one held back: the bridge they share is the
            # common factor (three saturated controllers look the same: docs/rules.md)
            if len(vals) >= SHARED_BY and all(v[2] < HELD_BACK for v in vals) and y < HELD_BACK:
                plateau[k] = math.fsum(v[3] for v in vals) / len(vals)
        yields[key], plateaus[key] = yb, plateau
    return yields, plateaus


def link_note(usable: Bins | None, steps: list[int]) -> str:
    """Where a link's usable bytes/s changed among ``steps``: how often, else ''."""
    return S.changed(usable, steps, lambda v: f"{S.rate(v)} usable")[1]


def phrase(yields: Bins | None, subj: str, v: float, steps: list[int], link: str) -> str:
    """ "PCIe link 0000:10:00.0 100 % used" (and the disks behind it, held back)."""
    y = S.mean(yields, steps)
    held = ""
    if y is not None and y < HELD_BACK:
        held = f", the disks behind it moving {S.pct(y)} of what they did alone"
    return f"PCIe link {subj} {S.pct(v)} used{held}{link}"
