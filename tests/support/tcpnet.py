"""Real TCP traffic for the tcp exporter's tests and benches: two network namespaces joined by
a veth pair (every name holds the caller's tag), over IPv4 with a range of peer addresses
(tcp_net) or over IPv6 for SciTags (v6_net: small sender programs and a tc egress marker
standing in for scitags flowd, flowmark.bpf.c), and small programs run inside a namespace
(`python -m tests.support.tcpnet <command>`): a sink server, a churn of short connections, and
reads of one socket by the exporter's parser and by `ss` at the same moment.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.realparts import Samples

ROOT = Path(__file__).resolve().parents[2]
PEERS = "10.231.0.0/16"  # routed to namespace B, where every address of it is local
MARKER = Path(__file__).resolve().parent / "flowmark.bpf.c"


def popen(ns: str, *cmd: str, **kw: Any) -> subprocess.Popen[str]:
    """Start a command inside a namespace, the repository on its PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, env=env, **kw)


def piped(ns: str, *cmd: str) -> subprocess.Popen[str]:
    """Start a command inside a namespace, stdout and stderr to one pipe."""
    return popen(ns, *cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def ip(*args: str) -> None:
    """Run `ip ARGS` (raises with its stderr on failure)."""
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class TcpNet:
    """Namespace a (the exporter's side) and b (the far side), joined by a veth."""

    ns_a: str
    ns_b: str
    if_a: str
    if_b: str
    addr_a: str = "169.254.231.1"
    addr_b: str = "169.254.231.2"

    def popen(self, ns: str, *cmd: str, **kw: Any) -> subprocess.Popen[str]:
        """Start a command inside a namespace."""
        return popen(ns, *cmd, **kw)

    def run(self, ns: str, *cmd: str, timeout: float = 120) -> str:
        """Run a command inside a namespace; its stdout (raises on failure, with stderr)."""
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        r = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                           timeout=timeout, env=env)  # fmt: skip
        if r.returncode:
            raise RuntimeError(f"{cmd} exited {r.returncode}: {r.stderr[-2000:]}")
        return r.stdout

    def py(self, ns: str, *args: str, timeout: float = 120) -> str:
        """`python -m tests.support.tcpnet ARGS` inside a namespace."""
        return self.run(ns, sys.executable, "-m", "tests.support.tcpnet", *args, timeout=timeout)


@contextlib.contextmanager
def namespace(name: str) -> Iterator[str]:
    """A fresh network namespace called name; deleted after, with every process left inside."""
    try:
        ip("netns", "add", name)
        yield name
    finally:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def root_link_up(ns: str, if_root: str, if_ns: str, addr_root: str, addr_ns: str) -> None:
    """A link from the root namespace (if_root) into ns (if_ns) made IPv4 only, addr_root and
    addr_ns its /30 ends, both ends and ns's lo up."""
    subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{if_root}.disable_ipv6=1"], check=False)
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                    f"net.ipv6.conf.{if_ns}.disable_ipv6=1"], check=False)  # fmt: skip
    ip("addr", "add", f"{addr_root}/30", "dev", if_root)
    ip("-n", ns, "addr", "add", f"{addr_ns}/30", "dev", if_ns)
    ip("link", "set", if_root, "up")
    ip("-n", ns, "link", "set", if_ns, "up")
    ip("-n", ns, "link", "set", "lo", "up")


