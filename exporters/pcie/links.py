"""PCIe links from a /sys tree: each device's chain of bridges up to the root bus, its link's
speed and width, the usable bandwidth that follows, and whether it trained below its maximum.

Pure over an injected sys_root; symlinks are resolved inside it (exporters/hostfs/tree.py's
confined walk, at most 40 links: a looping tree ends there), every read is bounded. What the
kernel prints, drivers/pci/pci-sysfs.c and drivers/pci/probe.c pci_speed_string():
  current_link_speed, max_link_speed  "8.0 GT/s PCIe" (since 4.17; before: "8 GT/s",
                                      "2.5 GT/s"), "Unknown" ("Unknown speed" before)
  current_link_width, max_link_width  "%u" lanes; 0 while the link is down
Only functions with a PCI Express capability have these files; conventional PCI (virtio on
these VMs) has none.
https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/drivers/pci/pci-sysfs.c
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from exporters.hostfs.pci import PCI_ADDR, ROOT_BUS
from exporters.hostfs.read import read_attr
from exporters.hostfs.tree import attr_in, resolve_in

_SPEED = re.compile(r"^([0-9]{1,3}(?:\.[0-9]{1,2})?) GT/s(?: PCIe)?$")
_WIDTH = re.compile(r"^x?([0-9]{1,2})$")
_MAX_CHAIN = 32  # bridges above a device; PCIe allows far fewer (bus numbers are 8 bits)

# Payload bytes per transfer per lane after the line encoding (PCIe Base Specification 6.0,
# 4.2: 8b/10b up to 5.0 GT/s, 128b/130b for 8.0-32.0 GT/s; 64.0 GT/s runs in Flit Mode, PAM4
# with 1b/1b encoding and a 256-byte flit of which 236 B TLP + 6 B DLP carry traffic and 8 B CRC
# + 6 B FEC do not: 242/256). docs/exporters/pcie.md has the table and sources.
_EFFICIENCY: dict[float, float] = {
    2.5e9: 8 / 10,
    5e9: 8 / 10,
    8e9: 128 / 130,
    16e9: 128 / 130,
    32e9: 128 / 130,
    64e9: 242 / 256,
}


def parse_speed(text: str) -> float | None:
    """Transfers/s of a *_link_speed value ("8.0 GT/s PCIe" -> 8e9); None for "Unknown" etc."""
    match = _SPEED.fullmatch(text.strip())
    if match is None:
        return None
    value = round(float(match.group(1)) * 1e9)
    return float(value) if value > 0 else None


def parse_width(text: str) -> int | None:
    """Lanes of a *_link_width value ("8" -> 8, 0 for a link that is down); None if odd."""
    match = _WIDTH.fullmatch(text.strip())
    if match is None:
        return None
    width = int(match.group(1))
    return width if width <= 32 else None  # x32 is the widest link the specification defines


def usable_bytes_per_second(speed: float | None, width: int | None) -> float | None:
    """Per-direction payload bandwidth of a link at speed (transfers/s) x width, else None."""
    if speed is None or width is None:
        return None
    efficiency = _EFFICIENCY.get(speed)
    if efficiency is None:
        return None  # a generation whose encoding the table does not know
    return speed * width / 8 * efficiency


@dataclass
class Node:
    """One PCI function of a chain: what is cached until the topology changes."""

    pci: str
    path: tuple[str, ...]  # resolved, relative to sys_root
    role: str  # controller, nic, root_port, bridge
    upstream: str  # PCI address of the bridge above, "" on a root bus
    root: str  # the root port at the top of the chain, else the root bus ("pci0000:00")
    driver: str
    faces_down: bool  # a root port or switch downstream port: its link is to its children
    max_speed: float | None
    max_width: int | None
    children: set[str] = field(default_factory=set)  # on the chains read


@dataclass(frozen=True)
class Link:
    """The current state of one node's link, read every scrape."""

    speed: float | None
    width: int | None
    max_speed: float | None
    max_width: int | None
    usable: float | None
    downgraded: bool | None  # None when the values it needs are unknown


def _chain(
    sys_root: Path, pci: str, hint: tuple[str, ...] | None
) -> list[tuple[str, tuple[str, ...]]] | None:
    """(address, resolved path) from the top of pci's chain down to pci, plus the root bus
    as a first pseudo entry ("pci0000:00", ()) when the chain starts at one; None if absent."""
    if not PCI_ADDR.match(pci):
        return None
    path = hint or resolve_in(sys_root, ("bus", "pci", "devices", pci))
    if path is None or not path or path[-1] != pci:
        return None
    out: list[tuple[str, tuple[str, ...]]] = []
    i = len(path) - 1
    while i >= 0 and PCI_ADDR.match(path[i]) and len(out) < _MAX_CHAIN:
        out.append((path[i], path[: i + 1]))
        i -= 1
    if i >= 0 and ROOT_BUS.match(path[i]):
        out.append((path[i], ()))
    out.reverse()
    return out


