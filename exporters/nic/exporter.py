"""The nic exporter: interface, queue, IRQ/CPU, softnet and TCP counters, and where NICs sit."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs.interrupts import (
    Interrupts,
    InterruptsParser,
    cpu_interrupts,
    irq_affinity,
)
from exporters.hostfs.netdevs import NIC_EXCLUDE, wanted_interfaces
from exporters.hostfs.read import PROC_ROOT, SYS_ROOT, HeldAttrs, listing, read_attr, read_proc

from .ethtool import Ethtool, QueueStat, queue_stats
from .links import LinkStats, read_link
from .procfs import SoftnetRow, irq_queue, parse_snmp, parse_softirqs, parse_softnet_stat
from .qstats import NetdevQstats, QstatsUnavailable
from .sysfs import NicInfo, nic_info

log = logging.getLogger(__name__)


class QueueReader(Protocol):
    """Reads a driver's ethtool statistics and identity."""

    def read_stats(self, ifname: str) -> list[tuple[str, int]]:
        """(name, value) pairs; OSError when the driver has none."""
        ...

    def driver_info(self, ifname: str) -> tuple[str, str, str]:
        """(driver, version, bus_info); OSError when unsupported."""
        ...

    def close(self) -> None:
        """Release the socket."""
        ...


class QstatsReader(Protocol):
    """Reads every device's per-queue counters from the kernel's netdev netlink family."""

    def read(self) -> dict[int, list[QueueStat]]:
        """ifindex -> per-queue counters; QstatsUnavailable (an OSError) when unsupported."""
        ...

    def close(self) -> None:
        """Release the socket."""
        ...


@dataclass(frozen=True)
class NicIrq:
    """One queue interrupt of a NIC."""

    interface: str
    irq: str
    kind: str  # rx, tx, combined
    queue: int
    counts: dict[int, int]  # cpu -> interrupts
    affinity: str
    effective: str


@dataclass
class NicSnapshot:
    """Everything one scrape read, ready to render (pure data, built from /proc and /sys)."""

    links: list[LinkStats]
    infos: dict[str, NicInfo]
    queues: dict[str, list[QueueStat]] = field(default_factory=dict)
    irqs: list[NicIrq] = field(default_factory=list)
    softirqs: dict[str, dict[int, int]] = field(default_factory=dict)
    softnet: list[SoftnetRow] = field(default_factory=list)
    snmp: dict[str, dict[str, int]] = field(default_factory=dict)
    # interface -> bytes/s from nic.link_speeds (they replace the kernel's speed)
    configured_speeds: dict[str, float] = field(default_factory=dict)


def nic_irqs(
    interrupts: Interrupts,
    infos: dict[str, NicInfo],
    affinity: Callable[[str], tuple[str, str]],
) -> list[NicIrq]:
    """The queue interrupts of each NIC: its PCI function's MSI vectors, else by IRQ name."""
    out = []
    for name, info in infos.items():
        if info.msi_irqs:
            rows = [interrupts.rows[i] for i in info.msi_irqs if i in interrupts.rows]
        else:
            # Without an MSI list (legacy or virtual), drivers name queue IRQs after the
            # interface: "eth2-TxRx-3", "i40e-eth2-TxRx-3".
            pat = re.compile(rf"(^|-){re.escape(name)}-")
            rows = [r for r in interrupts.rows.values() if r.irq.isdigit() and pat.search(r.name)]
        for row in rows:
            q = irq_queue(row.name)
            if q is None:
                continue  # link, async, config, mailbox: not a queue
            allowed, effective = affinity(row.irq)
            counts = dict(zip(interrupts.cpus, row.counts, strict=False))
            out.append(NicIrq(name, row.irq, q[0], q[1], counts, allowed, effective))
    return out


# TCP counters of /proc/net/snmp (Tcp, RFC 4022) and /proc/net/netstat (TcpExt):
# metric -> (help, label names, [(section, field, label values)])
_TCP: dict[str, tuple[str, list[str], list[tuple[str, str, list[str]]]]] = {
    "wattbit_tcp_segments": (
        "TCP segments received (in) and sent (out).",
        ["direction"],
        [("Tcp", "InSegs", ["in"]), ("Tcp", "OutSegs", ["out"])],
    ),
    "wattbit_tcp_retransmitted_segments": (
        "TCP segments retransmitted.",
        [],
        [("Tcp", "RetransSegs", [])],
    ),
    "wattbit_tcp_in_errors": ("TCP segments received in error.", [], [("Tcp", "InErrs", [])]),
    "wattbit_tcp_timeouts": ("TCP retransmission timeouts.", [], [("TcpExt", "TCPTimeouts", [])]),
    "wattbit_tcp_syn_retransmits": (
        "SYN and SYN/ACK retransmits.",
        [],
        [("TcpExt", "TCPSynRetrans", [])],
    ),
    "wattbit_tcp_listen_drops": (
        "Connections dropped at a listening socket.",
        [],
        [("TcpExt", "ListenDrops", [])],
    ),
}


