"""The fleet bench's simulator (a child process): hosts' /metrics and PDUs on ports."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

from tests.support.synthetic import (
    Exposition,
)

# --- the simulator (a child process: --serve SPEC) ------------------------------------------


async def serve(spec: dict[str, Any]) -> None:
    from aiohttp import web

    from collector.pdu.responder import Responder
    from collector.pdu.snmprec import read_recording

    expo = Exposition(Path(spec["exposition"]).read_text())
    epoch = time.monotonic()
    served = {"scrapes": 0, "bytes": 0, "alerts_posts": 0}
    headers = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}

    async def metrics(_: web.Request) -> web.Response:
        body = expo.body(int(time.monotonic() - epoch))
        served["scrapes"] += 1
        served["bytes"] += len(body)
        return web.Response(body=body, headers=headers)

    async def alerts(_: web.Request) -> web.Response:
        served["alerts_posts"] += 1  # vmalert's notifier: an Alertmanager that accepts all
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", alerts)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host_ports = []
    for _ in range(spec["hosts"] + 1):  # the last one is the Alertmanager sink
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock, backlog=1024).start()
        host_ports.append(int(sock.getsockname()[1]))

    responder = Responder(read_recording(Path(spec["recording"])), "public", max_repetitions=64)
    loop = asyncio.get_running_loop()

    class Pdu(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

        def datagram_received(self, data: bytes, addr: Any) -> None:
            reply = responder.answer(data)
            if reply is not None:
                self.transport.sendto(reply, addr)

    pdu_ports = []
    for _ in range(spec["pdus"]):
        transport, _proto = await loop.create_datagram_endpoint(Pdu, local_addr=("127.0.0.1", 0))
        pdu_ports.append(int(transport.get_extra_info("sockname")[1]))

    ready = Path(spec["ready"])
    ready.with_suffix(".tmp").write_text(
        json.dumps({"hosts": host_ports[:-1], "sink": host_ports[-1], "pdus": pdu_ports})
    )
    ready.with_suffix(".tmp").rename(ready)  # whole, or not there
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    Path(spec["stats"]).write_text(json.dumps(served))
    await runner.cleanup()
