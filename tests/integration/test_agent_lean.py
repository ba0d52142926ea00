"""The real `wattbit agent` keeps out what it does not use (issue 35): OpenSSL without TLS,
prometheus_client's __init__; every exporter still answers, and TLS with basic auth still works
(Python's own hashes for the login cache's HMAC)."""

from __future__ import annotations

import ssl
from pathlib import Path

from tests.integration.test_http_hardening import make_cert
from tests.support.http import basic, request, tls_auth_web_file
from tests.support.realparts import Agent, wait_for

EVERY_EXPORTER = "blockio:\n  backend: core\ncpu:\n  enabled: true\nlog_level: debug\n"
EXPORTERS = ("blockio", "nic", "smart", "power", "pcie", "cpu", "tcp")


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_without_tls_no_openssl_is_loaded_and_every_exporter_answers(tmp_path: Path) -> None:
    a = Agent(EVERY_EXPORTER, tmp_path)
    try:
        a.wait_ready(timeout=60)
        samples = a.scrape()
        maps = _maps(a.proc.pid)
    finally:
        a.stop()
    up = {
        dict(labels)["exporter"]: v
        for (n, labels), v in samples.items()
        if n == "wattbit_exporter_up"
    }
    assert up == dict.fromkeys(EXPORTERS, 1.0)
    assert "libcrypto" not in maps and "libssl" not in maps
    log = a.log.read_text()
    assert "not loaded: prometheus_client/__init__, _hashlib, ssl" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_with_tls_and_basic_auth_the_agent_serves_both(tmp_path: Path) -> None:
    cert, _ = make_cert(tmp_path)
    web = tls_auth_web_file(tmp_path, "prom", "s3cret")
    a = Agent(EVERY_EXPORTER + f"web_config: {web}\n", tmp_path)
    a.url = f"https://127.0.0.1:{a.port}/metrics"
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        wait_for(
            lambda: request(a, "GET", "/metrics", headers=basic("prom", "s3cret"), context=ctx),
            30,
            "the agent over TLS",
            alive=a.check_alive,
            logs=[a.log],
            errors=(OSError,),
            interval=0.2,
        )
        for _ in range(2):  # the second from the login cache (its HMAC-SHA256)
            status, _, body = request(
                a, "GET", "/metrics", headers=basic("prom", "s3cret"), context=ctx
            )
            assert status == 200 and b'wattbit_exporter_up{exporter="tcp"} 1.0' in body
        status, _, _ = request(a, "GET", "/metrics", headers=basic("prom", "wrong"), context=ctx)
        assert status == 401
        maps = _maps(a.proc.pid)
    finally:
        a.stop()
    assert "libssl" in maps
    log = a.log.read_text()
    assert "not loaded: prometheus_client/__init__, _hashlib\n" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
