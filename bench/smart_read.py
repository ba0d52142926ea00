"""The cost of reading drive health with smartctl, per device, on this machine.

Run: sudo .venv/bin/python bench/smart_read.py [--repeat 50]

For every disk the smart exporter would read here (blockio's whole disks that are not virtual),
alternately (ABC CBA ABC ...): (a) smartctl with the exporter's argv (`--nocheck=standby`,
which asks the drive's power mode first), (b) the same without `--nocheck=standby` and (c)
without the two logs (`--log=error --log=selftest`, the read before issue 32). Medians of the
wall time per run and of smartctl's CPU time (user + system, from the children's rusage); then
`smartctl --scan-open` (the RAID discovery, once per cycle); then one probe of an empty slot
per probe type (`-d cciss,0`, `3ware,0`, `aacraid,0,0,0`, `areca,1`, `hpt,1/1` on the first
disk, alternately: what each slot tried behind a controller the scan does not list costs when
no disk answers; exporters/smart/probe.py) and the probe plan read from /sys; then whole
exporter cycles (every
disk, through the real runner and parser, until every result is published), alternately with
and without the RAID scan (`smart.raid`). Prints the smartctl version and what each disk answered:
on a VM without SMART the numbers are those of smartctl starting, probing and giving up.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import in_turn, print_command, ratio  # noqa: E402
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE  # noqa: E402
from exporters.hostfs.scsihosts import cciss_controllers, scsi_hosts  # noqa: E402
from exporters.smart.exporter import SmartExporter, device_path, list_disks  # noqa: E402
from exporters.smart.parse import parse_smartctl  # noqa: E402
from exporters.smart.probe import plan  # noqa: E402
from exporters.smart.runner import CHILD_ENV, SCAN_ARGS, SMARTCTL_ARGS, find_smartctl  # noqa: E402


def run_once(argv: list[str]) -> tuple[float, float, bytes, int]:
    """(wall seconds, child CPU seconds, output, exit status) of one smartctl run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, env=CHILD_ENV, timeout=120, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout, r.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--repeat", type=int, default=50, help="runs of each variant per disk")
    ap.add_argument("--cycles", type=int, default=20, help="whole exporter cycles")
    args = ap.parse_args()
    smartctl = find_smartctl()
    if smartctl is None:
        print("smartctl not found (apt-get install smartmontools)")
        return 1
    version = subprocess.run([smartctl, "--version"], capture_output=True, text=True, check=False)
    print(version.stdout.splitlines()[0] if version.stdout else smartctl)
    disks = [d for d in list_disks(Path("/sys"), BLOCK_EXCLUDE) if not d.virtual]
    if not disks:
        print("no disk to read here")
        return 1
    without = [a for a in SMARTCTL_ARGS if a != "--nocheck=standby"]
    nologs = [a for a in SMARTCTL_ARGS if not a.startswith("--log=")]
    print(f"{args.repeat} alternating runs per variant and disk, medians:")
    for d in disks:
        dev = device_path(d.name)
        argvs = {
            "with": [smartctl, *SMARTCTL_ARGS, dev],
            "without": [smartctl, *without, dev],
            "nologs": [smartctl, *nologs, dev],
        }
        walls: dict[str, list[float]] = {k: [] for k in argvs}
        cpus: dict[str, list[float]] = {k: [] for k in argvs}
        out, code = b"", 0
        for r in range(args.repeat):
            for k in in_turn(list(argvs), r):
                w, c, got, status = run_once(argvs[k])
                walls[k].append(w)
                cpus[k].append(c)
                if k == "with":  # what the exporter reads
                    out, code = got, status
        reading = parse_smartctl(out, code)
        size = len(out)
        print(f"  {dev}: smartctl exit {code}, {size} bytes of JSON, read as {reading.status}")
        if reading.detail:
            print(f"    ({reading.detail})")
        for label, wall, cpu in (
            ("with --nocheck=standby   ", walls["with"], cpus["with"]),
            ("without --nocheck=standby", walls["without"], cpus["without"]),
            ("without the two logs     ", walls["nologs"], cpus["nologs"]),
        ):
            print(
                f"    {label}: wall {statistics.median(wall) * 1e3:7.2f} ms,"
                f" smartctl CPU {statistics.median(cpu) * 1e3:6.2f} ms"
            )
    scan_wall: list[float] = []
    scan_cpu: list[float] = []
    for _ in range(args.repeat):
        w, c, out, code = run_once([smartctl, *SCAN_ARGS])
        scan_wall.append(w)
        scan_cpu.append(c)
    print(
        f"  smartctl --scan-open: wall {statistics.median(scan_wall) * 1e3:7.2f} ms,"
        f" smartctl CPU {statistics.median(scan_cpu) * 1e3:6.2f} ms (exit {code})"
    )
    probe_types = ["cciss,0", "3ware,0", "aacraid,0,0,0", "areca,1", "hpt,1/1"]
    first = device_path(disks[0].name)
    probe_wall: dict[str, list[float]] = {t: [] for t in probe_types}
    probe_cpu: dict[str, list[float]] = {t: [] for t in probe_types}
    for r in range(args.repeat):
        for t in in_turn(probe_types, r):
            w, c, out, code = run_once([smartctl, *SMARTCTL_ARGS, "-d", t, first])
            probe_wall[t].append(w)
            probe_cpu[t].append(c)
    for t in probe_types:
        print(
            f"  probe -d {t:<14} {first}: wall {statistics.median(probe_wall[t]) * 1e3:7.2f} ms,"
            f" smartctl CPU {statistics.median(probe_cpu[t]) * 1e3:6.2f} ms"
        )
    plan_s: list[float] = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        controllers = plan(scsi_hosts(Path("/sys")), cciss_controllers(Path("/sys")))
        plan_s.append(time.perf_counter() - t0)
    print(
        f"  probe plan from /sys: {statistics.median(plan_s) * 1e3:.3f} ms,"
        f" {len(controllers)} controller(s) to probe here"
    )
    cycles: dict[bool, list[float]] = {True: [], False: []}
    exporters = {raid: SmartExporter(autostart=False, concurrency=4, raid=raid) for raid in cycles}
    try:
        for r in range(args.cycles):
            for raid in in_turn(list(exporters), r):  # with and without the scan, alternately
                e = exporters[raid]
                t0 = time.perf_counter()
                e.run_cycle()
                if not e.wait_idle(300):
                    print("a cycle did not finish in 300 s")
                    return 1
                cycles[raid].append(time.perf_counter() - t0)
    finally:
        for e in exporters.values():
            e.close()
    with_scan, without_scan = (statistics.median(cycles[r]) for r in (True, False))
    print(
        f"one exporter cycle over {len(disks)} disk(s) (runner + parser + publish),"
        f" median of {args.cycles}: {with_scan * 1e3:.2f} ms with the RAID scan,"
        f" {without_scan * 1e3:.2f} ms without"
        f" (ratio {ratio(with_scan, without_scan) or float('nan'):.2f})"
    )
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
