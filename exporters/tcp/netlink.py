"""sock_diag netlink: the TCP socket dump and the destroy groups, built and parsed with struct.

Why not pyroute2's DiagSocket: docs/exporters/tcp.md. The parsers here are pure functions over
the bytes the kernel sends (include/uapi/linux/netlink.h, sock_diag.h, inet_diag.h); the
socket wrappers only send, receive and bound.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4
# enum sknetlink_groups (include/uapi/linux/sock_diag.h), Linux 4.10
SKNLGRP_INET_TCP_DESTROY = 1
SKNLGRP_INET6_TCP_DESTROY = 3
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1

# enum inet_diag attributes (include/uapi/linux/inet_diag.h)
INET_DIAG_MEMINFO = 1
INET_DIAG_INFO = 2
INET_DIAG_CONG = 4
INET_DIAG_SKMEMINFO = 7
INET_DIAG_CGROUP_ID = 21
# idiag_ext asks for attribute N with bit N-1 (u8: attributes 1..8 only); the cgroup id
# (Linux 5.7) comes unasked.
EXT = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1))

# TCP states (include/net/tcp_states.h)
TCP_ESTABLISHED = 1
TCP_TIME_WAIT = 6
TCP_LISTEN = 10
TCP_NEW_SYN_RECV = 12
# Every state with a full socket (and tcp_info): all but TIME_WAIT and NEW_SYN_RECV, which
# are mini sockets. LISTEN is asked too, for the service ports.
STATES = ((1 << 13) - 1) & ~(1 << TCP_TIME_WAIT) & ~(1 << TCP_NEW_SYN_RECV) & ~1

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_NLATTR = struct.Struct("=HH")
# struct inet_diag_req_v2: family, protocol, ext, pad, states, then struct inet_diag_sockid
_REQ = struct.Struct("=BBBxI")
_SOCKID = struct.Struct(">HH16s16s")  # sport, dport, src, dst (network order)
_SOCKID_TAIL = struct.Struct("=III")  # if, cookie[0], cookie[1]
# struct inet_diag_msg: family, state, timer, retrans, sockid, expires, rqueue, wqueue, uid, inode
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_TAIL = struct.Struct("=IIIII")
MSG_SIZE = _MSG_HEAD.size + _SOCKID.size + _SOCKID_TAIL.size + _MSG_TAIL.size  # 72
MAX_ATTRS = 64  # more attributes than inet_diag defines: the rest are ignored


class Malformed(ValueError):
    """A netlink message or attribute that does not parse."""


@dataclass(slots=True)
class DiagSocket:
    """One socket of a sock_diag answer: its identity and its raw attributes."""

    family: int
    state: int
    sport: int
    dport: int
    src: str
    dst: str
    cookie: int
    uid: int
    inode: int
    attrs: dict[int, bytes] = field(default_factory=dict)


def dump_request(family: int, seq: int, states: int = STATES, ext: int = EXT) -> bytes:
    """The SOCK_DIAG_BY_FAMILY dump request for TCP sockets of one address family."""
    body = _REQ.pack(family, socket.IPPROTO_TCP, ext, states)
    body += _SOCKID.pack(0, 0, bytes(16), bytes(16)) + _SOCKID_TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF)
    hdr = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY,
                         NLM_F_REQUEST | NLM_F_DUMP, seq, 0)  # fmt: skip
    return hdr + body


def split_messages(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each netlink message in buf; Malformed on a bad length."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(buf):
        length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, offset)
        if length < _NLMSGHDR.size or offset + length > len(buf):
            raise Malformed(f"netlink message length {length}")
        yield mtype, buf[offset + _NLMSGHDR.size : offset + length]
        offset += (length + 3) & ~3


def parse_attrs(buf: bytes) -> dict[int, bytes]:
    """{type: payload} of the netlink attributes in buf (first of each type; bounded)."""
    out: dict[int, bytes] = {}
    offset = 0
    for _ in range(MAX_ATTRS):
        if offset + _NLATTR.size > len(buf):
            break
        length, atype = _NLATTR.unpack_from(buf, offset)
        if length < _NLATTR.size or offset + length > len(buf):
            raise Malformed(f"attribute length {length}")
        out.setdefault(atype & 0x3FFF, buf[offset + _NLATTR.size : offset + length])
        offset += (length + 3) & ~3
    return out


_V4_MAPPED = bytes(10) + b"\xff\xff"


def _address(family: int, raw: bytes) -> str:
    # inet_ntop, not ipaddress: 10,000 sockets a sample (bench/tcp_sockets.py)
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if raw[:12] == _V4_MAPPED:  # a dual-stack socket's v4 peer is the v4 peer it is
        return socket.inet_ntop(socket.AF_INET, raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw)


def parse_diag_msg(payload: bytes) -> DiagSocket:
    """One struct inet_diag_msg and its attributes; Malformed when short or not inet."""
    if len(payload) < MSG_SIZE:
        raise Malformed(f"inet_diag_msg of {len(payload)} bytes")
    family, state, _timer, _retrans = _MSG_HEAD.unpack_from(payload, 0)
    if family not in (socket.AF_INET, socket.AF_INET6):
        raise Malformed(f"address family {family}")
    o = _MSG_HEAD.size
    sport, dport, src, dst = _SOCKID.unpack_from(payload, o)
    o += _SOCKID.size
    _ifindex, c0, c1 = _SOCKID_TAIL.unpack_from(payload, o)
    o += _SOCKID_TAIL.size
    _expires, _rq, _wq, uid, inode = _MSG_TAIL.unpack_from(payload, o)
    return DiagSocket(
        family=family,
        state=state,
        sport=sport,
        dport=dport,
        src=_address(family, src),
        dst=_address(family, dst),
        cookie=(c1 << 32) | c0,
        uid=uid,
        inode=inode,
        attrs=parse_attrs(payload[MSG_SIZE:]),
    )


def parse_cgroup_id(data: bytes) -> int | None:
    """INET_DIAG_CGROUP_ID's u64, or None when it is not 8 bytes."""
    return struct.unpack("=Q", data)[0] if len(data) == 8 else None


