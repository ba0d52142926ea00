#!/usr/bin/env python3
"""Cost of wattbit's blockio eBPF tracer: fio IOPS with and without it, and its BPF run time.

Runs 4k random reads at QD32 on a loop device over tmpfs (the fastest block device at hand,
so a per-I/O cost shows up as much as it can) in alternating pairs: each pair is one fio run
without any tracer and one with the tracer attached, the order swapped from pair to pair so
drift does not bias one side. Tracers:

  wattbit   the real agent (python -m collector.cli agent, blockio backend bcc), scraped once
            a second during the run as Prometheus would
  bpftrace  bench/blockio_overhead.bt, roughly the same work written as a bpftrace script

Kernel-side cost comes from kernel.bpf_stats_enabled (run_time_ns / run_cnt per program, read
with bpftool): the deltas of the issue and complete programs over a run, divided by fio's
total I/Os. That accounting is not free (two clock reads and a per-CPU update around every
program run, ~40 ns per run here), and it slows only the side with a tracer: so the IOPS of
both sides are measured with it off, and each tracer session then runs a separate cost run
(--cost-runtime seconds) with it on, whose IOPS are reported but not compared. Needs root, fio
(libaio), bpftool, bpftrace, losetup and bcc.

    sudo .venv/bin/python bench/blockio_overhead.py [--pairs 5] [--runtime 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from collector.demo.procs import free_port  # noqa: E402  (the demo's and the tests' helper)

BT_SCRIPT = Path(__file__).resolve().with_suffix(".bt")
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
GOAL_RATIO = 0.98  # IOPS with the tracer / without
GOAL_NS_PER_IO = 300.0  # issue + complete programs, per I/O
LOOP_SIZE = 1 << 30
NEIGHBOUR_SHARE = 0.02  # another process using more than 2% of one CPU during a run is noise
READY_MARK = 'wattbit_blockio_backend_info{backend="bcc"'
PR_SET_PDEATHSIG = 1

TOOLS = {
    "fio": "apt-get install fio",
    "bpftool": "apt-get install bpftool",
    "bpftrace": "apt-get install bpftrace",
    "losetup": "apt-get install mount",
}


class BenchError(Exception):
    """The benchmark cannot run or a step failed; the message says what to do."""


def log(msg: str) -> None:
    """Progress on stderr, so stdout holds only the results table."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- child processes ---------------------------------------------------------------------


def _child_setup() -> None:
    # Die with the bench even if it is SIGKILLed: a stray tracer would keep BPF programs
    # attached to every block request on the host.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    # bpftrace warns (harmlessly, memcg accounting has replaced memlock since 5.11) when it
    # cannot raise RLIMIT_MEMLOCK; raise it for it when we are allowed to.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(
            resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )


