"""`wattbit agent`: the host agent serving blockio, nic, smart, power, pcie and tcp (and opt-in
cpu) metrics."""

from __future__ import annotations

import gc
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from collector.agent.config import AgentConfig, SmartConfig
from collector.agent.early import CoreLoad, limit_malloc_arenas
from collector.agent.privileges import drop_after_start
from collector.daemon.serve import ListenError, serve
from exporters.base import Exporter
from exporters.blockio.model import BackendUnavailable
from exporters.hostfs.blockdevs import SharedTopology
from exporters.hostfs.read import PROC_ROOT, SYS_ROOT

# Each exporter's module is imported where the configuration turns it on (issue 35: an agent
# with an exporter off neither loads its code nor pays its import at start).
if TYPE_CHECKING:
    from collector.web.config import WebConfig
    from exporters.nic.exporter import QueueReader
    from exporters.smart.runner import Runner, RunnerChoice
    from exporters.tcp.exporter import SocketReader

log = logging.getLogger("wattbit.agent")


class StartupError(Exception):
    """The agent cannot start (exit code 1): a requested backend is missing, the port is taken."""


def build_exporters(
    cfg: AgentConfig,
    sys_root: Path = SYS_ROOT,
    proc_root: Path = PROC_ROOT,
    ethtool: QueueReader | None = None,
    smartctl: Runner | None = None,
    tcp_reader: SocketReader | None = None,
    start: bool = True,
    blockio_core: CoreLoad | None = None,
) -> list[Exporter]:
    """The exporters the configuration enables, reading this machine.

    Another machine's captured /sys and /proc, a recorded ethtool, a recorded smartctl and
    recorded sock_diag answers can be given instead (tests/unit/test_agent_golden.py).
    start=False: no exporter starts a thread yet (start_exporters() does, after the
    capabilities are dropped: the tcp sampler and the smart reads).
    blockio_core: blockio's core backend being built in a thread (early.start), taken when
    the configured backend tries it.
    """
    exporters: list[Exporter] = []
    # blockio and pcie read the block devices' topology at the same scrapes: once for both
    topology = SharedTopology(sys_root) if cfg.blockio.enabled and cfg.pcie.enabled else None
    if cfg.blockio.enabled:
        exporters.append(_blockio(cfg, sys_root, proc_root, topology, blockio_core))
    if cfg.nic.enabled:
        from exporters.nic.exporter import NicExporter

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
        from exporters.smart.exporter import SmartExporter

        choice, runner = smart_runner(cfg.smart)
        exporters.append(
            SmartExporter(
                interval=cfg.smart.interval,
                timeout=cfg.smart.timeout,
                devices=cfg.smart.devices,
                # The same disks as blockio, so every SMART series joins wattbit_disk_info.
                exclude=cfg.blockio.exclude,
                concurrency=cfg.smart.concurrency,
                raid=cfg.smart.raid,
                sys_root=sys_root,
                runner=smartctl if smartctl is not None else runner,
                autostart=start,
                choice=choice,
            )
        )
    if cfg.power.enabled:
        from exporters.power.exporter import PowerExporter

        exporters.append(
            PowerExporter(sys_root=sys_root, rapl=cfg.power.rapl, hwmon=cfg.power.hwmon)
        )
    if cfg.pcie.enabled:
        from exporters.pcie.exporter import PcieExporter

        exporters.append(
            PcieExporter(
                # the controllers and NICs of the disks and interfaces the exporters above show
                block_exclude=cfg.blockio.exclude,
                nic_exclude=cfg.nic.exclude,
                refresh=cfg.pcie.refresh,
                controller_irqs=cfg.pcie.controller_irqs,
                sys_root=sys_root,
                proc_root=proc_root,
                topology=topology,
            )
        )
    if cfg.cpu.enabled:
        from exporters.cpu.exporter import CpuExporter

        exporters.append(CpuExporter(proc_root=proc_root))
    if cfg.tcp.enabled:
        from exporters.tcp.exporter import KeyConfig, TcpExporter

        t = cfg.tcp
        exporters.append(
            TcpExporter(
                interval=t.interval,
                key=KeyConfig(tuple(t.key), t.peer_prefix_v4, t.peer_prefix_v6),
                top_k=t.top_k,
                process_refresh=t.process_refresh,
                max_sockets=t.max_sockets,
                proc_root=proc_root,
                sys_root=sys_root,
                reader=tcp_reader,
                destroy=t.destroy_events,
                processes=t.processes,
                flow_labels=t.flow_labels,
                packet_label_flows=t.packet_label_flows,
            )
        )
    return exporters


