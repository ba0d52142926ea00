"""The one reader of snmpsim ``.snmprec`` recordings: the simulated PDU serves what it reads,
and the tests serve it (collector/pdu/responder.py) or decode it with no SNMP at all.

It returns a ``Walk`` (OID without leading dot -> ``Value``) shaped like what the poller builds:
OctetStrings are bytes, OIDs and IpAddresses dotted strings, every integer type an int. A
variation row (``2:numeric|...``, ``4:writecache|...``) reads as its static value. net-snmp's
``snmpwalk -On`` text is snmpwalk.py; ``read_recording`` reads either by the file's suffix.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path

from exporters.snmp.oid import normalize_oid
from exporters.snmp.types import INTEGER_TYPES, Value, Walk

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

_TAG = re.compile(r"^(\d+)([a-z]*)(?::([\w.-]+))?$")
# Variation-module parameters: key=value pairs split on commas that start a new key, so a
# writecache value may itself contain commas.
_PARAM = re.compile(r"(?:^|,)(\w+)=((?:[^,]|,(?!\w+=))*)")


def _typed(smi: str, payload: bytes, binary: bool = False) -> Value:
    """A Value of SMI type smi from a recording's payload (binary: it was hex-encoded)."""
    if smi in INTEGER_TYPES:
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


def snmprec_rows(text: str) -> Iterator[tuple[int, str, str, str]]:
    """The rows of snmpsim .snmprec text as written: (line number, oid, tag, value), ``#``
    comments and blank lines skipped; ValueError for a line that is not ``oid|tag|value``."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise ValueError(f"line {lineno}: expected oid|tag|value")
        yield lineno, parts[0], parts[1], parts[2]


def parse_snmprec(text: str) -> Walk:
    """A Walk from snmpsim .snmprec text: ``oid|tag|value`` lines, ``#`` comments skipped."""
    walk: Walk = {}
    for lineno, oid, tag, value in snmprec_rows(text):
        try:
            walk[normalize_oid(oid)] = _snmprec_value(tag, value)
        except ValueError as exc:
            raise ValueError(f"line {lineno}: {exc}") from None
    return walk


def read_snmprec(path: Path | str) -> Walk:
    """A .snmprec file as a Walk, its bytes kept exactly (OctetStrings need not be UTF-8)."""
    return parse_snmprec(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def read_recording(path: Path | str) -> Walk:
    """A PDU recording as a Walk: ``.snmpwalk`` (net-snmp ``-On`` text), else ``.snmprec``."""
    from collector.pdu.snmpwalk import parse_snmpwalk

    p = Path(path)
    if p.suffix == ".snmpwalk":
        return parse_snmpwalk(p.read_text(encoding="utf-8", errors="surrogateescape"))
    return read_snmprec(p)
