"""The power exporter: RAPL energy counters made monotonic across wraps, and hwmon sensors.

``energy_uj`` of a RAPL zone wraps to 0 after ``max_energy_range_uj`` (about 262 kJ on Intel
servers: 22 minutes of a 200 W package). The exporter keeps, per zone, the last raw reading
and a running total: a reading below the last one is a wrap, and the step is
``max_energy_range_uj - last + now``, so ``wattbit_rapl_energy_joules_total`` only grows and
``rate()`` sees no reset. A scrape interval longer than one wrap period would hide whole wraps
(nothing in the counter tells how many), hence the note in docs/exporters/power.md. A zone that
leaves (the driver unloaded) takes its state with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs.read import SYS_ROOT

from .hwmon import EnergySensor, PowerSensor, read_hwmon
from .powercap import RaplZone, ZoneAttrs, parse_zones, read_powercap

log = logging.getLogger(__name__)


@dataclass
class _Accum:
    """One zone's running total (µJ) and the raw reading it was last advanced with."""

    last_raw: int
    total_uj: int


def advance(acc: _Accum | None, raw: int, max_range: int | None) -> _Accum:
    """The running total after reading ``raw`` (pure): a drop is a wrap at ``max_range``.

    The first reading starts the total at the raw value, as node_exporter reports it, so the
    two agree until the first wrap. A drop with no (or a too small) ``max_range`` is taken as
    a restart of the counter from 0 (a reset: the step is ``raw``).
    """
    if acc is None:
        return _Accum(raw, raw)
    if raw >= acc.last_raw:
        step = raw - acc.last_raw
    elif max_range is not None and max_range >= acc.last_raw:
        step = max_range - acc.last_raw + raw
    else:
        step = raw
    return _Accum(raw, acc.total_uj + step)


class PowerExporter(Exporter):
    """RAPL zones' energy and hwmon power and energy channels of this host."""

    name = "power"

    def __init__(
        self,
        sys_root: Path = SYS_ROOT,
        rapl: bool = True,
        hwmon: bool = True,
        read_zones: Callable[[Path], dict[str, ZoneAttrs]] = read_powercap,
        read_sensors: Callable[[Path], tuple[list[PowerSensor], list[EnergySensor]]] = read_hwmon,
    ) -> None:
        self.sys_root = sys_root
        self.rapl = rapl
        self.hwmon = hwmon
        self._read_zones = read_zones
        self._read_sensors = read_sensors
        self._acc: dict[str, _Accum] = {}

    def startup_note(self) -> str:
        """Which sources this host has, and whether RAPL energy is readable here."""
        parts = []
        if self.rapl:
            zones = parse_zones(self._read_zones(self.sys_root))
            if not zones:
                parts.append("rapl: no powercap zones")
            else:
                unreadable = sum(not z.readable for z in zones)
                parts.append(f"rapl: {len(zones)} zones")
                if unreadable:
                    # CVE-2020-8694: energy_uj is root-only since Linux 5.10. What to do is
                    # the packaged unit's ExecStartPre (packaging/libexec/rapl-access).
                    parts.append(
                        f"{unreadable} unreadable: energy_uj is root-only (CVE-2020-8694), "
                        "exported as wattbit_rapl_zone_readable 0 without energy; give the "
                        "agent's group read with rapl-access (docs/privileges.md)"
                    )
        if self.hwmon:
            powers, energies = self._read_sensors(self.sys_root)
            parts.append(f"hwmon: {len(powers)} power, {len(energies)} energy channels")
        return "; ".join(parts)

    def rapl_zones(self) -> list[tuple[RaplZone, float | None]]:
        """Each zone with its monotonic energy in joules (None: unreadable), state advanced."""
        zones = parse_zones(self._read_zones(self.sys_root))
        out: list[tuple[RaplZone, float | None]] = []
        present = set()
        for z in zones:
            present.add(z.key)
            if z.energy_uj is None:
                out.append((z, None))
                continue
            acc = advance(self._acc.get(z.key), z.energy_uj, z.max_energy_range_uj)
            self._acc[z.key] = acc
            out.append((z, acc.total_uj / 1e6))
        for gone in set(self._acc) - present:
            del self._acc[gone]
        return out

    def collect(self) -> Iterator[Metric]:
        """The RAPL and hwmon families of this scrape."""
        if self.rapl:
            energy = CounterMetricFamily(
                "wattbit_rapl_energy_joules_total",
                "Energy of a RAPL zone (package, core, uncore, dram, psys), kept monotonic "
                "across the counter's wraps.",
                labels=["zone", "package"],
            )
            readable = GaugeMetricFamily(
                "wattbit_rapl_zone_readable",
                "1 if the zone's energy_uj could be read (root-only since Linux 5.10).",
                labels=["zone", "package"],
            )
            range_ = GaugeMetricFamily(
                "wattbit_rapl_max_energy_range_joules",
                "Where the zone's raw counter wraps to 0.",
                labels=["zone", "package"],
            )
            for z, joules in self.rapl_zones():
                labels = [z.zone, z.package]
                readable.add_metric(labels, 1.0 if z.readable else 0.0)
                if joules is not None:
                    energy.add_metric(labels, joules)
                if z.max_energy_range_uj is not None:
                    range_.add_metric(labels, z.max_energy_range_uj / 1e6)
            yield energy
            yield readable
            yield range_
        if self.hwmon:
            powers, energies = self._read_sensors(self.sys_root)
            pw = GaugeMetricFamily(
                "wattbit_hwmon_power_watts",
                "A hwmon power channel: powerN_average where the driver keeps it, else "
                "powerN_input.",
                labels=["chip", "device", "sensor"],
            )
            for p in powers:
                pw.add_metric([p.chip, p.device, p.sensor], p.watts)
            en = CounterMetricFamily(
                "wattbit_hwmon_energy_joules_total",
                "A hwmon energy channel (energyN_input).",
                labels=["chip", "device", "sensor"],
            )
            for e in energies:
                en.add_metric([e.chip, e.device, e.sensor], e.joules)
            yield pw
            yield en
