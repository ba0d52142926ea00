#!/usr/bin/env python3
"""Cost of wattbit's blockio tracers: IOPS kept, kernel time per I/O, agent start, latency.

One run, three parts (--parts), all on a loop device over tmpfs (the fastest block device at
hand, so a per-I/O cost shows up as much as it can), under /tmp/wattbit-bench.lock:

iops      fio 4k random reads at QD32 in alternating pairs: each pair is one fio run without
          any tracer and one with the tracer attached, the order swapped from pair to pair and
          the tracers rotated, so drift does not bias one side. Tracers (--tracers):

            core      the real agent (python -m collector.cli agent), blockio backend core: the
                      CO-RE program at tp_btf/block_rq_complete; scraped once a second during
                      the run as Prometheus would
            bcc       the real agent, blockio backend bcc (the backend core replaces), scraped
                      the same way
            empty     blockio.bpf.o's `empty` program alone at tp_btf/block_rq_complete, held by
                      a small subprocess (this script with --hold-empty): the floor of tracing
                      at all on the core's attach point
            bpftrace  bench/blockio_overhead.bt, the bcc program's work as a bpftrace script

          IOPS ratio = IOPS with / without, per pair, with kernel.bpf_stats_enabled=0. The
          core's against the empty program's: the median over pair rounds of (core ratio -
          empty ratio) in percentage points; both pairs of a round run within minutes of each
          other. Kernel time per I/O comes from a separate cost run per tracer session
          (--cost-runtime seconds, bpf_stats on: its accounting, ~40 ns per program run here,
          would slow only the traced side): the run_time_ns deltas of the tracer's programs
          attached to block_rq_* tracepoints (found with bpftool perf/link show and the
          tracer's own fds), divided by fio's I/Os. For the agents, the completions they
          counted on the loop device against fio's I/Os show missed events.

start     the agent started --starts times per backend (core and bcc alternately, after one
          uncounted start of each), with the default agent configuration apart from
          blockio.backend (nic and smart on, as deployed): seconds from spawn to the first
          /metrics answer holding wattbit_blockio_backend_info for that backend, and VmRSS
          (/proc/PID/status) after --settle seconds more of one scrape a second.

latency   the same fio job (4k random reads, QD1, libaio, direct, --lat-io-size bytes,
          lat_percentiles=1) run alternately under a core and a bcc agent (2 s after it is
          ready, so its start-up work is done), both with 31 fine latency bounds (1, 1.25,
          1.6, 2, 2.5, 3.2, 4, 5, 6.4, 8 x 10^k us, k = 0..2, and 1 ms): the median of the
          histogram's deltas over the run (interpolated as Prometheus' histogram_quantile
          does) and the mean (_sum/_count), against fio's clat and total-latency (slat +
          clat) medians of the same run. core/bcc: the median over pairs of the ratio of the
          two histogram medians, and of the ratio of each as a share of its own run's fio
          clat median (which cancels the machine's drift between the two runs).

Medians everywhere. Every fio run records other processes' CPU time (a 2-CPU machine shared
with a test suite moves IOPS far more than a tracer does) and foreign block_rq_* BPF programs;
the report flags both. Needs root, fio (libaio), bpftool, losetup, bcc, bpftrace (for that
tracer) and exporters/blockio/core/blockio.bpf.o (scripts/build-bpf.sh).

    sudo .venv/bin/python bench/blockio_overhead.py [--pairs 9] [--runtime 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.harness import (  # noqa: E402
    LOCK,
    alternate,
    commit,
    cpu_model,
    cpu_seconds,
    median,
    proc_status,
    spawn,
    stop,
    tool_version,
)
from bench.harness import bench_lock as harness_lock  # noqa: E402
from collector.demo.procs import free_port  # noqa: E402  (the demo's and the tests' helper)
from exporters.blockio.core.backend import OBJECT  # noqa: E402

BT_SCRIPT = Path(__file__).resolve().with_suffix(".bt")
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
BTF = Path("/sys/kernel/btf/vmlinux")
LOOP_SIZE = 1 << 30
NEIGHBOUR_SHARE = 0.02  # another process using more than 2% of one CPU during a run is noise
TRACERS = ("core", "bcc", "empty", "bpftrace")
PARTS = ("iops", "start", "latency")
# blockio.bpf.o's programs; --hold-empty loads only the last.
CORE_PROGRAMS = ("complete", "issue", "empty")

# Issue 15's goals (today's bcc figures in docs/benchmarks.md).
GOAL_NS_PER_IO = 150.0  # core: kernel time per I/O, bpf_stats
GOAL_POINTS_VS_EMPTY = 2.0  # core's IOPS ratio at most this many points below the empty one's
GOAL_READY_S = 1.0  # core agent: spawn to first /metrics with the backend
GOAL_RSS_MB = 60.0  # core agent: VmRSS, MB = 10^6 bytes
GOAL_LAT_RATIO = 0.10  # latency median core/bcc within 10 %
LAT_SETTLE_S = 2.0  # after the agent is ready, before the latency run: its start-up work done

# Fine latency bounds for the latency part: 10 per decade, 1 us .. 1 ms, 31 bounds (<= 32).
LAT_MANTISSAS = (1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.4, 8.0)
FINE_BOUNDS_S = [*(round(m * 10**k * 1000) / 1e9 for k in range(3) for m in LAT_MANTISSAS), 1e-3]

TOOLS = {
    "fio": "apt-get install fio",
    "bpftool": "apt-get install bpftool",
    "losetup": "apt-get install mount",
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class BenchError(Exception):
    """The benchmark cannot run or a step failed; the message says what to do."""


def log(msg: str) -> None:
    """Progress on stderr, so stdout holds only the results."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- child processes ---------------------------------------------------------------------


