"""The packet flow-label program's cost per packet (issue 31, SciTags below the socket): the
kernel's own accounting of tp_btf/net_dev_start_xmit (exporters/tcp/core/egresslabel.bpf.c)
while iperf3 sends IPv6 TCP through a veth.

Run (root: network namespaces, BPF): .venv/bin/python bench/tcp_egresslabels.py [--rounds 10]
                                                                           [--seconds 3]

Two namespaces joined by a veth (names with `flowegress`, tests/support/tcpnet.py); the tc
egress marker of the tests (flowmark.bpf.c, standing in for scitags flowd) writes a SciTags
label into the packets to one iperf3 server's port, not the other's. Inside the sender's
namespace the program is loaded as the agent loads it (PacketLabels), kernel.bpf_stats_enabled
is 1 for the run (the previous value restored after), and the rounds alternate A B / B A
between a marked flow (a map hit with an unchanged label: no write) and an unmarked one (its
label the kernel's automatic one: a lookup miss and the check against skb->hash). Per round:
run_time_ns / run_cnt of the program (ns per transmitted skb; with TSO/GSO one skb carries up
to 64 KiB, so the run count is also given per second) and iperf3's rate. Medians.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    alternate,
    bench_lock,
    bpf_stats,
    host_line,
    median,
    print_command,
    prog_runs,
    python_in_netns,
    table,
)
from exporters.tcp import scitags  # noqa: E402
from tests.support.tcpnet import mark_egress, v6_net  # noqa: E402

MARKED = scitags.encode(3, 2, entropy=29)
PORTS = {"marked": 5301, "unmarked": 5302}


def inner(addr: str, rounds: int, seconds: int) -> None:
    """Inside the sender's namespace: load the program, alternate the two flows."""
    from exporters.tcp.egresslabels import PacketLabels

    labels = PacketLabels(65_536)
    fd = labels.program_fd()
    assert fd is not None, labels.reason
    per: dict[str, list[tuple[float, float, float]]] = {k: [] for k in PORTS}
    # the sysctl is the machine's: on only while this bench measures
    with bench_lock(), bpf_stats():
        try:
            for _r, what in alternate(list(PORTS), rounds):
                ns0, runs0 = prog_runs(fd)
                out = subprocess.run(["iperf3", "-6", "-c", addr, "-p", str(PORTS[what]),
                                      "-t", str(seconds), "-J"],
                                     check=True, capture_output=True, text=True).stdout  # fmt: skip
                ns1, runs1 = prog_runs(fd)
                runs, ns = runs1 - runs0, ns1 - ns0
                bps = json.loads(out)["end"]["sum_sent"]["bits_per_second"]
                per[what].append((ns / max(runs, 1), runs / seconds, bps))
            # the marked flows took the map's hit path: their 5-tuples are kept (no sample
            # deletes them here), the unmarked ones' are not
            kept = list(labels.entries_now().values())
        finally:
            labels.close()
    rows = []
    for what, vals in per.items():
        rows.append([what, f"{median([v[0] for v in vals]) or 0:.0f}",
                     f"{median([v[1] for v in vals]) or 0:,.0f}",
                     f"{(median([v[2] for v in vals]) or 0) / 1e9:.1f}"])  # fmt: skip
    table(["flow", "median ns per run", "runs per second", "iperf3 Gbit/s"], rows)
    print(f"map: {kept.count(MARKED)} 5-tuples with the marked label, {len(kept)} in all")
    print(f"{host_line()}, {rounds} rounds of {seconds} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.inner, args.rounds, args.seconds)
        return
    with v6_net("flowegress") as net, tempfile.TemporaryDirectory() as tmp:
        mark_egress(net, MARKED, Path(tmp), dport=PORTS["marked"])
        iperf3 = ["ip", "netns", "exec", net.ns_b, "iperf3", "--forceflush", "-s", "-p"]
        servers = [
            subprocess.Popen([*iperf3, str(p)], stdout=subprocess.PIPE, text=True)
            for p in PORTS.values()
        ]
        try:
            for s in servers:  # "Server listening on PORT" once its socket listens
                assert s.stdout is not None
                while "listening" not in (line := s.stdout.readline()):
                    assert line, "iperf3 -s exited"
            python_in_netns(net.ns_a, __file__, "--inner", net.addr_b, "--rounds",
                            str(args.rounds), "--seconds", str(args.seconds))  # fmt: skip
        finally:
            for s in servers:
                s.kill()
    print_command()


if __name__ == "__main__":
    main()
