"""SciTags labels written below the socket (issue 31): a tc egress classifier on the sender's
veth writes a SciTags flow label into the packets of one flow, as scitags flowd's eBPF backend
does, over the label the sender's socket chose (a different SciTags one). The agent with
`tcp.flow_labels: packet` counts the flow's bytes under the marked experiment and activity,
exactly; with `socket` it counts them under the socket's own label and never the marked one;
with `both` the packet's wins. tcpdump on the receiving veth reads the marked label. A second,
unmarked flow (a socket without a label: the kernel's automatic one) stays unattributed.
Many marked connections, short ones and held ones, through a small map never hold more than
the map's size (bpftool counts the kernel's map beside the agent's gauge), and their entries
leave once the sockets are gone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporters.tcp import scitags
from tests.support.env import require
from tests.support.realparts import Agent, Samples, free_port, have, is_root
from tests.support.tcpnet import (
    HOLDER,
    TcpNet,
    flow,
    mark_egress,
    piped,
    send,
    start_sink,
    v6_net,
    watch_wire,
    wire_labels,
)

pytestmark = [pytest.mark.root]

MARKED = scitags.encode(3, 2, entropy=29)  # what the "flowd" at tc egress writes
# the socket's own label (a lease: its top bit clear, see test_tcp_scitags_real.py)
SOCKET_LABEL = scitags.encode(5, 1, entropy=6)
SIZE = 4 << 20
ONLY_TCP = "".join(
    f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power", "nic")
)
SENT = "wattbit_tcp_flow_sent_bytes_total"
INFO = "wattbit_tcp_flow_label_info"
ENTRIES = "wattbit_tcp_flow_label_entries"


def config(source: str, flows: int = 65536) -> str:
    """An agent with only the tcp exporter, keyed by SciTags, its labels from `source`."""
    return ONLY_TCP + (
        "tcp:\n  interval: 1s\n  key: [peer, port, experiment, activity]\n"
        f"  flow_labels: {source}\n  packet_label_flows: {flows}\n"
    )


@pytest.fixture
def net() -> Iterator[TcpNet]:
    require(is_root(), "needs root for network namespaces and BPF")
    require(have("ip") and have("tcpdump") and have("tc"), "needs iproute2 and tcpdump")
    require(have("clang"), "needs clang for the tc marker")
    with v6_net("flowegress") as n:
        yield n


def samples(s: Samples) -> float:
    return s.get(("wattbit_tcp_samples_total", ()), 0)


def sampled_twice(s: Samples) -> bool:
    return samples(s) >= 2


def infos(s: Samples) -> list[dict[str, str]]:
    return sorted((dict(k[1]) for k in s if k[0] == INFO), key=lambda d: d["source"])


def test_packet_source_counts_the_flow_marked_at_tc_egress(net: TcpNet, tmp_path: Path) -> None:
    port, plain_port = free_port(), free_port()
    mark_egress(net, MARKED, tmp_path, dport=port)
    procs: list[subprocess.Popen[str]] = [start_sink(net, port), start_sink(net, plain_port)]
    agents: dict[str, Agent] = {}
    try:
        for source in ("packet", "socket", "both"):
            (tmp_path / source).mkdir()
            agents[source] = Agent(config(source), tmp_path / source, netns=net.ns_a)
        for a in agents.values():
            a.wait_ready()
            # two samples before the senders are born: all of their bytes are the exporter's
            a.scrape_until("two samples", sampled_twice)
        dump = watch_wire(net, port)
        procs.append(dump)
        procs.append(send(net, port, SOCKET_LABEL, SIZE))
        procs.append(send(net, plain_port, 0, SIZE))  # no label of its own, not marked
        on_port = {"peer": net.addr_b, "port": str(port)}
        marked = {**on_port, "experiment": "3", "activity": "2"}
        socket_own = {**on_port, "experiment": "5", "activity": "1"}
        plain = {"peer": net.addr_b, "port": str(plain_port), "experiment": "", "activity": ""}
        # + 1: bytes_acked counts the SYN
        got = {
            "packet": agents["packet"].scrape_until(
                "the marked flow and the plain one",
                lambda s: (
                    flow(s, SENT, **marked) == SIZE + 1 and flow(s, SENT, **plain) == SIZE + 1
                ),
                timeout=30,
            ),
            "both": agents["both"].scrape_until(
                "the marked flow", lambda s: flow(s, SENT, **marked) == SIZE + 1, timeout=30
            ),
            "socket": agents["socket"].scrape_until(
                "the flow by its socket's label",
                lambda s: flow(s, SENT, **socket_own) == SIZE + 1,
                timeout=30,
            ),
        }
        wire, _ = dump.communicate(timeout=30)
    finally:
        for a in agents.values():
            a.stop()
        for p in procs:
            p.kill()
    # each source saw the flow under one key only: the socket source never the marked label
    assert flow(got["socket"], SENT, **marked) == 0
    assert flow(got["packet"], SENT, **socket_own) == 0
    assert flow(got["both"], SENT, **socket_own) == 0
    attached = {"source": "packet", "reason": "tp_btf/net_dev_start_xmit attached"}
    iterator = {"source": "bpf_iter", "reason": "iter/tcp program attached"}
    assert infos(got["packet"]) == [attached]
    assert infos(got["socket"]) == [iterator]
    assert infos(got["both"]) == [iterator, attached]
    # tcpdump on the receiving veth reads the marked label, not the socket's
    assert wire_labels(wire) == {MARKED}, wire
    # read after the agent dropped its capabilities (collector/agent/privileges.py)
    assert "capabilities: dropped" in agents["packet"].log.read_text()


def test_without_bpf_capabilities_the_packet_source_says_why(net: TcpNet) -> None:
    """As uid 65534 with no capability the program is not tried; the info series names what
    is missing."""
    require(have("setpriv"), "needs setpriv")
    # the unprivileged agent reads its configuration: pytest's tmp_path is root's alone
    tmp = Path(tempfile.mkdtemp(prefix="wattbit-flowegress-"))
    tmp.chmod(0o755)
    agent = Agent(config("packet"), tmp, user="65534", caps=[], netns=net.ns_a)
    try:
        agent.wait_ready()
        s = agent.scrape_until("sampled", sampled_twice)
    finally:
        agent.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert infos(s) == [{"source": "packet", "reason": "missing CAP_BPF+CAP_PERFMON"}]
    assert s[(ENTRIES, (("source", "packet"),))] == 0


def test_many_flows_stay_within_the_map_and_leave_with_their_sockets(
    net: TcpNet, tmp_path: Path
) -> None:
    """Through a map of 293 5-tuples (an odd size: bpftool finds this agent's map by it):
    2,000 short marked connections, then 600 held open. The kernel's map never holds more
    than its size (the LRU evicts), the agent's gauge equals what bpftool counts in it, and
    once the sockets are closed no entry stays (each is deleted after two samples without its
    socket), in the agent's gauge and in the kernel's map alike."""
    require(have("bpftool"), "needs bpftool to count the kernel's map")
    port, flows = free_port(), 293
    mark_egress(net, MARKED, tmp_path, dport=port)
    far = piped(net.ns_b, sys.executable, "-m", "tests.support.tcpnet", "sink", str(port),
                net.addr_b)  # fmt: skip
    procs = [far]
    agent = Agent(config("packet", flows), tmp_path, netns=net.ns_a)
    try:
        assert far.stdout is not None and far.stdout.readline().strip() == "ready"
        agent.wait_ready()
        map_id = our_map(flows)
        short = piped(net.ns_a, sys.executable, "-m", "tests.support.tcpnet", "churn",
                      net.addr_b, str(port), "2000", "1000", "1")  # fmt: skip
        procs.append(short)
        churn = short.communicate(timeout=120)[0].strip().splitlines()[-1]
        after_churn = kernel_entries(map_id)
        # three samples after the churn: the map read twice without those sockets
        n = samples(agent.scrape()) + 3
        agent.scrape_until(
            "the churn's entries gone", lambda s: samples(s) >= n and entries(s) == 0, timeout=30
        )
        assert kernel_entries(map_id) == 0
        holder = subprocess.Popen(
            ["ip", "netns", "exec", net.ns_a, sys.executable, "-c", HOLDER, net.addr_b,
             str(port), "600"],
            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        procs.append(holder)
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().split() == ["ready", "600"]
        # a sample begun after the last connection: two more than the ones done now
        n = samples(agent.scrape()) + 2
        held = agent.scrape_until(
            "the held flows' entries", lambda s: samples(s) >= n and entries(s) > 0
        )
        held_in_kernel = kernel_entries(map_id)  # the held sockets send nothing more
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "closed"
        n = samples(agent.scrape()) + 3
        gone = agent.scrape_until(
            "the closed flows' entries gone", lambda s: samples(s) >= n and entries(s) == 0
        )
        gone_in_kernel = kernel_entries(map_id)
    finally:
        agent.stop()
        for p in procs:
            p.kill()
    assert json.loads(churn)["connections"] == 2000
    assert after_churn <= flows
    assert 0 < entries(held) == held_in_kernel <= flows, (entries(held), held_in_kernel)
    # the held sockets were labelled from what the map kept: at most the map's size of them
    assert 0 < flow(held, "wattbit_tcp_flow_sockets", experiment="3", activity="2") <= flows
    assert gone_in_kernel == 0
    assert infos(gone) == [{"source": "packet", "reason": "tp_btf/net_dev_start_xmit attached"}]


def our_map(max_entries: int) -> int:
    """The id of the one egress_labels map of that size (this test's agent's)."""
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    ids = [m["id"] for m in json.loads(out)
           if m.get("name") == "egress_labels" and m.get("max_entries") == max_entries]  # fmt: skip
    assert len(ids) == 1, ids
    return int(ids[0])


def kernel_entries(map_id: int) -> int:
    """The map's entries as bpftool dumps them."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return len(json.loads(out))


def entries(s: Samples) -> float:
    """The packet source's kept 5-tuples at the last sample."""
    return s[(ENTRIES, (("source", "packet"),))]
