"""What the profile decoder makes of a walk, and the poller exports: a PDU's reading."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OutletReading:
    """One outlet's readings in SI units; None where the PDU has no valid value."""

    index: str  # the table row index, e.g. "7" or "1.1.7"
    name: str
    power_watts: float | None = None
    current_amperes: float | None = None
    voltage_volts: float | None = None
    energy_joules: float | None = None
    apparent_power_voltamperes: float | None = None  # VA, where the MIB meters no watts
    on: bool | None = None  # switched on (True) or off (False); None: the PDU does not say


@dataclass
class Reading:
    """What one poll of one PDU yields."""

    outlets: list[OutletReading] = field(default_factory=list)
    unit_power_watts: float | None = None
    unit_energy_joules: float | None = None
    unit_current_amperes: float | None = None
    unit_voltage_volts: float | None = None
    identity: dict[str, str] = field(default_factory=dict)  # vendor, model, firmware, serial
    invalid: dict[str, int] = field(default_factory=dict)  # reason -> values dropped
    outlet_table: str = ""  # index_from of the outlet table read (a profile's fallbacks)
    banks: list[OutletReading] = field(default_factory=list)  # index: bank number
    phases: list[OutletReading] = field(default_factory=list)  # index: phase number


def feed_values(reading: Reading, feed: str) -> tuple[float | None, float | None]:
    """(watts, joules) of one feed of a reading: "unit", "bank:N" or "phase:N"; None: absent."""
    if feed == "unit":
        return reading.unit_power_watts, reading.unit_energy_joules
    kind, _, index = feed.partition(":")
    rows = reading.banks if kind == "bank" else reading.phases if kind == "phase" else []
    row = next((r for r in rows if r.index == index), None)
    return (None, None) if row is None else (row.power_watts, row.energy_joules)
