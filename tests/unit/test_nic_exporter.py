"""The nic exporter's rendering and IRQ mapping on captured /proc text (no kernel involved)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from realparts import parse_samples, sample

from exporters.base import ExportersCollector
from exporters.nic.exporter import NicExporter, NicSnapshot, nic_irqs, render
from exporters.nic.links import LinkStats, is_loopback, read_link
from exporters.nic.procfs import parse_interrupts, parse_snmp, parse_softnet_stat
from exporters.nic.sysfs import NicInfo

NIC = Path(__file__).resolve().parent.parent / "fixtures" / "proc" / "nic"


def _ixgbe_info(irqs: tuple[str, ...]) -> NicInfo:
    return NicInfo("eth2", "ixgbe", "0000:3b:00.0", "0", 1.25e9, irqs)


def _samples(snap: NicSnapshot) -> dict:
    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(render(snap))

    r = CollectorRegistry(auto_describe=False)
    r.register(One())
    return parse_samples(generate_latest(r).decode())


def test_ixgbe_queues_map_to_their_irqs_and_cpus() -> None:
    interrupts = parse_interrupts((NIC / "interrupts-4.18-ixgbe").read_text())
    # The PCI function's MSI vectors: every eth2 IRQ in the file (queues and the link IRQ).
    msi = tuple(r.irq for r in interrupts.rows.values() if r.name.startswith("eth2"))
    infos = {"eth2": _ixgbe_info(msi)}
    irqs = nic_irqs(interrupts, infos, lambda irq: ("0-7", "0"))
    assert len(irqs) == 16  # the link IRQ "eth2" is not a queue
    assert {i.queue for i in irqs} == set(range(16))
    q0 = next(i for i in irqs if i.queue == 0)
    assert (q0.irq, q0.kind, q0.counts[0]) == ("45", "combined", 48210937)


def test_name_fallback_without_msi_list() -> None:
    interrupts = parse_interrupts((NIC / "interrupts-4.18-ixgbe").read_text())
    irqs = nic_irqs(interrupts, {"eth2": _ixgbe_info(())}, lambda irq: ("", ""))
    assert len(irqs) == 16


def test_all_queues_on_cpu0_stands_out() -> None:
    """The dashboard case: every eth2 queue interrupt lands on CPU0."""
    header = "           CPU0       CPU1       CPU2       CPU3\n"
    rows = "".join(
        f" {60 + q}:   {1000 * (q + 1)}   0   0   0  IR-PCI-MSI 1572{q:03d}-edge  eth2-TxRx-{q}\n"
        for q in range(4)
    )
    interrupts = parse_interrupts(header + rows)
    infos = {"eth2": _ixgbe_info(tuple(str(60 + q) for q in range(4)))}
    snap = NicSnapshot(
        links=[LinkStats("eth2", 3, 9000, "up", "", stats={"tx_bytes": 10})],
        infos=infos,
        irqs=nic_irqs(interrupts, infos, lambda irq: ("0-3", "0")),
    )
    s = _samples(snap)
    assert sample(s, "wattbit_nic_cpu_interrupts_total", interface="eth2", cpu="0") == 10000
    # CPUs that took none have no series at all (bounded budget).
    assert not any(k[0] == "wattbit_nic_cpu_interrupts_total" and ("cpu", "1") in k[1] for k in s)
    assert (
        sample(
            s,
            "wattbit_nic_irq_info",
            interface="eth2",
            irq="60",
            queue="0",
            type="combined",
            affinity="0-3",
            effective_affinity="0",
        )
        == 1.0
    )
    assert sample(s, "wattbit_nic_link_speed_bytes_per_second", interface="eth2") == 1.25e9


def _fake_net(root: Path, name: str, flags: str, stats: dict[str, int], mtu: int = 9000) -> None:
    d = root / "class" / "net" / name
    (d / "statistics").mkdir(parents=True)
    for k, v in stats.items():
        (d / "statistics" / k).write_text(f"{v}\n")
    (d / "flags").write_text(flags + "\n")
    (d / "mtu").write_text(f"{mtu}\n")
    (d / "operstate").write_text("up\n")
    (d / "ifindex").write_text("7\n")


def test_link_counters_tcp_and_softnet(tmp_path: Path) -> None:
    _fake_net(
        tmp_path,
        "eth2",
        "0x1003",
        {
            "rx_bytes": 2**40,
            "tx_bytes": 5,
            "rx_dropped": 2,
            "rx_missed_errors": 3,
            "tx_dropped": 1,
            "rx_errors": 4,
        },
    )
    _fake_net(tmp_path, "lo", "0x9", {"rx_bytes": 1}, mtu=65536)
    eth2 = read_link(tmp_path, "eth2")
    assert eth2 is not None and not eth2.loopback and eth2.mtu == 9000
    assert is_loopback(tmp_path, "lo")
    assert read_link(tmp_path, "gone") is None
    snmp = parse_snmp((NIC / "snmp-4.18").read_text())
    snmp.update(parse_snmp((NIC / "netstat-4.18").read_text()))
    snap = NicSnapshot(
        links=[eth2],
        infos={},
        softnet=parse_softnet_stat((NIC / "softnet_stat-5.15-mlx5").read_text()),
        snmp=snmp,
    )
    s = _samples(snap)
    assert sample(s, "wattbit_nic_bytes_total", interface="eth2", direction="rx") == 2**40
    assert sample(s, "wattbit_nic_drops_total", interface="eth2", direction="rx") == 5
    assert sample(s, "wattbit_nic_rx_missed_total", interface="eth2") == 3
    assert (
        sample(
            s,
            "wattbit_nic_info",
            interface="eth2",
            driver="",
            pci="",
            numa_node="",
            mtu="9000",
            operstate="up",
        )
        == 1.0
    )
    assert sample(s, "wattbit_tcp_retransmitted_segments_total") == snmp["Tcp"]["RetransSegs"]
    assert sample(s, "wattbit_tcp_segments_total", direction="out") == snmp["Tcp"]["OutSegs"]
    assert sample(s, "wattbit_tcp_syn_retransmits_total") == snmp["TcpExt"]["TCPSynRetrans"]
    assert any(k[0] == "wattbit_softnet_times_squeezed_total" for k in s)


class _NoStats:
    calls = 0

    def read_stats(self, ifname: str) -> list[tuple[str, int]]:
        self.calls += 1
        raise OSError(95, "Operation not supported")

    def driver_info(self, ifname: str) -> tuple[str, str, str]:
        return ("veth" if ifname.startswith("veth") else "", "", "")


def test_exclude_loopback_and_unsupported_ethtool_asked_once(tmp_path: Path) -> None:
    _fake_net(tmp_path, "lo", "0x9", {"rx_bytes": 1})
    _fake_net(tmp_path, "veth12ab", "0x1003", {"rx_bytes": 1})
    _fake_net(tmp_path, "eth0", "0x1003", {"rx_bytes": 1})
    (tmp_path / "interrupts").write_text("           CPU0\n")
    ethtool = _NoStats()
    exp = NicExporter(ethtool=ethtool, sys_root=tmp_path, proc_root=tmp_path)
    r = CollectorRegistry(auto_describe=False)
    r.register(ExportersCollector([exp]))
    for _ in range(3):
        s = parse_samples(generate_latest(r).decode())
    names = {dict(k[1]).get("interface") for k in s if k[0] == "wattbit_nic_bytes_total"}
    assert names == {"eth0"}
    assert ethtool.calls == 1
    assert sample(s, "wattbit_exporter_up", exporter="nic") == 1.0
    # With no exclude pattern, loopback is still left out; veth's driver comes from ethtool.
    exp = NicExporter(exclude="", ethtool=_NoStats(), sys_root=tmp_path, proc_root=tmp_path)
    s = _samples(exp.snapshot())
    names = {dict(k[1]).get("interface") for k in s if k[0] == "wattbit_nic_bytes_total"}
    assert names == {"eth0", "veth12ab"}
    assert (
        sample(
            s,
            "wattbit_nic_info",
            interface="veth12ab",
            driver="veth",
            pci="",
            numa_node="",
            mtu="9000",
            operstate="up",
        )
        == 1.0
    )
