"""Clients that start an HTTP request and never finish it, and a kept-alive scraper timing
scrapes beside them (issue 34): what tests/integration/test_http_stalled.py asserts on and
bench/http_stall.py measures with its knobs.

A stalled request either announces a body (Content-Length or chunked) and never sends it, or
stops in the middle of its headers. Each is aimed at every route the daemons serve: /metrics,
the landing page, the run API (its POSTs do take a body), a path that is no route.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field

_BODY = b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
_CHUNKED = b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

# name -> the bytes such a client sends before it stalls; every one is unauthenticated.
HEADS: dict[str, bytes] = {
    "GET /metrics, body announced": b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "POST /metrics, body announced": b"POST /metrics HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "GET /, body announced": b"GET / HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "GET /nowhere, body announced": b"GET /nowhere HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "POST /api/v1/runs, body announced": b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "POST /api/v1/runs, chunked": b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + _CHUNKED,
    "POST /api/v1/runs/x/stop, body announced": (
        b"POST /api/v1/runs/x/stop HTTP/1.1\r\nHost: x\r\n" + _BODY
    ),
    "GET /metrics, headers unfinished": b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa",
    "POST /api/v1/runs, headers unfinished": b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nX-Sl",
    # The same on the other routes and methods (issue 34: "other endpoints than the ones named")
    "HEAD /metrics, body announced": b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "GET /api/v1/runs, body announced": b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + _BODY,
    "GET /api/v1/runs/x, chunked": b"GET /api/v1/runs/x HTTP/1.1\r\nHost: x\r\n" + _CHUNKED,
    "POST /api/v1/runs/x/stop, chunked": (
        b"POST /api/v1/runs/x/stop HTTP/1.1\r\nHost: x\r\n" + _CHUNKED
    ),
    "GET /, headers unfinished": b"GET / HTTP/1.1\r\nHost: x\r\nAccept: text/h",
    "GET /api/v1/runs, headers unfinished": b"GET /api/v1/runs HTTP/1.1\r\nHo",
    "GET /metrics, request line unfinished": b"GET /metrics HTTP/1.",
}


def open_stalled(
    host: str, port: int, head: bytes, tls: ssl.SSLContext | None, timeout: float = 10.0
) -> socket.socket:
    """Connect (TLS when `tls`), send `head` and return the socket, which sends nothing more."""
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        s = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        s.sendall(head)
    except BaseException:
        raw.close()
        raise
    return s


def released(sock: socket.socket, wait: float) -> bool:
    """Whether the server answered or closed `sock` within `wait` seconds.

    Readable is not enough over TLS: a TLS 1.3 server sends its session tickets after the
    handshake, records that carry no answer.
    """
    give_up = time.monotonic() + wait
    while True:
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending()
        left = give_up - time.monotonic()
        if not pending and not select.select([sock], [], [], max(0.0, left))[0]:
            return False
        timeout = sock.gettimeout()
        sock.setblocking(False)
        try:
            sock.recv(65536)  # an answer or an EOF: the server let go of it either way
            return True
        except ssl.SSLWantReadError:
            if left <= 0:
                return False  # records of TLS itself, no answer (yet)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # reset
        finally:
            sock.settimeout(timeout)


def header_flood(lines: int, size: int) -> bytes:
    """The start of a GET /metrics followed by `lines` header lines of `size` bytes, unfinished."""
    out = [b"GET /metrics HTTP/1.1\r\nHost: x\r\n"]
    for i in range(lines):
        name = b"X-Pad-%03d: " % i
        out.append(name + b"a" * (size - len(name) - 2) + b"\r\n")
    return b"".join(out)


class Flood(threading.Thread):
    """Opens stalled requests at `rate` a second, keeping the newest `hold` open, until halted."""

    def __init__(
        self,
        host: str,
        port: int,
        head: bytes,
        rate: float,
        hold: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(name="stalled-http-flood", daemon=True)
        self.host, self.port, self.head, self.tls = host, port, head, tls
        self.rate, self.hold = rate, hold
        self.opened = 0
        self.failed = 0  # connect, handshake or send refused or timed out
        self.halt = threading.Event()

    def run(self) -> None:
        """Open, send, hold; past `hold`, close the oldest."""
        socks: deque[socket.socket] = deque()
        due = time.monotonic()
        try:
            while not self.halt.is_set():
                try:
                    socks.append(open_stalled(self.host, self.port, self.head, self.tls, 1.0))
                    self.opened += 1
                except OSError:
                    self.failed += 1
                while len(socks) > self.hold:
                    socks.popleft().close()
                due = max(due + 1.0 / self.rate, time.monotonic() - 1.0)
                self.halt.wait(max(0.0, due - time.monotonic()))
        finally:
            for s in socks:
                s.close()

    def stop(self) -> None:
        """Halt and close every connection."""
        self.halt.set()
        self.join()


@dataclass
class ScrapeLog:
    """A kept-alive scraper's record: one entry per scheduled scrape (slot)."""

    interval: float
    seconds: list[float] = field(default_factory=list)  # of the scrapes that answered 200
    slots: int = 0
    up: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)

    def up_ratio(self) -> float:
        """Prometheus' `up` averaged over the slots (a slot missed while a scrape ran is 0)."""
        return self.up / self.slots if self.slots else 0.0

    def p99(self) -> float:
        """The 99th percentile of the successful scrapes' durations (s); inf when none."""
        if len(self.seconds) < 2:
            return self.seconds[0] if self.seconds else float("inf")
        return statistics.quantiles(self.seconds, n=100)[-1]

    def median(self) -> float:
        """The median duration of the successful scrapes (s); inf when none."""
        return statistics.median(self.seconds) if self.seconds else float("inf")


