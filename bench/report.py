"""Time of `wattbit report` for a 24-hour run scraped every second (4 hosts, 16 outlets).

Run: .venv/bin/python bench/report.py [--hours 24] [--repeat 3] [--keep DIR]
     [--baseline TREE]   (TREE: another checkout, e.g. `git archive REV | tar -x -C TREE`:
                          its report is timed too, alternating with this one's, same data)
Goal: <= 10 s end to end (the median of --repeat runs of the real command line, Python start,
Prometheus queries, arithmetic, charts and files included).

The data set is synthetic and generated here: per host 2 interfaces (tx, rx, with their link
speed) and 4 disks (busy, read and write bytes, requests, wattbit_disk_info on one controller),
4 CPUs of node_exporter's node_cpu_seconds_total (user, system, softirq, idle), for the report's
verdict (what limited it); 4 PDUs of 4 outlets (3 per host, the 4th a switch or display),
three PDUs with energy counters and one with watts only (so one host's energy is integrated).
It is written as OpenMetrics in 2-hour files (promtool 2.42 re-reads its whole input once per
2-hour block), loaded with `promtool tsdb create-blocks-from openmetrics`, and served by a
real Prometheus on 127.0.0.1 with a temporary data directory; everything is removed at the
end unless --keep is given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.harness import in_turn, print_command, ratio  # noqa: E402
from tests.support.realparts import prometheus_on_blocks  # noqa: E402  (the same helper the report tests use)

BLOCK = 7200
HOSTS = ["mover1", "mover2", "mover3", "mover4"]
GOAL_SECONDS = 10.0


def host_traffic(seed: int, n: int) -> list[float]:
    """Gbit/s per second: a stepwise random walk between 0 and ~40 with idle pauses."""
    rnd = random.Random(seed)
    out: list[float] = []
    level = 10.0
    while len(out) < n:
        walk = min(40.0, max(0.5, level + rnd.uniform(-8, 8)))
        level = 0.0 if rnd.random() < 0.1 else walk
        out += [max(0.0, level + rnd.uniform(-0.3, 0.3)) for _ in range(rnd.randint(20, 300))]
    return out[:n]


def series_lines(t0: int, n: int) -> dict[str, list[tuple[str, list[float]]]]:
    """Every series' values per second, grouped by metric family: {family: [(labels, values)]}."""
    fams: dict[str, list[tuple[str, list[float]]]] = {
        "wattbit_nic_bytes": [],
        "wattbit_disk_busy_seconds": [],
        "wattbit_disk_io_bytes": [],
        "wattbit_disk_ios": [],
        "wattbit_disk_info": [],
        "wattbit_nic_link_speed_bytes_per_second": [],
        "node_cpu_seconds": [],
        "wattbit_pdu_outlet_power_watts": [],
        "wattbit_pdu_outlet_energy_joules": [],
        "wattbit_run_start_time_seconds": [],
        "wattbit_run_end_time_seconds": [],
        "wattbit_run_active": [],
    }
    rnd = random.Random(1)
    for hi, h in enumerate(HOSTS):
        g = host_traffic(hi, n)
        for iface, share in (("ens1f0", 0.5), ("ens1f1", 0.5)):
            for d, ds in (("tx", 0.8), ("rx", 0.2)):
                acc, vals = 1e12, []
                for x in g:
                    acc += round(x * 1e9 / 8 * share * ds)
                    vals.append(acc)
                labels = f'host="{h}",interface="{iface}",direction="{d}"'
                fams["wattbit_nic_bytes"].append((labels, vals))
            fams["wattbit_nic_link_speed_bytes_per_second"].append(
                (f'host="{h}",interface="{iface}",source="kernel"', [25e9 / 8] * n)
            )
        for di in range(4):
            dev = f"nvme{di}n1"
            busy_acc, rd_acc, wr_acc = 1e5, 1e13, 1e13
            busy, rd, wr = [], [], []
            for x in g:
                busy_acc += min(1.0, x / 40 + 0.02)
                rd_acc += round(x * 1e9 / 8 / 4)
                wr_acc += 4096 * 10
                busy.append(busy_acc)
                rd.append(rd_acc)
                wr.append(wr_acc)
            fams["wattbit_disk_busy_seconds"].append((f'host="{h}",device="{dev}"', busy))
            fams["wattbit_disk_io_bytes"].append((f'host="{h}",device="{dev}",op="read"', rd))
            fams["wattbit_disk_io_bytes"].append((f'host="{h}",device="{dev}",op="write"', wr))
            ios, acc = [], 1e6
            for x in g:
                acc += round(x * 1e9 / 8 / 4 / 131072) + 10
                ios.append(acc)
            fams["wattbit_disk_ios"].append((f'host="{h}",device="{dev}",op="read"', ios))
            fams["wattbit_disk_info"].append(
                (f'host="{h}",device="{dev}",controller="0000:3b:00.0",parent=""', [1.0] * n)
            )
        for cpu in range(4):
            # CPU 0 takes the NICs' softirq work: busy with the traffic, the others little
            shares = {"user": (0.05, 0.0), "system": (0.02, 0.006), "softirq": (0.0, 0.012)}
            if cpu:
                shares = {"user": (0.05, 0.0), "system": (0.02, 0.001), "softirq": (0.0, 0.0)}
            accs = dict.fromkeys([*shares, "idle"], 1e5)
            cpu_vals: dict[str, list[float]] = {m: [] for m in accs}
            for x in g:
                used = 0.0
                for m, (base, per_gbit) in shares.items():
                    v = min(1.0 - used, base + per_gbit * x)
                    used += v
                    accs[m] += v
                    cpu_vals[m].append(round(accs[m], 3))
                accs["idle"] += 1.0 - used
                cpu_vals["idle"].append(round(accs["idle"], 3))
            for m, cv in cpu_vals.items():
                fams["node_cpu_seconds"].append((f'host="{h}",cpu="{cpu}",mode="{m}"', cv))
        pdu = f"pdu{hi + 1}"
        for o in range(1, 5):
            if o <= 3:
                host, comp = h, "server"
                watts = [90 + 2.0 * x + rnd.uniform(-2, 2) for x in g]
            else:
                host, comp = "", "switch" if hi % 2 == 0 else "display"
                watts = [150 + rnd.uniform(-1, 1) for _ in g]
            labels = (
                f'pdu="{pdu}",outlet="{o}",outlet_name="{pdu}-{o}",host="{host}",component="{comp}"'
            )
            fams["wattbit_pdu_outlet_power_watts"].append((labels, watts))
            if hi < 3:  # pdu4 has no energy counters: its outlets' energy is integrated
                acc, energy = 3.6e9, []
                for w in watts:
                    acc += w
                    energy.append(acc)
                fams["wattbit_pdu_outlet_energy_joules"].append((labels, energy))
    end = t0 + n - 1
    fams["wattbit_run_start_time_seconds"].append(('run="bench"', [float(t0)] * n))
    fams["wattbit_run_end_time_seconds"].append(('run="bench"', [float(end)] * n))
    fams["wattbit_run_active"].append(('run="bench"', [1.0] * n))
    return fams