def _stop(proc: subprocess.Popen[Any], sig: int, timeout: float = 15.0) -> None:
    """Signal proc, wait for it, SIGKILL it if it does not exit in time."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log(f"pid {proc.pid} did not exit on signal {sig}; killing it")
        proc.kill()
        proc.wait()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of pid (its own threads, not BPF time, which runs in I/O tasks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- BPF program statistics --------------------------------------------------------------


@dataclass
class Prog:
    """One loaded BPF program as bpftool shows it."""

    id: int
    name: str
    run_time_ns: int
    run_cnt: int

    @property
    def kind(self) -> str:
        """issue, complete, requeue or other, from the (possibly truncated) name."""
        # bcc names them tracepoint__block__block_rq_issue; bpftrace 0.17 block_rq_issue,
        # cut to the kernel's 15 characters (block_rq_comple) as it loads them without BTF.
        n = self.name.lower()
        for needle, kind in (("issue", "issue"), ("compl", "complete"), ("requeu", "requeue")):
            if "block_rq_" in n and needle in n:
                return kind
        return "other"


def bpf_progs() -> dict[int, Prog]:
    """Every loaded BPF program with its run-time statistics."""
    out = subprocess.run(
        ["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise BenchError(f"bpftool prog show failed: {out.stderr.strip()}")
    progs = {}
    for p in json.loads(out.stdout or "[]"):
        # bpftool leaves run_time_ns/run_cnt out while they are zero.
        progs[p["id"]] = Prog(
            p["id"], p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0)
        )
    return progs


def owned_prog_ids(pid: int) -> set[int]:
    """IDs of the BPF programs process pid holds open (fdinfo of its program fds)."""
    ids = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    with contextlib.suppress(OSError):
        for f in fdinfo.iterdir():
            with contextlib.suppress(OSError):
                for line in f.read_text().splitlines():
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split(":", 1)[1]))
    return ids


def block_progs(pid: int, before: set[int], timeout: float = 30.0) -> list[int]:
    """The block_rq_* programs the tracer pid loaded; wait for them to appear."""
    deadline = time.monotonic() + timeout
    while True:
        progs = bpf_progs()
        # Match by owner, so other engineers' tests loading the same programs never count;
        # fall back to "new since the tracer started" should a tracer close its fds.
        mine = owned_prog_ids(pid) or (set(progs) - before)
        ids = sorted(i for i in mine if i in progs and progs[i].kind != "other")
        kinds = {progs[i].kind for i in ids}
        if {"issue", "complete"} <= kinds:
            return ids
        if time.monotonic() > deadline:
            raise BenchError(
                f"pid {pid} loaded no block_rq issue+complete programs within {timeout:.0f} s "
                f"(saw {[progs[i].name for i in ids]})"
            )
        time.sleep(0.2)


def foreign_block_progs(ours: set[int]) -> list[str]:
    """block_rq_* programs loaded by someone else (they would add noise to both sides)."""
    return [
        f"{p.id}:{p.name}" for p in bpf_progs().values() if p.kind != "other" and p.id not in ours
    ]


# --- tracers -----------------------------------------------------------------------------


class Tracer(Protocol):
    """A block-layer tracer the bench can start, measure and stop."""

    name: str
    pid: int

    def start(self) -> list[int]:
        """Start and attach; return the IDs of its block_rq_* programs."""
        ...

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Start whatever the tracer does while fio runs; the callable stops it."""
        ...

    def stop(self) -> None:
        """Detach and exit (idempotent)."""
        ...


class AgentTracer:
    """The real wattbit agent with the bcc blockio backend, scraped once a second."""

    name = "wattbit"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.config = workdir / "agent.yaml"
        self.config.write_text("blockio:\n  backend: bcc\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.url = ""
        self.logfile = workdir / "agent.log"

    def start(self) -> list[int]:
        """Start the agent, wait until /metrics shows the bcc backend."""
        before = set(bpf_progs())
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/metrics"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with self.logfile.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "collector.cli",
                    "agent",
                    "--config",
                    str(self.config),
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--log-level",
                    "warning",
                ],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Own session: the bench, not the terminal's Ctrl-C, decides when it stops.
                start_new_session=True,
                preexec_fn=_child_setup,
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 120  # bcc compiles blockio.c: seconds, more on a busy box
        while True:
            if self.proc.poll() is not None:
                raise BenchError(
                    f"the agent exited with {self.proc.returncode}:\n{self._log_tail()}"
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url, timeout=2) as r:
                if READY_MARK in r.read().decode():
                    break
            if time.monotonic() > deadline:
                raise BenchError(f"the agent never served {READY_MARK}:\n{self._log_tail()}")
            time.sleep(0.3)
        return block_progs(self.pid, before)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-20:])
        return ""

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Scrape /metrics every second from a thread, like a Prometheus server would."""
        stop = threading.Event()
        counts = {"scrapes": 0, "scrape_errors": 0, "scrape_bytes": 0}

        def scrape() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(self.url, timeout=5) as r:
                        counts["scrape_bytes"] += len(r.read())
                    counts["scrapes"] += 1
                except OSError:
                    counts["scrape_errors"] += 1
                stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))

        thread = threading.Thread(target=scrape, name="scraper", daemon=True)
        thread.start()

        def finish() -> dict[str, Any]:
            stop.set()
            thread.join(10)
            return counts

        return finish

    def stop(self) -> None:
        """SIGTERM the agent (it closes the BPF programs) and wait."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGTERM)
            self.proc = None