# The groups _TCP reads: only they are parsed at a scrape.
TCP_GROUPS = frozenset(section for _, _, sources in _TCP.values() for section, _, _ in sources)


def _add(family: CounterMetricFamily, labels: list[str], *counters: int | None) -> None:
    """One sample, the sum of counters; none at all when any of them is unknown (None)."""
    known = [c for c in counters if c is not None]
    if len(known) == len(counters):  # a sum with a part left out would be a made-up value
        family.add_metric(labels, float(sum(known)))


def render(snap: NicSnapshot) -> Iterator[Metric]:
    """The nic metric families of one snapshot (pure)."""
    yield from _interface_families(snap)
    yield from _queue_families(snap)
    yield from _irq_families(snap)
    yield from _softnet_families(snap)
    yield from _tcp_families(snap)


def _interface_families(snap: NicSnapshot) -> Iterator[Metric]:
    """Per-interface counters, link speed and wattbit_nic_info."""
    lab = ["interface", "direction"]
    fams = {
        "bytes": CounterMetricFamily(
            "wattbit_nic_bytes", "Bytes through the interface.", labels=lab
        ),
        "packets": CounterMetricFamily(
            "wattbit_nic_packets", "Packets through the interface.", labels=lab
        ),
        "drops": CounterMetricFamily(
            "wattbit_nic_drops",
            "Packets dropped (rx: rx_dropped + rx_missed_errors, as /proc/net/dev adds them).",
            labels=lab,
        ),
        "errors": CounterMetricFamily("wattbit_nic_errors", "Packets in error.", labels=lab),
    }
    missed = CounterMetricFamily(
        "wattbit_nic_rx_missed",
        "Packets the NIC dropped for lack of receive buffers (rx_missed_errors; part of drops).",
        labels=["interface"],
    )
    speed = GaugeMetricFamily(
        "wattbit_nic_link_speed_bytes_per_second",
        "Link speed: the agent's nic.link_speeds (source=config), else the negotiated speed "
        "(source=kernel); absent when neither says.",
        labels=["interface", "source"],
    )
    info = GaugeMetricFamily(
        "wattbit_nic_info",
        "Where the interface sits: driver, PCI address, NUMA node, MTU, operstate.",
        labels=["interface", "driver", "pci", "numa_node", "mtu", "operstate"],
    )
    for link in sorted(snap.links, key=lambda link: link.name):
        n = link.name
        g = link.get
        for d in ("rx", "tx"):
            _add(fams["bytes"], [n, d], g(f"{d}_bytes"))
            _add(fams["packets"], [n, d], g(f"{d}_packets"))
            _add(fams["errors"], [n, d], g(f"{d}_errors"))
        _add(fams["drops"], [n, "rx"], g("rx_dropped"), g("rx_missed_errors"))
        _add(fams["drops"], [n, "tx"], g("tx_dropped"))
        _add(missed, [n], g("rx_missed_errors"))
        ni = snap.infos.get(n)
        # the operator's figure wins: the rate a shaper holds the link to is the one that
        # counts, and a virtual interface's "speed" is made up (veth says 10000 Mb/s whatever
        # it carries: drivers/net/veth.c, veth_get_link_ksettings)
        if n in snap.configured_speeds:
            speed.add_metric([n, "config"], snap.configured_speeds[n])
        elif ni and ni.speed_bytes:
            speed.add_metric([n, "kernel"], ni.speed_bytes)
        driver = (ni.driver if ni else "") or link.kind
        pci, numa = (ni.pci, ni.numa_node) if ni else ("", "")
        info.add_metric([n, driver, pci, numa, str(link.mtu), link.operstate], 1.0)
    yield from fams.values()
    yield from (missed, speed, info)


def _queue_families(snap: NicSnapshot) -> Iterator[Metric]:
    """Per-queue bytes and packets."""
    qlab = ["interface", "queue", "direction"]
    qfams = {
        "bytes": CounterMetricFamily(
            "wattbit_nic_queue_bytes",
            "Bytes per NIC queue (kernel queue stats, else driver ethtool statistics).",
            labels=qlab,
        ),
        "packets": CounterMetricFamily(
            "wattbit_nic_queue_packets",
            "Packets per NIC queue (kernel queue stats, else driver ethtool statistics).",
            labels=qlab,
        ),
    }
    for ifname in sorted(snap.queues):
        for q in snap.queues[ifname]:
            qfams[q.kind].add_metric([ifname, str(q.queue), q.direction], float(q.value))
    yield from qfams.values()