def _driver(sys_root: Path, path: tuple[str, ...]) -> str:
    """The bound driver: the last component of the function's driver link, "" if none."""
    try:
        target = os.readlink(sys_root.joinpath(*path, "driver"))  # read, never followed
    except (OSError, ValueError):
        return ""
    name = target.rstrip("/").rsplit("/", 1)[-1]
    return name if name.isprintable() and len(name) < 64 else ""


def read_chains(
    sys_root: Path,
    devices: dict[str, str],
    paths: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Node]:
    """The nodes of every device's chain ({pci: role}, role "controller" or "nic"), by address.

    paths: the device's resolved directory where the caller has it (from a disk's or an
    interface's own path); else sys_root/bus/pci/devices/ADDR. A device whose address is
    malformed or that is absent is left out.
    """
    nodes: dict[str, Node] = {}
    for pci in sorted(devices):
        chain = _chain(sys_root, pci, (paths or {}).get(pci))
        if chain is None:
            continue
        root_bus = chain[0][0] if not chain[0][1] else ""
        members = [c for c in chain if c[1]]
        # the root port (in an odd tree, the topmost bridge), else the root bus it sits on
        root = members[0][0] if len(members) > 1 else root_bus
        upstream = ""
        above_down = False  # the direction of the node above's link (none above the top)
        for index, (address, path) in enumerate(members):
            if index == len(members) - 1:
                role, down = devices[pci], False
            else:
                # Alternating from the top: a root port's link goes down to its device, which
                # is an endpoint or a switch's upstream port (link up); below an up port, a
                # switch's downstream port (link down), and so on.
                role = "root_port" if index == 0 and root_bus else "bridge"
                down = not above_down
            node = nodes.get(address)
            if node is None:
                node = Node(
                    pci=address,
                    path=path,
                    role=role,
                    upstream=upstream,
                    root=root,
                    driver=_driver(sys_root, path),
                    faces_down=down,
                    max_speed=parse_speed(attr_in(sys_root, path, "max_link_speed")),
                    max_width=parse_width(attr_in(sys_root, path, "max_link_width")),
                )
                nodes[address] = node
            elif role == "controller" and node.role == "nic":
                node.role = role  # a function both a NIC and a storage controller
            if upstream:
                nodes[upstream].children.add(address)
            upstream, above_down = address, down
    return nodes


def read_links(sys_root: Path, nodes: dict[str, Node]) -> dict[str, Link]:
    """Each node's current link, with the usable bandwidth and the downgraded flag."""
    current: dict[str, tuple[float | None, int | None]] = {}
    for address, node in nodes.items():
        base = os.path.join(sys_root, *node.path)
        current[address] = (
            parse_speed(read_attr(os.path.join(base, "current_link_speed"), follow=False)),
            parse_width(read_attr(os.path.join(base, "current_link_width"), follow=False)),
        )
    links = {}
    for address, node in nodes.items():
        speed, width = current[address]
        links[address] = Link(
            speed=speed,
            width=width,
            max_speed=node.max_speed,
            max_width=node.max_width,
            usable=usable_bytes_per_second(speed, width),
            downgraded=_downgraded(node, speed, width, nodes),
        )
    return links


def _downgraded(
    node: Node, speed: float | None, width: int | None, nodes: dict[str, Node]
) -> bool | None:
    """Below the maximum: its own for an up-facing link, both ends' for a down port."""
    max_speed, max_width = node.max_speed, node.max_width
    if speed is None or width is None or max_speed is None or max_width is None:
        return None
    if node.faces_down:
        # The port's link goes to the device(s) below it on the chains: they share the link,
        # so the most capable of them bounds what it can train to.
        below = [nodes[c] for c in node.children if c in nodes]
        speeds = [n.max_speed for n in below if n.max_speed is not None]
        widths = [n.max_width for n in below if n.max_width is not None]
        if speeds:
            max_speed = min(max_speed, max(speeds))
        if widths:
            max_width = min(max_width, max(widths))
    return speed < max_speed or width < max_width


def topology_names(sys_root: Path) -> tuple[str, ...]:
    """The entries of sys_root/class/block and class/net: a change means devices came or went."""
    names: list[str] = []
    for cls in ("block", "net"):
        try:
            names.extend(f"{cls}/{n}" for n in sorted(os.listdir(sys_root / "class" / cls)))
        except OSError:
            continue
    return tuple(names)