class BpftraceTracer:
    """bench/blockio_overhead.bt under bpftrace."""

    name = "bpftrace"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.lines: list[str] = []

    def start(self) -> list[int]:
        """Start bpftrace, wait for "Attaching" and for its programs to be loaded."""
        before = set(bpf_progs())
        attaching = threading.Event()
        self.lines = []
        self.proc = subprocess.Popen(
            ["bpftrace", str(BT_SCRIPT)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup,
        )
        self.pid = self.proc.pid
        proc = self.proc

        def drain() -> None:
            # Keep reading to the end: bpftrace prints every map on exit and would block on a
            # full pipe. Only the head is kept, for error messages.
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                if len(self.lines) < 40:
                    self.lines.append(line)
                if line.startswith("Attaching"):
                    attaching.set()
            attaching.set()

        threading.Thread(target=drain, name="bpftrace-out", daemon=True).start()
        if not attaching.wait(60) or self.proc.poll() is not None:
            raise BenchError("bpftrace did not attach:\n" + "\n".join(self.lines))
        ids = block_progs(self.pid, before)
        # "Attaching" is printed before the attach calls; the programs are loaded by now, give
        # the attach a moment to finish.
        time.sleep(1.0)
        return ids

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Nothing: bpftrace only prints its maps on exit."""
        return lambda: {}

    def stop(self) -> None:
        """SIGINT bpftrace (it prints its maps and detaches) and wait."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGINT)
            self.proc = None


# --- the loop device and fio -------------------------------------------------------------


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


@contextlib.contextmanager
def bpf_stats_off() -> Iterator[None]:
    """kernel.bpf_stats_enabled=0 for the duration (see bpf_stats_on), the previous value after."""
    previous = BPF_STATS.read_text().strip()
    BPF_STATS.write_text("0")
    try:
        yield
    finally:
        BPF_STATS.write_text(previous)


@contextlib.contextmanager
def bpf_stats_on() -> Iterator[None]:
    """kernel.bpf_stats_enabled=1 for one cost run only: the accounting slows every program run."""
    BPF_STATS.write_text("1")
    try:
        yield
    finally:
        BPF_STATS.write_text("0")


def fio_run(dev: str, runtime: int) -> dict[str, Any]:
    """One fio 4k random-read QD32 run on dev; its read statistics."""
    cmd = [
        "fio",
        "--name=randread",
        f"--filename={dev}",
        "--ioengine=libaio",
        "--iodepth=32",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--time_based",
        f"--runtime={runtime}",
        "--output-format=json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=runtime + 60)
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
    return {
        "iops": float(read["iops"]),
        "total_ios": int(read["total_ios"]),
        "runtime_ms": int(read["runtime"]),
        "clat_mean_ns": float(read["clat_ns"]["mean"]),
        "fio_usr_cpu_pct": float(job["usr_cpu"]),
        "fio_sys_cpu_pct": float(job["sys_cpu"]),
    }


# --- measuring ---------------------------------------------------------------------------


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
    cost_run: dict[str, Any] = field(default_factory=dict)  # its fio numbers, steal, neighbours
    extra: dict[str, Any] = field(default_factory=dict)
    loadavg_before: str = ""
    foreign_progs: list[str] = field(default_factory=list)
    steal_pct: float = 0.0
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def _processes() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every userspace process: pid -> (comm, seconds)."""
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
        out[int(d.name)] = (comm.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / tick)
    return out


def _cpu_totals() -> list[int]:
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def _fio_watched(dev: str, runtime: int, ours: set[int]) -> dict[str, Any]:
    """fio_run, plus other processes' CPU and the VM's steal time meanwhile."""
    # On a 2-CPU box anything else busy (a build, a test suite) moves IOPS far more than a
    # tracer does, so every run records who else ran; the report flags those runs.
    procs0, cpu0 = _processes(), _cpu_totals()
    out = fio_run(dev, runtime)
    procs1, cpu1 = _processes(), _cpu_totals()
    delta = [b - a for a, b in zip(cpu0, cpu1, strict=False)]
    out["steal_pct"] = round(100 * delta[7] / max(1, sum(delta)), 2) if len(delta) > 7 else 0.0
    out["neighbours"] = []
    me = os.getpid()
    for pid, (comm, secs) in procs1.items():
        used = secs - procs0.get(pid, (comm, 0.0))[1]
        if pid in ours or pid == me or comm == "fio" or used < NEIGHBOUR_SHARE * runtime:
            continue
        out["neighbours"].append({"pid": pid, "comm": comm, "cpu_s": round(used, 2)})
    return out


def measure(dev: str, runtime: int, cost_runtime: int, run: Run, tracer: Tracer | None) -> Run:
    """One fio run (bpf_stats off), with tracer attached if given; then its cost run."""
    run.loadavg_before = Path("/proc/loadavg").read_text().strip()
    if tracer is None:
        run.foreign_progs = foreign_block_progs(set())
        for key, value in _fio_watched(dev, runtime, set()).items():
            setattr(run, key, value)
        return run
    try:
        ids = tracer.start()
        run.foreign_progs = foreign_block_progs(set(ids))
        cpu0 = _cpu_seconds(tracer.pid)
        finish = tracer.during_run()
        try:
            # The IOPS the pair compares: bpf_stats off, as on a production host.
            for key, value in _fio_watched(dev, runtime, {tracer.pid}).items():
                setattr(run, key, value)
            run.tracer_cpu_s = round(_cpu_seconds(tracer.pid) - cpu0, 3)
            # The cost run: the same tracer session, bpf_stats on, a fio run of its own.
            with bpf_stats_on():
                before = bpf_progs()
                run.cost_run = _fio_watched(dev, cost_runtime, {tracer.pid})
                after = bpf_progs()
        finally:
            run.extra = finish()
    finally:
        tracer.stop()
    ns = 0
    for i in ids:
        b, a = before[i], after.get(i)
        if a is None:
            raise BenchError(f"{tracer.name}'s program {i} ({b.name}) vanished during the run")
        d_ns, d_cnt = a.run_time_ns - b.run_time_ns, a.run_cnt - b.run_cnt
        run.progs.append(
            {"id": i, "name": a.name, "kind": a.kind, "run_time_ns": d_ns, "run_cnt": d_cnt}
        )
        if a.kind in ("issue", "complete"):
            ns += d_ns
    cost_ios = run.cost_run.get("total_ios", 0)
    run.kernel_ns_per_io = ns / cost_ios if cost_ios else None
    leaked = set(ids) & set(bpf_progs())
    if leaked:
        log(f"warning: {tracer.name}'s programs {sorted(leaked)} still loaded after it stopped")
    return run


def _describe(run: Run) -> str:
    s = f"{run.iops:>10,.0f} IOPS"
    if run.kernel_ns_per_io is not None:
        cost = run.cost_run
        s += f"; cost run: {cost['iops']:,.0f} IOPS, {run.kernel_ns_per_io:6.1f} ns/IO in BPF"
        cnt = {p["kind"]: p["run_cnt"] for p in run.progs}
        s += f" (runs: issue {cnt.get('issue', 0):,}, complete {cnt.get('complete', 0):,}"
        s += f", fio I/Os {cost['total_ios']:,})"
        if cost["neighbours"]:
            busy = ", ".join(
                f"{n['comm']}[{n['pid']}] {n['cpu_s']:.1f} s" for n in cost["neighbours"]
            )
            s += f"  [cost run NOISY: {busy}]"
    if run.tracer_cpu_s is not None:
        s += f", tracer CPU {run.tracer_cpu_s:.2f} s"
    if run.steal_pct >= 1:
        s += f", steal {run.steal_pct:.1f}%"
    if run.foreign_progs:
        s += f"  [other block tracers loaded: {', '.join(run.foreign_progs)}]"
    if run.neighbours:
        busy = ", ".join(f"{n['comm']}[{n['pid']}] {n['cpu_s']:.1f} s" for n in run.neighbours)
        s += f"  [NOISY: other processes used CPU: {busy}]"
    return s


def summarise(runs: list[Run], tracers: list[str]) -> dict[str, dict[str, Any]]:
    """Per tracer: IOPS ratios over pairs, median IOPS of each side, median ns per I/O."""
    out = {}
    for name in tracers:
        pairs: dict[int, dict[str, Run]] = {}
        for r in runs:
            if r.against == name:
                pairs.setdefault(r.pair, {})["on" if r.tracer == name else "off"] = r
        done = [p for p in pairs.values() if {"on", "off"} <= p.keys()]
        if not done:
            continue
        ratios = [p["on"].iops / p["off"].iops for p in done]
        ns = [p["on"].kernel_ns_per_io for p in done if p["on"].kernel_ns_per_io is not None]
        per_prog: dict[str, list[float]] = {}
        for p in done:
            cost_ios = p["on"].cost_run.get("total_ios", 0)
            for prog in p["on"].progs if cost_ios else []:
                per_prog.setdefault(prog["kind"], []).append(prog["run_time_ns"] / cost_ios)
        out[name] = {
            "pairs": len(done),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "ratios": ratios,
            "iops_off_median": statistics.median(p["off"].iops for p in done),
            "iops_on_median": statistics.median(p["on"].iops for p in done),
            "ns_per_io_median": statistics.median(ns) if ns else None,
            "ns_per_io": ns,
            "ns_per_io_by_program_median": {k: statistics.median(v) for k, v in per_prog.items()},
            "cost_iops_median": statistics.median(
                p["on"].cost_run["iops"] for p in done if p["on"].cost_run
            )
            if any(p["on"].cost_run for p in done)
            else None,
            "noisy_runs": sum(bool(r.neighbours) for p in done for r in p.values()),
            "noisy_cost_runs": sum(bool(p["on"].cost_run.get("neighbours")) for p in done),
        }
    return out


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The results as a fixed-width text table, goals alongside."""
    head = (
        f"{'tracer':<9} {'pairs':>5} {'IOPS off':>10} {'IOPS on':>10} "
        f"{'ratio med':>9} {'min':>6} {'max':>6} {'ns/IO med':>9}  goals"
    )
    lines = [head, "-" * len(head)]
    for name, s in summary.items():
        ns = s["ns_per_io_median"]
        ratio_ok = "ok" if s["ratio_median"] >= GOAL_RATIO else "MISSED"
        ns_ok = "ok" if ns is not None and ns <= GOAL_NS_PER_IO else "MISSED"
        lines.append(
            f"{name:<9} {s['pairs']:>5} {s['iops_off_median']:>10,.0f} "
            f"{s['iops_on_median']:>10,.0f} {s['ratio_median']:>9.4f} {s['ratio_min']:>6.3f} "
            f"{s['ratio_max']:>6.3f} {ns if ns is not None else float('nan'):>9.1f}  "
            f"ratio>={GOAL_RATIO} {ratio_ok}, ns/IO<={GOAL_NS_PER_IO:.0f} {ns_ok}"
        )
    for name, s in summary.items():
        progs = ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(s["ns_per_io_by_program_median"].items())
        )
        cost = s["cost_iops_median"]
        lines.append(
            f"{name}: ns/IO by program (median): {progs or '-'}; IOPS in the cost runs "
            f"(bpf_stats on, not compared): {cost if cost is None else f'{cost:,.0f}'}"
        )
    return "\n".join(lines)


def _version(cmd: list[str]) -> str:
    with contextlib.suppress(OSError):
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    return "?"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu": cpu,
        "fio": _version(["fio", "--version"]),
        "bpftrace": _version(["bpftrace", "--version"]),
        "bpftool": _version(["bpftool", "version"]),
        "python": platform.python_version(),
    }