class KeptAliveScraper:
    """GET `path` every `interval` s on one kept-alive connection, as Prometheus scrapes.

    A kept-alive connection the server closed while it was idle is retried once on a new one,
    as Go's HTTP client (Prometheus') retries an idempotent request. A scrape that takes longer
    than `timeout` is down; so is every slot that passed while it ran.
    """

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        path: str = "/metrics",
        interval: float = 1.0,
        timeout: float = 10.0,
    ) -> None:
        self.host, self.port, self.tls, self.path = host, port, tls, path
        self.interval, self.timeout = interval, timeout
        self.conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            if self.tls is not None:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self.tls
                )
            else:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self.conn

    def close(self) -> None:
        """Close the kept-alive connection."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def scrape(self, log: ScrapeLog | None = None) -> bool:
        """One GET, on the kept-alive connection when there is one; whether it answered 200."""
        start = time.monotonic()
        for attempt in (0, 1):
            reused = self.conn is not None and self.conn.sock is not None
            conn = self._connection()
            try:
                conn.request("GET", self.path)
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if reused and attempt == 0 and time.monotonic() - start < self.timeout:
                    if log is not None:
                        log.reconnects += 1
                    continue
                if log is not None:
                    log.errors.append(f"{type(exc).__name__}: {exc}")
                return False
            if resp.will_close:
                self.close()
            took = time.monotonic() - start
            ok = resp.status == 200 and took <= self.timeout
            if ok and log is not None:
                log.seconds.append(took)
            return ok
        return False

    def run(self, seconds: float) -> ScrapeLog:
        """Scrape every `interval` for `seconds`; the record."""
        log = ScrapeLog(self.interval)
        due = time.monotonic()
        end = due + seconds
        while due < end:
            ok = self.scrape(log)
            log.slots += 1
            log.up += ok
            due += self.interval
            now = time.monotonic()
            while due < min(now, end):  # slots that passed while the scrape ran: down
                log.slots += 1
                due += self.interval
            time.sleep(max(0.0, due - time.monotonic()))
        return log


def main() -> None:
    """A Flood in a process of its own until SIGTERM (bench/http_stall.py's attacker); its
    counts as JSON on stdout at the end."""
    import argparse
    import json
    import signal

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("port", type=int)
    ap.add_argument("attack", choices=sorted(HEADS))
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--hold", type=int, default=400)
    ap.add_argument("--cafile", help="HTTPS, trusting this certificate")
    a = ap.parse_args()
    tls = ssl.create_default_context(cafile=a.cafile) if a.cafile else None
    flood = Flood("127.0.0.1", a.port, HEADS[a.attack], a.rate, a.hold, tls)
    signal.signal(signal.SIGTERM, lambda *_: flood.halt.set())
    flood.run()
    print(json.dumps({"opened": flood.opened, "failed": flood.failed}), flush=True)


if __name__ == "__main__":
    main()
