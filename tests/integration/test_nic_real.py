"""The nic exporter on a real veth pair between two namespaces, against the kernel and iperf3."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require
from realparts import Agent, have, is_root, sample, veth_pair

pytestmark = [pytest.mark.root]

CONFIG = "blockio:\n  enabled: false\nnic:\n  exclude: ''\n"


def test_tx_bytes_equal_the_kernel_and_cover_iperf3(tmp_path: Path) -> None:
    require(is_root(), "needs root for network namespaces")
    require(have("iperf3") and have("ip"), "needs iperf3 and iproute2")
    with veth_pair() as pair:
        agent = Agent(CONFIG, tmp_path, netns=pair.ns_a)
        server = subprocess.Popen(
            ["ip", "netns", "exec", pair.ns_b, "iperf3", "-s", "-1", "-B", pair.addr_b],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            agent.wait_ready()
            time.sleep(0.5)  # let iperf3's server bind
            s0 = agent.scrape()
            k0 = pair.sys_counter(pair.ns_a, pair.if_a, "tx_bytes")
            r = pair.run(
                pair.ns_a, "iperf3", "-c", pair.addr_b, "-t", "3", "-J", timeout=60, check=True
            )
            sent = json.loads(r.stdout)["end"]["sum_sent"]["bytes"]
            server.wait(timeout=10)
            time.sleep(0.5)  # the last ACKs and FINs
            k1 = pair.sys_counter(pair.ns_a, pair.if_a, "tx_bytes")
            s1 = agent.scrape()
            assert pair.sys_counter(pair.ns_a, pair.if_a, "tx_bytes") == k1, "not quiet yet"
        finally:
            agent.stop()
            if server.poll() is None:
                server.kill()
        ours = sample(s1, "wattbit_nic_bytes_total", interface=pair.if_a, direction="tx")
        ours -= sample(s0, "wattbit_nic_bytes_total", interface=pair.if_a, direction="tx")
        assert ours == k1 - k0, "agent and /sys/class/net disagree"
        # Payload plus Ethernet/IP/TCP headers and iperf3's control connection: at least the
        # payload, at most 6 % more.
        assert sent <= ours <= sent * 1.06, f"agent {ours} vs iperf3 payload {sent}"
        assert sent > 50e6, "iperf3 moved too little to mean anything"
        assert (
            sample(
                s1,
                "wattbit_nic_info",
                interface=pair.if_a,
                driver="veth",
                pci="",
                numa_node="",
                mtu="1500",
                operstate="up",
            )
            == 1.0
        )
        segs = sample(s1, "wattbit_tcp_segments_total", direction="out")
        assert segs - sample(s0, "wattbit_tcp_segments_total", direction="out") > 0
        assert sample(s1, "wattbit_exporter_up", exporter="nic") == 1.0
    # Everything is gone afterwards.
    assert (
        pair.ns_a
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )


def test_namespaces_removed_when_the_test_fails() -> None:
    require(is_root() and have("ip"), "needs root and iproute2")
    with pytest.raises(RuntimeError), veth_pair() as pair:
        raise RuntimeError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert pair.ns_a not in listed and pair.ns_b not in listed
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert pair.if_a not in links


def test_promtool_check_metrics_on_nic_output(tmp_path: Path) -> None:
    require(is_root() and have("promtool"), "needs root and promtool")
    with veth_pair() as pair:
        agent = Agent(CONFIG, tmp_path, netns=pair.ns_a)
        try:
            agent.wait_ready()
            text = agent.scrape_text()
        finally:
            agent.stop()
    assert f'interface="{pair.if_a}"' in text
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sys.executable
