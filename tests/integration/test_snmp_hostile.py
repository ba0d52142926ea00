"""The SNMP client against hostile senders and broken agents, over real sockets on 127.0.0.1.

The agents here are raw UDP sockets in a thread that read requests with pyasn1 (pysnmp's
codec, not the client's) and answer with bytes built by hand, so they can send what no
well-behaved agent would: 60 KB datagrams from ports that are no PDU, arcs too long for an
int, 1,200 var-binds to a GETBULK that asked for 25 (over SNMPv2c, and over SNMPv3 with a
noAuthNoPriv agent whose messages are built the same way). Assertions are on counts and cache
contents, never on how long something took.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import select
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from pyasn1.codec.ber import decoder
from pysnmp.proto import api
from pysnmp.proto.mpmod.rfc3412 import SNMPv3Message
from pysnmp.proto.secmod.rfc3414.service import UsmSecurityParameters

from exporters.snmp import ber
from exporters.snmp.client import Auth, SnmpClient, SnmpError, Target
from tests.support.berbuild import integer, oid_content, response, tlv, var_bind
from tests.support.env import RECORDINGS, require
from tests.support.snmpagents import RawAgent

T = TypeVar("T")
P = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
APC = RECORDINGS / "apc_ap8641.snmprec"
OUTLET_TABLE = "1.3.6.1.4.1.318.1.1.26.9.4.3"
HOSTILE_ARC = 99999  # enterprise arc of every OID the hostile senders make up


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run with a test-sized overall guard; loop exceptions collected, then re-raised."""
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        return await asyncio.wait_for(coro, 60)

    result = asyncio.run(main())
    assert errors == [], f"exceptions escaped into the event loop: {errors}"
    return result


# --- hand-built BER -------------------------------------------------------------------------------


def hostile_datagram(start: int, size: int = 60_000) -> bytes:
    """A well-formed v2c Response of about `size` bytes, every OID a new one."""
    vbs, total, i = [], 0, start
    while total < size:
        vb = var_bind(oid_content((1, 3, 6, 1, 4, 1, HOSTILE_ARC, i, 1, 2, 3, 4)), integer(i))
        vbs.append(vb)
        total += len(vb)
        i += 1
    return response(vbs, 1, b"public")


# --- a raw agent that answers as a test says --------------------------------------------------


class Request:
    """One decoded request: its id, community, PDU kind, names and max-repetitions."""

    def __init__(self, data: bytes) -> None:
        msg, _ = decoder.decode(data, asn1Spec=P.Message())
        pdu = P.apiMessage.get_pdu(msg)
        self.community = bytes(P.apiMessage.get_community(msg))
        self.request_id = int(P.apiPDU.get_request_id(pdu))
        self.bulk = pdu.isSameTypeWith(P.GetBulkRequestPDU())
        self.names = [tuple(int(a) for a in n) for n, _ in P.apiPDU.get_varbinds(pdu)]
        self.reps = int(P.apiBulkPDU.get_max_repetitions(pdu)) if self.bulk else 0


class ScriptedAgent:
    """A UDP socket on 127.0.0.1 answering each request with what `answer` returns."""

    def __init__(self, answer: Callable[[Request], list[bytes]]) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ScriptedAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            data, peer = self.sock.recvfrom(65535)
            for out in self._answers(data):
                with contextlib.suppress(OSError):
                    self.sock.sendto(out, peer)

    def _answers(self, data: bytes) -> list[bytes]:
        req = Request(data)
        self.requests.append(req)
        return self.answer(req)


# --- the same for SNMPv3 (noAuthNoPriv: no keys, so every byte is still the test's) ------------

ENGINE_ID = b"\x80\x00\x1f\x88\x04wattbit-hostile"  # RFC 3411 format 4: text
USM_STATS_UNKNOWN_ENGINE_IDS = (1, 3, 6, 1, 6, 3, 15, 1, 1, 4, 0)