def parse_cong(data: bytes) -> str:
    """INET_DIAG_CONG's NUL-terminated algorithm name (printable ASCII, at most 16 bytes)."""
    name = data.split(b"\0", 1)[0]
    ok = 0 < len(name) <= 16 and all(c in _CONG_CHARS for c in name)
    return name.decode("ascii") if ok else ""


_CONG_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


class DumpError(OSError):
    """The kernel answered the dump with an error."""


def dump(family: int, recv_bytes: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of every message of one TCP dump of this network namespace."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                       NETLINK_SOCK_DIAG) as s:  # fmt: skip
        s.bind((0, 0))
        s.send(dump_request(family, seq=1))
        while True:
            buf = s.recv(recv_bytes)
            if not buf:
                return
            for mtype, payload in split_messages(buf):
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0] if len(payload) >= 4 else 0
                    if code:
                        raise DumpError(code, os.strerror(code))
                    continue
                yield mtype, payload


class DestroyListener:
    """The sock_diag destroy groups for TCP over IPv4 and IPv6, non-blocking."""

    def __init__(self, rcvbuf: int = 8 << 20) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_SOCK_DIAG)  # fmt: skip
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.bind((0, 0))
            for group in (SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY):
                # any user may join: the family is created with NL_CFG_F_NONROOT_RECV
                # (diag_net_init(), net/core/sock_diag.c); sock_diag_bind() only loads the
                # diag module. Measured as uid 65534 with no capability on 6.18.
                self.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def drain(self, max_bytes: int, recv_bytes: int = 1 << 20) -> tuple[list[bytes], bool]:
        """The payloads waiting (at most about max_bytes), and whether the socket overran."""
        out: list[bytes] = []
        got = 0
        overrun = False
        while got < max_bytes:
            try:
                buf = self.sock.recv(recv_bytes)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # messages were dropped; the socket goes on
                    overrun = True
                    continue
                raise
            got += len(buf)
            for mtype, payload in split_messages(buf):
                if mtype == SOCK_DIAG_BY_FAMILY:
                    out.append(payload)
        return out, overrun

    def close(self) -> None:
        """Leave the groups."""
        self.sock.close()
