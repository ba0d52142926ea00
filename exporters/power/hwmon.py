"""hwmon power and energy sensors (/sys/class/hwmon/hwmon*/power*_{average,input}, energy*_input).

The hwmon sysfs ABI (https://www.kernel.org/doc/html/latest/hwmon/sysfs-interface.html):
``powerN_average`` and ``powerN_input`` are in microwatts, ``energyN_input`` in microjoules,
``powerN_label`` / ``energyN_label`` name the channel, ``name`` names the chip, and
``powerN_enable`` / ``energyN_enable`` 0 marks a channel switched off. Drivers with power:
acpi_power_meter (the server's input power as the platform's power meter reports it, an
average), amdgpu and other GPUs, PMBus power supplies and hot-swap controllers (ina2xx,
lm25066), fam15h_power, and with energy: amd_energy (removed in Linux 5.13 for the same side
channel as RAPL), the PMBus energy counters.

``parse_chip`` is pure over a chip directory's file names and texts; ``read_hwmon`` is the
only function that touches the file system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporters.hostfs.read import SYS_ROOT

from .sysread import Unreadable, parse_uint, read_attr

_ATTR = re.compile(
    r"^(?P<kind>power|energy)(?P<n>[1-9][0-9]{0,2})_(?P<item>average|input|label|enable)$"
)
_HWMON_DIR = re.compile(r"^hwmon\w{1,40}$")  # the kernel names them hwmonN
_LABEL_OK = re.compile(r"^[\x20-\x7e]{1,64}$")
# A reading beyond these is not a sensor's (1 MW; 2**63 µJ): left out, never exported.
MAX_POWER_UW = 10**12
MAX_ENERGY_UJ = 1 << 63
MAX_CHIPS = 256


@dataclass(frozen=True)
class PowerSensor:
    """One power channel: the average where the driver keeps one, else the instant reading."""

    chip: str
    device: str
    sensor: str
    watts: float
    kind: str  # "average" or "input": which file the value came from


@dataclass(frozen=True)
class EnergySensor:
    """One energy channel (a counter the driver keeps)."""

    chip: str
    device: str
    sensor: str
    joules: float


def parse_chip(
    chip: str, device: str, files: Mapping[str, str | None]
) -> tuple[list[PowerSensor], list[EnergySensor]]:
    """The power and energy channels of one chip from its attribute texts (pure).

    ``files`` maps attribute names (``power1_average``, ``power1_label`` ...) to their text
    (None: unreadable). A channel without a valid number has no sample (never a 0).
    """
    channels: dict[tuple[str, int], dict[str, str | None]] = {}
    for fname, text in files.items():
        m = _ATTR.match(fname)
        if m:
            channels.setdefault((m["kind"], int(m["n"])), {})[m["item"]] = text
    powers: list[PowerSensor] = []
    energies: list[EnergySensor] = []
    # A label two channels of a kind share would make two series one: those channels are
    # named by their channel instead ("power1", "power2").
    labels = [(k, i.get("label")) for (k, _), i in channels.items()]
    for (kind, n), items in sorted(channels.items()):
        if items.get("enable") == "0":
            continue
        label = items.get("label")
        usable = label is not None and _LABEL_OK.match(label) and labels.count((kind, label)) == 1
        sensor = label if usable and label is not None else f"{kind}{n}"
        if kind == "power":
            for which in ("average", "input"):
                uw = parse_uint(items.get(which), MAX_POWER_UW)
                if uw is not None:
                    powers.append(PowerSensor(chip, device, sensor, uw / 1e6, which))
                    break
        else:
            uj = parse_uint(items.get("input"), MAX_ENERGY_UJ)
            if uj is not None:
                energies.append(EnergySensor(chip, device, sensor, uj / 1e6))
    return powers, energies


def _device_id(hdir: Path, fallback: str) -> str:
    # The parent device (a PCI address, "ACPI000D:00", "coretemp.0") tells two chips of one
    # driver apart and stays the same across reboots, where hwmonN numbering may not.
    link = hdir / "device"
    if os.path.lexists(link):
        base = os.path.basename(os.path.realpath(link))
        if _LABEL_OK.match(base):
            return base
    return fallback


def read_hwmon(
    sys_root: Path = SYS_ROOT, read: Callable[[Path], str | None] = read_attr
) -> tuple[list[PowerSensor], list[EnergySensor]]:
    """Every chip's power and energy channels under SYS/class/hwmon (the only I/O here)."""
    base = sys_root / "class" / "hwmon"
    try:
        names = sorted(n for n in os.listdir(base) if _HWMON_DIR.match(n))[:MAX_CHIPS]
    except OSError:
        return [], []
    powers: list[PowerSensor] = []
    energies: list[EnergySensor] = []
    for hw in names:
        hdir = base / hw
        try:
            entries = [f for f in os.listdir(hdir) if _ATTR.match(f)]
        except OSError:
            continue
        if not entries:
            continue  # temperature, fan and voltage chips: nothing to read
        try:
            name = read(hdir / "name") or hw
        except Unreadable:
            name = hw
        chip = name if _LABEL_OK.match(name) else hw
        files: dict[str, str | None] = {}
        for f in entries:
            try:
                files[f] = read(hdir / f)
            except Unreadable:
                files[f] = None
        p, e = parse_chip(chip, _device_id(hdir, hw), files)
        powers += p
        energies += e
    return powers, energies
