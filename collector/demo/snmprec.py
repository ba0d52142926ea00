"""Pure parsers for recorded SNMP agents: snmpsim ``.snmprec`` and net-snmp ``snmpwalk -On`` text.

Both return a ``Walk`` (OID without leading dot -> ``Value``) shaped like what the poller builds,
so tests decode real recordings with no SNMP at all. OctetStrings are bytes, OIDs and IpAddresses
dotted strings, every integer type an int.
"""

from __future__ import annotations

import codecs
import re

from exporters.snmp.types import Value, Walk

# snmprec type tags (BER tag numbers) -> SMI type names.
SNMPREC_TAGS = {
    2: "Integer32",
    4: "OctetString",
    5: "Null",
    6: "ObjectIdentifier",
    64: "IpAddress",
    65: "Counter32",
    66: "Gauge32",
    67: "TimeTicks",
    68: "Opaque",
    70: "Counter64",
    128: "noSuchObject",
    129: "noSuchInstance",
    130: "endOfMibView",
}
_INT_TYPES = {"Integer32", "Counter32", "Gauge32", "TimeTicks", "Counter64", "Unsigned32"}
_EXCEPTION_TYPES = {"noSuchObject", "noSuchInstance", "endOfMibView"}

_TAG = re.compile(r"^(\d+)([a-z]*)(?::([\w.-]+))?$")
# Variation-module parameters: key=value pairs split on commas that start a new key, so a
# writecache value may itself contain commas.
_PARAM = re.compile(r"(?:^|,)(\w+)=((?:[^,]|,(?!\w+=))*)")


def _oid(text: str) -> str:
    oid = text.strip().removeprefix(".")
    if not re.fullmatch(r"\d+(\.\d+)*", oid):
        raise ValueError(f"not an OID: {text!r}")
    return oid


def _typed(smi: str, payload: bytes, binary: bool = False) -> Value:
    """A Value of SMI type smi from a recording's payload (binary: it was hex-encoded)."""
    if smi in _INT_TYPES:
        return Value(smi, int(payload.decode("ascii").strip()))
    if smi == "OctetString" or smi == "Opaque":
        return Value(smi, payload)
    if smi == "IpAddress":
        if binary:
            return Value(smi, ".".join(str(b) for b in payload))
        return Value(smi, payload.decode("ascii").strip())
    if smi == "ObjectIdentifier":
        return Value(smi, payload.decode("ascii").strip().removeprefix("."))
    return Value(smi, None)  # Null and the exceptions carry no value


def _snmprec_value(tag: str, data: str) -> Value:
    m = _TAG.match(tag.strip())
    if not m:
        raise ValueError(f"bad snmprec tag {tag!r}")
    number, flags, module = int(m.group(1)), m.group(2), m.group(3)
    smi = SNMPREC_TAGS.get(number)
    if smi is None:
        raise ValueError(f"unknown snmprec type tag {number}")
    if module is not None:
        # A variation entry: the value is module parameters, not data. Take its static value
        # (writecache `value=`, numeric `initial=`, else `min=`) so the walk is deterministic.
        params = dict(_PARAM.findall(data))
        for key in ("value", "hexvalue", "initial", "min"):
            if key in params:
                if key == "hexvalue":
                    return _typed(smi, bytes.fromhex(params[key]), binary=True)
                data = params[key]
                break
        else:
            return Value(smi, None)
    if "x" in flags:
        return _typed(smi, bytes.fromhex(data.strip()), binary=True)
    if "e" in flags:
        payload = codecs.escape_decode(data.encode("latin-1"))[0]
    else:
        payload = data.encode("utf-8", "surrogateescape")
    return _typed(smi, payload)


def parse_snmprec(text: str) -> Walk:
    """A Walk from snmpsim .snmprec text: ``oid|tag|value`` lines, ``#`` comments skipped."""
    walk: Walk = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise ValueError(f"line {lineno}: expected oid|tag|value")
        try:
            walk[_oid(parts[0])] = _snmprec_value(parts[1], parts[2])
        except ValueError as exc:
            raise ValueError(f"line {lineno}: {exc}") from None
    return walk


# ---- net-snmp `snmpwalk -On` text -------------------------------------------------------------

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
    if smi in _INT_TYPES:
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
            oid, current = _oid(m.group(1)), [m.group(2)]
        elif current is not None:
            current.append(line)
    if current is not None:
        walk[oid] = _walk_value("\n".join(current))
    return walk