@contextlib.contextmanager
def veth_pair(net: TcpNet, address: Callable[[str, str, str], None]) -> Iterator[TcpNet]:
    """net's two namespaces and the veth between them, each end given its address by
    address(ns, ifname, addr) and up, lo up; removed after, with every process left inside."""
    with namespace(net.ns_a), namespace(net.ns_b):
        ip("-n", net.ns_a, "link", "add", net.if_a, "type", "veth", "peer", "name", net.if_b,
           "netns", net.ns_b)  # fmt: skip
        for ns, ifname, addr in (
            (net.ns_a, net.if_a, net.addr_a),
            (net.ns_b, net.if_b, net.addr_b),
        ):
            address(ns, ifname, addr)
            ip("-n", ns, "link", "set", ifname, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield net


@contextlib.contextmanager
def tcp_net() -> Iterator[TcpNet]:
    """Fresh namespaces and a veth over IPv4 (names with `tcp`); b answers every address of
    PEERS. Removed afterwards."""
    tag = f"{os.getpid() % 10000}{int(time.time() * 1000) % 1000}"
    net = TcpNet(f"wbtcpA{tag}", f"wbtcpB{tag}", f"tcpa{tag}", f"tcpb{tag}")

    def v4(ns: str, ifname: str, addr: str) -> None:
        net.run(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1")
        ip("-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)

    with veth_pair(net, v4):
        # many peers without many addresses: b takes all of PEERS as local (a local route)
        ip("-n", net.ns_b, "route", "add", "local", PEERS, "dev", "lo")
        ip("-n", net.ns_a, "route", "add", PEERS, "via", net.addr_b)
        yield net


@contextlib.contextmanager
def v6_net(prefix: str) -> Iterator[TcpNet]:
    """Fresh namespaces and a veth (names: prefix and a tag, at most 15 characters for the
    interfaces) with IPv6 (no DAD wait); removed after, with every process left inside."""
    tag = f"{os.getpid() % 10000}"
    net = TcpNet(f"{prefix}A{tag}", f"{prefix}B{tag}", f"{prefix}{tag}a", f"{prefix}{tag}b",
                 "fd00:31::1", "fd00:31::2")  # fmt: skip

    def v6(ns: str, ifname: str, addr: str) -> None:
        ip("-n", ns, "-6", "addr", "add", f"{addr}/64", "dev", ifname, "nodad")

    with veth_pair(net, v6):
        yield net


# --- SciTags over IPv6 (v6_net): senders, the tc egress marker, the wire --------------------

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


def flow(s: Samples, name: str, **labels: str) -> float:
    """The sum of one family's series whose labels include `labels`."""
    return sum(v for (n, lab), v in s.items()
               if n == name and labels.items() <= dict(lab).items())  # fmt: skip


def mark_egress(net: TcpNet, label: int, tmp: Path, dport: int | None = None) -> None:
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


def watch_wire(net: TcpNet, port: int) -> subprocess.Popen[str]:
    """tcpdump on namespace b's veth, for the first 3 packets a sends to `port`; returns once
    its filter is attached ("listening on ..." read)."""
    dump = piped(net.ns_b, "tcpdump", "-i", net.if_b, "-nn", "-v", "-l", "-c", "3",
                 f"ip6 and tcp and src host {net.addr_a} and dst port {port}")  # fmt: skip
    assert dump.stdout is not None
    first = dump.stdout.readline()
    assert "listening" in first, first
    return dump


def wire_labels(text: str) -> set[int]:
    """The flow labels of tcpdump -v's IPv6 lines."""
    return {int(v, 16) for v in re.findall(r"flowlabel (0x[0-9a-f]+)", text)}


def send(net: TcpNet, port: int, label: int, size: int) -> subprocess.Popen[str]:
    """SENDER in namespace a: `size` bytes to b's `port` on a socket sending with `label` (0:
    none of its own); returns once all of them are written (the socket stays open)."""
    sender = piped(net.ns_a, sys.executable, "-c", SENDER, net.addr_b, str(port), str(label),
                   str(size))  # fmt: skip
    assert sender.stdout is not None
    said = sender.stdout.readline().strip()
    assert said == "sent", said + sender.stdout.read(4000)
    return sender


def start_sink(net: TcpNet, port: int) -> subprocess.Popen[str]:
    """The sink program (below) in namespace b on its address and `port`, ready."""
    proc = piped(net.ns_b, sys.executable, "-m", "tests.support.tcpnet", "sink", str(port),
                 net.addr_b)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def peer(i: int) -> str:
    """The i-th address of PEERS (10.231.0.1 ...)."""
    return f"10.231.{(i + 1) >> 8 & 255}.{(i + 1) & 255}"


# --- programs run inside a namespace ------------------------------------------------------


def _raise_nofile(n: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(n, soft), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def sink(port: int, host: str = "0.0.0.0") -> None:
    """Accept on host:port (IPv4 or IPv6) and read every connection to its end."""
    import selectors

    _raise_nofile(1 << 16)
    lst = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((host, port))
    lst.listen(4096)
    lst.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for k, _ in sel.select():
            s = k.fileobj
            assert isinstance(s, socket.socket)
            if s is lst:
                with contextlib.suppress(BlockingIOError):
                    c, _ = lst.accept()
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(1 << 20)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()


def churn(host: str, port: int, count: int, size: int, parallel: int) -> None:
    """`count` connections, each sends `size` bytes and closes; at most `parallel` at once."""
    payload = b"\0" * size
    done = 0
    while done < count:
        batch = []
        for _ in range(min(parallel, count - done)):
            c = socket.create_connection((host, port), timeout=30)
            batch.append(c)
        for c in batch:
            c.sendall(payload)
            c.shutdown(socket.SHUT_WR)
        for c in batch:
            c.settimeout(30)
            while c.recv(4096):  # wait for the peer's FIN: everything we sent was read
                pass
            c.close()
        done += len(batch)
    print(json.dumps({"connections": done, "bytes": done * size}), flush=True)


def hold(peers: int, port: int, seconds: float) -> None:
    """Open one connection to each of `peers` peer addresses and keep them open."""
    _raise_nofile(peers + 1024)
    conns = [socket.create_connection((peer(i), port), timeout=30) for i in range(peers)]
    print("ready", len(conns), flush=True)
    time.sleep(seconds)


def _ours(cookie: int | None, dport: int) -> dict[str, object] | None:
    from exporters.tcp import netlink
    from exporters.tcp.tcpinfo import parse_skmeminfo, parse_tcp_info

    for _t, payload in netlink.dump(socket.AF_INET):
        d = netlink.parse_diag_msg(payload)
        if d.state != netlink.TCP_ESTABLISHED or d.dport != dport:
            continue
        if cookie is not None and d.cookie != cookie:
            continue
        info = parse_tcp_info(d.attrs[netlink.INET_DIAG_INFO])
        if cookie is None and info.get("bytes_acked", 0) + info.get("bytes_received", 0) < 1 << 20:
            continue  # iperf3's control connection, or a data stream not started yet
        mem = parse_skmeminfo(d.attrs[netlink.INET_DIAG_SKMEMINFO])
        return {"cookie": d.cookie, "sport": d.sport, "info": info, "mem": mem}
    return None


def ss_record(text: str, cookie: int | None) -> str:
    """ss's lines for one socket (its first line and the indented ones after it), joined."""
    records: list[str] = []
    for line in text.splitlines():
        if line[:1].isspace() and records:
            records[-1] += " " + line.strip()
        else:
            records.append(line.strip())
    want = f"sk:{cookie:x} " if cookie is not None else None
    return next((" ".join(r.split()) for r in records if want and want in r + " "), "")


def sandwich(dport: int, timeout: float) -> None:
    """Ours, then ss, then ours again, on the same socket (a data connection to dport)."""
    deadline = time.monotonic() + timeout
    first = None
    while first is None and time.monotonic() < deadline:
        first = _ours(None, dport)
        if first is None:
            time.sleep(0.05)
    if first is None:
        raise SystemExit("no data connection seen")
    cookie = int(first["cookie"])  # type: ignore[call-overload]
    # A sandwich proves something only while the flow moves: take it again while the flow did
    # not move between our two reads (a loaded machine can stall it that long), until the
    # deadline; every attempt is a valid sandwich, none is chosen by anything but "it moved".
    while True:
        first = _ours(cookie, dport)
        ss = subprocess.run(["ss", "-tinmHe", "state", "established", f"( dport = :{dport} )"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
        second = _ours(cookie, dport)
        if first is None or second is None or time.monotonic() >= deadline:
            break
        a, b = first["info"], second["info"]
        assert isinstance(a, dict) and isinstance(b, dict)
        moved = any(b.get(k, 0) > a.get(k, 0) for k in ("bytes_acked", "bytes_received"))
        if moved:
            break
        time.sleep(0.01)
    print(json.dumps({"first": first, "ss": ss_record(ss, cookie), "second": second}))


def idle_pair(host: str, port: int, size: int) -> None:
    """Send `size` bytes to a sink, wait until all is acked and the socket idle, then read
    it with ours and with ss (nothing moves between the reads)."""
    c = socket.create_connection((host, port), timeout=30)
    c.sendall(b"\0" * size)
    cookie = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = _ours(cookie, port)
        if got is not None:
            cookie = int(got["cookie"])  # type: ignore[call-overload]
            info = got["info"]
            assert isinstance(info, dict)
            if info["unacked"] == 0 and info.get("notsent_bytes", 0) == 0:
                break
        time.sleep(0.05)
    time.sleep(0.3)  # delayed ACKs of the far side have gone; nothing is in flight
    first = _ours(cookie, port)
    ss = subprocess.run(["ss", "-tinmHe", "state", "established", f"( dport = :{port} )"],
                        capture_output=True, text=True, check=True).stdout  # fmt: skip
    second = _ours(cookie, port)
    print(json.dumps({"first": first, "ss": ss_record(ss, cookie), "second": second}))
    c.close()


if __name__ == "__main__":
    cmd, *argv = sys.argv[1:]
    if cmd == "sink":
        sink(int(argv[0]), *argv[1:2])
    elif cmd == "churn":
        churn(argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]))
    elif cmd == "hold":
        hold(int(argv[0]), int(argv[1]), float(argv[2]))
    elif cmd == "sandwich":
        sandwich(int(argv[0]), float(argv[1]))
    elif cmd == "idle":
        idle_pair(argv[0], int(argv[1]), int(argv[2]))
    else:
        raise SystemExit(f"unknown command {cmd}")
