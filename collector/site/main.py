"""`wattbit collector`: the site collector polling PDUs over SNMP and BMCs over Redfish or IPMI,
and keeping the run registry."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector

from collector.config import parse_listen
from collector.runs.api import API_PREFIX, api_routes
from collector.runs.registry import STATE_FILE, RunRegistry
from collector.site.bmcs import build_bmc_poller
from collector.site.config import CollectorConfig
from collector.site.profiles import require_profile, site_profiles
from collector.site.targets import pdu_target
from collector.web.config import WebConfig
from collector.web.exposition import metrics_app
from collector.web.server import landing_page, start_server
from exporters.base import ExportersCollector
from exporters.bmc.exporter import BmcExporter
from exporters.pdu.exporter import PduExporter
from exporters.pdu.poller import PduPoller
from exporters.pdu.profile import Profile
from exporters.snmp.client import SnmpClient

log = logging.getLogger("wattbit.collector")

DEFAULT_PORT = CollectorConfig.default_port
SHARD_READ_ONLY_MESSAGE = (
    "run API writes are disabled: this collector is a PDU polling shard without a token; "
    "runs are kept by the site's one collector with runs.token (docs/scaling.md)"
)


def profiles_for(cfg: CollectorConfig, source: str | Path = "") -> list[Profile]:
    """Built-in profiles plus the site's own; a configured profile must exist (else exit 2)."""
    profiles = site_profiles(cfg.profiles_dir)
    for i, pdu in enumerate(cfg.pdus):
        require_profile(profiles, pdu.profile, source, f"pdus[{i}].profile")
    return profiles


def build_poller(cfg: CollectorConfig, profiles: list[Profile], client: SnmpClient) -> PduPoller:
    """The poller for the configured PDUs of this collector's shard (all of them unsharded)."""
    targets = [pdu_target(p, cfg.auths[p.auth]) for p in cfg.polled()]
    return PduPoller(targets, profiles, client, cfg.interval, cfg.concurrency)


def holds_registry(cfg: CollectorConfig) -> bool:
    """False for a sharded collector without a run token: another collector keeps the runs."""
    return cfg.runs.token is not None or cfg.shard.n == 1


def open_runs(cfg: CollectorConfig) -> RunRegistry:
    """The run registry in the state directory, loaded from its file.

    With a token (writes possible) the state directory is created if missing and must be
    writable, so a bad state_dir stops the start rather than the first `wattbit run start`.
    Without one nothing is ever written, and the directory is not touched. A sharded collector
    without a token holds no registry at all (an empty one, in memory): the site's collectors
    often share one configuration and state_dir, and the registry holder's file read by the
    others would export every run once per collector, frozen as it was when each started.
    """
    if not holds_registry(cfg):
        log.info(
            "shard %s without runs.token: the run registry is another collector's; "
            "this one's run API lists no runs and refuses writes (403)",
            cfg.shard,
        )
        return RunRegistry(None)
    state = cfg.state_dir
    runs = RunRegistry(state / STATE_FILE, keep=cfg.runs.keep, retention=cfg.runs.retention)
    try:
        if cfg.runs.token is not None:
            state.mkdir(parents=True, exist_ok=True)
            if not os.access(state, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable")
        runs.load()
    except OSError as exc:
        raise OSError(exc.errno, f"state_dir {state}: {exc.strerror or exc}") from exc
    if cfg.runs.token is None:
        log.warning("no runs.token configured: the run API is read-only (writes get 403)")
    return runs


def run(
    cfg: CollectorConfig,
    web: WebConfig | None,
    source: str | Path = "",
    stop: threading.Event | None = None,
) -> int:
    """Poll PDUs and serve /metrics until SIGINT/SIGTERM (or stop is set)."""
    profiles = profiles_for(cfg, source)
    host, port = parse_listen(cfg.listen, DEFAULT_PORT)
    client = SnmpClient()
    poller = build_poller(cfg, profiles, client)
    bmc_poller = build_bmc_poller(cfg)
    runs = open_runs(cfg)
    registry = CollectorRegistry(auto_describe=False)
    pdus = PduExporter(poller, shard=(cfg.shard.k, cfg.shard.n), configured=len(cfg.pdus))
    # Only the registry's holder exports wattbit_exporter_up{exporter="runs"}: one per site.
    sources = [pdus, BmcExporter(bmc_poller)] if cfg.bmcs else [pdus]
    registry.register(ExportersCollector([*sources, runs] if holds_registry(cfg) else sources))
    ProcessCollector(registry=registry)
    server = start_server(
        host,
        port,
        {
            "/metrics": metrics_app(registry),
            "/": landing_page("wattbit collector", ["/metrics", API_PREFIX]),
            **api_routes(
                runs, cfg.runs.token, None if holds_registry(cfg) else SHARD_READ_ONLY_MESSAGE
            ),
        },
        web,
        limits=cfg.http.limits(),
    )
    if cfg.shard.n == 1:
        log.info(
            "serving %s/metrics; polling %d PDU(s) every %gs",
            server.url,
            len(cfg.pdus),
            cfg.interval,
        )
    else:
        log.info(
            "serving %s/metrics; shard %s: polling %d of the %d PDU(s) configured every %gs",
            server.url,
            cfg.shard,
            len(poller.targets),
            len(cfg.pdus),
            cfg.interval,
        )
        if not poller.targets and cfg.pdus:
            log.warning("shard %s owns none of the configured PDUs", cfg.shard)
    if cfg.bmcs:
        log.info(
            "polling %d of the %d BMC(s) configured every %gs",
            len(bmc_poller.targets),
            len(cfg.bmcs),
            cfg.interval,
        )
    stop = stop or threading.Event()

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, done.set)
        # A threading.Event set by a caller (tests, the demo) also stops the loop.
        loop.run_in_executor(None, lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)))
        task = asyncio.create_task(poller.run(done))
        bmc_task = asyncio.create_task(bmc_poller.run(done))
        try:
            await done.wait()
        finally:
            # Release the executor thread waiting on `stop`: asyncio.run() joins it on the way
            # out.
            stop.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            bmc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bmc_task
            await bmc_poller.close()  # Redfish sessions logged out, connections closed
            # The SNMP sockets belong to this loop: close them while it still runs (closing
            # them after asyncio.run() returned raised "Event loop is closed", exit 1).
            client.close()

    try:
        asyncio.run(main())
    finally:
        stop.set()
        # Stops accepting, lets run API writes under way finish (each commits the registry
        # file before it answers), then closes every connection.
        server.shutdown()
        client.close()  # idempotent; for a start that failed before the loop ran
    log.info("stopped")
    return 0
