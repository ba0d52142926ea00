"""The SNMPv2c socket against hostile senders and broken agents, over real sockets on 127.0.0.1.

The agents here are raw UDP sockets in a thread that read requests with pyasn1 (pysnmp's
codec, not the client's) and answer with bytes built by hand, so they can send what no
well-behaved agent would: 60 KB datagrams from ports that are no PDU, arcs too long for an
int, 1,200 var-binds to a GETBULK that asked for 25. Assertions are on counts and cache
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

from exporters.snmp import ber
from exporters.snmp.client import Auth, SnmpClient, SnmpError, Target
from tests.support.berbuild import integer, oid_content, response, var_bind
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
            req = Request(data)
            self.requests.append(req)
            for out in self.answer(req):
                with contextlib.suppress(OSError):
                    self.sock.sendto(out, peer)


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