def _irq_families(snap: NicSnapshot) -> Iterator[Metric]:
    """The queue interrupts: their affinities, totals and per-CPU counts."""
    irq_info = GaugeMetricFamily(
        "wattbit_nic_irq_info",
        "A NIC queue interrupt: the CPUs it may run on (affinity) and does (effective).",
        labels=["interface", "irq", "queue", "type", "affinity", "effective_affinity"],
    )
    irq_total = CounterMetricFamily(
        "wattbit_nic_queue_interrupts",
        "Interrupts of one NIC queue, all CPUs together.",
        labels=["interface", "irq", "queue", "type"],
    )
    for irq in sorted(snap.irqs, key=lambda i: (i.interface, i.queue, i.kind)):
        lv = [irq.interface, irq.irq, str(irq.queue), irq.kind]
        irq_info.add_metric([*lv, irq.affinity, irq.effective], 1.0)
        irq_total.add_metric(lv, float(sum(irq.counts.values())))
    cpu_irqs = cpu_interrupts(
        "wattbit_nic_cpu_interrupts",
        "Interrupts of a NIC's queues taken by each CPU (CPUs that took none are left out).",
        "interface",
        ((irq.interface, irq.counts) for irq in snap.irqs),
    )
    yield from (irq_info, irq_total, cpu_irqs)


def _softnet_families(snap: NicSnapshot) -> Iterator[Metric]:
    """Network softirqs and the softnet backlog counters per CPU."""
    softirq = CounterMetricFamily(
        "wattbit_cpu_softirqs", "Network softirqs run on each CPU.", labels=["cpu", "type"]
    )
    for kind in ("NET_RX", "NET_TX"):
        for cpu, c in sorted(snap.softirqs.get(kind, {}).items()):
            softirq.add_metric([str(cpu), kind.lower()], float(c))
    yield softirq
    sn = {
        "processed": CounterMetricFamily(
            "wattbit_softnet_processed",
            "Packets processed by the CPU's backlog/NAPI.",
            labels=["cpu"],
        ),
        "dropped": CounterMetricFamily(
            "wattbit_softnet_dropped",
            "Packets dropped: the CPU's backlog was full.",
            labels=["cpu"],
        ),
        "time_squeeze": CounterMetricFamily(
            "wattbit_softnet_times_squeezed",
            "Times net_rx_action ran out of budget or time with work left (a saturated core).",
            labels=["cpu"],
        ),
    }
    for row in sorted(snap.softnet, key=lambda r: r.cpu):
        for attr, fam in sn.items():
            fam.add_metric([str(row.cpu)], float(getattr(row, attr)))
    yield from sn.values()


def _tcp_families(snap: NicSnapshot) -> Iterator[Metric]:
    """The TCP counters of /proc/net/snmp and netstat this kernel has."""
    for metric, (doc, labels, sources) in _TCP.items():
        fam = CounterMetricFamily(metric, doc, labels=labels)
        for section, key, values in sources:
            value = snap.snmp.get(section, {}).get(key)
            if value is not None:  # absent on a kernel that lacks it, never a fake 0
                fam.add_metric(values, float(value))
        if fam.samples:
            yield fam


