"""`wattbit report`: output never written through a symlink; Prometheus credentials by file,
never from the URL, never printed."""

from __future__ import annotations

import base64
import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from collector.report import render
from collector.report.prom import PromError, Prometheus
from tests.support.cli import wattbit

SECRET = "S3CR3T-pass-word"


class _Doc:
    run = "r1"

    def to_json(self) -> dict[str, Any]:
        return {"run": "r1"}


def test_write_never_follows_a_planted_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for ext in ("json", "md", "html"):
        victim = tmp_path / f"victim.{ext}"
        victim.write_text("keep me\n")
        (out / f"r1.{ext}").symlink_to(victim)
        victims[ext] = victim
    monkeypatch.setattr(render, "markdown", lambda doc, html_name: "# md\n")
    monkeypatch.setattr(render, "html_report", lambda result, other: "<html></html>")
    monkeypatch.setattr(render, "finite", lambda doc: doc)
    result: Any = type("R", (), {"doc": _Doc()})()
    paths = render.write(result, out)
    for ext, victim in victims.items():
        assert victim.read_text() == "keep me\n"
        assert not (out / f"r1.{ext}").is_symlink()
    assert json.loads(paths[0].read_text()) == {"run": "r1"}
    assert paths[1].read_text() == "# md\n"
    assert sorted(p.name for p in out.iterdir()) == ["r1.html", "r1.json", "r1.md"]
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o644  # a report is meant to be shared


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def _answer(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = _answer
    do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_basic_auth_and_bearer_token(server: str) -> None:
    Prometheus(server, user="u", password=SECRET).query("up", 1.0)
    expected = "Basic " + base64.b64encode(f"u:{SECRET}".encode()).decode()
    Prometheus(server, token=SECRET).query("up", 1.0)
    Prometheus(server).query("up", 1.0)
    assert _Handler.seen == [expected, f"Bearer {SECRET}", None]


def test_credentials_in_the_url_are_refused_and_never_shown() -> None:
    with pytest.raises(PromError) as err:
        Prometheus(f"http://admin:{SECRET}@127.0.0.1:1")
    assert SECRET not in str(err.value) and "admin" not in str(err.value)
    assert "127.0.0.1:1" in str(err.value)


def test_cli_refuses_credentials_in_the_url(tmp_path: Path) -> None:
    r = wattbit(
        "report", "x", "--prometheus", f"http://admin:{SECRET}@127.0.0.1:1", "--out", str(tmp_path)
    )
    assert r.returncode == 2, r.stderr
    assert SECRET not in r.stderr + r.stdout and "--prometheus-password-file" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_credential_files(tmp_path: Path, server: str) -> None:
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    pw.chmod(0o644)
    base = ["report", "--start", "now-1h", "--prometheus", server, "--out", str(tmp_path)]
    r = wattbit(*base, "--prometheus-user", "u", "--prometheus-password-file", str(pw))
    assert r.returncode == 2 and "every user" in r.stderr and SECRET not in r.stderr
    r = wattbit(*base, "--prometheus-password-file", str(pw))
    assert r.returncode == 2 and "--prometheus-user" in r.stderr
    pw.chmod(0o600)
    r = wattbit(*base, "--prometheus-token-file", str(pw), "--prometheus-user", "u")
    assert r.returncode == 2 and SECRET not in r.stderr  # one kind of credentials only
    r = wattbit(*base, "--prometheus-token-file", str(tmp_path / "missing"))
    assert r.returncode == 2 and "--prometheus-token-file" in r.stderr
    # with the right files the report reaches Prometheus with the credentials
    r = wattbit(*base, "--prometheus-user", "u", "--prometheus-password-file", str(pw))
    assert SECRET not in r.stderr + r.stdout
    expected = "Basic " + base64.b64encode(f"u:{SECRET}".encode()).decode()
    assert _Handler.seen and set(_Handler.seen) == {expected}, r.stderr


@pytest.mark.parametrize("value", ["nan", "0", "-1", "1" + "0" * 400])
def test_cli_timeout_must_be_a_finite_positive_duration(tmp_path: Path, value: str) -> None:
    r = wattbit(
        "report", "x", "--prometheus", "http://127.0.0.1:1", "--out", str(tmp_path),
        f"--timeout={value}",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--timeout" in r.stderr and "Traceback" not in r.stderr


def test_cli_out_must_be_a_directory(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = wattbit("report", "x", "--prometheus", "http://127.0.0.1:1", "--out", str(f))
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