def preflight() -> None:
    """Fail early, with what to install, when something the bench needs is missing."""
    if os.geteuid() != 0:
        raise BenchError("must run as root (loop devices, BPF, sysctl)")
    missing = [f"{t} (install: {how})" for t, how in TOOLS.items() if shutil.which(t) is None]
    if missing:
        raise BenchError("missing tools: " + "; ".join(missing))
    if not BT_SCRIPT.is_file():
        raise BenchError(f"{BT_SCRIPT} is missing")
    if not BPF_STATS.exists():
        raise BenchError(f"{BPF_STATS} does not exist: this kernel cannot count BPF run time")
    if not Path("/dev/shm").is_dir():
        raise BenchError("/dev/shm (tmpfs) is missing")
    try:
        import bcc  # noqa: F401
    except ImportError as exc:
        raise BenchError(
            f"cannot import bcc with {sys.executable} ({exc}); install python3-bpfcc and use "
            "the project's --system-site-packages virtualenv"
        ) from exc


def _sigterm(*_: object) -> None:
    # Treat SIGTERM like Ctrl-C, so every finally (tracer, loop device, sysctl) runs; only
    # once, so a second SIGTERM cannot cut the clean-up itself short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def bench(args: argparse.Namespace) -> int:
    """Run the pairs, print the table, write the JSON."""
    preflight()
    info = machine()
    log(f"machine: {info['nproc']} CPUs, kernel {info['kernel']}, {info['cpu']}")
    runs: list[Run] = []
    rng = random.Random(args.seed)
    with (
        tempfile.TemporaryDirectory(prefix="wattbit-bench-") as tmp,
        bpf_stats_off(),
        loop_device() as dev,
    ):
        log(f"loop device {dev} over 1 GiB in /dev/shm, nomerges=2")
        tracers: list[Tracer] = [AgentTracer(Path(tmp)), BpftraceTracer(Path(tmp))]
        try:
            if args.warmup > 0:
                log(f"warm-up: fio {args.warmup} s without tracer (not counted)")
                fio_run(dev, args.warmup)
            for pair in range(args.pairs):
                # Alternate which side goes first (and which tracer), so slow drift in the
                # machine's speed lands on both sides equally; --seed shuffles instead.
                flip = pair % 2 == 1 if args.seed is None else rng.random() < 0.5
                for tracer in reversed(tracers) if flip else tracers:
                    sides: list[Tracer | None] = [tracer, None] if flip else [None, tracer]
                    for position, side in enumerate(sides):
                        label = side.name if side else "no tracer"
                        log(f"pair {pair + 1}/{args.pairs} [{tracer.name}] {label}: fio ...")
                        run = Run(
                            tracer=side.name if side else "none",
                            against=tracer.name,
                            pair=pair,
                            position=position,
                        )
                        runs.append(measure(dev, args.runtime, args.cost_runtime, run, side))
                        log(
                            f"pair {pair + 1}/{args.pairs} [{tracer.name}] {label}: "
                            + _describe(run)
                        )
        finally:
            for t in tracers:
                t.stop()
    summary = summarise(runs, [t.name for t in tracers])
    print()
    print(
        f"fio 4k randread QD32 libaio direct, {args.runtime} s per run (bpf_stats off), "
        f"+{args.cost_runtime} s cost run per tracer run (bpf_stats on), loop on tmpfs, "
        f"{info['nproc']} CPUs, kernel {info['kernel']}"
    )
    print(table(summary))
    noisy = sum(bool(r.neighbours) for r in runs)
    if noisy:
        print(
            f"WARNING: in {noisy} of {len(runs)} runs other processes used more than "
            f"{NEIGHBOUR_SHARE:.0%} of a CPU (see the log above or 'neighbours' in the JSON): "
            "the IOPS ratios are not trustworthy; rerun on an idle machine"
        )
    noisy_cost = sum(bool(r.cost_run.get("neighbours")) for r in runs)
    if noisy_cost:
        print(
            f"WARNING: other processes were busy in {noisy_cost} cost runs: ns/IO may be "
            "inflated (cache contention)"
        )
    if args.json:
        doc = {
            "machine": info,
            "config": vars(args) | {"goal_ratio": GOAL_RATIO, "goal_ns_per_io": GOAL_NS_PER_IO},
            "summary": summary,
            "runs": [asdict(r) for r in runs],
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        log(f"raw numbers written to {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5, help="pairs per tracer (default 5)")
    p.add_argument("--runtime", type=int, default=10, help="seconds per fio run (default 10)")
    p.add_argument(
        "--cost-runtime",
        type=int,
        default=5,
        help="seconds of the extra fio run with bpf_stats on that measures ns/IO (default 5)",
    )
    p.add_argument("--warmup", type=int, default=3, help="uncounted first fio run, s (0: none)")
    p.add_argument("--seed", type=int, help="shuffle the order in each pair (default alternate)")
    p.add_argument("--json", metavar="FILE", help="write every run's raw numbers here")
    args = p.parse_args(argv)
    if args.pairs < 1 or args.runtime < 1 or args.cost_runtime < 1:
        p.error("--pairs, --runtime and --cost-runtime must be at least 1")
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
