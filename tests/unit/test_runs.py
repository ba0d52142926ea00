"""The run registry: semantics, persistence, pruning, metrics, the HTTP API and its config."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from collector.cli import parser
from collector.config import ConfigError, load_model
from collector.runs import api as runs_api
from collector.runs.api import api_app
from collector.runs.registry import (
    RunError,
    RunRegistry,
    parse_label,
    render_labels,
    validate_labels,
    validate_name,
)
from collector.site.config import CollectorConfig, redacted
from collector.web.server import _router
from tests.support.env import require
from tests.support.realparts import have

TOKEN = "k9QpX2mZ7rT4vW8yB3nC"
T0 = 1_700_000_000.0


class Clock:
    """A settable clock."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "runs.json"


def registry(path: Path | None, clock: Clock, **kw: Any) -> RunRegistry:
    reg = RunRegistry(path, clock=clock, **kw)
    reg.load()
    return reg


# -- semantics ----------------------------------------------------------------------------


def test_start_stop_and_conflicts(state: Path, clock: Clock) -> None:
    reg = registry(state, clock)
    run = reg.start("sc10-demo", {"setup": "raid50"})
    assert run.active and run.start == T0 and run.labels == {"setup": "raid50"}

    with pytest.raises(RunError) as err:
        reg.start("sc10-demo")
    assert err.value.status == 409 and "already active" in err.value.message

    clock.t += 42.5
    ended = reg.stop("sc10-demo")
    assert not ended.active and ended.start == T0 and ended.end == T0 + 42.5
    assert reg.get("sc10-demo") == ended  # the end time is kept

    with pytest.raises(RunError) as err:
        reg.stop("sc10-demo")
    assert err.value.status == 409 and "not active" in err.value.message
    with pytest.raises(RunError) as err:
        reg.stop("never-started")
    assert err.value.status == 404

    clock.t += 10
    again = reg.start("sc10-demo", {"setup": "raid6"})  # a new window for an ended name
    assert again.active and again.start == T0 + 52.5 and again.labels == {"setup": "raid6"}
    assert [r.name for r in reg.runs()] == ["sc10-demo"]


def test_times_are_whole_milliseconds(clock: Clock) -> None:
    """Exactly representable as a short decimal, in Prometheus and VictoriaMetrics alike."""
    reg = registry(None, clock)
    clock.t = T0 + 0.1234567
    run = reg.start("ms")
    clock.t += 5.0004999
    ended = reg.stop("ms")
    assert run.start == T0 + 0.123 and repr(run.start) == "1700000000.123"
    assert ended.end == round(T0 + 5.1239566, 3) and repr(ended.end) == "1700000005.124"


def test_end_never_before_start_when_the_clock_steps_back(clock: Clock) -> None:
    reg = registry(None, clock)
    reg.start("x")
    clock.t -= 100
    assert reg.stop("x").end == T0


@pytest.mark.parametrize("name", ["a", "sc10-demo", "run_1.2:3", "A" * 128, "0day", "x-y.z:w_v"])
def test_good_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "-x", ".x", "_x", "a b", "a/b", "A" * 129, "ünï", "a\n", None, 3]
)
def test_bad_names_are_400(name: Any, clock: Clock) -> None:
    with pytest.raises(ValueError):
        validate_name(name)
    reg = registry(None, clock)
    with pytest.raises(RunError) as err:
        reg.start(name)
    assert err.value.status == 400
    with pytest.raises(RunError) as err:
        reg.stop(name)
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ({"1bad": "x"}, "not a Prometheus label name"),
        ({"a-b": "x"}, "not a Prometheus label name"),
        ({"a\n": "x"}, "not a Prometheus label name"),
        ({"__name__": "x"}, "reserved"),
        ({"setup": ""}, "1-256 characters"),
        ({"setup": "x" * 257}, "1-256 characters"),
        ({"setup": "a,b"}, "commas"),
        ({"setup": "a\nb"}, "control characters"),
        ({"setup": "a\x1b[31mb"}, "control characters"),
        ({"setup": "a\x9b31mb"}, "control characters"),  # C1 CSI: a terminal's ESC [
        ({"setup": "a\u202eb"}, "format or control characters"),  # a bidi override
        ({"setup": "a\u2028b"}, "control characters"),  # a line separator
        ({"setup": "a\x00b"}, "control characters"),
        ({"setup": "a\ud800b"}, "lone surrogates"),  # JSON "\ud800": /metrics cannot encode it
        ({"setup": 5}, "must be a string"),
        ({f"k{i}": "v" for i in range(33)}, "at most 32"),
        (["setup=raid50"], "must be an object"),
    ],
)
def test_bad_labels(labels: Any, reason: str, clock: Clock) -> None:
    with pytest.raises(ValueError, match=reason):
        validate_labels(labels)
    with pytest.raises(RunError) as err:
        registry(None, clock).start("x", labels)
    assert err.value.status == 400 and reason in err.value.message


