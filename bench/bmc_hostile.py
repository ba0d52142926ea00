"""A real `wattbit collector` beside BMCs whose every document is padded to just under
max_body with [{},{},…] (issue 34: 33 such documents took it to a 4.3 GB peak RSS, 62 % of a
CPU; three such BMCs to 4.5 GB, 94 % and a scrape p99 of 1.2 s).

Run: .venv/bin/python bench/bmc_hostile.py [--seconds 60] [--bmcs 1,3] [--size 4194304]
     [--rounds 1]   (each count once a round, the order reversed every other round)

The hostile BMCs are tests/support/hostilebmc.py --mode bloat (synthetic by nature: a valid
Redfish tree of 32 chassis, each document padded to --size - 1 KiB), polled every 10 s with
`max_body` = --size, beside one healthy BMC (HPE DL325's real mockup by sushy-static). For
each count of hostile BMCs, one collector runs --seconds while /metrics is scraped every
second; reported: its peak RSS (VmHWM), its CPU share over the run, the scrape latencies'
median and p99, and whether the healthy BMC stayed up. Targets (issue 34): one hostile BMC
under 200 MB and 20 % of a CPU with p99 under 100 ms; three under 300 MB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    alternate,
    bench_lock,
    commit,
    cpu_seconds,
    interruptible,
    machine,
    print_command,
    proc_status,
    table,
)
from tests.support.bmcs import MOCKUPS, HostileBmc, SushyStatic
from tests.support.realparts import Collector, running


def _config(state: Path, urls: list[str], healthy: str, size: int) -> str:
    bmcs = "".join(
        f"  - name: bloat-{i}\n    protocol: redfish\n    address: {url}\n"
        "    allow_plain_http: true\n    auth: basic\n    username: wattbit\n"
        f"    password_env: WB_BENCH_PW\n    host: bloat-{i}\n    max_body: {size}\n"
        for i, url in enumerate(urls)
    )
    bmcs += (
        f"  - name: healthy\n    protocol: redfish\n    address: {healthy}\n"
        "    allow_plain_http: true\n    auth: basic\n    username: wattbit\n"
        "    password_env: WB_BENCH_PW\n    host: healthy\n"
    )
    return f"interval: 10s\nstate_dir: {state}\nbmcs:\n{bmcs}"


def run(n: int, seconds: float, size: int, tmp: Path) -> list[object]:
    """One collector beside n hostile BMCs: [n, peak MB, CPU %, p50 ms, p99 ms, healthy up]."""
    extra = ["--size", str(size - 1024)]
    hostile = [HostileBmc("bloat", tmp, extra=extra) for _ in range(n)]
    healthy = SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp)
    try:
        cfg = _config(tmp / f"state-{n}", [h.url for h in hostile], healthy.url, size)
        coll = Collector(cfg, tmp, env={"WB_BENCH_PW": "bench-only-pw"})
        with running(coll):
            cpu0, t0 = cpu_seconds(coll.proc.pid), time.monotonic()
            latencies: list[float] = []
            up: list[bool] = []
            while time.monotonic() - t0 < seconds:
                s = time.perf_counter()
                with urllib.request.urlopen(coll.url, timeout=10) as r:
                    body = r.read().decode()
                latencies.append(time.perf_counter() - s)
                up.append('wattbit_bmc_up{bmc="healthy"} 1.0' in body)
                time.sleep(max(0.0, 1.0 - (time.perf_counter() - s)))
            cpu = (cpu_seconds(coll.proc.pid) - cpu0) / (time.monotonic() - t0)
            peak = proc_status(coll.proc.pid).get("VmHWM", 0) / 1024
    finally:
        healthy.stop()
        for h in hostile:
            h.stop()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return [
        n,
        f"{peak:.0f}",
        f"{100 * cpu:.1f}",
        f"{1000 * statistics.median(latencies):.1f}",
        f"{1000 * p99:.1f}",
        f"{sum(up)}/{len(up)}",
    ]


def main() -> int:
    """Measure each count of hostile BMCs in turn and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--bmcs", default="1,3")
    ap.add_argument("--size", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--rounds", type=int, default=1, help="each count per round, alternating")
    args = ap.parse_args()
    print(machine(), f"commit {commit()}")
    rows = []
    with interruptible(), bench_lock(), tempfile.TemporaryDirectory() as d:
        counts = [int(x) for x in args.bmcs.split(",")]
        for _, n in alternate(counts, args.rounds):  # 1 3, 3 1, ...: a row per run
            rows.append(run(n, args.seconds, args.size, Path(d)))
    table(["hostile BMCs", "peak RSS MB", "CPU %", "p50 ms", "p99 ms", "healthy up"], rows)
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
