"""Render time of the agent's /metrics for a large host (synthetic content).

Run: .venv/bin/python bench/agent_scrape.py [--disks 48] [--ops read,write]
     [--size-histogram] [--nics 8] [--queues 16] [--cpus 64] [--repeat 200]
Goals: <= 30 ms per render for 48 disks (with the NICs and the pcie exporter's links); the
blockio series of 48 disks doing reads and writes <= 2,500 by default (issue 15's budget,
formula in docs/exporters/blockio.md); the NIC part (8 NICs x 16 queues) within the series
budget of docs/exporters/nic.md; the pcie part as docs/exporters/pcie.md's formula says.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, print_command, ratio  # noqa: E402
from collector.web.exposition import TextRenderer  # noqa: E402
from exporters.base import Exporter, ExportersCollector  # noqa: E402
from exporters.blockio.model import DEFAULT_LAT_BOUNDS_SECONDS, OPS, SIZE_SLOTS  # noqa: E402
from tests.support.synthetic import SyntheticBlockio, SyntheticNic, SyntheticPcie  # noqa: E402


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


def _series(body: bytes) -> int:
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def _series_of(exporter: Exporter) -> int:
    """The series one exporter renders on its own (no wattbit_exporter_* of the wrapper)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return _series(generate_latest(registry))


def _agent(*exporters: Exporter) -> CollectorRegistry:
    """A registry as the agent's: the exporters behind ExportersCollector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector(list(exporters)))
    return registry


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
    blockio_series = _series_of(SyntheticBlockio(args.disks, ops, args.size_histogram))
    bbudget = blockio_series_budget(
        args.disks, len(ops), len(DEFAULT_LAT_BOUNDS_SECONDS), args.size_histogram
    )
    print(
        f"blockio: disks={args.disks} ops={','.join(ops)} size_histogram={args.size_histogram} "
        f"series={blockio_series} (formula {bbudget}; goal <= 2500 for 48 disks x read,write: "
        f"{'met' if blockio_series <= 2500 else 'over'})"
    )
    nic_series = _series_of(SyntheticNic(args.nics, args.queues, args.cpus))
    budget = nic_series_budget(args.nics, args.queues, args.cpus)
    print(
        f"nic: nics={args.nics} queues={args.queues} cpus={args.cpus} series={nic_series} "
        f"(budget {budget}: {'within' if nic_series <= budget else 'OVER'})"
    )
    pcie_series = _series_of(SyntheticPcie(args.disks, args.nics, args.cpus))
    pbudget = pcie_series_budget(args.disks, args.nics, args.cpus)
    print(
        f"pcie: disks={args.disks} hbas=3 nics={args.nics} cpus={args.cpus} "
        f"series={pcie_series} (formula {pbudget})"
    )
    registry = _agent(
        SyntheticBlockio(args.disks, ops, args.size_histogram),
        SyntheticNic(args.nics, args.queues, args.cpus),
        SyntheticPcie(args.disks, args.nics, args.cpus),
    )
    body = generate_latest(registry)
    series = _series(body)
    renderer = TextRenderer(registry)
    # Same bytes (but for the ever-changing duration), or the comparison means nothing.
    dur = re.compile(rb"(wattbit_exporter_duration_seconds\{[^}]*\}) \S+")
    assert dur.sub(b"", renderer.render()) == dur.sub(b"", body)
    # Alternate the two renderers in one run so drift on the machine hits both alike.
    # The same host without the pcie exporter, to see what it adds to a render.
    without_pcie = TextRenderer(
        _agent(
            SyntheticBlockio(args.disks, ops, args.size_histogram),
            SyntheticNic(args.nics, args.queues, args.cpus),
        )
    )
    renders = {
        "wattbit": renderer.render,
        "generate_latest": lambda: generate_latest(registry),
        "without pcie": without_pcie.render,
    }
    times: dict[str, list[float]] = {name: [] for name in renders}
    for _, name in alternate(list(renders), args.repeat):  # ABC CBA ABC ...
        t0 = time.perf_counter()
        renders[name]()
        times[name].append(time.perf_counter() - t0)
    print(
        f"host: disks={args.disks} ops={len(ops)} + nic and pcie above: series={series} "
        f"bytes={len(body)}"
    )
    for name, ts in times.items():
        med = statistics.median(ts) * 1e3
        p90 = statistics.quantiles(ts, n=10)[-1] * 1e3
        print(f"{name:16s} render median={med:6.2f} ms p90={p90:6.2f} ms over {args.repeat} runs")
    meds = {name: statistics.median(ts) for name, ts in times.items()}
    speedup = ratio(meds["generate_latest"], meds["wattbit"])
    print(f"speed-up {speedup or float('nan'):.1f}x; goal: wattbit median <= 30 ms")
    print_command()


if __name__ == "__main__":
    main()
