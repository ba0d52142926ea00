"""The HTTP(S) endpoint: a tiny WSGI router on a threaded wsgiref server.

TLS, basic auth and extra response headers come from a `WebConfig` (exporter-toolkit's web
config format). Each connection is handled in its own daemon thread, and the TLS handshake
happens there too, so a slow, broken or hostile client never holds up `accept()`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import html
import logging
import re
import secrets
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Iterable
from typing import IO, Any, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import bcrypt

from collector.web.config import WebConfig

__all__ = ["Server", "WSGIApp", "landing_page", "start_server"]

WSGIApp = WSGIApplication

log = logging.getLogger(__name__)

REALM = "wattbit"
# Long enough for a slow scrape over a bad link, short enough that idle or stalled
# connections (each holding a thread) do not pile up for long.
_CONNECTION_TIMEOUT_S = 30.0
_HANDSHAKE_TIMEOUT_S = 10.0
_BCRYPT_COST_RE = re.compile(r"\$2[aby]\$(\d\d)\$")


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
        start_response(
            "200 OK",
            [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(page)))],
        )
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [page]

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


def _with_headers(app: WSGIApp, headers: dict[str, str]) -> WSGIApp:
    """Add the configured response headers to every response, unless the app set them."""
    # Blank values mean "unset" in exporter-toolkit's format.
    extra = [(k, v) for k, v in headers.items() if v]
    if not extra:
        return app

    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, response_headers: list[tuple[str, str]], *exc: Any) -> Any:
            present = {name.lower() for name, _ in response_headers}
            added = [(k, v) for k, v in extra if k.lower() not in present]
            return start_response(status, [*response_headers, *added], *exc)

        return app(environ, start)

    return wrapped


class _BasicAuth:
    """WSGI middleware requiring HTTP basic auth against bcrypt hashes."""

    def __init__(self, app: WSGIApp, users: dict[str, bytes]) -> None:
        """Wrap `app`, accepting the users in `users` (name -> bcrypt hash)."""
        self._app = app
        self._users = dict(users)
        # A random per-process HMAC key: the cache then holds nothing that could be
        # brute-forced offline from a memory dump, unlike a bare SHA-256 of the password.
        self._cache_key = secrets.token_bytes(32)
        # user -> HMAC-SHA-256 of "user:password" that bcrypt already accepted. One slot per
        # configured user keeps the cache bounded no matter how many passwords are tried
        # (bcrypt<5 accepts any suffix past byte 72, so "successful" passwords are unbounded).
        self._verified: dict[str, bytes] = {}
        self._cache_lock = threading.Lock()
        # bcrypt is deliberately CPU-heavy; serialising it (as exporter-toolkit does) stops a
        # flood of wrong passwords from occupying every core at once.
        self._bcrypt_lock = threading.Lock()
        # Unknown users are checked against a dummy hash of the same cost, so that response
        # time does not reveal which user names exist.
        cost = max((_hash_cost(h) for h in self._users.values()), default=4)
        self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))

    def _digest(self, user: bytes, password: bytes) -> bytes:
        """Cache key material for one (user, password) pair."""
        # Basic auth splits at the first ':', so a user name never contains one and
        # "user:password" is unambiguous.
        return hmac.new(self._cache_key, user + b":" + password, hashlib.sha256).digest()

    def check(self, header: str | None) -> bool:
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
        with self._cache_lock:
            cached = self._verified.get(user)
        if cached is not None and hmac.compare_digest(cached, digest):
            return True

        hashed = self._users.get(user)
        with self._bcrypt_lock:
            try:
                ok = bcrypt.checkpw(password, hashed if hashed is not None else self._dummy)
            except ValueError:
                ok = False  # e.g. bcrypt>=5 refuses passwords longer than 72 bytes
        if not ok or hashed is None:
            return False
        with self._cache_lock:
            self._verified[user] = digest
        return True

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Serve the wrapped app if authorised, else a 401 challenge."""
        if self.check(environ.get("HTTP_AUTHORIZATION")):
            return self._app(environ, start_response)
        return _text_response(
            start_response,
            "401 Unauthorized",
            "Unauthorized\n",
            [("WWW-Authenticate", f'Basic realm="{REALM}"')],
        )


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


