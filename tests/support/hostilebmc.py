"""A Redfish service that misbehaves in one way, for the poller's hostile tests (synthetic).

Modes (every path answers the same way):
  big       a 100 MB JSON body, chunked (no Content-Length), as fast as the socket takes it
  deep      200,000 nested arrays (200 kB)
  drip      a valid start of a JSON body, then one byte every 0.5 s, never ending
  redirect  302 to the same path on 127.0.0.2 (another address)
  ctype     a JSON body labelled text/html
  garbage   a body that is not JSON

Run as `python -m tests.support.hostilebmc --port P --mode M`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiohttp import web

MB = 1024 * 1024


async def handle(request: web.Request) -> web.StreamResponse:
    """Misbehave as the mode says."""
    mode = request.app["mode"]
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
    args = ap.parse_args()
    app = web.Application()
    app["mode"] = args.mode
    app["other_port"] = args.other_port
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
