"""The HTTP server's limits: what one client may hold or send (docs/http-server.md).

A module of its own, without aiohttp, so that the configuration loader (collector/config.py,
the `http:` section) takes its defaults from here without importing the server.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_BODY_KEY", "Limits"]

# The WSGI environ key under which the server hands its apps Limits.max_body (an extension
# key, as PEP 3333 allows): past it the server leaves a body unread, and the app answers 413.
MAX_BODY_KEY = "wattbit.max_body"


@dataclass(frozen=True)
class Limits:
    """What one client may hold or send; the defaults suit a Prometheus scrape target."""

    # Open connections (after the TLS handshake). At the cap, a new connection evicts the
    # oldest one with no request in progress (idle, or still sending its headers); if every
    # one is busy, the new one is closed. Also kept under half the process's fd limit.
    max_connections: int = 256
    # From a request's first byte to its response's last: headers, body, handler, writing.
    request_timeout: float = 30.0
    # A connection with no request under way (before the first, between keep-alive ones).
    idle_timeout: float = 15.0
    tls_handshake_timeout: float = 10.0
    max_requests_per_connection: int = 1000
    # Request line, one header field, and header count (aiohttp's parser): at most
    # ~100 x 8 KiB, about Go net/http's 1 MB DefaultMaxHeaderBytes.
    max_line_size: int = 8190
    max_field_size: int = 8190
    max_headers: int = 100
    # Request bodies (only the run API takes one); beyond it the app answers 413.
    max_body: int = 64 * 1024
    # Threads running the WSGI apps (a /metrics collect, a run API write).
    workers: int = 8
