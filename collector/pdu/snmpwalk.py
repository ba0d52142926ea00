"""net-snmp's ``snmpwalk -On`` text as a ``Walk``: PDU captures published in that format.

The same ``Walk`` (OID without leading dot -> ``Value``) that snmprec.py reads from
``.snmprec`` recordings, so a capture in either format is served (the simulated PDU, `wattbit
pdu check`) and decoded alike. Running net-snmp itself against an agent is the tests' job
(tests/support/snmpagents.py).
"""

from __future__ import annotations

import re

from exporters.snmp.oid import normalize_oid
from exporters.snmp.types import INTEGER_TYPES, Value, Walk

_START = re.compile(r"^\s*(\.?\d+(?:\.\d+)+)\s+=\s?(.*)$")
_EXCEPTION_TEXT = {
    "No Such Object": "noSuchObject",
    "No Such Instance": "noSuchInstance",
    "No more variables left": "endOfMibView",
}
_WALK_TYPES = {
    "INTEGER": "Integer32",
    "Integer32": "Integer32",
    "UInteger32": "Unsigned32",
    "Unsigned32": "Unsigned32",
    "Gauge32": "Gauge32",
    "Gauge": "Gauge32",
    "Counter32": "Counter32",
    "Counter64": "Counter64",
    "Timeticks": "TimeTicks",
    "STRING": "OctetString",
    "Hex-STRING": "OctetString",
    "BITS": "OctetString",
    "OID": "ObjectIdentifier",
    "IpAddress": "IpAddress",
    "Network Address": "IpAddress",
    "Opaque": "Opaque",
}
_TYPED = re.compile(r"^(" + "|".join(re.escape(k) for k in _WALK_TYPES) + r"):\s?(.*)$", re.S)
_FIRST_INT = re.compile(r"-?\d+")


def _unquote(text: str) -> bytes:
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
        text = re.sub(r'\\(["\\])', r"\1", text)
    return text.encode("utf-8", "surrogateescape")


def _hex_bytes(text: str) -> bytes:
    pairs = re.findall(r"\b[0-9A-Fa-f]{2}\b", text)
    return bytes(int(p, 16) for p in pairs)


def _walk_value(text: str) -> Value:
    text = text.strip()
    for prefix, exc in _EXCEPTION_TEXT.items():
        if text.startswith(prefix):
            return Value(exc, None)
    # net-snmp prints "Wrong Type (should be X): <TYPE>: value" when an agent lies about a type;
    # the value after it is what was on the wire.
    text = re.sub(r"^Wrong Type \(should be [^)]*\):\s*", "", text)
    if text == "NULL" or text == "":
        return Value("Null", None)
    m = _TYPED.match(text)
    if m is None:
        # Untyped (hand-made or anonymised files): a number is an integer, the rest a string.
        if re.fullmatch(r"-?\d+", text):
            return Value("Integer32", int(text))
        return Value("OctetString", _unquote(text))
    tname, rest = m.group(1), m.group(2)
    smi = _WALK_TYPES[tname]
    if smi in INTEGER_TYPES:
        # "5", "on(1)", "(123) 0:00:01.23", "0 End of MIB": the first integer, inside
        # parentheses first (enums and TimeTicks print the number there).
        paren = re.search(r"\((-?\d+)\)", rest)
        num = paren or _FIRST_INT.search(rest)
        if num is None:
            return Value("OctetString", _unquote(rest))
        return Value(smi, int(num.group(1) if paren else num.group(0)))
    if tname == "Hex-STRING":
        return Value(smi, _hex_bytes(rest))
    if smi == "OctetString":
        return Value(smi, _unquote(rest))
    if smi == "Opaque":
        return Value(smi, _unquote(rest))
    if smi == "ObjectIdentifier":
        return Value(smi, rest.strip().split()[0].removeprefix(".") if rest.strip() else "")
    return Value(smi, rest.strip().split()[0] if rest.strip() else "")


def parse_snmpwalk(text: str) -> Walk:
    """A Walk from ``snmpwalk -On`` output; a line not starting ``OID =`` continues a value."""
    walk: Walk = {}
    current: list[str] | None = None
    oid = ""
    for line in text.splitlines():
        m = _START.match(line)
        if m:
            if current is not None:
                walk[oid] = _walk_value("\n".join(current))
            oid, current = normalize_oid(m.group(1)), [m.group(2)]
        elif current is not None:
            current.append(line)
    if current is not None:
        walk[oid] = _walk_value("\n".join(current))
    return walk
