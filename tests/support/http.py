"""One HTTP request to a test server with http.client: status, response (headers) and body."""

from __future__ import annotations

import base64
import http.client
import ssl
from pathlib import Path
from typing import Protocol

import bcrypt


class _Endpoint(Protocol):
    url: str
    host: str
    port: int


def request(
    server: _Endpoint,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 20,
) -> tuple[int, http.client.HTTPResponse, bytes]:
    """Send one request on a new connection (HTTPS when the server's URL says so)."""
    conn: http.client.HTTPConnection
    if server.url.startswith("https://"):
        conn = http.client.HTTPSConnection(
            server.host, server.port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp, resp.read()
    finally:
        conn.close()


def basic(user: str, password: str | bytes) -> dict[str, str]:
    """An Authorization header for basic auth (a bytes password is sent as it is)."""
    raw = password if isinstance(password, bytes) else password.encode()
    token = base64.b64encode(user.encode() + b":" + raw).decode()
    return {"Authorization": f"Basic {token}"}


def tls_auth_web_file(directory: Path, user: str, password: str) -> Path:
    """directory/web.yml: TLS with directory's server.crt and server.key, and basic auth for
    user with password (bcrypt-hashed here, at the lowest cost)."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = directory / "web.yml"
    web.write_text(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        f"basic_auth_users:\n  {user}: '{hashed}'\n"
    )
    return web