def _raise_memlock() -> None:
    # bpftrace warns (harmlessly, memcg accounting has replaced memlock since 5.11) when it
    # cannot raise RLIMIT_MEMLOCK; raise it for it when we are allowed to.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(
            resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )


def _spawn(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    # Dies with the bench even if it is SIGKILLed: a stray tracer would keep BPF programs
    # attached to every block request on the host.
    return spawn(cmd, setup=_raise_memlock, **kw)


def _stop(proc: subprocess.Popen[Any], sig: int, timeout: float = 15.0) -> None:
    """Signal proc, wait for it, SIGKILL it if it does not exit in time."""
    stop(proc, sig, timeout, log=log)


# --- BPF programs ------------------------------------------------------------------------


@dataclass
class Prog:
    """One loaded BPF program as bpftool shows it."""

    id: int
    name: str
    run_time_ns: int
    run_cnt: int
    recursion_misses: int


def _bpftool(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["bpftool", *args, "--json"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise BenchError(f"bpftool {' '.join(args)} failed: {out.stderr.strip()}")
    doc = json.loads(out.stdout or "[]")
    return doc if isinstance(doc, list) else []


def bpf_progs() -> dict[int, Prog]:
    """Every loaded BPF program with its run-time statistics."""
    # bpftool leaves run_time_ns/run_cnt/recursion_misses out while they are zero.
    return {
        p["id"]: Prog(
            p["id"],
            p.get("name", ""),
            p.get("run_time_ns", 0),
            p.get("run_cnt", 0),
            p.get("recursion_misses", 0),
        )
        for p in _bpftool("prog", "show")
    }


def block_attachments() -> dict[int, set[str]]:
    """Program ID -> the block_rq_* tracepoints it is attached to, without the prefix.

    Tracepoints through perf events (bcc, bpftrace) are listed by `bpftool perf show`, the
    tp_btf and raw-tracepoint links (the core backend) by `bpftool link show` (tp_name). A
    program that is loaded but not attached (the core's `issue` until it is needed) is in
    neither.
    """
    out: dict[int, set[str]] = {}
    for args, key in ((("perf", "show"), "tracepoint"), (("link", "show"), "tp_name")):
        for entry in _bpftool(*args):
            tp = entry.get(key) or ""
            if tp.startswith("block_rq_") and "prog_id" in entry:
                out.setdefault(entry["prog_id"], set()).add(tp.removeprefix("block_rq_"))
    return out


def owned_prog_ids(pid: int) -> set[int]:
    """IDs of the BPF programs process pid holds (fdinfo of its program, link, perf fds)."""
    ids = set()
    with contextlib.suppress(OSError):
        for f in Path(f"/proc/{pid}/fdinfo").iterdir():
            with contextlib.suppress(OSError):
                for line in f.read_text().splitlines():
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split(":", 1)[1]))
    return ids


def tracer_progs(pid: int) -> dict[int, str]:
    """The block_rq_* programs pid holds that are attached: ID -> tracepoint(s)."""
    att = block_attachments()
    return {i: "+".join(sorted(att[i])) for i in owned_prog_ids(pid) if i in att}


def wait_attached(pid: int, need: set[str], timeout: float = 30.0) -> dict[int, str]:
    """tracer_progs(pid) once it covers the tracepoints in need."""
    deadline = time.monotonic() + timeout
    while True:
        progs = tracer_progs(pid)
        if need <= {k for kinds in progs.values() for k in kinds.split("+")}:
            return progs
        if time.monotonic() > deadline:
            raise BenchError(
                f"pid {pid} attached no {'+'.join(sorted(need))} programs within "
                f"{timeout:.0f} s (saw {progs})"
            )
        time.sleep(0.2)


def foreign_block_progs(ours: set[int]) -> list[str]:
    """block_rq_* programs attached by someone else (they add noise to both sides)."""
    progs = bpf_progs()
    return [
        f"{i}:{progs[i].name if i in progs else '?'}@{'+'.join(sorted(kinds))}"
        for i, kinds in sorted(block_attachments().items())
        if i not in ours
    ]


def prog_label(name: str, kinds: str) -> str:
    """The core's programs by name (complete, issue, empty), others by tracepoint."""
    return name if name in CORE_PROGRAMS else kinds


# --- /metrics ----------------------------------------------------------------------------


def parse_samples(text: str) -> Samples:
    """Exposition text as {(sample name, sorted labels): value} (tests/support/realparts.py)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value, 0 when absent."""
    return float(samples.get((name, tuple(sorted(labels.items()))), 0.0))


def latency_buckets(samples: Samples, device: str, op: str = "read") -> dict[float, float]:
    """The cumulative latency buckets of (device, op): le -> count."""
    out = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        if (
            name == "wattbit_disk_io_latency_seconds_bucket"
            and lab.get("device") == device
            and lab.get("op") == op
        ):
            out[float(lab["le"])] = value
    return out


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs, +Inf last (the same
    as tests/support/realparts.py's)."""
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-9)
        prev_le, prev_count = le, count
    return prev_le


# --- the agent ---------------------------------------------------------------------------


def agent_config(backend: str, bounds: Sequence[float] | None = None) -> str:
    """The agent's configuration: the defaults (nic, smart on) apart from blockio's backend."""
    text = f"blockio:\n  backend: {backend}\n"
    if bounds:
        # Fixed-point: PyYAML reads 1e-06 (no dot) as a string.
        text += f"  latency_buckets: [{', '.join(format(b, '.9f') for b in bounds)}]\n"
    return text


class AgentProc:
    """One `wattbit agent` process on 127.0.0.1, started by spawn()."""

    def __init__(self, workdir: Path, backend: str, bounds: Sequence[float] | None = None):
        self.backend = backend
        tag = f"{backend}-fine" if bounds else backend
        self.config = workdir / f"agent-{tag}.yaml"
        self.config.write_text(agent_config(backend, bounds))
        self.logfile = workdir / f"agent-{tag}.log"
        self.mark = f'wattbit_blockio_backend_info{{backend="{backend}"'
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.url = ""
        self.spawned_at = 0.0

    def spawn(self) -> None:
        """Start the agent (does not wait)."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/metrics"
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with self.logfile.open("ab") as out:
            self.spawned_at = time.monotonic()
            self.proc = _spawn(
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
                    "info",
                ],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def wait_ready(self, poll: float, timeout: float = 120.0) -> float:
        """Seconds from spawn to the first /metrics answer naming the backend."""
        assert self.proc is not None
        deadline = self.spawned_at + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(
                    f"the {self.backend} agent exited with {self.proc.returncode}:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url, timeout=5) as r:
                if self.mark in r.read().decode():
                    return time.monotonic() - self.spawned_at
            if time.monotonic() > deadline:
                raise BenchError(f"the agent never served {self.mark}:\n{self.log_tail()}")
            time.sleep(poll)

    def text(self) -> str:
        """One scrape of /metrics."""
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return str(r.read().decode())

    def samples(self) -> Samples:
        """One scrape, parsed."""
        return parse_samples(self.text())

    def log_tail(self, n: int = 20) -> str:
        """The last lines of the agent's log."""
        with contextlib.suppress(OSError):
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        """SIGTERM the agent (it closes the BPF programs) and wait."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGTERM)
            self.proc = None


# --- tracers -----------------------------------------------------------------------------


class Tracer(Protocol):
    """A block-layer tracer the bench can start, measure and stop."""

    name: str
    pid: int

    def start(self) -> dict[int, str]:
        """Start and attach; return its attached block_rq_* programs (ID -> tracepoint)."""
        ...

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Start whatever the tracer does while fio runs; the callable stops it."""
        ...

    def io_counts(self, device: str) -> dict[str, float] | None:
        """What the tracer counted on device so far (completions, untimed), if it says."""
        ...

    def stop(self) -> None:
        """Detach and exit (idempotent)."""
        ...


class AgentTracer:
    """The real wattbit agent with one blockio backend, scraped once a second."""

    def __init__(self, workdir: Path, backend: str) -> None:
        self.name = backend
        self.agent = AgentProc(workdir, backend)
        self.pid = 0
        # bcc attaches issue, complete and requeue; core complete, and issue only once it
        # sees completions without a kernel timestamp.
        self.need = {"complete"} if backend == "core" else {"issue", "complete"}

    def start(self) -> dict[int, str]:
        """Start the agent, wait until /metrics shows the backend and its programs attach."""
        self.agent.spawn()
        self.pid = self.agent.pid
        self.agent.wait_ready(poll=0.1)
        return wait_attached(self.pid, self.need)

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Scrape /metrics every second from a thread, like a Prometheus server would."""
        stop = threading.Event()
        counts = {"scrapes": 0, "scrape_errors": 0, "scrape_bytes": 0}

        def scrape() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    counts["scrape_bytes"] += len(self.agent.text())
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

    def io_counts(self, device: str) -> dict[str, float] | None:
        """The agent's completions and untimed completions of reads on device."""
        s = self.agent.samples()
        return {
            "ios": sample(s, "wattbit_disk_ios_total", device=device, op="read"),
            "untimed": sample(s, "wattbit_disk_io_untimed_total", device=device, op="read"),
        }

    def stop(self) -> None:
        """Stop the agent."""
        self.agent.stop()


class EmptyTracer:
    """blockio.bpf.o's `empty` program alone, held by this script run with --hold-empty."""

    name = "empty"

    def __init__(self, workdir: Path) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.logfile = workdir / "empty.log"

    def start(self) -> dict[int, str]:
        """Start the holder, wait for its "attached" line and its program."""
        with self.logfile.open("ab") as err:
            self.proc = _spawn(
                [sys.executable, str(Path(__file__).resolve()), "--hold-empty"],
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().decode(errors="replace") if ready else ""
        if not line.startswith("attached"):
            self.stop()
            tail = self.logfile.read_text(errors="replace")[-2000:]
            raise BenchError(f"the empty program did not attach ({line.strip()!r}):\n{tail}")
        return wait_attached(self.pid, {"complete"})

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Nothing to do."""
        return lambda: {}

    def io_counts(self, device: str) -> dict[str, float] | None:
        """It counts nothing."""
        return None

    def stop(self) -> None:
        """SIGTERM the holder (it detaches and closes the object)."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGTERM)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None


def hold_empty() -> int:
    """--hold-empty: load blockio.bpf.o with only `empty`, attach it, wait for SIGTERM."""
    from exporters.blockio.core import libbpf

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    obj = libbpf.Object(OBJECT)
    try:
        for name in CORE_PROGRAMS:
            if name != "empty":
                obj.program(name).set_autoload(False)
        try:
            obj.load()
        except OSError:
            print(libbpf.last_messages(), file=sys.stderr)
            raise
        obj.program("empty").attach()
        print("attached", flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        obj.close()
    return 0


class BpftraceTracer:
    """bench/blockio_overhead.bt under bpftrace."""

    name = "bpftrace"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.lines: list[str] = []

    def start(self) -> dict[int, str]:
        """Start bpftrace, wait for "Attaching" and for its programs to be attached."""
        attaching = threading.Event()
        self.lines = []
        self.proc = _spawn(
            ["bpftrace", str(BT_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
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
        return wait_attached(self.pid, {"issue", "complete", "requeue"})

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Nothing: bpftrace only prints its maps on exit."""
        return lambda: {}

    def io_counts(self, device: str) -> dict[str, float] | None:
        """Its counts are printed only on exit: not read."""
        return None

    def stop(self) -> None:
        """SIGINT bpftrace (it prints its maps and detaches) and wait."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGINT)
            self.proc = None


def make_tracer(name: str, workdir: Path) -> Tracer:
    """The tracer called name."""
    if name in ("core", "bcc"):
        return AgentTracer(workdir, name)
    if name == "empty":
        return EmptyTracer(workdir)
    return BpftraceTracer(workdir)


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


@contextlib.contextmanager
def bench_lock(timeout: float) -> Iterator[None]:
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


def _fio_watched(dev: str, runtime: int, ours: set[int]) -> dict[str, Any]:
    """fio_run, plus other processes' CPU and the VM's steal time meanwhile."""
    with Watch(ours) as w:
        out = fio_run(dev, runtime)
    return out | {"steal_pct": w.steal_pct, "neighbours": w.neighbours}


def _busy(neighbours: list[dict[str, Any]]) -> str:
    return ", ".join(f"{n['comm']}[{n['pid']}] {n['cpu_s']:.1f} s" for n in neighbours)


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
        for key, value in _fio_watched(dev, runtime, set()).items():
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
            for key, value in _fio_watched(dev, runtime, {tracer.pid}).items():
                setattr(run, key, value)
            run.tracer_cpu_s = round(cpu_seconds(tracer.pid) - cpu0, 3)
            counts1 = tracer.io_counts(devname)
            if counts0 is not None and counts1 is not None:
                run.counted = {k: counts1[k] - counts0[k] for k in counts1}
            # The cost run: the same tracer session, bpf_stats on, a fio run of its own.
            ids |= tracer_progs(tracer.pid)  # the core's issue may have been attached since
            with bpf_stats_on():
                before = bpf_progs()
                run.cost_run = _fio_watched(dev, cost_runtime, {tracer.pid})
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
            s += f"  [cost run NOISY: {_busy(cost['neighbours'])}]"
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
        s += f"  [NOISY: other processes used CPU: {_busy(run.neighbours)}]"
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
    tracers = [make_tracer(n, workdir) for n in args.tracers]
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


# --- part 2: agent start -----------------------------------------------------------------


@dataclass
class Start:
    """One agent start: time to ready, resident memory."""

    backend: str
    index: int  # -1: the uncounted warm-up
    ready_s: float = 0.0
    cpu_s_at_ready: float = 0.0
    rss_first_kb: int = 0  # right after the first answer
    rss_kb: int = 0  # after settling
    hwm_kb: int = 0
    scrapes: int = 0
    attached: list[str] = field(default_factory=list)
    loadavg_before: str = ""
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def start_once(workdir: Path, backend: str, index: int, settle: float) -> Start:
    """Start one agent, time it to ready, read its memory after settling, stop it."""
    st = Start(backend, index, loadavg_before=Path("/proc/loadavg").read_text().strip())
    agent = AgentProc(workdir, backend)
    try:
        with Watch() as w:
            agent.spawn()
            w.ours.add(agent.pid)
            st.ready_s = agent.wait_ready(poll=0.02)
            st.cpu_s_at_ready = cpu_seconds(agent.pid)
            st.rss_first_kb = proc_status(agent.pid).get("VmRSS", 0)
            # Settle as under Prometheus: one scrape a second.
            end = time.monotonic() + settle
            while time.monotonic() < end:
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
                agent.text()
                st.scrapes += 1
            status = proc_status(agent.pid)
            st.rss_kb, st.hwm_kb = status.get("VmRSS", 0), status.get("VmHWM", 0)
            st.attached = sorted(set(tracer_progs(agent.pid).values()))
    finally:
        agent.stop()
    st.neighbours = w.neighbours
    return st


def run_starts(args: argparse.Namespace, workdir: Path) -> list[Start]:
    """Part 2: agent starts, core and bcc alternately, after one uncounted start of each."""
    starts = []
    backends = ["core", "bcc"]
    for backend in backends:
        log(f"start warm-up [{backend}] (not counted) ...")
        start_once(workdir, backend, -1, 0)
    for i, backend in alternate(backends, args.starts):
        st = start_once(workdir, backend, i, args.settle)
        starts.append(st)
        log(
            f"start {i + 1}/{args.starts} [{backend}]: ready in {st.ready_s:.3f} s "
            f"(CPU {st.cpu_s_at_ready:.2f} s), VmRSS {st.rss_first_kb / 1024:.1f} MiB "
            f"at ready, {st.rss_kb / 1024:.1f} MiB after {args.settle:g} s "
            f"(HWM {st.hwm_kb / 1024:.1f}), programs {st.attached}"
            + (f"  [NOISY: {_busy(st.neighbours)}]" if st.neighbours else "")
        )
    return starts


def summarise_starts(starts: list[Start]) -> dict[str, Any]:
    """Per backend: medians of ready time and memory."""
    out = {}
    for backend in ("core", "bcc"):
        mine = [s for s in starts if s.backend == backend]
        if not mine:
            continue
        ready = [s.ready_s for s in mine]
        rss = [s.rss_kb * 1024 / 1e6 for s in mine]
        out[backend] = {
            "starts": len(mine),
            "ready_s_median": statistics.median(ready),
            "ready_s_min": min(ready),
            "ready_s_max": max(ready),
            "cpu_s_at_ready_median": statistics.median(s.cpu_s_at_ready for s in mine),
            "rss_mb_median": statistics.median(rss),
            "rss_mb_min": min(rss),
            "rss_mb_max": max(rss),
            "rss_first_mb_median": statistics.median(s.rss_first_kb * 1024 / 1e6 for s in mine),
            "hwm_mb_median": statistics.median(s.hwm_kb * 1024 / 1e6 for s in mine),
            "attached": sorted({a for s in mine for a in s.attached}),
            "noisy": sum(bool(s.neighbours) for s in mine),
        }
    return out


# --- part 3: latency, core against bcc ---------------------------------------------------


@dataclass
class LatRun:
    """One sized QD1 fio run under one agent with fine latency buckets."""

    backend: str
    pair: int
    position: int
    clock: str = ""  # what the agent's histogram measured on the device (device or queue)
    fio: dict[str, Any] = field(default_factory=dict)
    count: float = 0.0  # latency observations over the run
    counted_ios: float = 0.0
    untimed: float = 0.0
    below_first: float = 0.0  # share in the first bucket (at or below 1 us)
    over_last: float = 0.0  # share above the last bound (+Inf)
    hist_median_s: float | None = None
    median_bucket_s: tuple[float, float] | None = None  # the bucket the median lies in
    hist_mean_s: float | None = None
    between: bool | None = None  # fio clat median <= histogram median <= fio lat median
    recursion_misses: int = 0
    attached: list[str] = field(default_factory=list)
    loadavg_before: str = ""
    neighbours: list[dict[str, Any]] = field(default_factory=list)


def latency_once(
    workdir: Path, dev: str, backend: str, io_size: str, pair: int, position: int, bs: str = "4k"
) -> LatRun:
    """Start an agent with fine buckets, run the sized QD1 job, take the histogram's deltas."""
    lr = LatRun(backend, pair, position, loadavg_before=Path("/proc/loadavg").read_text().strip())
    devname = Path(dev).name
    agent = AgentProc(workdir, backend, FINE_BOUNDS_S)
    try:
        agent.spawn()
        agent.wait_ready(poll=0.1)
        ids = wait_attached(agent.pid, {"complete"})
        # Let the start-up work (the smart exporter's first smartctl runs) pass for both.
        time.sleep(LAT_SETTLE_S)
        s0, p0 = agent.samples(), bpf_progs()
        with Watch({agent.pid}) as w:
            lr.fio = fio_run(dev, iodepth=1, io_size=io_size, bs=bs)
        s1, p1 = agent.samples(), bpf_progs()
        ids |= tracer_progs(agent.pid)
        lr.attached = sorted(
            f"{prog_label(p1[i].name if i in p1 else '?', k)}@{k}" for i, k in ids.items()
        )
        lr.recursion_misses = sum(
            p1[i].recursion_misses - p0[i].recursion_misses for i in ids if i in p0 and i in p1
        )
    finally:
        agent.stop()
    lr.neighbours = w.neighbours
    for (name, labels), value in s1.items():
        lab = dict(labels)
        if name == "wattbit_disk_io_latency_clock_info" and lab.get("device") == devname and value:
            lr.clock = lab.get("clock", "")
    b0, b1 = latency_buckets(s0, devname), latency_buckets(s1, devname)
    cum = [(le, b1[le] - b0.get(le, 0.0)) for le in sorted(b1)]
    dsum = sample(s1, "wattbit_disk_io_latency_seconds_sum", device=devname, op="read") - sample(
        s0, "wattbit_disk_io_latency_seconds_sum", device=devname, op="read"
    )
    lr.counted_ios = sample(s1, "wattbit_disk_ios_total", device=devname, op="read") - sample(
        s0, "wattbit_disk_ios_total", device=devname, op="read"
    )
    lr.untimed = sample(s1, "wattbit_disk_io_untimed_total", device=devname, op="read") - sample(
        s0, "wattbit_disk_io_untimed_total", device=devname, op="read"
    )
    if cum and cum[-1][1] > 0:
        total = cum[-1][1]
        lr.count = total
        lr.below_first = cum[0][1] / total
        lr.over_last = (total - cum[-2][1]) / total if len(cum) > 1 else 0.0
        lr.hist_median_s = histogram_quantile(0.5, cum)
        # Where interpolation cannot mislead: the bucket the median lies in.
        i = next(i for i, (_, c) in enumerate(cum) if c >= total / 2)
        lr.median_bucket_s = (cum[i - 1][0] if i else 0.0, cum[i][0])
        lr.hist_mean_s = dsum / total
        lr.between = lr.fio["clat_p50_ns"] <= lr.hist_median_s * 1e9 <= lr.fio["lat_p50_ns"]
    return lr


def _bucket(b: tuple[float, float] | None) -> str:
    return "-" if b is None else f"{b[0] * 1e6:g}..{b[1] * 1e6:g} us"


def run_latency(args: argparse.Namespace, dev: str, workdir: Path) -> list[LatRun]:
    """Part 3: the sized QD1 job under core and bcc alternately."""
    out = []
    backends = ["core", "bcc"]
    for k, (pair, backend) in enumerate(alternate(backends, args.lat_pairs)):
        position = k % len(backends)
        lr = latency_once(workdir, dev, backend, args.lat_io_size, pair, position, args.lat_bs)
        out.append(lr)
        f = lr.fio
        med = lr.hist_median_s
        log(
            f"latency {pair + 1}/{args.lat_pairs} [{backend}]: histogram median "
            f"{'-' if med is None else f'{med * 1e6:.2f}'} us "
            f"(in {_bucket(lr.median_bucket_s)}, mean {(lr.hist_mean_s or 0) * 1e6:.2f}, "
            f"clock {lr.clock or '?'}), fio clat "
            f"median {f['clat_p50_ns'] / 1e3:.2f} us, lat median {f['lat_p50_ns'] / 1e3:.2f} "
            f"us, {f['iops']:,.0f} IOPS; {lr.count:,.0f} timed of {f['total_ios']:,} I/Os"
            f" ({lr.untimed:,.0f} untimed), {lr.below_first:.2%} <= first bound, "
            f"{lr.over_last:.2%} > last, programs {lr.attached}"
            + (f", {lr.recursion_misses} recursion misses" if lr.recursion_misses else "")
            + (f"  [NOISY: {_busy(lr.neighbours)}]" if lr.neighbours else "")
        )
    return out


def summarise_latency(lat: list[LatRun]) -> dict[str, Any]:
    """Per backend: medians of histogram median, mean and fio's medians; core/bcc ratio."""
    out: dict[str, Any] = {"backends": {}}
    for backend in ("core", "bcc"):
        mine = [r for r in lat if r.backend == backend and r.hist_median_s is not None]
        if not mine:
            continue
        med = statistics.median(r.hist_median_s for r in mine if r.hist_median_s is not None)
        clat = statistics.median(r.fio["clat_p50_ns"] / 1e9 for r in mine)
        total = statistics.median(r.fio["lat_p50_ns"] / 1e9 for r in mine)
        out["backends"][backend] = {
            "runs": len(mine),
            "clocks": sorted({r.clock for r in mine}),
            "hist_median_s": med,
            "hist_mean_s": statistics.median(r.hist_mean_s or 0.0 for r in mine),
            "fio_clat_p50_s": clat,
            "fio_lat_p50_s": total,
            "fio_clat_mean_s": statistics.median(r.fio["clat_mean_ns"] / 1e9 for r in mine),
            "fio_lat_mean_s": statistics.median(r.fio["lat_mean_ns"] / 1e9 for r in mine),
            "between": clat <= med <= total,
            "runs_between": sum(bool(r.between) for r in mine),
            "timed_per_fio_io_median": statistics.median(
                r.count / r.fio["total_ios"] for r in mine
            ),
            "untimed": sum(r.untimed for r in mine),
            "outside_bounds_max": max(r.below_first + r.over_last for r in mine),
            "recursion_misses": sum(r.recursion_misses for r in mine),
            "attached": sorted({a for r in mine for a in r.attached}),
            "noisy": sum(bool(r.neighbours) for r in mine),
        }
    by_pair: dict[int, dict[str, LatRun]] = {}
    for r in lat:
        if r.hist_median_s is not None:
            by_pair.setdefault(r.pair, {})[r.backend] = r
    ratios, relative = [], []
    for p in by_pair.values():
        core, bcc = p.get("core"), p.get("bcc")
        if core and bcc and core.hist_median_s and bcc.hist_median_s:
            ratios.append(core.hist_median_s / bcc.hist_median_s)
            # Each against its own run's fio clat median: cancels the machine's drift between
            # the two runs (fio's own latencies move with it), leaving the tracers' difference.
            relative.append(
                (core.hist_median_s / core.fio["clat_p50_ns"])
                / (bcc.hist_median_s / bcc.fio["clat_p50_ns"])
            )
    if ratios:
        out["core_over_bcc"] = {
            "method": "median over pairs of (core histogram median / bcc histogram median)",
            "ratios": ratios,
            "ratio_median": statistics.median(ratios),
            "relative_to_fio_clat": relative,
            "relative_to_fio_clat_median": statistics.median(relative),
        }
    return out


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


# --- driver ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
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
    info = machine()
    log(f"machine: {info['nproc']} CPUs, kernel {info['kernel']}, {info['cpu']}")
    foreign = foreign_block_progs(set())
    if foreign:
        log(f"warning: other block_rq_* BPF programs are attached: {', '.join(foreign)}")
    runs: list[Run] = []
    starts: list[Start] = []
    lat: list[LatRun] = []
    with (
        bench_lock(args.lock_timeout),
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
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--parts", type=_names(PARTS), default=list(PARTS), help="default iops,start,latency"
    )
    p.add_argument(
        "--tracers",
        type=_names(TRACERS),
        default=list(TRACERS),
        help="tracers of the iops part (default core,bcc,empty,bpftrace)",
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