class V3Request(Request):
    """One decoded SNMPv3 request (RFC 3412 message, RFC 3414 USM parameters, plaintext)."""

    def __init__(self, data: bytes) -> None:
        msg, _ = decoder.decode(data, asn1Spec=SNMPv3Message())
        self.msg_id = int(msg["msgGlobalData"]["msgID"])
        usm, _ = decoder.decode(
            bytes(msg["msgSecurityParameters"]), asn1Spec=UsmSecurityParameters()
        )
        self.engine_id = bytes(usm["msgAuthoritativeEngineId"])
        self.user = bytes(usm["msgUserName"])
        scoped = msg["msgData"]["plaintext"]
        self.context = bytes(scoped["contextName"])
        pdu = scoped["data"].getComponent()
        self.community = b""
        self.request_id = int(pdu["request-id"])
        self.bulk = scoped["data"].getName() == "get-bulk-request"
        self.names = [tuple(int(a) for a in vb["name"]) for vb in pdu["variable-bindings"]]
        self.reps = int(pdu["max-repetitions"]) if self.bulk else 0

    def message(self, var_binds: list[bytes], pdu_tag: int = ber.RESPONSE) -> bytes:
        """The agent's answer: a noAuthNoPriv message from ENGINE_ID carrying var_binds."""
        usm = tlv(0x30, tlv(0x04, ENGINE_ID) + integer(1) + integer(100) + tlv(0x04, self.user)
                  + tlv(0x04, b"") + tlv(0x04, b""))  # fmt: skip
        # msgFlags 0: noAuthNoPriv, not reportable; msgSecurityModel 3: USM
        header = tlv(0x30, integer(self.msg_id) + integer(65507) + tlv(0x04, b"\x00") + integer(3))
        pdu = integer(self.request_id) + integer(0) + integer(0) + tlv(0x30, b"".join(var_binds))
        scoped = tlv(0x30, tlv(0x04, ENGINE_ID) + tlv(0x04, self.context) + tlv(pdu_tag, pdu))
        return tlv(0x30, integer(3) + header + tlv(0x04, usm) + scoped)


class V3ScriptedAgent(ScriptedAgent):
    """A UDP socket on 127.0.0.1 speaking SNMPv3 (noAuthNoPriv): engine ID discovery answered
    as RFC 3414 section 4 says, every request after it with what `answer` returns."""

    def __init__(self, answer: Callable[[V3Request], list[bytes]]) -> None:
        super().__init__(answer)  # type: ignore[arg-type]

    def _answers(self, data: bytes) -> list[bytes]:
        req = V3Request(data)
        if not req.engine_id:  # discovery: a Report carrying this agent's engine ID
            report = var_bind(oid_content(USM_STATS_UNKNOWN_ENGINE_IDS), integer(1, tag=0x41))
            return [req.message([report], ber.REPORT)]
        self.requests.append(req)
        return self.answer(req)


def v2c(port: int, **kw: Any) -> Target:
    return Target("127.0.0.1", port, Auth("2c", community="public"), **kw)


def transport_of(client: SnmpClient) -> Any:
    return client._v2c._transports[socket.AF_INET]


@contextlib.contextmanager
def senders(n: int) -> Iterator[list[socket.socket]]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        yield socks
    finally:
        for s in socks:
            s.close()


def hostile_names_cached() -> int:
    return sum(1 for arcs, _ in ber._OID_CACHE.values() if arcs[6:7] == (HOSTILE_ARC,))


# --- finding 1: datagrams from anywhere but a polled agent are dropped undecoded -------------


