"""`wattbit run --token-file` and the simulated PDU's `--community-file` read their secret file
by the collector's own rules (collector.secretfile.read_secret_file): one line, a regular
file, not readable by every user. A refusal exits 2 naming the file, never its content."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.cli import parser
from collector.runs.cli import _client
from tests.support.cli import wattbit
from tests.support.env import ROOT
from tests.support.snmpagents import closed_udp_port

TOKEN = "Zr8tQ2wLx5vN9cK3mB7pH4"
SECOND = "S3CR3T-second-line"


def _secret(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    f = tmp_path / "secret"
    f.write_bytes(content)
    f.chmod(mode)
    return f


# (content, mode, words of the reason)
REFUSED = [
    pytest.param(TOKEN.encode() + b"\n", 0o644, "every user", id="world-readable"),
    pytest.param(TOKEN.encode() + b"\n" + SECOND.encode() + b"\n", 0o600, "one line", id="2-lines"),
    pytest.param(b"\n", 0o600, "is empty", id="empty"),
    pytest.param(b"\xff\xfe" + TOKEN.encode(), 0o600, "UTF-8", id="not-utf8"),
]


@pytest.fixture
def unreachable() -> Iterator[str]:
    """A collector URL that refuses connections: a token that passes gets exit 1, not 2."""
    # Bound, never listening: connecting is refused for as long as the test holds it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(("content", "mode", "reason"), REFUSED)
@pytest.mark.parametrize("command", ["start", "stop", "exec"])
def test_run_token_file_refused_exits_2_without_the_value(
    tmp_path: Path, content: bytes, mode: int, reason: str, command: str, unreachable: str
) -> None:
    f = _secret(tmp_path, content, mode)
    args = ["run", command, "x", "--token-file", str(f), "--collector", unreachable]
    if command == "exec":
        args += ["--", "true"]
    r = wattbit(*args, env={"WATTBIT_TOKEN": ""})
    assert r.returncode == 2, r.stderr
    assert "--token-file" in r.stderr and str(f) in r.stderr and reason in r.stderr, r.stderr
    assert TOKEN not in r.stdout + r.stderr and SECOND not in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_run_token_file_not_a_regular_file_or_missing(tmp_path: Path, unreachable: str) -> None:
    for path, reason in ((tmp_path, "not a regular file"), (tmp_path / "none", "cannot read")):
        r = wattbit("run", "start", "x", "--token-file", str(path), "--collector", unreachable)
        assert r.returncode == 2, r.stderr
        assert str(path) in r.stderr and reason in r.stderr, r.stderr


def test_run_token_file_group_readable_is_a_warning_and_used(
    tmp_path: Path, unreachable: str
) -> None:
    f = _secret(tmp_path, TOKEN.encode() + b"\n", 0o640)
    r = wattbit("run", "start", "x", "--token-file", str(f), "--collector", unreachable)
    assert r.returncode == 1, r.stderr  # read; then the collector cannot be reached
    assert "readable by its group" in r.stderr and "cannot reach" in r.stderr
    assert TOKEN not in r.stdout + r.stderr


def test_run_token_file_is_its_first_line(tmp_path: Path) -> None:
    f = _secret(tmp_path, b"  " + TOKEN.encode() + b"  \n\n")
    args = parser().parse_args(["run", "start", "x", "--token-file", str(f)])
    assert _client(args)._token == TOKEN


@pytest.mark.parametrize(("content", "mode", "reason"), REFUSED)
def test_pdusim_community_file_refused_exits_2_without_the_value(
    tmp_path: Path, content: bytes, mode: int, reason: str
) -> None:
    f = _secret(tmp_path, content, mode)
    # A process, with a timeout: a simulator that accepted the file would serve until killed.
    r = subprocess.run(
        [sys.executable, "-m", "collector.demo.pdusim", "--community-file", str(f),
         "--listen", f"127.0.0.1:{closed_udp_port()}", "--quiet"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--community-file" in r.stderr and str(f) in r.stderr and reason in r.stderr, r.stderr
    assert TOKEN not in r.stdout + r.stderr and SECOND not in r.stdout + r.stderr
    assert "Traceback" not in r.stderr
