"""Part 3 of the blockio overhead bench: latency, core against bcc."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.blockio_overhead.common import (
    FINE_BOUNDS_S,
    LAT_SETTLE_S,
    bpf_progs,
    histogram_quantile,
    latency_buckets,
    log,
    prog_label,
    sample,
    tracer_progs,
    wait_attached,
)
from bench.blockio_overhead.host import Watch, busy, fio_run
from bench.blockio_overhead.tracers import AgentProc
from bench.harness import (
    alternate,
)

# --- part 3: latency, core against bcc ---------------------------------------------------


@dataclass
class LatRun:
    """One sized QD1 fio run under one agent with fine latency buckets."""

    backend: str
    pair: int
    position: int
    clock: str = ""  # what the agent's histogram measured on the device (device or queue)
    fio: dict[str, Any] = field(default_factory=dict)
    count: float = 0.0  # latency observations over the run
    counted_ios: float = 0.0
    untimed: float = 0.0
    below_first: float = 0.0  # share in the first bucket (at or below 1 us)
    over_last: float = 0.0  # share above the last bound (+Inf)
    hist_median_s: float | None = None
    median_bucket_s: tuple[float, float] | None = None  # the bucket the median lies in
    hist_mean_s: float | None = None
    between: bool | None = None  # fio clat median <= histogram median <= fio lat median
    recursion_misses: int = 0
    attached: list[str] = field(default_factory=list)
    loadavg_before: str = ""
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def latency_once(
    workdir: Path, dev: str, backend: str, io_size: str, pair: int, position: int, bs: str = "4k"
) -> LatRun:
    """Start an agent with fine buckets, run the sized QD1 job, take the histogram's deltas."""
    lr = LatRun(backend, pair, position, loadavg_before=Path("/proc/loadavg").read_text().strip())
    devname = Path(dev).name
    agent = AgentProc(workdir, backend, FINE_BOUNDS_S)
    try:
        agent.spawn()
        agent.wait_ready(poll=0.1)
        ids = wait_attached(agent.pid, {"complete"})
        # Let the start-up work (the smart exporter's first smartctl runs) pass for both.
        time.sleep(LAT_SETTLE_S)
        s0, p0 = agent.samples(), bpf_progs()
        with Watch({agent.pid}) as w:
            lr.fio = fio_run(dev, iodepth=1, io_size=io_size, bs=bs)
        s1, p1 = agent.samples(), bpf_progs()
        ids |= tracer_progs(agent.pid)
        lr.attached = sorted(
            f"{prog_label(p1[i].name if i in p1 else '?', k)}@{k}" for i, k in ids.items()
        )
        lr.recursion_misses = sum(
            p1[i].recursion_misses - p0[i].recursion_misses for i in ids if i in p0 and i in p1
        )
    finally:
        agent.stop()
    lr.neighbours = w.neighbours
    for (name, labels), value in s1.items():
        lab = dict(labels)
        if name == "wattbit_disk_io_latency_clock_info" and lab.get("device") == devname and value:
            lr.clock = lab.get("clock", "")
    b0, b1 = latency_buckets(s0, devname), latency_buckets(s1, devname)
    cum = [(le, b1[le] - b0.get(le, 0.0)) for le in sorted(b1)]
    dsum = sample(s1, "wattbit_disk_io_latency_seconds_sum", device=devname, op="read") - sample(
        s0, "wattbit_disk_io_latency_seconds_sum", device=devname, op="read"
    )
    lr.counted_ios = sample(s1, "wattbit_disk_ios_total", device=devname, op="read") - sample(
        s0, "wattbit_disk_ios_total", device=devname, op="read"
    )
    lr.untimed = sample(s1, "wattbit_disk_io_untimed_total", device=devname, op="read") - sample(
        s0, "wattbit_disk_io_untimed_total", device=devname, op="read"
    )
    if cum and cum[-1][1] > 0:
        total = cum[-1][1]
        lr.count = total
        lr.below_first = cum[0][1] / total
        lr.over_last = (total - cum[-2][1]) / total if len(cum) > 1 else 0.0
        lr.hist_median_s = histogram_quantile(0.5, cum)
        # Where interpolation cannot mislead: the bucket the median lies in.
        i = next(i for i, (_, c) in enumerate(cum) if c >= total / 2)
        lr.median_bucket_s = (cum[i - 1][0] if i else 0.0, cum[i][0])
        lr.hist_mean_s = dsum / total
        lr.between = lr.fio["clat_p50_ns"] <= lr.hist_median_s * 1e9 <= lr.fio["lat_p50_ns"]
    return lr


