"""Serving a wattbit daemon: the registry, the HTTP endpoint, start-up, signals and stopping,
the same for the agent (collector/agent/main.py) and the site collector (collector/site/main.py).

A daemon is its exporters (exporters/base.py's contract), the routes it serves besides
/metrics, and optionally work of its own on an asyncio loop (the site collector's PDU polls).
It runs until SIGINT or SIGTERM (or a caller's threading.Event, as in the tests and the demo),
then stops in one order: its work, the HTTP server (requests under way finish), and last
each exporter's close(), on the loop so that what they hold on it (the SNMP sockets) is
released while it still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from collector.daemon.config import ProcessConfig
from collector.web.exposition import metrics_app
from collector.web.server import WSGIApp, landing_page, start_server
from exporters.base import Exporter, ExportersCollector

if TYPE_CHECKING:  # loaded only where a web config is given (collector/cli.py)
    from collector.web.config import WebConfig

__all__ = ["ListenError", "Work", "build_registry", "sd_notify", "serve"]

log = logging.getLogger("wattbit.daemon")

Work = Callable[[asyncio.Event], Coroutine[Any, Any, None]]  # runs until the event is set


class ListenError(OSError):
    """The daemon's address cannot be bound (in use, not this machine's, no permission)."""


def sd_notify(state: str) -> bool:
    """Send ``state`` (``READY=1``...) to systemd's $NOTIFY_SOCKET; False when there is none.

    The units are Type=notify (packaging/systemd/): systemd counts a daemon started once it
    listens, and a failed start (a bad config: exit 2) as a failed start. The protocol is one
    datagram on a unix socket (sd_notify(3)); hand-written rather than a library because it is
    these few lines and would otherwise be the agent's only use of libsystemd or a dependency.
    """
    addr = os.environ.get("NOTIFY_SOCKET", "")
    if not addr.startswith(("/", "@")):  # unset, or not a unix socket (vsock: not ours to use)
        return False
    target = "\0" + addr[1:] if addr[0] == "@" else addr  # "@": the abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto(state.encode(), target)
    except OSError as exc:  # systemd gone or the socket not ours: serving goes on
        log.debug("sd_notify: %s", exc.strerror)
        return False
    return True


def build_registry(exporters: Sequence[Exporter]) -> CollectorRegistry:
    """A registry with the exporters, their health, and this process's own resource use."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector(exporters))
    ProcessCollector(registry=registry)
    return registry


def serve(
    title: str,
    cfg: ProcessConfig,
    web: WebConfig | None,
    exporters: Sequence[Exporter],
    *,
    routes: dict[str, WSGIApp] | None = None,
    links: Sequence[str] = (),
    work: Work | None = None,
    serving: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Serve ``exporters`` on /metrics (and ``routes``) at ``cfg.listen`` until stopped; 0.

    ``title`` names the landing page, which links /metrics and ``links``; ``serving`` is told
    the server's URL once it listens; ``work`` runs alongside until the stop. Raises
    ListenError when the address cannot be bound; the exporters are closed however it ends.
    """
    stop = stop or threading.Event()
    closed = False

    def close() -> None:
        nonlocal closed
        if not closed:
            closed = True
            for e in exporters:
                e.close()

    try:
        app_routes = {
            "/metrics": metrics_app(build_registry(exporters)),
            "/": landing_page(title, ["/metrics", *links]),
            **(routes or {}),
        }
        host, port = cfg.listen.host, cfg.listen.port
        try:
            server = start_server(host, port, app_routes, web, limits=cfg.http.limits())
        except OSError as exc:
            raise ListenError(exc.errno, exc.strerror or str(exc)) from exc
        for e in exporters:
            if note := e.startup_note():
                log.info("%s %s", e.name, note)  # e.g. "blockio backend: bcc"
        if serving is not None:
            serving(server.url)
        sd_notify(f"READY=1\nSTATUS=serving {title} on {server.url}")

        async def until_stopped() -> None:
            done = asyncio.Event()
            loop = asyncio.get_running_loop()
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, done.set)
            # A threading.Event set by a caller (tests, the demo) also stops the loop.
            loop.run_in_executor(None, lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)))
            task = asyncio.create_task(work(done)) if work is not None else None
            try:
                await done.wait()
            finally:
                log.info("stopping")
                sd_notify("STOPPING=1")
                # Release the executor thread waiting on `stop`: asyncio.run() joins it.
                stop.set()
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                # Stops accepting, lets requests under way finish (a run API write commits
                # the registry file before it answers), then closes every connection.
                await loop.run_in_executor(None, server.shutdown)
                close()

        try:
            asyncio.run(until_stopped())
        finally:
            stop.set()
            server.shutdown()  # idempotent; for a loop that failed before it stopped
    finally:
        close()
    log.info("stopped")
    return 0
