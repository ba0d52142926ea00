"""`wattbit agent`: the host agent serving blockio, nic, smart and pcie (and opt-in cpu) metrics."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector

from collector.agent.config import AgentConfig
from collector.config import parse_listen
from collector.web.config import WebConfig
from collector.web.exposition import metrics_app
from collector.web.server import landing_page, start_server
from exporters.base import Exporter, ExportersCollector
from exporters.blockio.exporter import BlockioExporter
from exporters.blockio.model import BackendUnavailable
from exporters.cpu.exporter import CpuExporter
from exporters.nic.exporter import NicExporter, QueueReader
from exporters.pcie.exporter import PcieExporter
from exporters.smart.exporter import SmartExporter
from exporters.smart.runner import Runner

log = logging.getLogger("wattbit.agent")

DEFAULT_PORT = AgentConfig.default_port


class StartupError(Exception):
    """The agent cannot start (exit code 1): a requested backend is missing, the port is taken."""


def build_exporters(
    cfg: AgentConfig,
    sys_root: Path = Path("/sys"),
    proc_root: Path = Path("/proc"),
    ethtool: QueueReader | None = None,
    smartctl: Runner | None = None,
) -> list[Exporter]:
    """The exporters the configuration enables, reading this machine.

    Another machine's captured /sys and /proc, a recorded ethtool and a recorded smartctl
    can be given instead (tests/unit/test_agent_golden.py).
    """
    exporters: list[Exporter] = []
    if cfg.blockio.enabled:
        try:
            exporters.append(
                BlockioExporter(
                    backend=cfg.blockio.backend,
                    exclude=cfg.blockio.exclude,
                    max_inflight=cfg.blockio.max_inflight,
                    topology_refresh=cfg.blockio.topology_refresh,
                    sys_root=sys_root,
                    proc_root=proc_root,
                    latency_buckets=cfg.blockio.latency_buckets,
                    size_histogram=cfg.blockio.size_histogram,
                )
            )
        except BackendUnavailable as exc:
            raise StartupError(
                f"blockio: backend '{cfg.blockio.backend}' was requested but {exc.detail}"
            ) from exc
    if cfg.nic.enabled:
        exporters.append(
            NicExporter(
                exclude=cfg.nic.exclude,
                queues=cfg.nic.queues,
                info_refresh=cfg.nic.info_refresh,
                link_speeds=cfg.nic.link_speeds,
                sys_root=sys_root,
                proc_root=proc_root,
                ethtool=ethtool,
            )
        )
    if cfg.smart.enabled:
        exporters.append(
            SmartExporter(
                interval=cfg.smart.interval,
                timeout=cfg.smart.timeout,
                devices=cfg.smart.devices,
                # The same disks as blockio, so every SMART series joins wattbit_disk_info.
                exclude=cfg.blockio.exclude,
                concurrency=cfg.smart.concurrency,
                sys_root=sys_root,
                runner=smartctl,
            )
        )
    if cfg.pcie.enabled:
        exporters.append(
            PcieExporter(
                # the controllers and NICs of the disks and interfaces the exporters above show
                block_exclude=cfg.blockio.exclude,
                nic_exclude=cfg.nic.exclude,
                refresh=cfg.pcie.refresh,
                sys_root=sys_root,
                proc_root=proc_root,
            )
        )
    if cfg.cpu.enabled:
        exporters.append(CpuExporter(proc_root=proc_root))
    return exporters


def build_registry(exporters: list[Exporter]) -> CollectorRegistry:
    """A registry with the exporters, their health, and this process's own resource use."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector(exporters))
    ProcessCollector(registry=registry)
    return registry


def run(cfg: AgentConfig, web: WebConfig | None, stop: threading.Event | None = None) -> int:
    """Start the exporters and the endpoint, serve until SIGINT/SIGTERM (or stop is set)."""
    host, port = parse_listen(cfg.listen, DEFAULT_PORT)
    exporters = build_exporters(cfg)
    try:
        registry = build_registry(exporters)
        routes = {
            "/metrics": metrics_app(registry),
            "/": landing_page("wattbit agent", ["/metrics"]),
        }
        try:
            server = start_server(host, port, routes, web, limits=cfg.http.limits())
        except OSError as exc:
            raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        for e in exporters:
            if note := e.startup_note():
                log.info("%s %s", e.name, note)  # e.g. "blockio backend: bcc"
        log.info("serving %s/metrics", server.url)
        stop = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        log.info("stopping")
        server.shutdown()
    finally:
        for e in exporters:
            e.close()
    return 0
