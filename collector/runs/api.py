"""The run registry's HTTP API under /api/v1/runs: list, get, start and stop runs.

Reads are open to whoever may scrape; writes need the collector's token (`Authorization:
Bearer`, or the X-Wattbit-Token header for sites whose web config puts basic auth in
Authorization), compared in constant time. See docs/runs.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import SecretStr

from collector.runs.registry import RunError, RunRegistry, validate_labels

log = logging.getLogger("wattbit.runs")

API_PREFIX = "/api/v1/runs"
MAX_BODY = 64 * 1024
TOKEN_HEADER = "X-Wattbit-Token"  # for sites whose web config puts basic auth in Authorization

_STATUS = {
    200: "200 OK",
    201: "201 Created",
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    409: "409 Conflict",
    413: "413 Content Too Large",
    500: "500 Internal Server Error",
}

NO_TOKEN_MESSAGE = (
    "run API writes are disabled: the collector has no token "
    "(set runs.token, runs.token_file or runs.token_env in its configuration)"
)


def _respond(
    start_response: Callable[..., Any],
    status: int,
    body: object,
    environ: Mapping[str, Any],
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    data = (json.dumps(body, indent=None) + "\n").encode("utf-8")
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(data))),
        ("Cache-Control", "no-store"),
        *(extra or []),
    ]
    start_response(_STATUS[status], headers)
    return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [data]


def _presented_token(environ: Mapping[str, Any]) -> str | None:
    """The bearer token of a request: `Authorization: Bearer`, else X-Wattbit-Token."""
    auth = str(environ.get("HTTP_AUTHORIZATION") or "").strip()
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    header = str(environ.get("HTTP_X_WATTBIT_TOKEN") or "").strip()
    return header or None


class _Api:
    """WSGI app for /api/v1/runs, /api/v1/runs/<name> and /api/v1/runs/<name>/stop."""

    def __init__(self, registry: RunRegistry, token: SecretStr | str | None) -> None:
        self.registry = registry
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        # Compare digests: equal lengths, so compare_digest's time says nothing about length.
        self._digest = hashlib.sha256(secret.encode()).digest() if secret else None

    def _authorised(
        self, environ: Mapping[str, Any], start_response: Callable[..., Any]
    ) -> list[bytes] | None:
        """None if the request may write, else the refusal already sent."""
        if self._digest is None:
            return _respond(start_response, 403, {"error": NO_TOKEN_MESSAGE}, environ)
        given = _presented_token(environ)
        ok = given is not None and hmac.compare_digest(
            hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest(), self._digest
        )
        if ok:
            return None
        challenge = 'Bearer realm="wattbit"'
        if given is None:
            message = "this needs the collector's token: Authorization: Bearer <token>"
        else:
            challenge += ', error="invalid_token"'
            message = "the token is not the collector's"
            log.warning("refused a run API write from %s: wrong token", environ.get("REMOTE_ADDR"))
        return _respond(
            start_response, 401, {"error": message}, environ, [("WWW-Authenticate", challenge)]
        )

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "")
        method = str(environ.get("REQUEST_METHOD") or "GET").upper()
        if path in (API_PREFIX, API_PREFIX + "/"):
            parts: list[str] = []
        elif path.startswith(API_PREFIX + "/"):
            parts = path[len(API_PREFIX) + 1 :].rstrip("/").split("/")
        else:
            return _respond(start_response, 404, {"error": "not found"}, environ)
        try:
            if not parts:
                if method in ("GET", "HEAD"):
                    body = [r.to_json() for r in self.registry.runs()]
                    return _respond(start_response, 200, body, environ)
                if method == "POST":
                    return self._start(environ, start_response)
                return self._not_allowed(environ, start_response, "GET, HEAD, POST")
            if len(parts) == 1:
                if method not in ("GET", "HEAD"):
                    return self._not_allowed(environ, start_response, "GET, HEAD")
                run = self.registry.get(parts[0])
                if run is None:
                    return _respond(
                        start_response, 404, {"error": f"no run named {parts[0]!r}"}, environ
                    )
                return _respond(start_response, 200, run.to_json(), environ)
            if len(parts) == 2 and parts[1] == "stop":
                if method != "POST":
                    return self._not_allowed(environ, start_response, "POST")
                refused = self._authorised(environ, start_response)
                if refused is not None:
                    return refused
                run = self.registry.stop(parts[0])
                return _respond(start_response, 200, run.to_json(), environ)
        except RunError as exc:
            return _respond(start_response, exc.status, {"error": exc.message}, environ)
        return _respond(start_response, 404, {"error": "not found"}, environ)

    @staticmethod
    def _not_allowed(
        environ: Mapping[str, Any], start_response: Callable[..., Any], allow: str
    ) -> list[bytes]:
        return _respond(
            start_response,
            405,
            {"error": f"method not allowed here (allowed: {allow})"},
            environ,
            [("Allow", allow)],
        )

    def _start(self, environ: Mapping[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        refused = self._authorised(environ, start_response)
        if refused is not None:
            return refused
        body = self._json_body(environ)
        if not isinstance(body, dict):
            raise RunError(400, 'expected a JSON object: {"name": "...", "labels": {"k": "v"}}')
        unknown = sorted(set(body) - {"name", "labels"})
        if unknown:
            raise RunError(400, f"unknown field(s): {', '.join(unknown)}")
        if "name" not in body:
            raise RunError(400, 'the "name" field is required')
        name = body["name"]
        if not isinstance(name, str):
            raise RunError(400, 'the "name" field must be a string')
        labels = body.get("labels") or {}
        try:
            clean = validate_labels(labels)
        except ValueError as exc:
            raise RunError(400, str(exc)) from None
        run = self.registry.start(name, clean)
        location = [("Location", f"{API_PREFIX}/{run.name}")]
        return _respond(start_response, 201, run.to_json(), environ, location)

    @staticmethod
    def _json_body(environ: Mapping[str, Any]) -> object:
        raw_length = str(environ.get("CONTENT_LENGTH") or "").strip()
        if not raw_length.isdigit():
            raise RunError(400, "bad Content-Length" if raw_length else "no Content-Length")
        length = int(raw_length)
        if length == 0:
            raise RunError(400, "the request has no body: send a JSON object")
        if length > MAX_BODY:
            raise RunError(413, f"the body is larger than {MAX_BODY} bytes")
        data = environ["wsgi.input"].read(length) if length else b""
        try:
            return json.loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise RunError(400, "the body is not UTF-8") from None
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise RunError(400, f"the body is not valid JSON: {exc.msg} at {where}") from None


def api_app(registry: RunRegistry, token: SecretStr | str | None) -> Callable[..., Iterable[bytes]]:
    """The WSGI app of the run API; writes need `token` (None: writes refused with 403)."""
    return _Api(registry, token)


def api_routes(registry: RunRegistry, token: SecretStr | str | None) -> dict[str, Any]:
    """Routes for httpserver.start_server: the list itself and everything under it."""
    app = api_app(registry, token)
    return {API_PREFIX: app, API_PREFIX + "/*": app}
