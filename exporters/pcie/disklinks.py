"""The SATA or SAS link of each disk, from its device path in a /sys tree.

libata (drivers/ata/libata-transport.c) puts each port's links under the port device:
  .../0000:00:1f.2/ata3/link3/ata_link/link3/sata_spd      "1.5 Gbps" "3.0 Gbps" "6.0 Gbps",
                                                          "<unknown>" while the link is down
and the disk below it: .../0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sda. A port
multiplier adds links "link3.0" … "link3.14" under the same port, one per drive; which one is
the disk's is not in its path, so such ports give no rate.

The SAS transport class (drivers/scsi/scsi_transport_sas.c) puts the phys of a port under it
as links to the phy devices:
  .../host11/port-11:0/expander-11:0/port-11:0:0/{phy-11:0:2 -> ../phy-11:0:2, end_device-11:0:0}
  .../phy-11:0:2/sas_phy/phy-11:0:2/negotiated_linkrate   "6.0 Gbit", "12.0 Gbit", "22.5 Gbit";
                                                          "Unknown", "Phy disabled",
                                                          "Link Rate Unknown", … otherwise
so a disk's link is the port its end device hangs off: the expander's phy for a disk behind an
expander, the HBA's for a direct-attached one; a wide port's phys add up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from exporters.hostfs.read import read_attr
from exporters.hostfs.tree import entries_in, resolve_in

_ATA_PORT = re.compile(r"^ata[0-9]+$")
_ATA_LINK = re.compile(r"^link[0-9]+(\.[0-9]+)?$")
_END_DEVICE = re.compile(r"^end_device-[0-9:]+$")
_SAS_PORT = re.compile(r"^port-[0-9:]+$")
_SAS_PHY = re.compile(r"^phy-[0-9:]+$")
_SATA_RATE = re.compile(r"^([0-9]{1,2}(?:\.[0-9])?) Gbps$")
_SAS_RATE = re.compile(r"^([0-9]{1,2}(?:\.[0-9])?) Gbit$")
_MAX_PHYS = 16  # a wide port has at most 8 phys in practice (x4 and x8 connectors)


@dataclass(frozen=True)
class DiskLink:
    """Where to read one disk's link rate: the attribute files and the transport."""

    device: str
    transport: str  # "sata" or "sas"
    files: tuple[str, ...]  # the rate files, resolved inside sys_root when the chains were read


def parse_sata(text: str) -> float | None:
    """Bits/s of a sata_spd value ("6.0 Gbps" -> 6e9); None for "<unknown>" or anything odd."""
    match = _SATA_RATE.fullmatch(text.strip())
    return float(match.group(1)) * 1e9 if match else None


def parse_sas(text: str) -> float | None:
    """Bits/s of a negotiated_linkrate value ("12.0 Gbit" -> 12e9); None for "Unknown" etc."""
    match = _SAS_RATE.fullmatch(text.strip())
    return float(match.group(1)) * 1e9 if match else None


def disk_link(sys_root: Path, device: str, path: tuple[str, ...]) -> DiskLink | None:
    """The SATA or SAS link of the disk whose resolved directory is path; None if neither."""
    for i in range(len(path) - 1, 0, -1):
        if _END_DEVICE.match(path[i]) and _SAS_PORT.match(path[i - 1]):
            port = path[:i]
            phys = sorted(p for p in entries_in(sys_root, port) if _SAS_PHY.match(p))
            files = _resolved(
                sys_root,
                [(phy, "sas_phy", phy, "negotiated_linkrate") for phy in phys[:_MAX_PHYS]],
                port,
            )
            return DiskLink(device, "sas", files) if files else None
        if _ATA_PORT.match(path[i]):
            port = path[: i + 1]
            links = [n for n in entries_in(sys_root, port) if _ATA_LINK.match(n)]
            if len(links) != 1 or "." in links[0]:
                return None  # none, or a port multiplier's: not this disk's alone
            link = links[0]
            files = _resolved(sys_root, [(link, "ata_link", link, "sata_spd")], port)
            return DiskLink(device, "sata", files) if files else None
    return None


def _resolved(
    sys_root: Path, rels: list[tuple[str, ...]], base: tuple[str, ...]
) -> tuple[str, ...]:
    """The files base/rel that exist, resolved inside sys_root, as paths to open."""
    out = []
    for rel in rels:
        path = resolve_in(sys_root, rel, base)
        if path is not None:
            out.append(os.path.join(sys_root, *path))
    return tuple(out)


def read_rate(link: DiskLink) -> float | None:
    """The disk's link rate in bits/s now (a wide port's phys summed); None when unknown."""
    parse = parse_sas if link.transport == "sas" else parse_sata
    rates = [parse(read_attr(f, follow=False)) for f in link.files]
    known = [r for r in rates if r is not None]
    return sum(known) if known else None
