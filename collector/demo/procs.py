"""Child processes, free ports and waiting for things to come up: the demo's, and the tests'.

The tests start the same real parts the demo does (agent, collector, Prometheus, SNMP agents)
and import free_port and wait_for from here (tests/support/realparts.py re-exports them).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]


def free_port(kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    """A TCP (or, with kind=socket.SOCK_DGRAM, UDP) port free on host right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    alive: Callable[[], object] | None = None,
    logs: Iterable[Path] = (),
    errors: tuple[type[Exception], ...] = (OSError, ValueError, KeyError),
    interval: float = 0.3,
) -> T:
    """Call check() until it returns something other than None or False, and return that.

    An exception of `errors` from check() is a "not yet" (a port not open, a half-written
    answer). `alive`, when given, is called before every try and raises when what is waited
    for cannot come any more (a child process died). After `timeout` seconds: TimeoutError
    naming `what`, with the tail of each of `logs` that exists.
    """
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        with contextlib.suppress(*errors):
            result = check()
            if result is not None and result is not False:
                return result
        if time.monotonic() >= deadline:
            tails = "".join(
                f"\n--- {p.name}:\n{p.read_text(errors='replace')[-4000:]}"
                for p in logs
                if p.exists()
            )
            raise TimeoutError(f"{what}: not within {timeout:g} s{tails}")
        time.sleep(interval)


class Procs:
    """The demo's child processes: started with a log each, all stopped in stop_all()."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        """Start cmd from the repository with its output in logdir/<name>.log."""
        log = open(self.logdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        # Its own session: a Ctrl-C at the terminal reaches the demo alone, which then stops
        # every child in order (a child dying of the same SIGINT first made the demo's next
        # request fail, and the demo end as "failed" instead of "interrupted").
        p = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()
        self.procs.append((name, p))
        return p

    def check(self, ending: tuple[str, ...] = ()) -> None:
        """Raise if a child died; those whose names start with one of `ending` may end."""
        for name, p in self.procs:
            if p.poll() is not None and not name.startswith(ending or ("\0",)):
                raise RuntimeError(f"{name} exited {p.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, n: int = 20) -> str:
        """The last lines a child wrote."""
        path = self.logdir / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-n:])

    def stop_all(self) -> None:
        """SIGTERM everything (newest first), then SIGKILL what is still there after 10 s."""
        for _, p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        deadline = time.monotonic() + 10
        for _, p in reversed(self.procs):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
