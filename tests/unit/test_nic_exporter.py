"""The nic exporter's rendering and IRQ mapping on captured /proc text (no kernel involved)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters.base import ExportersCollector
from exporters.hostfs.interrupts import parse_interrupts
from exporters.hostfs.netdevs import is_loopback
from exporters.nic import links
from exporters.nic.ethtool import QueueStat
from exporters.nic.exporter import NicExporter, NicSnapshot, nic_irqs, render
from exporters.nic.links import COUNTERS, LinkStats, read_link
from exporters.nic.procfs import parse_snmp, parse_softnet_stat
from exporters.nic.qstats import QstatsUnavailable, queue_stats_by_ifindex
from exporters.nic.sysfs import NicInfo
from tests.support.realparts import parse_samples, sample

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
    speed = sample(s, "wattbit_nic_link_speed_bytes_per_second", interface="eth2", source="kernel")
    assert speed == 1.25e9


def _fake_net(
    root: Path, name: str, flags: str, stats: dict[str, int], mtu: int = 9000, ifindex: int = 7
) -> None:
    d = root / "class" / "net" / name
    (d / "statistics").mkdir(parents=True)
    for k, v in stats.items():
        (d / "statistics" / k).write_text(f"{v}\n")
    (d / "flags").write_text(flags + "\n")
    (d / "mtu").write_text(f"{mtu}\n")
    (d / "operstate").write_text("up\n")
    (d / "ifindex").write_text(f"{ifindex}\n")


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


def _link_series(s: dict, interface: str) -> dict[tuple[str, str], float]:
    """{(sample name, direction or ""): value} of one interface's link counter series."""
    names = ("bytes", "packets", "errors", "drops", "rx_missed")
    return {
        (k[0], dict(k[1]).get("direction", "")): v
        for k, v in s.items()
        if k[0] in {f"wattbit_nic_{n}_total" for n in names}
        and dict(k[1]).get("interface") == interface
    }


