"""The HTTP(S) endpoint under hostile or careless clients, on real sockets on 127.0.0.1.

Slow (trickling) clients, a connection cap, header limits, a whole-request deadline, 405s,
TLS cipher suites, bcrypt concurrency and >72-byte passwords, and clean process exits on
SIGTERM/SIGINT. No assertion depends on the machine being fast: timeouts are generous
and what is checked is what completes, what is refused and what is closed.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

import collector.web.server as httpserver
from collector.runs.api import api_routes
from collector.runs.registry import RunRegistry
from collector.web.config import WebConfig, load_web_config
from collector.web.exposition import metrics_app
from collector.web.server import Limits, Server, landing_page, start_server
from tests.support.http import basic, request
from tests.support.realparts import ROOT, free_port

PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
TOKEN = "hardening-token-0123456789"


def routes(tmp: Path | None = None) -> dict[str, httpserver.WSGIApp]:
    registry = CollectorRegistry()
    Counter("wattbit_test_scrapes", "A test counter.", registry=registry).inc()
    r: dict[str, httpserver.WSGIApp] = {
        "/": landing_page("test", ["/metrics"]),
        "/metrics": metrics_app(registry),
    }
    if tmp is not None:
        r.update(api_routes(RunRegistry(tmp / "runs.json"), TOKEN))
    return r


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def _start(web: WebConfig | None = None, limits: Limits | None = None) -> Server:
        server = start_server("127.0.0.1", 0, routes(tmp_path), web, limits=limits)
        started.append(server)
        return server

    yield _start
    for server in started:
        server.shutdown()


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    """Whether the server closed (or reset) `sock` within `wait` seconds."""
    ready, _, _ = select.select([sock], [], [], wait)
    if not ready:
        return False
    try:
        return sock.recv(65536) == b"" or True  # an error response followed by close counts
    except OSError:
        return True


def make_cert(directory: Path, kind: str = "ec") -> tuple[Path, Path]:
    cert, key = directory / "server.crt", directory / "server.key"
    newkey = ["-newkey", "rsa:2048"] if kind == "rsa" else [
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]  # fmt: skip
    subprocess.run(
        ["openssl", "req", "-x509", *newkey, "-nodes", "-days", "2", "-subj", "/CN=wattbit-test",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def tls_config(tmp_path: Path, extra: str = "", kind: str = "ec") -> tuple[WebConfig, Path]:
    cert, _ = make_cert(tmp_path, kind)
    path = tmp_path / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra)
    return load_web_config(path), cert


class Trickler:
    """Connections that each send a request's headers one byte at a time, forever."""

    def __init__(self, host: str, port: int, n: int, every: float, tls: ssl.SSLContext | None):
        self.socks: list[socket.socket] = []
        for _ in range(n):
            raw = socket.create_connection((host, port), timeout=20)
            s = tls.wrap_socket(raw, server_hostname=host) if tls else raw
            self.socks.append(s)
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
        i = 0
        while not self._stop.wait(self._every):
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.send(header[i % len(header) : i % len(header) + 1])
            i += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            s.close()


# -- slow clients, connection cap, deadline, header limits ----------------------------------


