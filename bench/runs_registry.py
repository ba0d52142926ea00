"""Run registry write latency against the number of runs it holds.

Every start and stop rewrites the whole state file (temporary file, fsync, rename, fsync of
the directory). This measures that cost with N ended runs (labels like a real run's) in a
state directory on disk, N alternated in rounds so that a load change hits every size alike,
and reports the median and 90th percentile of one start+stop pair per size.

    .venv/bin/python bench/runs_registry.py --sizes 100 1000 1800 --pairs 40 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, print_command  # noqa: E402
from collector.runs.registry import STATE_FILE, Run, RunRegistry  # noqa: E402

LABELS = {"site": "lab-a", "host": "brick-07", "phase": "full", "part_of": "sc10-stream-42"}


def registry(directory: Path, n: int) -> RunRegistry:
    """A registry on disk holding n ended runs (within retention, below the cap)."""
    reg = RunRegistry(directory / STATE_FILE, keep=n, max_runs=n)
    runs = {}
    now = time.time()

    for i in range(n):
        runs[f"stream-{i:05d}"] = Run(f"stream-{i:05d}", now - 3600 + i, now - 3000 + i, LABELS)
    reg._commit(runs)  # seed n runs without n writes
    return reg


def main() -> None:
    """Measure and print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 1800])
    ap.add_argument("--pairs", type=int, default=40, help="start+stop pairs per size and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/var/tmp", help="where the state directories go (a disk)")
    args = ap.parse_args()
    times: dict[int, list[float]] = {n: [] for n in args.sizes}
    sizes: dict[int, int] = {}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="wattbit-runs-bench-") as tmp:
        regs = {}
        for n in args.sizes:
            d = Path(tmp) / str(n)
            d.mkdir()
            regs[n] = registry(d, n)
            sizes[n] = (d / STATE_FILE).stat().st_size
        for r, n in alternate(args.sizes, args.rounds):  # sizes forwards, backwards, ...
            reg = regs[n]
            for i in range(args.pairs):
                name = f"bench-{r}-{i}"
                t0 = time.perf_counter()
                reg.start(name, LABELS)
                reg.stop(name)
                times[n].append((time.perf_counter() - t0) / 2)
                # still n runs: the earliest-ended went to make room (max_runs = n)
    print("| runs held | file size | median per write | p90 per write |")
    print("|---|---|---|---|")
    for n in args.sizes:
        ts = sorted(times[n])
        p90 = ts[int(0.9 * (len(ts) - 1))]
        print(
            f"| {n:,} | {sizes[n] / 1000:.0f} kB | {statistics.median(ts) * 1000:.1f} ms "
            f"| {p90 * 1000:.1f} ms |"
        )
    print_command()


if __name__ == "__main__":
    main()
