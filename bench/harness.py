"""What the benchmarks share: the machine's one benchmark lock, child processes that die with
the bench, free ports, what a process has used (CPU, memory), the machine's busy time, BPF
programs' run time (bpf_stats), a bench's half run inside a network namespace, alternation,
medians, ratios, tables and the command that reproduces a run. Each bench is its own
measurement (bench/NAME.py, or a package bench/NAME/ split by phase) and imports the rest from
here, never from another bench; its own numbers and their meaning stay in it and in
docs/benchmarks.md.

Run as ``python bench/NAME.py`` (each file puts the repository on sys.path first, then imports
``bench.harness`` like the product's packages) or ``python -m bench.NAME`` from the checkout.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import resource
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
LOCK = Path("/tmp/wattbit-bench.lock")  # shared by the benches: one measures at a time
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_PDEATHSIG = 1  # prctl(2)

T = TypeVar("T")


# --- the machine ----------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" when it says none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def commit() -> str:
    """The checkout's short commit ("" outside git)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def tool_version(cmd: list[str]) -> str:
    """The first line a tool prints about its version ("?" when it cannot say)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "?"
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0] if lines else "?"


def kernel() -> str:
    """The running kernel's release."""
    return platform.release()


def machine(
    tools: dict[str, list[str]] | None = None, packages: Sequence[str] = ()
) -> dict[str, Any]:
    """What the numbers were measured on: the host, kernel, CPU, memory and Python, the
    versions of ``packages`` (Python) and of ``tools`` (name: the command that says it)."""
    from importlib.metadata import version

    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "memory": mem,
        "python": platform.python_version(),
        **{p: version(p) for p in packages},
        **{name: tool_version(cmd) for name, cmd in (tools or {}).items()},
    }


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent not idle since boot (/proc/stat; guest time is in user)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(v) - v[3] - v[4]) / CLK_TCK


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg writes them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- processes ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (its threads; NaN once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    """Resident set size of a process now."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def proc_status(pid: int, keys: Sequence[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Those /proc/PID/status lines in kB (empty when the process is gone)."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = int(value.split()[0])
    return out


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def die_with_parent() -> None:
    """preexec_fn: SIGTERM when the bench dies, however it dies (prctl PR_SET_PDEATHSIG); a
    stray tracer or store would go on loading the machine the next bench measures."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    cmd: list[str], setup: Callable[[], None] | None = None, **kw: Any
) -> subprocess.Popen[bytes]:
    """Start cmd in its own session (the bench, not the terminal's Ctrl-C, decides when it
    stops), dying with the bench; ``setup`` runs in the child too, after that."""

    def child() -> None:
        die_with_parent()
        if setup is not None:
            setup()

    return subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=child, **kw
    )


