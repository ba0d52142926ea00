"""The machine under the blockio overhead bench: loop device, bpf_stats, lock, fio, neighbours."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.blockio_overhead.common import BPF_STATS, LOOP_SIZE, NEIGHBOUR_SHARE, BenchError, log
from bench.harness import (
    LOCK,
    bpf_stats,
)
from bench.harness import bench_lock as harness_lock

# --- the loop device, sysctl, lock, fio ---------------------------------------------------


@contextlib.contextmanager
def loop_device() -> Iterator[str]:
    """A 1 GiB loop device over a file in /dev/shm; always detached and removed afterwards."""
    fd, name = tempfile.mkstemp(prefix="wattbit-bench-", suffix=".img", dir="/dev/shm")
    backing = Path(name)
    try:
        # Allocate every page now, so reads hit real tmpfs pages from the first run on.
        os.posix_fallocate(fd, 0, LOOP_SIZE)
        os.close(fd)
        fd = -1
        out = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise BenchError(f"losetup failed: {out.stderr.strip()}")
        dev = out.stdout.strip()
        # 2 = no merging at all: every fio I/O is one request, one issue and one complete.
        Path(f"/sys/block/{Path(dev).name}/queue/nomerges").write_text("2")
        yield dev
    finally:
        if fd >= 0:
            os.close(fd)
        # Detach by backing file rather than by name, so a device attached just before an
        # interrupt (name not yet known) is found too.
        listed = subprocess.run(
            ["losetup", "--associated", str(backing), "--noheadings", "--output", "NAME"],
            capture_output=True,
            text=True,
            check=False,
        )
        for dev in listed.stdout.split():
            subprocess.run(["losetup", "--detach", dev], capture_output=True, check=False)
        backing.unlink(missing_ok=True)


def bpf_stats_off() -> contextlib.AbstractContextManager[None]:
    """kernel.bpf_stats_enabled=0 for the duration (see bpf_stats_on), the previous value after."""
    return bpf_stats("0")


@contextlib.contextmanager
def bpf_stats_on() -> Iterator[None]:
    """kernel.bpf_stats_enabled=1 for one cost run only: the accounting slows every program run."""
    BPF_STATS.write_text("1")
    try:
        yield
    finally:
        BPF_STATS.write_text("0")


@contextlib.contextmanager
def measuring_lock(timeout: float) -> Iterator[None]:
    """The machine's benchmark lock (bench/harness.py) for the measuring part."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(harness_lock(timeout, log=log))
        except TimeoutError as exc:
            raise BenchError(str(exc)) from None
        log(f"holding {LOCK}")
        yield


def fio_run(
    dev: str,
    runtime: int | None = None,
    iodepth: int = 32,
    io_size: str | None = None,
    bs: str = "4k",
) -> dict[str, Any]:
    """One fio random-read run of bs requests on dev, time-based (runtime) or sized (io_size)."""
    cmd = [
        "fio",
        "--name=randread",
        f"--filename={dev}",
        "--ioengine=libaio",
        f"--iodepth={iodepth}",
        "--direct=1",
        "--rw=randread",
        f"--bs={bs}",
        "--output-format=json",
    ]
    if io_size is not None:
        cmd += [f"--io_size={io_size}", "--lat_percentiles=1"]
        limit = 600
    else:
        assert runtime is not None
        cmd += ["--time_based", f"--runtime={runtime}"]
        limit = runtime + 60
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=limit)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"fio failed ({proc.returncode}): {err.strip()}")
    # fio may print notes before the JSON document.
    doc = json.loads(out[out.index("{") :])
    job = doc["jobs"][0]
    read = job["read"]
    res = {
        "iops": float(read["iops"]),
        "total_ios": int(read["total_ios"]),
        "runtime_ms": int(read["runtime"]),
        "clat_mean_ns": float(read["clat_ns"]["mean"]),
        "fio_usr_cpu_pct": float(job["usr_cpu"]),
        "fio_sys_cpu_pct": float(job["sys_cpu"]),
    }
    if io_size is not None:
        res |= {
            "slat_mean_ns": float(read["slat_ns"]["mean"]),
            "lat_mean_ns": float(read["lat_ns"]["mean"]),
            "clat_p50_ns": float(read["clat_ns"]["percentile"]["50.000000"]),
            "lat_p50_ns": float(read["lat_ns"]["percentile"]["50.000000"]),
        }
    return res


# --- who else runs -----------------------------------------------------------------------


def _processes() -> dict[int, tuple[str, int, float]]:
    """Every userspace process: pid -> (comm, ppid, CPU seconds so far)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm, rest = (d / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        if int(fields[1]) == 2 or d.name == "2":  # kernel threads: loop workers are the load
            continue
        out[int(d.name)] = (
            comm.split("(", 1)[1],
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / tick,
        )
    return out


def _cpu_totals() -> list[int]:
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


class Watch:
    """Other processes' CPU time and the VM's steal time over a window (a with block).

    On a 2-CPU box anything else busy (a build, a test suite) moves IOPS far more than a
    tracer does, so every measurement records who else ran; the report flags those."""

    def __init__(self, ours: set[int] | None = None) -> None:
        self.ours = ours or set()
        self.neighbours: list[dict[str, Any]] = []
        self.steal_pct = 0.0

    def __enter__(self) -> Watch:
        self._p0, self._c0, self._t0 = _processes(), _cpu_totals(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        procs, cpu = _processes(), _cpu_totals()
        window = time.monotonic() - self._t0
        delta = [b - a for a, b in zip(self._c0, cpu, strict=False)]
        if len(delta) > 7:
            self.steal_pct = round(100 * delta[7] / max(1, sum(delta)), 2)
        me = os.getpid()

        def ours(pid: int) -> bool:
            # The bench, the tracer and their children (the agent's smartctl runs).
            seen = 0
            while pid > 1 and seen < 64:
                if pid == me or pid in self.ours:
                    return True
                pid = procs.get(pid, ("", 0, 0.0))[1]
                seen += 1
            return False

        for pid, (comm, _, secs) in procs.items():
            used = secs - self._p0.get(pid, (comm, 0, 0.0))[2]
            if comm == "fio" or used < NEIGHBOUR_SHARE * window or ours(pid):
                continue
            self.neighbours.append({"pid": pid, "comm": comm, "cpu_s": round(used, 2)})


def fio_watched(dev: str, runtime: int, ours: set[int]) -> dict[str, Any]:
    """fio_run, plus other processes' CPU and the VM's steal time meanwhile."""
    with Watch(ours) as w:
        out = fio_run(dev, runtime)
    return out | {"steal_pct": w.steal_pct, "neighbours": w.neighbours}


def busy(neighbours: list[dict[str, Any]]) -> str:
    return ", ".join(f"{n['comm']}[{n['pid']}] {n['cpu_s']:.1f} s" for n in neighbours)
