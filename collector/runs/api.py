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
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import SecretStr

from collector.runs import API_PREFIX
from collector.runs.registry import RunError, RunRegistry, validate_labels
from collector.web.limits import MAX_BODY_KEY

log = logging.getLogger("wattbit.runs")

MAX_BODY = 64 * 1024
MAX_DEPTH = 16  # nesting of the JSON body: {"name": ..., "labels": {...}} needs 2
MAX_NUMBER_DIGITS = 32  # a longer integer in a body is an attack, not a run
WARN_EVERY_S = 60.0  # wrong-token warnings: one per source per minute, with a count

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


class _Throttle:
    """Rate-limits a log line per source: the first at once, then one per `every` with a count."""

    _MAX_SOURCES = 1024

    def __init__(self, every: float, clock: Callable[[], float]) -> None:
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._sources: dict[str, tuple[float, int]] = {}  # source -> (last logged, suppressed)

    def __call__(self, source: str) -> int | None:
        """None: stay quiet; else log now, mentioning this many suppressed since the last."""
        now = self._clock()
        with self._lock:
            last = self._sources.get(source)
            if last is not None and now - last[0] < self._every:
                self._sources[source] = (last[0], last[1] + 1)
                return None
            if last is None and len(self._sources) >= self._MAX_SOURCES:
                # Forget the sources quiet the longest; their counts are lost, not their logs.
                for old in sorted(self._sources, key=lambda k: self._sources[k][0])[:256]:
                    del self._sources[old]
            self._sources[source] = (now, 0)
            return last[1] if last is not None else 0


class _Api:
    """WSGI app for /api/v1/runs, /api/v1/runs/<name> and /api/v1/runs/<name>/stop."""

    def __init__(
        self,
        registry: RunRegistry,
        token: SecretStr | str | None,
        clock: Callable[[], float] = time.monotonic,
        read_only_message: str | None = None,
    ) -> None:
        self.registry = registry
        self._read_only_message = read_only_message or NO_TOKEN_MESSAGE
        self._warn = _Throttle(WARN_EVERY_S, clock)
        secret = token.get_secret_value() if isinstance(token, SecretStr) else token
        # Compare digests: equal lengths, so compare_digest's time says nothing about length.
        self._digest = hashlib.sha256(secret.encode()).digest() if secret else None

    def _authorised(
        self, environ: Mapping[str, Any], start_response: Callable[..., Any]
    ) -> list[bytes] | None:
        """None if the request may write, else the refusal already sent."""
        if self._digest is None:
            return _respond(start_response, 403, {"error": self._read_only_message}, environ)
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
            source = str(environ.get("REMOTE_ADDR") or "?")
            suppressed = self._warn(source)
            if suppressed is not None:
                more = f" (and {suppressed} more since the last such line)" if suppressed else ""
                log.warning("refused a run API write from %s: wrong token%s", source, more)
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
        # isascii(): str.isdigit() also accepts e.g. Arabic-Indic and superscript digits.
        if not (raw_length.isascii() and raw_length.isdigit()):
            raise RunError(400, "bad Content-Length" if raw_length else "no Content-Length")
        length = int(raw_length)
        if length == 0:
            raise RunError(400, "the request has no body: send a JSON object")
        # The server's own limit (http.max_body) when it is lower: past it the server left the
        # body unread, and reading wsgi.input would find nothing rather than the body.
        limit = min(MAX_BODY, int(environ.get(MAX_BODY_KEY, MAX_BODY)))
        if length > limit:
            raise RunError(413, f"the body is larger than {limit} bytes")
        data = environ["wsgi.input"].read(length) if length else b""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise RunError(400, "the body is not UTF-8") from None
        if _depth(text) > MAX_DEPTH:
            raise RunError(400, f"the body is nested deeper than {MAX_DEPTH} levels")
        try:
            return json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise RunError(400, f"the body is not valid JSON: {exc.msg} at {where}") from None
        except (ValueError, RecursionError):  # belt and braces: never a 500 for a body
            raise RunError(400, "the body is not a JSON object wattbit can read") from None


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise RunError(400, f"the body has a number longer than {MAX_NUMBER_DIGITS} digits")
    return int(text)


def _no_constant(text: str) -> object:
    raise RunError(400, f"the body is not valid JSON: {text} is not a JSON value")


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def api_app(
    registry: RunRegistry,
    token: SecretStr | str | None,
    clock: Callable[[], float] = time.monotonic,
    read_only_message: str | None = None,
) -> Callable[..., Iterable[bytes]]:
    """The WSGI app of the run API; writes need `token` (None: writes refused with 403).

    `read_only_message` is the 403's error text without a token (default NO_TOKEN_MESSAGE).
    """
    return _Api(registry, token, clock, read_only_message)


def api_routes(
    registry: RunRegistry, token: SecretStr | str | None, read_only_message: str | None = None
) -> dict[str, Any]:
    """Routes for collector.web.server.start_server: the list and everything under it."""
    app = api_app(registry, token, read_only_message=read_only_message)
    return {API_PREFIX: app, API_PREFIX + "/*": app}
