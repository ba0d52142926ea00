"""`wattbit report` against a hostile store: a real HTTP server on 127.0.0.1 that lies.

The store is raw sockets (http.server would refuse to send most of these answers): it drips
an answer a byte a second, sends 100 MB or 2 million series, malformed JSON of every kind, a
broken status line, a truncated body, 150 headers, and error text of 20 MB full of terminal
escapes. Each case runs the real `wattbit report` process and checks what a user sees: exit
1, one line on stderr that names the problem and carries none of the store's control
characters, within a bounded time (the store would hold it far longer) and a bounded peak
RSS (the process' own ru_maxrss from wait4).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.env import ROOT

TIMEOUT_S = 5  # the report's --timeout in these tests
DRIP_S = 300  # how long the dripping store would go on: far past any bound below
# Bounds that hold on a loaded machine and that the failures they catch are far beyond: a
# dripped answer held the report as long as the store went on; 100 MB answers took 2.7 GB.
BOUND_S = 90
RSS_BOUND_MB = 450

Send = Callable[[socket.socket], None]


def _json_answer(doc: object, status: str = "200 OK") -> bytes:
    body = json.dumps(doc).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def _raw(data: bytes) -> Send:
    return lambda conn: conn.sendall(data)


def _drip(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    conn.sendall(b"Content-Length: 100000\r\n\r\n")
    for _ in range(DRIP_S):
        conn.sendall(b" ")
        time.sleep(1)


def _drip_status(conn: socket.socket) -> None:
    for b in b"HTTP/1.1 200 OK\r\n" * 100:
        conn.sendall(bytes([b]))
        time.sleep(1)


def _stream(head: bytes, body_chunk: bytes, total: int, tail: bytes = b"") -> Send:
    """``head``, then ``body_chunk`` again and again until ``total`` bytes, then ``tail``."""

    def send(conn: socket.socket) -> None:
        conn.sendall(head)
        sent = 0
        while sent < total:
            conn.sendall(body_chunk)
            sent += len(body_chunk)
        conn.sendall(tail)

    return send


HEAD_NO_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
SERIES = b'{"metric":{},"value":[1,"1"]},'
VECTOR = b'{"status":"success","data":{"resultType":"vector","result":['
LAST = b'{"metric":{},"value":[1,"1"]}]}}'
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\r\u202eevil\x9b31m"
MATRIX = {"resultType": "matrix"}


def _ok(data: object) -> bytes:
    return _json_answer({"status": "success", "data": data})


@dataclass
class Case:
    """One hostile behaviour and the words the one-line error must carry."""

    send: Send
    words: str


CASES: dict[str, Case] = {
    "drip body": Case(_drip, f"no complete answer within {TIMEOUT_S} s"),
    "drip status line": Case(_drip_status, f"no complete answer within {TIMEOUT_S} s"),
    "100 MB answer": Case(
        _stream(HEAD_NO_LENGTH + VECTOR, SERIES * 30_000, 100 * 1024 * 1024, LAST),
        "larger than 67108864 bytes",
    ),
    "100 MB answer, announced": Case(
        _stream(
            b"HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n" + VECTOR,
            SERIES * 30_000,
            100 * 1024 * 1024,
        ),
        "larger than 67108864 bytes",
    ),
    "2 million series": Case(
        _stream(HEAD_NO_LENGTH + VECTOR, SERIES * 10_000, len(SERIES) * 2_000_000, LAST),
        "more than 100000 series",
    ),
    "not an object": Case(_raw(_json_answer([1, 2, 3])), "not a JSON object"),
    "deep nesting": Case(
        _raw(HEAD_NO_LENGTH + b'{"status":"success","data":' + b"[" * 10**5 + b"]" * 10**5 + b"}"),
        "nested too deeply",
    ),
    "matrix without values": Case(_raw(_ok({**MATRIX, "result": [{"metric": {}}]})), "malformed"),
    "matrix of bad pairs": Case(
        _raw(_ok({**MATRIX, "result": [{"metric": {}, "values": [[1]]}]})), "malformed"
    ),
    "matrix of a string": Case(_raw(_ok({**MATRIX, "result": "x"})), "malformed"),
    "labels not strings": Case(
        _raw(_ok({**MATRIX, "result": [{"metric": {"a": [1]}, "values": []}]})), "malformed"
    ),
    "NaN in a count": Case(
        _raw(_ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, "NaN"]}]})),
        "answered nan",
    ),
    "bad status line": Case(_raw(b"HELLO WORLD\r\n\r\n"), "not an HTTP status line"),
    "truncated body": Case(
        _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"status":'),
        "the body ended early",
    ),
    "150 headers": Case(
        _raw(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n"),
        "got more than 100 headers",
    ),
    "20 MB error with escapes": Case(
        _stream(
            b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n",
            ESCAPES.encode() * 1000,
            20 * 1024 * 1024,
        ),
        "HTTP 500",
    ),
    "error field with escapes": Case(
        _raw(
            _json_answer(
                {"status": "error", "errorType": ESCAPES, "error": ESCAPES * 10_000},
                "422 Unprocessable Entity",
            )
        ),
        "HTTP 422",
    ),
    "status error with escapes": Case(
        _raw(_json_answer({"status": "error", "errorType": "bad_data", "error": ESCAPES * 9999})),
        "bad_data",
    ),
}


class _Store(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    send: Send


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data:  # the request's head
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        want = int(length[1]) if length else 0
        while len(body) < want:  # read the form body whole: closing on unread bytes sends
            chunk = conn.recv(65536)  # a RST that can beat the answer to the client
            if not chunk:
                return
            body += chunk
        with contextlib.suppress(OSError):  # the report hung up: as it should at its deadline
            self.server.send(conn)  # type: ignore[attr-defined]
            conn.shutdown(socket.SHUT_WR)


@contextmanager
def store(send: Send) -> Iterator[str]:
    """A hostile store on 127.0.0.1 (a free port) answering every request with ``send``."""
    srv = _Store(("127.0.0.1", 0), _Handler)
    srv.send = send
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@dataclass
class Outcome:
    """What the user saw: exit code, output, wall time and peak RSS of the process."""

    code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float


def report(url: str, tmp: Path, *args: str) -> Outcome:
    """`wattbit report` of the last hour as a user runs it; its own peak RSS from wait4."""
    out, err = tmp / "stdout", tmp / "stderr"
    cmd = [sys.executable, "-m", "collector.cli", "report", "--start", "now-1h",
           "--prometheus", url, "--timeout", f"{TIMEOUT_S}s", "--out", str(tmp), *args]  # fmt: skip
    t0 = time.monotonic()
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            cmd, stdout=o, stderr=e, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))
        )
        watchdog = threading.Timer(BOUND_S * 4, proc.kill)  # never hang the test run itself
        watchdog.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Outcome(
        proc.returncode,
        out.read_text(errors="replace"),
        err.read_text(errors="replace"),
        time.monotonic() - t0,
        usage.ru_maxrss / 1024,
    )


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_store_one_line_bounded(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    with store(case.send) as url:
        r = report(url, tmp_path)
    lines = r.stderr.splitlines()
    assert r.code == 1, (name, r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("wattbit report: "), (name, r.stderr[-2000:])
    assert case.words in lines[0], (name, lines[0])
    assert "Traceback" not in r.stderr
    assert len(lines[0]) < 1000, (name, len(lines[0]))
    assert not any(ch in r.stderr for ch in "\x1b\x07\x9b\u202e\r"), (name, repr(lines[0]))
    assert r.seconds < BOUND_S, (name, r.seconds)
    assert r.max_rss_mb < RSS_BOUND_MB, (name, r.max_rss_mb)


def test_caps_are_flags(tmp_path: Path) -> None:
    """--max-answer-bytes and --max-series lower the caps; bad values exit 2."""
    big = _ok({"resultType": "vector", "result": [{"metric": {"a": "b"}, "value": [1, "1"]}] * 3})
    with store(_raw(big)) as url:
        r = report(url, tmp_path, "--max-series", "2")
        assert r.code == 1 and "more than 2 series (--max-series)" in r.stderr, r.stderr
        small = _ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, "1"]}] * 40})
    with store(_raw(small)) as url:
        r = report(url, tmp_path, "--max-answer-bytes", "1KiB")
        assert r.code == 1 and "larger than 1024 bytes (--max-answer-bytes" in r.stderr, r.stderr
    for bad in (["--max-series", "0"], ["--max-answer-bytes", "12"], ["--max-answer-bytes", "1MB"]):
        r = report("http://127.0.0.1:1", tmp_path, *bad)
        assert r.code == 2 and bad[0] in r.stderr, r.stderr
