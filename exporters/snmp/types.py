"""SNMP values as the client returns them: one Value per OID, a Walk for everything read."""

from __future__ import annotations

from dataclasses import dataclass

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
