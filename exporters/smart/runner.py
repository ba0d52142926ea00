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
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from .parse import MAX_OUTPUT

# --json=c: compact JSON (smartctl(8) "-j, --json[=cgiosuvy]"). --nocheck=standby: do not
# spin up a drive in STANDBY or SLEEP; smartctl exits 2 with "Device is in STANDBY mode"
# instead. --info --health --attributes: identity, the overall health self-assessment and the
# attributes (ATA), the SMART/Health log (NVMe), temperature, power-on time and the grown
# defect list (SCSI). No logs, no self-tests: nothing that reads more than a few sectors.
SMARTCTL_ARGS = ("--json=c", "--nocheck=standby", "--info", "--health", "--attributes")

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

    def __call__(self, device: str, timeout: float) -> RunOutcome:
        """Run smartctl on device; never raises."""
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

    def __call__(self, device: str, timeout: float) -> RunOutcome:
        """Run smartctl on device with a deadline; never raises."""
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
                [binary, *SMARTCTL_ARGS, device],
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
