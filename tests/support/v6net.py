"""Real IPv6 TCP for the SciTags tests of the tcp exporter: two network namespaces joined by a
veth with IPv6 on both ends (every name holds the caller's prefix), small sender and sink
programs, and a tc egress marker standing in for scitags flowd (flowmark.bpf.c)."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.realparts import Samples

ROOT = Path(__file__).resolve().parents[2]
MARKER = Path(__file__).resolve().parent / "flowmark.bpf.c"

# IPV6_FLOWLABEL_MGR (32) with struct in6_flowlabel_req (include/uapi/linux/in6.h): dst,
# label (network order), action IPV6_FL_A_GET, share IPV6_FL_S_EXCL, flags IPV6_FL_F_CREATE;
# then IPV6_FLOWINFO_SEND (33): connect() takes the label from sin6_flowinfo
# (tcp_v6_connect(), which checks the lease: fl6_sock_lookup()). Label 0: no lease, a plain
# socket (its packets carry the kernel's automatic label, net.ipv6.auto_flowlabels).
SENDER = """
import socket, struct, sys, time
dst, port, label, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = socket.socket(socket.AF_INET6)
if label:
    req = socket.inet_pton(socket.AF_INET6, dst) + struct.pack("!I", label)
    req += struct.pack("=BBHHHI", 0, 1, 1, 0, 0, 0)
    c.setsockopt(socket.IPPROTO_IPV6, 32, req)
    c.setsockopt(socket.IPPROTO_IPV6, 33, 1)
c.connect((dst, port, label, 0))
c.sendall(bytes(size))
print("sent", flush=True)
time.sleep(120)
"""

SINK = """
import socket, sys
s = socket.socket(socket.AF_INET6)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    while c.recv(1 << 20):
        pass
    c.close()
"""

# n connections to dst:port, one byte each, held open until a line on stdin, then closed
HOLDER = """
import socket, sys
dst, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conns = [socket.create_connection((dst, port), timeout=30) for _ in range(n)]
for c in conns:
    c.sendall(b"x")
print("ready", len(conns), flush=True)
sys.stdin.readline()
for c in conns:
    c.close()
print("closed", flush=True)
"""


@dataclass
class V6Net:
    """Two namespaces joined by a veth, IPv6 on both ends."""

    ns_a: str
    ns_b: str
    if_a: str
    if_b: str
    addr_a: str = "fd00:31::1"
    addr_b: str = "fd00:31::2"


def ip(*args: str) -> None:
    """Run `ip ARGS` (raises with its stderr on failure)."""
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def v6_net(prefix: str) -> Iterator[V6Net]:
    """Fresh namespaces and a veth (names: prefix and a tag, at most 15 characters for the
    interfaces) with IPv6 (no DAD wait); removed after, with every process left inside."""
    tag = f"{os.getpid() % 10000}"
    net = V6Net(f"{prefix}A{tag}", f"{prefix}B{tag}", f"{prefix}{tag}a", f"{prefix}{tag}b")
    try:
        ip("netns", "add", net.ns_a)
        ip("netns", "add", net.ns_b)
        ip("-n", net.ns_a, "link", "add", net.if_a, "type", "veth", "peer", "name", net.if_b,
           "netns", net.ns_b)  # fmt: skip
        for ns, ifname, addr in (
            (net.ns_a, net.if_a, net.addr_a),
            (net.ns_b, net.if_b, net.addr_b),
        ):
            ip("-n", ns, "-6", "addr", "add", f"{addr}/64", "dev", ifname, "nodad")
            ip("-n", ns, "link", "set", ifname, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield net
    finally:
        for ns in (net.ns_a, net.ns_b):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def popen(ns: str, *cmd: str) -> subprocess.Popen[str]:
    """Start a command inside a namespace, stdout and stderr to one pipe."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def flow(s: Samples, name: str, **labels: str) -> float:
    """The sum of one family's series whose labels include `labels`."""
    return sum(v for (n, lab), v in s.items()
               if n == name and labels.items() <= dict(lab).items())  # fmt: skip


def mark_egress(net: V6Net, label: int, tmp: Path, dport: int | None = None) -> None:
    """Write `label` into every IPv6 TCP packet (to `dport` only, if given) leaving namespace
    a's veth, at tc egress (a clsact direct-action classifier, as flowd attaches its own):
    flowmark.bpf.c, compiled here with the label, loaded by iproute2's tc."""
    obj = tmp / "flowmark.bpf.o"
    inc = f"/usr/include/{platform.machine()}-linux-gnu"
    defs = [f"-DMARK_LABEL={label:#x}"] + ([f"-DMARK_DPORT={dport}"] if dport else [])
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", *defs, f"-I{inc}", "-Wall",
                    "-Werror", "-c", str(MARKER), "-o", str(obj)],
                   check=True, capture_output=True)  # fmt: skip
    tc = ["ip", "netns", "exec", net.ns_a, "tc"]
    subprocess.run([*tc, "qdisc", "add", "dev", net.if_a, "clsact"], check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run([*tc, "filter", "add", "dev", net.if_a, "egress", "bpf", "direct-action",
                    "obj", str(obj), "sec", "tc"], check=True, capture_output=True)  # fmt: skip


def watch_wire(net: V6Net, port: int) -> subprocess.Popen[str]:
    """tcpdump on namespace b's veth, for the first 3 packets a sends to `port`; returns once
    its filter is attached ("listening on ..." read)."""
    dump = popen(net.ns_b, "tcpdump", "-i", net.if_b, "-nn", "-v", "-l", "-c", "3",
                 f"ip6 and tcp and src host {net.addr_a} and dst port {port}")  # fmt: skip
    assert dump.stdout is not None
    first = dump.stdout.readline()
    assert "listening" in first, first
    return dump


def wire_labels(text: str) -> set[int]:
    """The flow labels of tcpdump -v's IPv6 lines."""
    return {int(v, 16) for v in re.findall(r"flowlabel (0x[0-9a-f]+)", text)}


def send(net: V6Net, port: int, label: int, size: int) -> subprocess.Popen[str]:
    """SENDER in namespace a: `size` bytes to b's `port` on a socket sending with `label` (0:
    none of its own); returns once all of them are written (the socket stays open)."""
    sender = popen(net.ns_a, sys.executable, "-c", SENDER, net.addr_b, str(port), str(label),
                   str(size))  # fmt: skip
    assert sender.stdout is not None
    said = sender.stdout.readline().strip()
    assert said == "sent", said + sender.stdout.read(4000)
    return sender


def sink(net: V6Net, port: int) -> subprocess.Popen[str]:
    """SINK in namespace b on `port`, ready."""
    proc = popen(net.ns_b, sys.executable, "-c", SINK, net.addr_b, str(port))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc
