"""A Redfish service that misbehaves in one way, for the poller's hostile tests (synthetic).

Modes (every path answers the same way):
  big       a 100 MB JSON body, chunked (no Content-Length), as fast as the socket takes it
  deep      200,000 nested arrays (200 kB)
  drip      a valid start of a JSON body, then one byte every 0.5 s, never ending
  redirect  302 to the same path on 127.0.0.2 (another address)
  ctype     a JSON body labelled text/html
  garbage   a body that is not JSON
  slow      not hostile: serves the mockup directory --mockup, each answer after 0.25 s
  strings   serves the mockup directory --mockup with every name, vendor, model, firmware and
            Id string carrying a lone surrogate (JSON "\\ud800", valid JSON), an ESC sequence and
            a newline that would forge a log line
  bloat     a valid Redfish tree (service root, 32 chassis, each with Power) whose every
            document is padded to just under --size bytes with [{},{},...]: within max_body,
            yet each would decode to over a million objects
  session   not hostile: serves the mockup directory --mockup, but only to a Redfish session
            (POST /redfish/v1/SessionService/Sessions with the --user/--password JSON gives
            X-Auth-Token; anything else 401), and forgets every session after each 6 GETs, as
            a BMC whose sessions expire; GET /_stats counts logins, logouts and Basic headers,
            the sessions live now and at most. --quirk changes one thing:
              expire       (the default) as above
              none         sessions never expire
              forbid-one   every Power resource answers 401 even to a live session
              slow-login   a login is answered (and its session made) after --login-delay s
              no-location  a login's answer has no Location header (its body's @odata.id
                           names the session, DSP0266)
              slow-power   every Power resource answers after --login-delay s

  mutate    serves the mockup directory --mockup, answers a session login (any credentials:
            201, a token, a Location) and changes the documents as the last GET /_set said
            (issue 34: the same attacks on every document, string and number):
              /_set?doc=SUFFIX&attack=A   the documents whose path ends with SUFFIX ("Sessions":
                                          the login's answer) get attack A: bloat (padded with
                                          [{},{},...] to --size bytes), deep (100,000 levels
                                          of arrays), big (--size bytes of one string)
              /_set?key=K&number=N        every number under key K anywhere becomes the JSON
                                          text N (a 400-digit integer, 1e400, -1e400, NaN)
              /_set?strings=KIND          every POISONED key's string carries STRINGS[KIND]
              /_set                       back to the mockup as it is
            /_stats counts the GETs answered.

Run as `python -m tests.support.hostilebmc --port P --mode M`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from pathlib import Path

from aiohttp import web

MB = 1024 * 1024


async def session_mode(request: web.Request) -> web.StreamResponse:
    """A Redfish service that only answers a session (see the module's doc)."""
    app = request.app
    stats, quirk, tokens = app["stats"], app["quirk"], app["tokens"]
    if request.path == "/_stats":
        return web.json_response({**stats, "live": len(tokens)})
    if "Authorization" in request.headers:
        stats["basic"] += 1
    if request.method == "POST" and request.path.rstrip("/").endswith("/Sessions"):
        body = await request.json()
        if body != {"UserName": app["user"], "Password": app["password"]}:
            raise web.HTTPUnauthorized()
        if quirk == "slow-login":
            await asyncio.sleep(app["login_delay"])
        stats["logins"] += 1
        token = secrets.token_hex(16)
        uri = f"/redfish/v1/SessionService/Sessions/{stats['logins']}"
        tokens[token] = uri
        stats["max_live"] = max(stats["max_live"], len(tokens))
        headers = {"X-Auth-Token": token}
        if quirk != "no-location":
            headers["Location"] = uri
        return web.json_response(
            {"@odata.id": uri, "Id": str(stats["logins"])}, status=201, headers=headers
        )
    token = request.headers.get("X-Auth-Token", "")
    if request.method == "GET" and request.path.rstrip("/") == "/redfish/v1":
        token = ""  # the service root needs no credentials (DSP0266)
    elif token not in tokens:
        raise web.HTTPUnauthorized()
    if request.method == "DELETE":
        if tokens.get(token) == request.path:
            del tokens[token]
            stats["logouts"] += 1
            return web.Response(status=204)
        raise web.HTTPNotFound()
    if token and request.path == tokens[token]:  # a session reads its own resource
        return web.json_response({"@odata.id": request.path, "Id": request.path[-1]})
    if token:
        stats["gets"] += 1
    if token and quirk == "expire" and stats["gets"] % 6 == 0:
        tokens.clear()  # every session expires
    if request.path.rstrip("/").endswith("/Power"):
        if quirk == "forbid-one":
            raise web.HTTPUnauthorized()  # this resource only: the session stays live
        if quirk == "slow-power":
            await asyncio.sleep(app["login_delay"])
    rel = request.path.rstrip("/").removeprefix("/redfish/v1").strip("/")
    f = Path(app["mockup"]) / rel / "index.json"
    if not f.is_file():
        raise web.HTTPNotFound()
    return web.Response(body=f.read_bytes(), content_type="application/json")


# Keys whose string values the "strings" mode poisons: what reaches labels and logs.
POISONED = frozenset(
    {"Name", "Manufacturer", "Model", "FirmwareVersion", "MemberId", "Vendor", "Id", "SerialNumber"}
)
POISON = "\ud800\x1b[31m\nFORGED bmc line"


def poison(doc: object, text: str = POISON) -> object:
    """The document with every POISONED key's string value carrying `text`."""
    if isinstance(doc, dict):
        return {
            k: v + text if k in POISONED and isinstance(v, str) else poison(v, text)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [poison(v, text) for v in doc]
    return doc


# The string attacks of the mutate mode, by name; "invalid-utf8" is bytes, not text (written
# into the body raw where its marker is).
STRINGS = {
    "surrogate": POISON,
    "nul": "\x00\x00NUL\x00",
    "controls": "\x9b31m\u202e\u2028\x7f\x1b]0;title\x07",
    "megabyte": "M" * 1_000_000,
    "invalid-utf8": "\x00WB-BYTES\x00",
}
_RAW_BYTES = b"\xff\xfe\xc3(\x80latin-1 caf\xe9"
_NUMBER = "WB-NUMBER-MARKER"


def _mutated(doc: object, key: str) -> object:
    """The document with every number under `key` (at any depth) replaced by the marker."""
    if isinstance(doc, dict):
        return {
            k: _NUMBER
            if k == key and isinstance(v, int | float) and not isinstance(v, bool)
            else _mutated(v, key)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_mutated(v, key) for v in doc]
    return doc


def mutate_body(path: str, body: bytes, how: dict[str, str], size: int) -> bytes:
    """A document of the mutate mode: `body` (the mockup's) changed as `how` says."""
    if how.get("doc") and path.rstrip("/").endswith(how["doc"]):
        attack = how.get("attack", "bloat")
        if attack == "deep":
            return (
                b'{"@odata.id": "'
                + path.encode()
                + b'", "x": '
                + b"[" * 100_000
                + b"]" * 100_000
                + b"}"
            )
        if attack == "big":
            return b'{"@odata.id": "' + path.encode() + b'", "pad": "' + b"x" * size + b'"}'
        head = body.rstrip()[:-1] + b', "pad": ['
        n = max(0, (size - len(head) - 8) // 3)
        return head + b"{}," * n + b"{}]}"
    if how.get("key"):
        text = json.dumps(_mutated(json.loads(body), how["key"]))
        return text.replace(f'"{_NUMBER}"', how.get("number", "1e400")).encode()
    if how.get("strings"):
        text = json.dumps(poison(json.loads(body), STRINGS[how["strings"]]))
        return text.encode("ascii").replace(b"\\u0000WB-BYTES\\u0000", _RAW_BYTES)
    return body


async def mutate_mode(request: web.Request) -> web.StreamResponse:
    """The mutate mode (see the module's doc)."""
    app = request.app
    if request.path == "/_set":
        app["how"] = dict(request.query)
        return web.json_response(app["how"])
    if request.path == "/_stats":
        return web.json_response(app["stats"])
    if request.method == "POST" and request.path.rstrip("/").endswith("/Sessions"):
        await request.read()
        uri = "/redfish/v1/SessionService/Sessions/1"
        body = json.dumps({"@odata.id": uri, "Id": "1", "Name": "session"}).encode()
        body = mutate_body("Sessions", body, app["how"], app["size"])
        headers = {"X-Auth-Token": secrets.token_hex(16), "Location": uri}
        return web.Response(status=201, body=body, headers=headers, content_type="application/json")
    if request.method == "DELETE":
        return web.Response(status=204)
    rel = request.path.rstrip("/").removeprefix("/redfish/v1").strip("/")
    f = Path(app["mockup"]) / rel / "index.json"
    if not f.is_file():
        raise web.HTTPNotFound()
    app["stats"]["gets"] += 1
    body = mutate_body(request.path, f.read_bytes(), app["how"], app["size"])
    return web.Response(body=body, content_type="application/json")


def bloat_document(path: str, size: int) -> bytes:
    """The `bloat` mode's answer for path: a valid resource padded to just under size bytes."""
    path = path.rstrip("/")
    doc: dict[str, object] = {"@odata.id": path, "Name": "bloat"}
    if path == "/redfish/v1":
        doc["Chassis"] = {"@odata.id": "/redfish/v1/Chassis"}
    elif path == "/redfish/v1/Chassis":
        doc["Members"] = [{"@odata.id": f"/redfish/v1/Chassis/{i}"} for i in range(32)]
    elif path.endswith("/Power"):
        doc["PowerControl"] = [{"MemberId": "0", "PowerConsumedWatts": 100}]
    else:
        doc["Id"] = path.rsplit("/", 1)[-1]
        doc["Power"] = {"@odata.id": f"{path}/Power"}
    head = json.dumps(doc)[:-1].encode() + b', "pad": ['
    n = max(0, (size - len(head) - 8) // 3)
    return head + b"{}," * n + b"{}]}"


async def handle(request: web.Request) -> web.StreamResponse:
    """Misbehave as the mode says."""
    mode = request.app["mode"]
    if mode == "session":
        return await session_mode(request)
    if mode == "mutate":
        return await mutate_mode(request)
    if mode == "slow":
        await asyncio.sleep(0.25)
        rel = request.path.rstrip("/").removeprefix("/redfish/v1").strip("/")
        f = Path(request.app["mockup"]) / rel / "index.json"
        if not f.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=f.read_bytes(), content_type="application/json")
    if mode == "bloat":
        body = bloat_document(request.path, request.app["size"])
        return web.Response(body=body, content_type="application/json")
    if mode == "strings":
        rel = request.path.rstrip("/").removeprefix("/redfish/v1").strip("/")
        f = Path(request.app["mockup"]) / rel / "index.json"
        if not f.is_file():
            raise web.HTTPNotFound()
        body = json.dumps(poison(json.loads(f.read_bytes())))  # ensure_ascii: "\ud800" escaped
        return web.Response(body=body.encode("ascii"), content_type="application/json")
    if mode == "redirect":
        other = request.app["other_port"] or request.url.port
        raise web.HTTPFound(f"http://127.0.0.2:{other}{request.path}")
    if mode == "ctype":
        return web.Response(body=b'{"@odata.id": "/redfish/v1"}', content_type="text/html")
    if mode == "garbage":
        return web.Response(body=b"<html>login</html>", content_type="application/json")
    if mode == "deep":
        return web.Response(body=b"[" * 200_000, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        if mode == "big":
            await resp.write(b'{"pad": "')
            chunk = b"x" * MB
            for _ in range(100):
                await resp.write(chunk)
            await resp.write(b'"}')
        elif mode == "drip":
            await resp.write(b'{"@odata.id": "/redfish/v1", "Name": "')
            while True:
                await asyncio.sleep(0.5)
                await resp.write(b"x")
    except (ConnectionError, asyncio.CancelledError):
        pass  # the poller hung up: what it should do
    return resp


def main() -> int:
    """Serve until killed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--other-port", type=int, default=0)
    ap.add_argument("--mockup", default="")
    ap.add_argument("--user", default="")
    ap.add_argument("--password", default="")
    ap.add_argument("--quirk", default="expire")
    ap.add_argument("--login-delay", type=float, default=0.0)
    ap.add_argument("--size", type=int, default=4 * MB - 1024)
    args = ap.parse_args()
    app = web.Application()
    app["mode"] = args.mode
    app["other_port"] = args.other_port
    app["mockup"], app["user"], app["password"] = args.mockup, args.user, args.password
    app["tokens"] = {}
    app["how"] = {}
    app["size"] = args.size
    app["quirk"], app["login_delay"] = args.quirk, args.login_delay
    app["stats"] = {"logins": 0, "logouts": 0, "basic": 0, "gets": 0, "max_live": 0}
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
