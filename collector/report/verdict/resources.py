"""Every resource's utilisation per step and host, from the tracks and the gathered data."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..series import Bins, Grid, Track, VerdictData
from . import controller, cpu, disk, nic, pcie, tcp
from . import steps as S
from .flows import Flows

MOVING_NIC, MOVING_DISK = 10e6 / 8, 1e6  # bytes/s: a host below both moved no data


@dataclass
class Usage:
    """Per host: each (resource, subject)'s utilisation per step, and what the evidence cites."""

    util: dict[str, dict[S.Key, Bins]]  # 0-1
    # against a stated capacity (NIC speed, usable PCIe bytes/s), uncapped: above 1 it is wrong
    measured: dict[str, dict[S.Key, Bins]]
    moving: dict[str, list[bool]]  # per host and step: moved data
    speed: dict[S.Key, Bins]  # (host, interface) -> bytes/s per step
    usable: dict[S.Key, Bins]  # (host, PCI address) -> bytes/s per step
    softirq: dict[S.Key, Bins]  # (host, cpu)
    disk_bytes: dict[S.Key, Bins]  # (host, device)
    disk_ios: dict[S.Key, Bins]  # (host, device): requests/s
    yields: dict[S.Key, Bins]  # (host, controller or bridge) -> share


def usage(grid: Grid, tracks: Iterable[Track], data: VerdictData) -> Usage:
    """Every resource's utilisation per step, per host (pure)."""
    n = grid.n
    flows = Flows.of(tracks, n)
    ios = disk.requests(data.rates, n)
    util: dict[str, dict[S.Key, Bins]] = {
        h: dict(d) for h, d in disk.utilisation(flows, data).items()
    }
    measured: dict[str, dict[S.Key, Bins]] = {}
    for (h, iface), b in nic.measured(flows, data).items():
        measured.setdefault(h, {})[("nic", iface)] = b
    for h, by_subject in pcie.links(flows, data).measured.items():
        measured.setdefault(h, {}).update(by_subject)
    for h, by_subject in measured.items():
        for key, b in by_subject.items():
            S.max_into(util.setdefault(h, {}), key, S.cap(b))
    held = controller.held_back(flows, data, ios)
    for (h, ctl), b in held.held.items():
        S.max_into(util.setdefault(h, {}), ("controller", ctl), b)
    bridge_yields, plateaus = pcie.bridges(held.parts, n)
    for (h, up), b in plateaus.items():
        S.max_into(util.setdefault(h, {}), ("pcie", up), b)
    busy, softirq = cpu.moving(data.rates, n)
    for (h, c), b in busy.items():
        util.setdefault(h, {})[("cpu", c)] = b
    for h, share in tcp.retransmitted(data.rates, n).items():
        util.setdefault(h, {})[("tcp", "")] = tcp.utilisation(share)
    return Usage(
        util=util,
        measured=measured,
        moving={h: _moving(flows, h) for h in flows.hosts | set(util)},
        speed=dict(data.nic_speed),
        usable=dict(data.usable),
        softirq=softirq,
        disk_bytes=flows.disk_bytes,
        disk_ios=ios,
        yields={**held.yields, **bridge_yields},
    )


def _moving(flows: Flows, h: str) -> list[bool]:
    """Per step: ``h``'s NICs moved at least 10 Mbit/s or its disks at least 1 MB/s."""
    nic_sum = S.total([b for (hh, _i, _d), b in flows.nic.items() if hh == h], flows.n)
    disk_sum = S.total([b for (hh, _d), b in flows.disk_bytes.items() if hh == h], flows.n)
    return [
        (a or 0) >= MOVING_NIC or (d or 0) >= MOVING_DISK
        for a, d in zip(nic_sum, disk_sum, strict=True)
    ]
