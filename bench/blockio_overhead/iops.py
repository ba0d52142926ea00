"""Part 1 of the blockio overhead bench: IOPS kept and kernel time per I/O."""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.blockio_overhead.common import (
    BenchError,
    bpf_progs,
    foreign_block_progs,
    log,
    prog_label,
    tracer_progs,
)
from bench.blockio_overhead.host import bpf_stats_on, busy, fio_run, fio_watched
from bench.blockio_overhead.tracers import Tracer, make_tracer
from bench.harness import (
    cpu_seconds,
    median,
)

# --- part 1: IOPS and kernel time per I/O ------------------------------------------------


@dataclass
class Run:
    """One fio run and, with a tracer, what its BPF programs cost."""

    tracer: str  # "none" for the baseline
    against: str  # the tracer this run is paired with
    pair: int
    position: int  # 0: first of its pair, 1: second
    iops: float = 0.0
    total_ios: int = 0
    runtime_ms: int = 0
    clat_mean_ns: float = 0.0
    fio_usr_cpu_pct: float = 0.0
    fio_sys_cpu_pct: float = 0.0
    tracer_cpu_s: float | None = None
    kernel_ns_per_io: float | None = None  # from the cost run, bpf_stats on
    progs: list[dict[str, Any]] = field(default_factory=list)  # the cost run's deltas
    attached: list[str] = field(default_factory=list)  # label@tracepoint, any time in the run
    recursion_misses: int | None = None  # the tracer's programs, main + cost run
    counted: dict[str, float] | None = None  # what the tracer counted in the main run
    cost_run: dict[str, Any] = field(default_factory=dict)  # its fio numbers, steal, neighbours
    extra: dict[str, Any] = field(default_factory=dict)
    loadavg_before: str = ""
    foreign_progs: list[str] = field(default_factory=list)
    steal_pct: float = 0.0
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def measure(dev: str, runtime: int, cost_runtime: int, run: Run, tracer: Tracer | None) -> Run:
    """One fio run (bpf_stats off), with tracer attached if given; then its cost run."""
    run.loadavg_before = Path("/proc/loadavg").read_text().strip()
    devname = Path(dev).name
    if tracer is None:
        run.foreign_progs = foreign_block_progs(set())
        for key, value in fio_watched(dev, runtime, set()).items():
            setattr(run, key, value)
        return run
    try:
        ids = tracer.start()
        run.foreign_progs = foreign_block_progs(set(ids))
        cpu0 = cpu_seconds(tracer.pid)
        counts0 = tracer.io_counts(devname)
        progs0 = bpf_progs()
        finish = tracer.during_run()
        try:
            # The IOPS the pair compares: bpf_stats off, as on a production host.
            for key, value in fio_watched(dev, runtime, {tracer.pid}).items():
                setattr(run, key, value)
            run.tracer_cpu_s = round(cpu_seconds(tracer.pid) - cpu0, 3)
            counts1 = tracer.io_counts(devname)
            if counts0 is not None and counts1 is not None:
                run.counted = {k: counts1[k] - counts0[k] for k in counts1}
            # The cost run: the same tracer session, bpf_stats on, a fio run of its own.
            ids |= tracer_progs(tracer.pid)  # the core's issue may have been attached since
            with bpf_stats_on():
                before = bpf_progs()
                run.cost_run = fio_watched(dev, cost_runtime, {tracer.pid})
                after = bpf_progs()
            ids |= tracer_progs(tracer.pid)
        finally:
            run.extra = finish()
    finally:
        tracer.stop()
    ns = 0
    misses = 0
    for i, kinds in sorted(ids.items()):
        b, a = before.get(i), after.get(i)
        if a is None or b is None:
            raise BenchError(f"{tracer.name}'s program {i} vanished during the run")
        d_ns, d_cnt = a.run_time_ns - b.run_time_ns, a.run_cnt - b.run_cnt
        label = prog_label(a.name, kinds)
        run.attached.append(f"{label}@{kinds}")
        run.progs.append(
            {
                "id": i,
                "name": a.name,
                "label": label,
                "tracepoint": kinds,
                "run_time_ns": d_ns,
                "run_cnt": d_cnt,
                # Per run, unlike per fio I/O not raised by other devices' I/O meanwhile.
                "ns_per_run": d_ns / d_cnt if d_cnt else None,
            }
        )
        ns += d_ns
        misses += a.recursion_misses - progs0[i].recursion_misses if i in progs0 else 0
    run.recursion_misses = misses
    cost_ios = run.cost_run.get("total_ios", 0)
    run.kernel_ns_per_io = ns / cost_ios if cost_ios else None
    # The kernel frees a closed program a moment later (RCU): give it that moment.
    deadline = time.monotonic() + 5
    while (leaked := set(ids) & set(bpf_progs())) and time.monotonic() < deadline:
        time.sleep(0.2)
    if leaked:
        log(f"warning: {tracer.name}'s programs {sorted(leaked)} still loaded after it stopped")
    return run


