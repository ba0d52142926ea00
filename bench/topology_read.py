"""The block topology's read (disk -> controller -> PCIe -> NUMA), this checkout against another
revision (issue 35: blockio's first collect on the start's critical path, and each refresh).

Run (root): PYTHONPATH=. .venv/bin/python bench/topology_read.py [--against main] [--disks 48]
     [--rounds 8] [--reads 30]
``--disks`` loop disks (``wattbit-bench-topo-*`` in /dev/shm) beside the machine's own; each
round runs each tree in a fresh interpreter (in alternating order), which times
``exporters.hostfs.blockdevs.read_topology()`` of the live /sys once cold (its first call) and
``--reads`` times after, and counts the readlink(2) calls of one read. Medians over the rounds,
in ms of wall time. Both trees must describe the devices alike (checked, or the bench fails).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    alternate,
    bench_lock,
    git_tree,
    load_average,
    median,
    print_command,
    ratio,
    table,
)

# Run in each tree's own interpreter: the modules of one tree never meet the other's.
_CHILD = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from exporters.hostfs import tree
from exporters.hostfs.blockdevs import read_topology
t = time.perf_counter(); first = read_topology(); cold = time.perf_counter() - t
times = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); again = read_topology(); times.append(time.perf_counter() - t)
assert again == first
calls = [0]
readlink = os.readlink
def counted(*a, **k):
    calls[0] += 1
    return readlink(*a, **k)
tree.os.readlink = counted  # tree's os is the os module: put back below
try:
    read_topology()
finally:
    tree.os.readlink = readlink
times.sort()
described = sorted([k, v.controller, v.numa_node, v.model, v.serial] for k, v in first.items())
print(json.dumps({"cold_ms": cold * 1e3, "warm_ms": times[len(times) // 2] * 1e3,
                  "readlinks": calls[0], "devices": len(first), "described": described}))
"""


def one(tree: Path, reads: int) -> dict[str, object]:
    """One fresh interpreter's figures for the tree."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tree), str(reads)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def main() -> None:
    """Alternate the two trees' reads; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="main", help="git revision to compare with")
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reads", type=int, default=30)
    args = ap.parse_args()
    from collector.demo.loopdisks import loop_disks

    print("load average before:", load_average())
    results: dict[str, list[dict[str, object]]] = {"this": [], args.against: []}
    described: dict[str, object] = {}
    with (
        tempfile.TemporaryDirectory(prefix="wattbit-bench-topo-") as tmp,
        loop_disks(args.disks, 4, prefix="wattbit-bench-topo-"),
        bench_lock(),
    ):
        trees = {"this": ROOT, args.against: git_tree(args.against, Path(tmp))}
        for _, name in alternate(list(trees), args.rounds):
            r = one(trees[name], args.reads)
            described[name] = r.pop("described")
            results[name].append(r)
    print("load average after:", load_average())
    if described["this"] != described[args.against]:
        raise SystemExit("the two trees describe the devices differently")
    keys = ("cold_ms", "warm_ms", "readlinks", "devices")
    med = {
        n: {k: median([float(str(r[k])) for r in rs]) or 0.0 for k in keys}
        for n, rs in results.items()
    }
    rows: list[list[object]] = [[n, *(f"{m[k]:.2f}" for k in keys)] for n, m in med.items()]
    this, base = med["this"], med[args.against]
    ratios = (ratio(this[k], base[k]) for k in keys[:3])
    rows.append(["ratio", *("-" if r is None else f"{r:.2f}" for r in ratios), ""])
    table(["tree", "first read ms", "later reads ms", "readlinks per read", "devices"], rows)
    print_command()


if __name__ == "__main__":
    main()
