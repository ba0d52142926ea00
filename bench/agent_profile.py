"""Where a scrape's CPU goes, in-process: each exporter's collect, then the whole render (issue 35).

Run (root): PYTHONPATH=. .venv/bin/python bench/agent_profile.py [--disks 48] [--renders 100]
     [--fio-iops 200] [--profile]
The agent's exporters built as `wattbit agent` builds them with every exporter on (the
configuration of bench/agent_process.py), over ``--disks`` loop disks (``wattbit-profile-*`` in
/dev/shm) that have read and written, behind the agent's registry and TextRenderer. CPU time
(time.process_time) per call, means over ``--renders``: each exporter's collect() alone, then
the whole render (every exporter and the renderer), idle and again while fio reads and writes
every disk (``--fio-iops`` per disk; 0: idle only). ``--profile``: cProfile of the renders too.
The HTTP server's share (aiohttp, the WSGI call) is not in these: bench/agent_process.py has the
process's whole figure.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import fio_args, fio_load, load_average, print_command, table
from collector.agent.config import AgentConfig
from collector.agent.main import build_exporters, start_exporters
from collector.demo.loopdisks import loop_disks
from collector.web.exposition import TextRenderer
from exporters.base import Exporter, ExportersCollector

CONFIG = "blockio:\n  backend: core\ncpu:\n  enabled: true\n"  # as bench/agent_process.py


def _cpu_ms(call: Callable[[], object], n: int, interval: float = 0.0) -> float:
    """Mean CPU ms of n calls, `interval` seconds apart (the sleeps cost no CPU time)."""
    spent = 0.0
    for _ in range(n):
        t0 = time.process_time()
        call()
        spent += time.process_time() - t0
        if interval:
            time.sleep(interval)
    return spent / n * 1e3


def _collect(exporter: Exporter) -> Callable[[], object]:
    return lambda: list(exporter.collect())


def _measure(
    exporters: list[Exporter], renderer: TextRenderer, n: int, interval: float
) -> dict[str, float]:
    out = {e.name: _cpu_ms(_collect(e), n, interval) for e in exporters}
    out["render (all)"] = _cpu_ms(renderer.render, n, interval)
    out["renderer's own"] = out["render (all)"] - sum(out[e.name] for e in exporters)
    return out


def main() -> None:
    """Per exporter and for the whole render: CPU ms per scrape, idle and under fio."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--renders", type=int, default=100)
    ap.add_argument("--fio-iops", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="cProfile of the renders too")
    ap.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="seconds between two calls (0: back to back; under fio, 0.05 lets every disk's "
        "counts change between two calls, as between two real scrapes)",
    )
    args = ap.parse_args()
    print("load average before:", load_average())
    cfg = AgentConfig.model_validate(yaml.safe_load(CONFIG))
    results: dict[str, dict[str, float]] = {}
    with loop_disks(args.disks, 4, prefix="wattbit-profile-") as disks:
        devices = [d.device for d in disks]
        exporters = build_exporters(cfg, start=False)
        start_exporters(exporters)
        try:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(ExportersCollector(exporters))
            renderer = TextRenderer(registry)
            renderer.render()
            for rw in ("randread", "randwrite"):  # so every exporter has every disk
                cmd = fio_args(devices, [f"--rw={rw}", "--io_size=64k"])
                subprocess.run(cmd, check=True, capture_output=True)
            renderer.render()
            phases: list[tuple[str, contextlib.AbstractContextManager[None]]]
            phases = [("idle", contextlib.nullcontext())]
            if args.fio_iops:
                phases.append(("under fio", fio_load(devices, args.fio_iops)))
            for phase, ctx in phases:
                with ctx:
                    results[phase] = _measure(exporters, renderer, args.renders, args.interval)
                    if args.profile:
                        prof = cProfile.Profile()
                        for _ in range(args.renders):
                            prof.runcall(renderer.render)
                            time.sleep(args.interval)
                        print(f"--- cProfile, {phase}")
                        stats = pstats.Stats(prof)
                        stats.sort_stats("cumulative").print_stats(40)
                        stats.sort_stats("tottime").print_stats(30)
        finally:
            for e in exporters:
                e.close()
    print("load average after:", load_average())
    names = list(next(iter(results.values())))
    table(
        ["CPU ms per scrape", *results],
        [[n, *(f"{r[n]:.3f}" for r in results.values())] for n in names],
    )
    print_command()


if __name__ == "__main__":
    main()