def _blockio(
    cfg: AgentConfig,
    sys_root: Path,
    proc_root: Path,
    topology: SharedTopology | None,
    core: CoreLoad | None,
) -> Exporter:
    """The blockio exporter (its core backend taken from `core` where one was begun)."""
    from exporters.blockio.exporter import BlockioExporter

    try:
        return BlockioExporter(
            backend=cfg.blockio.backend,
            exclude=cfg.blockio.exclude,
            max_inflight=cfg.blockio.max_inflight,
            topology_refresh=cfg.blockio.topology_refresh,
            sys_root=sys_root,
            proc_root=proc_root,
            latency_buckets=cfg.blockio.latency_buckets,
            size_histogram=cfg.blockio.size_histogram,
            topology=topology,
            core=None if core is None else core.take,
        )
    except BackendUnavailable as exc:
        raise StartupError(
            f"blockio: backend '{cfg.blockio.backend}' was requested but {exc.detail}"
        ) from exc


def smart_runner(cfg: SmartConfig) -> tuple[RunnerChoice, Runner]:
    """Who runs smartctl (smart.smartctl; auto: from this process's CAP_SYS_RAWIO)."""
    from exporters.hostfs import caps
    from exporters.smart.runner import HelperRunner, SmartctlRunner, choose_runner, helper_present

    has_rawio = caps.current().has(caps.CAP_SYS_RAWIO)
    choice = choose_runner(cfg.smartctl, helper_present(cfg.helper_socket), has_rawio)
    if choice.runner == "helper":
        return choice, HelperRunner(cfg.helper_socket)
    return choice, SmartctlRunner()


# Seconds from the start to the smart exporter's first read cycle. The cycle lists the disks
# (read_topology) and starts smartctl for each, work that ran alongside the agent's first
# scrape on the same cores and under the same GIL: the first answer came ~30-40 ms later with
# it (48 loop disks, 2 vCPUs; issue 35, docs/benchmarks.md). SMART data change over minutes
# (smart.interval: 300 s) and a read of a disk takes seconds: one second later costs nothing.
SMART_FIRST_READ = 1.0


def start_exporters(exporters: list[Exporter], smart_delay: float = SMART_FIRST_READ) -> None:
    """Start the exporters' background threads: the tcp sampler now (its first sample is
    ready by the first scrape, which would wait for it), the smart reads after smart_delay."""
    for e in exporters:
        if e.name == "tcp":
            from exporters.tcp.exporter import TcpExporter

            if isinstance(e, TcpExporter):
                e.start()
        elif e.name == "smart":
            from exporters.smart.exporter import SmartExporter

            if isinstance(e, SmartExporter):
                e.start(delay=smart_delay)


# The cyclic GC's first threshold: container objects allocated (net) before a young
# collection. A 48-disk scrape builds and frees thousands (samples, label dicts) that
# reference counting frees alone, yet at the default 700 they set off young collections, and
# every few scrapes a full one through the ~47,000 objects of the imports (pydantic, aiohttp):
# ~1.0-1.9 ms of GC per scrape, ~0.01 ms at 5,000, measured in-process (docs/benchmarks.md,
# issue 35). No gc.freeze() as well: it gains nothing measurable more, and what start-up
# leaves and later drops in cycles would never be freed.
GC_THRESHOLD = 5000


def raise_gc_threshold() -> None:
    """The young generation's threshold to GC_THRESHOLD, the older ones as they are."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, older, oldest)


def run(
    cfg: AgentConfig,
    web: WebConfig | None,
    stop: threading.Event | None = None,
    *,
    own_process: bool = False,
    blockio_core: CoreLoad | None = None,
) -> int:
    """Start the exporters and the endpoint, serve until SIGINT/SIGTERM (or stop is set).

    own_process (`wattbit agent`): the process is the agent's alone, so its malloc arenas and
    GC are set for it; a caller running the agent in its own process (tests) keeps them.
    blockio_core: blockio's core backend being built since before the imports (early.start).
    """
    if own_process:
        limit_malloc_arenas()
    try:
        exporters = build_exporters(cfg, start=False, blockio_core=blockio_core)
    finally:
        if blockio_core is not None:
            blockio_core.close()  # not taken (blockio failed otherwise): freed
    if cfg.drop_capabilities:
        log.info(drop_after_start(exporters))
    start_exporters(exporters)
    if own_process:
        raise_gc_threshold()
    try:
        return serve(
            "wattbit agent",
            cfg,
            web,
            exporters,
            serving=lambda url: log.info("serving %s/metrics", url),
            stop=stop,
        )
    except ListenError as exc:
        raise StartupError(
            f"cannot listen on {cfg.listen.host}:{cfg.listen.port}: {exc.strerror}"
        ) from exc
