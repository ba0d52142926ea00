"""A large host and a site's fleet, synthetic: content for the renderers and the stores.

``SyntheticBlockio``, ``SyntheticNic`` and ``SyntheticPcie`` render, through the exporters' own
render(), fixed content of a large host (NVMe-like disks with every histogram filled, NICs with
their queues and IRQs, the PCIe links of HBAs and NICs); ``record_exposition`` is such a host's
/metrics through the agent's own registry and renderer, and ``Exposition`` serves it with its
counters moving. The configurations are a simulated site's: Prometheus scraping the hosts, a
collector polling the PDUs. Used by bench/agent_scrape.py, bench/http_scrape.py and
bench/fleet/, and by the tests of the exposition (tests/unit/test_exposition.py,
tests/unit/test_fleet_sim.py). Nothing here is a recording of a real machine."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.blockio.diskinfo import disk_info_metric
from exporters.blockio.exporter import render
from exporters.blockio.model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    OPS,
    SIZE_SLOTS,
    DeviceStats,
    OpStats,
)
from exporters.hostfs.blockdevs import DiskInfo
from exporters.nic.ethtool import QueueStat
from exporters.nic.exporter import NicIrq, NicSnapshot
from exporters.nic.exporter import render as render_nic
from exporters.nic.links import LinkStats
from exporters.nic.procfs import SoftnetRow
from exporters.nic.sysfs import NicInfo
from exporters.pcie.exporter import ControllerIrq, PcieSnapshot
from exporters.pcie.exporter import render as render_pcie
from exporters.pcie.links import Link, Node

ROOT = Path(__file__).resolve().parents[2]
RULES = [ROOT / "alerts" / "wattbit-recording.yml", ROOT / "alerts" / "wattbit-alerts.yml"]
TOKEN = "fleetbench-token-0123456789abcdef"


def synthetic_devices(
    n: int, ops_done: tuple[str, ...] = OPS, size_histogram: bool = True, seed: int = 1
) -> dict[str, DeviceStats]:
    """n NVMe-like disks, the given ops with traffic, histograms filled across all slots."""
    rnd = random.Random(seed)
    devices = {}
    for i in range(n):
        ops = {}
        for op in ops_done:
            lat = [rnd.randrange(0, 10**9) for _ in range(len(DEFAULT_LAT_BOUNDS_SECONDS) + 1)]
            size = [rnd.randrange(0, 10**9) for _ in range(SIZE_SLOTS)] if size_histogram else None
            ops[op] = OpStats(
                ios=sum(lat),
                bytes=rnd.randrange(10**15),
                errors=rnd.randrange(3),
                lat_slots=lat,
                lat_sum_seconds=rnd.random() * 1e6,
                size_slots=size,
                size_sum_bytes=rnd.randrange(10**15),
            )
        devices[f"nvme{i}n1"] = DeviceStats(
            ops=ops, busy_seconds=rnd.random() * 1e6, inflight=3, clock="device"
        )
    return devices


class SyntheticBlockio(Exporter):
    """The blockio exporter's rendering over fixed synthetic content (no kernel involved)."""

    name = "blockio"

    def __init__(
        self, n: int, ops_done: tuple[str, ...] = OPS, size_histogram: bool = True
    ) -> None:
        self.devices = synthetic_devices(n, ops_done, size_histogram)
        self.infos = [
            DiskInfo(
                name,
                259,
                i,
                "SAMSUNG MZQL23T8HCLS-00A07",
                f"S64HNE0R{i:06d}",
                f"0000:{0x40 + i // 8:02x}:00.0",
                str(i // 24),
                "0",
                "",
                3840755982336,
            )
            for i, name in enumerate(self.devices)
        ]

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its maps."""
        yield from render(
            self.devices, "core", "", {"complete": 0}, prog_stats={"complete": (10**9, 10**7)}
        )
        yield disk_info_metric(self.infos)


class SyntheticNic(Exporter):
    """The nic exporter's rendering of n NICs x q queues on c CPUs, IRQs spread over CPUs."""

    name = "nic"

    def __init__(self, nics: int, queues: int, cpus: int) -> None:
        rnd = random.Random(2)
        links, infos, qstats, irqs = [], {}, {}, []
        counters = ("bytes", "packets", "errors", "dropped", "missed_errors")
        for i in range(nics):
            name = f"ens{i}f0np0"
            stats = {f"{d}_{k}": rnd.randrange(10**12) for d in ("rx", "tx") for k in counters}
            links.append(LinkStats(name, i + 2, 9000, "up", "", stats=stats))
            pci = f"0000:{0x3B + i:02x}:00.0"
            infos[name] = NicInfo(name, "mlx5_core", pci, str(i % 2), 12.5e9, ())
            qstats[name] = [
                QueueStat(d, q, k, rnd.randrange(10**12))
                for q in range(queues)
                for d in ("rx", "tx")
                for k in ("bytes", "packets")
            ]
            for q in range(queues):
                cpu = (i * queues + q) % cpus
                irqs.append(
                    NicIrq(
                        name,
                        str(100 + i * queues + q),
                        "combined",
                        q,
                        {c: (rnd.randrange(10**9) if c == cpu else 0) for c in range(cpus)},
                        str(cpu),
                        str(cpu),
                    )
                )
        self.snapshot = NicSnapshot(
            links=links,
            infos=infos,
            queues=qstats,
            irqs=irqs,
            softirqs={
                k: {c: rnd.randrange(10**9) for c in range(cpus)} for k in ("NET_RX", "NET_TX")
            },
            softnet=[SoftnetRow(c, rnd.randrange(10**9), 0, 5, 0, 0) for c in range(cpus)],
            snmp={
                "Tcp": {"InSegs": 1, "OutSegs": 2, "RetransSegs": 3, "InErrs": 0},
                "TcpExt": {"TCPTimeouts": 1, "TCPSynRetrans": 0, "ListenDrops": 0},
            },
        )

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its sources."""
        yield from render_nic(self.snapshot)


class SyntheticPcie(Exporter):
    """The pcie exporter's rendering: 48 disks' links behind 3 HBAs, NIC functions two per
    card, each card in its own root port, one MSI-X vector per CPU per HBA."""

    name = "pcie"

    def __init__(self, disks: int, nics: int, cpus: int, hbas: int = 3) -> None:
        nodes: dict[str, Node] = {}
        links: dict[str, Link] = {}

        def add(pci: str, role: str, upstream: str, root: str, speed: float, width: int) -> None:
            nodes[pci] = Node(pci, (), role, upstream, root, "d", role == "root_port", speed, width)
            links[pci] = Link(speed, width, speed, width, speed * width / 8 * 128 / 130, False)

        irqs = []
        for h in range(hbas):
            port, hba = f"0000:00:{h + 1:02x}.0", f"0000:{h + 1:02x}:00.0"
            add(port, "root_port", "", port, 8e9, 16)
            add(hba, "controller", port, port, 8e9, 8)
            for c in range(cpus):
                irqs.append(ControllerIrq(hba, str(100 + h * cpus + c), {c: 10**6}, str(c), str(c)))
        for n in range(nics):
            port = f"0000:80:{n // 2 + 1:02x}.0"
            if port not in nodes:
                add(port, "root_port", "", port, 16e9, 16)
            add(f"0000:{0x81 + n // 2:02x}:00.{n % 2}", "nic", port, port, 16e9, 16)
        rates = [(f"sd{i}", "sas", 12e9) for i in range(disks)]
        self.snapshot = PcieSnapshot(nodes, links, rates, irqs)

    def collect(self) -> Iterator[Metric]:
        """Render as the real exporter does after reading its sources."""
        yield from render_pcie(self.snapshot)


# --- a fleet of such hosts ---------------------------------------------------------------


def record_exposition(disks: int, nics: int, queues: int, cpus: int, all_ops: bool = False) -> str:
    """A host's /metrics as the agent renders it by default, over this module's synthetic
    content: every disk reading and writing (all_ops: all four ops and the size histogram,
    the exposition before issue 15's series budget)."""
    from collector.daemon.serve import build_registry
    from collector.web.exposition import TextRenderer

    registry = build_registry(
        [
            SyntheticBlockio(disks)
            if all_ops
            else SyntheticBlockio(disks, ("read", "write"), size_histogram=False),
            SyntheticNic(nics, queues, cpus),
        ]
    )
    return TextRenderer(registry).render().decode()


def series_of(text: str) -> int:
    """Sample lines in an exposition."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


# Counters of trouble (I/O and NIC errors, drops, retransmits, timeouts): served as 0 and
# still, as on a healthy fleet. Moving, they would fire WattbitDiskErrors, WattbitNicDrops, ...
# for every disk and NIC of every host, and the alerts group would measure templating
# thousands of alerts instead of evaluating the rules.
TROUBLE = re.compile(r"error|drop|retrans|missed|timeout|squeez")


class Exposition:
    """The recorded text with its counters (and histograms, summaries' sums and counts) moving.

    Each moving sample advances by a fixed step per second: integers by an integer (1 per
    million of its value, at least 1, so histogram buckets stay cumulative: the step grows
    with the value), floats by a millionth of theirs. Gauges stay as recorded; counters of
    trouble (TROUBLE) are 0.
    """

    def __init__(self, text: str) -> None:
        self.parts: list[str] = []
        self.moving: list[tuple[int, float, float, bool]] = []  # slot, start, step, integral
        kind = "untyped"
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                kind = line.split(" ")[3]
            if not line or line.startswith("#"):
                self.parts.append(line + "\n")
                continue
            head, _, value = line.rpartition(" ")
            name = head.split("{", 1)[0]
            v0 = float(value)
            if kind == "counter" and TROUBLE.search(name):
                self.parts.append(f"{head} 0\n")
                continue
            moves = kind in ("counter", "histogram") or (
                kind == "summary" and name.endswith(("_sum", "_count"))
            )
            if not moves or not math.isfinite(v0):
                self.parts.append(line + "\n")
                continue
            self.parts.append(head + " ")
            integral = v0.is_integer() and abs(v0) < 2**53
            step = float(max(1, int(v0) // 1_000_000)) if integral else max(abs(v0) * 1e-6, 1e-3)
            self.moving.append((len(self.parts), v0, step, integral))
            self.parts.append("")
        self._cache: tuple[int, bytes] = (-1, b"")

    def body(self, second: int) -> bytes:
        """The exposition `second` seconds after the start (cached for that second)."""
        if self._cache[0] == second:
            return self._cache[1]
        parts = self.parts.copy()
        for slot, v0, step, integral in self.moving:
            v = v0 + step * second
            parts[slot] = f"{int(v)}\n" if integral else f"{v!r}\n"
        body = "".join(parts).encode()
        self._cache = (second, body)
        return body


# --- a simulated site's configuration ---------------------------------------------------


def host_name(i: int) -> str:
    """The i-th simulated host (0-based)."""
    return f"mover{i + 1:03d}"


def scrape_config(ports: list[int], collector: int, interval: float) -> str:
    """The scrape jobs (Prometheus and vmagent alike): deploy/prometheus's, on loopback ports."""
    lines = [
        f"  - job_name: wattbit-agent\n    scrape_interval: {interval:g}s\n"
        f"    scrape_timeout: {interval:g}s\n    static_configs:"
    ]
    for i, port in enumerate(ports):
        lines.append(
            f'      - targets: ["127.0.0.1:{port}"]\n        labels: {{host: {host_name(i)}}}'
        )
    lines.append(
        f"  - job_name: wattbit-collector\n    honor_labels: true\n"
        f"    scrape_interval: {interval:g}s\n    static_configs:\n"
        f'      - targets: ["127.0.0.1:{collector}"]'
    )
    return "\n".join(lines) + "\n"


def prometheus_yml(ports: list[int], collector: int, interval: float) -> str:
    """Prometheus: the scrape jobs and wattbit's two rule files at the scrape interval."""
    rules = "\n".join(f"  - {r}" for r in RULES)
    return (
        f"global:\n  scrape_interval: {interval:g}s\n  evaluation_interval: {interval:g}s\n"
        f"rule_files:\n{rules}\nscrape_configs:\n{scrape_config(ports, collector, interval)}"
    )


def collector_yml(
    pdu_ports: list[int], hosts: int, per_pdu: int, interval: float, state: Path
) -> str:
    """A real collector polling the simulated PDUs: outlets 1-10 feed the PDU's five hosts."""
    lines = [
        f"interval: {interval:g}s",
        f"state_dir: {state}",
        "auths:\n  sim: {version: 2c, community: public}",
        f"runs:\n  token: {TOKEN}",
        "pdus:",
    ]
    for j, port in enumerate(pdu_ports):
        lines += [
            f"  - name: pdu{j + 1:03d}",
            f'    address: "127.0.0.1:{port}"',
            "    auth: sim\n    profile: apc_rpdu2\n    outlets:",
        ]
        for k in range(per_pdu):
            if j * per_pdu + k < hosts:
                lines.append(
                    f"      - {{index: [{2 * k + 1}, {2 * k + 2}], "
                    f"host: {host_name(j * per_pdu + k)}, component: server}}"
                )
        lines.append("      - {name: '.', component: spare}")
    return "\n".join(lines) + "\n"
