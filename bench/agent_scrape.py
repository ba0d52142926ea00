"""Render time of the agent's /metrics for a large host (synthetic content).

Run: PYTHONPATH=. .venv/bin/python bench/agent_scrape.py [--disks 48] [--ops read,write]
     [--size-histogram] [--nics 8] [--queues 16] [--cpus 64] [--repeat 200]
Goals: <= 30 ms per render for 48 disks (with the NICs and the pcie exporter's links); the
blockio series of 48 disks doing reads and writes <= 2,500 by default (issue 15's budget,
formula in docs/exporters/blockio.md); the NIC part (8 NICs x 16 queues) within the series
budget of docs/exporters/nic.md; the pcie part as docs/exporters/pcie.md's formula says.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from collector.web.exposition import TextRenderer
from exporters.base import ExportersCollector
from exporters.blockio.exporter import render
from exporters.blockio.model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    OPS,
    SIZE_SLOTS,
    DeviceStats,
    OpStats,
)
from exporters.blockio.topology import DiskInfo, disk_info_metric
from exporters.nic.ethtool import QueueStat
from exporters.nic.exporter import NicIrq, NicSnapshot
from exporters.nic.exporter import render as render_nic
from exporters.nic.links import LinkStats
from exporters.nic.procfs import SoftnetRow
from exporters.nic.sysfs import NicInfo
from exporters.pcie.exporter import ControllerIrq, PcieSnapshot
from exporters.pcie.exporter import render as render_pcie
from exporters.pcie.links import Link, Node


def synthetic_devices(
    n: int, ops_done: tuple[str, ...] = OPS, size_histogram: bool = True, seed: int = 1
) -> dict[str, DeviceStats]:
    """n NVMe-like disks, the given ops with traffic, histograms filled across all slots."""
    rnd = random.Random(seed)
    devices = {}
    for i in range(n):
        ops = {}
        for op in ops_done:
            lat = [rnd.randrange(0, 10**9) for _ in range(len(DEFAULT_LAT_BOUNDS_SECONDS) + 1)]
            size = [rnd.randrange(0, 10**9) for _ in range(SIZE_SLOTS)] if size_histogram else None
            ops[op] = OpStats(
                ios=sum(lat),
                bytes=rnd.randrange(10**15),
                errors=rnd.randrange(3),
                lat_slots=lat,
                lat_sum_seconds=rnd.random() * 1e6,
                size_slots=size,
                size_sum_bytes=rnd.randrange(10**15),
            )
        devices[f"nvme{i}n1"] = DeviceStats(
            ops=ops, busy_seconds=rnd.random() * 1e6, inflight=3, clock="device"
        )
    return devices


class SyntheticBlockio:
    """The blockio exporter's rendering over fixed synthetic content (no kernel involved)."""

    name = "blockio"

    def __init__(
        self, n: int, ops_done: tuple[str, ...] = OPS, size_histogram: bool = True
    ) -> None:
        self.devices = synthetic_devices(n, ops_done, size_histogram)
        self.infos = [
            DiskInfo(
                name,
                259,
                i,
                "SAMSUNG MZQL23T8HCLS-00A07",
                f"S64HNE0R{i:06d}",
                f"0000:{0x40 + i // 8:02x}:00.0",
                str(i // 24),
                "0",
                "",
                3840755982336,
            )
            for i, name in enumerate(self.devices)
        ]

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its maps."""
        yield from render(
            self.devices, "core", "", {"complete": 0}, prog_stats={"complete": (10**9, 10**7)}
        )
        yield disk_info_metric(self.infos)


class SyntheticNic:
    """The nic exporter's rendering of n NICs x q queues on c CPUs, IRQs spread over CPUs."""

    name = "nic"

    def __init__(self, nics: int, queues: int, cpus: int) -> None:
        rnd = random.Random(2)
        links, infos, qstats, irqs = [], {}, {}, []
        counters = ("bytes", "packets", "errors", "dropped", "missed_errors")
        for i in range(nics):
            name = f"ens{i}f0np0"
            stats = {f"{d}_{k}": rnd.randrange(10**12) for d in ("rx", "tx") for k in counters}
            links.append(LinkStats(name, i + 2, 9000, "up", "", stats=stats))
            pci = f"0000:{0x3B + i:02x}:00.0"
            infos[name] = NicInfo(name, "mlx5_core", pci, str(i % 2), 12.5e9, ())
            qstats[name] = [
                QueueStat(d, q, k, rnd.randrange(10**12))
                for q in range(queues)
                for d in ("rx", "tx")
                for k in ("bytes", "packets")
            ]
            for q in range(queues):
                cpu = (i * queues + q) % cpus
                irqs.append(
                    NicIrq(
                        name,
                        str(100 + i * queues + q),
                        "combined",
                        q,
                        {c: (rnd.randrange(10**9) if c == cpu else 0) for c in range(cpus)},
                        str(cpu),
                        str(cpu),
                    )
                )
        self.snapshot = NicSnapshot(
            links=links,
            infos=infos,
            queues=qstats,
            irqs=irqs,
            softirqs={
                k: {c: rnd.randrange(10**9) for c in range(cpus)} for k in ("NET_RX", "NET_TX")
            },
            softnet=[SoftnetRow(c, rnd.randrange(10**9), 0, 5, 0, 0) for c in range(cpus)],
            snmp={
                "Tcp": {"InSegs": 1, "OutSegs": 2, "RetransSegs": 3, "InErrs": 0},
                "TcpExt": {"TCPTimeouts": 1, "TCPSynRetrans": 0, "ListenDrops": 0},
            },
        )

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its sources."""
        yield from render_nic(self.snapshot)


class SyntheticPcie:
    """The pcie exporter's rendering: 48 disks' links behind 3 HBAs, NIC functions two per
    card, each card in its own root port, one MSI-X vector per CPU per HBA."""

    name = "pcie"

    def __init__(self, disks: int, nics: int, cpus: int, hbas: int = 3) -> None:
        nodes: dict[str, Node] = {}
        links: dict[str, Link] = {}

        def add(pci: str, role: str, upstream: str, root: str, speed: float, width: int) -> None:
            nodes[pci] = Node(pci, (), role, upstream, root, "d", role == "root_port", speed, width)
            links[pci] = Link(speed, width, speed, width, speed * width / 8 * 128 / 130, False)

        irqs = []
        for h in range(hbas):
            port, hba = f"0000:00:{h + 1:02x}.0", f"0000:{h + 1:02x}:00.0"
            add(port, "root_port", "", port, 8e9, 16)
            add(hba, "controller", port, port, 8e9, 8)
            for c in range(cpus):
                irqs.append(ControllerIrq(hba, str(100 + h * cpus + c), {c: 10**6}, str(c), str(c)))
        for n in range(nics):
            port = f"0000:80:{n // 2 + 1:02x}.0"
            if port not in nodes:
                add(port, "root_port", "", port, 16e9, 16)
            add(f"0000:{0x81 + n // 2:02x}:00.{n % 2}", "nic", port, port, 16e9, 16)
        rates = [(f"sd{i}", "sas", 12e9) for i in range(disks)]
        self.snapshot = PcieSnapshot(nodes, links, rates, irqs)

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its sources."""
        yield from render_pcie(self.snapshot)


def pcie_series_budget(disks: int, nics: int, cpus: int, hbas: int = 3) -> int:
    """The documented formula (docs/exporters/pcie.md) for SyntheticPcie's host."""
    functions = hbas + hbas + nics + (nics + 1) // 2
    return 7 * functions + disks + hbas * cpus + hbas * cpus


def nic_series_budget(nics: int, queues: int, cpus: int) -> int:
    """The documented upper bound (docs/exporters/nic.md) of the nic exporter's series."""
    return 12 * nics + 7 * nics * queues + nics * cpus + 5 * cpus + 10


def blockio_series_budget(disks: int, ops: int, bounds: int, size_histogram: bool) -> int:
    """The documented series count (docs/exporters/blockio.md) of the blockio exporter."""
    per_op = (bounds + 3) + 3 + ((SIZE_SLOTS + 2) if size_histogram else 0)
    return disks * (4 + ops * per_op) + 4  # backend_info, missed events, 2 run-time series


def _series(registry: CollectorRegistry) -> int:
    body = generate_latest(registry).decode()
    return sum(1 for line in body.splitlines() if line and not line.startswith("#"))


def main() -> None:
    """Time repeated renders, alternating with a baseline, and print medians."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument(
        "--ops", default="read,write", help="ops each disk does (of " + ",".join(OPS) + ")"
    )
    ap.add_argument("--size-histogram", action="store_true", help="blockio.size_histogram: true")
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--cpus", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    ops = tuple(o for o in args.ops.split(",") if o)
    blockio_only = CollectorRegistry(auto_describe=False)
    blockio_only.register(SyntheticBlockio(args.disks, ops, args.size_histogram))
    blockio_series = _series(blockio_only)
    bbudget = blockio_series_budget(
        args.disks, len(ops), len(DEFAULT_LAT_BOUNDS_SECONDS), args.size_histogram
    )
    print(
        f"blockio: disks={args.disks} ops={','.join(ops)} size_histogram={args.size_histogram} "
        f"series={blockio_series} (formula {bbudget}; goal <= 2500 for 48 disks x read,write: "
        f"{'met' if blockio_series <= 2500 else 'over'})"
    )
    nic_only = CollectorRegistry(auto_describe=False)
    nic_only.register(SyntheticNic(args.nics, args.queues, args.cpus))
    nic_series = _series(nic_only)
    budget = nic_series_budget(args.nics, args.queues, args.cpus)
    print(
        f"nic: nics={args.nics} queues={args.queues} cpus={args.cpus} series={nic_series} "
        f"(budget {budget}: {'within' if nic_series <= budget else 'OVER'})"
    )
    pcie_only = CollectorRegistry(auto_describe=False)
    pcie_only.register(SyntheticPcie(args.disks, args.nics, args.cpus))
    pcie_series = _series(pcie_only)
    pbudget = pcie_series_budget(args.disks, args.nics, args.cpus)
    print(
        f"pcie: disks={args.disks} hbas=3 nics={args.nics} cpus={args.cpus} "
        f"series={pcie_series} (formula {pbudget})"
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        ExportersCollector(
            [
                SyntheticBlockio(args.disks, ops, args.size_histogram),
                SyntheticNic(args.nics, args.queues, args.cpus),
                SyntheticPcie(args.disks, args.nics, args.cpus),
            ]
        )
    )
    body = generate_latest(registry)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    renderer = TextRenderer(registry)
    # Same bytes (but for the ever-changing duration), or the comparison means nothing.
    dur = re.compile(rb"(wattbit_exporter_duration_seconds\{[^}]*\}) \S+")
    assert dur.sub(b"", renderer.render()) == dur.sub(b"", body)
    # Alternate the two renderers in one run so drift on the machine hits both alike.
    # The same host without the pcie exporter, to see what it adds to a render.
    without = CollectorRegistry(auto_describe=False)
    without.register(
        ExportersCollector(
            [
                SyntheticBlockio(args.disks, ops, args.size_histogram),
                SyntheticNic(args.nics, args.queues, args.cpus),
            ]
        )
    )
    without_pcie = TextRenderer(without)
    times: dict[str, list[float]] = {"wattbit": [], "generate_latest": [], "without pcie": []}
    for _ in range(args.repeat):
        for name, fn in (
            ("wattbit", renderer.render),
            ("generate_latest", lambda: generate_latest(registry)),
            ("without pcie", without_pcie.render),
        ):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(
        f"host: disks={args.disks} ops={len(ops)} + nic and pcie above: series={series} "
        f"bytes={len(body)}"
    )
    for name, ts in times.items():
        med = statistics.median(ts) * 1e3
        p90 = statistics.quantiles(ts, n=10)[-1] * 1e3
        print(f"{name:16s} render median={med:6.2f} ms p90={p90:6.2f} ms over {args.repeat} runs")
    ratio = statistics.median(times["generate_latest"]) / statistics.median(times["wattbit"])
    print(f"speed-up {ratio:.1f}x; goal: wattbit median <= 30 ms")


if __name__ == "__main__":
    main()
