"""The tracers the blockio overhead bench compares: the agent, the empty program, bpftrace,
ebpf_exporter's biolatency example."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from bench.blockio_overhead.common import (
    BT_SCRIPT,
    CORE_PROGRAMS,
    REPO,
    BenchError,
    Samples,
    parse_samples,
    sample,
    spawn_child,
    stop_child,
    wait_attached,
)
from bench.harness import build_ebpf_exporter_example, free_port
from exporters.blockio.core.backend import OBJECT

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
            self.proc = spawn_child(
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
            stop_child(self.proc, signal.SIGTERM)
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
            self.proc = spawn_child(
                [sys.executable, "-m", "bench.blockio_overhead", "--hold-empty"],
                cwd=REPO,
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
            stop_child(self.proc, signal.SIGTERM)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None


def hold_empty() -> int:
    """--hold-empty: load blockio.bpf.o with only `empty`, attach it, wait for SIGTERM."""
    from exporters.hostfs import libbpf

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
    """bench/blockio_overhead/blockio_overhead.bt under bpftrace."""

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
        self.proc = spawn_child(
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
            stop_child(self.proc, signal.SIGINT)
            self.proc = None


class EbpfExporterTracer:
    """ebpf_exporter with its biolatency example (raw_tp block_rq_insert, issue, complete: a
    hash map of start times), the object built by the harness into the work directory."""

    name = "ebpf_exporter"

    def __init__(self, workdir: Path, binary: Path, libbpf_include: Path) -> None:
        self.binary = binary
        self.config = Path(tempfile.mkdtemp(prefix="ebpfx-", dir=workdir))
        build_ebpf_exporter_example(
            binary.resolve().parent, libbpf_include, "biolatency", self.config
        )
        self.logfile = workdir / "ebpf_exporter.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    def start(self) -> dict[int, str]:
        """Start it on a free port, wait for its three programs to be attached."""
        cmd = [str(self.binary), f"--config.dir={self.config}", "--config.names=biolatency"]
        cmd += [f"--web.listen-address=127.0.0.1:{free_port()}"]
        with self.logfile.open("ab") as out:
            self.proc = spawn_child(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        return wait_attached(self.pid, {"insert", "issue", "complete"})

    def during_run(self) -> Callable[[], dict[str, Any]]:
        """Nothing (it is not scraped: its per-I/O cost is in the kernel)."""
        return lambda: {}

    def io_counts(self, device: str) -> dict[str, float] | None:
        """Not read."""
        return None

    def stop(self) -> None:
        """SIGTERM it (it detaches) and wait."""
        if self.proc is not None:
            stop_child(self.proc, signal.SIGTERM)
            self.proc = None


def make_tracer(
    name: str, workdir: Path, ebpf_exporter: Path | None = None, libbpf_include: Path = Path()
) -> Tracer:
    """The tracer called name."""
    if name in ("core", "bcc"):
        return AgentTracer(workdir, name)
    if name == "empty":
        return EmptyTracer(workdir)
    if name == "ebpf_exporter":
        assert ebpf_exporter is not None  # preflight
        return EbpfExporterTracer(workdir, ebpf_exporter, libbpf_include)
    return BpftraceTracer(workdir)
