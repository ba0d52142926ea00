"""SCSI hosts in a /sys tree: each host's driver and the device nodes of the devices on it.

smartctl reaches a disk hidden behind a RAID controller through a node of that controller
(smartctl(8) -d: ``cciss,N`` and ``aacraid,H,L,ID`` through a disk of the controller,
``areca,N`` through the controller's SCSI generic node, ``3ware,N`` through /dev/twaN), and
the driver that owns a SCSI host names the controller: ``/sys/class/scsi_host/hostN/proc_name``
(drivers/scsi/scsi_sysfs.c, shost_attr proc_name: the driver's ``scsi_host_template.proc_name``,
"hpsa", "aacraid", "arcmsr", "3w-9xxx" ...). Pure functions of the tree (tree.py: symlinks
resolved inside the root); every listing is bounded.

Kernel references:
  Documentation/ABI/testing/sysfs-class-scsi_host   (proc_name)
  drivers/scsi/scsi_sysfs.c                         scsi_device "type" (SPC peripheral type)
  drivers/scsi/sg.c                                 scsi_generic/sgN under each scsi_device
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .read import SYS_ROOT
from .tree import attr_in, entries_in, resolve_in

MAX_HOSTS = 256  # SCSI hosts looked at (a host with many HBAs has tens)
MAX_DEVICES = 4096  # SCSI devices looked at, over all hosts

_HOST = re.compile(r"^host(0|[1-9][0-9]{0,5})$")
_HCTL = re.compile(r"^(0|[1-9][0-9]{0,5}):(\d{1,6}):(\d{1,6}):(\d{1,12})$")
_NODE = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # sda, sdaa, sg12: never a path, never ".."
_DRIVER = re.compile(r"^[A-Za-z0-9_.+-]{1,32}$")
_CCISS = re.compile(r"^cciss!c(0|[1-9][0-9]{0,2})d(0|[1-9][0-9]{0,3})$")


@dataclass(frozen=True)
class ScsiDevice:
    """One device on a SCSI host: its address and the nodes the kernel gave it."""

    hctl: tuple[int, int, int, int]  # host, channel, target, lun
    peripheral_type: int  # SPC peripheral device type: 0 disk, 3 processor, 12 RAID controller
    block: str  # "sda", "" when it has no block node
    generic: str  # "sg2", "" when sg is not loaded


@dataclass(frozen=True)
class ScsiHost:
    """A SCSI host (one controller, or one port of it) and its driver."""

    number: int
    driver: str  # proc_name: "hpsa", "aacraid", "arcmsr", "3w-9xxx" ...; "" when unreadable
    devices: tuple[ScsiDevice, ...]  # sorted by address


def scsi_hosts(sys_root: Path = SYS_ROOT) -> list[ScsiHost]:
    """Every SCSI host of /sys/class/scsi_host, sorted by number, with its devices."""
    root = Path(sys_root)
    devices: dict[int, list[ScsiDevice]] = {}
    for hctl_name in sorted(entries_in(root, ("class", "scsi_device")))[:MAX_DEVICES]:
        m = _HCTL.match(hctl_name)
        if m is None:
            continue
        hctl = (int(m[1]), int(m[2]), int(m[3]), int(m[4]))
        base = resolve_in(root, ("class", "scsi_device", hctl_name, "device"))
        if base is None:
            continue  # gone, or a link out of the tree
        kind = attr_in(root, base, "type")
        block = [n for n in entries_in(root, base, "block") if _NODE.match(n)]
        generic = [n for n in entries_in(root, base, "scsi_generic") if _NODE.match(n)]
        devices.setdefault(hctl[0], []).append(
            ScsiDevice(
                hctl,
                int(kind) if kind.isdigit() and len(kind) <= 3 else -1,
                min(block, default=""),
                min(generic, default=""),
            )
        )
    hosts = []
    for name in entries_in(root, ("class", "scsi_host")):
        m = _HOST.match(name)
        if m is None:
            continue
        driver = attr_in(root, ("class", "scsi_host", name), "proc_name")
        number = int(m[1])
        found = sorted(devices.get(number, []), key=lambda d: d.hctl)
        hosts.append(ScsiHost(number, driver if _DRIVER.match(driver) else "", tuple(found)))
    hosts.sort(key=lambda h: h.number)
    return hosts[:MAX_HOSTS]


def cciss_controllers(sys_root: Path = SYS_ROOT) -> list[str]:
    """The first logical drive of every controller the old cciss driver runs ("cciss/c0d0").

    The cciss block driver (removed in Linux 4.14, still in RHEL 6/7 kernels) registers its
    logical drives as block devices ``cciss!cXdY`` (the "!" is sysfs's "/") and no SCSI host."""
    firsts: dict[int, tuple[int, str]] = {}
    for name in entries_in(Path(sys_root), ("class", "block"))[:MAX_DEVICES]:
        m = _CCISS.match(name)
        if m is None:
            continue
        ctrl, drive = int(m[1]), int(m[2])
        if ctrl not in firsts or drive < firsts[ctrl][0]:
            firsts[ctrl] = (drive, name.replace("!", "/"))
    return [firsts[c][1] for c in sorted(firsts)]
