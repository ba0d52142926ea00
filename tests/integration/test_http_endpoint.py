"""The real HTTP(S) endpoint on 127.0.0.1: /metrics, TLS, basic auth, 404s, hostile clients."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

import collector.web.server as httpserver
from collector.web.config import WebConfig, load_web_config
from collector.web.server import Server, landing_page, start_server
from tests.support.http import basic, request

PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


def make_cert(directory: Path) -> tuple[Path, Path]:
    """Write a self-signed certificate for 127.0.0.1/localhost and its key (openssl CLI)."""
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=wattbit-test",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def routes() -> dict[str, httpserver.WSGIApp]:
    """/metrics from a real registry holding one counter, and a landing page."""
    registry = CollectorRegistry()
    Counter("wattbit_test_scrapes", "A test counter.", registry=registry).inc()
    return {
        "/": landing_page("wattbit <test>", ["/metrics"]),
        "/metrics": make_wsgi_app(registry),
    }


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Start servers on 127.0.0.1:0 and shut them all down after the test."""
    started: list[Server] = []

    def _start(web: WebConfig | None = None, host: str = "127.0.0.1") -> Server:
        server = start_server(host, 0, routes(), web)
        started.append(server)
        return server

    yield _start
    for server in started:
        server.shutdown()


def get(
    server: Server,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 10,
) -> tuple[int, http.client.HTTPResponse, bytes]:
    """One GET; returns status, response (for headers) and body."""
    return request(server, "GET", path, headers=headers, context=context, timeout=timeout)


def write_config(tmp_path: Path, text: str) -> WebConfig:
    """Write and load a web config file."""
    path = tmp_path / "web.yml"
    path.write_text(text)
    return load_web_config(path)


def tls_config(tmp_path: Path, extra: str = "") -> tuple[WebConfig, Path]:
    """A web config serving TLS with a fresh self-signed certificate; returns it and the cert."""
    cert, _ = make_cert(tmp_path)
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra
    return write_config(tmp_path, text), cert


def test_plain_http_metrics_landing_and_404(serve: Callable[..., Server]) -> None:
    server = serve()
    assert server.port > 0
    assert server.host == "127.0.0.1"
    assert server.url == f"http://127.0.0.1:{server.port}"

    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        body = resp.read().decode()
    assert "# HELP wattbit_test_scrapes" in body
    assert "wattbit_test_scrapes_total 1.0" in body

    status, resp, page = get(server, "/")
    assert status == 200
    assert resp.getheader("Content-Type", "").startswith("text/html")
    assert b'<a href="/metrics">' in page
    assert b"wattbit &lt;test&gt;" in page  # the title is escaped

    status, _, _ = get(server, "/nope")
    assert status == 404
    status, _, _ = get(server, "/metrics/extra")
    assert status == 404


def test_configured_headers_on_every_response(serve: Callable[..., Server], tmp_path: Path) -> None:
    web = write_config(
        tmp_path,
        f"http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        f"    X-Content-Type-Options: nosniff\nbasic_auth_users:\n  alice: {HASH}\n",
    )
    server = serve(web)
    for path, auth, want in [("/metrics", True, 200), ("/nope", True, 404), ("/", False, 401)]:
        status, resp, _ = get(server, path, basic("alice", PASSWORD) if auth else None)
        assert status == want
        assert resp.getheader("X-Frame-Options") == "deny"
        assert resp.getheader("X-Content-Type-Options") == "nosniff"


def test_tls_verified_against_the_self_signed_cert(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    web, cert = tls_config(tmp_path)
    server = serve(web)
    assert server.url == f"https://127.0.0.1:{server.port}"

    trusting = ssl.create_default_context(cafile=str(cert))  # verifies chain and hostname
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10, context=trusting) as resp:
        assert resp.status == 200
        assert "wattbit_test_scrapes_total 1.0" in resp.read().decode()
    # The server really presents our certificate.
    with (
        socket.create_connection((server.host, server.port), timeout=10) as raw,
        trusting.wrap_socket(raw, server_hostname=server.host) as tls,
    ):
        assert tls.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(cert.read_text())
        assert tls.selected_alpn_protocol() in (None, "http/1.1")

    # A client that does not trust the cert refuses it: this is real TLS with that cert.
    with pytest.raises(urllib.error.URLError) as info:
        urllib.request.urlopen(
            f"{server.url}/metrics", timeout=10, context=ssl.create_default_context()
        )
    assert isinstance(info.value.reason, ssl.SSLCertVerificationError)

    # Plain HTTP to the TLS port gets no HTTP answer.
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        conn.request("GET", "/metrics")
        conn.getresponse()
    conn.close()


