"""The HTTP(S) endpoint of agent and collector: aiohttp's HTTP/1.1 server on its own asyncio loop.

Routes are WSGI apps (/metrics, the landing page, the run API), called in a small thread pool
so that a slow collect never blocks the loop. Around them this module adds what a server
facing untrusted networks needs (docs/http-server.md): a cap on open connections that
evicts a connection waiting for its client (stalled ones before a kept-alive scraper's), a
deadline for each whole request and for a body, idle (keep-alive) and TLS-handshake
timeouts, a limit on requests per connection, header line/size/count limits (aiohttp's
parser) and on all header bytes, bounded request bodies, and basic auth with bcrypt checks in a
bounded pool plus a short-lived cache of successful logins. TLS and basic auth come from a
`WebConfig` (exporter-toolkit's web config format).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import contextlib
import ctypes
import errno
import functools
import gc
import hashlib
import hmac
import html
import io
import logging
import os
import re
import resource
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from collector.web import aiohttp_server
from collector.web.limits import MAX_BODY_KEY, Limits

if TYPE_CHECKING:
    import ssl

    from aiohttp import web_protocol, web_server
    from aiohttp.http_exceptions import HttpProcessingError
    from aiohttp.web_request import BaseRequest
    from aiohttp.web_response import Response, StreamResponse

    # a type here: its module (pydantic models) is loaded only where a web config is given
    from collector.web.config import WebConfig
else:  # without aiohttp's client (aiohttp_server.py)
    web_protocol, web_server, _exc, _request, _response = aiohttp_server.load()
    HttpProcessingError = _exc.HttpProcessingError
    BaseRequest = _request.BaseRequest
    Response, StreamResponse = _response.Response, _response.StreamResponse

__all__ = ["BCRYPT_CONCURRENCY", "Limits", "Server", "WSGIApp", "landing_page", "start_server"]

WSGIApp = WSGIApplication

log = logging.getLogger(__name__)


REALM = "wattbit"
_BCRYPT_COST_RE = re.compile(r"\$2[aby]\$(\d\d)\$")
# bcrypt reads at most 72 bytes of a password. Go's CompareHashAndPassword (hence
# node_exporter) ignores the rest; Python's bcrypt>=5 raises instead. Truncating here
# gives exporter-toolkit's behaviour.
BCRYPT_MAX_PASSWORD = 72
# bcrypt checks running at once: enough that one real login is not queued behind a single
# attacker, few enough that a flood of wrong passwords cannot occupy every core.
BCRYPT_CONCURRENCY = max(2, min(4, os.cpu_count() or 1))
# How long a successful (user, password) is remembered, so that scrapes skip bcrypt.
AUTH_CACHE_TTL_S = 60.0
# Wrong-password attempts pending bcrypt beyond which further ones are refused at once.
_BCRYPT_QUEUE = 64


def _text_response(
    start_response: StartResponse,
    status: str,
    body: str,
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    """Send a short plain-text response."""
    data = body.encode("utf-8")
    headers = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(data))),
        *(extra or []),
    ]
    start_response(status, headers)
    return [data]


def method_not_allowed(start_response: StartResponse) -> list[bytes]:
    """405 for anything but GET and HEAD (on /metrics and the landing page)."""
    return _text_response(
        start_response,
        "405 Method Not Allowed",
        "405 Method Not Allowed\n",
        [("Allow", "GET, HEAD")],
    )


def landing_page(title: str, links: list[str]) -> WSGIApp:
    """Return a WSGI app serving a tiny HTML page that links to `links` (e.g. /metrics)."""
    safe_title = html.escape(title)
    items = "".join(
        f'<li><a href="{html.escape(link, quote=True)}">{html.escape(link)}</a></li>'
        for link in links
    )
    page = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{safe_title}</title></head>\n"
        f"<body><h1>{safe_title}</h1><ul>{items}</ul></body></html>\n"
    ).encode()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD"):
            return method_not_allowed(start_response)
        start_response(
            "200 OK",
            [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(page)))],
        )
        return [] if method == "HEAD" else [page]

    return app


def _router(routes: dict[str, WSGIApp]) -> WSGIApp:
    """Dispatch on the exact request path; anything else is a 404.

    A key ending in "/*" (e.g. "/api/v1/runs/*") is a prefix route: it serves every path
    under it ("/api/v1/runs/x/stop") that has no exact route; the longest prefix wins. The
    app sees the full PATH_INFO.
    """
    table = {k: v for k, v in routes.items() if not k.endswith("/*")}  # a copy: no races
    prefixes = sorted(
        ((k[:-1], v) for k, v in routes.items() if k.endswith("/*")),
        key=lambda kv: len(kv[0]),
        reverse=True,
    )

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        target = table.get(path)
        if target is None:
            target = next((v for prefix, v in prefixes if path.startswith(prefix)), None)
        if target is None:
            return _text_response(start_response, "404 Not Found", "404 Not Found\n")
        return target(environ, start_response)

    return app


class _BasicAuth:
    """HTTP basic auth against bcrypt hashes: bounded bcrypt concurrency, cached successes."""

    def __init__(
        self,
        users: dict[str, bytes],
        pool: concurrent.futures.Executor,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = AUTH_CACHE_TTL_S,
    ) -> None:
        """Accept the users in `users` (name -> bcrypt hash); bcrypt runs in `pool`."""
        self._users = dict(users)
        self._pool = pool
        self._clock = clock
        self._ttl = ttl
        # A random per-process HMAC key: the cache then holds nothing that could be
        # brute-forced offline from a memory dump, unlike a bare SHA-256 of the password.
        self._cache_key = secrets.token_bytes(32)
        # user -> (HMAC-SHA-256 of "user:password" that bcrypt accepted, expiry). One slot per
        # configured user keeps the cache bounded however many passwords are tried.
        self._verified: dict[str, tuple[bytes, float]] = {}
        self._pending = 0  # checks queued or running in `pool` (loop thread only)
        # Unknown users are checked against a dummy hash of the same cost, so that response
        # time does not reveal which user names exist.
        cost = max((_hash_cost(h) for h in self._users.values()), default=4)
        # Imported here, when basic auth is configured: a server without it never loads
        # bcrypt (~0.4 MB RSS, issue #35).
        import bcrypt

        self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))

    def _digest(self, user: bytes, password: bytes) -> bytes:
        """Cache key material for one (user, password) pair."""
        # Basic auth splits at the first ':', so a user name never contains one.
        return hmac.new(self._cache_key, user + b":" + password, hashlib.sha256).digest()

    @staticmethod
    def _bcrypt(password: bytes, hashed: bytes) -> bool:
        import bcrypt  # loaded by __init__ already: a dict lookup

        try:
            return bool(bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD], hashed))
        except ValueError:
            return False

    async def check(self, header: str | None) -> bool:
        """Whether an Authorization header carries a valid user and password."""
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user_b, password = credentials
        try:
            user = user_b.decode("utf-8")
        except UnicodeDecodeError:
            return False
        digest = self._digest(user_b, password)
        now = self._clock()
        cached = self._verified.get(user)
        if cached is not None and now < cached[1] and hmac.compare_digest(cached[0], digest):
            return True
        if self._pending >= _BCRYPT_QUEUE:
            return False  # a flood: refuse without queueing more CPU work
        hashed = self._users.get(user)
        self._pending += 1
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(
                self._pool, self._bcrypt, password, hashed if hashed is not None else self._dummy
            )
        finally:
            self._pending -= 1
        if not ok or hashed is None:
            return False
        self._verified[user] = (digest, self._clock() + self._ttl)
        return True


def _hash_cost(hashed: bytes) -> int:
    """The cost factor of a bcrypt hash (validated by webconfig)."""
    match = _BCRYPT_COST_RE.match(hashed.decode("ascii", "replace"))
    return int(match.group(1)) if match else 10


def _parse_basic(header: str | None) -> tuple[bytes, bytes] | None:
    """Split a `Basic` Authorization header into (user, password) bytes."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user, password


