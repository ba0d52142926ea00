"""SNMPv2c messages as bytes: encode GET / GETBULK requests, decode Responses (pure functions).

The v2c path of the PDU poller uses this instead of pyasn1's generic BER codec because that
codec costs 65-70 µs of CPU per var-bind decoded (bench/pdu_poll.py, docs/benchmarks.md), more
than the poller's whole budget of 60 µs per exported value. SNMPv2c needs only a handful of
BER forms (RFC 3416 section 3 for the PDUs, RFC 3417 section 8 for the encoding rules, X.690
for BER itself), so this module knows exactly those and nothing else; SNMPv3 messages (USM,
encryption) stay with pysnmp.

Values decode to the same `Value`s the pysnmp path produces (see snmp.py), with two deliberate
differences, both following net-snmp's decoder: unsigned types (Counter32, Gauge32, TimeTicks,
Counter64) are read modulo their width when an agent encodes them as negative or too long, and
a value of an unknown application type reads as Opaque instead of failing the whole message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .types import Value

GET, GETNEXT, RESPONSE, GETBULK, REPORT = 0xA0, 0xA1, 0xA2, 0xA5, 0xA8
VERSION_2C = 1  # msgVersion of SNMPv2c (RFC 1901)
_SEQ, _INT, _OCTETS, _NULL, _OID = 0x30, 0x02, 0x04, 0x05, 0x06
_NULL_VALUE = b"\x05\x00"


class BerError(ValueError):
    """The bytes are not a well-formed SNMPv2c message of the expected kind."""


@dataclass(frozen=True, slots=True)
class Response:
    """A decoded SNMPv2c Response PDU; var-binds are (OID arcs, dotted OID, value)."""

    request_id: int
    error_status: int
    error_index: int
    var_binds: list[tuple[tuple[int, ...], str, Value]]
    community: bytes


# --- encoding ------------------------------------------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + _length(len(content)) + content


def _integer(n: int) -> bytes:
    return _tlv(_INT, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True))


def encode_oid(arcs: tuple[int, ...]) -> bytes:
    """The content octets of an OBJECT IDENTIFIER (X.690 section 8.19)."""
    if len(arcs) < 2 or arcs[0] > 2 or (arcs[0] < 2 and arcs[1] > 39) or min(arcs) < 0:
        raise ValueError(f"not an encodable OID: {'.'.join(map(str, arcs))}")
    out = bytearray()
    for arc in (arcs[0] * 40 + arcs[1], *arcs[2:]):
        if arc < 0x80:
            out.append(arc)
            continue
        chunk = bytearray()
        while arc:
            chunk.append((arc & 0x7F) | 0x80)
            arc >>= 7
        chunk[0] &= 0x7F
        out += chunk[::-1]
    return bytes(out)


def encode_request(
    pdu_type: int,
    community: bytes,
    request_id: int,
    oids: list[tuple[int, ...]],
    non_repeaters: int = 0,
    max_repetitions: int = 0,
) -> bytes:
    """An SNMPv2c GetRequest, GetNextRequest or GetBulkRequest message (RFC 3416 section 3)."""
    if pdu_type not in (GET, GETNEXT, GETBULK):
        raise ValueError(f"not a request PDU type: {pdu_type:#x}")
    var_binds = b"".join(_tlv(_SEQ, _tlv(_OID, encode_oid(o)) + _NULL_VALUE) for o in oids)
    # GetBulk reuses error-status / error-index for non-repeaters / max-repetitions
    pdu = (
        _integer(request_id)
        + _integer(non_repeaters if pdu_type == GETBULK else 0)
        + _integer(max_repetitions if pdu_type == GETBULK else 0)
        + _tlv(_SEQ, var_binds)
    )
    message = _integer(VERSION_2C) + _tlv(_OCTETS, community) + _tlv(pdu_type, pdu)
    return _tlv(_SEQ, message)


# --- decoding ------------------------------------------------------------------------------------


def _header(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the TLV at pos; definite lengths only."""
    if pos + 2 > end:
        raise BerError(f"truncated at byte {pos}")
    tag = data[pos]
    n = data[pos + 1]
    pos += 2
    if n & 0x80:
        count = n & 0x7F
        # 0x80 is BER's indefinite length: RFC 3417 section 8 requires definite lengths
        if count == 0 or count > 4 or pos + count > end:
            raise BerError(f"bad length octets at byte {pos - 1}")
        n = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + n > end:
        raise BerError(f"length {n} at byte {pos} runs past the end ({end})")
    return tag, pos, pos + n


