"""SNMPv2c messages as bytes: encode GET / GETBULK requests, decode Responses (pure functions).

The v2c path of the PDU poller uses this instead of pyasn1's generic BER codec because that
codec costs 65-70 µs of CPU per var-bind decoded (bench/pdu_poll/, docs/benchmarks.md), more
than the poller's whole budget of 60 µs per exported value. SNMPv2c needs only a handful of
BER forms (RFC 3416 section 3 for the PDUs, RFC 3417 section 8 for the encoding rules, X.690
for BER itself), so this module knows exactly those and nothing else; SNMPv3 messages (USM,
encryption) stay with pysnmp.

Values decode to the same `Value`s the pysnmp path produces (see snmp.py), with two deliberate
differences, both following net-snmp's decoder: unsigned types (Counter32, Gauge32, TimeTicks,
Counter64) are read modulo their width when an agent encodes them as negative within their
width, and a value of an unknown application type reads as Opaque instead of failing the whole
message.

Everything an agent sends is untrusted, and decoding is linear in the datagram's size:

* OBJECT IDENTIFIERs follow RFC 2578 section 7.1.3: at most 128 sub-identifiers, each at most
  2^32-1 (at most 5 octets). Longer content is refused by its length before any arithmetic,
  so a 60 KB arc costs one comparison, never a quadratic shift or an int too long to print.
* An integer value of more than 9 octets is out of range for every SMI type: it reads as its
  type with value None, and the decoder (exporters/pdu/decode.py) counts it ``out_of_range``;
  integers that fit 9 octets read exactly and are range-checked there per type.
* `decode_response` takes the most var-binds the request can be answered with (RFC 3416
  section 4.2.3) and stops at the first one past it: more is garbage.
* Only BerError leaves this module's decoders (the hypothesis tests feed them arbitrary bytes).
"""

from __future__ import annotations

from collections import OrderedDict
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
    """A message-header INTEGER (version, request-id, error-status, error-index): 32 bits."""
    start, stop = _expect(data, pos, end, _INT, what)
    if start == stop:
        raise BerError(f"{what}: empty INTEGER at byte {pos}")
    if stop - start > 5:
        raise BerError(f"{what}: INTEGER of {stop - start} octets at byte {pos}")
    return int.from_bytes(data[start:stop], "big", signed=True), stop


MAX_SUB_ID = 2**32 - 1  # RFC 2578 section 7.1.3
MAX_SUB_IDS = 128
_MAX_OID_OCTETS = MAX_SUB_IDS * 5  # a sub-identifier of 32 bits takes at most 5 octets


