"""The pcie exporter: PCIe links of storage controllers and NICs, the bridges above them, the
disks' SATA/SAS link rates, and which CPUs take the storage controllers' interrupts.

docs/exporters/pcie.md is the contract. Which devices: the controllers of the disks blockio
exports and the PCI functions of the interfaces the nic exporter exports, found with the same
readers of the host as those exporters (exporters/hostfs: the disks' topology, the interfaces,
/proc/interrupts) and the same exclude patterns. The chains, the files to read and the IRQ
affinities are cached until the topology changes or pcie.refresh passes; current link state,
link rates and the controllers' rows of /proc/interrupts are read every scrape.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE, SharedTopology, excluded
from exporters.hostfs.interrupts import (
    Interrupts,
    InterruptsParser,
    cpu_interrupts,
    irq_affinity,
)
from exporters.hostfs.netdevs import NIC_EXCLUDE, wanted_interfaces
from exporters.hostfs.pci import last_pci, msi_irqs
from exporters.hostfs.read import PROC_ROOT, SYS_ROOT, read_proc
from exporters.hostfs.tree import attr_in, resolve_in

from .disklinks import DiskLink, disk_link, read_rate
from .links import Link, Node, read_chains, read_links, topology_names


@dataclass(frozen=True)
class ControllerIrq:
    """One interrupt of a storage controller this scrape."""

    controller: str
    irq: str
    counts: dict[int, int]  # cpu -> interrupts
    affinity: str
    effective: str


@dataclass
class PcieSnapshot:
    """Everything one scrape read, ready to render (pure data)."""

    nodes: dict[str, Node]
    links: dict[str, Link]
    disk_rates: list[tuple[str, str, float]] = field(default_factory=list)  # device, transport
    irqs: list[ControllerIrq] = field(default_factory=list)


@dataclass
class _Topology:
    """What is cached between refreshes."""

    names: tuple[str, ...]
    read_at: float
    nodes: dict[str, Node]
    disk_links: list[DiskLink]
    controller_irqs: dict[str, tuple[str, ...]]  # controller -> its IRQ numbers
    # IRQ -> (affinity, effective): read once per refresh. Two files per vector would be most
    # of a scrape on a many-CPU host (bench/pcie_read.py); where the interrupts land each
    # scrape is in the per-CPU counts, the info's labels follow within pcie.refresh.
    affinities: dict[str, tuple[str, str]] = field(default_factory=dict)


def _cut(path: tuple[str, ...] | None, pci: str) -> tuple[str, ...] | None:
    """path up to its last component named pci, None if pci is not on it."""
    if path is None:
        return None
    for i in range(len(path) - 1, -1, -1):
        if path[i] == pci:
            return path[: i + 1]
    return None


def controller_irqs(
    interrupts: Interrupts,
    wanted: dict[str, tuple[str, ...]],
    affinity: Callable[[str], tuple[str, str]],
) -> list[ControllerIrq]:
    """The interrupts of each controller found in /proc/interrupts, with their affinities."""
    out = []
    for controller, irqs in sorted(wanted.items()):
        for irq in irqs:
            row = interrupts.rows.get(irq)
            if row is None or len(row.counts) != len(interrupts.cpus):
                continue  # gone meanwhile, or an arch row that is not this IRQ
            allowed, effective = affinity(irq)
            counts = dict(zip(interrupts.cpus, row.counts, strict=True))
            out.append(ControllerIrq(controller, irq, counts, allowed, effective))
    return out


def render(snap: PcieSnapshot) -> Iterator[Metric]:
    """The pcie metric families of one snapshot (pure)."""
    info = GaugeMetricFamily(
        "wattbit_pcie_link_info",
        "A PCI function of a storage controller's or NIC's chain up to the root complex.",
        labels=["pci", "role", "upstream", "root", "driver"],
    )
    lab = ["pci"]
    gauges = {
        "speed": GaugeMetricFamily(
            "wattbit_pcie_link_current_transfers_per_second",
            "Current PCIe link speed (transfers/s).",
            labels=lab,
        ),
        "max_speed": GaugeMetricFamily(
            "wattbit_pcie_link_max_transfers_per_second",
            "Maximum PCIe link speed of this function (transfers/s).",
            labels=lab,
        ),
        "width": GaugeMetricFamily(
            "wattbit_pcie_link_current_width",
            "Current PCIe link width (lanes; 0: link down).",
            labels=lab,
        ),
        "max_width": GaugeMetricFamily(
            "wattbit_pcie_link_max_width", "Maximum PCIe link width of this function.", labels=lab
        ),
        "usable": GaugeMetricFamily(
            "wattbit_pcie_link_usable_bytes_per_second",
            "Payload bandwidth per direction at the current speed and width, after encoding.",
            labels=lab,
        ),
    }
    downgraded = GaugeMetricFamily(
        "wattbit_pcie_link_downgraded",
        "1 if the link trained below its maximum speed or width (docs/exporters/pcie.md).",
        labels=lab,
    )
    for address in sorted(snap.nodes):
        node = snap.nodes[address]
        info.add_metric([address, node.role, node.upstream, node.root, node.driver], 1.0)
        link = snap.links.get(address)
        if link is None:
            continue
        for attr, family in gauges.items():
            value = getattr(link, attr)
            if value is not None:
                family.add_metric([address], float(value))
        if link.downgraded is not None:
            downgraded.add_metric([address], 1.0 if link.downgraded else 0.0)
    yield info
    yield from gauges.values()
    yield downgraded

    rate = GaugeMetricFamily(
        "wattbit_disk_link_rate_bits_per_second",
        "Negotiated SATA/SAS line rate of the disk's link (bits/s, before 8b/10b).",
        labels=["device", "transport"],
    )
    for device, transport, bits in sorted(snap.disk_rates):
        rate.add_metric([device, transport], bits)
    yield rate

    irq_info = GaugeMetricFamily(
        "wattbit_controller_irq_info",
        "A storage controller's interrupt: the CPUs it may run on and does (effective).",
        labels=["controller", "irq", "affinity", "effective_affinity"],
    )
    for irq in snap.irqs:
        irq_info.add_metric([irq.controller, irq.irq, irq.affinity, irq.effective], 1.0)
    yield irq_info
    yield cpu_interrupts(
        "wattbit_controller_cpu_interrupts",
        "Interrupts of a storage controller taken by each CPU (CPUs that took none left out).",
        "controller",
        ((irq.controller, irq.counts) for irq in snap.irqs),
    )


class PcieExporter(Exporter):
    """Caches the chains; reads link state, link rates and interrupts on each scrape."""

    name = "pcie"

    def __init__(
        self,
        block_exclude: str = BLOCK_EXCLUDE,
        nic_exclude: str = NIC_EXCLUDE,
        refresh: float = 60.0,
        controller_irqs: bool = True,
        sys_root: Path = SYS_ROOT,
        proc_root: Path = PROC_ROOT,
        clock: Callable[[], float] = time.monotonic,
        topology: SharedTopology | None = None,
    ) -> None:
        """topology: the block devices' topology shared with blockio (the agent's, issue 35);
        None: a read of its own each time."""
        self.block_exclude = re.compile(block_exclude)
        self.nic_exclude = re.compile(nic_exclude) if nic_exclude else None
        self.refresh = refresh
        self._with_irqs = controller_irqs
        self.sys_root = sys_root
        self._disks = topology if topology is not None else SharedTopology(sys_root, max_age=0.0)
        self.proc_root = proc_root
        self._clock = clock
        self._topology: _Topology | None = None
        self._interrupts = InterruptsParser()  # unchanged rows not parsed again (issue 35)

    def _devices(self) -> tuple[dict[str, str], dict[str, tuple[str, ...]], list[DiskLink]]:
        """{pci: role}, {pci: resolved path} and the disks' links, as the other exporters see."""
        roles: dict[str, str] = {}
        paths: dict[str, tuple[str, ...]] = {}
        disk_links: list[DiskLink] = []
        known: set[str] = set()  # the directories the devices' links lead through, each once
        for name, disk in self._disks.read().items():
            if excluded(self.block_exclude, disk):
                continue
            path = resolve_in(self.sys_root, ("class", "block", name), (), known)
            if disk.controller:
                roles[disk.controller] = "controller"
                hint = _cut(path, disk.controller)
                if hint is not None:
                    paths[disk.controller] = hint
            if not disk.parent and path is not None:
                link = disk_link(self.sys_root, name, path)
                if link is not None:
                    disk_links.append(link)
        for name in wanted_interfaces(self.sys_root, self.nic_exclude):
            # The PCI function nearest above the interface's device (virtio-net's device is
            # the virtio device under it), as nic_info finds it, but resolved inside the tree.
            hint = last_pci(resolve_in(self.sys_root, ("class", "net", name, "device"), (), known))
            if hint is not None and hint[-1] not in roles:
                roles[hint[-1]] = "nic"
                paths[hint[-1]] = hint
        return roles, paths, disk_links

    def _read_topology(self, names: tuple[str, ...], now: float) -> _Topology:
        roles, paths, disk_links = self._devices()
        nodes = read_chains(self.sys_root, roles, paths)
        irqs: dict[str, tuple[str, ...]] = {}
        for pci, node in nodes.items():
            if node.role != "controller" or not self._with_irqs:
                continue
            vectors = msi_irqs(self.sys_root.joinpath(*node.path))
            if not vectors:
                # legacy INTx: the function's one interrupt line ("0": none assigned); a line
                # shared with other devices counts their interrupts too
                line = attr_in(self.sys_root, node.path, "irq")
                if line.isascii() and line.isdigit() and line.lstrip("0"):
                    vectors = (line.lstrip("0"),)
            irqs[pci] = vectors
        return _Topology(names, now, nodes, disk_links, irqs)

    def _affinity(self, topo: _Topology, irq: str) -> tuple[str, str]:
        cached = topo.affinities.get(irq)
        if cached is None:
            cached = topo.affinities[irq] = irq_affinity(self.proc_root, irq)
        return cached

    def snapshot(self) -> PcieSnapshot:
        """Read what changes every scrape; re-read the chains when the topology changed."""
        now = self._clock()
        names = topology_names(self.sys_root)
        topo = self._topology
        if topo is None or topo.names != names or now - topo.read_at >= self.refresh:
            topo = self._topology = self._read_topology(names, now)
        rates = []
        for link in topo.disk_links:
            bits = read_rate(link)
            if bits is not None:
                rates.append((link.device, link.transport, bits))
        irqs: list[ControllerIrq] = []
        if any(topo.controller_irqs.values()):
            wanted = {irq for irqs in topo.controller_irqs.values() for irq in irqs}
            text = read_proc(self.proc_root / "interrupts")
            interrupts = self._interrupts.parse(text, only=wanted)
            irqs = controller_irqs(
                interrupts,
                topo.controller_irqs,
                lambda irq: self._affinity(topo, irq),
            )
        return PcieSnapshot(
            nodes=topo.nodes,
            links=read_links(self.sys_root, topo.nodes),
            disk_rates=rates,
            irqs=irqs,
        )

    def collect(self) -> Iterator[Metric]:
        """Read and render."""
        yield from render(self.snapshot())
