"""Per-queue NIC counters: one netdev netlink qstats dump vs an ethtool read per NIC.

Run: sudo .venv/bin/python bench/nic_queue_read.py [--repeat 2000]

On the machine's own interfaces that answer qstats-get, alternately (AB BA AB ...): (a) the
exporter's ethtool path for each of them (ETHTOOL_GSTRINGS + ETHTOOL_GSTATS, then the curated
name table) and (b) one qstats-get dump covering all of them. Medians of the per-round CPU time
(this process, time.process_time) and the ratio. Also checks that both paths see the same
queues where the driver still lists them in ethtool (before Linux 6.10 for virtio_net).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import in_turn, print_command, ratio  # noqa: E402
from exporters.nic.ethtool import Ethtool, queue_stats  # noqa: E402
from exporters.nic.qstats import NetdevQstats  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    sys_net = Path("/sys/class/net")
    names = {int((d / "ifindex").read_text()): d.name for d in sys_net.iterdir()}
    qs = NetdevQstats()
    first = qs.read()
    nics = sorted(names[i] for i in first)
    if not nics:
        print("no interface here answers qstats-get: nothing to compare")
        return 1
    et = Ethtool()
    ethtool_view = {n: queue_stats(et.read_stats(n)) for n in nics}

    def ethtool_reads() -> None:
        for n in nics:
            queue_stats(et.read_stats(n))

    paths = {"ethtool": ethtool_reads, "qstats": qs.read}
    times: dict[str, list[float]] = {k: [] for k in paths}
    for r in range(args.repeat):  # A B, B A, ...: drift falls on both alike
        for name in in_turn(list(paths), r):
            t0 = time.process_time()
            paths[name]()
            times[name].append(time.process_time() - t0)
    a, b = times["ethtool"], times["qstats"]
    et.close()
    qs.close()
    ma, mb = statistics.median(a) * 1e6, statistics.median(b) * 1e6
    print(f"interfaces answering qstats-get: {', '.join(nics)}")
    index = {name: i for i, name in names.items()}
    for n in nics:
        print(f"  {n}: per-queue counters from ethtool {len(ethtool_view[n])},", end="")
        print(f" from netlink {len(first[index[n]])}")
    print(f"{args.repeat} alternating rounds, CPU per round (median):")
    print(f"  ethtool, one read per NIC : {ma:8.1f} us")
    print(f"  netlink qstats, one dump  : {mb:8.1f} us")
    print(f"  netlink / ethtool         : {ratio(mb, ma) or float('nan'):8.2f}")
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
