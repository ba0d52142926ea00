"""systemd's socket activation with Accept=yes, for tests: a listening unix socket whose
every connection becomes one process's stdin and stdout (as wattbit-smartctl.socket runs
packaging/libexec/smartctl-helper), so the helper is tested as it runs, not imported."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path


class Activator:
    """Listen on path (mode, group as SocketMode=/SocketGroup=); run argv per connection."""

    def __init__(
        self,
        path: Path,
        argv: Sequence[str],
        log: Path,
        mode: int = 0o660,
        gid: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.argv = list(argv)
        self.env = env if env is not None else {}
        self._log = open(log, "ab")  # noqa: SIM115 - closed in close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, mode)
        if gid is not None:
            os.chown(path, -1, gid)
        self.sock.listen(16)
        self.children: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                child = subprocess.Popen(
                    self.argv,
                    stdin=conn.fileno(),
                    stdout=conn.fileno(),
                    stderr=self._log,
                    env=self.env,
                    close_fds=True,
                )
            with self._lock:
                self.children = [c for c in self.children if c.poll() is None] + [child]

    def close(self) -> None:
        """Stop listening, kill and reap what still runs."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=10)
        with self._lock:
            children = list(self.children)
        for c in children:
            if c.poll() is None:
                c.kill()
            c.wait()
        self._log.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
