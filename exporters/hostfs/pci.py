"""PCI functions in a /sys tree: their address pattern, the function a device hangs off, its
MSI vectors.

Kernel PCI device names are "%04x:%02x:%02x.%d" (domain:bus:device.function,
drivers/pci/probe.c pci_setup_device). The domain is printed with %04x, so it can be wider than
four digits: Intel VMD puts the NVMe drives behind it in domains 10000 and up; matching only
four digits would blame the VMD endpoint instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .tree import Rel

PCI_ADDR = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ROOT_BUS = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")  # "pci0000:00", a host bridge's bus


def last_pci(path: Rel | None) -> Rel | None:
    """path cut after its last PCI-address component (the endpoint, not bridges above it).

    None when path is None or has no PCI address."""
    if path is None:
        return None
    for i in range(len(path) - 1, -1, -1):
        if PCI_ADDR.match(path[i]):
            return path[: i + 1]
    return None


def msi_irqs(pci_dir: Path) -> tuple[str, ...]:
    """The IRQ numbers of a PCI function's MSI/MSI-X vectors (its msi_irqs/), in numeric order."""
    try:
        names = os.listdir(pci_dir / "msi_irqs")
    except OSError:  # no MSI (legacy INTx, virtual) or the device left
        return ()
    return tuple(
        sorted((n for n in names if n.isascii() and n.isdigit()), key=lambda s: (len(s), s))
    )