class _ServerHandler(ServerHandler):
    """wsgiref's handler, logging app exceptions through `logging` rather than stderr."""

    def log_exception(self, exc_info: Any) -> None:
        """Log an exception raised by the application."""
        path = (getattr(self, "environ", None) or {}).get("PATH_INFO")
        log.error("error serving %s", path, exc_info=exc_info)


class _RequestHandler(WSGIRequestHandler):
    """One HTTP request per connection, quiet, with a socket timeout."""

    # StreamRequestHandler.setup() applies this to the connection.
    timeout = _CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Log requests at debug level only: a scrape every second would flood the log."""
        log.debug("%s - %s", self.address_string(), format % args)

    def address_string(self) -> str:
        """The client's IP address (never a reverse DNS lookup)."""
        return str(self.client_address[0])

    def get_stderr(self) -> Any:
        """Send wsgi.errors to logging."""
        return _LogStream()

    def handle(self) -> None:
        """Handle a single request (like wsgiref, but multithreaded and with our handler)."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        handler = _ServerHandler(
            self.rfile,
            cast("IO[bytes]", self.wfile),
            self.get_stderr(),
            self.get_environ(),
            multithread=True,
        )
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref's back-pointer
        handler.run(self.server.get_app())  # type: ignore[attr-defined]


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A wsgiref server with a thread per connection and TLS done in that thread."""

    daemon_threads = True
    # Do not join request threads on close: a stalled client must not block shutdown.
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[Any, ...],
        family: socket.AddressFamily,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        """Bind to `address` using `family`; wrap connections with `ssl_context` if set."""
        self.address_family = family
        self.ssl_context = ssl_context
        super().__init__(address, _RequestHandler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's socket.getfqdn(), a DNS lookup that can stall startup."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Run in the worker thread: do the TLS handshake, then serve the request."""
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            conn = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            # wrap_socket() closes the connection itself when the handshake fails.
            log.debug("TLS handshake with %s failed: %s", client_address[0], exc)
            return
        try:
            _RequestHandler(conn, client_address, self)
        finally:
            # The plain socket was detached into `conn`, so the caller's shutdown_request()
            # cannot close it; do it here.
            self.shutdown_request(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a failed connection instead of printing a traceback to stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("connection from %s ended: %s", client_address[0], exc)
        else:
            log.error("error handling connection from %s", client_address[0], exc_info=True)


class Server:
    """A running endpoint: where it listens, and how to stop it."""

    def __init__(self, httpd: _ThreadingWSGIServer, thread: threading.Thread, tls: bool) -> None:
        """Wrap a started server and the thread serving it."""
        self._httpd = httpd
        self._thread = thread
        self._stopped = False
        self._stop_lock = threading.Lock()
        self.host: str = str(httpd.server_address[0])
        self.port: int = int(httpd.server_address[1])
        self.tls = tls
        scheme = "https" if tls else "http"
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        self.url: str = f"{scheme}://{netloc}:{self.port}"

    def shutdown(self) -> None:
        """Stop accepting connections and close the listening socket (idempotent)."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __repr__(self) -> str:
        """Show where it listens."""
        return f"Server({self.url})"


def _resolve(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The address family and socket address to bind for `host` (IPv4, IPv6 or a name)."""
    host = host.strip("[]")  # accept "[::1]" as written in URLs
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def start_server(
    host: str, port: int, routes: dict[str, WSGIApp], web: WebConfig | None = None
) -> Server:
    """Bind `host:port` (0 = ephemeral) and serve `routes` in a daemon thread."""
    ssl_context = web.ssl_context() if web is not None else None
    app = _router(routes)
    if web is not None and web.basic_auth_users:
        users = {u: h.get_secret_value().encode() for u, h in web.basic_auth_users.items()}
        app = _BasicAuth(app, users)
    if web is not None:
        # Outermost, so 401 and 404 responses carry the headers too (as in exporter-toolkit).
        app = _with_headers(app, web.http_server_config.headers)

    family, sockaddr = _resolve(host, port)
    httpd = _ThreadingWSGIServer(sockaddr, family, ssl_context)
    httpd.set_app(app)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.2},
        name=f"wattbit-http-{httpd.server_address[1]}",
        daemon=True,
    )
    thread.start()
    server = Server(httpd, thread, tls=ssl_context is not None)
    log.info("listening on %s", server.url)
    return server