def test_labels_allow_what_prometheus_allows_otherwise() -> None:
    labels = {"setup": "raid50 / 48×HDD = fast", "_x": "é", "Disks": "48"}
    assert validate_labels(labels) == labels
    assert render_labels(labels) == "Disks=48,_x=é,setup=raid50 / 48×HDD = fast"
    assert parse_label("setup=raid=50") == ("setup", "raid=50")
    with pytest.raises(ValueError, match="k=v"):
        parse_label("setup")


def test_thread_safe_under_concurrent_writes(state: Path, clock: Clock) -> None:
    reg = registry(state, clock, keep=1000)
    outcomes: list[int] = []
    lock = threading.Lock()

    def start(name: str) -> None:
        try:
            reg.start(name)
            code = 201
        except RunError as exc:
            code = exc.status
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=start, args=(f"r{i}",)) for i in range(40)]
    threads += [threading.Thread(target=start, args=("same",)) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(409) == 19  # exactly one "same" won
    assert len(reg.runs()) == 41
    saved = json.loads(state.read_text())
    assert len(saved["runs"]) == 41


# -- persistence --------------------------------------------------------------------------


def test_survives_a_restart(state: Path, clock: Clock) -> None:
    reg = registry(state, clock)
    reg.start("long", {"setup": "raid50"})
    clock.t += 5
    reg.start("short")
    clock.t += 1
    reg.stop("short")

    again = registry(state, clock)
    by_name = {r.name: r for r in again.runs()}
    assert by_name["long"].active and by_name["long"].start == T0
    assert by_name["long"].labels == {"setup": "raid50"}
    assert by_name["short"].end == T0 + 6
    clock.t += 100
    assert again.stop("long").end == T0 + 106


def test_atomic_write_fsyncs_and_renames(
    state: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registry(state, clock)
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    reg.start("a")
    assert len(synced) == 2  # the file, then the directory (so the rename is durable)
    assert json.loads(state.read_text())["runs"][0]["name"] == "a"
    assert oct(state.stat().st_mode & 0o777) == "0o600"  # private: see docs/runs.md


def test_failed_write_keeps_the_old_file_and_state(
    state: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registry(state, clock)
    reg.start("a")
    before = state.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(RunError) as err:
        reg.start("b")
    assert err.value.status == 500 and "No space left" in err.value.message
    with pytest.raises(RunError):
        reg.stop("a")
    assert state.read_bytes() == before
    assert [p.name for p in state.parent.iterdir()] == ["runs.json"]  # no temp file left
    assert [(r.name, r.active) for r in reg.runs()] == [("a", True)]  # memory == disk


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe garbage",
        b'{"version": 1, "runs": "no"}',
        b'{"version": 99, "runs": []}',
        b'{"version": 1, "runs": [{"name": "bad name", "start_time": 1}]}',
        b'{"version": 1, "runs": [{"name": "a", "start_time": "yesterday"}]}',
        b'{"version": 1, "runs": [{"name": "a", "start_time": 1}, {"name": "a", "start_time": 2}]}',
        b"",
    ],
)
def test_corrupt_file_is_set_aside_not_lost(
    state: Path, clock: Clock, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    state.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="wattbit.runs"):
        reg = registry(state, clock)
    assert reg.runs() == []
    aside = state.with_name("runs.json.corrupt")
    assert aside.read_bytes() == content
    assert not state.exists()
    assert reg.load_error and "not a valid run registry" in reg.load_error
    assert "runs.json.corrupt" in caplog.text and "not a valid run registry" in caplog.text

    reg.start("fresh")  # the registry works, and writes a new file
    assert json.loads(state.read_text())["runs"][0]["name"] == "fresh"

    state.write_bytes(b"broken again")
    registry(state, clock)
    assert aside.read_bytes() == content  # an earlier copy is never overwritten
    assert state.with_name("runs.json.corrupt.1").read_bytes() == b"broken again"


def test_unreadable_file_stops_the_start(state: Path, clock: Clock) -> None:
    state.mkdir()  # exists, cannot be read as a file (root reads through chmod 000)
    with pytest.raises(OSError):
        registry(state, clock)


# -- pruning ------------------------------------------------------------------------------


def _ended(reg: RunRegistry, clock: Clock, names: Iterable[str], step: float) -> None:
    for name in names:
        reg.start(name)
        clock.t += step
        reg.stop(name)


def test_keep_last_n_or_within_retention(state: Path, clock: Clock) -> None:
    reg = registry(state, clock, keep=2, retention=3600)
    reg.start("active-forever")
    _ended(reg, clock, ["r1", "r2", "r3", "r4"], 60)
    # Every ended run is within the retention: all exported.
    assert {r.name for r in reg.runs()} == {"active-forever", "r1", "r2", "r3", "r4"}

    clock.t += 3600 - 60  # r4 ended 3540 s ago; r1..r3 are older than the retention now
    # The last 2 ended (r3, r4) stay as the `keep` newest; r1, r2 go.
    assert [r.name for r in reg.runs()] == ["active-forever", "r3", "r4"]
    assert len(json.loads(state.read_text())["runs"]) == 5  # pruned from the file on write

    reg.start("r5")
    names = {r["name"] for r in json.loads(state.read_text())["runs"]}
    assert names == {"active-forever", "r3", "r4", "r5"}

    clock.t += 10 * 86400  # long ago, but never more than keep=2 ended... and active stays
    assert [r.name for r in reg.runs()] == ["active-forever", "r3", "r4", "r5"]
    assert reg.get("r1") is None and reg.get("r4") is not None


def test_retention_zero_means_exactly_keep(clock: Clock) -> None:
    reg = registry(None, clock, keep=1, retention=0)
    _ended(reg, clock, ["a", "b", "c"], 1)
    assert [r.name for r in reg.runs()] == ["c"]
    none_kept = registry(None, clock, keep=0, retention=0)
    _ended(none_kept, clock, ["a"], 1)
    assert none_kept.runs() == []


def test_pruned_at_load(state: Path, clock: Clock) -> None:
    reg = registry(state, clock, keep=0, retention=60)
    _ended(reg, clock, ["old"], 1)
    clock.t += 61
    assert registry(state, clock, keep=0, retention=60).runs() == []


# -- metrics ------------------------------------------------------------------------------


class _Wrap:
    def __init__(self, reg: RunRegistry) -> None:
        self.reg = reg

    def collect(self) -> Iterable[Any]:
        return self.reg.collect()


def _exposition(reg: RunRegistry) -> str:
    registry_ = CollectorRegistry(auto_describe=False)
    registry_.register(_Wrap(reg))  # type: ignore[arg-type]
    return generate_latest(registry_).decode()


EXPECTED = """\
# HELP wattbit_run_active 1 while the run is active, 0 for a recently ended run.
# TYPE wattbit_run_active gauge
wattbit_run_active{run="sc10-demo"} 0.0
wattbit_run_active{run="fio:seq"} 1.0
# HELP wattbit_run_start_time_seconds When the run started, in seconds since the epoch.
# TYPE wattbit_run_start_time_seconds gauge
wattbit_run_start_time_seconds{run="sc10-demo"} 1.7e+09
wattbit_run_start_time_seconds{run="fio:seq"} 1.7000000305e+09
# HELP wattbit_run_end_time_seconds When the run ended, in seconds since the epoch.
# TYPE wattbit_run_end_time_seconds gauge
wattbit_run_end_time_seconds{run="sc10-demo"} 1.70000003e+09
# HELP wattbit_run_info The run's labels as "k=v,k2=v2", sorted by name; always 1.
# TYPE wattbit_run_info gauge
wattbit_run_info{labels="disks=48,setup=raid50",run="sc10-demo"} 1.0
wattbit_run_info{labels="",run="fio:seq"} 1.0
"""


def _two_runs(clock: Clock) -> RunRegistry:
    reg = registry(None, clock)
    reg.start("sc10-demo", {"setup": "raid50", "disks": "48"})
    clock.t += 30
    reg.stop("sc10-demo")
    clock.t += 0.5
    reg.start("fio:seq")
    return reg


def test_metrics_rendering(clock: Clock) -> None:
    assert _exposition(_two_runs(clock)) == EXPECTED


def test_metrics_drop_runs_past_retention(clock: Clock) -> None:
    reg = registry(None, clock, keep=0, retention=60)
    _ended(reg, clock, ["gone"], 1)
    assert 'run="gone"' in _exposition(reg)
    clock.t += 61
    text = _exposition(reg)
    assert 'run="gone"' not in text and "# TYPE wattbit_run_active gauge" in text


def test_promtool_accepts_the_run_metrics(clock: Clock) -> None:
    require(have("promtool"), "promtool (Debian package prometheus) is not installed")
    r = subprocess.run(
        ["promtool", "check", "metrics"],
        input=_exposition(_two_runs(clock)),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


# -- the HTTP API (WSGI) ------------------------------------------------------------------


def call(
    app: Any,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": io.BytesIO(body or b""),
    }
    if body is not None:
        environ["CONTENT_LENGTH"] = str(len(body))
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got: dict[str, Any] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(hdrs)

    data = b"".join(app(environ, start_response))
    return got["status"], got["headers"], json.loads(data) if data else None


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _start_body(name: str, **labels: str) -> bytes:
    return json.dumps({"name": name, "labels": labels}).encode()


def test_api_list_start_stop(clock: Clock) -> None:
    reg = registry(None, clock)
    app = api_app(reg, TOKEN)
    status, _, body = call(app, "GET", "/api/v1/runs")
    assert (status, body) == (200, [])

    status, headers, body = call(app, "POST", "/api/v1/runs", _start_body("x", a="b"), BEARER)
    assert status == 201 and headers["Location"] == "/api/v1/runs/x"
    assert body["name"] == "x" and body["active"] is True and body["labels"] == {"a": "b"}
    assert body["start_time"] == T0 and body["end_time"] is None
    assert body["start"] == "2023-11-14T22:13:20.000Z"

    status, _, body = call(app, "GET", "/api/v1/runs")
    assert status == 200 and [r["name"] for r in body] == ["x"]
    status, _, body = call(app, "GET", "/api/v1/runs/x")
    assert status == 200 and body["active"] is True
    status, _, _ = call(app, "HEAD", "/api/v1/runs")
    assert status == 200

    status, _, body = call(app, "POST", "/api/v1/runs", _start_body("x"), BEARER)
    assert status == 409 and "already active" in body["error"]

    clock.t += 7
    status, _, body = call(app, "POST", "/api/v1/runs/x/stop", None, BEARER)
    assert status == 200 and body["active"] is False and body["end_time"] == T0 + 7
    status, _, body = call(app, "POST", "/api/v1/runs/x/stop", None, BEARER)
    assert status == 409
    status, _, body = call(app, "POST", "/api/v1/runs/nope/stop", None, BEARER)
    assert status == 404 and "no run named 'nope'" in body["error"]
    status, _, body = call(app, "GET", "/api/v1/runs/nope")
    assert status == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/api/v1/runs", _start_body("x")), ("POST", "/api/v1/runs/x/stop", None)],
)
def test_api_writes_need_the_token(method: str, path: str, body: bytes | None) -> None:
    reg = registry(None, Clock())
    reg.start("x")  # so that a stop would succeed if it were let through
    app = api_app(reg, TOKEN)
    for headers, invalid in [
        ({}, False),
        ({"Authorization": "Bearer wrong-token-0000000"}, True),
        ({"Authorization": f"Basic {TOKEN}"}, False),
        ({"Authorization": f"Bearer {TOKEN}x"}, True),
        ({"Authorization": f"Bearer {TOKEN[:-1]}"}, True),
    ]:
        status, hdrs, answer = call(app, method, path, body, headers)
        assert status == 401, headers
        assert hdrs["WWW-Authenticate"].startswith("Bearer")
        assert ('error="invalid_token"' in hdrs["WWW-Authenticate"]) == invalid
        assert TOKEN not in json.dumps(answer)
    assert reg.get("x") is not None and reg.get("x").active  # type: ignore[union-attr]
    # For sites whose web config uses Authorization for basic auth:
    status, _, _ = call(
        app, method, path, body, {"Authorization": "Basic dTpw", "X-Wattbit-Token": TOKEN}
    )
    assert status in (200, 201, 409)


def test_api_without_a_configured_token_refuses_writes() -> None:
    reg = registry(None, Clock())
    app = api_app(reg, None)
    status, _, body = call(app, "POST", "/api/v1/runs", _start_body("x"), BEARER)
    assert status == 403 and "runs.token" in body["error"]
    status, _, _ = call(app, "POST", "/api/v1/runs/x/stop", None, BEARER)
    assert status == 403
    assert call(app, "GET", "/api/v1/runs")[0] == 200
    assert reg.runs() == []


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"\xff", 400, "not UTF-8"),
        (b"[1, 2]", 400, "expected a JSON object"),
        (b'{"labels": {}}', 400, '"name" field is required'),
        (b'{"name": 5}', 400, "must be a string"),
        (b'{"name": "x", "extra": 1}', 400, "unknown field(s): extra"),
        (b'{"name": "bad name"}', 400, "run name"),
        (b'{"name": "x", "labels": {"a": "b,c"}}', 400, "commas"),
        (b'{"name": "x", "labels": "a=b"}', 400, "must be an object"),
        (b"", 400, "no body"),
        (b" " * (runs_api.MAX_BODY + 1), 413, "larger than"),
    ],
)
def test_api_bad_requests(body: bytes, status: int, message: str) -> None:
    app = api_app(registry(None, Clock()), TOKEN)
    got, _, answer = call(app, "POST", "/api/v1/runs", body, BEARER)
    assert got == status and message in answer["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested deeper than"),
        (b'{"name": "x", "labels": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "nested deeper than"),
        (b'{"name": ' + b"9" * 5000 + b"}", "longer than"),
        (b'{"name": -' + b"9" * 40 + b"}", "longer than"),
        (b'{"name": NaN}', "not valid JSON"),
    ],
    ids=["deep-array", "deep-labels", "5000-digits", "negative-digits", "nan"],
)
def test_api_hostile_json_is_a_400_not_a_500(body: bytes, message: str) -> None:
    app = api_app(registry(None, Clock()), TOKEN)
    status, headers, answer = call(app, "POST", "/api/v1/runs", body, BEARER)
    assert status == 400 and message in answer["error"]
    assert headers["Content-Type"] == "application/json"


