"""The power exporter's cost per scrape: RAPL zones and hwmon chips read and rendered.

Run: .venv/bin/python bench/power_read.py [--repeat 2000]

Alternately (ABC CBA ABC ...), one PowerExporter.collect() (every zone's three files, every hwmon
chip's power and energy files, the families built) over: (a) node_exporter's real powercap
tree (2 zones), (b) kepler's test tree (3 zones, 21 hwmon directories), (c) a large synthetic
tree made here: 8 packages with package, core and dram zones (24 zones) and 32 hwmon chips
with two power and one energy channel each (a big 8-socket server with PMBus supplies; made
up, as its name says). Medians of CPU (time.process_time) and wall time per collection.
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
from exporters.power.exporter import PowerExporter  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "power"


def synthetic_tree(root: Path, packages: int = 8, chips: int = 32) -> Path:
    """A made-up big server's /sys: ``packages`` sockets of 3 zones, ``chips`` hwmon chips."""
    pc = root / "class" / "powercap"
    for p in range(packages):
        for key, name in ((f"intel-rapl:{p:x}", f"package-{p}"), (f"intel-rapl:{p:x}:0", "core"),
                          (f"intel-rapl:{p:x}:1", "dram")):  # fmt: skip
            z = pc / key
            z.mkdir(parents=True)
            (z / "name").write_text(name + "\n")
            (z / "energy_uj").write_text(f"{123456789 * (p + 1)}\n")
            (z / "max_energy_range_uj").write_text("262143328850\n")
    for c in range(chips):
        h = root / "class" / "hwmon" / f"hwmon{c}"
        h.mkdir(parents=True)
        (h / "name").write_text("pmbus\n")
        for i, v in ((1, 450_000_000), (2, 430_000_000)):
            (h / f"power{i}_input").write_text(f"{v}\n")
            (h / f"power{i}_label").write_text(f"pin{i}\n")
        (h / "energy1_input").write_text("987654321000\n")
        (h / "temp1_input").write_text("42000\n")
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "node_exporter (real, 2 zones)": FIXTURES / "node_exporter" / "sys",
            "kepler_synthetic (3 zones, 21 hwmon dirs)": FIXTURES / "kepler_synthetic" / "sys",
            "synthetic big server (24 zones, 32 chips)": synthetic_tree(Path(tmp)),
        }
        exporters = {k: PowerExporter(v) for k, v in trees.items()}
        cpu: dict[str, list[float]] = {k: [] for k in trees}
        wall: dict[str, list[float]] = {k: [] for k in trees}
        series: dict[str, int] = {}
        for _, k in alternate(list(exporters), args.repeat):  # ABC CBA ABC ...
            c0, w0 = time.process_time(), time.perf_counter()
            fams = list(exporters[k].collect())
            cpu[k].append(time.process_time() - c0)
            wall[k].append(time.perf_counter() - w0)
            series[k] = sum(len(f.samples) for f in fams)
    print(f"{args.repeat} alternating rounds, per collection (median):")
    for k in trees:
        print(f"  {k}: {series[k]} series, CPU {statistics.median(cpu[k]) * 1e3:.3f} ms, "
              f"wall {statistics.median(wall[k]) * 1e3:.3f} ms")  # fmt: skip
    print_command()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