class _LogStream:
    """A file-like `wsgi.errors` stream that goes to logging instead of stderr."""

    def write(self, text: str) -> int:
        """Log one chunk of error text."""
        if text.strip():
            log.warning("wsgi: %s", text.rstrip())
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        """Log several chunks of error text."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Nothing is buffered."""


class _Gate:
    """The connection cap, counted from accept() (TLS handshakes included).

    At the cap, a new connection evicts one that waits for its client rather than for the
    server (`_Connection.eviction_key`), so stalled clients cannot lock out a real scrape. If
    the server is at work for every connection, accepting pauses until one ends.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.conns: dict[_Connection, None] = {}
        self.on_release: Callable[[], None] = lambda: None
        self.reclaim: Callable[[], None] = lambda: None  # give back a dropped client's memory

    def admit(self, conn: _Connection) -> bool:
        """Count `conn` in, evicting the one waiting for its client that goes first at the cap."""
        if len(self.conns) >= self.cap:
            waiting = (c for c in self.conns if not c.busy)
            victim = min(waiting, key=lambda c: c.eviction_key(), default=None)
            if victim is None:
                return False
            self.release(victim)
            victim.evict()
        self.conns[conn] = None
        return True

    def full(self) -> bool:
        """Whether no connection could be admitted now."""
        return len(self.conns) >= self.cap and all(c.busy for c in self.conns)

    def release(self, conn: _Connection) -> None:
        """Count `conn` out (idempotent)."""
        if self.conns.pop(conn, 0) is None:
            self.on_release()


class _Connection(web_protocol.RequestHandler):
    """aiohttp's connection handler plus the connection cap and the whole-request deadline."""

    def __init__(
        self,
        manager: web_server.Server,
        *,
        gate: _Gate,
        limits: Limits,
        headers: Sequence[tuple[str, str]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate
        self._limits = limits
        self._extra = headers  # the configured response headers (web config)
        self._admitted = False
        self._evicted = False
        self.sock: socket.socket | None = None  # the accepted socket, until connection_made
        self._deadline: asyncio.TimerHandle | None = None
        self.served = 0
        # The server is at work for it (a bcrypt check, the route running): never evicted.
        # Waiting for the client (its headers, its body, reading the answer) is not busy.
        self.busy = False
        self.since = self._loop.time()  # accepted, or its request's start, or its answer's end
        self._head_bytes = 0  # of the request whose headers are still coming
        self._body: Any = None  # the body (aiohttp StreamReader) of the last request parsed
        # A TLS connection not yet through its handshake. Not "no transport yet": a plain
        # connection has none either until asyncio runs connection_made, a tick after
        # accept(), and preferring those evicted newer stalled clients before older ones.
        self.handshaking = False
        self.rejected_requests = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._evicted:
            cast("asyncio.Transport", transport).abort()
            return
        self._admitted = True
        self.handshaking = False
        self.sock = None
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._gate.release(self)
        self._disarm()
        if self._head_bytes > _RECLAIM_HEAD_BYTES:
            self._gate.reclaim()  # the parser's partial headers: freed, and given back
        if self._admitted:
            super().connection_lost(exc)

    def eviction_key(self) -> tuple[int, float]:
        """Order of eviction at the cap, lowest first, for a connection that is not busy.

        First those still in their TLS handshake (the cheapest to drop, and where a flood of
        stalled clients sits) or about to close anyway; then those in the middle of a request
        the client has not finished (headers or a body still to come, an answer not yet read)
        or that have sent nothing yet, the longest waiting first; last those idle between
        requests after a complete one, the longest idle first. A scraper's kept-alive
        connection is of the last kind, so it goes after every stalled client (bench/soak/:
        1,000 stalled TLS clients a round had it evicted before 454 of 810 scrapes; issue 34:
        requests announcing a body that never came counted as busy and locked scrapers out).
        """
        if self.handshaking or self._force_close or self._close or not self._keepalive:
            return (0, self.since)
        if self._deadline is not None or self.served == 0:
            return (1, self.since)
        return (2, self.since)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """Log a server fault with its traceback; a client's malformed request in one line.

        aiohttp logs every request it cannot parse (too many headers, a line too long, bytes
        that are no HTTP) with a traceback at ERROR: anyone who can connect could fill the log.
        Those are the client's faults, answered with a 4xx already; a server-side exception
        still gets its traceback.
        """
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self.rejected_requests += 1
            log.debug("rejected a malformed request from %s: %s", self._peer(), exc.message)
            return
        super().log_exception(*args, **kw)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        """aiohttp's answer to a request it could not parse (a line too long, too many
        headers), with the configured headers as on every other answer (issue 34)."""
        resp = super().handle_error(request, status, exc, message)
        for name, value in self._extra:
            resp.headers.setdefault(name, value)
        return resp

    def data_received(self, data: bytes) -> None:
        if data and self._deadline is None:
            self._arm()  # the first byte of a request starts its deadline
        in_head = self._body is None or self._body.is_eof()
        if in_head and data:
            # aiohttp bounds each header line and their number, not their sum: 100 lines of
            # 8 KiB were held per connection (issue 34). Counted before the parser sees them,
            # up to the head's end where this read has it, so that a head arriving whole in
            # one read is bounded as one arriving slowly is.
            end = data.find(b"\r\n\r\n")
            if self._head_bytes + (len(data) if end < 0 else end + 4) > (
                self._limits.max_header_bytes
            ):
                self._refuse_head()
                return
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:  # headers complete: what follows is a body
            self._head_bytes = 0
            self._body = self._messages[-1][1] if self._messages else None
        elif in_head and data:
            self._head_bytes += len(data)

    def _refuse_head(self) -> None:
        self.rejected_requests += 1
        log.debug(
            "request from %s: headers over %d bytes, refused",
            self._peer(),
            self._limits.max_header_bytes,
        )
        if self.transport is not None:
            self.transport.write(headers_too_large(self._extra))
        self.force_close()  # closes the transport once the answer is written
        self._gate.reclaim()

    def _arm(self) -> None:
        self.since = self._loop.time()
        self._deadline = self._loop.call_later(self._limits.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        log.debug(
            "request from %s past its %gs deadline: closed",
            self._peer(),
            self._limits.request_timeout,
        )
        self.evict()

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return str(peer[0]) if peer else "?"

    def evict(self) -> None:
        """Close the connection now, unsent data and all."""
        self._evicted = True
        self._gate.release(self)
        transport = self.transport
        if transport is not None:
            # abort() first: asyncio's TLS transport drops its protocol on a second close()
            # (CPython Lib/asyncio/sslproto.py, _SSLProtocolTransport.close), after which
            # abort() raises AttributeError; aiohttp has closed it once already when the
            # connection was ending (an answer with Connection: close, lingering), which is
            # where eviction now looks first.
            with contextlib.suppress(AttributeError):
                transport.abort()
            self.force_close()
        elif self.sock is not None:
            # Still in its TLS handshake: make the handshake fail at once; asyncio then
            # closes the socket it is watching.
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

    async def finish_response(
        self, request: BaseRequest, resp: StreamResponse, start_time: float | None
    ) -> tuple[StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.busy = False
            self.served += 1
            self.since = self._loop.time()
            self._disarm()
            if self._messages and not self._evicted:
                self._arm()  # a pipelined request is already waiting


class _Handler:
    """The request handler: auth, routing, body, and the WSGI app in the thread pool."""

    def __init__(
        self,
        app: WSGIApp,
        auth: _BasicAuth | None,
        headers: dict[str, str],
        limits: Limits,
        pool: concurrent.futures.Executor,
        scheme: str,
    ) -> None:
        self._app = app
        self._auth = auth
        # Blank values mean "unset" in exporter-toolkit's format.
        self.headers = [(k, v) for k, v in headers.items() if v]
        self._limits = limits
        self._pool = pool
        self._scheme = scheme

    async def __call__(self, request: BaseRequest) -> StreamResponse:
        conn = request.protocol
        resp = await self._respond(request, conn if isinstance(conn, _Connection) else None)
        # Configured headers on every response, 401 and 404 included (as exporter-toolkit).
        for name, value in self.headers:
            resp.headers.setdefault(name, value)
        if (
            isinstance(conn, _Connection)
            and conn.served + 1 >= self._limits.max_requests_per_connection
        ) or not request.content.is_eof():
            # A body left unread (a 401, a GET's, one past max_body) would have to be read to
            # find the next request: the connection ends with this answer instead.
            resp.force_close()
        return resp

    async def _respond(self, request: BaseRequest, conn: _Connection | None) -> StreamResponse:
        # No route reads the body of a GET or HEAD (RFC 9110 9.3.1: it has no meaning). One
        # still to come is not waited for, nor worth a route's work: a flood of them would
        # cost a /metrics render each (issue 34). One already in whole is ignored.
        if request.method in ("GET", "HEAD") and not request.content.is_eof():
            return Response(status=400, text="400 Bad Request: a GET or HEAD takes no body\n")
        if self._auth is not None:
            with _working(conn):
                ok = await self._auth.check(request.headers.get("Authorization"))
            if not ok:
                return Response(
                    status=401,
                    text="Unauthorized\n",
                    headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
                )
        environ = self._environ(request)
        if request.body_exists and request.method not in ("GET", "HEAD"):
            length = request.content_length
            if length is not None and length > self._limits.max_body:
                environ["CONTENT_LENGTH"] = str(length)  # the app answers 413
            else:
                # Waiting for the client: not busy, so the cap may evict it (issue 34).
                try:
                    async with asyncio.timeout(self._limits.body_timeout):
                        body, size = await self._read_body(request)
                except TimeoutError:
                    return Response(status=408, text="408 Request Timeout: no body\n")
                except ConnectionError:  # evicted, or the client left: nobody reads this
                    return Response(status=400, text="400 Bad Request\n")
                environ["CONTENT_LENGTH"] = str(size)
                environ["wsgi.input"] = io.BytesIO(body)
        loop = asyncio.get_running_loop()
        with _working(conn):
            status, headers, data = await loop.run_in_executor(self._pool, self._call, environ)
        code, _, reason = status.partition(" ")
        resp = Response(status=int(code), reason=reason or None, body=data)
        for name, value in headers:
            if name.lower() != "content-length":  # aiohttp sets it from the body
                resp.headers.add(name, value)
        return resp

    async def _read_body(self, request: BaseRequest) -> tuple[bytes, int]:
        """The body, or (b"", size) once it passes max_body (the app then answers 413)."""
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > self._limits.max_body:
                return b"", size
            chunks.append(chunk)
        return b"".join(chunks), size

    def _environ(self, request: BaseRequest) -> dict[str, Any]:
        host, port = "", 0
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if sockname:
            host, port = str(sockname[0]), int(sockname[1])
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "SERVER_NAME": host,
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": f"HTTP/{request.version.major}.{request.version.minor}",
            "REMOTE_ADDR": request.remote or "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": self._scheme,
            "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": _LogStream(),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            # Past it the body is left unread (wsgi.input empty): the app answers 413 by it.
            MAX_BODY_KEY: self._limits.max_body,
        }
        for name, value in request.headers.items():
            key = name.upper()
            if "_" in key:
                continue  # X_Token must not pass for X-Token (nginx drops these by default too)
            key = key.replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value
                continue
            key = "HTTP_" + key
            environ[key] = f"{environ[key]},{value}" if key in environ else value
        return environ

    def _call(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """Run the WSGI app (in a pool thread): status, headers, body."""
        got: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            got[:] = [(status, list(headers))]
            return lambda data: None

        try:
            result = self._app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:
            log.exception("error serving %s", environ.get("PATH_INFO"))
            return "500 Internal Server Error", [("Content-Type", "text/plain")], b"500\n"
        if not got:
            log.error("%s: the app sent no status", environ.get("PATH_INFO"))
            return "500 Internal Server Error", [("Content-Type", "text/plain")], b"500\n"
        status, headers = got[0]
        return status, headers, body


@contextlib.contextmanager
def _working(conn: _Connection | None) -> Iterator[None]:
    """Mark `conn` busy (the server, not the client, is what it waits for) for the block."""
    if conn is None:
        yield
        return
    conn.busy = True
    try:
        yield
    finally:
        conn.busy = False


def headers_too_large(headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """Sent, then the connection closed, when a request's headers pass max_header_bytes.

    Written on the transport before aiohttp has a request (the parser never finished one), so
    the configured headers are added here (their values have no CR or LF: web config).
    """
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 36\r\n"
        f"{extra}Connection: close\r\n\r\n431 Request Header Fields Too Large\n"
    ).encode("latin-1")


# A connection closed with more partial header bytes than this has the memory reclaimed.
_RECLAIM_HEAD_BYTES = 4096


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Clients that vanish mid-handshake or mid-request are routine: debug, not error."""
    exc = context.get("exception")
    ssl = sys.modules.get("ssl")
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
        ssl is not None and isinstance(exc, ssl.SSLError)
    ):
        log.debug("%s: %s", context.get("message"), exc)
    else:
        loop.default_exception_handler(context)


def _same(conn: _Connection) -> _Connection:
    """A protocol factory returning the protocol made (and admitted) at accept time."""
    return conn


# asyncio's SSLProtocol reads into a buffer of its own of max_size bytes, allocated with the
# protocol: 256 KiB a connection (CPython 3.11-3.13 Lib/asyncio/sslproto.py). A TLS record is
# at most 16 KiB + 256 of ciphertext, and our requests are small: 32 KiB reads the same data
# in more, smaller reads, for an eighth of the memory per connection (bench/tls_stall.py:
# stalled whole ClientHellos, 1,000 a round, ~160 -> ~100 MB).
SSL_READ_BUFFER = 32 * 1024


class _Reclaimer:
    """Give back the memory of failed TLS handshakes, at most once every `every` seconds.

    A handshake that fails leaves its SSLProtocol, transport and OpenSSL object in reference
    cycles (through the exception's traceback) that only the cyclic collector frees, and
    Python's collector reaches them late (generation 2): 1,000 stalled clients a round piled
    them up to 240 MB. A collection after failures frees them; malloc_trim(0) then returns
    the freed pages that glibc keeps (a fragmented heap is never trimmed at its top).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, every: float = 2.0) -> None:
        self._loop = loop
        self._every = every
        self._pending: asyncio.TimerHandle | None = None
        self.runs = 0
        try:
            self._trim: Callable[[int], int] | None = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            self._trim = None

    def soon(self) -> None:
        """Reclaim in `every` seconds, unless already due: a burst of failures costs one run."""
        if self._pending is None:
            self._pending = self._loop.call_later(self._every, self._run)

    def cancel(self) -> None:
        """Forget a pending run (the server is stopping)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _run(self) -> None:
        self._pending = None
        self.runs += 1
        gc.collect()
        if self._trim is not None:
            self._trim(0)


class _Hello:
    """A TLS connection until its first record (the ClientHello) has arrived whole.

    asyncio gives every TLS connection an SSLProtocol at once: a 256 KiB read buffer
    (sslproto.SSLProtocol.max_size) plus OpenSSL's state. Clients that send 6 bytes of a
    ClientHello and stop, a thousand at a time, round after round, took the agent from 51 MB
    to 650-785 MB, never given back (issue 26): the cap bounded the connections, not what
    each had allocated before it was evicted. Until a whole first record is in the kernel's
    buffer, a connection here costs its socket alone; SO_RCVLOWAT keeps epoll from waking the
    loop before then (Linux >= 2.6.28, socket(7)), so a dribbling client costs no CPU either.
    The handshake timeout runs from accept(): waiting here counts against it.
    """

    _HEADER = 5  # content type, record version (2), length (2): RFC 8446 section 5.1
    _MAX_RECORD = 2**14 + 256  # a TLSPlaintext fragment may not exceed 2^14 (+ slack)
    _HANDSHAKE = 0x16

    def __init__(
        self, acceptor: _Acceptor, conn: _Connection, sock: socket.socket, timeout: float
    ) -> None:
        self._acceptor = acceptor
        self._loop = acceptor._loop
        self._conn = conn
        self._sock = sock
        self._fd = sock.fileno()
        self._start = time.monotonic()
        self._timeout = timeout
        self._want = self._HEADER
        self._timer: asyncio.TimerHandle | None = None

    def wait(self) -> None:
        """Wait (without reading) for the first record; then hand the socket to asyncio."""
        self._lowat(self._want)
        self._loop.add_reader(self._fd, self._readable)
        self._timer = self._loop.call_later(self._timeout, self._give_up)

    def _lowat(self, n: int) -> None:
        with contextlib.suppress(OSError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)

    def _readable(self) -> None:
        try:
            head = self._sock.recv(self._want, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close()
            return
        if len(head) < self._want:  # readable with less than asked: EOF, or evicted
            self._close()
            return
        if self._want == self._HEADER:
            length = int.from_bytes(head[3:5], "big")
            if head[0] != self._HANDSHAKE or length > self._MAX_RECORD:
                self._close()  # not TLS (plain HTTP to the HTTPS port, say): nothing to do
                return
            self._want = self._HEADER + length
            self._lowat(self._want)
            return  # woken again when the whole record is there
        self._done()
        self._lowat(1)
        left = max(0.001, self._timeout - (time.monotonic() - self._start))
        self._acceptor._connect(self._conn, self._sock, left)

    def _done(self) -> None:
        self._acceptor._hellos.discard(self)
        self._loop.remove_reader(self._fd)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _give_up(self) -> None:
        self._timer = None
        log.debug("no TLS ClientHello within %gs: closed", self._timeout)
        self._close()

    def close(self) -> None:
        """Close the connection (it never reached asyncio)."""
        self._close()

    def _close(self) -> None:
        self._done()
        self._acceptor._reclaim.soon()  # its _Connection (aiohttp's handler) is in cycles too
        self._acceptor._gate.release(self._conn)
        self._conn.sock = None
        self._sock.close()


class _Acceptor:
    """accept() on the listening socket, admitting each connection through the gate.

    Our own loop rather than loop.create_server(): asyncio accepts a whole backlog before
    any protocol sees a connection, so a cap enforced there comes too late to keep the
    process within its fd limit.
    """

    _BATCH = 16  # accepts per readiness event, so the loop also serves the open ones
    _RETRY_S = 1.0  # after EMFILE and the like

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        gate: _Gate,
        factory: Callable[[], _Connection],
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._gate = gate
        self._factory = factory
        self._ssl = ssl_context
        self._handshake_timeout = handshake_timeout
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._last_warning = -float("inf")
        self._tasks: set[asyncio.Task[Any]] = set()
        self._hellos: set[_Hello] = set()  # TLS connections waiting for their ClientHello
        self._reclaim = _Reclaimer(loop)
        gate.on_release = self._resume
        gate.reclaim = self._reclaim.soon

    def start(self) -> None:
        self._resume()

    def _resume(self) -> None:
        if not self._reading and not self._closed and self._retry is None:
            self._loop.add_reader(self._sock.fileno(), self._accept)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False

    def _retry_later(self) -> None:
        self._pause()

        def again() -> None:
            self._retry = None
            self._resume()

        self._retry = self._loop.call_later(self._RETRY_S, again)

    def _accept(self) -> None:
        for _ in range(self._BATCH):
            if self._gate.full():
                self._pause()  # resumed when a connection ends
                return
            try:
                sock, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    now = time.monotonic()
                    if now - self._last_warning > 60:
                        self._last_warning = now
                        log.warning("accept(): %s; pausing for %gs", exc.strerror, self._RETRY_S)
                    self._retry_later()
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                raise
            sock.setblocking(False)
            conn = self._factory()
            conn.sock = sock
            conn.handshaking = self._ssl is not None
            self._gate.admit(conn)
            if self._ssl is None:
                self._connect(conn, sock, None)
            else:
                hello = _Hello(self, conn, sock, self._handshake_timeout)
                self._hellos.add(hello)
                hello.wait()

    def _connect(self, conn: _Connection, sock: socket.socket, handshake: float | None) -> None:
        """Hand the socket to asyncio (which does the TLS handshake, if any, in `handshake` s)."""
        task = self._loop.create_task(
            self._loop.connect_accepted_socket(
                functools.partial(_same, conn),
                sock,
                ssl=self._ssl,
                ssl_handshake_timeout=handshake,
            )
        )
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._connected, conn=conn))

    def _connected(self, task: asyncio.Task[Any], conn: _Connection) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            # A failed TLS handshake: the protocol never saw the connection.
            exc = None if task.cancelled() else task.exception()
            log.debug("connection failed before it was made: %s", exc)
            self._reclaim.soon()
            self._gate.release(conn)
            if conn.sock is not None:
                conn.sock.close()
                conn.sock = None

    async def close(self) -> None:
        self._closed = True
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._sock.close()
        self._reclaim.cancel()
        for hello in list(self._hellos):
            hello.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class Server:
    """A running endpoint: where it listens, and how to stop it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        acceptor: _Acceptor,
        manager: web_server.Server,
        gate: _Gate,
        pools: list[concurrent.futures.ThreadPoolExecutor],
        sockname: tuple[Any, ...],
        tls: bool,
    ) -> None:
        """Wrap a started server; its loop is run by a daemon thread started here."""
        self._loop = loop
        self._acceptor = acceptor
        self._manager = manager
        self._gate = gate
        self._pools = pools
        self._stopped = False
        self._stop_lock = threading.Lock()
        self.host: str = str(sockname[0])
        self.port: int = int(sockname[1])
        self.tls = tls
        scheme = "https" if tls else "http"
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        self.url: str = f"{scheme}://{netloc}:{self.port}"
        self._thread = threading.Thread(
            target=self._run, name=f"wattbit-http-{self.port}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def open_connections(self) -> int:
        """Connections open now (after their TLS handshake)."""
        return len(self._gate.conns)

    async def _close(self, grace: float) -> None:
        await self._acceptor.close()
        # Requests under way may finish (a run API write completes its commit); stalled
        # ones are cut at `grace`.
        await self._manager.shutdown(grace)
        for conn in list(self._gate.conns):
            conn.evict()
        await asyncio.sleep(0)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting, finish or cut requests under way, close every socket (idempotent)."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        if self._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._close(grace), self._loop)
            try:
                future.result(timeout=grace + 5)
            except Exception:
                log.warning("HTTP server did not close cleanly", exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        """Show where it listens."""
        return f"Server({self.url})"


def _listen_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket for `host` (IPv4, IPv6 or a name; "" = every address) and port."""
    host = host.strip("[]")  # accept "[::1]" as written in URLs
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _connection_cap(configured: int) -> int:
    """The cap, kept under half the fd limit so that accept() never runs out of fds."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // 2:
        return configured
    cap = max(8, soft // 2)
    log.info("connection cap %d lowered to %d: half the open-file limit %d", configured, cap, soft)
    return cap


def start_server(
    host: str,
    port: int,
    routes: dict[str, WSGIApp],
    web: WebConfig | None = None,
    limits: Limits | None = None,
) -> Server:
    """Bind `host:port` (0 = ephemeral) and serve `routes` on an asyncio loop in a daemon thread.

    Raises OSError when the address cannot be bound.
    """
    limits = limits or Limits()
    ssl_context = web.ssl_context() if web is not None else None
    if ssl_context is not None:  # the process's asyncio TLS: this server's, and clients'
        from asyncio import sslproto

        sslproto.SSLProtocol.max_size = SSL_READ_BUFFER
    pool = concurrent.futures.ThreadPoolExecutor(limits.workers, thread_name_prefix="wattbit-http")
    pools = [pool]
    auth = None
    if web is not None and web.basic_auth_users:
        bcrypt_pool = concurrent.futures.ThreadPoolExecutor(
            BCRYPT_CONCURRENCY, thread_name_prefix="wattbit-bcrypt"
        )
        pools.append(bcrypt_pool)
        users = {u: h.get_secret_value().encode() for u, h in web.basic_auth_users.items()}
        auth = _BasicAuth(users, bcrypt_pool)
    headers = web.http_server_config.headers if web is not None else {}
    handler = _Handler(
        _router(routes), auth, headers, limits, pool, "https" if ssl_context else "http"
    )

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_exception_handler)
    try:
        sock = _listen_socket(host, port, backlog=128)
        gate = _Gate(_connection_cap(limits.max_connections))

        async def start() -> tuple[web_server.Server, _Acceptor]:
            kwargs: dict[str, Any] = {
                "keepalive_timeout": limits.idle_timeout,
                "max_line_size": limits.max_line_size,
                "max_field_size": limits.max_field_size,
                "max_headers": limits.max_headers,
                # After a 413, read and drop what the client still sends, briefly, so that
                # it sees the answer rather than a reset.
                "lingering_time": 2.0,
                "access_log": None,
            }
            manager = web_server.Server(handler, loop=loop, **kwargs)

            def factory() -> _Connection:
                return _Connection(
                    manager, gate=gate, limits=limits, headers=handler.headers, loop=loop, **kwargs
                )

            acceptor = _Acceptor(
                loop, sock, gate, factory, ssl_context, limits.tls_handshake_timeout
            )
            acceptor.start()
            return manager, acceptor

        manager, acceptor = loop.run_until_complete(start())
    except BaseException:
        loop.close()
        for p in pools:
            p.shutdown(wait=False)
        raise
    server = Server(
        loop, acceptor, manager, gate, pools, sock.getsockname(), ssl_context is not None
    )
    log.info("listening on %s", server.url)
    return server
