"""SciTags on real IPv6 sockets (issue 31): a sender leases a SciTags flow label
(IPV6_FLOWLABEL_MGR) and sends with it (IPV6_FLOWINFO_SEND, the label in connect()'s
sin6_flowinfo), through a veth into another namespace. The agent (in the sender's namespace,
its capabilities dropped after the iter/tcp program is attached) keys the flow by the
experiment and activity of that label; tcpdump on the receiving end reads the same label off
the wire; an agent without CAP_BPF and CAP_PERFMON says why it has no labels.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporters.tcp import scitags
from tests.support.env import require
from tests.support.realparts import Agent, Samples, free_port, have, is_root

pytestmark = [pytest.mark.root]

EXPERIMENT, ACTIVITY = 3, 2
# entropy bits 00101: the label's top bit clear, for net.ipv6.flowlabel_state_ranges=1 (the
# default) reserves labels 0x80000-0xFFFFF to the stateless (automatic) ones, and a lease of
# one of those fails with EINVAL (net/ipv6/ip6_flowlabel.c, fl_create())
LABEL = scitags.encode(EXPERIMENT, ACTIVITY, entropy=5)
SIZE = 4 << 20
ONLY_TCP = "".join(
    f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power", "nic")
)
CONFIG = ONLY_TCP + "tcp:\n  interval: 1s\n  key: [peer, port, experiment, activity]\n"
# IPV6_FLOWLABEL_MGR (32) with struct in6_flowlabel_req (include/uapi/linux/in6.h): dst,
# label (network order), action IPV6_FL_A_GET, share IPV6_FL_S_EXCL, flags IPV6_FL_F_CREATE;
# then IPV6_FLOWINFO_SEND (33): connect() takes the label from sin6_flowinfo
# (tcp_v6_connect(), which checks the lease: fl6_sock_lookup()).
SENDER = """
import socket, struct, sys, time
dst, port, label, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = socket.socket(socket.AF_INET6)
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


@dataclass
class V6Net:
    """Two namespaces joined by a veth, IPv6 on both ends."""

    ns_a: str
    ns_b: str
    if_b: str
    addr_a: str = "fd00:31::1"
    addr_b: str = "fd00:31::2"


@contextlib.contextmanager
def v6_net() -> Iterator[V6Net]:
    """Fresh namespaces (names with `tcpsc`) and a veth with IPv6 (no DAD wait); removed after."""
    tag = f"{os.getpid() % 100000}"
    net = V6Net(f"tcpscA{tag}", f"tcpscB{tag}", f"tcpsc{tag}b")
    if_a = f"tcpsc{tag}a"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        ip("netns", "add", net.ns_a)
        ip("netns", "add", net.ns_b)
        ip("-n", net.ns_a, "link", "add", if_a, "type", "veth", "peer", "name", net.if_b,
           "netns", net.ns_b)  # fmt: skip
        for ns, ifname, addr in ((net.ns_a, if_a, net.addr_a), (net.ns_b, net.if_b, net.addr_b)):
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
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def flow(s: Samples, name: str, **labels: str) -> float:
    """The sum of one family's series whose labels include `labels`."""
    return sum(v for (n, lab), v in s.items()
               if n == name and labels.items() <= dict(lab).items())  # fmt: skip


@pytest.fixture
def net() -> Iterator[V6Net]:
    require(is_root(), "needs root for network namespaces and BPF")
    require(have("ip") and have("tcpdump"), "needs iproute2 and tcpdump")
    with v6_net() as n:
        yield n


def test_scitags_label_keys_the_flow_as_on_the_wire(net: V6Net, tmp_path: Path) -> None:
    port = free_port()
    sink = popen(net.ns_b, sys.executable, "-c", SINK, net.addr_b, str(port))
    agent = Agent(CONFIG, tmp_path, netns=net.ns_a)
    procs: list[subprocess.Popen[str]] = [sink]
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        agent.wait_ready()
        # two samples before the sender is born: all of its bytes are this exporter's
        agent.scrape_until(
            "two samples", lambda s: s.get(("wattbit_tcp_samples_total", ()), 0) >= 2
        )
        dump = popen(net.ns_b, "tcpdump", "-i", net.if_b, "-nn", "-v", "-l", "-c", "3",
                     f"ip6 and tcp and src host {net.addr_a} and dst port {port}")  # fmt: skip
        procs.append(dump)
        assert dump.stdout is not None
        first = dump.stdout.readline()  # "tcpdump: listening on ...": its filter is attached
        assert "listening" in first, first
        sender = popen(net.ns_a, sys.executable, "-c", SENDER, net.addr_b, str(port),
                       str(LABEL), str(SIZE))  # fmt: skip
        procs.append(sender)
        assert sender.stdout is not None
        said = sender.stdout.readline().strip()
        assert said == "sent", said + sender.stdout.read(4000)
        keyed = {"peer": net.addr_b, "port": str(port), "experiment": str(EXPERIMENT),
                 "activity": str(ACTIVITY)}  # fmt: skip
        s = agent.scrape_until(
            "the flow keyed by its SciTags",
            lambda s: flow(s, "wattbit_tcp_flow_sent_bytes_total", **keyed) == SIZE + 1,
            timeout=30,
        )  # + 1: bytes_acked counts the SYN
        wire, _ = dump.communicate(timeout=30)
    finally:
        agent.stop()
        for p in procs:
            p.kill()
    info = [dict(k[1]) for k in s if k[0] == "wattbit_tcp_flow_label_info"]
    assert info == [{"source": "bpf_iter", "reason": "iter/tcp program attached"}], info
    # the label tcpdump read off the receiving veth (every packet of the flow carries it)
    labels = {int(v, 16) for v in re.findall(r"flowlabel (0x[0-9a-f]+)", wire)}
    assert labels == {LABEL}, wire
    assert scitags.decode(LABEL) == (EXPERIMENT, ACTIVITY)
    # read after the agent dropped its capabilities (collector/agent/privileges.py)
    assert "capabilities: dropped" in agent.log.read_text()


def test_without_bpf_capabilities_the_labels_say_why(net: V6Net) -> None:
    """As uid 65534 with no capability the iterator is not tried: experiment and activity stay
    "" and the info series names what is missing."""
    require(have("setpriv"), "needs setpriv")
    # the unprivileged agent reads its configuration: pytest's tmp_path is root's alone
    tmp = Path(tempfile.mkdtemp(prefix="wattbit-tcpsc-"))
    tmp.chmod(0o755)
    agent = Agent(CONFIG, tmp, user="65534", caps=[], netns=net.ns_a)
    try:
        agent.wait_ready()
        s = agent.scrape_until(
            "sampled", lambda s: s.get(("wattbit_tcp_samples_total", ()), 0) >= 1
        )
    finally:
        agent.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    info = [dict(k[1]) for k in s if k[0] == "wattbit_tcp_flow_label_info"]
    assert info == [{"source": "none", "reason": "missing CAP_BPF+CAP_PERFMON"}], info
