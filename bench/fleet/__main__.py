"""The fleet bench's run: the command line, the phases, the fits and the summary."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench.fleet as package
from bench.fleet.common import RECORDING, STORES, TOOLS, scrape, total
from bench.fleet.sim import serve
from bench.fleet.store import Fleet, phase
from bench.harness import (
    Children,
    bench_lock,
    cpu_model,
    free_port,
    in_turn,
    print_command,
)
from collector.demo.procs import wait_for
from tests.support.synthetic import (
    collector_yml,
    record_exposition,
    series_of,
)

# --- the run --------------------------------------------------------------------------------------


def fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares y = a + b x (None with fewer than two distinct x)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def measured_on() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = cpu_model()
    mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    versions = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package} ${Version}\n", "prometheus", "victoria-metrics"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        versions = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if " " in ln)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.fleet", description=(package.__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--hosts", default="50,100,200", help="fleet sizes, comma-separated")
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--interval", type=float, default=15.0, help="scrape, poll and rule interval")
    ap.add_argument("--warmup", type=float, default=45.0, help="seconds after all targets are up")
    ap.add_argument("--measure", type=float, default=120.0, help="measured window, seconds")
    ap.add_argument("--reports", type=int, default=1, help="wattbit report runs per phase")
    ap.add_argument("--hosts-per-pdu", type=int, default=5)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--cpus", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 hosts, short phases")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--keep", type=Path, help="keep the data and logs in this directory")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the simulator child
    args = ap.parse_args(argv)
    if args.quick:
        args.hosts, args.interval, args.warmup, args.measure, args.reports = (
            "10",
            5.0,
            10.0,
            30.0,
            1,
        )
    args.sizes = sorted({int(x) for x in args.hosts.split(",")})
    args.store_list = [s for s in args.stores.split(",") if s]
    unknown = set(args.store_list) - set(STORES)
    if unknown or not args.sizes or min(args.sizes) < 1:
        ap.error(f"--stores: some of {', '.join(STORES)}; --hosts: positive numbers")
    return args


def start_fleet(
    procs: Children, work: Path, hosts: int, sim: dict[str, Any], args: argparse.Namespace
) -> Fleet:
    """The collector for `hosts` hosts (its PDUs polled once), beside the running simulator."""
    pdus = math.ceil(hosts / args.hosts_per_pdu)
    d = work / f"collector-{hosts}"
    d.mkdir()
    cfg = d / "collector.yml"
    cfg.write_text(
        collector_yml(sim["pdus"][:pdus], hosts, args.hosts_per_pdu, args.interval, d / "state")
    )
    port = free_port()
    name = f"collector-{hosts}"
    p = procs.start(
        name,
        [sys.executable, "-m", "collector.cli", "collector", "--config", str(cfg),
         "--listen", f"127.0.0.1:{port}"],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(
        lambda: total(scrape(url), "wattbit_pdu_up") == pdus,
        60,
        f"collector: {pdus} PDUs polled",
        alive=procs.alive(name),
        interval=0.5,
    )
    return Fleet(hosts, sim["hosts"][:hosts], sim["sink"], port, procs.procs["sim"].pid, p.pid)


def main(argv: list[str] | None = None) -> int:
    """Record, serve, measure each (N, store), print and fit."""
    args = parse_args(argv)
    if args.serve:
        asyncio.run(serve(json.loads(args.serve.read_text())))
        return 0
    missing = [t for s in args.store_list for t in TOOLS[s] if shutil.which(t) is None]
    if missing:
        print(f"bench/fleet: not installed: {', '.join(missing)} (Debian packages prometheus, "
              "victoria-metrics)")  # fmt: skip
        return 1
    work = args.keep or Path(tempfile.mkdtemp(prefix="wattbit-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    procs = Children(work)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    results: list[dict[str, Any]] = []
    try:
        text = record_exposition(args.disks, args.nics, args.queues, args.cpus)
        (work / "host.prom").write_text(text)
        per_host = series_of(text)
        print(f"host exposition: {args.disks} disks, {args.nics} NICs x {args.queues} queues, "
              f"{args.cpus} CPUs: {per_host} series, {len(text.encode()) / 1e6:.2f} MB "
              "(recorded from the agent's renderer)", flush=True)  # fmt: skip
        with bench_lock():
            spec = {
                "exposition": str(work / "host.prom"),
                "hosts": max(args.sizes),
                "pdus": math.ceil(max(args.sizes) / args.hosts_per_pdu),
                "recording": str(RECORDING),
                "ready": str(work / "sim-ready.json"),
                "stats": str(work / "sim-stats.json"),
            }
            (work / "sim.json").write_text(json.dumps(spec))
            procs.start("sim", [sys.executable, "-m", "bench.fleet", "--serve",
                                str(work / "sim.json")])  # fmt: skip
            sim = wait_for(
                lambda: json.loads((work / "sim-ready.json").read_text()),
                120, "simulator ready", alive=procs.alive("sim"),
                errors=(OSError, ValueError),
            )  # fmt: skip
            for i, hosts in enumerate(args.sizes):
                fleet = start_fleet(procs, work, hosts, sim, args)
                for store in in_turn(args.store_list, i):  # the order alternating by size
                    t = time.monotonic()
                    try:
                        r = phase(store, fleet, procs, work, args)
                    except (OSError, RuntimeError, ValueError, KeyError) as exc:
                        # a store that falls over at this size: said so, and the run goes on
                        r = {
                            "store": store,
                            "hosts": hosts,
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                    r["phase_seconds"] = time.monotonic() - t
                    results.append(r)
                    print(line(r), flush=True)
                procs.stop(f"collector-{hosts}")
            procs.stop()
        summary = summarise(results, args, per_host)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        return 0 if all(r.get("kept_up") and not r["report"]["error"] for r in results) else 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        procs.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def mib(n: float) -> float:
    return n / 2**20


def line(r: dict[str, Any]) -> str:
    """One phase, one line."""
    if "error" in r:
        return f"{r['store']:15s} N={r['hosts']:<4d} FAILED: {r['error'][-300:]}"
    rules = " + ".join(f"{g.removeprefix('wattbit-')} {v * 1e3:.0f} ms" for g, v in
                       sorted(r["rule_seconds"].items()))  # fmt: skip
    rep = r["report"]
    report = (
        f"{rep['seconds']:.1f} s (analysis {rep['analysis_seconds']:.1f} s; {rep['hosts']} hosts)"
        if not rep["error"]
        else (f"FAILED: {rep['error'][-200:]}")
    )
    return (
        f"{r['store']:15s} N={r['hosts']:<4d} series {r['series']:>9,.0f}  "
        f"ingest {r['ingest_samples_per_s']:>8,.0f}/s "
        f"(expected {r['expected_samples_per_s']:,.0f})  "
        f"RSS {mib(r['store_rss_bytes']):6.0f} MiB  CPU {r['store_cpu_cores']:.2f} cores  "
        f"rules {rules}  report {report}  "
        f"ingest {'kept up' if r['ingest_kept_up'] else 'DID NOT KEEP UP'}, "
        f"rules {'kept up' if r['rules_kept_up'] else 'DID NOT KEEP UP'}"
        + (f"  rule failures {r['rule_failures']:.0f}" if r["rule_failures"] else "")
        + (f"  rule iterations missed {r['rule_missed']:.0f}" if r["rule_missed"] else "")
        + f"  (others on the machine: {r['others_cores']:.2f} cores)"
    )


def summarise(
    results: list[dict[str, Any]], args: argparse.Namespace, per_host: int
) -> dict[str, Any]:
    """Print the table and the fits; return everything for --json."""
    print("\n| store | hosts | series | samples/s | RSS MiB | CPU cores | RSS KiB / 1k series "
          "| CPU millicores / 1k series | rule time per cycle (both groups) | report "
          "| kept up (ingest, rules) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    fits: dict[str, Any] = {}
    for store in args.store_list:
        rs = sorted(
            (r for r in results if r["store"] == store and "error" not in r),
            key=lambda r: r["hosts"],
        )
        for r in rs:
            k = r["series"] / 1000
            rules = sum(r["rule_seconds"].values())
            rep = r["report"]
            cells = [
                store,
                str(r["hosts"]),
                f"{r['series']:,.0f}",
                f"{r['ingest_samples_per_s']:,.0f}",
                f"{mib(r['store_rss_bytes']):,.0f}",
                f"{r['store_cpu_cores']:.2f}",
                f"{r['store_rss_bytes'] / 1024 / k:,.0f}",
                f"{r['store_cpu_cores'] * 1e3 / k:.1f}",
                f"{rules:.2f} s",
                f"{rep['seconds']:.1f} s",
                ", ".join("yes" if r[k] else "no" for k in ("ingest_kept_up", "rules_kept_up")),
            ]
            print("| " + " | ".join(cells) + " |")
        # The fits take the phases whose ingest kept up (a saturated store's CPU is capped).
        good = [r for r in rs if r["ingest_kept_up"]]
        xs = [r["series"] for r in good]
        rss_fit = fit(xs, [r["store_rss_bytes"] for r in good])
        cpu_fit = fit(xs, [r["store_cpu_cores"] for r in good])
        rule_fit = fit(xs, [sum(r["rule_seconds"].values()) for r in good])
        rep_fit = fit([r["hosts"] for r in good], [r["report"]["seconds"] for r in good])
        fits[store] = {"rss_bytes": rss_fit, "cpu_cores": cpu_fit, "rule_seconds": rule_fit,
                       "report_seconds_per_host": rep_fit}  # fmt: skip
        if rss_fit and cpu_fit:
            print(f"{store}: RSS = {mib(rss_fit[0]):.0f} MiB + {rss_fit[1] * 1000 / 1024:.0f} KiB "
                  f"per 1k series ({rss_fit[1] * per_host / 2**20:.1f} MiB per host); CPU = "
                  f"{cpu_fit[0]:.3f} + {cpu_fit[1] * 1e6:.2f} millicores per 1k series "
                  f"({cpu_fit[1] * per_host * 1e3:.1f} millicores per host)")  # fmt: skip
        if rule_fit and rep_fit:
            print(f"{store}: rule time per cycle = {rule_fit[0]:.2f} s + {rule_fit[1] * 1e6:.2f} s "
                  f"per million series; wattbit report = {rep_fit[0]:.1f} s + "
                  f"{rep_fit[1]:.2f} s per host")  # fmt: skip
    print()
    print_command()
    return {
        "machine": measured_on(),
        "args": {k: v for k, v in vars(args).items() if k not in ("serve",)},
        "series_per_host": per_host,
        "phases": results,
        "fits": fits,
    }


if __name__ == "__main__":
    sys.exit(main())
