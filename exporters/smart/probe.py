"""Which RAID controllers smartctl's scan does not list, and which slots to try behind each.

smartctl's Linux scan (lib/os_linux.cpp ``scan_smart_devices``) enumerates the members of
MegaRAID (``get_dev_megasas``) and SSSRAID (``get_dev_sssraid``) controllers only; behind an
HPE Smart Array, 3ware, Adaptec, Areca or HighPoint controller it lists the volume, never the
disks. Those disks are found the way smartctl's own documentation addresses them (smartctl(8)
-d, smartd.conf(5) examples): the driver of the SCSI host names the controller
(exporters/hostfs/scsihosts.py), a node of that controller is what smartctl opens, and each
slot is tried with its ``-d`` type. A slot whose read gives health data (or says the disk
sleeps) holds a disk; the exporter keeps those and tries the others again later.

Slot ranges are smartctl's own bounds where the controller can have that many (os_linux.cpp
``get_custom_device``), else the largest product's port count, so a probe round is bounded:
at most MAX_PROBES runs per controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporters.hostfs.scsihosts import ScsiHost

MAX_PROBES = 256  # smartctl runs per controller and probe round
TYPE_DISK = 0  # SPC peripheral device types (SPC-4 table 49)
TYPE_PROCESSOR = 3
TYPE_RAID = 12

# 3ware's character devices per driver (drivers/scsi/3w-xxxx.c "twe", 3w-9xxx.c "twa",
# 3w-sas.c "twl"), numbered in the order the driver found its controllers; smartctl picks the
# ioctl by the node's name (os_linux.cpp: /dev/twl, /dev/twa, /dev/twe).
_3WARE = {"3w-xxxx": ("twe", 16), "3w-9xxx": ("twa", 128), "3w-sas": ("twl", 128)}
# HighPoint RocketRAID drivers answering smartctl's HPTIO_CTL ioctl (os_linux.cpp
# linux_highpoint_device): the open hptiop and the vendor's rr* / hptmv drivers.
_HPT_PREFIXES = ("hptiop", "hptmv", "rr")


@dataclass(frozen=True)
class Controller:
    """A RAID controller whose disks are probed: the node smartctl opens and the types to try."""

    driver: str  # "hpsa", "cciss", "3w-9xxx", "aacraid", "arcmsr", "hptiop"
    path: str  # "/dev/sda", "/dev/twa0", "/dev/sg3", "/dev/cciss/c0d0"
    types: tuple[str, ...]  # -d types in probe order: "cciss,0", "cciss,1" ...
    contiguous: bool  # the slots are an index without gaps: stop at the first empty one


def _first_node(host: ScsiHost, generic: bool = False) -> str:
    """A node of a device on host: a disk's block node, else any generic node ("" if none)."""
    if not generic:
        for d in host.devices:
            if d.block and d.peripheral_type == TYPE_DISK:
                return "/dev/" + d.block
    for d in host.devices:
        if d.generic:
            return "/dev/" + d.generic
    return ""


def _areca_node(host: ScsiHost) -> str:
    """The Areca controller's own generic node: the processor device arcmsr adds (at
    channel 0, target 16: drivers/scsi/arcmsr/arcmsr_hba.c ARCMSR_VIRTUAL_DEVICE_ID)."""
    for d in host.devices:
        if d.generic and d.peripheral_type == TYPE_PROCESSOR:
            return "/dev/" + d.generic
    return _first_node(host, generic=True)


def plan(hosts: list[ScsiHost], cciss_drives: list[str]) -> list[Controller]:
    """The controllers to probe on a host with these SCSI hosts and old-cciss logical drives."""
    out: list[Controller] = []
    # HPE Smart Array: "cciss,N" is an index into the controller's REPORT PHYSICAL LUNS list
    # (lib/cciss.cpp cciss_getlun), so the disks are 0..n-1 without gaps; smartctl allows
    # 0..127. hpsa: through a disk of the controller (smartctl(8) "-d cciss,N /dev/sda"), else
    # its generic node (the controller itself, peripheral type 12, has one).
    smart_array = [*("/dev/" + d for d in cciss_drives)]
    smart_array += [_first_node(h) for h in hosts if h.driver == "hpsa"]
    for path in smart_array:
        if path:
            out.append(Controller("hpsa", path, tuple(f"cciss,{n}" for n in range(128)), True))
    seen_3ware: dict[str, int] = {}
    hpt_index = 0
    for h in hosts:
        if h.driver in _3WARE:
            prefix, ports = _3WARE[h.driver]
            k = seen_3ware[prefix] = seen_3ware.get(prefix, -1) + 1
            types = tuple(f"3ware,{n}" for n in range(ports))
            out.append(Controller(h.driver, f"/dev/{prefix}{k}", types, False))
        elif h.driver == "aacraid" and (node := _first_node(h)):
            # aacraid,H,L,ID: H this host's number (smartctl opens /dev/aacH), L the channel
            # the physical disks are on (0: smartctl(8), the smartmontools wiki's Adaptec
            # examples), ID the target.
            types = tuple(f"aacraid,{h.number},0,{n}" for n in range(128))
            out.append(Controller(h.driver, node, types, False))
        elif h.driver == "arcmsr" and (node := _areca_node(h)):
            # areca,N/E: port N 1..32 (smartctl allows 1..128; the largest ARC-1xxx has 24
            # ports) in enclosure E 1..8 (1: the controller's own ports, 2..8 expanders).
            types = tuple(f"areca,{n}/{e}" for e in range(1, 9) for n in range(1, 33))
            out.append(Controller(h.driver, node, types, False))
        elif h.driver.startswith(_HPT_PREFIXES) and hpt_index < 8 and (node := _first_node(h)):
            # hpt,L/M: controller L (1-based, in the order the driver registered them),
            # channel M 1..32 (RocketRAID cards have up to 24 ports), no port multiplier.
            hpt_index += 1
            types = tuple(f"hpt,{hpt_index}/{m}" for m in range(1, 33))
            out.append(Controller(h.driver, node, types, False))
    return [
        Controller(c.driver, c.path, c.types[:MAX_PROBES], c.contiguous) for c in out if c.types
    ]
