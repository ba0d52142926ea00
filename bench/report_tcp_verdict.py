"""Cost of the verdict's TCP per flow key (issue 31): the pure stage over a 24-hour window.

Run: .venv/bin/python bench/report_tcp_verdict.py [--steps 8640] [--keys 21] [--rounds 5]

The report's verdict and transfers section (collector/report/verdict/, transfers.py) over
synthetic per-step data — 4 hosts, each 2 interfaces with link speeds and 4 CPUs, and with
``--keys`` flow keys of the tcp exporter (its default top-K 20 plus `other`) — against the same
data without flow keys, alternating (A B, B A, ...), medians and their ratio. Gathering is not
timed: it is the store's (bench/report.py times the whole command).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.harness import alternate, print_command, ratio  # noqa: E402
from collector.report.document import HostScope  # noqa: E402
from collector.report.series import NIC, Grid, PerSeries, Track, VerdictData  # noqa: E402
from collector.report.transfers import transfers  # noqa: E402
from collector.report.verdict import usage, verdict  # noqa: E402

HOSTS = ["mover1", "mover2", "mover3", "mover4"]


def data(n: int, keys: int, seed: int = 1) -> tuple[list[Track], VerdictData]:
    """Tracks and verdict data of the window (flow keys only when ``keys`` > 0)."""
    rnd = random.Random(seed)
    tracks: list[Track] = []
    rates: dict[str, PerSeries] = {}
    speed: dict[tuple[str, str], list[float | None]] = {}
    for h in HOSTS:
        for i in ("eth0", "eth1"):
            speed[(h, i)] = [1.25e9] * n
            for d in ("rx", "tx"):
                vals: list[float | None] = [rnd.uniform(1e8, 1e9) for _ in range(n)]
                tracks.append(Track(NIC, {"host": h, "interface": i, "direction": d}, rates=vals))
        for c in range(4):
            idle: list[float | None] = [rnd.uniform(0.1, 0.9) for _ in range(n)]
            rates.setdefault("node_cpu", []).append(
                ({"host": h, "cpu": str(c), "mode": "idle"}, idle)
            )
            rates.setdefault("nic_irqs", []).append(({"host": h, "cpu": str(c)}, [1e3] * n))
        for k in range(keys):
            lab = {"host": h, "peer": f"10.0.{k}.0/24", "port": "2811"}
            for what in ("flow_busy", "flow_rwnd", "flow_sndbuf", "flow_sent", "flow_received",
                         "flow_retrans", "flow_segs"):  # fmt: skip
                vals = [rnd.uniform(0.0, 1e6 if "flow_se" in what else 1.0) for _ in range(n)]
                rates.setdefault(what, []).append((dict(lab), vals))
    return tracks, VerdictData(nic_speed=speed, rates=rates)


def once(grid: Grid, tracks: list[Track], vd: VerdictData) -> float:
    """Seconds of usage, the whole window's and 4 phases' verdicts per host, and transfers."""
    t0 = time.perf_counter()
    u = usage(grid, tracks, vd)
    quarter = grid.n // 4
    for h in HOSTS:
        verdict(u, h, range(grid.n))
        for p in range(4):
            verdict(u, h, range(p * quarter, (p + 1) * quarter))
    transfers(u, dict[str, HostScope](), range(grid.n))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=8640)
    ap.add_argument("--keys", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    grid = Grid.make(0.0, 10.0 * args.steps, 10.0)
    cases = {"with flow keys": data(args.steps, args.keys), "without": data(args.steps, 0)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _r, name in alternate(list(cases), args.rounds):
        times[name].append(once(grid, *cases[name]))
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.2f} s ({', '.join(f'{t:.2f}' for t in ts)})")
    r = ratio(statistics.median(times["with flow keys"]), statistics.median(times["without"]))
    print(f"ratio {r:.2f}" if r is not None else "ratio ?")
    print_command()


if __name__ == "__main__":
    main()
