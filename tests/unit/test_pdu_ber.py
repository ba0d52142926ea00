"""exporters.snmp.ber against pyasn1 (pysnmp's codec) as the independent opinion.

Messages are built and read with pyasn1 and pysnmp's v2c protocol module; the values ber.py
decodes must equal what the pysnmp path of the client makes of pyasn1's decoding.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

from exporters.snmp import ber
from exporters.snmp.types import Value
from exporters.snmp.v3 import to_value as _to_value

P = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]


def response(var_binds: list[tuple[str, Any]], request_id: int = 7, community: str = "c") -> bytes:
    """A v2c Response message encoded by pyasn1."""
    pdu = P.ResponsePDU()
    P.apiPDU.set_defaults(pdu)
    P.apiPDU.set_request_id(pdu, request_id)
    P.apiPDU.set_varbinds(pdu, [(P.ObjectIdentifier(o), v) for o, v in var_binds])
    msg = P.Message()
    P.apiMessage.set_defaults(msg)
    P.apiMessage.set_community(msg, community)
    P.apiMessage.set_pdu(msg, pdu)
    return bytes(encoder.encode(msg))


def pyasn1_view(data: bytes) -> list[tuple[str, Value]]:
    msg, _ = decoder.decode(data, asn1Spec=P.Message())
    return [(str(n), _to_value(v)) for n, v in P.apiPDU.get_varbinds(P.apiMessage.get_pdu(msg))]


def random_value(rng: random.Random) -> Any:
    kind = rng.randrange(11)
    if kind == 0:
        return P.Integer(rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)]))
    if kind == 1:
        return P.OctetString(bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 200, 300]))))
    if kind == 2:
        return P.Counter32(rng.choice([0, 2**32 - 1, 2**31, rng.randrange(2**32)]))
    if kind == 3:
        return P.Gauge32(rng.choice([0, 127, 128, 255, 2**32 - 1, rng.randrange(2**32)]))
    if kind == 4:
        return P.TimeTicks(rng.randrange(2**32))
    if kind == 5:
        return P.Counter64(rng.choice([0, 2**64 - 1, 2**63, rng.randrange(2**64)]))
    if kind == 6:
        return P.IpAddress(".".join(str(rng.randrange(256)) for _ in range(4)))
    if kind == 7:
        return P.ObjectIdentifier(random_oid(rng))
    if kind == 8:
        return P.Null("")
    return [P.NoSuchObject(""), P.NoSuchInstance(""), P.EndOfMibView("")][kind - 9]


def random_oid(rng: random.Random) -> str:
    first = rng.choice([(0, rng.randrange(40)), (1, rng.randrange(40)), (2, rng.randrange(300))])
    rest = [rng.choice([0, 1, 127, 128, 16383, 16384, 2**28, 2**32 - 1]) for _ in range(3)]
    rest += [rng.randrange(2**32) for _ in range(rng.randrange(20))]
    return ".".join(map(str, (*first, *rest)))


@pytest.mark.parametrize("seed", range(40))
def test_decode_equals_pyasn1(seed: int) -> None:
    """Random responses of every SMI type, OIDs with big arcs, long-form lengths."""
    rng = random.Random(seed)
    vbs = [(random_oid(rng), random_value(rng)) for _ in range(rng.randrange(0, 60))]
    request_id = rng.choice([0, 1, 2**31 - 1, -5, rng.randrange(2**31)])
    data = response(vbs, request_id, community="pdu-" + "x" * rng.randrange(200))
    got = ber.decode_response(data)
    assert [(name, v) for _, name, v in got.var_binds] == pyasn1_view(data)
    assert [arcs for arcs, _, _ in got.var_binds] == [
        tuple(int(a) for a in o.split(".")) for o, _ in vbs
    ]
    assert (got.request_id, got.error_status, got.error_index) == (request_id, 0, 0)
    assert got.community.startswith(b"pdu-")


def test_error_status_and_index() -> None:
    pdu = P.ResponsePDU()
    P.apiPDU.set_defaults(pdu)
    P.apiPDU.set_request_id(pdu, 99)
    P.apiPDU.set_error_status(pdu, 1)
    P.apiPDU.set_error_index(pdu, 3)
    P.apiPDU.set_varbinds(pdu, [])
    msg = P.Message()
    P.apiMessage.set_defaults(msg)
    P.apiMessage.set_community(msg, "public")
    P.apiMessage.set_pdu(msg, pdu)
    got = ber.decode_response(bytes(encoder.encode(msg)))
    assert (got.request_id, got.error_status, got.error_index, got.var_binds) == (99, 1, 3, [])


@pytest.mark.parametrize(
    ("pdu_type", "reps"), [(ber.GET, 0), (ber.GETNEXT, 0), (ber.GETBULK, 25), (ber.GETBULK, 1000)]
)
def test_requests_decode_in_pyasn1(pdu_type: int, reps: int) -> None:
    oids = [(1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 9, 4, 3, 1, 7), (1, 3, 6, 1, 2, 1, 1, 3, 0), (2, 999)]
    data = ber.encode_request(pdu_type, b"secret community", 2**31 - 1, oids, 0, reps)
    msg, rest = decoder.decode(data, asn1Spec=P.Message())
    assert rest == b""
    assert int(msg["version"]) == 1 and bytes(msg["community"]) == b"secret community"
    pdu = P.apiMessage.get_pdu(msg)
    assert int(P.apiPDU.get_request_id(pdu)) == 2**31 - 1
    assert [tuple(n) for n, _ in P.apiPDU.get_varbinds(pdu)] == oids
    kinds = {ber.GET: P.GetRequestPDU, ber.GETNEXT: P.GetNextRequestPDU}
    if pdu_type == ber.GETBULK:
        assert pdu.isSameTypeWith(P.GetBulkRequestPDU())
        assert int(P.apiBulkPDU.get_max_repetitions(pdu)) == reps
        assert int(P.apiBulkPDU.get_non_repeaters(pdu)) == 0
    else:
        assert pdu.isSameTypeWith(kinds[pdu_type]())


def test_unsigned_types_follow_net_snmp_when_agents_encode_them_badly() -> None:
    """A Gauge32 encoded as negative (within 32 bits) reads modulo 2^32, as net-snmp reads it.

    Longer encodings read exactly and are out of range (tests/unit/test_ber_hostile.py).
    """
    oid = ber.encode_oid((1, 3, 6, 1, 2))
    vb = bytes((0x30, 2 + len(oid) + 6, 0x06, len(oid))) + oid + b"\x42\x04\xff\xff\xff\xff"
    head = b"\x02\x01\x01\x04\x01c"
    pdu = b"\x02\x01\x07\x02\x01\x00\x02\x01\x00\x30" + bytes((len(vb),)) + vb
    msg = head + b"\xa2" + bytes((len(pdu),)) + pdu
    data = b"\x30" + bytes((len(msg),)) + msg
    assert ber.decode_response(data).var_binds[0][2] == Value("Gauge32", 2**32 - 1)
    # an application tag SNMPv2 does not define (0x47) is kept as Opaque, not a broken poll
    data2 = data.replace(b"\x42\x04", b"\x47\x04")
    assert ber.decode_response(data2).var_binds[0][2] == Value("Opaque", b"\xff\xff\xff\xff")


def _good() -> bytes:
    return response([("1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.1", P.Integer(163))], request_id=4242)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d[: len(d) // 2],  # cut in half, as a PDU that overflows its buffer does
        lambda d: d[:-1],
        lambda d: d + b"\x00",  # trailing garbage
        lambda d: b"\x31" + d[1:],  # not a SEQUENCE
        lambda d: d.replace(b"\x02\x01\x01", b"\x02\x01\x03", 1),  # version 3 header, v2c body
        lambda d: d.replace(b"\xa2", b"\xa0", 1),  # a GetRequest, not a Response
        lambda d: b"\x30\x80" + d[2:],  # indefinite length (RFC 3417 section 8 forbids it)
        lambda d: b"",
        lambda d: bytes(range(256)),
    ],
)
def test_malformed_messages_are_ber_errors(mangle: Any) -> None:
    with pytest.raises(ber.BerError):
        ber.decode_response(mangle(_good()))


def test_request_id_of_a_cut_off_answer() -> None:
    data = _good()
    assert ber.request_id_of(data) == 4242
    for n in range(len(data) // 3, len(data)):  # from just past the request-id to whole
        assert ber.request_id_of(data[:n]) == 4242, n
    assert ber.request_id_of(data[:8]) is None
    assert ber.request_id_of(b"") is None
    assert ber.request_id_of(b"\x30\x03\x02\x01\x01") is None
    req = ber.encode_request(ber.GET, b"c", 5, [(1, 3, 6)])
    assert ber.request_id_of(req) is None  # not an answer


@pytest.mark.parametrize(
    "content",
    [b"", b"\x2b\x86", b"\x2b\x80\x01"],  # empty, unterminated, leading 0x80 (not minimal)
)
def test_bad_oid_content(content: bytes) -> None:
    with pytest.raises(ber.BerError):
        ber.decode_oid(content)


def test_oid_round_trip_at_the_arc_edges() -> None:
    for arcs in [(0, 0), (1, 39), (2, 0), (2, 47, 128), (2, 999, 2**32 - 1), (1, 3, 16383, 16384)]:
        assert ber.decode_oid(ber.encode_oid(arcs)) == arcs
    with pytest.raises(ValueError):
        ber.encode_oid((1, 40))
    with pytest.raises(ValueError):
        ber.encode_oid((3, 1))