def test_60_kb_datagrams_from_a_port_that_is_no_pdu_are_dropped_before_decoding() -> None:
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    ber._OID_CACHE.clear()
    with RawAgent(APC, "public") as agent:
        target = v2c(agent.port)

        async def go() -> tuple[int, dict[str, int], int]:
            async with SnmpClient() as client:
                await client.get(target, ["1.3.6.1.2.1.1.2.0"])  # opens the socket
                transport = transport_of(client)
                port = transport._sock.getsockname()[1]
                received = transport.received
                with senders(3) as socks:
                    for i in range(60):
                        socks[i % 3].sendto(hostile_datagram(i * 10_000), ("127.0.0.1", port))
                    walk = await client.walk(target, OUTLET_TABLE)
                    # the walk's answers queued behind the flood: all of it was read
                    assert transport.received - received >= 60
                return len(walk), client.counts(), len(transport.garbage_at)

        values, counts, garbage_sources = run(go())
    assert values > 200
    assert hostile_names_cached() == 0  # was: 60 x ~4,000 names cached for good
    assert counts["dropped"] >= 60
    assert garbage_sources == 0


def test_stray_answers_from_the_agent_itself_are_not_decoded() -> None:
    """A datagram from the agent's own address with no request waiting for it: header only."""
    ber._OID_CACHE.clear()

    def answer(req: Request) -> list[bytes]:
        ok = response([var_bind(oid_content(req.names[0]), integer(1))], req.request_id, b"public")
        stray = hostile_datagram(0)  # request-id 1: nobody's
        wrong_community = response(
            [var_bind(oid_content((1, 3, 6, 1, 4, 1, HOSTILE_ARC, 7)))], req.request_id, b"other"
        )
        return [stray, wrong_community, ok]

    with ScriptedAgent(answer) as agent:

        async def go() -> dict[str, int]:
            async with SnmpClient() as client:
                got = await client.get(v2c(agent.port), ["1.3.6.1.2.1.1.3.0"])
                assert got["1.3.6.1.2.1.1.3.0"].value == 1
                return client.counts()

        counts = run(go())
    assert hostile_names_cached() == 0
    assert counts["stray"] >= 2


# --- finding 2: an undecodable answer is garbage, never a traceback -----------------------------


@pytest.mark.parametrize(
    "arc", [10**4400, 1 << 420_000], ids=["4400-digits", "60KB"]
)  # > 4,300 digits; one 60 KB arc
def test_a_huge_arc_is_garbage_at_once_never_an_exception_in_datagram_received(arc: int) -> None:
    def answer(req: Request) -> list[bytes]:
        return [response([var_bind(oid_content((1, 3, 6, arc)))], req.request_id, b"public")]

    with ScriptedAgent(answer) as agent:
        # a timeout far beyond the test's guard: "garbage" can only come from the answer itself
        target = v2c(agent.port, timeout=50, retries=0)

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.get(target, ["1.3.6.1.2.1.1.3.0"])
                return info.value

        exc = run(go())  # run() fails on any exception that reached the event loop
    assert exc.reason == "garbage"
    assert len(agent.requests) == 1


# --- finding 9: no more var-binds than asked for ------------------------------------------------


def test_1200_var_binds_to_a_getbulk_of_25_are_garbage() -> None:
    root = tuple(int(a) for a in OUTLET_TABLE.split("."))

    def answer(req: Request) -> list[bytes]:
        if not req.bulk:  # the liveness GET: answered properly
            vbs = [var_bind(oid_content(n), integer(1)) for n in req.names]
            return [response(vbs, req.request_id, b"public")]
        if req.names[0] != root:  # past the 1,200: the walk ends
            vbs = [var_bind(oid_content((*root[:-1], 4)), integer(0))] * req.reps
            return [response(vbs, req.request_id, b"public")]
        vbs = [var_bind(oid_content((*root, 1, 7, i)), integer(i)) for i in range(1, 1201)]
        return [response(vbs, req.request_id, b"public")]

    with ScriptedAgent(answer) as agent:

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.walk(v2c(agent.port, timeout=5, retries=0), OUTLET_TABLE)
                return info.value

        exc = run(go())
    assert exc.reason == "garbage"
    assert [r.reps for r in agent.requests if r.bulk] == [25, 12, 6, 3, 1]


def _too_many(req: Request, extra: int) -> list[bytes]:
    """Var-binds for req: as many as it asked for (each subtree's next OIDs), plus extra."""
    n = (len(req.names) * req.reps if req.bulk else len(req.names)) + extra
    return [var_bind(oid_content((*req.names[0], 7, i)), integer(i)) for i in range(1, n + 1)]


