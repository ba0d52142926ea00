"""SciTags on real IPv6 sockets (issue 31): a sender leases a SciTags flow label
(IPV6_FLOWLABEL_MGR) and sends with it (IPV6_FLOWINFO_SEND, the label in connect()'s
sin6_flowinfo), through a veth into another namespace. The agent (in the sender's namespace,
its capabilities dropped after the iter/tcp program is attached) keys the flow by the
experiment and activity of that label; tcpdump on the receiving end reads the same label off
the wire; an agent without CAP_BPF and CAP_PERFMON says why it has no labels.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporters.tcp import scitags
from tests.support.env import require
from tests.support.realparts import Agent, free_port, have, is_root
from tests.support.tcpnet import TcpNet, flow, send, start_sink, v6_net, watch_wire, wire_labels

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


@pytest.fixture
def net() -> Iterator[TcpNet]:
    require(is_root(), "needs root for network namespaces and BPF")
    require(have("ip") and have("tcpdump"), "needs iproute2 and tcpdump")
    with v6_net("tcpsc") as n:
        yield n


def test_scitags_label_keys_the_flow_as_on_the_wire(net: TcpNet, tmp_path: Path) -> None:
    port = free_port()
    procs: list[subprocess.Popen[str]] = [start_sink(net, port)]
    agent = Agent(CONFIG, tmp_path, netns=net.ns_a)
    try:
        agent.wait_ready()
        # two samples before the sender is born: all of its bytes are this exporter's
        agent.scrape_until(
            "two samples", lambda s: s.get(("wattbit_tcp_samples_total", ()), 0) >= 2
        )
        dump = watch_wire(net, port)
        procs.append(dump)
        procs.append(send(net, port, LABEL, SIZE))
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
    assert wire_labels(wire) == {LABEL}, wire
    assert scitags.decode(LABEL) == (EXPERIMENT, ACTIVITY)
    # read after the agent dropped its capabilities (collector/agent/privileges.py)
    assert "capabilities: dropped" in agent.log.read_text()


def test_without_bpf_capabilities_the_labels_say_why(net: TcpNet) -> None:
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