@pytest.mark.parametrize("use_tls", [False, True], ids=["http", "https+basic_auth"])
def test_trickling_clients_do_not_stop_a_real_scrape(
    serve: Callable[..., Server], tmp_path: Path, use_tls: bool
) -> None:
    web, ctx = None, None
    if use_tls:
        web, cert = tls_config(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n")
        ctx = ssl.create_default_context(cafile=str(cert))
    server = serve(web)
    slow = Trickler(server.host, server.port, 30, 0.5, ctx)
    try:
        for _ in range(3):
            status, _, body = request(
                server, "GET", "/metrics", headers=basic("alice", PASSWORD), context=ctx
            )
            assert status == 200 and b"wattbit_test_scrapes_total 1.0" in body
    finally:
        slow.close()


def test_request_deadline_closes_a_trickling_request(serve: Callable[..., Server]) -> None:
    server = serve(limits=Limits(request_timeout=1.0, idle_timeout=30.0))
    slow = Trickler(server.host, server.port, 1, 0.1, None)
    try:
        # The trickler keeps sending (so no idle or per-read timeout fires), yet the request
        # as a whole is past its deadline and the server closes it.
        assert closed_by_server(slow.socks[0], wait=30)
    finally:
        slow.close()
    assert request(server, "GET", "/metrics")[0] == 200


def test_idle_connection_is_closed(serve: Callable[..., Server]) -> None:
    server = serve(limits=Limits(idle_timeout=1.0))
    with socket.create_connection((server.host, server.port), timeout=20) as s:
        assert closed_by_server(s, wait=30)


@pytest.mark.parametrize("use_tls", [False, True], ids=["http", "https"])
def test_connection_cap_is_enforced_and_evicts_stalled_connections(
    serve: Callable[..., Server], tmp_path: Path, use_tls: bool
) -> None:
    cap = 5
    web, ctx = None, None
    if use_tls:  # the stalled connections then never even start their handshake
        web, cert = tls_config(tmp_path)
        ctx = ssl.create_default_context(cafile=str(cert))
    server = serve(web, limits=Limits(max_connections=cap))
    socks = [socket.create_connection((server.host, server.port), timeout=20) for _ in range(12)]
    try:
        # A real request still gets in: the oldest stalled connection makes room for it.
        assert request(server, "GET", "/metrics", context=ctx)[0] == 200
        closed = [closed_by_server(s, wait=2) for s in socks]
        still_open = closed.count(False)
        assert still_open <= cap, closed
        assert closed.count(True) >= len(socks) - cap
        assert closed[:3] == [True, True, True]  # the oldest went first
        assert server.open_connections() <= cap
    finally:
        for s in socks:
            s.close()


def test_connection_cap_follows_a_low_fd_limit(tmp_path: Path) -> None:
    """With RLIMIT_NOFILE 64, 100 trickling connections: the server neither spins nor starves."""
    port = free_port()
    code = (
        "import resource, sys, threading\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        "from prometheus_client import CollectorRegistry, Counter\n"
        "from collector.web.exposition import metrics_app\n"
        "from collector.web.server import start_server\n"
        "r = CollectorRegistry(); Counter('wattbit_test_scrapes', 'x', registry=r).inc()\n"
        f"s = start_server('127.0.0.1', {port}, {{'/metrics': metrics_app(r)}})\n"
        "print('ready', flush=True); sys.stdin.read(); s.shutdown()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "server.log").open("wb"),  # read by nobody: must never fill up
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        slow = Trickler("127.0.0.1", port, 100, 0.5, None)
        try:
            for _ in range(3):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                assert resp.status == 200 and b"wattbit_test_scrapes_total" in resp.read()
                conn.close()
        finally:
            slow.close()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    "headers",
    [
        {f"X-H{i}": "v" for i in range(200)},  # too many
        {"X-Big": "a" * 20_000},  # one too long
    ],
    ids=["count", "size"],
)
def test_header_limits(serve: Callable[..., Server], headers: dict[str, str]) -> None:
    server = serve()
    status, _, _ = request(server, "GET", "/metrics", headers=headers)
    assert status in (400, 431)
    assert request(server, "GET", "/metrics")[0] == 200


def test_megabytes_of_headers_are_not_read(serve: Callable[..., Server]) -> None:
    """The finding: 98 header lines of 65 kB each (~6 MB) were read, and answered 200."""
    server = serve()
    with socket.create_connection((server.host, server.port), timeout=20) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        with contextlib.suppress(OSError):
            for i in range(98):
                s.sendall(b"X-Pad-%02d: " % i + b"a" * 65_000 + b"\r\n")
                sent += 1
            s.sendall(b"\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            answer = s.recv(4096)
    # Refused: an error status, or the server stopped reading (our sends failed).
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/") else b""
    assert status in (b"400", b"431") or (sent < 98 and not answer), answer[:100]


# -- methods and bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/metrics", "/"])
@pytest.mark.parametrize("method", ["POST", "TRACE", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_get_405(serve: Callable[..., Server], path: str, method: str) -> None:
    server = serve()
    status, resp, _ = request(server, method, path, body=b"x" if method != "TRACE" else None)
    assert status == 405
    assert resp.getheader("Allow") == "GET, HEAD"


def test_head_metrics_has_no_body(serve: Callable[..., Server]) -> None:
    server = serve()
    status, _, body = request(server, "HEAD", "/metrics")
    assert status == 200 and body == b""


def test_run_api_body_is_bounded_even_when_chunked(serve: Callable[..., Server]) -> None:
    server = serve()
    conn = http.client.HTTPConnection(server.host, server.port, timeout=20)
    try:
        chunks = (b'{"name": "' + b"a" * 4096 for _ in range(256))  # 1 MB, no Content-Length
        conn.request(
            "POST",
            "/api/v1/runs",
            body=chunks,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert resp.status == 413
        assert "larger than" in json.loads(resp.read())["error"]
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("length", "status"),
    [("1\u0661", 400), ("-5", 400), ("99999999999", 413)],
    ids=["non-ascii", "negative", "huge"],
)
def test_run_api_bad_content_length_is_a_client_error(
    serve: Callable[..., Server], length: str, status: int
) -> None:
    server = serve()
    with socket.create_connection((server.host, server.port), timeout=20) as s:
        s.sendall(
            b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\nContent-Length: "
            + length.encode()
            + b"\r\nConnection: close\r\n\r\n{}"
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] in (str(status).encode(), b"400")
    assert b"Traceback" not in answer


def test_run_api_deep_json_and_huge_numbers_get_400(serve: Callable[..., Server]) -> None:
    server = serve()
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for body in (b"[" * 50_000 + b"]" * 50_000, b'{"name": ' + b"9" * 5000 + b"}"):
        status, _, answer = request(server, "POST", "/api/v1/runs", body=body[:65536], headers=auth)
        assert status in (400, 413), answer
        assert "error" in json.loads(answer)


_BIG = b"9" * 400
# The run API's JSON with the document attacks of issue 34 (as on the BMC poller): deep
# nesting (100,000 levels, whole or cut at max_body), huge numbers in every field a run body
# has, NaN/Infinity, a body that expands to tens of thousands of objects, hostile strings.
RUN_BODIES = {
    "100000 levels": (b"[" * 100_000 + b"]" * 100_000, (413,)),
    "100000 levels cut to max_body": (
        (b'{"name": "x", "labels": ' + b"[" * 100_000)[:65536],
        (400,),
    ),
    "name 400 digits": (b'{"name": ' + _BIG + b"}", (400,)),
    "name 1e400": (b'{"name": 1e400}', (400,)),
    "label 400 digits": (b'{"name": "x", "labels": {"a": ' + _BIG + b"}}", (400,)),
    "label 1e400": (b'{"name": "x", "labels": {"a": 1e400}}', (400,)),
    "label -1e400": (b'{"name": "x", "labels": {"a": -1e400}}', (400,)),
    "label NaN": (b'{"name": "x", "labels": {"a": NaN}}', (400,)),
    "labels of 20000 objects": (b'{"name": "x", "labels": [' + b"{}," * 20_000 + b"{}]}", (400,)),
    "name with ESC and newline": (b'{"name": "x\\u001b[31m\\nFORGED"}', (400,)),
    "name with a lone surrogate": (b'{"name": "x\\ud800"}', (400,)),
    "label with C1 and bidi": (b'{"name": "x", "labels": {"a": "\\u009b31m\\u202e"}}', (400,)),
    "name not UTF-8": (b'{"name": "caf\xe9"}', (400,)),
    "name of 60 KB": (b'{"name": "' + b"n" * 60_000 + b'"}', (400,)),
}


@pytest.mark.parametrize("kind", list(RUN_BODIES))
def test_run_api_hostile_documents_are_client_errors(
    serve: Callable[..., Server], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each a 4xx with a JSON error, never a 500 nor a traceback; the run list stays empty and
    the server keeps answering."""
    server = serve()
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body, statuses = RUN_BODIES[kind]
    status, _, answer = request(server, "POST", "/api/v1/runs", body=body, headers=auth)
    assert status in statuses, (status, answer[:200])
    assert isinstance(json.loads(answer)["error"], str)
    assert len(answer) < 70_000
    status, _, listed = request(server, "GET", "/api/v1/runs")
    assert status == 200 and json.loads(listed) == [], listed[:200]
    assert "Traceback" not in caplog.text and "\x1b" not in caplog.text


# -- TLS cipher suites --------------------------------------------------------------------


def _tls12_client(cert: Path, ciphers: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers + ":@SECLEVEL=0")
    return ctx


def test_tls_default_refuses_suites_without_forward_secrecy_or_aead(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    web, cert = tls_config(tmp_path, kind="rsa")
    server = serve(web)
    for weak in (
        "AES128-SHA",
        "AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-SHA",
        "ECDHE-RSA-AES128-SHA256",
    ):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            request(server, "GET", "/metrics", context=_tls12_client(cert, weak))
    for good in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"):
        assert request(server, "GET", "/metrics", context=_tls12_client(cert, good))[0] == 200
    tls13 = ssl.create_default_context(cafile=str(cert))
    tls13.minimum_version = ssl.TLSVersion.TLSv1_3
    assert request(server, "GET", "/metrics", context=tls13)[0] == 200


def test_tls_cipher_suites_restrict_tls12(serve: Callable[..., Server], tmp_path: Path) -> None:
    extra = (
        "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n"
        "  prefer_server_cipher_suites: true\n"
        "  max_version: TLS12\n"
    )
    web, cert = tls_config(tmp_path, extra, kind="rsa")
    server = serve(web)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        request(
            server, "GET", "/metrics", context=_tls12_client(cert, "ECDHE-RSA-AES128-GCM-SHA256")
        )
    ok = _tls12_client(cert, "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256")
    with (
        socket.create_connection((server.host, server.port), timeout=20) as raw,
        ok.wrap_socket(raw, server_hostname=server.host) as tls,
    ):
        assert tls.cipher()[0] == "ECDHE-RSA-AES256-GCM-SHA384"
        assert tls.version() == "TLSv1.2"
    # max_version: TLS12 is honoured: a 1.3-only client is refused.
    tls13 = ssl.create_default_context(cafile=str(cert))
    tls13.minimum_version = ssl.TLSVersion.TLSv1_3
    with pytest.raises((ssl.SSLError, ConnectionError)):
        request(server, "GET", "/metrics", context=tls13)


# -- bcrypt ---------------------------------------------------------------------------------


def test_bcrypt_runs_concurrently_and_a_real_login_gets_through(
    serve: Callable[..., Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: {HASH}\n")
    server = serve(load_web_config(path))
    lock = threading.Lock()
    active = [0]
    peak = [0]
    real_checkpw = bcrypt.checkpw

    def slow_checkpw(password: bytes, hashed: bytes) -> bool:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.3)  # a costly hash: long enough for checks to overlap
            return bool(real_checkpw(password, hashed))
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(bcrypt, "checkpw", slow_checkpw)
    stop = threading.Event()
    refused: list[int] = []

    def attacker(i: int) -> None:
        while not stop.is_set():
            refused.append(request(server, "GET", "/metrics", headers=basic("alice", f"x{i}"))[0])

    attackers = [threading.Thread(target=attacker, args=(i,), daemon=True) for i in range(8)]
    for t in attackers:
        t.start()
    try:
        give_up = time.monotonic() + 60
        while len(refused) < 8:  # the attackers' checks are under way
            assert time.monotonic() < give_up, "no wrong-password attempt was answered"
            time.sleep(0.05)
        status, _, _ = request(server, "GET", "/metrics", headers=basic("alice", PASSWORD))
        assert status == 200
    finally:
        stop.set()
        for t in attackers:
            t.join()
    assert set(refused) == {401}
    assert 2 <= peak[0] <= httpserver.BCRYPT_CONCURRENCY


def test_password_over_72_bytes_matches_on_its_first_72_as_in_go(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    password = b"p" * 72
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: {hashed}\n")
    server = serve(load_web_config(path))
    assert request(server, "GET", "/metrics", headers=basic("alice", password))[0] == 200
    # golang.org/x/crypto/bcrypt.CompareHashAndPassword (node_exporter) uses the first 72
    # bytes of a longer password; so does wattbit.
    assert request(server, "GET", "/metrics", headers=basic("alice", password + b"tail"))[0] == 200
    assert request(server, "GET", "/metrics", headers=basic("alice", b"q" + password))[0] == 401


# -- process lifecycle --------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_collector_with_a_v2c_pdu_exits_0_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    from tests.support.realparts import Collector

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a PDU that never answers
    udp.bind(("127.0.0.1", 0))
    config = (
        f"state_dir: {tmp_path / 'state'}\ninterval: 1s\n"
        f"runs:\n  token: {TOKEN}\n"
        "auths:\n  v2c: {version: 2c, community: public}\n"
        "pdus:\n"
        f"  - name: silent\n    address: 127.0.0.1:{udp.getsockname()[1]}\n"
        "    auth: v2c\n    timeout: 0.5s\n    retries: 0\n"
    )
    c = Collector(config, tmp_path)
    try:
        c.wait_ready(timeout=30)
        ok = request_url(f"http://127.0.0.1:{c.port}/api/v1/runs", TOKEN)
        assert ok == 201
        select.select([udp], [], [], 20)  # the poller has sent at least one request
        c.proc.send_signal(sig)
        assert c.proc.wait(timeout=30) == 0, c.log.read_text()
    finally:
        c.stop()
        udp.close()
    log = c.log.read_text()
    assert "Traceback" not in log, log
    state = json.loads((tmp_path / "state" / "runs.json").read_text())
    assert "lifecycle" in json.dumps(state)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", c.port), timeout=5).close()


def request_url(url: str, token: str) -> int:
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        body = json.dumps({"name": "lifecycle"})
        conn.request(
            "POST", "/api/v1/runs", body=body, headers={"Authorization": f"Bearer {token}"}
        )
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_agent_exits_0_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    from tests.support.realparts import Agent

    a = Agent("blockio:\n  backend: diskstats\n", tmp_path)
    try:
        a.wait_ready(timeout=30)
        a.proc.send_signal(sig)
        assert a.proc.wait(timeout=30) == 0, a.log.read_text()
    finally:
        a.stop()
    assert "Traceback" not in a.log.read_text()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", a.port), timeout=5).close()


# -- the limits from the configuration file ------------------------------------------------


def test_agent_honours_max_headers_from_its_config(tmp_path: Path) -> None:
    """`http.max_headers: 10`: 20 headers (a fifth of the default 100) get a 400, 4 get a 200."""
    from tests.support.realparts import Agent

    a = Agent("blockio:\n  backend: diskstats\nhttp:\n  max_headers: 10\n", tmp_path)
    try:
        a.wait_ready(timeout=30)
        status, _, _ = request(a, "GET", "/metrics", headers={f"X-H{i}": "v" for i in range(20)})
        assert status in (400, 431)
        status, _, body = request(a, "GET", "/metrics", headers={"X-H1": "v", "X-H2": "v"})
        assert status == 200 and b"wattbit_exporter_up" in body
        for _ in range(20):  # a flood of malformed requests is no flood of log lines
            request(a, "GET", "/metrics", headers={f"X-H{i}": "v" for i in range(20)})
        a.check_alive()
    finally:
        a.stop()
    text = a.log.read_text()
    assert "Traceback" not in text and "Error handling request" not in text, text[-2000:]


def test_collector_honours_max_body_from_its_config(tmp_path: Path) -> None:
    """`http.max_body: 1024`: a 2 KB run start is a 413 naming that limit, unread; a small one
    starts its run."""
    from tests.support.realparts import Collector

    config = f"state_dir: {tmp_path / 'state'}\nruns:\n  token: {TOKEN}\nhttp:\n  max_body: 1024\n"
    c = Collector(config, tmp_path)
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    labels = {f"k{i}": "v" * 150 for i in range(12)}
    big = json.dumps({"name": "big", "labels": labels}).encode()
    assert 1024 < len(big) < 64 * 1024  # within the default limit: only the config refuses it
    try:
        c.wait_ready(timeout=30)
        status, _, answer = request(c, "POST", "/api/v1/runs", body=big, headers=auth)
        assert status == 413, answer
        assert "larger than 1024 bytes" in json.loads(answer)["error"]
        small = json.dumps({"name": "small", "labels": {"k": "v"}}).encode()
        status, _, answer = request(c, "POST", "/api/v1/runs", body=small, headers=auth)
        assert status == 201, answer
    finally:
        c.stop()
    assert "Traceback" not in c.log.read_text()


@pytest.mark.parametrize("which", ["agent", "collector"])
def test_run_in_a_thread_stops_on_its_event(tmp_path: Path, which: str) -> None:
    """agent.run and site.run keep their `stop` Event: set, they return 0 and free the port."""
    from collector.agent import main as agent
    from collector.agent.config import AgentConfig
    from collector.site import main as site
    from collector.site.config import CollectorConfig

    port = free_port()
    listen = f"127.0.0.1:{port}"
    stop = threading.Event()
    result: list[int] = []

    def target() -> None:
        if which == "agent":
            cfg = AgentConfig.model_validate(
                {"blockio": {"backend": "diskstats"}, "listen": listen}
            )
            result.append(agent.run(cfg, None, stop=stop))
        else:
            state = str(tmp_path / "state")
            ccfg = CollectorConfig.model_validate(
                {"state_dir": state, "pdus": [], "listen": listen}
            )
            result.append(site.run(ccfg, None, stop=stop))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    give_up = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            conn.request("GET", "/metrics")
            assert conn.getresponse().status == 200
            conn.close()
            break
        except ConnectionRefusedError:
            assert time.monotonic() < give_up and thread.is_alive()
            time.sleep(0.1)
    stop.set()
    thread.join(timeout=60)
    assert result == [0]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