def test_v3_1200_var_binds_to_a_getbulk_of_25_are_garbage_as_in_v2c() -> None:
    """The v2c test above, over SNMPv3: pysnmp passes on whatever the agent sent, the client
    holds it to the same bound, and the walk halves to 1 and fails as garbage, as in v2c."""

    def answer(req: V3Request) -> list[bytes]:
        if not req.bulk:  # the liveness GET: answered properly
            return [req.message(_too_many(req, 0))]
        return [req.message(_too_many(req, 1200 - len(req.names) * req.reps))]

    with V3ScriptedAgent(answer) as agent:
        target = Target("127.0.0.1", agent.port, Auth("3", user="wattbit"), timeout=5, retries=0)

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.walk(target, OUTLET_TABLE)
                return info.value

        exc = run(go())
    assert exc.reason == "garbage"
    assert "1200 var-binds, 1 asked for" in str(exc)
    assert [r.reps for r in agent.requests if r.bulk] == [25, 12, 6, 3, 1]
    assert all(isinstance(r, V3Request) and r.user == b"wattbit" for r in agent.requests)


@pytest.mark.parametrize("version", ["2c", "3"])
def test_one_var_bind_more_than_a_get_asked_is_garbage(version: str) -> None:
    """A GET of 2 OIDs answered with 3 var-binds: garbage over v2c and v3 alike; with exactly
    as many, the same agent is read."""
    extra = {"n": 1}

    def answer(req: Request) -> list[bytes]:
        vbs = _too_many(req, extra["n"])
        if isinstance(req, V3Request):
            return [req.message(vbs)]
        return [response(vbs, req.request_id, b"public")]

    agent_class = V3ScriptedAgent if version == "3" else ScriptedAgent
    auth = Auth("3", user="wattbit") if version == "3" else Auth("2c", community="public")
    oids = ["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.1.5.0"]
    with agent_class(answer) as agent:
        target = Target("127.0.0.1", agent.port, auth, timeout=5, retries=0)

        async def go() -> tuple[SnmpError, int]:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.get(target, oids)
                extra["n"] = 0
                return info.value, len(await client.get(target, oids))

        exc, read = run(go())
    assert exc.reason == "garbage"
    assert read == 2


def test_a_walk_stops_at_max_var_binds() -> None:
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    with RawAgent(APC, "public") as agent:

        async def go() -> tuple[SnmpError, int]:
            async with SnmpClient() as client:
                whole = await client.walk(v2c(agent.port), OUTLET_TABLE)
                with pytest.raises(SnmpError) as info:
                    await client.walk(v2c(agent.port, max_var_binds=50), OUTLET_TABLE)
                return info.value, len(whole)

        exc, whole = run(go())
    assert whole > 200
    assert exc.reason == "over_limit"
    assert "50" in str(exc)


# --- finding 10: request ids are unpredictable; bookkeeping per source is bounded ---------------


def test_request_ids_are_random_not_a_sequence() -> None:
    def answer(req: Request) -> list[bytes]:
        vbs = [var_bind(oid_content(n), integer(1)) for n in req.names]
        return [response(vbs, req.request_id, b"public")]

    with ScriptedAgent(answer) as a, ScriptedAgent(answer) as b:

        async def go() -> None:
            async with SnmpClient() as client:
                for _ in range(20):
                    await client.get(v2c(a.port), ["1.3.6.1.2.1.1.3.0"])
                    await client.get(v2c(b.port), ["1.3.6.1.2.1.1.3.0"])

        run(go())
        ids = [r.request_id for r in a.requests]
        every = sorted(ids + [r.request_id for r in b.requests])
    steps = [y - x for x, y in itertools.pairwise(ids)]
    assert sum(1 for s in steps if 0 < s <= 2) <= 1  # was: +2 every time (a, b, a, b, ...)
    assert len(set(every)) == 40
    assert all(0 < i < 2**31 for i in every)