def decode_oid(content: bytes) -> tuple[int, ...]:
    """The arcs of OBJECT IDENTIFIER content octets (X.690 section 8.19), within RFC 2578.

    At most 128 sub-identifiers of at most 2^32-1 each (the first encoded one, 40 X + Y, at
    most 2^32-1 + 80). Linear in the content; anything else is a BerError.
    """
    if not content or content[-1] & 0x80:
        raise BerError("empty or unterminated OBJECT IDENTIFIER")
    if len(content) > _MAX_OID_OCTETS:
        raise BerError(f"OBJECT IDENTIFIER of {len(content)} octets (at most {_MAX_OID_OCTETS})")
    arcs: list[int] = []
    arc = 0
    octets = 0
    for b in content:
        if octets == 0 and b == 0x80:
            raise BerError("OBJECT IDENTIFIER arc with a leading 0x80 octet")
        octets += 1
        if octets > 5:  # more than 35 bits: beyond any 32-bit sub-identifier
            raise BerError("OBJECT IDENTIFIER sub-identifier of more than 32 bits")
        arc = (arc << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(arc)
            arc = 0
            octets = 0
    first = arcs[0]
    out = (first // 40, first % 40, *arcs[1:]) if first < 80 else (2, first - 80, *arcs[1:])
    if len(out) > MAX_SUB_IDS or max(out) > MAX_SUB_ID:
        raise BerError("OBJECT IDENTIFIER beyond RFC 2578 (128 sub-identifiers of 32 bits)")
    return out


def _octets(content: bytes) -> bytes:
    return content


# An integer value longer than this is out of range for every SMI type (Counter64 takes 9
# octets at most: 8 and a leading 0x00); it reads as None without being converted.
_MAX_INT_OCTETS = 9


def _signed(content: bytes) -> int | None:
    if len(content) > _MAX_INT_OCTETS:
        return None
    return int.from_bytes(content, "big", signed=True)


def _unsigned32(content: bytes) -> int | None:
    if len(content) > _MAX_INT_OCTETS:
        return None
    n = int.from_bytes(content, "big", signed=True)
    # negative within 32 bits: read modulo 2^32, as net-snmp does; anything longer stays
    # exact, and out of range (decode.py)
    return n & 0xFFFFFFFF if n < 0 and len(content) <= 4 else n


def _unsigned64(content: bytes) -> int | None:
    if len(content) > _MAX_INT_OCTETS:
        return None
    n = int.from_bytes(content, "big", signed=True)
    return n & 0xFFFFFFFFFFFFFFFF if n < 0 and len(content) <= 8 else n


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
# poll decoding a name is one dict lookup. Bounded in entries and in bytes: only names of at
# most OID_CACHE_KEY_BYTES octets are kept (a PDU's are 10-25), so the cache holds about 11 MiB
# at worst (tests/unit/test_ber_hostile.py measures it). Least recently used first out: new
# names (one PDU with a huge table, a misbehaving one) evict names no poll reads any more,
# not the ones every poll reads, as emptying the whole cache when full did.
_OID_CACHE: OrderedDict[bytes, tuple[tuple[int, ...], str]] = OrderedDict()
OID_CACHE_SIZE = 16_384
OID_CACHE_KEY_BYTES = 48


def _name(content: bytes) -> tuple[tuple[int, ...], str]:
    hit = _OID_CACHE.get(content)
    if hit is not None:
        _OID_CACHE.move_to_end(content)
        return hit
    arcs = decode_oid(content)
    hit = (arcs, ".".join(map(str, arcs)))
    if len(content) <= OID_CACHE_KEY_BYTES:
        _OID_CACHE[content] = hit
        if len(_OID_CACHE) > OID_CACHE_SIZE:
            _OID_CACHE.popitem(last=False)
    return hit


def header_of(data: bytes) -> tuple[bytes, int] | None:
    """(community, request-id) of an SNMPv2c Response or Report, read even from a cut-off one.

    What the client checks before decoding any var-bind; also lets it fail the one request
    a cut-off or otherwise undecodable answer was meant for at once, instead of waiting for
    its timeout. None when even that much is unreadable.
    """
    try:
        if len(data) < 2 or data[0] != _SEQ:
            return None
        # the outer and PDU lengths may claim more than arrived: skip them unchecked
        pos = 2 + (data[1] & 0x7F if data[1] & 0x80 else 0)
        end = len(data)
        _, pos = _int_at(data, pos, end, "version")
        c0, pos = _expect(data, pos, end, _OCTETS, "community")
        community = data[c0:pos]
        if pos + 2 > end or data[pos] not in (RESPONSE, REPORT):
            return None
        pos += 2 + (data[pos + 1] & 0x7F if data[pos + 1] & 0x80 else 0)
        request_id, _ = _int_at(data, pos, end, "request-id")
        return community, request_id
    except BerError:
        return None


def request_id_of(data: bytes) -> int | None:
    """The request-id of an SNMPv2c Response or Report (see header_of); None if unreadable."""
    head = header_of(data)
    return None if head is None else head[1]


def _message_bounds(data: bytes) -> tuple[int, int]:
    """(start, end) of the outer SEQUENCE's content, which must be the whole datagram."""
    start, stop = _expect(data, 0, len(data), _SEQ, "message")
    if stop != len(data):
        raise BerError(f"{len(data) - stop} bytes after the message")
    return start, stop


def decode_response(data: bytes, max_var_binds: int | None = None) -> Response:
    """Decode an SNMPv2c Response message; BerError when it is anything else or malformed.

    max_var_binds: the most var-binds the request can be answered with (RFC 3416 section
    4.2: as many as a GET asked for, non-repeaters + repeaters x max-repetitions for a
    GETBULK). More is a BerError, raised at the first var-bind past the bound.
    """
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
    limit = -1 if max_var_binds is None else max_var_binds
    while pos < vbl_end:
        if len(var_binds) == limit:
            raise BerError(f"more than the {limit} var-binds asked for")
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