class NicExporter(Exporter):
    """Reads netlink, ethtool, /proc and /sys on each scrape."""

    name = "nic"

    def __init__(
        self,
        exclude: str = NIC_EXCLUDE,
        queues: bool = True,
        info_refresh: float = 60.0,
        link_speeds: dict[str, float] | None = None,
        sys_root: Path = SYS_ROOT,
        proc_root: Path = PROC_ROOT,
        ethtool: QueueReader | None = None,
        qstats: QstatsReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exclude = re.compile(exclude) if exclude else None
        self.ethtool = ethtool or Ethtool()
        # netlink speaks for the running kernel: its ifindexes only match the live /sys
        if qstats is None and sys_root == SYS_ROOT:
            qstats = NetdevQstats()
        self.qstats = qstats
        self._qstats_unavailable = ""
        self.queues = queues
        self.sys_root = sys_root
        self.proc_root = proc_root
        self.info_refresh = info_refresh
        # bits/s as configured -> bytes/s as exported
        self.configured_speeds = {k: v / 8 for k, v in (link_speeds or {}).items()}
        self._clock = clock
        self._infos: dict[str, tuple[float, NicInfo]] = {}
        self._no_queue_stats: dict[str, float] = {}
        # The live /sys's counters through held descriptors (hostfs.HeldAttrs), forgotten
        # whenever class/net's entries change (an interface came, went or was renamed).
        self._held = HeldAttrs() if sys_root == SYS_ROOT else None
        self._interrupts = InterruptsParser()  # unchanged rows not parsed again (issue 35)
        self._listing: frozenset[tuple[str, int]] | None = None

    def close(self) -> None:
        """Close the ethtool and netlink sockets and the held /sys descriptors."""
        if self._held is not None:
            self._held.close()
        self.ethtool.close()
        if self.qstats is not None:
            self.qstats.close()

    def _info(self, name: str, now: float) -> NicInfo:
        cached = self._infos.get(name)
        if cached is None or now - cached[0] > self.info_refresh:
            info = nic_info(self.sys_root, name)
            if not info.driver:
                # Virtual interfaces have no device link; the driver still names itself to
                # ethtool (veth, bonding, bridge, vxlan).
                with contextlib.suppress(OSError):
                    info = dataclasses.replace(info, driver=self.ethtool.driver_info(name)[0])
            cached = (now, info)
            self._infos[name] = cached
        return cached[1]

    def _all_qstats(self) -> dict[int, list[QueueStat]]:
        """Every device's netlink queue counters, or {} where the kernel has none."""
        if not self.queues or self.qstats is None or self._qstats_unavailable:
            return {}
        try:
            return self.qstats.read()
        except QstatsUnavailable as exc:
            # an older kernel: say so once and stay with ethtool for good
            self._qstats_unavailable = exc.strerror or str(exc)
            log.info("nic: %s; per-queue counters come from ethtool only", exc.strerror)
        except OSError as exc:  # a transient failure: ethtool this scrape, netlink next
            log.debug("nic: qstats-get failed: %s", exc)
        return {}

    def _queues(self, name: str, now: float, from_netlink: list[QueueStat]) -> list[QueueStat]:
        if not self.queues:
            return []
        # The kernel's standard per-queue counters, where the driver gives them; ethtool's
        # free-form names otherwise (older kernels, drivers that never moved).
        if from_netlink:
            return from_netlink
        # Drivers without statistics answer EOPNOTSUPP every time: ask again only at refresh.
        if now - self._no_queue_stats.get(name, float("-inf")) < self.info_refresh:
            return []
        try:
            return queue_stats(self.ethtool.read_stats(name))
        except OSError:
            self._no_queue_stats[name] = now
            return []

    def _text(self, rel: str) -> str:
        return read_proc(self.proc_root / rel)

    def _reader(self) -> Callable[[str], str]:
        """How this scrape reads /sys attributes: held descriptors on the live /sys."""
        if self._held is None:
            return read_attr
        now = listing(self.sys_root / "class" / "net")
        if now != self._listing:
            self._held.clear()
            self._listing = now
        return self._held.read

    def snapshot(self) -> NicSnapshot:
        """Read every source once."""
        now = self._clock()
        read = self._reader()
        links = [
            link
            for n in wanted_interfaces(self.sys_root, self.exclude, read)
            if (link := read_link(self.sys_root, n, read))
        ]
        names = {link.name for link in links}
        self._infos = {n: v for n, v in self._infos.items() if n in names}  # gone: forget
        self._no_queue_stats = {n: t for n, t in self._no_queue_stats.items() if n in names}
        infos = {link.name: self._info(link.name, now) for link in links}
        qstats = self._all_qstats()
        interrupts = self._interrupts.parse(self._text("interrupts"))
        snmp = parse_snmp(self._text("net/snmp"), TCP_GROUPS)
        snmp.update(parse_snmp(self._text("net/netstat"), TCP_GROUPS))
        return NicSnapshot(
            links=links,
            infos=infos,
            queues={
                link.name: q
                for link in sorted(links, key=lambda link: link.name)
                if (q := self._queues(link.name, now, qstats.get(link.index, [])))
            },
            irqs=nic_irqs(interrupts, infos, lambda irq: irq_affinity(self.proc_root, irq)),
            softirqs=parse_softirqs(self._text("softirqs")),
            softnet=parse_softnet_stat(self._text("net/softnet_stat"), interrupts.cpus),
            snmp=snmp,
            configured_speeds=self.configured_speeds,
        )

    def collect(self) -> Iterator[Metric]:
        """Read and render."""
        yield from render(self.snapshot())


__all__: Sequence[str] = ("NicExporter", "NicSnapshot", "render")