def test_api_strings_with_brackets_are_not_nesting() -> None:
    app = api_app(registry(None, Clock()), TOKEN)
    body = json.dumps({"name": "x", "labels": {"a": "[{" * 100 + '\\"'}}).encode()
    status, _, answer = call(app, "POST", "/api/v1/runs", body, BEARER)
    assert status == 201, answer


@pytest.mark.parametrize("length", ["\u0661\u0662", "\u00b2", "1e3", "-1", " "])
def test_api_odd_content_length_is_a_400(length: str) -> None:
    app = api_app(registry(None, Clock()), TOKEN)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/runs",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_LENGTH": length,
        "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
        "wsgi.input": io.BytesIO(b"{}"),
    }
    got: list[str] = []
    data = b"".join(app(environ, lambda status, headers: got.append(status)))
    assert got[0].startswith("400") and "Content-Length" in json.loads(data)["error"]


def test_api_wrong_token_warnings_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(0.0)
    app = api_app(registry(None, Clock()), TOKEN, clock=clock)
    wrong = {"Authorization": "Bearer wrong-token-0000000"}

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="wattbit.runs"):
        for _ in range(50):
            assert call(app, "POST", "/api/v1/runs", _start_body("x"), wrong)[0] == 401
        assert len(warnings()) == 1 and "wrong token" in warnings()[0]
        # Another source gets its own line.
        environ_other = {"Authorization": "Bearer nope-nope-nope-nope"}
        other = dict(environ_other)
        status = call_from(app, "10.0.0.9", other)
        assert status == 401 and len(warnings()) == 2 and "10.0.0.9" in warnings()[1]
        clock.t += runs_api.WARN_EVERY_S + 1
        assert call(app, "POST", "/api/v1/runs", _start_body("x"), wrong)[0] == 401
        assert len(warnings()) == 3 and "and 49 more" in warnings()[2]


