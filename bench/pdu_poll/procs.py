"""The PDU poll bench's child processes: snmpsim agents and snmp_exporter."""

from __future__ import annotations

import contextlib
import copy
import http.client
import shutil
import subprocess
import threading
import time
from pathlib import Path

from bench.harness import (
    free_port,
)
from bench.pdu_poll.common import MODULE_TEMPLATE, SNMP_EXPORTER

# --- processes ---------------------------------------------------------------------------------

_children: set[subprocess.Popen[bytes]] = set()
_children_lock = threading.Lock()
STOPPING = threading.Event()  # set on the way out: worker threads start nothing new


def track(p: subprocess.Popen[bytes], add: bool) -> None:
    """Add p to (or drop it from) the children kill_children() kills."""
    with _children_lock:
        (_children.add if add else _children.discard)(p)


def kill_children() -> None:
    """Kill every snmpbulkwalk still running (Ctrl-C or error in the middle of a poll)."""
    STOPPING.set()
    with _children_lock:
        procs = list(_children)
    for p in procs:
        with contextlib.suppress(OSError):
            p.kill()


class Exporter:
    """prometheus-snmp-exporter on 127.0.0.1:<free port> with one module per community."""

    def __init__(self, workdir: Path, communities: list[str]) -> None:
        import yaml

        self.workdir = workdir
        template = yaml.safe_load(MODULE_TEMPLATE.read_text())
        self.walk = [str(w) for w in template["walk"]]
        modules = {}
        for c in communities:
            module = copy.deepcopy(template)
            module["auth"] = {"community": c}
            modules[self.module(c)] = module
        self.config = workdir / "snmp.yml"
        self.config.write_text(yaml.safe_dump(modules, sort_keys=False))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "snmp_exporter.log"

    @staticmethod
    def module(community: str) -> str:
        return f"apc_{community}"

    def start(self) -> None:
        exe = shutil.which(SNMP_EXPORTER)
        if exe is None:
            raise RuntimeError(f"{SNMP_EXPORTER} not found: apt-get install {SNMP_EXPORTER}")
        for _ in range(3):
            self.port = free_port()
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [
                        exe,
                        f"--config.file={self.config}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                    conn.request("GET", "/")
                    if conn.getresponse().status == 200:
                        conn.close()
                        return
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"snmp_exporter did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
