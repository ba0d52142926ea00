"""A PDU that refuses (ICMP port unreachable) never costs another PDU a request (issue 26).

All SNMPv2c agents share one unconnected UDP socket per address family, with IP_RECVERR on so
that ICMP errors reach the client (exporters/snmp/udp.py). Linux then also leaves each ICMP
error pending on the socket (sk_err), and the next sendto() on it - to any address - fails
with that error and sends nothing. Before the fix, the datagram of whichever request went out
next after the refusal was lost and recovered only by a resend one timeout later.

Real sockets on the loopback: RawAgents serving a recorded APC PDU, ports held so that they
refuse every datagram with ICMP port unreachable, the site collector's PduPoller polling them
all together, round after round. What is asserted is counted (datagrams the client sent,
requests the agents saw), never how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from collector.site.profiles import load_profiles
from exporters.pdu.poller import PduPoller, PduTarget
from exporters.snmp.client import Auth, SnmpClient, SnmpError, Target
from tests.support.env import RECORDINGS, require
from tests.support.snmpagents import RawAgent

T = TypeVar("T")
APC = RECORDINGS / "apc_ap8641.snmprec"
GOOD = 8  # PDUs that answer
ROUNDS = 12  # polls of all of them; before the fix every round but the first lost a request
# Long enough that no answer on a loaded machine misses it: a resend then means a lost datagram.
TIMEOUT = 15.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run with an overall guard; exceptions that escaped into the loop fail the test."""
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        return await asyncio.wait_for(coro, 600)

    result = asyncio.run(main())
    assert errors == [], f"exceptions escaped into the event loop: {errors}"
    return result


@contextlib.contextmanager
def refusing_udp_port(host: str) -> Iterator[int]:
    """A UDP port held for the test that answers every datagram with ICMP port unreachable.

    A socket bound to the port and connected to another one (the discard port) takes only
    datagrams from that peer; for anyone else the kernel finds no socket and refuses. Unlike a
    port found free and released, nobody else can bind it while the test runs.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        s.connect((host, 9))
        yield int(s.getsockname()[1])


def _loopback(host: str) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((host, 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_refusing_pdus_cost_the_others_no_resend(host: str) -> None:
    """8 PDUs answer, 3 refuse, all polled together 12 times: every request of the answering
    PDUs is answered on its first try, and every poll of a refusing one fails as "refused"."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    require(_loopback(host), f"no loopback address {host} on this host")

    def target(port: int) -> Target:
        return Target(host, port, Auth("2c", community="public"), timeout=TIMEOUT, retries=1)

    with contextlib.ExitStack() as stack:
        agents = [stack.enter_context(RawAgent(APC, "public", host=host)) for _ in range(GOOD)]
        dead = [stack.enter_context(refusing_udp_port(host)) for _ in range(3)]
        good = [PduTarget(f"good{i}", target(a.port), "apc_rpdu2") for i, a in enumerate(agents)]
        refusing = [PduTarget(f"dead{i}", target(p), "apc_rpdu2") for i, p in enumerate(dead)]
        # Refusing PDUs first, in the middle and last: in a round after the first (addresses
        # resolved), every PDU's first request goes out in this order in one turn of the loop.
        targets = [refusing[0], *good[:4], refusing[1], *good[4:], refusing[2]]

        def delivered() -> int:
            return sum(a.stats.requests for a in agents)

        async def go() -> list[tuple[dict[str, str], int, int]]:
            rounds = []
            async with SnmpClient() as client:
                poller = PduPoller(targets, load_profiles(), client, interval=4 * TIMEOUT)
                for _ in range(ROUNDS):
                    sent, seen = client.counts()["sent"], delivered()
                    states = await poller.poll_all()
                    errors = {s.name: s.error for s in states}
                    rounds.append((errors, client.counts()["sent"] - sent, delivered() - seen))
                    # Fail at the first round that lost a request: each costs a timeout.
                    if rounds[-1][1] != rounds[-1][2] + len(refusing):
                        break
            return rounds

        rounds = run(go())
    expected = {t.name: "refused" if t in refusing else "" for t in targets}
    for n, (errors, sent, seen) in enumerate(rounds):
        assert errors == expected, f"round {n}: {errors}"
        # One datagram to each refusing PDU (its first request ends its poll), and one for
        # each request an answering PDU saw: nothing lost, so nothing sent again.
        assert sent == seen + len(refusing), f"round {n}: {sent} sent, {seen} seen by the agents"
        assert seen > GOOD  # each PDU's poll is several requests (walks and GETs)
    assert len(rounds) == ROUNDS


def test_a_datagram_the_kernel_will_not_send_fails_its_request_at_once() -> None:
    """A send that fails for a reason of its own fails the request with that reason ("error").

    The limited broadcast address without SO_BROADCAST: every sendto() to it fails with EACCES
    and no ICMP error is queued. Before, the datagram was dropped without a word and the
    request waited out all its tries as a "timeout" (here 50 s, far past the test's guard).
    """
    target = Target("255.255.255.255", 161, Auth("2c", community="public"), timeout=50, retries=0)

    async def go() -> tuple[SnmpError, dict[str, int]]:
        async with SnmpClient() as client:
            with pytest.raises(SnmpError) as info:
                await asyncio.wait_for(client.get(target, ["1.3.6.1.2.1.1.2.0"]), 30)
            return info.value, client.counts()

    exc, counts = run(go())
    assert exc.reason == "error" and "Permission denied" in str(exc), exc
    assert "public" not in str(exc)
    assert counts["sent"] == 0  # nothing left the host
