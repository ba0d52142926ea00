"""The HTTP server's limits: what one client may hold or send (docs/http-server.md), and the
`http:` section of the daemons' configuration that sets them.

A module of its own, without aiohttp, so that loading a configuration does not import the
server.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator

from collector.config import Duration, Strict

__all__ = ["MAX_BODY_KEY", "HttpConfig", "Limits"]

# The WSGI environ key under which the server hands its apps Limits.max_body (an extension
# key, as PEP 3333 allows): past it the server leaves a body unread, and the app answers 413.
MAX_BODY_KEY = "wattbit.max_body"


@dataclass(frozen=True)
class Limits:
    """What one client may hold or send; the defaults suit a Prometheus scrape target."""

    # Open connections (TLS handshakes included). At the cap, a new connection evicts one
    # that waits for its client (handshake, headers, body, or idle; docs/http-server.md for
    # the order); if the server is at work for every one, accepting pauses. Also kept under
    # half the process's fd limit.
    max_connections: int = 256
    # From a request's first byte to its response's last: headers, body, handler, writing.
    request_timeout: float = 30.0
    # From a request's headers to the last byte of its body (only the run API reads one): a
    # body announced and not sent is answered 408 then, not waited for until request_timeout.
    body_timeout: float = 10.0
    # A connection with no request under way (before the first, between keep-alive ones).
    idle_timeout: float = 15.0
    tls_handshake_timeout: float = 10.0
    max_requests_per_connection: int = 1000
    # Request line, one header field, and header count (aiohttp's parser): at most
    # ~100 x 8 KiB, about Go net/http's 1 MB DefaultMaxHeaderBytes.
    max_line_size: int = 8190
    max_field_size: int = 8190
    max_headers: int = 100
    # All of a request's header bytes together (request line included), as nginx's 4 x 8 KiB
    # large_client_header_buffers: a scrape sends a few hundred; 100 fields of 8 KiB each would
    # let every connection hold ~800 KB (issue 34: 256 of them took the collector to 467 MB).
    max_header_bytes: int = 16 * 1024
    # Request bodies (only the run API takes one); beyond it the app answers 413.
    max_body: int = 64 * 1024
    # Threads running the WSGI apps (a /metrics collect, a run API write).
    workers: int = 8


_DEFAULT_LIMITS = Limits()
# The longest request, idle and TLS-handshake timeout: a scrape target has no business
# holding a connection longer, and a bigger number is more likely seconds meant as ms.
MAX_HTTP_TIMEOUT_S = 3600.0


class HttpConfig(Strict):
    """The HTTP server's limits (`http:`, docs/http-server.md); absent keys keep the defaults."""

    # Bounds: below the lower ones a Prometheus scrape (a request line, ~6 headers, basic
    # auth) or a run API write no longer fits; above the upper ones a limit stops limiting.
    max_connections: int = Field(default=_DEFAULT_LIMITS.max_connections, ge=1, le=65536)
    request_timeout: Duration = _DEFAULT_LIMITS.request_timeout
    body_timeout: Duration = _DEFAULT_LIMITS.body_timeout
    idle_timeout: Duration = _DEFAULT_LIMITS.idle_timeout
    tls_handshake_timeout: Duration = _DEFAULT_LIMITS.tls_handshake_timeout
    max_requests_per_connection: int = Field(
        default=_DEFAULT_LIMITS.max_requests_per_connection, ge=1, le=1_000_000
    )
    max_line_size: int = Field(default=_DEFAULT_LIMITS.max_line_size, ge=256, le=65536)
    max_field_size: int = Field(default=_DEFAULT_LIMITS.max_field_size, ge=256, le=65536)
    max_headers: int = Field(default=_DEFAULT_LIMITS.max_headers, ge=8, le=1000)
    max_header_bytes: int = Field(default=_DEFAULT_LIMITS.max_header_bytes, ge=1024, le=1 << 20)
    # The run API refuses a body over 64 KiB itself: a larger max_body would not be one.
    max_body: int = Field(default=_DEFAULT_LIMITS.max_body, ge=1024, le=64 * 1024)
    workers: int = Field(default=_DEFAULT_LIMITS.workers, ge=1, le=64)

    @field_validator("request_timeout", "body_timeout", "idle_timeout", "tls_handshake_timeout")
    @classmethod
    def _timeout(cls, v: float) -> float:
        if v > MAX_HTTP_TIMEOUT_S:
            raise ValueError("must be at most 1h")
        return v

    def limits(self) -> Limits:
        """These settings as the server takes them."""
        return Limits(**self.model_dump())
