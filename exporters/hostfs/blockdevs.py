"""Block devices in a /sys tree: model, serial, host controller and its NUMA node, and which of
them the agent exports (blockio's disks, whose health smart reads and whose controllers pcie
follows).

Everything here is a pure function of the tree under ``sys_root`` (no global state, no caching),
so it is tested on captured and reconstructed trees under tests/fixtures/sys/; SharedTopology is
the one object with state, made and handed to its exporters by its owner (the agent). Symlinks are
resolved *inside* ``sys_root`` (tree.py): a captured tree never leads into the real /sys.

Kernel references:
  Documentation/ABI/stable/sysfs-block      dev, size, partition, hidden, queue/rotational
  Documentation/ABI/testing/sysfs-bus-pci   numa_node
  drivers/scsi/scsi_sysfs.c                 model, wwid, vpd_pg80 of SCSI/ATA devices
  drivers/nvme/host/sysfs.c                 model/serial of controllers and subsystems,
                                            the "multipath" group of namespace heads
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .pci import last_pci
from .read import SYS_ROOT
from .tree import Rel, attr_in, bytes_in, entries_in, is_file_in, resolve_in

# What the agent leaves out by default: RAM disks, compressed RAM swap, floppies and optical
# drives carry no data-mover traffic. Partitions follow their disk.
BLOCK_EXCLUDE = r"^(ram|zram|fd|sr)\d+$"

_NVME_CTRL = re.compile(r"^nvme\d+$")
_STRIP = " \t\r\n\x00"


@dataclass(frozen=True)
class DiskInfo:
    """What sysfs says about one block device (whole disk or partition)."""

    device: str  # kernel name: sda, sda1, nvme0n1, nvme0n1p2, loop3, vda, dm-0 ...
    major: int
    minor: int
    model: str  # "" when unknown
    serial: str  # "" when unknown
    controller: str  # PCI address of the host controller, "" if none (virtual devices)
    numa_node: str  # that controller's numa_node ("-1" unknown); "" when no controller
    rotational: str  # "0"/"1" from queue/rotational ("" if absent); partitions take their parent's
    parent: str  # for a partition, the whole disk's name; "" for a whole disk
    size_bytes: int  # size * 512


def read_topology(sys_root: Path = SYS_ROOT) -> dict[str, DiskInfo]:
    """Describe every block device under sys_root/class/block, keyed and sorted by kernel name."""
    root = Path(sys_root)
    out: dict[str, DiskInfo] = {}
    for name, path in _block_entries(root):
        devt = _parse_devt(attr_in(root, path, "dev"))
        # No dev_t: the device vanished during the scan, or it is a hidden NVMe path device
        # (nvmeXcYnZ) which the kernel registers without one. Older kernels gave hidden disks a
        # dev_t, hence the explicit "hidden" check too: they cannot be opened, and the head
        # node nvmeXnY already stands for them.
        if devt is None or attr_in(root, path, "hidden") == "1":
            continue
        # A partition is a child directory of its disk and has a "partition" file; it has no
        # device link and no queue/ of its own, so everything physical comes from the disk.
        is_partition = len(path) >= 2 and is_file_in(root, path, "partition")
        disk = path[:-1] if is_partition else path
        model, serial, controller, numa_node, rotational = _disk_attrs(root, disk)
        out[name] = DiskInfo(
            device=name,
            major=devt[0],
            minor=devt[1],
            model=model,
            serial=serial,
            controller=controller,
            numa_node=numa_node,
            rotational=rotational,
            parent=disk[-1] if is_partition else "",
            size_bytes=_parse_int(attr_in(root, path, "size")) * 512,  # always 512 B units
        )
    return out


class SharedTopology:
    """read_topology() once for the exporters that ask within ``max_age`` s of each other.

    blockio and pcie each read the whole topology at their first scrape and at each refresh,
    milliseconds apart in one scrape (~10 ms each on a 48-disk host: issue 35). A reader gets
    the last read while it is younger than ``max_age`` and sys_root/class/block lists the same
    devices (one came or went: read afresh); ``force`` reads afresh in any case (blockio: a
    device doing I/O the last read did not describe). The result is shared: never changed.
    """

    def __init__(
        self,
        sys_root: Path = SYS_ROOT,
        max_age: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sys_root = sys_root
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, list[str], dict[str, DiskInfo]] | None = None
        self.reads = 0  # read_topology() calls made (tests, benches)

    def read(self, force: bool = False) -> dict[str, DiskInfo]:
        """The topology: the last read if young enough and the devices the same, else afresh."""
        root = Path(self.sys_root)
        listing = _listing(root) if self.max_age > 0 else []
        with self._lock:
            now = self._clock()
            last = self._last
            if not (force or last is None or last[1] != listing or now - last[0] >= self.max_age):
                return last[2]
            infos = read_topology(root)
            self.reads += 1
            self._last = (now, listing, infos)
            return infos


def _listing(root: Path) -> list[str]:
    """The entries of root/class/block, sorted ([] when unreadable)."""
    cls = resolve_in(root, ("class", "block"))
    try:
        return [] if cls is None else sorted(os.listdir(root.joinpath(*cls)))
    except OSError:
        return []


def devt_names(sys_root: Path = SYS_ROOT) -> dict[tuple[int, int], str]:
    """Map (major, minor) to the kernel name, from sys_root/class/block/*/dev."""
    root = Path(sys_root)
    out: dict[tuple[int, int], str] = {}
    for name, path in _block_entries(root):
        devt = _parse_devt(attr_in(root, path, "dev"))
        if devt is not None:
            out[devt] = name
    return out


def is_virtual_block(sys_root: Path, name: str) -> bool:
    """True for a device the kernel registers under devices/virtual/block (loop, zram, dm, md).

    Those have no hardware of their own, hence no SMART; their disks are read under their own
    names. NVMe multipath heads live under devices/virtual/nvme-subsystem and are not virtual
    in this sense: they are the namespace of real controllers.
    """
    if "/" in name or name in ("", ".", ".."):
        return False  # not one entry of class/block
    root = Path(sys_root)
    cls = resolve_in(root, ("class", "block"))
    path = None if cls is None else resolve_in(root, (name,), cls)
    return path is not None and path[:3] == ("devices", "virtual", "block")


def excluded(exclude: re.Pattern[str], info: DiskInfo) -> bool:
    """True when exclude matches the device or, for a partition, the disk it is part of."""
    return bool(exclude.search(info.device) or (info.parent and exclude.search(info.parent)))


# --- the tree -------------------------------------------------------------------------------


def _block_entries(root: Path) -> Iterator[tuple[str, Rel]]:
    """(kernel name, resolved device directory) of each sys_root/class/block entry, by name."""
    cls = resolve_in(root, ("class", "block"))
    if cls is None:
        return
    try:
        names = sorted(os.listdir(root.joinpath(*cls)))
    except OSError:
        return
    known: set[str] = set()  # the directories the devices' links lead through, each once
    for name in names:
        path = resolve_in(root, (name,), cls, known)
        if path is not None:
            yield name, path


# --- attributes -----------------------------------------------------------------------------


def _disk_attrs(root: Path, disk: Rel) -> tuple[str, str, str, str, str]:
    """(model, serial, controller, numa_node, rotational) of the whole disk at disk."""
    # device/model: SCSI/ATA (16 space-padded bytes, truncated ATA model), NVMe controller or
    # subsystem. dm's dm/name and md's md/ are names of volumes, not models: never read them.
    # device/ resolved once: a disk reads up to six things under it, and loop, zram, dm and md
    # disks have none (issue 35: each was a readlink per disk and attribute).
    device = resolve_in(root, ("device",), disk)
    model = "" if device is None else attr_in(root, device, "model")
    controller = ""
    numa_node = ""
    pci = _controller_dir(root, disk, device)
    if pci is not None:
        controller = pci[-1]
        # numa_node is -1 when the firmware gave no affinity; a kernel without CONFIG_NUMA has
        # no such file at all, which is just as unknown.
        numa_node = (
            attr_in(root, pci, "numa_node")
            or attr_in(root, ("bus", "pci", "devices", controller), "numa_node")
            or "-1"
        )
    rotational = attr_in(root, disk, "queue", "rotational")
    return model, _serial(root, disk, device), controller, numa_node, rotational


def _serial(root: Path, disk: Rel, device: Rel | None) -> str:
    """The serial number: NVMe device/serial, virtio serial, SCSI VPD page 0x80, else wwid."""
    value = "" if device is None else attr_in(root, device, "serial")
    value = value or attr_in(root, disk, "serial")
    if value or device is None:
        return value
    # VPD page 0x80 (Unit Serial Number, SPC-4 7.8.15): byte 1 is the page code, bytes 2-3 the
    # big-endian length of the ASCII serial that follows. libata emulates it from IDENTIFY,
    # whose serial is space-padded on either side depending on the vendor.
    page = bytes_in(root, device, "vpd_pg80")
    if page is not None and len(page) > 4 and page[1] == 0x80:
        length = int.from_bytes(page[2:4], "big")
        value = page[4 : 4 + length].decode("ascii", "replace").strip(_STRIP)
        if value:
            return value
    # wwid (from VPD page 0x83) names the unit uniquely: the best stand-in on older kernels
    # without the vpd_pg80 attribute, or devices that do not implement page 0x80.
    return attr_in(root, device, "wwid")


def _controller_dir(root: Path, disk: Rel, device: Rel | None) -> Rel | None:
    """The resolved directory of the PCI function the disk hangs off, None for virtual disks."""
    own = last_pci(disk)
    if own is not None:
        return own
    # NVMe native multipath: the head nvmeXnY lives under devices/virtual/nvme-subsystem/ and
    # I/O goes to whichever path the iopolicy picks, so no single controller is "the" one. Take
    # the first path in natural order, which keeps the label stable across scrapes:
    #  1. <head>/multipath/nvmeXcYnZ links to the path devices (recent kernels, live paths only),
    #  2. else nvmeN links in the subsystem directory (<head>/device) to its controllers.
    # Paths over fabrics (devices/virtual/nvme-fabrics/) have no PCI function and are skipped.
    for name in sorted(entries_in(root, disk, "multipath"), key=_natural):
        found = last_pci(resolve_in(root, ("multipath", name), disk))
        if found is not None:
            return found
    subsystem = device
    if subsystem is None or len(subsystem) < 2 or subsystem[-2] != "nvme-subsystem":
        return None  # dm, md, loop, zram ...: deliberately no controller (slaves not followed)
    for name in sorted(filter(_NVME_CTRL.match, entries_in(root, subsystem)), key=_natural):
        found = last_pci(resolve_in(root, (name,), subsystem))
        if found is not None:
            return found
    return None


def _uint(text: str, bound: int) -> int | None:
    """A plain ASCII decimal below bound, None for anything else (no int() digit-limit error)."""
    significant = text.lstrip("0")
    if not text or len(significant) > 20 or not text.isascii() or not text.isdigit():
        return None
    value = int(significant or "0")
    return value if value < bound else None


def _parse_devt(text: str) -> tuple[int, int] | None:
    """(major, minor) from "MAJ:MIN"; None if malformed (dev_t is 32 bits: 12 + 20)."""
    major, sep, minor = text.partition(":")
    if not sep:
        return None
    ma, mi = _uint(major, 1 << 32), _uint(minor, 1 << 32)
    return None if ma is None or mi is None else (ma, mi)


def _parse_int(text: str) -> int:
    """The size attribute (512-byte sectors); 0 when unknown or malformed (>= 2^64)."""
    value = _uint(text, 1 << 64)
    return 0 if value is None else value


def _natural(name: str) -> list[str | int]:
    """Sort key putting nvme2 before nvme10."""
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name)]