def _describe(run: Run) -> str:
    s = f"{run.iops:>10,.0f} IOPS"
    if run.kernel_ns_per_io is not None:
        cost = run.cost_run
        s += f"; cost run: {cost['iops']:,.0f} IOPS, {run.kernel_ns_per_io:6.1f} ns/IO in BPF ("
        s += ", ".join(f"{p['label']} {p['run_cnt']:,} runs" for p in run.progs)
        s += f", fio I/Os {cost['total_ios']:,})"
        if cost["neighbours"]:
            s += f"  [cost run NOISY: {busy(cost['neighbours'])}]"
    if run.counted is not None:
        s += f", counted {run.counted['ios']:,.0f} of {run.total_ios:,} I/Os"
        if run.counted.get("untimed"):
            s += f" ({run.counted['untimed']:,.0f} untimed)"
    if run.recursion_misses:
        s += f", {run.recursion_misses} recursion misses"
    if run.tracer_cpu_s is not None:
        s += f", tracer CPU {run.tracer_cpu_s:.2f} s"
    if run.steal_pct >= 1:
        s += f", steal {run.steal_pct:.1f}%"
    if run.foreign_progs:
        s += f"  [other block tracers attached: {', '.join(run.foreign_progs)}]"
    if run.neighbours:
        s += f"  [NOISY: other processes used CPU: {busy(run.neighbours)}]"
    return s


def summarise_iops(runs: list[Run], tracers: list[str]) -> dict[str, Any]:
    """Per tracer: IOPS ratios over pairs, median IOPS of each side, median ns per I/O; and
    the core's ratio against the empty program's."""
    out: dict[str, Any] = {"tracers": {}}
    ratio_by_pair: dict[str, dict[int, float]] = {}
    for name in tracers:
        pairs: dict[int, dict[str, Run]] = {}
        for r in runs:
            if r.against == name:
                pairs.setdefault(r.pair, {})["on" if r.tracer == name else "off"] = r
        done = {i: p for i, p in pairs.items() if {"on", "off"} <= p.keys()}
        if not done:
            continue
        ratio_by_pair[name] = {i: p["on"].iops / p["off"].iops for i, p in done.items()}
        ratios = list(ratio_by_pair[name].values())
        ons = [p["on"] for p in done.values()]
        ns = [r.kernel_ns_per_io for r in ons if r.kernel_ns_per_io is not None]
        per_prog: dict[str, list[float]] = {}
        for r in ons:
            cost_ios = r.cost_run.get("total_ios", 0)
            for prog in r.progs if cost_ios else []:
                per_prog.setdefault(prog["label"], []).append(prog["run_time_ns"] / cost_ios)
        counted = [r.counted["ios"] / r.total_ios for r in ons if r.counted and r.total_ios]
        out["tracers"][name] = {
            "pairs": len(done),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "ratios": ratios,
            "iops_off_median": statistics.median(p["off"].iops for p in done.values()),
            "iops_on_median": statistics.median(r.iops for r in ons),
            "ns_per_io_median": median(ns),
            "ns_per_io": ns,
            "ns_per_io_by_program_median": {k: statistics.median(v) for k, v in per_prog.items()},
            "runs_with": sorted({a for r in ons for a in r.attached}),
            "recursion_misses": sum(r.recursion_misses or 0 for r in ons),
            "counted_per_fio_io_median": median(counted),
            "untimed": sum((r.counted or {}).get("untimed", 0) for r in ons),
            "tracer_cpu_s_median": median(
                [r.tracer_cpu_s for r in ons if r.tracer_cpu_s is not None]
            ),
            "cost_iops_median": median([r.cost_run["iops"] for r in ons if r.cost_run]),
            "noisy_runs": sum(bool(r.neighbours) for p in done.values() for r in p.values()),
            "noisy_cost_runs": sum(bool(r.cost_run.get("neighbours")) for r in ons),
            "foreign_runs": sum(bool(r.foreign_progs) for p in done.values() for r in p.values()),
        }
    core, empty = ratio_by_pair.get("core"), ratio_by_pair.get("empty")
    if core and empty:
        common = sorted(core.keys() & empty.keys())
        diffs = [100 * (core[i] - empty[i]) for i in common]
        out["core_vs_empty"] = {
            "method": "median over pair rounds of (core ratio - empty ratio), points",
            "rounds": common,
            "points": diffs,
            "points_median": statistics.median(diffs) if diffs else None,
            "difference_of_medians_points": 100
            * (statistics.median(core.values()) - statistics.median(empty.values())),
        }
    return out


def run_iops(args: argparse.Namespace, dev: str, workdir: Path) -> list[Run]:
    """Part 1: the pairs."""
    runs: list[Run] = []
    rng = random.Random(args.seed)
    tracers = [
        make_tracer(n, workdir, args.ebpf_exporter, args.libbpf_include) for n in args.tracers
    ]
    try:
        if args.warmup > 0:
            log(f"warm-up: fio {args.warmup} s without tracer (not counted)")
            fio_run(dev, args.warmup)
        for pair in range(args.pairs):
            # Rotate the tracers and alternate which side of each pair goes first, so slow
            # drift in the machine's speed lands on every tracer and both sides alike;
            # --seed shuffles instead.
            if args.seed is None:
                k = pair % len(tracers)
                order = tracers[k:] + tracers[:k]
                flip = pair % 2 == 1
            else:
                order = rng.sample(tracers, len(tracers))
                flip = rng.random() < 0.5
            for tracer in order:
                sides: list[Tracer | None] = [tracer, None] if flip else [None, tracer]
                for position, side in enumerate(sides):
                    label = side.name if side else "no tracer"
                    what = f"pair {pair + 1}/{args.pairs} [{tracer.name}] {label}"
                    log(f"{what}: fio ...")
                    run = Run(
                        tracer=side.name if side else "none",
                        against=tracer.name,
                        pair=pair,
                        position=position,
                    )
                    runs.append(measure(dev, args.runtime, args.cost_runtime, run, side))
                    log(f"{what}: {_describe(run)}")
    finally:
        for t in tracers:
            t.stop()
    return runs
