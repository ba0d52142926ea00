"""Build raw SNMPv2c messages byte by byte, including ones no agent should send.

exporters/snmp/ber.py encodes only what the client sends (requests); the hostile-input tests
need answers of any shape: absurd lengths, 60 KB arcs, integers of 1,000 bits.
"""

from __future__ import annotations


def tlv(tag: int, content: bytes) -> bytes:
    """One BER tag-length-value, with a long-form length when needed."""
    n = len(content)
    if n < 0x80:
        return bytes((tag, n)) + content
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(body))) + body + content


def integer(n: int, tag: int = 0x02) -> bytes:
    """A two's-complement INTEGER (or another integer tag), of any size."""
    return tlv(tag, n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True))


def oid_content(arcs: tuple[int, ...]) -> bytes:
    """The content octets of an OBJECT IDENTIFIER, arcs of any size."""
    out = bytearray()
    for arc in (arcs[0] * 40 + arcs[1], *arcs[2:]):
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)


def response(var_binds: list[bytes], request_id: int = 7, community: bytes = b"c") -> bytes:
    """A v2c Response-PDU message (error-status 0) carrying the var-binds."""
    pdu = integer(request_id) + integer(0) + integer(0) + tlv(0x30, b"".join(var_binds))
    return tlv(0x30, integer(1) + tlv(0x04, community) + tlv(0xA2, pdu))


def var_bind(name: bytes, value: bytes = b"\x05\x00") -> bytes:
    """name: OID content octets; value: a whole TLV (default NULL)."""
    return tlv(0x30, tlv(0x06, name) + value)
