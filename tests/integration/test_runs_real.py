"""Runs end to end: a real `wattbit collector` subprocess, the real `wattbit run` CLI, HTTP.

The collector keeps its registry in a temporary state directory and polls no PDU. Every
write goes through the CLI or raw HTTP exactly as an operator's would; metrics are read
from the collector's own /metrics, and the Grafana annotation query of docs/runs.md is
evaluated by promtool.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import require, sigint_default
from tests.support.http import tls_auth_web_file
from tests.support.realparts import ROOT, Collector, have, sample

TOKEN = "Zr8tQ2wLx5vN9cK3mB7pH4"
RUN_ACTIVE = "wattbit_run_active"
RUN_START = "wattbit_run_start_time_seconds"
RUN_END = "wattbit_run_end_time_seconds"
RUN_INFO = "wattbit_run_info"


def config(state_dir: Path, runs: str = f"runs:\n  token: {TOKEN}\n", extra: str = "") -> str:
    """A collector config polling no PDU, with its state in `state_dir`."""
    return f"state_dir: {state_dir}\npdus: []\n{runs}{extra}"


def start_collector(tmp: Path, text: str) -> Collector:
    tmp.mkdir(parents=True, exist_ok=True)
    c = Collector(text, tmp)
    try:
        c.wait_ready(timeout=30)
    except Exception:
        c.stop()
        raise
    return c


def base(c: Collector) -> str:
    return f"http://127.0.0.1:{c.port}"


def cli(
    *args: str, token: str | None = TOKEN, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """`wattbit run ARGS...` as a user would run it; the token from $WATTBIT_TOKEN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATTBIT_")}
    env["PYTHONPATH"] = str(ROOT)
    if token is not None:
        env["WATTBIT_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def http(
    method: str, url: str, body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """One raw HTTP request; (status, headers, decoded JSON)."""
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def api_run(c: Collector, name: str) -> dict[str, Any]:
    status, _, body = http("GET", f"{base(c)}/api/v1/runs/{name}")
    assert status == 200, body
    return dict(body)


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """One collector with a token, shared by the tests that use distinct run names."""
    tmp = tmp_path_factory.mktemp("runs-collector")
    c = start_collector(tmp, config(tmp / "state"))
    yield c
    c.stop()


def test_list_is_open_and_writes_need_the_token(collector: Collector) -> None:
    url = f"{base(collector)}/api/v1/runs"
    status, _, body = http("GET", url)
    assert status == 200 and isinstance(body, list)

    for headers in ({}, {"Authorization": "Bearer not-the-token-at-all"}):
        status, hdrs, body = http("POST", url, {"name": "denied"}, headers)
        assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer"), body
        status, hdrs, _ = http("POST", f"{url}/denied/stop", None, headers)
        assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer")

    r = cli("start", "denied", "--collector", base(collector), token="wrong-token-wrong-token")
    assert r.returncode == 1 and "401" in r.stderr and "WATTBIT_TOKEN" in r.stderr
    assert "wrong-token" not in r.stderr + r.stdout
    r = cli("start", "denied", "--collector", base(collector), token=None)
    assert r.returncode == 2 and "no token" in r.stderr
    assert http("GET", f"{url}/denied")[0] == 404
    assert 'run="denied"' not in collector.scrape_text()

    status, _, body = http("POST", url, None, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 400 and "no body" in body["error"]
    req = urllib.request.Request(
        url, data=b"{nope", method="POST", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400 and "not valid JSON" in json.loads(err.value.read())["error"]
    assert TOKEN not in collector.log.read_text()


def test_no_token_configured_means_read_only(tmp_path: Path) -> None:
    c = start_collector(tmp_path, config(tmp_path / "state", runs=""))
    try:
        url = f"{base(c)}/api/v1/runs"
        status, _, body = http("POST", url, {"name": "x"}, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 403 and "runs.token" in body["error"]
        assert http("GET", url)[:1] == (200,)
        r = cli("start", "x", "--collector", base(c))
        assert r.returncode == 1 and "403" in r.stderr and "runs.token" in r.stderr
    finally:
        c.stop()
    assert "read-only" in c.log.read_text()
    assert not (tmp_path / "state").exists()  # nothing to write, so the state dir is untouched


def test_unusable_state_dir_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    state = tmp_path / "file" / "state"
    c = Collector(config(state), tmp_path)
    try:
        assert c.proc.wait(timeout=30) == 1
    finally:
        c.stop()
    assert f"cannot start: state_dir {state}" in c.log.read_text()


def test_start_shows_on_metrics_and_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_collector(tmp_path / "first", config(state))
    try:
        r = cli("start", "x", "--label", "setup=raid50", "--collector", base(first))
        assert r.returncode == 0, r.stderr
        assert "run x started" in r.stdout
        m = first.scrape()
        assert sample(m, RUN_ACTIVE, run="x") == 1.0
        started = sample(m, RUN_START, run="x")
        assert abs(started - time.time()) < 60
        assert (RUN_END, (("run", "x"),)) not in m
        r = cli("start", "x", "--collector", base(first))
        assert r.returncode == 1 and "409" in r.stderr and "already active" in r.stderr
    finally:
        first.stop()
    assert json.loads((state / "runs.json").read_text())["runs"][0]["name"] == "x"

    second = start_collector(tmp_path / "second", config(state))
    try:
        m = second.scrape()
        assert sample(m, RUN_ACTIVE, run="x") == 1.0
        assert sample(m, RUN_START, run="x") == started  # the very same start time
        assert sample(m, RUN_INFO, run="x", labels="setup=raid50") == 1.0

        r = cli("stop", "x", "--collector", base(second))
        assert r.returncode == 0 and "run x stopped" in r.stdout, r.stderr
        m = second.scrape()
        assert sample(m, RUN_ACTIVE, run="x") == 0.0 and (RUN_ACTIVE, (("run", "x"),)) in m
        assert sample(m, RUN_END, run="x") >= started
        r = cli("stop", "x", "--collector", base(second))
        assert r.returncode == 1 and "409" in r.stderr and "not active" in r.stderr
        r = cli("stop", "nobody", "--collector", base(second))
        assert r.returncode == 1 and "404" in r.stderr
    finally:
        second.stop()


def test_labels_show_in_run_info_and_list(collector: Collector) -> None:
    r = cli(
        "start", "labelled", "--label", "setup=raid50", "--label", "disks=48",
        "--collector", base(collector),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = collector.scrape()
    assert sample(m, RUN_INFO, run="labelled", labels="disks=48,setup=raid50") == 1.0

    r = cli("list", "--collector", base(collector))
    assert r.returncode == 0, r.stderr
    line = next(line for line in r.stdout.splitlines() if line.startswith("labelled "))
    assert "active" in line and "disks=48,setup=raid50" in line
    r = cli("list", "--json", "--collector", base(collector))
    runs = {x["name"]: x for x in json.loads(r.stdout)}
    assert runs["labelled"]["labels"] == {"disks": "48", "setup": "raid50"}

    r = cli("start", "bad", "--label", "1x=y", "--collector", base(collector))
    assert r.returncode == 2 and "label" in r.stderr


def test_exec_passes_the_exit_code_through_and_ends_the_run(collector: Collector) -> None:
    r = cli(
        "exec", "exit3", "--label", "tool=sh", "--collector", base(collector),
        "--", "sh", "-c", "echo from-child; echo err-child >&2; exit 3",
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert "from-child" in r.stdout and "err-child" in r.stderr  # stdio inherited
    run = api_run(collector, "exit3")
    assert run["active"] is False and run["end_time"] >= run["start_time"]
    assert run["labels"] == {"tool": "sh"}
    m = collector.scrape()
    assert sample(m, RUN_ACTIVE, run="exit3") == 0.0
    assert sample(m, RUN_END, run="exit3") == run["end_time"]

    r = cli("exec", "ok", "--collector", base(collector), "--", "true")
    assert r.returncode == 0 and api_run(collector, "ok")["active"] is False
    r = cli("exec", "missing", "--collector", base(collector), "--", "/nonexistent/cmd")
    assert r.returncode == 127 and "not found" in r.stderr
    assert api_run(collector, "missing")["active"] is False


def test_exec_does_not_run_the_command_when_the_start_fails(
    collector: Collector, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    r = cli(
        "exec", "refused", "--collector", base(collector), "--", "touch", str(marker),
        token="wrong-token-wrong-token",
    )  # fmt: skip
    assert r.returncode == 125 and "not running the command" in r.stderr
    assert not marker.exists()
    # A port held bound but not listening: refused for certain (port 1, or a port found free
    # a moment ago, may be anyone's by the time the command connects).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        r = cli("exec", "nowhere", "--collector", url, "--", "touch", str(marker))
    assert r.returncode == 125 and "cannot reach the collector" in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_exec_interrupted_forwards_the_signal_and_ends_the_run(
    collector: Collector, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    name = f"interrupted-{sig.name.lower()}"
    pidfile = tmp_path / "child.pid"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATTBIT_")}
    env.update(PYTHONPATH=str(ROOT), WATTBIT_TOKEN=TOKEN, WATTBIT_COLLECTOR=base(collector))
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "run", "exec", name, "--",
         "sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=sigint_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        child = int(pidfile.read_text())
        assert api_run(collector, name)["active"] is True
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child got the signal and is gone (reaped by its parent)
    run = api_run(collector, name)
    assert run["active"] is False and run["end_time"] >= run["start_time"]
    assert sample(collector.scrape(), RUN_ACTIVE, run=name) == 0.0


def test_promtool_check_metrics_on_the_collector(collector: Collector) -> None:
    require(have("promtool"), "promtool (Debian package prometheus) is not installed")
    r = cli("start", "promtool-check", "--label", "a=b", "--collector", base(collector))
    assert r.returncode == 0, r.stderr
    cli("exec", "promtool-ended", "--collector", base(collector), "--", "true")
    text = collector.scrape_text()
    assert 'wattbit_run_end_time_seconds{run="promtool-ended"}' in text
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


ANNOTATION_TEST = """\
rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'wattbit_run_active{run="sc10-demo", job="wattbit-collector"}'
        values: '1 1 1 0 0'
      - series: 'wattbit_run_info{run="sc10-demo", labels="setup=raid50", job="wattbit-collector"}'
        values: '1 1 1 1 1'
      - series: 'wattbit_run_active{run="later", job="wattbit-collector"}'
        values: '_ _ 1 1 1'
      - series: 'wattbit_run_info{run="later", labels="", job="wattbit-collector"}'
        values: '_ _ 1 1 1'
    promql_expr_test:
      - expr: 'EXPR'
        eval_time: 1m
        exp_samples:
          - labels: '{run="sc10-demo", labels="setup=raid50", job="wattbit-collector"}'
            value: 1
      - expr: 'EXPR'
        eval_time: 4m
        exp_samples:
          - labels: '{run="later", job="wattbit-collector"}'  # an empty label is no label
            value: 1
"""


def test_the_documented_grafana_annotation_query(tmp_path: Path) -> None:
    """The annotation query of docs/runs.md: one series per active run, with its labels."""
    require(have("promtool"), "promtool (Debian package prometheus) is not installed")
    doc = (ROOT / "docs" / "runs.md").read_text()
    marker = "```promql\n"
    expr = doc[doc.index(marker) + len(marker) :].split("```", 1)[0].strip()
    assert "wattbit_run_active" in expr and "\n" not in expr and "'" not in expr
    f = tmp_path / "annotation_test.yml"
    f.write_text(ANNOTATION_TEST.replace("EXPR", expr))
    r = subprocess.run(["promtool", "test", "rules", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _cert(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=wattbit-test",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_behind_tls_and_basic_auth(tmp_path: Path) -> None:
    """With basic auth in the web config, the token travels in X-Wattbit-Token."""
    require(have("openssl"), "openssl is not installed")
    cert, _ = _cert(tmp_path)
    web = tls_auth_web_file(tmp_path, "ops", "scrape-pass")
    c = Collector(config(tmp_path / "state", extra=f"web_config: {web}\n"), tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{c.port}/api/v1/runs"
    basic = "Basic " + base64.b64encode(b"ops:scrape-pass").decode()
    try:
        deadline = time.monotonic() + 30
        while True:
            assert c.proc.poll() is None, c.log.read_text()
            try:
                req = urllib.request.Request(url, headers={"Authorization": basic})
                with urllib.request.urlopen(req, timeout=5, context=context) as r:
                    assert json.loads(r.read()) == []
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, c.log.read_text()
                time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5, context=context)
        assert err.value.code == 401  # basic auth guards the API like /metrics

        https = f"https://127.0.0.1:{c.port}"
        r = cli("start", "tls", "--collector", https, "--ca-file", str(cert))
        assert r.returncode == 1 and "basic auth" in r.stderr
        creds = f"https://ops:scrape-pass@127.0.0.1:{c.port}"
        r = cli("start", "tls", "--collector", creds, "--ca-file", str(cert))
        assert r.returncode == 0, r.stderr
        r = cli("exec", "tls2", "--collector", creds, "--ca-file", str(cert), "--", "true")
        assert r.returncode == 0, r.stderr
        r = cli("list", "--collector", creds, "--ca-file", str(cert))
        assert r.returncode == 0 and "tls2" in r.stdout and "scrape-pass" not in r.stdout
        r = cli("start", "tls3", "--collector", creds)  # no --ca-file: an unknown issuer
        assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stderr
    finally:
        c.stop()
