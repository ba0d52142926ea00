"""What a hostile or broken agent can send, and what the codec and the decoder make of it.

Bounds are asserted on counts, sizes and error types, never on wall-clock time: a 60 KB arc
must be refused as garbage by its length, before any arithmetic on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from collector.pdu.snmprec import parse_snmprec
from collector.site.config import PduConfig
from collector.site.profiles import load_profiles
from exporters.base import ExportersCollector
from exporters.pdu.decode import decode
from exporters.pdu.exporter import PduExporter
from exporters.pdu.poller import PduPoller, PduTarget
from exporters.snmp import ber
from exporters.snmp.client import Auth, Target
from exporters.snmp.oid import under
from exporters.snmp.types import Value, Walk
from tests.support.berbuild import integer, oid_content, response, tlv, var_bind
from tests.support.env import RECORDINGS, require
from tests.support.realparts import parse_samples

APC = RECORDINGS / "apc_ap8641.snmprec"
OUTLETS = "1.3.6.1.4.1.318.1.1.26.9.4.3.1"  # rPDU2OutletMeteredStatusEntry
POWER = f"{OUTLETS}.7"  # rPDU2OutletMeteredStatusPower, W, Integer32


# --- hand-built BER (the codec under test never builds its own test input) -------------------


# --- finding 2: OIDs decode in linear time, within RFC 2578's bounds --------------------------


def test_a_60_kb_arc_is_garbage_refused_by_its_length() -> None:
    """One 60 KB arc: a BerError (was: decoded, 0.35 s of quadratic shifting on the loop)."""
    huge = b"\x81" * 60_000 + b"\x01"
    with pytest.raises(ber.BerError):
        ber.decode_oid(b"\x2b\x06" + huge)
    data = response([var_bind(b"\x2b\x06" + huge, b"\x05\x00")])
    with pytest.raises(ber.BerError):
        ber.decode_response(data)
    assert ber.request_id_of(data) == 7  # still readable: the request fails at once


def test_an_arc_beyond_python_int_digits_is_a_ber_error_not_a_value_error() -> None:
    """A > 4,300-digit arc used to raise a plain ValueError (int digits limit) out of the codec."""
    arc = 10**4400
    data = response([var_bind(oid_content((1, 3, 6, arc)), b"\x05\x00")])
    with pytest.raises(ber.BerError):
        ber.decode_response(data)
    # the same arc as an OBJECT IDENTIFIER *value*
    value = tlv(0x06, oid_content((1, 3, 6, arc)))
    with pytest.raises(ber.BerError):
        ber.decode_response(response([var_bind(oid_content((1, 3, 6, 1)), value)]))


def test_sub_identifier_and_length_bounds_of_rfc_2578() -> None:
    """Sub-identifiers up to 2^32-1 and up to 128 of them (RFC 2578 section 7.1.3), no more."""
    top = (1, 3, *([2**32 - 1] * 126))  # 128 sub-identifiers, each the largest
    assert ber.decode_oid(oid_content(top)) == top
    assert ber.decode_oid(oid_content((2, 2**32 - 1))) == (2, 2**32 - 1)
    for bad in [(1, 3, 2**32), (1, 3, *([1] * 127)), (2, 2**32)]:
        with pytest.raises(ber.BerError):
            ber.decode_oid(oid_content(bad))


# --- finding 1: the OID cache is bounded in entries and in bytes ------------------------------


def test_long_names_are_decoded_but_never_cached() -> None:
    ber._OID_CACHE.clear()
    long_name = oid_content((1, 3, 6, 1, 4, 1, 99999, *([2**32 - 1] * 100)))
    got = ber.decode_response(response([var_bind(long_name, integer(5))]))
    assert got.var_binds[0][2] == Value("Integer32", 5)
    assert long_name not in ber._OID_CACHE
    assert all(len(k) <= ber.OID_CACHE_KEY_BYTES for k in ber._OID_CACHE)


def test_the_oid_cache_has_a_memory_bound() -> None:
    """Worst case: every entry the longest name the cache keeps; about 11 MiB, never hundreds."""
    ber._OID_CACHE.clear()
    n = ber.OID_CACHE_KEY_BYTES // 5  # arcs of 5 octets each
    longest = [oid_content((1, 3, *([2**32 - 1] * (n - 2)), i)) for i in range(4)]
    assert all(len(x) <= ber.OID_CACHE_KEY_BYTES for x in longest)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(ber.OID_CACHE_SIZE + 100):  # full, and past it
            ber._name(oid_content((1, 3, *([2**32 - 1] * (n - 2)), i)))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(ber._OID_CACHE) == ber.OID_CACHE_SIZE  # the count bound holds
    assert all(len(k) <= ber.OID_CACHE_KEY_BYTES for k in ber._OID_CACHE)
    assert held <= 16 << 20, held  # entries, their order and the keys themselves
    ber._OID_CACHE.clear()


def test_pdu_names_survive_a_flood_of_distinct_names() -> None:
    """A PDU's names, read every poll, stay cached while new names flood in between polls.

    The cache used to be emptied when full: the flood then took the PDU's names with it, and
    the next poll decoded every one of them again.
    """
    ber._OID_CACHE.clear()
    table = (1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 9, 4, 3, 1)
    poll = response(
        [var_bind(oid_content((*table, c, i)), integer(i)) for c in (3, 5, 7) for i in range(1, 49)]
    )
    names = [oid_content((*table, c, i)) for c in (3, 5, 7) for i in range(1, 49)]
    flood_names = 0
    for round_ in range(40):  # 40 x 1,000 new names: more than twice the cache
        ber.decode_response(poll)  # the poll: every name a hit after the first round
        assert all(name in ber._OID_CACHE for name in names), round_
        flood = [
            var_bind(oid_content((1, 3, 6, 1, 4, 1, 99999, round_, i)), integer(i))
            for i in range(1000)
        ]
        for i in range(0, len(flood), 100):
            ber.decode_response(response(flood[i : i + 100]))
        flood_names += len(flood)
        assert all(name in ber._OID_CACHE for name in names), round_
    assert flood_names > 2 * ber.OID_CACHE_SIZE
    assert len(ber._OID_CACHE) == ber.OID_CACHE_SIZE
    # the least recently used went first: the oldest flood names, not the newest
    assert oid_content((1, 3, 6, 1, 4, 1, 99999, 0, 0)) not in ber._OID_CACHE
    assert oid_content((1, 3, 6, 1, 4, 1, 99999, 39, 999)) in ber._OID_CACHE
    ber._OID_CACHE.clear()


# --- finding 9: no more var-binds than asked ---------------------------------------------------


def test_more_var_binds_than_asked_are_garbage_and_not_decoded_past_the_bound() -> None:
    vbs = [var_bind(oid_content((1, 3, 6, 1, 9, i)), integer(i)) for i in range(1200)]
    data = response(vbs)
    assert len(ber.decode_response(data).var_binds) == 1200  # no bound given: all of them
    assert len(ber.decode_response(data, max_var_binds=1200).var_binds) == 1200
    with pytest.raises(ber.BerError, match="more than the 25"):
        ber.decode_response(data, max_var_binds=25)


# --- finding 5: one absurd integer is one out_of_range value -----------------------------------


def _apc() -> Walk:
    require(APC.is_file(), f"recording {APC} not present")
    return parse_snmprec(APC.read_text())


def _apc_profile():  # type: ignore[no-untyped-def]
    return next(p for p in load_profiles() if p.name == "apc_rpdu2")


@pytest.mark.parametrize(
    "value",
    [
        Value("Integer32", 2**1100),
        Value("Integer32", 2**31),
        Value("Integer32", -(2**31) - 1),
        Value("Gauge32", 2**32),
        Value("Counter64", 2**64),
        Value("Integer32", None),  # ber.py: an INTEGER too long to read at all
    ],
)
def test_an_absurd_integer_is_one_out_of_range_value(value: Value) -> None:
    walk = _apc()
    ok = decode(_apc_profile(), walk)
    walk[f"{POWER}.3"] = value
    got = decode(_apc_profile(), walk)
    assert got.invalid.get("out_of_range", 0) == ok.invalid.get("out_of_range", 0) + 1
    assert got.outlets[2].power_watts is None
    assert [o.power_watts for o in got.outlets if o.index != "3"] == [
        o.power_watts for o in ok.outlets if o.index != "3"
    ]
    assert got.unit_power_watts == ok.unit_power_watts


def test_ber_reads_an_overlong_integer_without_failing_the_message() -> None:
    """Integer32 of 2^1100 (139 octets) and a 6-octet Counter32: values, not a broken message."""
    name = oid_content((1, 3, 6, 1, 9, 1))
    data = response(
        [
            var_bind(name, integer(2**1100)),
            var_bind(name, integer(2**40, tag=0x41)),
            var_bind(name, integer(-1, tag=0x41)),  # net-snmp: modulo 2^32
            var_bind(name, integer(5)),
        ]
    )
    values = [v for _, _, v in ber.decode_response(data).var_binds]
    assert values[0].type == "Integer32" and values[0].value is None
    assert values[1] == Value("Counter32", 2**40)  # exact; decode.py says out_of_range
    assert values[2] == Value("Counter32", 2**32 - 1)
    assert values[3] == Value("Integer32", 5)


# --- finding 9: outlets per PDU under max_outlets -----------------------------------------------


class _BigWalkClient:
    def __init__(self, walk: Walk) -> None:
        self.walk = walk

    async def get(self, target: Target, oids: list[str]) -> Walk:
        return {o: self.walk[o] for o in oids if o in self.walk}

    async def walk_many(self, target: Target, roots: list[str]) -> Walk:
        return {o: v for o, v in self.walk.items() if any(under(o, r) for r in roots)}

    def counts(self) -> dict[str, int]:
        return {}  # a fake counts nothing: the exporter shows no sample for it

    def close(self) -> None:
        pass


def test_a_pdu_claiming_20000_outlets_exports_at_most_max_outlets() -> None:
    walk = _apc()
    for i in range(25, 20_001):  # 19,976 more outlets, as the AP8641's outlet 1
        for col in (1, 2, 3, 4, 5, 6, 7, 11):
            if f"{OUTLETS}.{col}.1" in walk:
                walk[f"{OUTLETS}.{col}.{i}"] = walk[f"{OUTLETS}.{col}.1"]
    target = PduTarget(
        "big",
        Target("127.0.0.1", 1, Auth(version="2c", community="x")),
        profile="apc_rpdu2",
        max_outlets=100,
    )
    poller = PduPoller([target], load_profiles(), _BigWalkClient(walk))  # type: ignore[arg-type]
    state = asyncio.run(poller.poll(target))
    assert state.up and state.reading is not None
    assert len(state.reading.outlets) == 100
    assert [o.index for o in state.reading.outlets[:3]] == ["1", "2", "3"]
    # every value of every outlet past the limit counted once, as over_limit
    assert state.reading.invalid["over_limit"] == (20_000 - 100) * 3
    r = CollectorRegistry(auto_describe=False)
    r.register(ExportersCollector([PduExporter(poller)]))
    s = parse_samples(generate_latest(r).decode())
    outlet_series = [k for k in s if k[0].startswith("wattbit_pdu_outlet_")]
    assert len(outlet_series) <= 4 * 100
    assert s[("wattbit_pdu_invalid_values_total", (("pdu", "big"), ("reason", "over_limit")))]


# --- the new configuration keys ------------------------------------------------------------------


def test_pdu_limits_in_the_configuration() -> None:
    base = {"name": "p", "address": "10.0.0.1", "auth": "a"}
    cfg = PduConfig.model_validate(base)
    assert (cfg.max_outlets, cfg.max_var_binds) == (512, 20_000)
    cfg = PduConfig.model_validate({**base, "max_outlets": 48, "max_var_binds": 2000})
    assert (cfg.max_outlets, cfg.max_var_binds) == (48, 2000)
    for bad in ({"max_outlets": 0}, {"max_outlets": 100_000}, {"max_var_binds": 10}):
        with pytest.raises(ValidationError):
            PduConfig.model_validate({**base, **bad})
    with pytest.raises(ValueError):
        Target("h", auth=Auth("2c", community="x"), max_var_binds=0)


# --- fuzz: only the codec's own error ever escapes ------------------------------------------------


_valid = response(
    [
        var_bind(oid_content((1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 9, 4, 3, 1, 7, 1)), integer(163)),
        var_bind(oid_content((1, 3, 6, 1, 2, 1, 1, 2, 0)), tlv(0x06, oid_content((1, 3, 6, 1)))),
        var_bind(oid_content((1, 3, 6, 1, 2, 1, 1, 3, 0)), integer(2**40, tag=0x46)),
    ],
    request_id=4242,
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.binary(max_size=600)
    | st.builds(lambda i, b: _valid[:i] + b, st.integers(0, 80), st.binary(max_size=40))
)
def test_fuzz_decode_raises_only_ber_error(data: bytes) -> None:
    for limit in (None, 2):
        with contextlib.suppress(ber.BerError):
            ber.decode_response(data, max_var_binds=limit)
    ber.request_id_of(data)
    ber.header_of(data)
    with contextlib.suppress(ber.BerError):
        ber.decode_oid(data)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, len(_valid) - 1), st.integers(0, 255))
def test_fuzz_one_byte_changed_raises_only_ber_error(pos: int, byte: int) -> None:
    data = _valid[:pos] + bytes((byte,)) + _valid[pos + 1 :]
    with contextlib.suppress(ber.BerError):
        ber.decode_response(data, max_var_binds=3)
    ber.request_id_of(data)
    ber.header_of(data)
