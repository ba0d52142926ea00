"""The blockio overhead bench's report: goals, tables and warnings."""

from __future__ import annotations

import argparse
from typing import Any

from bench.blockio_overhead.common import (
    FINE_BOUNDS_S,
    GOAL_LAT_RATIO,
    GOAL_NS_PER_IO,
    GOAL_POINTS_VS_EMPTY,
    GOAL_READY_S,
    GOAL_RSS_MB,
    NEIGHBOUR_SHARE,
)
from bench.blockio_overhead.iops import Run
from bench.blockio_overhead.latency import LatRun
from bench.blockio_overhead.start import Start

# --- report ------------------------------------------------------------------------------


def _n(x: float | None, fmt: str = ",.0f") -> str:
    """A number as docs/benchmarks.md writes them (thin groups: 371 686), '-' for None."""
    return "-" if x is None else format(x, fmt).replace(",", " ")


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("**met**" if ok else "**missed**")


def goals(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 15's goals against the figures measured (None where a part did not run)."""
    rows = []
    iops = summary.get("iops", {}).get("tracers", {})
    core = iops.get("core", {})
    ns = core.get("ns_per_io_median")
    rows.append(
        {
            "goal": f"core: kernel time per I/O (bpf_stats) <= {GOAL_NS_PER_IO:.0f} ns",
            "figure": None if ns is None else f"{ns:.0f} ns",
            "met": None if ns is None else ns <= GOAL_NS_PER_IO,
        }
    )
    cve = summary.get("iops", {}).get("core_vs_empty", {})
    pts = cve.get("points_median")
    rows.append(
        {
            "goal": f"core: IOPS ratio at most {GOAL_POINTS_VS_EMPTY:g} points below the empty "
            "program's (median of paired differences)",
            "figure": None if pts is None else f"{pts:+.1f} points",
            "met": None if pts is None else pts >= -GOAL_POINTS_VS_EMPTY,
        }
    )
    st = summary.get("start", {}).get("core", {})
    ready, rss = st.get("ready_s_median"), st.get("rss_mb_median")
    rows.append(
        {
            "goal": f"core agent: ready after start <= {GOAL_READY_S:g} s",
            "figure": None if ready is None else f"{ready:.2f} s",
            "met": None if ready is None else ready <= GOAL_READY_S,
        }
    )
    rows.append(
        {
            "goal": f"core agent: VmRSS <= {GOAL_RSS_MB:g} MB",
            "figure": None if rss is None else f"{rss:.1f} MB",
            "met": None if rss is None else rss <= GOAL_RSS_MB,
        }
    )
    lat = summary.get("latency", {})
    ratio = lat.get("core_over_bcc", {}).get("ratio_median")
    rows.append(
        {
            "goal": f"latency median core/bcc within {GOAL_LAT_RATIO:.0%}",
            "figure": None if ratio is None else f"{ratio:.3f}",
            "met": None if ratio is None else abs(ratio - 1) <= GOAL_LAT_RATIO,
        }
    )
    b = lat.get("backends", {})
    if b:
        rows.append(
            {
                "goal": "latency medians between fio's clat and total-latency medians",
                "figure": ", ".join(
                    f"{k} {'yes' if v['between'] else 'no'} ({v['runs_between']}/{v['runs']} runs)"
                    for k, v in b.items()
                ),
                "met": all(v["between"] for v in b.values()) and {"core", "bcc"} <= b.keys(),
            }
        )
    return rows


def report(summary: dict[str, Any], args: argparse.Namespace, info: dict[str, Any]) -> str:
    """The results as markdown, in the style of docs/benchmarks.md."""
    lines: list[str] = []
    iops = summary.get("iops")
    if iops:
        lines += [
            f"fio 4k randread QD32 libaio direct on a loop device over tmpfs, {args.runtime} s "
            f"per run (bpf_stats off), {args.pairs} pairs per tracer, + a {args.cost_runtime} s "
            f"cost run per traced run (bpf_stats on); {info['nproc']} CPUs, kernel "
            f"{info['kernel']}.",
            "",
            "| tracer | IOPS without | IOPS with | ratio (median) | min..max "
            "| kernel ns per I/O (median) | per program | counted / fio I/Os | recursion misses |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in iops["tracers"].items():
            progs = ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(s["ns_per_io_by_program_median"].items())
            )
            counted = s["counted_per_fio_io_median"]
            lines.append(
                f"| {name} | {_n(s['iops_off_median'])} | {_n(s['iops_on_median'])} | "
                f"**{s['ratio_median']:.3f}** | {s['ratio_min']:.3f}..{s['ratio_max']:.3f} | "
                f"**{_n(s['ns_per_io_median'])}** | {progs or '-'} | "
                f"{'-' if counted is None else f'{counted:.4f}'} | {s['recursion_misses']} |"
            )
        cve = iops.get("core_vs_empty")
        if cve and cve["points_median"] is not None:
            lines += [
                "",
                f"core - empty IOPS ratio, median of {len(cve['points'])} paired differences "
                f"(same round): **{cve['points_median']:+.1f} points** "
                f"({', '.join(f'{p:+.1f}' for p in cve['points'])}); difference of the "
                f"medians: {cve['difference_of_medians_points']:+.1f} points.",
            ]
        lines.append("")
    start = summary.get("start")
    if start:
        lines += [
            f"Agent start, default configuration apart from blockio.backend (nic and smart on), "
            f"{args.starts} starts per backend alternating; VmRSS after {args.settle:g} s of one "
            "scrape a second; MB = 10^6 bytes.",
            "",
            "| backend | ready after start (median) | min..max | CPU until ready "
            "| VmRSS at ready | VmRSS settled (median) | min..max | VmHWM |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, s in start.items():
            lines.append(
                f"| {name} | **{s['ready_s_median']:.2f} s** | {s['ready_s_min']:.2f}.."
                f"{s['ready_s_max']:.2f} | {s['cpu_s_at_ready_median']:.2f} s | "
                f"{s['rss_first_mb_median']:.1f} MB | **{s['rss_mb_median']:.1f} MB** | "
                f"{s['rss_mb_min']:.1f}..{s['rss_mb_max']:.1f} | {s['hwm_mb_median']:.1f} MB |"
            )
        lines.append("")
    lat = summary.get("latency")
    if lat and lat["backends"]:
        lines += [
            f"Latency: fio {args.lat_bs} randread QD1 libaio direct, {args.lat_io_size} per run, "
            f"{args.lat_pairs} pairs core/bcc alternating, {len(FINE_BOUNDS_S)} latency bounds "
            "1 us..1 ms (10 per decade); medians over runs, in us.",
            "",
            "| backend | clock | histogram median | mean (_sum/_count) | fio clat median "
            "| fio total-latency median | between | timed / fio I/Os | outside bounds (max) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in lat["backends"].items():
            lines.append(
                f"| {name} | {'/'.join(s['clocks']) or '?'} | **{s['hist_median_s'] * 1e6:.2f}**"
                f" | {s['hist_mean_s'] * 1e6:.2f} | {s['fio_clat_p50_s'] * 1e6:.2f} | "
                f"{s['fio_lat_p50_s'] * 1e6:.2f} | {'yes' if s['between'] else 'no'} "
                f"({s['runs_between']}/{s['runs']}) | {s['timed_per_fio_io_median']:.4f} | "
                f"{s['outside_bounds_max']:.2%} |"
            )
        cob = lat.get("core_over_bcc")
        if cob:
            lines += [
                "",
                f"core/bcc histogram median, median over {len(cob['ratios'])} pairs: "
                f"**{cob['ratio_median']:.3f}** ({', '.join(f'{r:.3f}' for r in cob['ratios'])}); "
                "each as a share of its own run's fio clat median (drift between the runs "
                f"cancelled): {cob['relative_to_fio_clat_median']:.3f} "
                f"({', '.join(f'{r:.3f}' for r in cob['relative_to_fio_clat'])}).",
            ]
        lines.append("")
    lines += ["| goal (issue 15) | measured | |", "|---|---|---|"]
    for g in goals(summary):
        lines.append(f"| {g['goal']} | {g['figure'] or '-'} | {_met(g['met'])} |")
    return "\n".join(lines)


def warnings(
    runs: list[Run], starts: list[Start], lat: list[LatRun], summary: dict[str, Any]
) -> list[str]:
    """What makes the figures less trustworthy."""
    out = []
    noisy = sum(bool(r.neighbours) for r in runs)
    if noisy:
        out.append(
            f"WARNING: in {noisy} of {len(runs)} IOPS runs other processes used more than "
            f"{NEIGHBOUR_SHARE:.0%} of a CPU (see the log or 'neighbours' in the JSON): the IOPS "
            "ratios are not trustworthy; rerun on an idle machine"
        )
    noisy_cost = sum(bool(r.cost_run.get("neighbours")) for r in runs)
    if noisy_cost:
        out.append(
            f"WARNING: other processes were busy in {noisy_cost} cost runs: ns/IO may be "
            "inflated (cache contention)"
        )
    foreign = sorted({p for r in runs for p in r.foreign_progs})
    if foreign:
        out.append(
            "WARNING: other block_rq_* BPF programs were attached during IOPS runs (they cost "
            f"both sides of every pair, and can cause recursion misses): {', '.join(foreign)}"
        )
    n_start = sum(bool(s.neighbours) for s in starts)
    if n_start:
        out.append(f"WARNING: other processes were busy during {n_start} of {len(starts)} starts")
    n_lat = sum(bool(r.neighbours) for r in lat)
    if n_lat:
        out.append(f"WARNING: other processes were busy during {n_lat} of {len(lat)} latency runs")
    for name, s in summary.get("latency", {}).get("backends", {}).items():
        if s["outside_bounds_max"] > 0.01:
            out.append(
                f"WARNING: {name}: up to {s['outside_bounds_max']:.1%} of latencies fell outside "
                "1 us..1 ms: the histogram median may be off"
            )
    return out
