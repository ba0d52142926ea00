"""A sender held back by its own send buffer, on real sockets (issue 31): the agent's tcp
exporter, a real Prometheus and the real `wattbit report`, cross-checked with `ss -tinmHe`.

The sender (root namespace, where the agent samples) asks SO_SNDBUF SNDBUF and sends as fast
as its buffer lets it to a reader in a namespace that reads as fast as it can, through a
delay line of DELAY_S each way (tests/support/delayline.py: two tun devices and a FIFO per
direction; this kernel has no netem). With RTT 20 ms, a 16 KiB buffer is far below what the
path could carry: the sender has sent all it may and waits for ACKs to free its buffer —
TCP's chrono accounting counts that as send-buffer-limited (net/ipv4/tcp_output.c
`tcp_cwnd_validate`: data just sent, not cwnd-limited, the write queue empty and the
application blocked on SOCK_NOSPACE; stopped in `tcp_check_space` when the ACKs free room).

Why BBR and the delay line. On a veth alone the ACK is back within microseconds, before the
sender blocks: sndbuf_limited stays 0 (measured, 8-64 KiB buffers). Through the delay line
CUBIC and Reno send a whole 64 KiB GSO segment per write and keep far more than SO_SNDBUF in
flight (ss: w 66-400 KiB against tb 16 KiB; sndbuf_limited 0-4 % of busy time), while BBR,
which paces, held 16 KiB buffers to 37-46 % of busy time send-buffer-limited (the rest: its
pacing keeps the write queue non-empty between ACKs, which is busy time). BBR is also what
the data movers this is for run. Only the named resource, cause and subject are asserted,
and that the limited time grows, never a share: the machine is shared.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_limits_real import HOST, settled
from tests.integration.test_tcp_limits_real import observed
from tests.integration.test_tcp_real import _ms, ss_fields
from tests.support.cli import wattbit
from tests.support.env import require
from tests.support.realparts import (
    Agent,
    free_port,
    have,
    is_root,
    process,
    running,
    wait_for,
)
from tests.support.tcpnet import ip, namespace, root_link_up

# alone: the verdict judges the whole machine's CPUs (docs/testing.md)
pytestmark = [pytest.mark.root, pytest.mark.alone, pytest.mark.timeout(240)]

DELAY_S = 0.010  # each way: a 20 ms round trip
SNDBUF = 8192  # asked; the kernel doubles it (socket(7)): 16 KiB against 20 ms
SCENARIO_S = 12
SKIP_S = 4  # left out of the report window: the rates' windows fill
ADDR_ROOT, ADDR_NS = "169.254.186.1", "169.254.186.2"
SENDER = """
import socket, sys, time
c = socket.socket()
c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(sys.argv[3]))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"bbr")
c.connect((sys.argv[1], int(sys.argv[2])))
block, end = bytes(1 << 20), time.monotonic() + float(sys.argv[4])
while time.monotonic() < end:
    c.sendall(block)
c.close()
"""
TAG = f"{os.getpid() % 100000}"
NS, TUN_ROOT, TUN_NS = f"tcpsb{TAG}", f"tcpsb{TAG}a", f"tcpsb{TAG}b"
# The delay line's stated speed: it carried 107 Mbit/s of CUBIC through 20 ms here (its
# Python loop is the bound), so 100 Mbit/s is what it is, far above what 16 KiB per round
# trip moves (about 6.5 Mbit/s)
LINE_BITS = 100e6
AGENT = (
    "".join(f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power"))
    + f"nic:\n  exclude: '^(?!{TUN_ROOT}$)'\n  link_speeds: {{{TUN_ROOT}: {LINE_BITS:.0f}}}\n"
    + "tcp:\n  interval: 1s\n  key: [peer, port]\n"
)


@dataclass
class Lab:
    """The run's window, its flow key, Prometheus, and the ss cross-checks taken during it."""

    prometheus: str
    tmp: Path
    start: float
    end: float
    key: str
    checks: list[dict[str, Any]]


@contextlib.contextmanager
def delayed_namespace(tmp: Path) -> Iterator[str]:
    """A namespace reached from the root namespace through the delay line; yields its name."""
    ns, tun_root, tun_ns = NS, TUN_ROOT, TUN_NS

    log = tmp / "delayline.log"
    cmd = [sys.executable, "-m", "tests.support.delayline", tun_root, tun_ns, str(DELAY_S)]
    with namespace(ns), process(cmd, log):
        wait_for(lambda: "ready" in log.read_text(), 20, "the delay line's tun devices")
        ip("link", "set", tun_ns, "netns", ns)
        root_link_up(ns, tun_root, tun_ns, ADDR_ROOT, ADDR_NS)
        yield ns


