"""SNMPv2c requests over asyncio UDP sockets: request-ids, timeouts, retries, nothing else.

The SNMPv2c half of `SnmpClient` (snmp.py; v3.py is the other); messages are built and read by
ber.py. Like pysnmp's dispatcher, one unconnected socket (per address family) serves every
agent, and an answer counts only when it comes from the address the request went to and
carries its request-id and community.

The socket listens on every address, so anyone may send to it. What a datagram costs is
bounded before it is decoded, in this order:

1. from an (address, port) with no request in flight: dropped unread (`dropped`);
2. its header (community, request-id) is read; when no request waits for that id, from that
   address, with that community: dropped, var-binds unread (`stray`);
3. only then its var-binds are decoded, at most as many as the request asked for (ber.py);
   an undecodable answer fails its request at once as Garbage (`garbage`).

Request-ids are random 31-bit numbers (secrets), unique among the requests in flight, so an
off-path sender cannot guess them from the ones it sees elsewhere. Per-address state lives only
while requests to that address are in flight.

An agent that refuses (ICMP port unreachable) fails its own requests at once and costs the
others nothing: with IP_RECVERR on, Linux queues each ICMP error on the socket's error queue
*and* leaves it pending on the socket (sk_err), and the next sendto() to any address fails with
it without sending. Datagrams are therefore sent here, not through asyncio's transport (which
reports such a failure to error_received() and drops the datagram), and a failed send is
tried again once the error queue is read (`_send`). Measured: one lost request per refusal in
a poll round before (tests/integration/test_snmp_icmp.py, issue 26).
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from . import ber
from .target import Answer, SnmpError, Target, timeout_error

# All agents answer on one socket. 100 PDUs answering a poll round at once can overflow the
# default receive buffer (about 200 KiB: some 90 datagrams of 25 var-binds) while the loop is
# busy, and every drop costs a timeout. SO_RCVBUF is capped at net.core.rmem_max (often that
# same 200 KiB); SO_RCVBUFFORCE is not, but needs CAP_NET_ADMIN, which a root collector has.
RECEIVE_BUFFER = 4 << 20
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux asm-generic/socket.h
# ICMP errors on an unconnected socket (port or host unreachable) are only reported with these
# on, through the socket's error queue, which names the datagram's destination (ip(7), ipv6(7)).
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
_EXTENDED_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err, linux/errqueue.h
# How often one datagram is offered to the kernel when sendto() fails. With IP_RECVERR an ICMP
# error is also left pending on the socket: __udp4_lib_err (net/ipv4/udp.c) and __udp6_lib_err
# (net/ipv6/udp.c) set sk->sk_err after queueing it, connected or not
# (https://github.com/torvalds/linux/blob/master/net/ipv4/udp.c). The next send on the socket,
# to any address, returns it instead of sending: sock_alloc_send_pskb() starts with
# sock_error(), which also clears it (net/core/sock.c, include/net/sock.h). Reading the error
# queue to its end clears it too (sock_dequeue_err_skb, net/core/skbuff.c; commit 38b257938ac6
# "sock: reset sk_err when the error queue is empty"). So a failed send is not necessarily
# this datagram's fault: each try consumes one pending error, and only an ICMP error arriving
# between two tries can fail the next. An error of the datagram's own (no route) fails every
# try. Measured on Linux 6.18, IPv4 and IPv6: every sendto() right after one to a closed port
# on the loopback failed with ECONNREFUSED and sent nothing (200 of 200).
SEND_TRIES = 4

Address = tuple[str, int]


def client_socket(family: int = socket.AF_INET, icmp_errors: bool = False) -> socket.socket:
    """A non-blocking UDP socket (IPv4 or IPv6) on an ephemeral port, large receive buffer."""
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if icmp_errors and family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
        elif icmp_errors:
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(("::", 0))
        else:
            sock.bind(("0.0.0.0", 0))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class RequestTimeout(Exception):
    """No valid answer in all tries."""


class Unreachable(Exception):
    """An ICMP error came back for a datagram to this agent (ECONNREFUSED: nothing listens)."""

    def __init__(self, code: int) -> None:
        super().__init__(os.strerror(code))
        self.errno = code


class Garbage(Exception):
    """The agent answered with a datagram that is not a valid Response."""

    # Raised at once when the bad datagram still shows this request's id, else when all tries
    # ran out and the agent sent something undecodable since the request started.


@dataclass(eq=False)
class _Pending:
    future: asyncio.Future[ber.Response]
    address: Address
    community: bytes
    data: bytes
    timeout: float
    tries_left: int
    max_var_binds: int  # the most var-binds an answer may hold (RFC 3416 section 4.2)
    started: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None


class V2cTransport(asyncio.DatagramProtocol):
    """One UDP socket (one address family) and the SNMPv2c requests in flight on it."""

    def __init__(self, family: int = socket.AF_INET) -> None:
        self.family = family
        self._transport: asyncio.DatagramTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._pending: dict[int, _Pending] = {}
        self._agents: dict[Address, int] = {}  # address -> requests in flight to it
        # address -> last datagram from it without even a readable header; only for addresses
        # with requests in flight (the entry goes with the last of them)
        self.garbage_at: dict[Address, float] = {}
        self.sent = 0  # datagrams sent, resends included
        self.received = 0  # datagrams received, all of them
        self.dropped = 0  # from an address no request is in flight to: not read at all
        self.stray = 0  # no request waits for its request-id and community: header read only
        self.garbage = 0  # undecodable, from an address a request is in flight to
        self.var_binds = 0  # var-binds in the Responses matched to a request

    async def open(self) -> None:
        """Bind the socket (once) in the running loop."""
        if self._transport is not None:
            return
        loop = asyncio.get_running_loop()
        sock = client_socket(self.family, icmp_errors=True)
        try:
            await loop.create_datagram_endpoint(lambda: self, sock=sock)
        except OSError:
            sock.close()
            raise
        self._loop, self._sock = loop, sock

    def connection_made(self, transport: Any) -> None:
        """asyncio: the socket is ready."""
        self._transport = transport

    def _request_id(self) -> int:
        while True:  # request-id is an Integer32 (RFC 3416 section 3); never 0, never in use
            request_id = secrets.randbits(31)
            if request_id and request_id not in self._pending:
                return request_id

    async def request(
        self,
        address: Address,
        community: bytes,
        pdu_type: int,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
        timeout: float,
        retries: int,
    ) -> ber.Response:
        """Send one request, resending on timeout; the Response, RequestTimeout or Garbage."""
        if self._transport is None or self._loop is None:
            raise RuntimeError("V2cTransport is not open")
        request_id = self._request_id()
        data = ber.encode_request(pdu_type, community, request_id, oids, 0, max_repetitions)
        most = len(oids) * max_repetitions if pdu_type == ber.GETBULK else len(oids)
        p = _Pending(self._loop.create_future(), address, community, data, timeout, retries, most)
        self._pending[request_id] = p
        self._agents[address] = self._agents.get(address, 0) + 1
        try:
            self._send(request_id, p)
            return await p.future
        finally:
            if p.timer is not None:
                p.timer.cancel()
            if self._pending.get(request_id) is p:
                del self._pending[request_id]
            left = self._agents.get(address, 1) - 1
            if left > 0:
                self._agents[address] = left
            else:
                self._agents.pop(address, None)
                self.garbage_at.pop(address, None)

    def _send(self, request_id: int, p: _Pending) -> None:
        assert self._transport is not None and self._loop is not None and self._sock is not None
        unexplained = 0  # failed tries with no ICMP error queued
        for _ in range(SEND_TRIES):
            try:
                # The socket itself, not self._transport.sendto(): asyncio's datagram transport
                # hands a failed send to error_received() and drops the datagram
                # (_SelectorDatagramTransport.sendto and _sendto_ready in
                # https://github.com/python/cpython/blob/3.11/Lib/asyncio/selector_events.py),
                # so a good agent's request would wait out a timeout for another's ICMP error.
                self._sock.sendto(p.data, p.address)
            except (BlockingIOError, InterruptedError):
                # Send buffer full: asyncio keeps the datagram and sends it when there is room
                # (a pending error then still drops it there; the timeout resends it).
                self._transport.sendto(p.data, p.address)
            except OSError as exc:
                # Most likely the error of an earlier datagram to another agent, left pending
                # (see SEND_TRIES): read the error queue, which fails the requests it names
                # (this one among them, maybe) and clears what is still pending
                # (sock_dequeue_err_skb, net/core/skbuff.c), then try again.
                if not self._read_errors():
                    unexplained += 1
                if unexplained == 2 and not p.future.done():
                    # Twice with no ICMP error queued: the datagram's own error (no route to
                    # the agent's network, a broadcast address), which fails every try. Once
                    # may be an error left pending whose queue entry found no room.
                    p.future.set_exception(exc)  # V2cClient names it ("error")
                if p.future.done():
                    return
                continue
            self.sent += 1
            break
        # Sent, or ICMP errors kept arriving faster than the tries (a flood of them): then the
        # timeout sends it again, or ends the request.
        p.timer = self._loop.call_later(p.timeout, self._expire, request_id, p)

    def _expire(self, request_id: int, p: _Pending) -> None:
        if p.future.done():
            return
        if p.tries_left > 0:
            p.tries_left -= 1
            self._send(request_id, p)  # same request-id: a late first answer still counts
            return
        garbage = self.garbage_at.get(p.address, 0.0) >= p.started
        p.future.set_exception(Garbage() if garbage else RequestTimeout())

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """asyncio: match an answer to its request; never raises (see the module's doc)."""
        self.received += 1
        address = (addr[0], addr[1])
        if address not in self._agents:
            self.dropped += 1  # not from an agent we wait for: not one byte of it is read
            return
        head = ber.header_of(data)
        if head is None:
            self.garbage += 1
            self.garbage_at[address] = time.monotonic()  # decides Garbage over a timeout
            return
        community, request_id = head
        p = self._pending.get(request_id)
        if p is None or p.address != address or p.community != community or p.future.done():
            self.stray += 1  # late, duplicate or not ours (RFC 3412 section 7.2.10 drops these)
            return
        try:
            response = ber.decode_response(data, p.max_var_binds)
        except ValueError:  # BerError; any other ValueError would be a codec bug: garbage too
            self.garbage += 1
            p.future.set_exception(Garbage())
            return
        self.var_binds += len(response.var_binds)
        p.future.set_result(response)

    def error_received(self, exc: Exception) -> None:
        """asyncio: ICMP errors arrived; fail the requests to the addresses they name, at once."""
        # Called when a read found an error pending (the datagrams queued behind it stay
        # queued: the next read gets them), or when a datagram asyncio had buffered could not
        # be sent (it is lost; the timeout resends it). Either way the error queue says which
        # agents refused.
        self._read_errors()

    def _read_errors(self) -> int:
        """Read the socket's error queue to the end; fail the requests to each address named."""
        read = 0  # errors read from the queue
        if self._sock is None:
            return read
        while True:
            try:
                _, ancillary, _, address = self._sock.recvmsg(1, 512, socket.MSG_ERRQUEUE)
            except OSError:  # drained (EAGAIN), or no error queue at all
                return read
            read += 1
            if not address:  # a local error names no destination: timeouts decide
                continue
            code = next(
                (_EXTENDED_ERR.unpack_from(data)[0] for _, _, data in ancillary if len(data) >= 16),
                errno.EHOSTUNREACH,
            )
            for p in self._pending.values():
                if p.address == (address[0], address[1]) and not p.future.done():
                    p.future.set_exception(Unreachable(code))

    def close(self) -> None:
        """Close the socket; requests in flight fail with RequestTimeout."""
        for p in list(self._pending.values()):
            if not p.future.done():
                p.future.set_exception(RequestTimeout())
        self._pending.clear()
        if self._transport is not None:
            self._transport.close()
            self._transport = None


class V2cClient:
    """SNMPv2c GET and GETBULK: one V2cTransport per address family, failures as SnmpError."""

    def __init__(self) -> None:
        self._transports: dict[int, V2cTransport] = {}  # address family -> socket

    async def _transport(self, family: int) -> V2cTransport:
        if family not in self._transports:
            transport = V2cTransport(family)
            await transport.open()
            if family not in self._transports:  # another poll may have opened one meanwhile
                self._transports[family] = transport
            else:
                transport.close()
        return self._transports[family]

    async def request(
        self,
        target: Target,
        family: int,
        address: tuple[str, int],
        kind: str,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
    ) -> Answer:
        """One GET or GETBULK (non-repeaters 0): the agent's answer, or SnmpError."""
        transport = await self._transport(family)
        assert target.auth.community is not None
        pdu_type = ber.GETBULK if kind == "bulk" else ber.GET
        what = f"{kind} to {target.label}"
        try:
            response = await transport.request(
                address,
                target.auth.community.encode(),
                pdu_type,
                oids,
                max_repetitions,
                target.timeout,
                target.retries,
            )
        except Garbage:
            raise SnmpError("garbage", target.endpoint, f"{what}: undecodable response") from None
        except RequestTimeout:
            raise timeout_error(target, what) from None
        except Unreachable as exc:
            if exc.errno == errno.ECONNREFUSED:  # ICMP port unreachable: the agent is not there
                raise SnmpError(
                    "refused", target.endpoint, f"{what}: nothing listens on that UDP port"
                ) from None
            raise SnmpError("error", target.endpoint, f"{what}: {exc}") from None
        except OSError as exc:  # e.g. no route to the host's network
            raise SnmpError("error", target.endpoint, f"{what}: {exc.strerror}") from None
        return response.error_status, response.error_index, response.var_binds

    def counts(self) -> dict[str, int]:
        """Datagrams sent, received, dropped unread, stray and garbage; var-binds received."""
        # A copy: a scrape reads this from another thread while the loop may add a socket.
        ts = list(self._transports.values())
        return {
            "sent": sum(t.sent for t in ts),
            "received": sum(t.received for t in ts),
            "var_binds": sum(t.var_binds for t in ts),
            "dropped": sum(t.dropped for t in ts),
            "stray": sum(t.stray for t in ts),
            "garbage": sum(t.garbage for t in ts),
        }

    def close(self) -> None:
        """Close the sockets; requests in flight fail."""
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
