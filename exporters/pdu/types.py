"""The shapes shared by the SNMP client, the profile decoder and the poller."""

from __future__ import annotations

from dataclasses import dataclass, field

# SNMP value types as their SMI names. The exceptions (RFC 3416) are values too, so a decoder
# sees "noSuchInstance" where a walk or get found nothing, and counts it.
INTEGER_TYPES = frozenset(
    {"Integer32", "Unsigned32", "Counter32", "Counter64", "Gauge32", "TimeTicks"}
)
EXCEPTIONS = frozenset({"noSuchObject", "noSuchInstance", "endOfMibView"})


@dataclass(frozen=True)
class Value:
    """One SNMP value: its SMI type and a plain Python value (int, str or bytes, or None)."""

    type: str  # Integer32, Unsigned32, Counter32, Counter64, Gauge32, TimeTicks, OctetString,
    #            ObjectIdentifier, IpAddress, Opaque, Null, noSuchObject, noSuchInstance,
    #            endOfMibView
    value: int | str | bytes | None


# OID (dotted decimal, no leading dot) -> value, for everything one poll read from one PDU.
Walk = dict[str, Value]


@dataclass
class OutletReading:
    """One outlet's readings in SI units; None where the PDU has no valid value."""

    index: str  # the table row index, e.g. "7" or "1.1.7"
    name: str
    power_watts: float | None = None
    current_amperes: float | None = None
    voltage_volts: float | None = None
    energy_joules: float | None = None


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