def test_a_missing_or_malformed_counter_is_no_sample_not_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: an unparsable counter silently became 0. Now its series is absent."""
    monkeypatch.setattr(links, "_noted", set())  # what other tests had noted already
    full = {
        "rx_bytes": 100,
        "tx_bytes": 200,
        "rx_packets": 3,
        "tx_packets": 4,
        "rx_errors": 5,
        "tx_errors": 6,
        "rx_dropped": 7,
        "tx_dropped": 8,
        "rx_missed_errors": 9,
    }
    _fake_net(tmp_path, "eth0", "0x1003", full)
    stats = tmp_path / "class" / "net" / "eth0" / "statistics"
    (stats / "tx_bytes").write_text("garbage\n")  # malformed
    (stats / "rx_errors").write_text(f"{2**64}\n")  # beyond a u64: malformed too
    (stats / "rx_missed_errors").unlink()  # left out by the kernel (or gone)
    with caplog.at_level(logging.WARNING, logger="exporters.nic.links"):
        link = read_link(tmp_path, "eth0")
        again = read_link(tmp_path, "eth0")
    assert link is not None and again is not None
    assert link.get("tx_bytes") is None and link.get("rx_missed_errors") is None
    assert link.get("rx_bytes") == 100
    # malformed ones are said, once per interface and set of counters; a missing one is not
    assert caplog.text.count("malformed counter(s) tx_bytes, rx_errors") == 1
    got = _link_series(_samples(NicSnapshot(links=[link], infos={})), "eth0")
    assert got == {
        ("wattbit_nic_bytes_total", "rx"): 100,
        ("wattbit_nic_packets_total", "rx"): 3,
        ("wattbit_nic_packets_total", "tx"): 4,
        ("wattbit_nic_errors_total", "tx"): 6,
        # rx drops are rx_dropped + rx_missed_errors: with a part unknown, the sum is too
        ("wattbit_nic_drops_total", "tx"): 8,
    }


def test_every_counter_present_gives_every_series(tmp_path: Path) -> None:
    stats = {c: i + 1 for i, c in enumerate(COUNTERS)}
    _fake_net(tmp_path, "eth0", "0x1003", stats)
    link = read_link(tmp_path, "eth0")
    assert link is not None
    got = _link_series(_samples(NicSnapshot(links=[link], infos={})), "eth0")
    assert len(got) == 9  # bytes, packets, errors, drops x rx/tx; rx_missed
    assert got[("wattbit_nic_drops_total", "rx")] == stats["rx_dropped"] + stats["rx_missed_errors"]
    assert got[("wattbit_nic_rx_missed_total", "")] == stats["rx_missed_errors"]


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


def test_qstats_records_become_queue_stats() -> None:
    """netdev qstats-get records (attribute number -> value) to per-queue counters."""
    records = [
        {1: 4, 2: 0, 3: 1, 8: 10, 9: 1000},  # rx queue 1
        {1: 4, 2: 1, 3: 0, 10: 5, 11: 2**40},  # tx queue 0, a counter past 32 bits
        {1: 4, 2: 0, 3: 0, 8: 3, 9: 300, 10: 99},  # a tx counter on an rx queue: ignored
        {1: 4, 8: 50, 9: 5000},  # no queue: a device-scope record, not a queue
        {1: 4, 2: 0, 3: 64, 9: 1},  # queue 64: past the cap, as for ethtool
        {1: 9, 2: 2, 3: 0, 9: 1},  # an unknown queue type
    ]
    assert queue_stats_by_ifindex(records) == {
        4: [
            QueueStat("rx", 0, "bytes", 300),
            QueueStat("rx", 0, "packets", 3),
            QueueStat("rx", 1, "bytes", 1000),
            QueueStat("rx", 1, "packets", 10),
            QueueStat("tx", 0, "bytes", 2**40),
            QueueStat("tx", 0, "packets", 5),
        ]
    }


class _CountingEthtool:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def read_stats(self, ifname: str) -> list[tuple[str, int]]:
        self.asked.append(ifname)
        return [("rx_queue_0_bytes", 42), ("tx_queue_0_bytes", 43)]

    def driver_info(self, ifname: str) -> tuple[str, str, str]:
        return ("", "", "")


class _Qstats:
    def __init__(self, answer: dict[int, list[QueueStat]] | OSError) -> None:
        self.answer = answer
        self.calls = 0

    def read(self) -> dict[int, list[QueueStat]]:
        self.calls += 1
        if isinstance(self.answer, OSError):
            raise self.answer
        return self.answer


def test_netlink_queue_stats_first_ethtool_for_the_rest(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    _fake_net(tmp_path, "eth0", "0x1003", {"rx_bytes": 1}, ifindex=7)
    _fake_net(tmp_path, "eth1", "0x1003", {"rx_bytes": 1}, ifindex=8)
    (tmp_path / "interrupts").write_text("           CPU0\n")
    netlink = [QueueStat("rx", 0, "bytes", 100)]
    ethtool, qstats = _CountingEthtool(), _Qstats({7: netlink})
    exp = NicExporter(ethtool=ethtool, qstats=qstats, sys_root=tmp_path, proc_root=tmp_path)
    snap = exp.snapshot()
    assert snap.queues["eth0"] == netlink
    assert snap.queues["eth1"] == [QueueStat("rx", 0, "bytes", 42), QueueStat("tx", 0, "bytes", 43)]
    assert ethtool.asked == ["eth1"]  # no ethtool string-set read where netlink answered
    # A kernel without qstats-get: said once, not asked again, ethtool for every NIC.
    ethtool, qstats = _CountingEthtool(), _Qstats(QstatsUnavailable(95, "no qstats-get"))
    exp = NicExporter(ethtool=ethtool, qstats=qstats, sys_root=tmp_path, proc_root=tmp_path)
    caplog.set_level("INFO")
    for _ in range(3):
        snap = exp.snapshot()
    assert qstats.calls == 1 and caplog.text.count("no qstats-get") == 1
    assert sorted(snap.queues) == ["eth0", "eth1"] and ethtool.asked.count("eth0") == 3
    # A transient netlink failure: ethtool this scrape, netlink asked again the next
    qstats = _Qstats(OSError(16, "busy"))
    exp = NicExporter(
        ethtool=_CountingEthtool(), qstats=qstats, sys_root=tmp_path, proc_root=tmp_path
    )
    exp.snapshot()
    exp.snapshot()
    assert qstats.calls == 2


def _genl(mtype: int, seq: int, cmd: int, *attributes: bytes, flags: int = 2) -> bytes:
    """One netlink message as the kernel writes it (flags: NLM_F_MULTI)."""
    import struct

    body = struct.pack("=BBH", cmd, 1, 0) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body


def _nla_uint(atype: int, value: int, size: int = 4) -> bytes:
    from exporters.nic.qstats import nla

    return nla(atype, value.to_bytes(size, sys.byteorder))


def test_qstats_dump_bytes_become_records() -> None:
    """A qstats-get dump as bytes (two queues in one datagram, then NLMSG_DONE): records with
    4- and 8-byte counters, other families' messages and unknown attributes left out."""
    import struct

    from exporters.nic.qstats import NLMSG_DONE, dump_records, messages

    fid = 20
    data = (
        _genl(fid, 7, 12, _nla_uint(1, 4), _nla_uint(2, 0), _nla_uint(3, 1), _nla_uint(9, 2**40, 8))
        + _genl(fid, 7, 12, _nla_uint(1, 4), _nla_uint(2, 1), _nla_uint(3, 0), _nla_uint(10, 5))
        + _genl(fid + 1, 7, 12, _nla_uint(1, 9))  # not the netdev family
        + _genl(fid, 7, 12, _nla_uint(1, 4), _nla_uint(99, 1), _nla_uint(3, 2, 2))  # 2-byte: out
        + struct.pack("=IHHIIi", 20, NLMSG_DONE, 2, 7, 0, 0)  # the dump's end, status 0
    )
    msgs = [(t, p) for t, _s, p in messages(data)]
    records, done = dump_records(msgs, fid)
    assert done
    assert records == [{1: 4, 2: 0, 3: 1, 9: 2**40}, {1: 4, 2: 1, 3: 0, 10: 5}, {1: 4}]
    assert queue_stats_by_ifindex(records) == {
        4: [QueueStat("rx", 1, "bytes", 2**40), QueueStat("tx", 0, "packets", 5)]
    }


