"""Part 2 of the blockio overhead bench: agent start time and memory."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.blockio_overhead.common import log, tracer_progs
from bench.blockio_overhead.host import Watch, busy
from bench.blockio_overhead.tracers import AgentProc
from bench.harness import (
    alternate,
    cpu_seconds,
    proc_status,
)

# --- part 2: agent start -----------------------------------------------------------------


@dataclass
class Start:
    """One agent start: time to ready, resident memory."""

    backend: str
    index: int  # -1: the uncounted warm-up
    ready_s: float = 0.0
    cpu_s_at_ready: float = 0.0
    rss_first_kb: int = 0  # right after the first answer
    rss_kb: int = 0  # after settling
    hwm_kb: int = 0
    scrapes: int = 0
    attached: list[str] = field(default_factory=list)
    loadavg_before: str = ""
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def start_once(workdir: Path, backend: str, index: int, settle: float) -> Start:
    """Start one agent, time it to ready, read its memory after settling, stop it."""
    st = Start(backend, index, loadavg_before=Path("/proc/loadavg").read_text().strip())
    agent = AgentProc(workdir, backend)
    try:
        with Watch() as w:
            agent.spawn()
            w.ours.add(agent.pid)
            st.ready_s = agent.wait_ready(poll=0.02)
            st.cpu_s_at_ready = cpu_seconds(agent.pid)
            st.rss_first_kb = proc_status(agent.pid).get("VmRSS", 0)
            # Settle as under Prometheus: one scrape a second.
            end = time.monotonic() + settle
            while time.monotonic() < end:
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
                agent.text()
                st.scrapes += 1
            status = proc_status(agent.pid)
            st.rss_kb, st.hwm_kb = status.get("VmRSS", 0), status.get("VmHWM", 0)
            st.attached = sorted(set(tracer_progs(agent.pid).values()))
    finally:
        agent.stop()
    st.neighbours = w.neighbours
    return st


def run_starts(args: argparse.Namespace, workdir: Path) -> list[Start]:
    """Part 2: agent starts, core and bcc alternately, after one uncounted start of each."""
    starts = []
    backends = ["core", "bcc"]
    for backend in backends:
        log(f"start warm-up [{backend}] (not counted) ...")
        start_once(workdir, backend, -1, 0)
    for i, backend in alternate(backends, args.starts):
        st = start_once(workdir, backend, i, args.settle)
        starts.append(st)
        log(
            f"start {i + 1}/{args.starts} [{backend}]: ready in {st.ready_s:.3f} s "
            f"(CPU {st.cpu_s_at_ready:.2f} s), VmRSS {st.rss_first_kb / 1024:.1f} MiB "
            f"at ready, {st.rss_kb / 1024:.1f} MiB after {args.settle:g} s "
            f"(HWM {st.hwm_kb / 1024:.1f}), programs {st.attached}"
            + (f"  [NOISY: {busy(st.neighbours)}]" if st.neighbours else "")
        )
    return starts


def summarise_starts(starts: list[Start]) -> dict[str, Any]:
    """Per backend: medians of ready time and memory."""
    out = {}
    for backend in ("core", "bcc"):
        mine = [s for s in starts if s.backend == backend]
        if not mine:
            continue
        ready = [s.ready_s for s in mine]
        rss = [s.rss_kb * 1024 / 1e6 for s in mine]
        out[backend] = {
            "starts": len(mine),
            "ready_s_median": statistics.median(ready),
            "ready_s_min": min(ready),
            "ready_s_max": max(ready),
            "cpu_s_at_ready_median": statistics.median(s.cpu_s_at_ready for s in mine),
            "rss_mb_median": statistics.median(rss),
            "rss_mb_min": min(rss),
            "rss_mb_max": max(rss),
            "rss_first_mb_median": statistics.median(s.rss_first_kb * 1024 / 1e6 for s in mine),
            "hwm_mb_median": statistics.median(s.hwm_kb * 1024 / 1e6 for s in mine),
            "attached": sorted({a for s in mine for a in s.attached}),
            "noisy": sum(bool(s.neighbours) for s in mine),
        }
    return out