def stop(
    proc: subprocess.Popen[Any],
    sig: int = signal.SIGTERM,
    timeout: float = 15.0,
    log: Callable[[str], None] | None = None,
) -> None:
    """Signal proc, wait for it, SIGKILL it if it does not exit in time."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if log is not None:
            log(f"pid {proc.pid} did not exit on signal {sig}; killing it")
        proc.kill()
        proc.wait()


class Children:
    """A bench's named children, each started from the checkout (PYTHONPATH too) by spawn()
    with its output in logdir/NAME.log, and stopped newest first."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        """Start cmd with its output in logdir/NAME.log."""
        with (self.logdir / f"{name}.log").open("ab") as log:
            p = spawn(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
        self.procs[name] = p
        return p

    def alive(self, *names: str) -> Callable[[], None]:
        """A check for wait_for: raise with the log's tail when one of `names` has exited."""

        def check() -> None:
            for n in names:
                p = self.procs[n]
                if p.poll() is not None:
                    tail = (self.logdir / f"{n}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{n} exited {p.returncode}:\n{tail}")

        return check

    def stop(self, *names: str, timeout: float = 30.0) -> None:
        """SIGTERM these (all: none given), newest first; SIGKILL after ``timeout`` s."""
        chosen = [n for n in reversed(self.procs) if not names or n in names]
        for n in chosen:
            if self.procs[n].poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.procs[n].terminate()
        for n in chosen:
            p = self.procs.pop(n)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the bench as Ctrl-C does (KeyboardInterrupt), so that its
    cleanup runs however it is stopped; the previous handlers after."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _interrupt)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def free_port(kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    """A TCP (or, with kind=socket.SOCK_DGRAM, UDP) port on host free a moment ago."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_ports(n: int, kind: int = socket.SOCK_STREAM) -> list[int]:
    """n distinct ports on 127.0.0.1, all bound at once while they are chosen."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket(socket.AF_INET, kind)) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


@contextlib.contextmanager
def bench_lock(
    timeout: float | None = None, log: Callable[[str], None] = print, path: Path = LOCK
) -> Iterator[None]:
    """flock(path) for the measuring part, as `flock /tmp/wattbit-bench.lock CMD` takes it, so
    two benches never measure at once; wait for another to finish (at most ``timeout`` s)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} still held by another benchmark after {timeout:.0f} s"
                    ) from None
                if not told:
                    log(f"waiting for {path}: another benchmark is measuring")
                    told = True
                time.sleep(1.0)
        yield
    finally:
        os.close(fd)  # releases the lock


def git_tree(rev: str, into: Path) -> Path:
    """`rev` of this repository (git archive) extracted into `into` (made if missing): the
    tree a bench compares this checkout with. Built files git does not hold (the BPF object,
    bytecode) are the caller's to add."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True)
    archive.check_returncode()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


# --- ebpf_exporter, the exporter compared with (issue 35) -------------------------------------


def _clang_sys_includes() -> list[str]:
    """clang's default include directories as -idirafter options, as ebpf_exporter's
    examples/Makefile passes them (from libbpf-bootstrap: -target bpf drops them)."""
    r = subprocess.run(
        ["clang", "-v", "-E", "-"], input="", capture_output=True, text=True, check=True
    )
    lines = r.stderr.splitlines()
    start = lines.index("#include <...> search starts here:") + 1
    end = lines.index("End of search list.")
    return [x for line in lines[start:end] for x in ("-idirafter", line.strip())]


def build_ebpf_exporter_example(src: Path, libbpf_include: Path, name: str, dest: Path) -> Path:
    """ebpf_exporter's example `name` (NAME.bpf.o and NAME.yaml) built into dest with clang as
    its examples/Makefile does, from its source tree src (only read) and libbpf's headers (a
    libbpf whose bpf_core_read.h includes bpf_helpers.h, as the 1.5 its Makefile builds); the
    directory to pass as --config.dir."""
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    examples = src / "examples"
    cmd = ["clang", "-mcpu=v3", "-g", "-O2", "-Wall", "-Werror", f"-D__TARGET_ARCH_{arch}"]
    cmd += [*_clang_sys_includes(), f"-I{src / 'include' / arch}", f"-I{libbpf_include}"]
    cmd += ["-c", "-target", "bpf", f"{name}.bpf.c", "-o", str(dest / f"{name}.bpf.o")]
    subprocess.run(cmd, cwd=examples, check=True)
    (dest / f"{name}.yaml").write_bytes((examples / f"{name}.yaml").read_bytes())
    return dest


# --- BPF programs' own accounting, network namespaces ----------------------------------------

BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


@contextlib.contextmanager
def bpf_stats(value: str = "1") -> Iterator[None]:
    """kernel.bpf_stats_enabled=value meanwhile, the previous value after: with 1 the kernel
    counts each BPF program's run time and runs, at a cost per run (the machine's setting:
    changed only under bench_lock)."""
    previous = BPF_STATS.read_text().strip()
    BPF_STATS.write_text(value)
    try:
        yield
    finally:
        BPF_STATS.write_text(previous)


def prog_runs(fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of one of this process's BPF programs by its fd (fdinfo, as the
    agent reads it: exporters/blockio/bpfshared.py); they grow only while bpf_stats is on."""
    from exporters.blockio.bpfshared import fdinfo

    info = fdinfo(fd)
    return info["run_time_ns"], info["run_cnt"]


