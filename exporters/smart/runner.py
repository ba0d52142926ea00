"""Running smartctl for one device: fixed argv, no shell, bounded in time and output.

The agent runs as root, so what it executes is fixed: the smartctl binary found on the
agent's PATH (absolute entries only) or in the system directories, with the argv below and
the device path as the only variable part (built from a kernel device name, never from a
scrape or a config string). No shell, an empty stdin, stderr discarded, a minimal environment.

A smartctl talking to a dying disk can hang in the kernel. Each run has a deadline; past it
the process group is sent SIGKILL. A process blocked in uninterruptible I/O (state D) does not
die until the I/O returns: the runner then stops waiting for it, remembers it, and starts no
new smartctl for that device until it has exited, so a hung disk costs one process, not one
per interval.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from . import HELPER_SOCKET
from .parse import MAX_OUTPUT

# --json=c: compact JSON (smartctl(8) "-j, --json[=cgiosuvy]"). --nocheck=standby: do not
# spin up a drive in STANDBY or SLEEP; smartctl exits 2 with "Device is in STANDBY mode"
# instead. --info --health --attributes: identity, the overall health self-assessment and the
# attributes (ATA), the SMART/Health log (NVMe), temperature, power-on time and the grown
# defect list (SCSI). --log=error: the SCSI error counter log (scsiprint.cpp prints
# scsi_error_counter_log only under -l error), the ATA summary error log and NVMe error log
# (exit status bit 6); --log=selftest: the self-test log (its newest result, exit status bit
# 7). No self-test is started: each log is one or a few log pages read.
SMARTCTL_ARGS = (
    "--json=c",
    "--nocheck=standby",
    "--info",
    "--health",
    "--attributes",
    "--log=error",
    "--log=selftest",
)
# `smartctl --scan-open`: the devices smartctl finds, each opened once to learn its type,
# with the disks behind RAID controllers (`-d megaraid,N` ...) that no /sys/block entry shows.
SCAN_ARGS = ("--scan-open", "--json=c")
SCAN_KEY = " scan"  # the runner's key for the scan's process (no device path has a space)

# Where smartmontools installs smartctl when PATH does not say (Debian: /usr/sbin).
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# The child's whole environment: C locale (messages parsed as printed), system PATH only.
CHILD_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}

KILL_GRACE = 5.0  # seconds to wait for a killed smartctl to exit before leaving it

Result = Literal["done", "timeout", "no_smartctl", "error"]


@dataclass(frozen=True)
class RunOutcome:
    """How one smartctl run ended. output and exit_code are set when result is "done"."""

    result: Result
    output: bytes = b""
    exit_code: int | None = None
    duration: float = 0.0  # seconds the run took (start to exit, kill or giving up)
    detail: str = ""  # why, for the log, when result is not "done"


class Runner(Protocol):
    """Runs smartctl on one device path ("/dev/sda") within a timeout."""

    def __call__(self, device: str, timeout: float, dtype: str = "auto") -> RunOutcome:
        """Run smartctl on device as -d dtype ("auto": smartctl's own choice); never raises."""
        ...

    def scan(self, timeout: float) -> RunOutcome:
        """Run ``smartctl --scan-open`` (the RAID members are in its output); never raises."""
        ...

    def close(self) -> None:
        """Kill every run still going (the agent is stopping)."""
        ...


def find_smartctl(path: str | None = None) -> str | None:
    """The absolute path of smartctl: PATH's absolute entries first, then SYSTEM_DIRS."""
    if path is None:
        path = os.environ.get("PATH", "")
    # A relative PATH entry ("", ".") would make root run whatever smartctl sits in the
    # agent's working directory: skipped.
    dirs = [d for d in path.split(os.pathsep) if os.path.isabs(d)]
    for d in (*dirs, *SYSTEM_DIRS):
        candidate = os.path.join(d, "smartctl")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class SmartctlRunner:
    """The real runner: one smartctl process per call (see the module docstring)."""

    def __init__(
        self,
        binary: str | None = None,
        max_output: int = MAX_OUTPUT,
        kill_grace: float = KILL_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binary = binary  # None: find_smartctl() at every run (installing it later works)
        self.max_output = max_output
        self.kill_grace = kill_grace
        self._clock = clock
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stuck: dict[str, subprocess.Popen[bytes]] = {}  # device -> unkillable process
        self._closed = False

    def resolve(self) -> str | None:
        """The smartctl this runner would run now (None: not installed)."""
        if self.binary is not None:
            return self.binary if os.access(self.binary, os.X_OK) else None
        return find_smartctl()

    def __call__(self, device: str, timeout: float, dtype: str = "auto") -> RunOutcome:
        """Run smartctl on device (as -d dtype unless "auto") with a deadline; never raises."""
        typed = ("-d", dtype) if dtype != "auto" else ()
        # A RAID member's key is its device and type: megaraid,0 and megaraid,1 share /dev/bus/0.
        key = device if dtype == "auto" else f"{device} {dtype}"
        return self._run((*SMARTCTL_ARGS, *typed, device), key, timeout)

    def scan(self, timeout: float) -> RunOutcome:
        """Run ``smartctl --scan-open --json=c`` with a deadline; never raises."""
        return self._run(SCAN_ARGS, SCAN_KEY, timeout)

    def _run(self, args: tuple[str, ...], device: str, timeout: float) -> RunOutcome:
        """Run smartctl with args; device keys the stuck-process bookkeeping."""
        with self._lock:
            stuck = self._stuck.get(device)
            if stuck is not None:
                if stuck.poll() is None:
                    return RunOutcome(
                        "timeout",
                        detail=f"the smartctl killed earlier (pid {stuck.pid}) has not exited",
                    )
                del self._stuck[device]
            if self._closed:
                return RunOutcome("error", detail="stopping")
        binary = self.resolve()
        if binary is None:
            return RunOutcome("no_smartctl", detail="smartctl not found (install smartmontools)")
        start = self._clock()
        try:
            proc = subprocess.Popen(
                [binary, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=CHILD_ENV,
                close_fds=True,
                start_new_session=True,  # its own process group: a kill reaches its children
            )
        except FileNotFoundError:
            return RunOutcome("no_smartctl", detail=f"{binary} vanished")
        except OSError as exc:
            return RunOutcome("error", detail=f"cannot run {binary}: {exc.strerror or exc}")
        with self._lock:
            self._running.add(proc)
        try:
            return self._finish(proc, device, start, start + timeout, timeout)
        finally:
            with self._lock:
                self._running.discard(proc)

    def _finish(
        self,
        proc: subprocess.Popen[bytes],
        device: str,
        start: float,
        deadline: float,
        timeout: float,
    ) -> RunOutcome:
        assert proc.stdout is not None
        output, why = self._read(proc.stdout.fileno(), deadline)
        proc.stdout.close()
        if why is None:
            try:
                code = proc.wait(timeout=max(deadline - self._clock(), 0.0))
                return RunOutcome("done", output, code, self._clock() - start)
            except subprocess.TimeoutExpired:
                why = "timeout"  # closed its output, then kept running
        if not self._kill(proc):
            with self._lock:
                self._stuck[device] = proc
        elapsed = self._clock() - start
        if why == "timeout":
            return RunOutcome("timeout", duration=elapsed, detail=f"no answer in {timeout:g}s")
        return RunOutcome("error", duration=elapsed, detail=why)

    def _read(self, fd: int, deadline: float) -> tuple[bytes, str | None]:
        """Everything on fd until EOF; (partial, "timeout"/reason) past deadline or max_output."""
        chunks: list[bytes] = []
        size = 0
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    return b"".join(chunks), "timeout"
                if not sel.select(left):
                    continue  # the loop re-checks the deadline
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError as exc:
                    return b"".join(chunks), f"cannot read smartctl's output: {exc.strerror}"
                if not chunk:
                    return b"".join(chunks), None
                size += len(chunk)
                if size > self.max_output:
                    return b"", f"output larger than {self.max_output} bytes"
                chunks.append(chunk)

    def _kill(self, proc: subprocess.Popen[bytes]) -> bool:
        """SIGKILL the run's process group; True once it has exited (reaped)."""
        # Killed before it is reaped, so the group id cannot have been reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=self.kill_grace)
        except subprocess.TimeoutExpired:
            return False  # in uninterruptible sleep: the kill lands when its I/O returns
        return True

    def close(self) -> None:
        """Kill every smartctl still running and refuse new runs."""
        with self._lock:
            self._closed = True
            procs = [*self._running, *self._stuck.values()]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)


# --- through the privileged helper -----------------------------------------------------------


class HelperRunner:
    """Runs smartctl through wattbit's root helper (packaging/libexec/smartctl-helper) on a
    unix socket, so that the agent holds no CAP_SYS_RAWIO: one connection per read, the
    request ``read /dev/NAME TYPE`` (or ``scan``), the answer one JSON line bounded like
    smartctl's own output and waited for within the run's timeout."""

    def __init__(
        self,
        path: str = HELPER_SOCKET,
        max_output: int = MAX_OUTPUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        # JSON escapes: smartctl's output grows at most 6x (\\uXXXX), plus the envelope.
        self.max_answer = 6 * max_output + 4096
        self._clock = clock
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._closed = False

    def __call__(self, device: str, timeout: float, dtype: str = "auto") -> RunOutcome:
        """Ask the helper to read device as dtype within timeout; never raises."""
        return self._ask(f"read {device} {dtype}\n".encode(), timeout)

    def scan(self, timeout: float) -> RunOutcome:
        """Ask the helper for ``smartctl --scan-open`` within timeout; never raises."""
        return self._ask(b"scan\n", timeout)

    def _ask(self, request: bytes, timeout: float) -> RunOutcome:
        start = self._clock()
        deadline = start + timeout
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        except OSError as exc:
            return RunOutcome("error", detail=f"socket: {exc.strerror}")
        with self._lock:
            if self._closed:
                sock.close()
                return RunOutcome("error", detail="stopping")
            self._socks.add(sock)
        try:
            raw, why = self._exchange(sock, request, deadline)
        finally:
            with self._lock:
                self._socks.discard(sock)
            sock.close()
        elapsed = self._clock() - start
        if why is not None:
            kind: Result = "timeout" if why == "timeout" else "error"
            detail = f"no answer in {timeout:g}s" if why == "timeout" else why
            return RunOutcome(kind, duration=elapsed, detail=detail)
        return decode_answer(raw, elapsed)

    def _exchange(
        self, sock: socket.socket, request: bytes, deadline: float
    ) -> tuple[bytes, str | None]:
        chunks: list[bytes] = []
        size = 0
        try:
            sock.settimeout(max(deadline - self._clock(), 0.001))
            sock.connect(self.path)
            sock.sendall(request)
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    return b"", "timeout"
                sock.settimeout(left)
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return b"".join(chunks), None
                size += len(chunk)
                if size > self.max_answer:
                    return b"", f"the helper's answer is larger than {self.max_answer} bytes"
                chunks.append(chunk)
        except TimeoutError:
            return b"", "timeout"
        except OSError as exc:
            return b"", f"smartctl helper at {self.path}: {exc.strerror or exc}"

    def close(self) -> None:
        """Abandon every request under way (the helper kills its smartctl on its own)."""
        with self._lock:
            self._closed = True
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def decode_answer(raw: bytes, duration: float = 0.0) -> RunOutcome:
    """The outcome of one helper answer (pure): smartctl's output and exit code, or why not."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past the stack
        return RunOutcome("error", duration=duration, detail="the helper's answer is not JSON")
    if not isinstance(doc, dict):
        return RunOutcome("error", duration=duration, detail="the helper's answer is not JSON")
    if isinstance(doc.get("error"), str):
        err = doc["error"][:200]
        kind: Result = "timeout" if "in time" in err else "error"
        return RunOutcome(kind, duration=duration, detail=f"smartctl helper: {err}")
    code, out = doc.get("exit_code"), doc.get("output")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(out, str):
        return RunOutcome("error", duration=duration, detail="the helper's answer has no output")
    try:
        data = out.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return RunOutcome("error", duration=duration, detail="the helper's output is not bytes")
    return RunOutcome("done", data, code, duration)


RunnerMode = Literal["auto", "direct", "helper"]


@dataclass(frozen=True)
class RunnerChoice:
    """Which runner reads the drives and why (wattbit_smart_runner_info, the log)."""

    runner: Literal["smartctl", "helper"]
    reason: str  # a fixed label value


def choose_runner(mode: RunnerMode, helper_present: bool, has_rawio: bool) -> RunnerChoice:
    """Direct smartctl or the helper (pure): "auto" runs smartctl itself only when this
    process holds CAP_SYS_RAWIO (SG_IO's ATA pass-through wants it: drivers/scsi/scsi_ioctl.c),
    else the helper when its socket is there, else smartctl anyway (its reads then fail, and
    say so)."""
    if mode == "direct":
        return RunnerChoice("smartctl", "configured")
    if mode == "helper":
        return RunnerChoice("helper", "configured")
    if has_rawio:
        return RunnerChoice("smartctl", "has CAP_SYS_RAWIO")
    if helper_present:
        return RunnerChoice("helper", "missing CAP_SYS_RAWIO")
    return RunnerChoice("smartctl", "missing CAP_SYS_RAWIO, no helper")


def helper_present(path: str = HELPER_SOCKET) -> bool:
    """Whether a unix socket is at path (systemd's wattbit-smartctl.socket)."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