def _bucket(b: tuple[float, float] | None) -> str:
    return "-" if b is None else f"{b[0] * 1e6:g}..{b[1] * 1e6:g} us"


def run_latency(args: argparse.Namespace, dev: str, workdir: Path) -> list[LatRun]:
    """Part 3: the sized QD1 job under core and bcc alternately."""
    out = []
    backends = ["core", "bcc"]
    for k, (pair, backend) in enumerate(alternate(backends, args.lat_pairs)):
        position = k % len(backends)
        lr = latency_once(workdir, dev, backend, args.lat_io_size, pair, position, args.lat_bs)
        out.append(lr)
        f = lr.fio
        med = lr.hist_median_s
        log(
            f"latency {pair + 1}/{args.lat_pairs} [{backend}]: histogram median "
            f"{'-' if med is None else f'{med * 1e6:.2f}'} us "
            f"(in {_bucket(lr.median_bucket_s)}, mean {(lr.hist_mean_s or 0) * 1e6:.2f}, "
            f"clock {lr.clock or '?'}), fio clat "
            f"median {f['clat_p50_ns'] / 1e3:.2f} us, lat median {f['lat_p50_ns'] / 1e3:.2f} "
            f"us, {f['iops']:,.0f} IOPS; {lr.count:,.0f} timed of {f['total_ios']:,} I/Os"
            f" ({lr.untimed:,.0f} untimed), {lr.below_first:.2%} <= first bound, "
            f"{lr.over_last:.2%} > last, programs {lr.attached}"
            + (f", {lr.recursion_misses} recursion misses" if lr.recursion_misses else "")
            + (f"  [NOISY: {busy(lr.neighbours)}]" if lr.neighbours else "")
        )
    return out


def summarise_latency(lat: list[LatRun]) -> dict[str, Any]:
    """Per backend: medians of histogram median, mean and fio's medians; core/bcc ratio."""
    out: dict[str, Any] = {"backends": {}}
    for backend in ("core", "bcc"):
        mine = [r for r in lat if r.backend == backend and r.hist_median_s is not None]
        if not mine:
            continue
        med = statistics.median(r.hist_median_s for r in mine if r.hist_median_s is not None)
        clat = statistics.median(r.fio["clat_p50_ns"] / 1e9 for r in mine)
        total = statistics.median(r.fio["lat_p50_ns"] / 1e9 for r in mine)
        out["backends"][backend] = {
            "runs": len(mine),
            "clocks": sorted({r.clock for r in mine}),
            "hist_median_s": med,
            "hist_mean_s": statistics.median(r.hist_mean_s or 0.0 for r in mine),
            "fio_clat_p50_s": clat,
            "fio_lat_p50_s": total,
            "fio_clat_mean_s": statistics.median(r.fio["clat_mean_ns"] / 1e9 for r in mine),
            "fio_lat_mean_s": statistics.median(r.fio["lat_mean_ns"] / 1e9 for r in mine),
            "between": clat <= med <= total,
            "runs_between": sum(bool(r.between) for r in mine),
            "timed_per_fio_io_median": statistics.median(
                r.count / r.fio["total_ios"] for r in mine
            ),
            "untimed": sum(r.untimed for r in mine),
            "outside_bounds_max": max(r.below_first + r.over_last for r in mine),
            "recursion_misses": sum(r.recursion_misses for r in mine),
            "attached": sorted({a for r in mine for a in r.attached}),
            "noisy": sum(bool(r.neighbours) for r in mine),
        }
    by_pair: dict[int, dict[str, LatRun]] = {}
    for r in lat:
        if r.hist_median_s is not None:
            by_pair.setdefault(r.pair, {})[r.backend] = r
    ratios, relative = [], []
    for p in by_pair.values():
        core, bcc = p.get("core"), p.get("bcc")
        if core and bcc and core.hist_median_s and bcc.hist_median_s:
            ratios.append(core.hist_median_s / bcc.hist_median_s)
            # Each against its own run's fio clat median: cancels the machine's drift between
            # the two runs (fio's own latencies move with it), leaving the tracers' difference.
            relative.append(
                (core.hist_median_s / core.fio["clat_p50_ns"])
                / (bcc.hist_median_s / bcc.fio["clat_p50_ns"])
            )
    if ratios:
        out["core_over_bcc"] = {
            "method": "median over pairs of (core histogram median / bcc histogram median)",
            "ratios": ratios,
            "ratio_median": statistics.median(ratios),
            "relative_to_fio_clat": relative,
            "relative_to_fio_clat_median": statistics.median(relative),
        }
    return out
