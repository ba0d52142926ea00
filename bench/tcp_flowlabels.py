"""The flow-label iterator's cost per sample against the sock_diag dump it rides along with
(issue 31, SciTags): 10,000 IPv6 TCP sockets, every client one sending with a leased label.

Run (root: a network namespace, BPF): .venv/bin/python bench/tcp_flowlabels.py [--pairs 5000]
                                                                         [--rounds 30]

In a fresh network namespace (name with `tcpfl`), `--pairs` connections over ::1 (so twice as
many sockets), each client socket with a label leased through IPV6_FLOWLABEL_MGR and sent
with IPV6_FLOWINFO_SEND. Then, alternating A B / B A for `--rounds` rounds: the exporter's
whole sock_diag dump of both families, parsed (NetlinkReader.dump), and one walk of the
iter/tcp program, parsed (FlowLabels.read). Medians, and the walk's cost as a share of the
dump's: what `experiment`/`activity` in tcp.key add to a sample.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    alternate,
    bench_lock,
    host_line,
    median,
    print_command,
    python_in_netns,
    ratio,
    table,
)
from tests.support.tcpnet import namespace  # noqa: E402

LABEL = 0x0B0105  # SciTags experiment 3, activity 2 with entropy 00101 (scitags.encode)


def lease(c: socket.socket, label: int) -> None:
    """Lease `label` to ::1 for this socket (share IPV6_FL_S_PROCESS) and send with it."""
    req = socket.inet_pton(socket.AF_INET6, "::1") + struct.pack("!I", label)
    req += struct.pack("=BBHHHI", 0, 2, 1, 0, 0, 0)  # GET, share PROCESS, F_CREATE
    c.setsockopt(socket.IPPROTO_IPV6, 32, req)  # IPV6_FLOWLABEL_MGR
    c.setsockopt(socket.IPPROTO_IPV6, 33, 1)  # IPV6_FLOWINFO_SEND


def inner(pairs: int, rounds: int) -> None:
    """Inside the namespace: the sockets, then the alternating measurements."""
    from exporters.tcp.exporter import NetlinkReader
    from exporters.tcp.flowlabels import FlowLabels

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * pairs + 1024), hard))
    lst = socket.socket(socket.AF_INET6)
    lst.bind(("::1", 0))
    lst.listen(4096)
    port = lst.getsockname()[1]
    keep = []
    for _ in range(pairs):
        c = socket.socket(socket.AF_INET6)
        lease(c, LABEL)
        c.connect(("::1", port, LABEL, 0))
        a, _ = lst.accept()
        keep += [c, a]
    reader = NetlinkReader(destroy=False)
    labels = FlowLabels(max_sockets=262_144)
    assert labels.source == "bpf_iter", labels.reason
    walks: dict[str, list[float]] = {"dump": [], "labels": []}
    counts = {"dump": len(reader.dump()), "labels": len(labels.read())}
    with bench_lock():
        for _r, what in alternate(["dump", "labels"], rounds):
            t0 = time.perf_counter()
            _ = reader.dump() if what == "dump" else labels.read()
            walks[what].append(time.perf_counter() - t0)
    labels.close()
    dump_s, labels_s = median(walks["dump"]) or 0.0, median(walks["labels"]) or 0.0
    table(
        ["read", "sockets or labels", "median ms", "of the dump"],
        [
            ["sock_diag dump (both families), parsed", counts["dump"], f"{1e3 * dump_s:.1f}", ""],
            ["iter/tcp walk, parsed", counts["labels"], f"{1e3 * labels_s:.1f}",
             f"{100 * (ratio(labels_s, dump_s) or 0):.1f} %"],
        ],
    )  # fmt: skip
    print(host_line())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.pairs, args.rounds)
        return
    with namespace(f"tcpfl{os.getpid() % 100000}") as ns:
        python_in_netns(ns, __file__, "--inner", "--pairs", str(args.pairs), "--rounds",
                        str(args.rounds))  # fmt: skip
    print_command()


if __name__ == "__main__":
    main()