def test_qstats_errors_and_truncation() -> None:
    """EOPNOTSUPP: no qstats-get (unavailable for good); another errno: an OSError for this
    scrape; a message longer than the datagram stops the parse; no family: unavailable."""
    import errno
    import struct

    import pytest

    from exporters.nic.qstats import NLMSG_ERROR, dump_records, family_id, messages

    def err(code: int) -> bytes:
        return struct.pack("=i", -code) + bytes(16)

    with pytest.raises(QstatsUnavailable):
        dump_records([(NLMSG_ERROR, err(errno.EOPNOTSUPP))], 20)
    with pytest.raises(OSError) as exc:
        dump_records([(NLMSG_ERROR, err(errno.EPERM))], 20)
    assert exc.value.errno == errno.EPERM and not isinstance(exc.value, QstatsUnavailable)
    assert dump_records([], 20) == ([], False)
    whole = _genl(20, 1, 12, _nla_uint(1, 4))
    assert list(messages(whole[:-1])) == []  # cut short: nothing made up
    with pytest.raises(QstatsUnavailable):
        family_id([(NLMSG_ERROR, 1, err(errno.ENOENT))])
    assert family_id([(0x10, 1, _genl(0x10, 1, 1, _nla_uint(1, 27, 2))[16:])]) == 27


def test_configured_speed_replaces_the_kernels() -> None:
    """nic.link_speeds gives an interface its speed (source=config), also over the kernel's
    (a veth's made-up 10000 Mb/s, a shaped link); others keep the kernel's or have none."""
    veth = NicInfo("veth0", "veth", "", "", 1.25e9, ())  # veth: "10000" in /sys
    tun = NicInfo("tun0", "tun", "", "", None, ())
    snap = NicSnapshot(
        links=[
            LinkStats("eth2", 3, 9000, "up", "", stats={"tx_bytes": 10}),
            LinkStats("veth0", 4, 1500, "up", "", stats={"tx_bytes": 10}),
            LinkStats("tun0", 5, 1500, "up", "", stats={"tx_bytes": 10}),
            LinkStats("tun1", 6, 1500, "up", "", stats={"tx_bytes": 10}),
        ],
        infos={"eth2": _ixgbe_info(()), "veth0": veth, "tun0": tun, "tun1": tun},
        configured_speeds={"veth0": 2.5e7, "tun0": 6.25e7},
    )
    s = _samples(snap)
    key = "wattbit_nic_link_speed_bytes_per_second"
    assert sample(s, key, interface="eth2", source="kernel") == 1.25e9
    assert sample(s, key, interface="veth0", source="config") == 2.5e7
    assert sample(s, key, interface="tun0", source="config") == 6.25e7
    assert not any(k[0] == key and ("interface", "tun1") in k[1] for k in s)  # never a guess
    veth0 = [dict(k[1]) for k in s if k[0] == key and ("interface", "veth0") in k[1]]
    assert [d["source"] for d in veth0] == ["config"]  # one series: the kernel's is replaced


def test_exporter_takes_bits_and_exports_bytes(tmp_path: Path) -> None:
    """The exporter's link_speeds are bits/s (as the config key), the metric bytes/s."""
    e = NicExporter(link_speeds={"veth0": 500e6}, sys_root=tmp_path, proc_root=tmp_path)
    try:
        assert e.configured_speeds == {"veth0": 62.5e6}
    finally:
        e.close()


def test_a_device_link_looping_on_itself_costs_no_scrape(tmp_path: Path) -> None:
    """pathlib raises RuntimeError (not OSError) on a symlink loop before Python 3.13."""
    _fake_net(tmp_path, "eth0", "0x1003", {"rx_bytes": 5})
    (tmp_path / "class/net/eth0/device").symlink_to("device")
    exp = NicExporter(ethtool=_NoStats(), sys_root=tmp_path, proc_root=tmp_path)
    s = _samples(exp.snapshot())
    assert sample(s, "wattbit_nic_bytes_total", interface="eth0", direction="rx") == 5.0