def test_garbage_from_many_sources_leaves_no_bookkeeping_behind() -> None:
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    with RawAgent(APC, "public") as agent:

        async def go() -> tuple[int, int]:
            async with SnmpClient() as client:
                await client.get(v2c(agent.port), ["1.3.6.1.2.1.1.2.0"])
                transport = transport_of(client)
                port = transport._sock.getsockname()[1]
                with senders(200) as socks:
                    for s in socks:
                        s.sendto(b"\x30\x03garbage", ("127.0.0.1", port))
                    received = transport.received
                    while transport.received - received < 200:
                        await client.get(v2c(agent.port), ["1.3.6.1.2.1.1.2.0"])
                return len(transport.garbage_at), len(transport._pending)

        garbage_sources, pending = run(go())
    assert garbage_sources == 0  # was: 200 addresses kept for ever
    assert pending == 0


# --- the client's counters on /metrics (the pdu exporter) ----------------------------------------


def test_the_client_counters_are_exported_by_the_pdu_exporter() -> None:
    """A real poll of a recorded PDU, datagrams spoofed from ports that are no PDU, and an agent
    that sends a stray and an undecodable datagram before each answer: every count the SNMP
    client keeps shows on /metrics, by reason."""
    from prometheus_client import CollectorRegistry, generate_latest

    from collector.site.profiles import load_profiles
    from exporters.base import ExportersCollector
    from exporters.pdu.exporter import PduExporter
    from exporters.pdu.poller import PduPoller, PduTarget
    from tests.support.realparts import parse_samples, sample

    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")

    def noisy(req: Request) -> list[bytes]:
        # request-id 0 is never a request's (udp.py): this one is a stray whatever is in flight
        stray = response([var_bind(oid_content(req.names[0]), integer(1))], 0, b"public")
        garbage = b"\x30\x03garbage"  # not even a readable header
        no_such = [var_bind(oid_content(n), b"\x80\x00") for n in req.names]  # noSuchObject
        return [stray, garbage, response(no_such, req.request_id, b"public")]

    with RawAgent(APC, "public") as apc, ScriptedAgent(noisy) as other:
        targets = [PduTarget("apc", v2c(apc.port)), PduTarget("noisy", v2c(other.port))]

        async def go() -> tuple[dict[str, int], str, list[str]]:
            async with SnmpClient() as client:
                poller = PduPoller(targets, load_profiles(), client)
                await poller.poll_all()
                port = transport_of(client)._sock.getsockname()[1]
                with senders(2) as socks:
                    for i in range(6):
                        socks[i % 2].sendto(hostile_datagram(i, 200), ("127.0.0.1", port))
                    # Queued ahead of this poll's answers: all read by the time it is done.
                    states = await poller.poll_all()
                registry = CollectorRegistry(auto_describe=False)
                registry.register(ExportersCollector([PduExporter(poller)]))
                text = generate_latest(registry).decode()
                return client.counts(), text, [s.error for s in states]

        counts, text, errors = run(go())
    assert errors == ["", "no_profile"]  # the recording polled; the noisy agent has no profile
    s = parse_samples(text)
    assert sample(s, "wattbit_exporter_up", exporter="pdu") == 1.0
    assert sample(s, "wattbit_snmp_messages_sent_total") == counts["sent"] > 0
    assert sample(s, "wattbit_snmp_messages_received_total") == counts["received"]
    assert sample(s, "wattbit_snmp_var_binds_received_total") == counts["var_binds"] > 200
    discarded = "wattbit_snmp_datagrams_discarded_total"
    assert sample(s, discarded, reason="not_polled") == counts["dropped"] >= 6
    assert sample(s, discarded, reason="stray") == counts["stray"] >= 1
    assert sample(s, discarded, reason="garbage") == counts["garbage"] >= 1
    assert counts["received"] >= counts["dropped"] + counts["stray"] + counts["garbage"]
