"""Where a NIC sits (driver, PCI address, NUMA node, link speed) and which IRQs are its own.

Pure over an injected /sys root, so it is tested on captured trees; the PCI address pattern,
the MSI vectors and the bounded reads are exporters/hostfs'.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from exporters.hostfs.numbers import parse_u64
from exporters.hostfs.pci import PCI_ADDR, msi_irqs
from exporters.hostfs.read import read_attr


@dataclass(frozen=True)
class NicInfo:
    """Static facts about one interface."""

    name: str
    driver: str
    pci: str  # PCI address of the function, "" for virtual interfaces
    numa_node: str  # "-1" when the platform does not say, "" without a PCI device
    speed_bytes: float | None  # link speed in bytes/s, None when unknown (down, virtual)
    msi_irqs: tuple[str, ...]  # the PCI function's MSI/MSI-X vectors


def _device_dir(sys_root: Path, name: str) -> Path | None:
    link = sys_root / "class" / "net" / name / "device"
    if not os.path.lexists(link):
        return None
    try:
        return link.resolve(strict=True)
    except (OSError, RuntimeError):  # pathlib raises RuntimeError on a symlink loop (< 3.13)
        return None


def nic_info(sys_root: Path, name: str) -> NicInfo:
    """Driver, PCI address, NUMA node, speed and MSI vectors of an interface."""
    net = sys_root / "class" / "net" / name
    dev = _device_dir(sys_root, name)
    driver = pci = numa = ""
    irqs: tuple[str, ...] = ()
    if dev is not None:
        drv = dev / "driver"
        driver = os.path.basename(os.path.realpath(drv)) if os.path.lexists(drv) else ""
        # virtio-net's device is the virtio bus device; its parent is the PCI function that
        # owns the interrupts. Walk up to the nearest PCI address.
        d: Path | None = dev
        while d is not None and d != d.parent and not PCI_ADDR.match(d.name):
            d = d.parent
        if d is not None and PCI_ADDR.match(d.name):
            pci = d.name
            numa = read_attr(d / "numa_node") or "-1"
            irqs = msi_irqs(d)
    # Mb/s; -1 (SPEED_UNKNOWN) or anything not a plain positive number: unknown
    mbps = parse_u64(read_attr(net / "speed"))
    speed_bytes = mbps * 1e6 / 8 if mbps else None
    return NicInfo(name, driver, pci, numa, speed_bytes, irqs)