def python_in_netns(ns: str, *argv: str) -> None:
    """`python ARGV` inside network namespace ns (`ip netns exec`: a bench's half that measures
    in there), this interpreter, the repository on its PYTHONPATH; raises if it fails."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, *argv], check=True, env=env)


def host_line() -> str:
    """The kernel, CPU model and CPU count, for the line under a bench's table."""
    return f"kernel {kernel()}, {cpu_model()}, {os.cpu_count()} CPUs"


# --- alternation, medians, tables -----------------------------------------------------------


def _completed_ios(devices: list[str]) -> int:
    """Reads + writes completed on the devices so far (/proc/diskstats)."""
    names = {Path(d).name for d in devices}
    total = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] in names:
            total += int(f[3]) + int(f[7])
    return total


def fio_args(devices: list[str], extra: list[str]) -> list[str]:
    """fio's command line over every device (4k, psync, direct) with `extra` options."""
    args = ["fio", "--bs=4k", "--ioengine=psync", "--direct=1", *extra]
    for dev in devices:
        args += [f"--name={Path(dev).name}", f"--filename={dev}"]
    return args


@contextlib.contextmanager
def fio_load(devices: list[str], iops: int) -> Iterator[None]:
    """fio reading and writing every disk (4k random, half each, `iops` per disk) meanwhile:
    started, seen completing I/O on the disks (with a deadline), stopped after."""
    extra = ["--thread", "--rw=randrw", "--rwmixread=50", "--time_based", "--runtime=3600"]
    args = fio_args(devices, [*extra, f"--rate_iops={iops // 2}"])
    proc = spawn(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        before, t0 = _completed_ios(devices), time.monotonic()
        while _completed_ios(devices) < before + len(devices) * 10:
            if proc.poll() is not None:
                raise RuntimeError(f"fio exited {proc.returncode}")
            if time.monotonic() - t0 > 30:
                raise RuntimeError("fio completed no I/O in 30 s")
            time.sleep(0.05)
        yield
    finally:
        stop(proc)


def in_turn(items: Sequence[T], r: int) -> Sequence[T]:
    """The order of round r: as given in even rounds, reversed in odd ones."""
    return items if r % 2 == 0 else items[::-1]


def alternate(items: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, item) in alternating order: A B, B A, A B, ... (every item first as often), so a
    slow drift of the machine's load falls on each compared command alike."""
    for r in range(rounds):
        for item in in_turn(items, r):
            yield r, item


def median(values: Sequence[float]) -> float | None:
    """The median, None of nothing."""
    return statistics.median(values) if values else None


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, None when either is missing or den is 0."""
    return None if num is None or den is None or den == 0 else num / den


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that reproduces this run: the interpreter (relative to the checkout when it
    is the project's .venv) and its arguments as given (``-m bench.NAME`` or ``bench/NAME.py``,
    then the options)."""
    exe = Path(sys.executable)
    with contextlib.suppress(ValueError):
        exe = exe.relative_to(ROOT)
    return shlex.join([str(exe), *(sys.orig_argv[1:] if argv is None else argv)])


def print_command(out: Any = None) -> str:
    """Print the reproducing command under the results (docs/benchmarks.md quotes it)."""
    cmd = command_line()
    print(f"reproduce: {cmd}", file=out or sys.stdout, flush=True)
    return cmd


def table(head: Sequence[str], rows: Sequence[Sequence[object]], out: Any = None) -> str:
    """A plain-text table, columns padded to their widest cell (the first left, the rest right);
    printed to ``out`` (default stdout) and returned."""
    cells = [[str(c) for c in head], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    text = "\n".join(line.rstrip() for line in lines)
    print(text, file=out or sys.stdout, flush=True)
    return text
