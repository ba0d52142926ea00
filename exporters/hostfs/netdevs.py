"""Network interfaces in a /sys tree, and which of them the agent exports (the nic exporter's
interfaces, whose PCI functions the pcie exporter follows).

Root injected: a captured tree's class/net is read as the live one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from .numbers import parse_u64
from .read import read_attr

IFF_LOOPBACK = 0x8  # include/uapi/linux/if.h

# Container and VM plumbing: one veth per container would blow the series budget, and their
# traffic is already counted on the physical NIC. Loopback is always left out.
NIC_EXCLUDE = r"^(veth|docker|br-|virbr|vnet|cali|flannel|cni|lxc|tap|tun|ifb)"


def interface_names(sys_root: Path) -> list[str]:
    """Every interface of the network namespace whose /sys this is."""
    try:
        return sorted(os.listdir(Path(sys_root) / "class" / "net"))
    except OSError:
        return []


def is_loopback(sys_root: Path, name: str, read: Callable[[str], str] = read_attr) -> bool:
    """IFF_LOOPBACK in the interface's flags ("0x9" for lo); read: read_attr or a HeldAttrs'."""
    flags = read(f"{sys_root}/class/net/{name}/flags").removeprefix("0x")
    return bool((parse_u64(flags, 16) or 0) & IFF_LOOPBACK)


def wanted_interfaces(
    sys_root: Path, exclude: re.Pattern[str] | None, read: Callable[[str], str] = read_attr
) -> list[str]:
    """The interfaces the agent exports: all but loopback and those exclude matches."""
    return [
        name
        for name in interface_names(sys_root)
        if not (exclude and exclude.search(name)) and not is_loopback(sys_root, name, read)
    ]
