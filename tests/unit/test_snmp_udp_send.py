"""V2cTransport._send when sendto() fails: the branches no real socket reaches on demand.

The real cases (a refusal pending from another agent, a broadcast address) are in
tests/integration/test_snmp_icmp.py. Here a fake socket plays the two the kernel cannot be
made to do at will: ICMP errors arriving between every two tries (a flood), and an error left
pending whose error-queue entry found no room (sk_err set, nothing queued).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
from typing import Any

import pytest

from exporters.snmp import ber, udp

AGENT = ("192.0.2.7", 161)
OTHER = ("192.0.2.8", 161)  # the agent whose ICMP errors keep arriving
OID = [(1, 3, 6, 1, 2, 1, 1, 2, 0)]


class FakeSocket:
    """sendto() fails with the errors given, in order; then sends. recvmsg() plays the queue."""

    def __init__(self, failures: list[int], queued: list[int]) -> None:
        self.failures = list(failures)
        self.queued = list(queued)  # per failure: how many ICMP errors it leaves queued
        self.queue = 0
        self.sent: list[tuple[bytes, Any]] = []

    def sendto(self, data: bytes, address: Any) -> int:
        if self.failures:
            self.queue += self.queued.pop(0)
            raise OSError(self.failures.pop(0), "fake")
        self.sent.append((data, address))
        return len(data)

    def recvmsg(self, *_: Any) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "empty")
        self.queue -= 1
        err = struct.pack("=IBBBBII", errno.ECONNREFUSED, 2, 3, 3, 0, 0, 0)
        return b"", [(socket.IPPROTO_IP, 11, err)], 0, OTHER


class FakeTransport:
    def sendto(self, data: bytes, address: Any) -> None:  # pragma: no cover - not reached
        raise AssertionError("the socket was not full")

    def close(self) -> None:
        pass


async def _request(sock: FakeSocket, retries: int = 0) -> tuple[Any, udp.V2cTransport]:
    transport = udp.V2cTransport()
    transport._loop = asyncio.get_running_loop()
    transport._sock = sock  # type: ignore[assignment]
    transport._transport = FakeTransport()  # type: ignore[assignment]
    try:
        return await transport.request(AGENT, b"public", ber.GET, OID, 0, 0.05, retries), transport
    except Exception as exc:
        return exc, transport


def test_an_error_left_pending_without_a_queue_entry_is_tried_again() -> None:
    """One failure with nothing queued is not yet the datagram's own: the next try sends it."""
    sock = FakeSocket([errno.ECONNREFUSED], [0])
    result, transport = asyncio.run(_request(sock))
    assert isinstance(result, udp.RequestTimeout)  # nobody answers the fake: it was sent
    assert [a for _, a in sock.sent] == [AGENT] and transport.sent == 1


def test_twice_with_nothing_queued_is_the_datagram_s_own_error() -> None:
    sock = FakeSocket([errno.ENETUNREACH] * 4, [0] * 4)
    result, transport = asyncio.run(_request(sock, retries=3))
    assert isinstance(result, OSError) and result.errno == errno.ENETUNREACH
    assert sock.sent == [] and transport.sent == 0 and sock.failures == [errno.ENETUNREACH] * 2


@pytest.mark.parametrize("retries", [0, 1])
def test_a_flood_of_icmp_errors_leaves_the_request_to_its_timeout(retries: int) -> None:
    """Every try fails on a fresh ICMP error from another agent: not this request's error, so
    it neither fails at once nor loops: the timeout sends again (or ends it)."""
    sock = FakeSocket([errno.ECONNREFUSED] * udp.SEND_TRIES, [1] * udp.SEND_TRIES)
    result, transport = asyncio.run(_request(sock, retries=retries))
    assert isinstance(result, udp.RequestTimeout)
    assert transport.sent == retries  # the resend, when there is one, goes out
    assert [a for _, a in sock.sent] == [AGENT] * retries
