"""Where a NIC sits (driver, PCI address, NUMA node, link speed) and which IRQs are its own.

Pure over an injected /sys and /proc root, so it is tested on captured trees.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .procfs import parse_u64

_PCI = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return ""


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
        while d is not None and d != d.parent and not _PCI.match(d.name):
            d = d.parent
        if d is not None and _PCI.match(d.name):
            pci = d.name
            numa = _read(d / "numa_node") or "-1"
            irqs = msi_irqs(d)
    # Mb/s; -1 (SPEED_UNKNOWN) or anything not a plain positive number: unknown
    mbps = parse_u64(_read(net / "speed"))
    speed_bytes = mbps * 1e6 / 8 if mbps else None
    return NicInfo(name, driver, pci, numa, speed_bytes, irqs)


def msi_irqs(pci_dir: Path) -> tuple[str, ...]:
    """The IRQ numbers of a PCI function's MSI/MSI-X vectors (its msi_irqs/), in numeric order."""
    try:
        names = os.listdir(pci_dir / "msi_irqs")
    except OSError:  # no MSI (legacy INTx, virtual) or the device left
        return ()
    return tuple(
        sorted((n for n in names if n.isascii() and n.isdigit()), key=lambda s: (len(s), s))
    )


def irq_affinity(proc_root: Path, irq: str) -> tuple[str, str]:
    """(allowed CPUs, effective CPUs) of an IRQ as cpu lists like "0-3,8"; "" if unknown."""
    d = proc_root / "irq" / irq
    return _read(d / "smp_affinity_list"), _read(d / "effective_affinity_list")
