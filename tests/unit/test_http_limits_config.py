"""The `http:` section of the agent's and the collector's configuration: the server's Limits.

Defaults are Limits' own, every key is bounded, and a refusal names file and key, never the
value (collector/config.py's rules). The real processes honouring it are in
tests/integration/test_http_hardening.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model
from collector.daemon.config import ProcessConfig
from collector.runs.api import api_app
from collector.runs.registry import RunRegistry
from collector.site.config import CollectorConfig, redacted
from collector.web.limits import MAX_BODY_KEY, HttpConfig
from collector.web.server import Limits
from tests.support.cli import wattbit

MODELS: list[type[ProcessConfig]] = [AgentConfig, CollectorConfig]
TOKEN = "k9QpX2mZ7rT4vW8yB3nC"


@pytest.mark.parametrize("model", MODELS)
def test_without_the_section_the_limits_are_the_defaults(
    model: type[ProcessConfig], tmp_path: Path
) -> None:
    f = tmp_path / "c.yml"
    f.write_text("log_level: info\n")
    assert load_model(model, f).http.limits() == Limits()
    f.write_text("http: {}\n")
    assert load_model(model, f).http.limits() == Limits()
    assert model.model_validate({}).http.limits() == Limits()


def test_every_limit_is_a_key() -> None:
    """A limit added to Limits must be configurable too (and nothing else is in `http:`)."""
    assert set(HttpConfig.model_fields) == {f.name for f in dataclasses.fields(Limits)}


@pytest.mark.parametrize("model", MODELS)
def test_keys_map_to_the_limits(model: type[ProcessConfig], tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text(
        "http:\n"
        "  max_connections: 32\n"
        "  request_timeout: 500ms\n"
        "  body_timeout: 3s\n"
        "  idle_timeout: 1m\n"
        "  tls_handshake_timeout: 2\n"
        "  max_requests_per_connection: 10\n"
        "  max_line_size: 1024\n"
        "  max_field_size: 2048\n"
        "  max_headers: 20\n"
        "  max_header_bytes: 4096\n"
        "  max_body: 4096\n"
        "  workers: 2\n"
    )
    assert load_model(model, f).http.limits() == Limits(
        max_connections=32,
        request_timeout=0.5,
        body_timeout=3.0,
        idle_timeout=60.0,
        tls_handshake_timeout=2.0,
        max_requests_per_connection=10,
        max_line_size=1024,
        max_field_size=2048,
        max_headers=20,
        max_header_bytes=4096,
        max_body=4096,
        workers=2,
    )


# Values that are refused, with a part of the reason; each value is one a test can look for in
# the message (the reason must never contain it).
REFUSED = [
    ("max_connections", "0", "greater than or equal to 1"),
    ("max_connections", "987654321", "less than or equal to 65536"),
    ("request_timeout", "0", "greater than 0"),
    ("request_timeout", "-15s", "duration"),
    ("request_timeout", ".nan", "finite"),
    ("idle_timeout", ".inf", "finite"),
    ("idle_timeout", "7200s", "at most 1h"),
    ("body_timeout", "7200s", "at most 1h"),
    ("body_timeout", "0", "greater than 0"),
    ("tls_handshake_timeout", "'zz(S3CR3T'", "duration"),
    ("max_requests_per_connection", "0", "greater than or equal to 1"),
    ("max_line_size", "17", "greater than or equal to 256"),
    ("max_field_size", "987654321", "less than or equal to 65536"),
    ("max_headers", "3", "greater than or equal to 8"),
    ("max_headers", "987654321", "less than or equal to 1000"),
    ("max_header_bytes", "100", "greater than or equal to 1024"),
    ("max_header_bytes", "987654321", "less than or equal to 1048576"),
    ("max_body", "987654321", "less than or equal to 65536"),
    ("max_body", "12.5", "integer"),
    ("workers", "0", "greater than or equal to 1"),
    ("workers", "'zz(S3CR3T'", "integer"),
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("key", "value", "reason"), REFUSED)
def test_out_of_bounds_values_are_refused_naming_the_key_not_the_value(
    model: type[ProcessConfig], tmp_path: Path, key: str, value: str, reason: str
) -> None:
    f = tmp_path / "c.yml"
    f.write_text(f"http:\n  {key}: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_model(model, f)
    assert err.value.file == str(f)
    assert err.value.key == f"http.{key}"
    assert reason in err.value.reason, str(err.value)
    shown = value.strip("'.-s")
    if len(shown) > 3:  # a value long enough to be recognised in the message
        # not in the message but for its file's path (pytest's numbered tmp dirs may hold
        # the value's digits by chance)
        assert shown not in str(err.value).replace(str(f), "FILE"), str(err.value)


@pytest.mark.parametrize("model", MODELS)
def test_unknown_keys_and_wrong_shapes_are_refused(
    model: type[ProcessConfig], tmp_path: Path
) -> None:
    f = tmp_path / "c.yml"
    f.write_text("http:\n  max_bodies: 1024\n")
    with pytest.raises(ConfigError) as err:
        load_model(model, f)
    assert (err.value.key, err.value.reason) == ("http.max_bodies", "unknown key")
    f.write_text("http: 1024\n")
    with pytest.raises(ConfigError) as err:
        load_model(model, f)
    assert (err.value.key, err.value.reason) == ("http", "must be a mapping")


@pytest.mark.parametrize("kind", ["agent", "collector"])
def test_cli_exits_2_naming_file_and_key(tmp_path: Path, kind: str) -> None:
    f = tmp_path / f"{kind}.yml"
    f.write_text("http:\n  max_headers: 987654321\n")
    extra = ["--print-config"] if kind == "collector" else ["--listen", "127.0.0.1:1"]
    r = wattbit(kind, "--config", str(f), *extra)
    assert r.returncode == 2, r.stderr
    assert str(f) in r.stderr and "key 'http.max_headers'" in r.stderr, r.stderr
    assert "987654321" not in r.stderr and "Traceback" not in r.stderr


def test_print_config_shows_the_limits(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("http:\n  max_body: 4096\n")
    shown = redacted(load_model(CollectorConfig, f))
    assert isinstance(shown["http"], dict)
    assert shown["http"]["max_body"] == 4096
    assert shown["http"]["max_headers"] == Limits().max_headers


# -- the run API under a max_body lower than its own -----------------------------------------


def _post(environ_extra: dict[str, Any], body: bytes, with_body: bool) -> tuple[int, Any]:
    """POST /api/v1/runs as the server hands it over (body unread when over its limit)."""
    app = api_app(RunRegistry(None), TOKEN)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/runs",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
        "wsgi.input": io.BytesIO(body if with_body else b""),
        **environ_extra,
    }
    got: list[str] = []
    data = b"".join(app(environ, lambda status, headers: got.append(status)))
    return int(got[0].split()[0]), json.loads(data)


def test_the_run_api_answers_413_by_the_servers_lower_max_body() -> None:
    """Past max_body the server leaves the body unread: the API must say 413, not 'no JSON'."""
    labels = {f"k{i}": "v" * 150 for i in range(12)}
    body = json.dumps({"name": "big", "labels": labels}).encode()
    assert 1024 < len(body) < 64 * 1024
    status, answer = _post({MAX_BODY_KEY: 1024}, body, with_body=False)
    assert status == 413 and "larger than 1024 bytes" in answer["error"]
    # within the limit (or with no server limit at all), the same body starts the run
    assert _post({MAX_BODY_KEY: 64 * 1024}, body, with_body=True)[0] == 201
    assert _post({}, body, with_body=True)[0] == 201