def test_tls_min_version_is_enforced(serve: Callable[..., Server], tmp_path: Path) -> None:
    web, cert = tls_config(tmp_path, "  min_version: TLS13\n")
    server = serve(web)
    tls12_only = ssl.create_default_context(cafile=str(cert))
    tls12_only.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(server, "/metrics", context=tls12_only)
    tls13 = ssl.create_default_context(cafile=str(cert))
    status, _, _ = get(server, "/metrics", context=tls13)
    assert status == 200


def test_basic_auth(
    serve: Callable[..., Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    web = write_config(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n")
    server = serve(web)

    status, resp, _ = get(server, "/metrics")
    assert status == 401
    assert resp.getheader("WWW-Authenticate") == 'Basic realm="wattbit"'

    assert get(server, "/metrics", basic("alice", "wrong"))[0] == 401
    assert get(server, "/metrics", basic("mallory", PASSWORD))[0] == 401
    assert get(server, "/metrics", {"Authorization": "Basic !!!notbase64"})[0] == 401
    assert get(server, "/metrics", {"Authorization": "Bearer abc"})[0] == 401
    assert get(server, "/metrics", basic("alice", "x" * 200))[0] == 401
    # Auth covers every route, including unknown ones (no path probing without credentials).
    assert get(server, "/nope")[0] == 401

    calls: list[bytes] = []
    real_checkpw = bcrypt.checkpw

    def counting_checkpw(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real_checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting_checkpw)
    status, _, body = get(server, "/metrics", basic("alice", PASSWORD))
    assert status == 200
    assert b"wattbit_test_scrapes_total 1.0" in body
    assert len(calls) == 1
    # Later scrapes with the same credentials are served from the cache, without bcrypt.
    for _ in range(3):
        assert get(server, "/metrics", basic("alice", PASSWORD))[0] == 200
    assert len(calls) == 1
    # A wrong password is still checked (and refused) after a success was cached.
    assert get(server, "/metrics", basic("alice", PASSWORD + "!"))[0] == 401
    assert len(calls) == 2


def test_basic_auth_over_tls(serve: Callable[..., Server], tmp_path: Path) -> None:
    web, cert = tls_config(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n")
    server = serve(web)
    ctx = ssl.create_default_context(cafile=str(cert))
    assert get(server, "/metrics", context=ctx)[0] == 401
    assert get(server, "/metrics", basic("alice", PASSWORD), context=ctx)[0] == 200


def test_garbage_and_stalled_clients_do_not_block_tls(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    web, cert = tls_config(tmp_path)
    server = serve(web)
    ctx = ssl.create_default_context(cafile=str(cert))

    # One client opens a connection and says nothing: its handshake waits in its own thread.
    stalled = socket.create_connection((server.host, server.port), timeout=10)
    # Another sends garbage (a TLS record header followed by junk), then hangs up.
    garbage = socket.create_connection((server.host, server.port), timeout=10)
    garbage.sendall(b"\x16\x03\x01\x00\x10" + b"\xde\xad\xbe\xef" * 64)
    # A third sends plain HTTP and disconnects without reading.
    rude = socket.create_connection((server.host, server.port), timeout=10)
    rude.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    rude.close()
    with contextlib.suppress(OSError):
        garbage.recv(1024)  # the server answers with an alert or just closes
    garbage.close()

    # The stalled client is still connected, yet a good request succeeds, several times, well
    # within the server's 10 s handshake timeout (so it is not waiting for the stalled one).
    for _ in range(3):
        status, _, body = get(server, "/metrics", context=ctx, timeout=3)
        assert status == 200
        assert b"wattbit_test_scrapes_total 1.0" in body
    stalled.close()
    assert get(server, "/metrics", context=ctx)[0] == 200


def test_client_disconnect_mid_request_does_not_stop_plain_server(
    serve: Callable[..., Server],
) -> None:
    server = serve()
    for payload in (b"", b"GET /metr", b"\x00\xff garbage \r\n\r\n"):
        sock = socket.create_connection((server.host, server.port), timeout=10)
        sock.sendall(payload)
        sock.close()
    assert get(server, "/metrics")[0] == 200


def test_ipv6_loopback(serve: Callable[..., Server]) -> None:
    server = serve(host="::1")
    assert server.host == "::1"
    assert server.url == f"http://[::1]:{server.port}"
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as resp:
        assert resp.status == 200


def test_shutdown_closes_the_port(serve: Callable[..., Server]) -> None:
    server = serve()
    assert get(server, "/metrics")[0] == 200
    server.shutdown()
    server.shutdown()  # idempotent
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((server.host, server.port), timeout=5).close()