def write_openmetrics(fams: dict, t0: int, n: int, directory: Path) -> list[Path]:
    """One OpenMetrics file per 2-hour block."""
    files = []
    for b0 in range(0, n, BLOCK):
        b1 = min(n, b0 + BLOCK)
        path = directory / f"block{b0 // BLOCK:03d}.om"
        with path.open("w") as f:
            for fam, series in fams.items():
                kind = (
                    "counter"
                    if fam.endswith(("_bytes", "_seconds", "_joules", "_ios"))
                    else "gauge"
                )
                if fam.startswith("wattbit_run_") or fam.endswith("_per_second"):
                    kind = "gauge"
                name = fam + "_total" if kind == "counter" else fam
                f.write(f"# TYPE {fam} {kind}\n")
                for labels, vals in series:
                    f.write(
                        "".join(f"{name}{{{labels}}} {vals[i]!r} {t0 + i}\n" for i in range(b0, b1))
                    )
            f.write("# EOF\n")
        files.append(path)
    return files


def prometheus(data: Path, directory: Path) -> contextlib.AbstractContextManager[str]:
    """A real Prometheus over the blocks on 127.0.0.1, always stopped (tests/support/realparts)."""
    return prometheus_on_blocks(data, directory, "1s", timeout=120)


def main() -> int:
    """Generate, load, time, clean up."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the data and reports in this directory")
    ap.add_argument("--baseline", type=Path, help="a checkout to time too, alternately")
    args = ap.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"bench/report: {tool} is not installed (Debian package prometheus)")
            return 1
    n = int(args.hours * 3600) + 1
    # whole 2-hour blocks, ending two hours ago
    t0 = (int(time.time()) - 7200 - n) // BLOCK * BLOCK
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wattbit-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.monotonic()
        fams = series_lines(t0, n)
        n_series = sum(len(v) for v in fams.values())
        files = write_openmetrics(fams, t0, n, work)
        del fams
        gen = time.monotonic() - t
        size = sum(f.stat().st_size for f in files)
        print(f"data: {args.hours:g} h at 1 s, {len(HOSTS)} hosts, 16 outlets, {n_series} series, "
              f"{n_series * n / 1e6:.1f} M samples, {size / 1e6:.0f} MB OpenMetrics "
              f"(generated in {gen:.0f} s)")  # fmt: skip
        t = time.monotonic()
        data = work / "tsdb"

        def load(f: Path) -> None:
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(f), str(data)],
                check=True, capture_output=True,
            )  # fmt: skip
            f.unlink()

        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(load, files))
        print(f"promtool: {len(files)} blocks in {time.monotonic() - t:.0f} s")
        with prometheus(data, work) as url:
            trees = {"this": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
            times: dict[str, list[float]] = {k: [] for k in trees}
            for i in range(args.repeat):
                for name in in_turn(list(trees), i):  # AB BA ...: the same load for both
                    tree = trees[name]
                    out = work / f"out-{name}{i}"
                    t = time.monotonic()
                    r = subprocess.run(
                        [sys.executable, "-m", "collector.cli", "report", "bench", "--prometheus",
                         url, "--out", str(out)],
                        cwd=tree, capture_output=True, text=True,
                    )  # fmt: skip
                    dt = time.monotonic() - t
                    if r.returncode != 0:
                        print(r.stdout, r.stderr)
                        return 1
                    doc = json.loads((out / "bench.json").read_text())
                    times[name].append(dt)
                    parts = ", ".join(f"{k} {v:.2f}" for k, v in doc["timings_seconds"].items())
                    reqs, step = doc["prometheus_requests"], doc["step_seconds"]
                    print(f"run {i + 1} ({name}): {dt:.2f} s end to end (analysis: {parts}; "
                          f"{reqs} requests, step {step:g} s; load average "
                          f"{os.getloadavg()[0]:.1f})")  # fmt: skip
                    if name == "this" and i == args.repeat - 1:
                        print("\n".join(r.stdout.splitlines()[:8]))
            med = statistics.median(times["this"])
            verdict = "meets" if med <= GOAL_SECONDS else "MISSES"
            ts = times["this"]
            print(f"median {med:.2f} s of {len(ts)} (min {min(ts):.2f}, max "
                  f"{max(ts):.2f}): {verdict} the {GOAL_SECONDS:g} s goal")  # fmt: skip
            if args.baseline:
                base = statistics.median(times["baseline"])
                print(f"baseline ({args.baseline}): median {base:.2f} s; this / baseline "
                      f"{ratio(med, base) or float('nan'):.3f}")  # fmt: skip
            print_command()
            return 0 if med <= GOAL_SECONDS or math.isnan(med) else 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