def _sandwich(port: int) -> dict[str, Any]:
    """Ours, ss's, ours again on the sender's socket (tests/support/tcpnet.py)."""
    r = subprocess.run([sys.executable, "-m", "tests.support.tcpnet", "sandwich", str(port),
                        "20"], capture_output=True, text=True, timeout=60, check=True,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))  # fmt: skip
    got: dict[str, Any] = json.loads(r.stdout)
    return got


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    require(is_root(), "needs root (namespaces, tun devices)")
    for cmd in ("prometheus", "prometheus-node-exporter", "ip", "ss"):
        require(have(cmd), f"{cmd} is not installed")
    require(Path("/dev/net/tun").exists(), "no /dev/net/tun")
    bbr = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    require("bbr" in bbr, "the kernel offers no BBR")
    tmp = Path(tempfile.mkdtemp(prefix="wattbit-tcpsb-", dir="/dev/shm"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        ns = stack.enter_context(delayed_namespace(tmp))
        (tmp / "agent").mkdir()
        agent = stack.enter_context(running(Agent(AGENT, tmp / "agent")))
        prom = observed(stack, tmp, agent.port)
        port = free_port()
        sink_log = tmp / "sink.log"
        sink = ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.support.tcpnet", "sink",
                str(port)]  # fmt: skip
        stack.enter_context(process(sink, sink_log))
        wait_for(lambda: "ready" in sink_log.read_text(), 20, "the reader listening")
        start = time.time()
        sender = [sys.executable, "-c", SENDER, ADDR_NS, str(port), str(SNDBUF), str(SCENARIO_S)]
        checks = []
        with process(sender, tmp / "sender.log") as p:
            time.sleep(SKIP_S)  # into the transfer; then two cross-checks, seconds apart
            checks.append(_sandwich(port))
            time.sleep(3)
            checks.append(_sandwich(port))
            p.wait(timeout=SCENARIO_S + 60)
            assert p.returncode == 0, (tmp / "sender.log").read_text()[-2000:]
        end = time.time()
        settled(prom, end)  # the last samples are scraped
        yield Lab(prom, tmp, start, end, f"peer={ADDR_NS},port={port}", checks)


def report(lab: Lab) -> dict[str, Any]:
    """`wattbit report` over the transfer (its first seconds left out)."""
    out = lab.tmp / "reports"
    r = wattbit(
        "report", "--prometheus", lab.prometheus, "--start", f"{lab.start + SKIP_S:.3f}",
        "--end", f"{lab.end - 1:.3f}", "--name", "tcp-sndbuf", "--out", str(out), timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads((out / "tcp-sndbuf.json").read_text())
    return doc


def test_ss_sees_the_send_buffer_limit_grow_as_we_do(lab: Lab) -> None:
    """Both reads of the exporter's parser sandwich ss's on the same socket, and the
    send-buffer-limited time grew between the two cross-checks (in both our reads and ss's)."""
    sndbufs = []
    for got in lab.checks:
        first, second, ss = got["first"], got["second"], ss_fields(got["ss"])
        assert ss, "ss did not list the socket"
        assert first["cookie"] == second["cookie"]
        for ours, theirs in (("busy_time", "busy"), ("sndbuf_limited", "sndbuf_limited")):
            theirs_ms = _ms(ss.get(theirs))
            assert first["info"][ours] // 1000 <= theirs_ms <= second["info"][ours] // 1000, ours
        assert first["info"]["bytes_acked"] <= int(ss["bytes_acked"])
        assert int(ss["bytes_acked"]) <= second["info"]["bytes_acked"]
        skmem = dict(re_pairs(ss["skmem"]))
        assert first["mem"]["sndbuf"] == int(skmem["tb"]) == 2 * SNDBUF  # SO_SNDBUF doubled
        sndbufs.append((second["info"]["sndbuf_limited"], _ms(ss.get("sndbuf_limited"))))
    assert lab.checks[0]["first"]["cookie"] == lab.checks[1]["first"]["cookie"]
    (ours0, ss0), (ours1, ss1) = sndbufs
    assert ours1 > ours0 and ss1 > ss0, sndbufs


def re_pairs(skmem: str) -> list[tuple[str, str]]:
    """skmem:(r0,rb131072,t0,tb16384,...) as (name, number) pairs."""
    return re.findall(r"([a-z]+)(\d+)", skmem)


def test_small_send_buffer_is_the_send_buffer(lab: Lab) -> None:
    doc = report(lab)
    lb = doc["hosts"][HOST]["limited_by"]
    assert (lb["resource"], lb["cause"], lb["subject"]) == ("tcp", "send_buffer", lab.key), (
        lb["evidence"],
        lb.get("others"),
    )
    assert lb["evidence"].startswith(f"TCP send buffer: flows to {ADDR_NS}"), lb
    # the arithmetic: its 16 KiB against the line's 100 Mbit/s × the measured round trip
    assert "its send buffer 16 KiB" in lb["evidence"], lb["evidence"]
    assert "is below bandwidth × RTT" in lb["evidence"], lb["evidence"]
    found = [t for t in doc["transfers"] if t["host"] == HOST and t["key"] == lab.key]
    assert len(found) == 1 and found[0]["limit"] == "send_buffer", doc["transfers"]
