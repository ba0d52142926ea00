"""The blockio overhead bench's driver: preflight, the parts, the report.

sudo .venv/bin/python -m bench.blockio_overhead [--pairs 9] [--runtime 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import bench.blockio_overhead as package
from bench.blockio_overhead.common import (
    BPF_STATS,
    BT_SCRIPT,
    BTF,
    DEFAULT_TRACERS,
    FINE_BOUNDS_S,
    GOAL_LAT_RATIO,
    GOAL_NS_PER_IO,
    GOAL_POINTS_VS_EMPTY,
    GOAL_READY_S,
    GOAL_RSS_MB,
    PARTS,
    TOOLS,
    TRACERS,
    BenchError,
    foreign_block_progs,
    log,
)
from bench.blockio_overhead.host import bpf_stats_off, loop_device, measuring_lock
from bench.blockio_overhead.iops import Run, run_iops, summarise_iops
from bench.blockio_overhead.latency import LatRun, run_latency, summarise_latency
from bench.blockio_overhead.report import goals, report, warnings
from bench.blockio_overhead.start import Start, run_starts, summarise_starts
from bench.blockio_overhead.tracers import agent_config, hold_empty
from bench.harness import (
    LOCK,
    commit,
    cpu_model,
    print_command,
    tool_version,
)
from exporters.blockio.core.backend import OBJECT

# --- driver ------------------------------------------------------------------------------


def measured_on() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = cpu_model() or "?"
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu": cpu,
        "commit": commit() or "?",
        "fio": tool_version(["fio", "--version"]),
        "bpftrace": tool_version(["bpftrace", "--version"]),
        "bpftool": tool_version(["bpftool", "version"]),
        "python": platform.python_version(),
    }


def preflight(args: argparse.Namespace) -> None:
    """Fail early, with what to install, when something the bench needs is missing."""
    if os.geteuid() != 0:
        raise BenchError("must run as root (loop devices, BPF, sysctl)")
    tools = dict(TOOLS)
    if "iops" in args.parts and "bpftrace" in args.tracers:
        tools["bpftrace"] = "apt-get install bpftrace"
        if not BT_SCRIPT.is_file():
            raise BenchError(f"{BT_SCRIPT} is missing")
    if "iops" in args.parts and "ebpf_exporter" in args.tracers and not args.ebpf_exporter:
        raise BenchError("the ebpf_exporter tracer needs --ebpf-exporter PATH (its binary)")
    missing = [f"{t} (install: {how})" for t, how in tools.items() if shutil.which(t) is None]
    if missing:
        raise BenchError("missing tools: " + "; ".join(missing))
    if not BPF_STATS.exists():
        raise BenchError(f"{BPF_STATS} does not exist: this kernel cannot count BPF run time")
    if not Path("/dev/shm").is_dir():
        raise BenchError("/dev/shm (tmpfs) is missing")
    uses = set(args.tracers) if "iops" in args.parts else set()
    if {"start", "latency"} & set(args.parts):
        uses |= {"core", "bcc"}
    if "bcc" in uses:
        try:
            import bcc  # noqa: F401
        except ImportError as exc:
            raise BenchError(
                f"cannot import bcc with {sys.executable} ({exc}); install python3-bpfcc and "
                "use the project's --system-site-packages virtualenv"
            ) from exc
    if {"core", "empty"} & uses:
        if not OBJECT.is_file():
            raise BenchError(f"{OBJECT} is missing: build it with scripts/build-bpf.sh")
        if not BTF.exists():
            raise BenchError(f"{BTF} is missing: the core backend needs a kernel with BTF")


def _sigterm(*_: object) -> None:
    # Treat SIGTERM like Ctrl-C, so every finally (tracer, loop device, sysctl) runs; only
    # once, so a second SIGTERM cannot cut the clean-up itself short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def bench(args: argparse.Namespace) -> int:
    """Run the parts, print the report, write the JSON."""
    preflight(args)
    info = measured_on()
    log(f"machine: {info['nproc']} CPUs, kernel {info['kernel']}, {info['cpu']}")
    foreign = foreign_block_progs(set())
    if foreign:
        log(f"warning: other block_rq_* BPF programs are attached: {', '.join(foreign)}")
    runs: list[Run] = []
    starts: list[Start] = []
    lat: list[LatRun] = []
    with (
        measuring_lock(args.lock_timeout),
        tempfile.TemporaryDirectory(prefix="wattbit-bench-") as tmp,
        bpf_stats_off(),
        loop_device() as dev,
    ):
        workdir = Path(tmp)
        log(f"loop device {dev} over 1 GiB in /dev/shm, nomerges=2")
        if "iops" in args.parts:
            runs = run_iops(args, dev, workdir)
        if "start" in args.parts:
            starts = run_starts(args, workdir)
        if "latency" in args.parts:
            lat = run_latency(args, dev, workdir)
    summary: dict[str, Any] = {}
    if runs:
        summary["iops"] = summarise_iops(runs, args.tracers)
    if starts:
        summary["start"] = summarise_starts(starts)
    if lat:
        summary["latency"] = summarise_latency(lat)
    summary["goals"] = goals(summary)
    print()
    print(report(summary, args, info))
    for w in warnings(runs, starts, lat, summary):
        print(w)
    print_command()
    if args.json:
        doc = {
            "machine": info,
            "config": vars(args)
            | {
                "agent_config": agent_config("BACKEND"),
                "latency_bounds_s": FINE_BOUNDS_S,
                "goals": {
                    "ns_per_io": GOAL_NS_PER_IO,
                    "points_vs_empty": GOAL_POINTS_VS_EMPTY,
                    "ready_s": GOAL_READY_S,
                    "rss_mb": GOAL_RSS_MB,
                    "lat_ratio": GOAL_LAT_RATIO,
                },
            },
            "summary": summary,
            "runs": [asdict(r) for r in runs],
            "starts": [asdict(s) for s in starts],
            "latency_runs": [asdict(r) for r in lat],
        }
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str) + "\n")
        log(f"raw numbers written to {args.json}")
    return 0


def _names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(
                f"a comma-separated list of distinct names from {','.join(allowed)}"
            )
        return names

    return parse


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(
        prog="python -m bench.blockio_overhead",
        description=(package.__doc__ or "").splitlines()[0],
    )
    p.add_argument(
        "--parts", type=_names(PARTS), default=list(PARTS), help="default iops,start,latency"
    )
    p.add_argument(
        "--tracers",
        type=_names(TRACERS),
        default=list(DEFAULT_TRACERS),
        help="tracers of the iops part (default core,bcc,empty,bpftrace; ebpf_exporter too)",
    )
    p.add_argument(
        "--ebpf-exporter",
        type=Path,
        help="ebpf_exporter's binary, its source tree beside it (the ebpf_exporter tracer)",
    )
    p.add_argument(
        "--libbpf-include",
        type=Path,
        default=Path("/usr/include"),
        help="libbpf headers for ebpf_exporter's example (a libbpf >= 1.2)",
    )
    p.add_argument("--pairs", type=int, default=9, help="pairs per tracer (default 9)")
    p.add_argument("--runtime", type=int, default=10, help="seconds per fio run (default 10)")
    p.add_argument(
        "--cost-runtime",
        type=int,
        default=5,
        help="seconds of the extra fio run with bpf_stats on that measures ns/IO (default 5)",
    )
    p.add_argument("--warmup", type=int, default=3, help="uncounted first fio run, s (0: none)")
    p.add_argument("--seed", type=int, help="shuffle the order in each round (default rotate)")
    p.add_argument("--starts", type=int, default=5, help="agent starts per backend (default 5)")
    p.add_argument(
        "--settle", type=float, default=3.0, help="seconds after ready before VmRSS (default 3)"
    )
    p.add_argument("--lat-pairs", type=int, help="latency pairs core/bcc (default: --pairs)")
    p.add_argument("--lat-bs", default="4k", help="request size of the latency runs (default 4k)")
    p.add_argument(
        "--lat-io-size", default="1g", help="fio io_size of each latency run (default 1g)"
    )
    p.add_argument(
        "--lock-timeout",
        type=float,
        default=3600,
        help=f"seconds to wait for {LOCK} (default 3600)",
    )
    p.add_argument("--json", metavar="FILE", help="write every run's raw numbers here")
    p.add_argument("--hold-empty", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.hold_empty:
        return hold_empty()
    if args.lat_pairs is None:
        args.lat_pairs = args.pairs
    if min(args.pairs, args.runtime, args.cost_runtime, args.starts, args.lat_pairs) < 1:
        p.error("--pairs, --runtime, --cost-runtime, --starts and --lat-pairs must be >= 1")
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        return bench(args)
    except BenchError as exc:
        print(f"blockio_overhead: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "blockio_overhead: interrupted; loop device, tracers and sysctl cleaned up",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
