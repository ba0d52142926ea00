"""Does the kernel run the core program for every block_rq_complete? The kernel's own counts.

Run (root): PYTHONPATH=. .venv/bin/python bench/blockio_unseen.py [--runs 4] [--reads 40009]
     [--hogs 4]
Per run: a loop device of its own, the core backend attached, kernel.bpf_stats_enabled=1
(restored after), two ftrace instances on block_rq_complete (one filtered on the device, one
on every device), CPU hogs, fio random reads. Prints /proc/diskstats, ftrace's hits, the
program's count and unseen counter for the device, and the program's run_cnt against
ftrace's hits on every device with recursion_misses: run_cnt short of ftrace by what the
program did not count means the kernel did not run it (docs/exporters/blockio.md,
"Completions the program is not run for"). run_cnt counts only while bpf_stats is on: a
benchmark of another user switching it off meanwhile shows as run_cnt short of ftrace on every
device (or 0), not as a skip; compare the device's own counts first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bench.harness import print_command
from collector.demo.loopdisks import loop_disks
from exporters.blockio.bpfshared import BPF_STATS_SYSCTL, fdinfo
from exporters.blockio.core.backend import CoreBackend

TRACING = Path("/sys/kernel/tracing")
EVENT = "events/block/block_rq_complete"


@contextlib.contextmanager
def _instance(name: str, filt: str) -> Iterator[Path]:
    """An ftrace instance recording block_rq_complete (filtered), removed afterwards."""
    d = TRACING / "instances" / name
    d.mkdir()
    try:
        (d / "buffer_size_kb").write_text("8192")
        (d / EVENT / "filter").write_text(filt)
        (d / EVENT / "enable").write_text("1")
        yield d
    finally:
        (d / EVENT / "enable").write_text("0")
        d.rmdir()


def _written(d: Path) -> int:
    """Events the instance recorded (kept + overwritten), over its CPUs."""
    total = 0
    for cpu in (d / "per_cpu").iterdir():
        stats = dict(
            line.split(":", 1) for line in (cpu / "stats").read_text().splitlines() if ":" in line
        )
        total += int(stats["entries"]) + int(stats["overrun"])
    return total


@contextlib.contextmanager
def _hogs(n: int) -> Iterator[None]:
    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _kernel_reads(name: str) -> int:
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == name:
            return int(f[3])
    raise LookupError(name)


def one_run(reads: int, hogs: int) -> dict[str, int]:
    """One fio run under load; the counts of every source."""
    with loop_disks(1, size_mb=128, prefix="wattbit-unseen-") as (disk,):
        major, minor = Path(f"/sys/block/{disk.name}/dev").read_text().split(":")
        devt = (int(major) << 20) | int(minor)
        backend = CoreBackend([2**k * 1e-6 for k in range(25)])
        tag = f"wattbit-unseen-{os.getpid()}"
        try:
            with (
                _instance(f"{tag}-dev", f"dev == {devt}") as one,
                _instance(f"{tag}-all", "") as every,
            ):
                p0, f0 = backend.read(), fdinfo(backend._complete.fd)
                k0, o0, a0 = _kernel_reads(disk.name), _written(one), _written(every)
                with _hogs(hogs):
                    args = [f"--name={disk.name}", f"--filename={disk.device}", "--rw=randread"]
                    args += ["--bs=16k", "--ioengine=libaio", "--iodepth=16", "--direct=1"]
                    args += [f"--io_size={reads * 16384}", "--randrepeat=0"]
                    subprocess.run(["fio", *args], check=True, capture_output=True)
                k1, o1, a1 = _kernel_reads(disk.name), _written(one), _written(every)
                f1, p1 = fdinfo(backend._complete.fd), backend.read()
        finally:
            backend.close()

    def ios(p: dict, attr: str) -> int:  # type: ignore[type-arg]
        s = p.get(disk.name)
        return getattr(s.ops["read"], attr) if s and "read" in s.ops else 0

    return {
        "diskstats": k1 - k0,
        "ftrace": o1 - o0,
        "program": ios(p1, "ios") - ios(p0, "ios"),
        "unseen": ios(p1, "unseen") - ios(p0, "unseen"),
        "run_cnt": f1.get("run_cnt", 0) - f0.get("run_cnt", 0),
        "ftrace_all_devices": a1 - a0,
        "recursion_misses": f1.get("recursion_misses", 0) - f0.get("recursion_misses", 0),
    }


def main() -> None:
    """Repeat runs and print one JSON line each."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--reads", type=int, default=40009)
    ap.add_argument("--hogs", type=int, default=4)
    args = ap.parse_args()
    old = BPF_STATS_SYSCTL.read_text()
    BPF_STATS_SYSCTL.write_text("1")
    try:
        for _ in range(args.runs):
            print(json.dumps(one_run(args.reads, args.hogs)), flush=True)
    finally:
        BPF_STATS_SYSCTL.write_text(old)
    print_command()


if __name__ == "__main__":
    main()
