"""`wattbit collector`: the site collector polling PDUs over SNMP and BMCs over Redfish or IPMI,
and keeping the run registry."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from pathlib import Path

from collector.daemon.serve import serve
from collector.runs.api import API_PREFIX, api_routes
from collector.runs.registry import STATE_FILE, RunRegistry
from collector.site.bmcs import build_bmc_poller
from collector.site.config import CollectorConfig
from collector.site.profiles import require_profile, site_profiles
from collector.site.targets import pdu_target
from collector.web.config import WebConfig
from exporters.base import Exporter
from exporters.bmc.exporter import BmcExporter
from exporters.bmc.poller import BmcPoller
from exporters.pdu.exporter import PduExporter
from exporters.pdu.poller import PduPoller
from exporters.pdu.profile import Profile
from exporters.snmp.client import SnmpClient

log = logging.getLogger("wattbit.collector")

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


def build_exporters(
    cfg: CollectorConfig, profiles: list[Profile], client: SnmpClient, runs: RunRegistry
) -> tuple[PduPoller, BmcPoller, list[Exporter]]:
    """The PDU and BMC pollers and the exporters /metrics runs: the PDUs', the BMCs' where any
    is configured, and the run registry where this collector holds it
    (tests/unit/test_site_golden.py builds them the same way)."""
    poller = build_poller(cfg, profiles, client)
    bmc_poller = build_bmc_poller(cfg)
    exporters: list[Exporter] = [
        PduExporter(poller, shard=(cfg.shard.k, cfg.shard.n), configured=len(cfg.pdus))
    ]
    if cfg.bmcs:  # beside the PDUs' exporter (docs/exporters/bmc.md)
        exporters.append(BmcExporter(bmc_poller))
    # Only the registry's holder exports wattbit_exporter_up{exporter="runs"}: one per site.
    if holds_registry(cfg):
        exporters.append(runs)
    return poller, bmc_poller, exporters


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
    runs = RunRegistry(
        state / STATE_FILE,
        keep=cfg.runs.keep,
        retention=cfg.runs.retention,
        max_runs=cfg.runs.max_runs,
    )
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
    """Poll PDUs and BMCs and serve /metrics until SIGINT/SIGTERM (or stop is set)."""
    profiles = profiles_for(cfg, source)
    runs = open_runs(cfg)
    poller, bmc_poller, exporters = build_exporters(cfg, profiles, SnmpClient(), runs)
    read_only = None if holds_registry(cfg) else SHARD_READ_ONLY_MESSAGE

    async def work(done: asyncio.Event) -> None:
        # The BMC poller logs its Redfish sessions out when cancelled (BmcPoller.run).
        await asyncio.gather(poller.run(done), bmc_poller.run(done))

    return serve(
        "wattbit collector",
        cfg,
        web,
        exporters,
        routes=api_routes(runs, cfg.runs.token, read_only),
        links=[API_PREFIX],
        work=work,
        serving=lambda url: _serving(cfg, poller, bmc_poller, url),
        stop=stop,
    )


def _serving(cfg: CollectorConfig, poller: PduPoller, bmcs: BmcPoller, url: str) -> None:
    if cfg.bmcs:
        log.info(
            "polling %d of the %d BMC(s) configured every %gs",
            len(bmcs.targets),
            len(cfg.bmcs),
            cfg.interval,
        )
    if cfg.shard.n == 1:
        log.info(
            "serving %s/metrics; polling %d PDU(s) every %gs", url, len(cfg.pdus), cfg.interval
        )
        return
    log.info(
        "serving %s/metrics; shard %s: polling %d of the %d PDU(s) configured every %gs",
        url,
        cfg.shard,
        len(poller.targets),
        len(cfg.pdus),
        cfg.interval,
    )
    if not poller.targets and cfg.pdus:
        log.warning("shard %s owns none of the configured PDUs", cfg.shard)
