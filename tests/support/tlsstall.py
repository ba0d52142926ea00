"""TLS clients that never finish a handshake against a real `wattbit collector` or `agent`:
the measurement that tests/integration/test_tls_stall.py asserts on and bench/tls_stall.py and
bench/soak/ run with their knobs (what tests and benches share lives here, not in bench/)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from collector.demo.procs import free_port, wait_for
from tests.support.env import ROOT

# A TLS record header (handshake, TLS 1.0 record version, 512 bytes to come) and the first
# byte of the handshake (ClientHello): what a client that stalls at once has sent.
CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00\x01"


def vm_rss_mb(pid: int) -> float:
    """VmRSS of pid in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    return float("nan")


def fds(pid: int) -> int:
    """Open file descriptors of pid."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def make_cert(directory: Path) -> Path:
    """A self-signed EC certificate and key in directory; the certificate's path."""
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return cert


@dataclass
class TlsServer:
    """A real wattbit process serving HTTPS on 127.0.0.1."""

    proc: subprocess.Popen[bytes]
    port: int
    cert: Path
    log: Path
    rss_mb: list[float] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The server's pid."""
        return self.proc.pid

    def scrape(self) -> bool:
        """One real HTTPS GET /metrics; True when it answered 200."""
        ctx = ssl.create_default_context(cafile=str(self.cert))
        url = f"https://127.0.0.1:{self.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=30, context=ctx) as r:
                return bool(r.status == 200 and r.read())
        except OSError:
            return False


@contextlib.contextmanager
def tls_server(
    kind: str, work: Path, extra_env: dict[str, str] | None = None
) -> Iterator[TlsServer]:
    """`wattbit collector` (no PDUs) or `wattbit agent` (nic only) with TLS, until the end."""
    cert = make_cert(work)
    web = work / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    cfg = work / f"{kind}.yml"
    if kind == "collector":
        cfg.write_text(f"state_dir: {work / 'state'}\n")
    else:
        cfg.write_text("blockio:\n  enabled: false\nsmart:\n  enabled: false\n")
    port = free_port()
    log = work / f"{kind}.log"
    cmd = [sys.executable, "-m", "collector.cli", kind, "--config", str(cfg),
           "--web-config", str(web), "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = TlsServer(proc, port, cert, log)
    try:
        wait_for(server.scrape, 60, f"{kind} over HTTPS", logs=[log], interval=0.3)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def client_hello() -> bytes:
    """A whole, real ClientHello, as Python's ssl module (OpenSSL) sends it first."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def stall_round(port: int, clients: int, hold: float, first: bytes = CLIENT_HELLO_START) -> int:
    """Open `clients` connections that send `first` (6 bytes of a ClientHello) and stall;
    hold them, close them.

    Returns how many connections were opened (connect() may fail when the backlog is full).
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(first)
            except OSError:
                s.close()
                continue
            socks.append(s)
        time.sleep(hold)
        return len(socks)
    finally:
        for s in socks:
            s.close()


def run(
    kind: str,
    rounds: int,
    clients: int,
    hold: float,
    rest: float,
    env: dict[str, str] | None,
    whole_hello: bool = False,
) -> dict[str, object]:
    """The measurement; its results as a dict."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < clients + 64:  # this client's own sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, clients + 1024), hard))
    with (
        tempfile.TemporaryDirectory(prefix="wattbit-tls-stall-") as tmp,
        tls_server(kind, Path(tmp), env) as server,
    ):
        base = vm_rss_mb(server.pid)
        per_round, fds_seen, opened, scrapes = [], [], [], []
        for _ in range(rounds):
            first = client_hello() if whole_hello else CLIENT_HELLO_START
            opened.append(stall_round(server.port, clients, hold, first))
            fds_seen.append(fds(server.pid))
            scrapes.append(server.scrape())
            per_round.append(round(vm_rss_mb(server.pid), 1))
        time.sleep(rest)
        after = vm_rss_mb(server.pid)
        return {
            "server": kind,
            "rounds": rounds,
            "clients": clients,
            "hold_s": hold,
            "sent": "a whole ClientHello" if whole_hello else "6 bytes of a ClientHello",
            "opened": opened,
            "rss_mb_start": round(base, 1),
            "rss_mb_per_round": per_round,
            "rss_mb_after_rest": round(after, 1),
            "fds_per_round": fds_seen,
            "every_scrape_ok": all(scrapes),
        }