def call_from(app: Any, source: str, headers: dict[str, str]) -> int:
    body = _start_body("x")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/runs",
        "REMOTE_ADDR": source,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    for k, v in headers.items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got: list[str] = []
    b"".join(app(environ, lambda status, hdrs: got.append(status)))
    return int(got[0].split()[0])


def test_api_missing_body_and_methods() -> None:
    app = api_app(registry(None, Clock()), TOKEN)
    status, _, body = call(app, "POST", "/api/v1/runs", None, BEARER)
    assert status == 400 and "no Content-Length" in body["error"]
    status, headers, _ = call(app, "DELETE", "/api/v1/runs")
    assert status == 405 and headers["Allow"] == "GET, HEAD, POST"
    status, headers, _ = call(app, "GET", "/api/v1/runs/x/stop")
    assert status == 405 and headers["Allow"] == "POST"
    status, headers, _ = call(app, "POST", "/api/v1/runs/x")
    assert status == 405
    assert call(app, "GET", "/api/v1/runs/x/stop/more")[0] == 404
    assert call(app, "GET", "/api/v1/runsx")[0] == 404


def test_router_prefix_routes_are_backward_compatible() -> None:
    def app(tag: str) -> Any:
        def serve(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            start_response("200 OK", [])
            return [tag.encode()]

        return serve

    router = _router({"/": app("root"), "/a": app("a"), "/a/*": app("a/*"), "/a/b/*": app("a/b/*")})

    def get(path: str) -> str:
        out: list[str] = []

        def start_response(status: str, headers: Any, *exc: Any) -> Any:
            out.append(status)

        body = b"".join(router({"PATH_INFO": path}, start_response))
        return body.decode() if out[0].startswith("200") else out[0]

    assert get("/") == "root"
    assert get("/a") == "a"
    assert get("/a/x/stop") == "a/*"
    assert get("/a/b/c") == "a/b/*"  # the longest prefix wins
    assert get("/nothing") == "404 Not Found"  # "/" stays exact
    assert get("/ab") == "404 Not Found"


# -- configuration ------------------------------------------------------------------------


def _config(tmp_path: Path, text: str) -> CollectorConfig:
    f = tmp_path / "collector.yml"
    f.write_text(text)
    return load_model(CollectorConfig, f)


def test_runs_config_defaults_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path, "pdus: []\n")
    assert cfg.runs.token is None and cfg.runs.keep == 100 and cfg.runs.retention == 7 * 86400

    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "token").chmod(0o600)  # a world-readable token file is refused
    cfg = _config(tmp_path, f"runs:\n  token_file: {tmp_path / 'token'}\n  retention: 2d\n")
    assert cfg.runs.token is not None and cfg.runs.token.get_secret_value() == TOKEN
    assert cfg.runs.retention == 2 * 86400
    monkeypatch.setenv("WB_RUN_TOKEN", TOKEN)
    cfg = _config(tmp_path, "runs:\n  token_env: WB_RUN_TOKEN\n  keep: 5\n  retention: 12h\n")
    assert cfg.runs.token is not None and cfg.runs.keep == 5 and cfg.runs.retention == 43200
    cfg = _config(tmp_path, f"runs:\n  token: {TOKEN}\n")
    dump = json.dumps(redacted(cfg)) + repr(cfg) + str(cfg)
    assert TOKEN not in dump
    assert redacted(cfg)["runs"]["token"] == "<redacted>"  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("runs:\n  token: short-secret\n", "runs", "at least 16"),
        ('runs:\n  token: "sixteen-chars-and-more\\n"\n', "runs", "at least 16"),
        ("runs:\n  token: 'has spaces in it, sixteen+'\n", "runs", "at least 16"),
        (f"runs:\n  token: {TOKEN}\n  token_env: X\n", "runs", "give token once"),
        ("runs:\n  token_env: WB_NOT_SET_ANYWHERE\n", "runs", "is not set"),
        ("runs:\n  keep: -1\n", "runs.keep", "greater than or equal"),
        ("runs:\n  retention: -5\n", "runs.retention", "negative"),
        ("runs:\n  retention: 7 days\n", "runs.retention", "duration"),
        ("runs:\n  tokn: x\n", "runs.tokn", "unknown key"),
    ],
)
def test_bad_runs_config_names_the_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, text)
    assert err.value.key == key and reason in err.value.reason
    assert "short-secret" not in str(err.value) and "sixteen" not in str(err.value)


