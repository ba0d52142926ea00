"""The tcp exporter on real sockets: iperf3 and short connections through a veth into a network
namespace, cross-checked with `ss -tinmHe` on the same socket and with iperf3's own byte counts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.env import require
from tests.support.realparts import Agent, Samples, free_port, have, is_root, wait_for
from tests.support.tcpnet import TcpNet, tcp_net

pytestmark = [pytest.mark.root]

ONLY_TCP = "".join(
    f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power", "nic")
)
SAMPLES = ("wattbit_tcp_samples_total", ())


@pytest.fixture
def net() -> Iterator[TcpNet]:
    require(is_root(), "needs root for network namespaces")
    require(have("iperf3") and have("ss") and have("ip"), "needs iperf3 and iproute2")
    with tcp_net() as n:
        yield n


def ss_fields(line: str) -> dict[str, str]:
    """`key:value` words of an ss line."""
    out = dict(re.findall(r"(?:^| )([a-z_]+):(\S+)", line))
    out.update(re.findall(r"(?:^| )(delivery_rate) (\d+)bps", line))
    return out


def _ms(v: str | None) -> int:
    return int(re.match(r"\d+", v or "0ms").group())  # type: ignore[union-attr]


def iperf3_server(net: TcpNet, port: int) -> subprocess.Popen[str]:
    srv = net.popen(net.ns_b, "iperf3", "-s", "-p", str(port), "-B", net.addr_b,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def listening() -> bool:
        return bool(net.run(net.ns_b, "ss", "-ltnH", f"( sport = :{port} )").strip())

    wait_for(listening, 20, "iperf3 -s listening", interval=0.1)
    return srv


@pytest.mark.parametrize("reverse", [False, True])
def test_counters_sit_between_two_reads_around_ss(net: TcpNet, reverse: bool) -> None:
    """During an iperf3 flow: our read, ss's, ours again on the same socket. Counters only grow,
    so ss's figure lies between our two (busy times in whole ms, as ss prints them)."""
    port = free_port()
    srv = iperf3_server(net, port)
    cli = net.popen(net.ns_a, "iperf3", "-c", net.addr_b, "-p", str(port), "-t", "4",
                    *(["-R"] if reverse else []), stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        got = json.loads(net.py(net.ns_a, "sandwich", str(port), "20"))
        cli.wait(timeout=60)
    finally:
        for p in (cli, srv):
            p.kill()
    first, second, ss = got["first"]["info"], got["second"]["info"], ss_fields(got["ss"])
    assert ss, "ss did not list the socket"
    moving = "bytes_received" if reverse else "bytes_acked"
    assert second[moving] > first[moving] > 1 << 20  # the flow was on while we read
    for ours, theirs in (("bytes_acked", "bytes_acked"), ("bytes_received", "bytes_received"),
                         ("data_segs_out", "data_segs_out"), ("segs_out", "segs_out"),
                         ("segs_in", "segs_in")):  # fmt: skip
        assert first[ours] <= int(ss.get(theirs, "0")) <= second[ours], ours
    for ours, theirs in (("busy_time", "busy"), ("rwnd_limited", "rwnd_limited"),
                         ("sndbuf_limited", "sndbuf_limited")):  # fmt: skip
        assert first[ours] // 1000 <= _ms(ss.get(theirs)) <= second[ours] // 1000, ours
    retrans = int(ss.get("retrans", "0/0").split("/")[1])
    assert first["total_retrans"] <= retrans <= second["total_retrans"]


def test_every_figure_equals_ss_on_an_idle_socket(net: TcpNet) -> None:
    """8 MiB through the veth, then idle: nothing moves, so ours and ss's agree exactly."""
    port = free_port()
    sink = net.popen(net.ns_b, "python3", "-m", "tests.support.tcpnet", "sink", str(port),
                     stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        got = json.loads(net.py(net.ns_a, "idle", net.addr_b, str(port), str(8 << 20)))
    finally:
        sink.kill()
    first, second = got["first"], got["second"]

    # the last_* fields are ages (ms since the last data and ACK): the clock moves them
    def still(info: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in info.items() if not k.startswith("last_")}

    assert still(first["info"]) == still(second["info"]), "the socket moved between the reads"
    i, m, ss = first["info"], first["mem"], ss_fields(got["ss"])
    assert i["bytes_acked"] == int(ss["bytes_acked"]) == (8 << 20) + 1  # + the SYN
    for ours, theirs in (("data_segs_out", "data_segs_out"), ("snd_cwnd", "cwnd"),
                         ("snd_mss", "mss"), ("rcv_space", "rcv_space"),
                         ("snd_wnd", "snd_wnd"), ("segs_out", "segs_out")):  # fmt: skip
        assert i[ours] == int(ss.get(theirs, "0")), ours
    assert i["busy_time"] // 1000 == _ms(ss.get("busy"))
    assert f"{i['rtt'] / 1000:.3f}" == f"{float(ss['rtt'].split('/')[0]):.3f}"
    assert f"{i['min_rtt'] / 1000:.3f}" == f"{float(ss['minrtt']):.3f}"
    skmem = dict(re.findall(r"([a-z]+)(\d+)", ss["skmem"]))
    assert m["rcvbuf"] == int(skmem["rb"]) and m["sndbuf"] == int(skmem["tb"])
    if "delivery_rate" in ss:
        assert i["delivery_rate"] * 8 == int(ss["delivery_rate"])


def _flow_sum(s: Samples, family: str, **labels: str) -> float:
    return sum(
        v for (name, lbls), v in s.items()
        if name == family and all(dict(lbls).get(k) == w for k, w in labels.items())
    )  # fmt: skip


def _counters(s: Samples) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        k: v
        for k, v in s.items()
        if k[0].startswith("wattbit_tcp_flow_") and k[0].endswith("_total")
    }


def test_churn_counts_every_byte_once(net: TcpNet, tmp_path: Path) -> None:
    """iperf3 runs and 600 short connections while the agent samples every second: counters
    never decrease, and the totals equal iperf3's and the churn's own byte counts."""
    cfg = ONLY_TCP + "tcp:\n  interval: 1s\n  key: [peer, port]\n"
    agent = Agent(cfg, tmp_path, netns=net.ns_a)
    iperf_port, sink_port = free_port(), free_port()
    srv = iperf3_server(net, iperf_port)
    sink = net.popen(net.ns_b, "python3", "-m", "tests.support.tcpnet", "sink", str(sink_port),
                     stdout=subprocess.PIPE)  # fmt: skip
    try:
        agent.wait_ready()
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        base = agent.scrape_until("tcp samples", lambda s: s.get(SAMPLES, 0) >= 2)
        assert _flow_sum(base, "wattbit_tcp_flow_sent_bytes_total", peer=net.addr_b) == 0
        churn = net.popen(net.ns_a, "python3", "-m", "tests.support.tcpnet", "churn", net.addr_b,
                          str(sink_port), "600", "10000", "20", stdout=subprocess.PIPE)  # fmt: skip
        sent = received = 0
        previous = _counters(base)
        for _ in range(5):
            out = net.run(
                net.ns_a, "iperf3", "-c", net.addr_b, "-p", str(iperf_port), "-n", "3M", "-J"
            )
            end = json.loads(out)["end"]
            sent += end["sum_sent"]["bytes"]
            received += end["sum_received"]["bytes"]  # what the server read
            now = _counters(agent.scrape())
            for k, v in now.items():
                assert v >= previous.get(k, 0.0), f"{k} went back: {previous[k]} -> {v}"
            previous = now
        out, _ = churn.communicate(timeout=300)
        churned = json.loads(out)["bytes"]
        t_end = agent.scrape()[("wattbit_tcp_samples_total", ())]
        final = agent.scrape_until(
            "two samples after the end",
            lambda s: s.get(("wattbit_tcp_samples_total", ()), 0) >= t_end + 2 + 24,
            timeout=60,
        )
    finally:
        agent.stop()
        for p in (srv, sink):
            p.kill()
    tracking = [dict(k[1]) for k in final if k[0] == "wattbit_tcp_close_tracking_info"]
    assert tracking and tracking[0]["mode"] == "destroy_messages", tracking
    # iperf3: 5 runs of 3 MiB data plus each run's control connection (its parameters and
    # results as JSON: a few KiB) and a SYN and FIN per connection (bytes_acked counts both).
    # What the server read was acked; what iperf3 wrote may not all be (the server closes its
    # data socket when the test ends, unread bytes and all): between the two.
    to_iperf = _flow_sum(
        final, "wattbit_tcp_flow_sent_bytes_total", peer=net.addr_b, port=str(iperf_port)
    )
    assert sent >= 5 * (3 << 20)  # iperf3 -n stops at the first block past 3 MiB
    assert received <= to_iperf <= sent + 5 * (32 << 10), (to_iperf, received, sent)
    # the churn: 600 connections of exactly 10,000 bytes, each + its SYN and FIN
    to_sink = _flow_sum(
        final, "wattbit_tcp_flow_sent_bytes_total", peer=net.addr_b, port=str(sink_port)
    )
    assert churned == 600 * 10_000
    assert churned <= to_sink <= churned + 600 * 2, (to_sink, churned)
    closed = _flow_sum(final, "wattbit_tcp_flow_closed_sockets_total", port=str(sink_port))
    assert closed == 600
    unseen = _flow_sum(
        final, "wattbit_tcp_flow_closed_sockets_total", port=str(sink_port), final="unseen"
    )
    assert unseen == 0


def test_series_bounded_with_ten_thousand_peers(net: TcpNet, tmp_path: Path) -> None:
    """10,000 open connections to 10,000 peer addresses: the tcp families stay within the
    budget of (top_k + 1) keys."""
    cfg = ONLY_TCP + "tcp:\n  interval: 1s\n  top_k: 20\n"
    port = free_port()
    sink = net.popen(net.ns_b, "python3", "-m", "tests.support.tcpnet", "sink", str(port),
                     stdout=subprocess.PIPE)  # fmt: skip
    agent = Agent(cfg, tmp_path, netns=net.ns_a)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        hold = net.popen(net.ns_a, "python3", "-m", "tests.support.tcpnet", "hold", "10000",
                         str(port), "120", stdout=subprocess.PIPE)  # fmt: skip
        assert hold.stdout is not None and hold.stdout.readline().startswith("ready 10000")
        agent.wait_ready()
        s = agent.scrape_until(
            "10,000 sockets", lambda s: s.get(("wattbit_tcp_sockets", ()), 0) >= 10_000
        )
        assert s[("wattbit_tcp_flow_keys", ())] >= 10_000
        per_family: dict[str, int] = {}
        for name, _ in s:
            if name.startswith("wattbit_tcp_flow_"):
                per_family[name] = per_family.get(name, 0) + 1
        assert per_family and max(per_family.values()) <= 21 * 2, per_family  # closed: seen/unseen
        assert sum(per_family.values()) <= 500, sum(per_family.values())
        hold.kill()
    finally:
        agent.stop()
        sink.kill()


def test_process_and_its_cpu(net: TcpNet, tmp_path: Path) -> None:
    """Keyed by process (tcp.processes: the agent keeps CAP_SYS_PTRACE, effective in the
    sampling thread only): iperf3's flow carries process="iperf3", and the key's process_info
    names iperf3 and a CPU of this machine (the CPU it last ran on moves: only its range is
    checked)."""
    cfg = ONLY_TCP + (
        "tcp:\n  interval: 1s\n  key: [peer, port, process]\n  process_refresh: 1s\n"
        "  processes: true\n"
    )
    agent = Agent(cfg, tmp_path, netns=net.ns_a)
    port = free_port()
    srv = iperf3_server(net, port)
    cli = None
    try:
        agent.wait_ready()
        cli = net.popen(net.ns_a, "iperf3", "-c", net.addr_b, "-p", str(port), "-t", "30",
                        stdout=subprocess.DEVNULL)  # fmt: skip

        def named(s: Samples) -> bool:
            sent = _flow_sum(s, "wattbit_tcp_flow_sent_bytes_total", peer=net.addr_b,
                             port=str(port), process="iperf3")  # fmt: skip
            info = [dict(k[1]) for k in s if k[0] == "wattbit_tcp_flow_process_info"]
            return sent > 0 and any(i.get("comm") == "iperf3" for i in info)

        s = agent.scrape_until("iperf3 named", named, timeout=60)
    finally:
        agent.stop()
        for p in (cli, srv):
            if p is not None:
                p.kill()
    info = [dict(k[1]) for k in s if k[0] == "wattbit_tcp_flow_process_info"]
    cpus = [int(i["cpu"]) for i in info if i.get("comm") == "iperf3"]
    ncpu = os.cpu_count() or 1
    assert cpus and all(0 <= c < ncpu for c in cpus), cpus
