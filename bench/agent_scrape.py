"""Render time of the agent's /metrics for a large host (synthetic map content).

Run: PYTHONPATH=. .venv/bin/python bench/agent_scrape.py [--disks 48] [--repeat 200]
Goal: <= 30 ms per render for 48 disks x 4 ops. Reports the series count per host too.
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

from collector.exposition import TextRenderer
from exporters.base import ExportersCollector
from exporters.blockio.exporter import render
from exporters.blockio.model import LAT_SLOTS, OPS, SIZE_SLOTS, DeviceStats, OpStats
from exporters.blockio.topology import DiskInfo, disk_info_metric


def synthetic_devices(n: int, seed: int = 1) -> dict[str, DeviceStats]:
    """n NVMe-like disks, every op with traffic, histograms filled across all slots."""
    rnd = random.Random(seed)
    devices = {}
    for i in range(n):
        ops = {}
        for op in OPS:
            lat = [rnd.randrange(0, 10**9) for _ in range(LAT_SLOTS)]
            size = [rnd.randrange(0, 10**9) for _ in range(SIZE_SLOTS)]
            ops[op] = OpStats(
                ios=sum(lat),
                bytes=rnd.randrange(10**15),
                errors=rnd.randrange(3),
                lat_slots=lat,
                lat_sum_seconds=rnd.random() * 1e6,
                size_slots=size,
                size_sum_bytes=rnd.randrange(10**15),
            )
        devices[f"nvme{i}n1"] = DeviceStats(ops=ops, busy_seconds=rnd.random() * 1e6, inflight=3)
    return devices


class SyntheticBlockio:
    """The blockio exporter's rendering over fixed synthetic content (no kernel involved)."""

    name = "blockio"

    def __init__(self, n: int) -> None:
        self.devices = synthetic_devices(n)
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
        yield from render(self.devices, "bcc", "", {"issue": 0, "complete": 0, "requeue": 0})
        yield disk_info_metric(self.infos)


def main() -> None:
    """Time repeated renders, alternating with a baseline, and print medians."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector([SyntheticBlockio(args.disks)]))
    body = generate_latest(registry)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    renderer = TextRenderer(registry)
    # Same bytes (but for the ever-changing duration), or the comparison means nothing.
    dur = re.compile(rb"(wattbit_exporter_duration_seconds\{[^}]*\}) \S+")
    assert dur.sub(b"", renderer.render()) == dur.sub(b"", body)
    # Alternate the two renderers in one run so drift on the machine hits both alike.
    times: dict[str, list[float]] = {"wattbit": [], "generate_latest": []}
    for _ in range(args.repeat):
        for name, fn in (
            ("wattbit", renderer.render),
            ("generate_latest", lambda: generate_latest(registry)),
        ):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"disks={args.disks} ops={len(OPS)} series={series} bytes={len(body)}")
    for name, ts in times.items():
        med = statistics.median(ts) * 1e3
        p90 = statistics.quantiles(ts, n=10)[-1] * 1e3
        print(f"{name:16s} render median={med:6.2f} ms p90={p90:6.2f} ms over {args.repeat} runs")
    ratio = statistics.median(times["generate_latest"]) / statistics.median(times["wattbit"])
    print(f"speed-up {ratio:.1f}x; goal: wattbit median <= 30 ms")


if __name__ == "__main__":
    main()