# -- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "labels", "command"),
    [
        (["x", "--", "sh", "-c", "exit 3"], [], ["sh", "-c", "exit 3"]),
        (["x", "--label", "a=b", "--", "fio", "--name=j"], ["a=b"], ["fio", "--name=j"]),
        (["--label", "a=b", "x", "--label", "c=d", "--", "ls"], ["a=b", "c=d"], ["ls"]),
        (["x", "nuttcp", "-t", "host"], [], ["nuttcp", "-t", "host"]),
        (["x", "--", "cmd", "--", "arg"], [], ["cmd", "--", "arg"]),
        (["x", "--label", "a=b", "--", "cmd", "--label", "z"], ["a=b"], ["cmd", "--label", "z"]),
    ],
)
def test_exec_command_line(argv: list[str], labels: list[str], command: list[str]) -> None:
    from collector.runs import cli as runs_cli

    args = parser().parse_args(["run", "exec", *argv])
    options = runs_cli.argparse.ArgumentParser(add_help=False)
    runs_cli._label_option(options)
    runs_cli._common(options)
    assert runs_cli._split_exec(args, options) == command
    assert args.name == "x" and args.label == labels


def test_exec_options_after_name_need_the_separator() -> None:
    from collector.runs import cli as runs_cli

    args = parser().parse_args(["run", "exec", "x", "--label", "a=b", "sleep", "1"])
    with pytest.raises(runs_cli.CliError, match="after `--`"):
        runs_cli._split_exec(args, runs_cli.argparse.ArgumentParser())


class _FakeChild:
    def __init__(self) -> None:
        self.sent: list[int] = []

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:
        self.sent.append(sig)


@pytest.mark.parametrize("foreground", [True, False])
def test_exec_forwards_signals_but_never_a_terminal_ctrl_c_twice(
    foreground: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from collector.runs import cli as runs_cli

    monkeypatch.setattr(runs_cli, "_terminal_sent_it_to_child", lambda: foreground)
    signals = runs_cli._Signals()
    child = _FakeChild()
    signals.child = child  # type: ignore[assignment]
    signals._handle(signal.SIGINT, None)
    signals._handle(signal.SIGTERM, None)
    signals._handle(signal.SIGINT, None)
    assert signals.received == signal.SIGINT
    if foreground:  # the terminal delivered the first Ctrl-C to the child itself
        assert child.sent == [signal.SIGTERM, signal.SIGINT]
    else:  # `kill -INT` from elsewhere, or no terminal: forward every one
        assert child.sent == [signal.SIGINT, signal.SIGTERM, signal.SIGINT]