def _expect(data: bytes, pos: int, end: int, tag: int, what: str) -> tuple[int, int]:
    got, start, stop = _header(data, pos, end)
    if got != tag:
        raise BerError(f"{what}: expected tag {tag:#04x}, got {got:#04x} at byte {pos}")
    return start, stop


def _int_at(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    start, stop = _expect(data, pos, end, _INT, what)
    if start == stop:
        raise BerError(f"{what}: empty INTEGER at byte {pos}")
    return int.from_bytes(data[start:stop], "big", signed=True), stop


def decode_oid(content: bytes) -> tuple[int, ...]:
    """The arcs of OBJECT IDENTIFIER content octets (X.690 section 8.19)."""
    if not content or content[-1] & 0x80:
        raise BerError("empty or unterminated OBJECT IDENTIFIER")
    arcs: list[int] = []
    arc = 0
    for b in content:
        if arc == 0 and b == 0x80:
            raise BerError("OBJECT IDENTIFIER arc with a leading 0x80 octet")
        arc = (arc << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(arc)
            arc = 0
    first = arcs[0]
    if first < 80:
        return (first // 40, first % 40, *arcs[1:])
    return (2, first - 80, *arcs[1:])


def _octets(content: bytes) -> bytes:
    return content


def _signed(content: bytes) -> int:
    return int.from_bytes(content, "big", signed=True)


def _unsigned32(content: bytes) -> int:
    return int.from_bytes(content, "big", signed=True) & 0xFFFFFFFF


def _unsigned64(content: bytes) -> int:
    return int.from_bytes(content, "big", signed=True) & 0xFFFFFFFFFFFFFFFF


def _oid_text(content: bytes) -> str:
    return ".".join(map(str, decode_oid(content)))


def _ip(content: bytes) -> str:
    if len(content) != 4:
        raise BerError(f"IpAddress of {len(content)} octets")
    return ".".join(map(str, content))


def _none(content: bytes) -> None:
    return None


# Wire tag -> (SMI type name as the pysnmp path names it, converter). RFC 2578 section 7.1 and
# RFC 3416 section 3 (the three exceptions). Unsigned32 shares Gauge32's tag.
_TYPES: dict[int, tuple[str, Callable[[bytes], int | str | bytes | None]]] = {
    0x02: ("Integer32", _signed),
    0x04: ("OctetString", _octets),
    0x05: ("Null", _none),
    0x06: ("ObjectIdentifier", _oid_text),
    0x40: ("IpAddress", _ip),
    0x41: ("Counter32", _unsigned32),
    0x42: ("Gauge32", _unsigned32),
    0x43: ("TimeTicks", _unsigned32),
    0x44: ("Opaque", _octets),
    0x46: ("Counter64", _unsigned64),
    0x80: ("noSuchObject", _none),
    0x81: ("noSuchInstance", _none),
    0x82: ("endOfMibView", _none),
}
_INTEGERS = frozenset({0x02, 0x41, 0x42, 0x43, 0x46})

# Encoded OID -> (arcs, dotted). Every poll of a PDU returns the same OIDs, so after the first
# poll decoding a name is one dict lookup. Bounded: cleared when it reaches this size.
_OID_CACHE: dict[bytes, tuple[tuple[int, ...], str]] = {}
OID_CACHE_SIZE = 200_000


def _name(content: bytes) -> tuple[tuple[int, ...], str]:
    hit = _OID_CACHE.get(content)
    if hit is None:
        arcs = decode_oid(content)
        hit = (arcs, ".".join(map(str, arcs)))
        if len(_OID_CACHE) >= OID_CACHE_SIZE:
            _OID_CACHE.clear()
        _OID_CACHE[content] = hit
    return hit


def request_id_of(data: bytes) -> int | None:
    """The request-id of an SNMPv2c Response or Report, read even from a truncated message.

    Lets the client fail the one request a cut-off or otherwise undecodable answer was meant
    for at once, instead of waiting for its timeout. None when even that much is unreadable.
    """
    try:
        if data[:1] != bytes((_SEQ,)) or len(data) < 2:
            return None
        # the outer and PDU lengths may claim more than arrived: skip them unchecked
        pos = 2 + (data[1] & 0x7F if data[1] & 0x80 else 0)
        end = len(data)
        _, pos = _int_at(data, pos, end, "version")
        _, pos = _expect(data, pos, end, _OCTETS, "community")
        if pos + 2 > end or data[pos] not in (RESPONSE, REPORT):
            return None
        pos += 2 + (data[pos + 1] & 0x7F if data[pos + 1] & 0x80 else 0)
        request_id, _ = _int_at(data, pos, end, "request-id")
        return request_id
    except BerError:
        return None


def _message_bounds(data: bytes) -> tuple[int, int]:
    """(start, end) of the outer SEQUENCE's content, which must be the whole datagram."""
    start, stop = _expect(data, 0, len(data), _SEQ, "message")
    if stop != len(data):
        raise BerError(f"{len(data) - stop} bytes after the message")
    return start, stop


def decode_response(data: bytes) -> Response:
    """Decode an SNMPv2c Response message; BerError when it is anything else or malformed."""
    pos, end = _message_bounds(data)
    version, pos = _int_at(data, pos, end, "version")
    if version != VERSION_2C:
        raise BerError(f"message version {version}, not SNMPv2c")
    c0, pos = _expect(data, pos, end, _OCTETS, "community")
    community = data[c0:pos]
    tag, pos, pdu_end = _header(data, pos, end)
    if tag != RESPONSE:
        raise BerError(f"PDU type {tag:#04x} is not a Response")
    if pdu_end != end:
        raise BerError("bytes after the PDU")
    request_id, pos = _int_at(data, pos, pdu_end, "request-id")
    status, pos = _int_at(data, pos, pdu_end, "error-status")
    index, pos = _int_at(data, pos, pdu_end, "error-index")
    pos, vbl_end = _expect(data, pos, pdu_end, _SEQ, "variable-bindings")
    if vbl_end != pdu_end:
        raise BerError("bytes after the variable-bindings")
    types = _TYPES
    var_binds: list[tuple[tuple[int, ...], str, Value]] = []
    append = var_binds.append
    while pos < vbl_end:
        pos, vb_end = _expect(data, pos, vbl_end, _SEQ, "var-bind")
        name_start, name_end = _expect(data, pos, vb_end, _OID, "var-bind name")
        arcs, dotted = _name(data[name_start:name_end])
        tag, v_start, v_end = _header(data, name_end, vb_end)
        if v_end != vb_end:
            raise BerError(f"var-bind {dotted}: bytes after the value")
        content = data[v_start:v_end]
        kind = types.get(tag)
        if kind is None:
            # an application type this SMI does not define: keep its octets, never the poll
            value = Value("Opaque", content)
        else:
            if tag in _INTEGERS and not content:
                raise BerError(f"var-bind {dotted}: empty INTEGER")
            value = Value(kind[0], kind[1](content))
        append((arcs, dotted, value))
        pos = vb_end
    return Response(request_id, status, index, var_binds, community)
