"""Object identifiers as text: the one place that parses, orders and compares dotted OIDs.

OIDs travel through wattbit as dotted-decimal strings without a leading dot ("1.3.6.1.2.1");
table indices are the same shape ("7", "1.1.7"). Numeric order is arc by arc (RFC 3416's
lexicographic order on arcs), never string order: "1.10" sorts after "1.9".
"""

from __future__ import annotations

import re
from typing import Any

_OID = re.compile(r"^\d+(\.\d+)*$")


def normalize_oid(value: Any) -> str:
    """Dotted-decimal OID without a leading dot; ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("expected a dotted-decimal OID string")
    text = str(value).strip().removeprefix(".")
    if not _OID.match(text):
        # Never quote the value: profile and config errors must not echo input.
        raise ValueError("not a dotted-decimal OID")
    return text


def oid_arcs(oid: str) -> tuple[int, ...]:
    """The arcs of a dotted OID or index as integers (leading dot allowed); ValueError if not."""
    text = oid.strip().removeprefix(".")
    if not text:
        return ()
    try:
        parts = tuple(map(int, text.split(".")))
    except ValueError:
        raise ValueError("not a numeric OID") from None
    if min(parts) < 0:
        raise ValueError("not a numeric OID")
    return parts


def oid_text(arcs: tuple[int, ...]) -> str:
    """The dotted form of an OID's arcs."""
    return ".".join(map(str, arcs))


def under(oid: str, prefix: str) -> bool:
    """True if oid equals prefix or lies below it, on arc boundaries (.3.4 is not under .3.40)."""
    return oid == prefix or oid.startswith(prefix + ".")
