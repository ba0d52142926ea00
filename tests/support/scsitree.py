"""Stand-in /sys trees of hosts with RAID controllers, laid out as the kernel does
(drivers/scsi/scsi_sysfs.c: the scsi_host class device's proc_name, each scsi_device's type,
its block and scsi_generic children; every class entry a relative symlink into devices/).
Used by tests/unit/test_smart_probe.py and tests/integration/test_smart_real.py.
"""

from __future__ import annotations

import os
from pathlib import Path

PCI = ("devices", "pci0000:00", "0000:00:03.0")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def add_host(sys_root: Path, number: int, driver: str) -> Path:
    """/sys/devices/.../hostN with its scsi_host class device (proc_name)."""
    host = sys_root.joinpath(*PCI, f"host{number}")
    cls = host / "scsi_host" / f"host{number}"
    cls.mkdir(parents=True)
    (cls / "proc_name").write_text(driver + "\n")
    _link(sys_root / "class" / "scsi_host" / f"host{number}", cls)
    return host


def add_device(
    sys_root: Path, hctl: str, kind: int, block: str = "", generic: str = "", dev: str = "8:0"
) -> None:
    """A scsi_device H:C:T:L of SPC type kind, with its block and sg nodes."""
    h, c, t, _ = hctl.split(":")
    d = sys_root.joinpath(*PCI, f"host{h}", f"target{h}:{c}:{t}", hctl)
    d.mkdir(parents=True)
    (d / "type").write_text(f"{kind}\n")
    sd = d / "scsi_device" / hctl
    sd.mkdir(parents=True)
    _link(sd / "device", d)
    _link(sys_root / "class" / "scsi_device" / hctl, sd)
    if block:
        b = d / "block" / block
        b.mkdir(parents=True)
        (b / "dev").write_text(dev + "\n")
        _link(b / "device", d)
        _link(sys_root / "class" / "block" / block, b)
        _link(sys_root / "block" / block, b)
    if generic:
        g = d / "scsi_generic" / generic
        g.mkdir(parents=True)
        _link(g / "device", d)
        _link(sys_root / "class" / "scsi_generic" / generic, g)


def hpe_host(tmp_path: Path) -> Path:
    """An HPE server: an AHCI port with the boot SSD, a Smart Array (hpsa) with one logical
    drive sdb and the controller itself (type 12, sg2), an old cciss controller."""
    root = tmp_path / "sys"
    add_host(root, 0, "ahci")
    add_device(root, "0:0:0:0", 0, "sda", "sg0")
    add_host(root, 2, "hpsa")
    add_device(root, "2:0:0:0", 12, "", "sg1")
    add_device(root, "2:1:0:0", 0, "sdb", "sg2", "8:16")
    cciss = root / "devices" / "pci0000:00" / "0000:00:04.0" / "cciss0" / "block" / "cciss!c0d0"
    cciss.mkdir(parents=True)
    _link(root / "class" / "block" / "cciss!c0d0", cciss)
    _link(root / "block" / "cciss!c0d0", cciss)
    return root


def seeds_host(tmp_path: Path) -> Path:
    """The seeds' bricks: two 3ware 9000 cards, a HighPoint RocketRAID (rr2740), an Adaptec
    (aacraid, host 5), an Areca (arcmsr: its own processor device at target 16), MegaRAID."""
    root = tmp_path / "sys"
    add_host(root, 1, "3w-9xxx")
    add_device(root, "1:0:0:0", 0, "sda")
    add_host(root, 2, "3w-9xxx")
    add_device(root, "2:0:0:0", 0, "sdb", dev="8:16")
    add_host(root, 3, "rr2740")
    add_device(root, "3:0:0:0", 0, "sdc", "sg2", "8:32")
    add_host(root, 5, "aacraid")
    add_device(root, "5:0:0:0", 0, "sdd", "sg3", "8:48")
    add_device(root, "5:1:0:0", 0, "", "sg4")  # a physical disk the driver exposes raw
    add_host(root, 6, "arcmsr")
    add_device(root, "6:0:0:0", 0, "sde", "sg5", "8:64")
    add_device(root, "6:0:16:0", 3, "", "sg6")
    add_host(root, 7, "megaraid_sas")  # smartctl's scan lists its disks: never probed
    add_device(root, "7:2:0:0", 0, "sdf", "sg7", "8:80")
    add_host(root, 8, "3w-sas")
    return root
