"""RAPL energy zones from the kernel's power capping framework (/sys/class/powercap).

Each zone directory (``intel-rapl:0``, its sub-zones ``intel-rapl:0:0`` ...) holds ``name``
(``package-0``, ``core``, ``uncore``, ``dram``, ``psys``), ``energy_uj`` (a counter in
microjoules that wraps at ``max_energy_range_uj``) and ``max_energy_range_uj``
(https://www.kernel.org/doc/html/latest/power/powercap/powercap.html). AMD processors from
Zen on appear under the same ``intel-rapl`` control type (the kernel's intel_rapl_msr driver
serves them since Linux 5.11, "powercap: Add AMD Fam17h RAPL support");
``intel-rapl-mmio`` is the MMIO interface of the same package counters on some Intel client
parts, which duplicates the MSR zones and is read only where the MSR zone is absent.

Since the PLATYPUS side channel (CVE-2020-8694, https://platypusattack.com/, fixed in Linux
5.10 and backported: https://github.com/torvalds/linux/commit/949dd0104c496fa7c14991a23c03c62e44637e71
"powercap: restrict energy meter to root access")
``energy_uj`` is readable by root only: an agent not running as root sees the zones and
their names but no energy (``wattbit_rapl_zone_readable`` 0).

The parsing is pure (``parse_zones`` over the attribute texts); ``read_powercap`` is the
only function that touches the file system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporters.hostfs.read import SYS_ROOT

from .sysread import Unreadable, parse_uint, read_attr

# "intel-rapl:0", "intel-rapl:0:2", "intel-rapl-mmio:0" ... (the control type, then the zone's
# path of indices; the powercap core names a zone "%s:%x" after its parent, so a tenth package
# is "intel-rapl:a").
_ZONE_DIR = re.compile(
    r"^(?P<control>[a-z][a-z0-9_-]{0,31}):(?P<path>[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){0,3})$"
)
_PACKAGE_NAME = re.compile(r"^package-(\d{1,4})$")
_DOMAIN = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# Control types read, in order of preference: a zone of a later type that repeats the
# (zone, package) of an earlier one is the same counter through another interface.
PREFERRED_CONTROLS = ("intel-rapl", "intel-rapl-mmio")
# energy_uj and max_energy_range_uj are u64 in the kernel; beyond 2**63 is not a reading.
_MAX_UJ = 1 << 63


@dataclass(frozen=True)
class ZoneAttrs:
    """The raw attribute texts of one zone directory (None: absent or unreadable)."""

    name: str | None
    energy_uj: str | None
    max_energy_range_uj: str | None
    energy_readable: bool = True


@dataclass(frozen=True)
class RaplZone:
    """One RAPL energy counter, ready to export."""

    key: str  # the zone directory, e.g. "intel-rapl:0:1" (unique, stable while loaded)
    control: str  # "intel-rapl", "intel-rapl-mmio"
    zone: str  # "package", "core", "uncore", "dram", "psys"
    package: str  # the socket ("0", "1"); "" for zones of no package (psys)
    energy_uj: int | None  # None: unreadable (root-only) or not a number
    max_energy_range_uj: int | None
    readable: bool


def _control_rank(control: str) -> tuple[int, str]:
    try:
        return (PREFERRED_CONTROLS.index(control), control)
    except ValueError:
        return (len(PREFERRED_CONTROLS), control)


def parse_zones(attrs: Mapping[str, ZoneAttrs]) -> list[RaplZone]:
    """The zones of a powercap tree, keyed by directory name, as RaplZones (pure).

    A top-level zone named ``package-N`` is socket N; its sub-zones share its package. A
    top-level zone of another name (``psys``, the platform) belongs to no package. Zones whose
    name is missing or malformed are left out. Where two control types export the same
    (zone, package) the preferred one is kept (MSR over MMIO).
    """
    parsed: dict[str, tuple[str, tuple[str, ...], ZoneAttrs]] = {}
    for key, a in attrs.items():
        m = _ZONE_DIR.match(key)
        if m is None or a.name is None:
            continue
        parsed[key] = (m["control"], tuple(m["path"].split(":")), a)

    def package_of(control: str, path: tuple[str, ...]) -> str | None:
        top = parsed.get(f"{control}:{path[0]}")
        if top is None:
            return None  # a sub-zone without its parent: cannot say whose it is
        pm = _PACKAGE_NAME.match(top[2].name or "")
        return pm[1] if pm else ""

    out: list[RaplZone] = []
    seen: set[tuple[str, str]] = set()
    order = sorted(parsed, key=lambda k: (_control_rank(parsed[k][0]), len(parsed[k][1]), k))
    for key in order:
        control, path, a = parsed[key]
        name = a.name or ""
        pm = _PACKAGE_NAME.match(name)
        zone = "package" if pm else name
        if not _DOMAIN.match(zone):
            continue
        package = package_of(control, path)
        if package is None:
            continue
        if (zone, package) in seen:
            continue  # the same counter through a less preferred interface
        seen.add((zone, package))
        out.append(
            RaplZone(
                key=key,
                control=control,
                zone=zone,
                package=package,
                energy_uj=parse_uint(a.energy_uj, _MAX_UJ) if a.energy_readable else None,
                max_energy_range_uj=parse_uint(a.max_energy_range_uj, _MAX_UJ),
                readable=a.energy_readable,
            )
        )
    out.sort(key=lambda z: (z.package, z.zone, z.key))
    return out


# At most this many zone directories are read: a real machine has a handful per socket.
MAX_ZONES = 256


def read_powercap(sys_root: Path = SYS_ROOT) -> dict[str, ZoneAttrs]:
    """The attribute texts of every zone under SYS/class/powercap (the only I/O here)."""
    base = sys_root / "class" / "powercap"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    out: dict[str, ZoneAttrs] = {}
    for entry in names:
        if len(out) >= MAX_ZONES:
            break
        if not _ZONE_DIR.match(entry):
            continue  # the control type directories themselves ("intel-rapl")
        zdir = base / entry
        try:
            name = read_attr(zdir / "name")
            max_range = read_attr(zdir / "max_energy_range_uj")
        except Unreadable:
            continue
        try:
            energy = read_attr(zdir / "energy_uj")
            readable = True
        except Unreadable:
            energy, readable = None, False
        out[entry] = ZoneAttrs(name, energy, max_range, readable)
    return out
