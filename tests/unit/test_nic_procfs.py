"""The NIC exporter's /proc parsers on captured and reconstructed files from several kernels."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from exporters.hostfs.interrupts import Interrupts, InterruptsParser, IrqRow, parse_interrupts
from exporters.nic.exporter import TCP_GROUPS
from exporters.nic.procfs import (
    SoftnetRow,
    irq_queue,
    parse_snmp,
    parse_softirqs,
    parse_softnet_stat,
)


def _read(fixtures: Path, name: str) -> str:
    return (fixtures / "proc" / "nic" / name).read_text()


def _by_name(interrupts: Interrupts) -> dict[str, IrqRow]:
    return {row.name: row for row in interrupts.rows.values()}


def _per_cpu(interrupts: Interrupts, row: IrqRow) -> dict[int, int]:
    return dict(zip(interrupts.cpus, row.counts, strict=True))


def _queues(interrupts: Interrupts) -> dict[str, tuple[str, int]]:
    out = {}
    for row in interrupts.rows.values():
        queue = irq_queue(row.name)
        if queue is not None:
            out[row.name] = queue
    return out


# --- /proc/interrupts --------------------------------------------------------------------------


def test_interrupts_6_18_virtio(fixtures: Path) -> None:
    irqs = parse_interrupts(_read(fixtures, "interrupts-6.18-virtio"))
    assert irqs.cpus == (0, 1)
    rx = irqs.rows["38"]
    assert rx == IrqRow("38", (0, 3269), "PCI-MSIX-0000:00:03.0", "1-edge", "virtio2-input.0")
    assert irqs.rows["39"].counts == (2264, 0)
    assert irqs.rows["24"].chip == "IO-APIC"
    assert irqs.rows["24"].hwirq == "5-edge"
    assert irqs.rows["24"].name == "ACPI:Ged"
    # Only virtio-net's queues count: not balloon/blk/rng/vsock queues, nor any config vector.
    assert _queues(irqs) == {"virtio2-input.0": ("rx", 0), "virtio2-output.0": ("tx", 0)}
    assert irqs.rows["LOC"].counts == (130090, 269587)
    assert irqs.rows["LOC"].name == "Local timer interrupts"
    assert irqs.rows["LOC"].chip == irqs.rows["LOC"].hwirq == ""
    assert irqs.rows["ERR"].counts == (0,)  # global counter: one column only
    assert irqs.rows["PIW"].name == "Posted-interrupt wakeup event"


def test_interrupts_4_18_ixgbe_16_queues_on_8_cpus(fixtures: Path) -> None:
    irqs = parse_interrupts(_read(fixtures, "interrupts-4.18-ixgbe"))
    assert irqs.cpus == tuple(range(8))
    by_name = _by_name(irqs)
    q3 = by_name["eth2-TxRx-3"]
    assert q3.irq == "48"
    assert q3.chip == "IR-PCI-MSI"
    assert q3.hwirq == "1572867-edge"
    assert _per_cpu(irqs, q3)[3] == 51210942
    assert _per_cpu(irqs, q3)[0] == 4
    assert _per_cpu(irqs, by_name["eth2-TxRx-11"])[3] == 34876961
    queues = _queues(irqs)
    assert queues == {f"eth2-TxRx-{q}": ("combined", q) for q in range(16)}
    assert by_name["eth2"].hwirq == "1572880-edge"  # the link vector: not a queue
    assert irq_queue("nvme0q3") is None
    assert irqs.rows["9"].hwirq == "9-fasteoi"
    assert irqs.rows["24"] == IrqRow("24", (0,) * 8, "DMAR-MSI", "0-edge", "dmar0")
    assert irqs.rows["26"].name == "PCIe PME, aerdrv"  # shared IRQ: names joined by ", "
    assert irqs.rows["NMI"].counts[7] == 2062
    assert irqs.rows["MIS"].counts == (0,)


def test_interrupts_5_15_mlx5(fixtures: Path) -> None:
    irqs = parse_interrupts(_read(fixtures, "interrupts-5.15-mlx5"))
    assert irqs.cpus == tuple(range(16))
    by_name = _by_name(irqs)
    comp3 = by_name["mlx5_comp3@pci:0000:3b:00.0"]
    assert comp3.irq == "81"
    assert comp3.hwirq == f"{(0x3B00 << 11) + 4}-edge"
    assert _per_cpu(irqs, comp3)[3] == 99483803
    assert sum(comp3.counts) == 99483803
    queues = _queues(irqs)
    assert queues == {f"mlx5_comp{q}@pci:0000:3b:00.0": ("combined", q) for q in range(16)}
    async0 = by_name["mlx5_async0@pci:0000:3b:00.0"]
    assert _per_cpu(irqs, async0)[14] == 30912
    assert irq_queue(async0.name) is None


def test_interrupts_3_10_offline_cpu_hole(fixtures: Path) -> None:
    irqs = parse_interrupts(_read(fixtures, "interrupts-3.10-igb"))
    assert irqs.cpus == (0, 1, 2, 4, 5, 6, 7)  # CPU3 offline
    by_name = _by_name(irqs)
    q3 = by_name["eth0-TxRx-3"]
    assert len(q3.counts) == 7
    assert _per_cpu(irqs, q3) == {0: 2, 1: 0, 2: 0, 4: 9675308, 5: 0, 6: 0, 7: 0}
    # 3.10 has no hwirq column: chip and flow handler print glued.
    assert q3.chip == "PCI-MSI-edge"
    assert q3.hwirq == ""
    assert irqs.rows["9"].chip == "IO-APIC-fasteoi"
    assert irqs.rows["24"].name == "PCIe PME, pciehp"
    assert _queues(irqs) == {
        **{f"eth0-TxRx-{q}": ("combined", q) for q in range(7)},
        "eth1-rx-0": ("rx", 0),
        "eth1-rx-1": ("rx", 1),
        "eth1-tx-0": ("tx", 0),
        "eth1-tx-1": ("tx", 1),
    }
    assert _per_cpu(irqs, irqs.rows["LOC"])[7] == 958272604


@pytest.mark.parametrize(
    ("line", "chip", "hwirq", "name"),
    [
        # 6.x with interrupt remapping: per-device MSI-X domain in the chip name
        (
            " 134:          0     881234  IR-PCI-MSIX-0000:3b:00.0    3-edge      "
            "mlx5_comp3@pci:0000:3b:00.0",
            "IR-PCI-MSIX-0000:3b:00.0",
            "3-edge",
            "mlx5_comp3@pci:0000:3b:00.0",
        ),
        # arm64 (CONFIG_GENERIC_IRQ_SHOW_LEVEL): hwirq and trigger are separate words
        (
            "  11:      51234      40123     GICv3  27 Level     arch_timer",
            "GICv3",
            "27 Level",
            "arch_timer",
        ),
        (
            "  60:          0    1203331   ITS-MSI 524289 Edge      eth0-TxRx-0",
            "ITS-MSI",
            "524289 Edge",
            "eth0-TxRx-0",
        ),
        # an IRQ without a domain: blank hwirq, only the flow name
        (
            "  7:          0          1  XT-PIC     -edge      parport0",
            "XT-PIC",
            "-edge",
            "parport0",
        ),
        # no action left (freed), counts remain
        (" 50:          3          0  IR-PCI-MSI 1572864-edge", "IR-PCI-MSI", "1572864-edge", ""),
        # shared, three actions
        (
            " 16:        120          9   IO-APIC  16-fasteoi   ehci_hcd:usb1, i801_smbus, snd",
            "IO-APIC",
            "16-fasteoi",
            "ehci_hcd:usb1, i801_smbus, snd",
        ),
    ],
)
def test_interrupts_layout_variants(line: str, chip: str, hwirq: str, name: str) -> None:
    irqs = parse_interrupts("           CPU0       CPU1       \n" + line + "\n")
    (row,) = irqs.rows.values()
    assert (row.chip, row.hwirq, row.name) == (chip, hwirq, name)
    assert len(row.counts) == 2


def test_interrupts_short_numeric_row_is_skipped() -> None:
    text = (
        "           CPU0       CPU1       \n"
        " 45:         12\n"  # fewer counts than CPUs: cannot be attributed to CPUs
        " 46:          1          2  X  1-edge  a\n"
    )
    irqs = parse_interrupts(text)
    assert set(irqs.rows) == {"46"}


# --- NIC queue names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "queue"),
    [
        ("eth2-TxRx-3", ("combined", 3)),  # ixgbe / igb / bnxt
        ("eth2-rx-3", ("rx", 3)),
        ("eth2-tx-3", ("tx", 3)),
        ("enp59s0f0-TxRx-12", ("combined", 12)),
        ("i40e-eth2-TxRx-3", ("combined", 3)),
        ("ice-eth2-TxRx-3", ("combined", 3)),
        ("iavf-eth0-TxRx-0", ("combined", 0)),
        ("mlx5_comp3@pci:0000:3b:00.0", ("combined", 3)),
        ("mlx5_comp15", ("combined", 15)),
        ("mlx4-3@0000:3b:00.0", ("combined", 3)),
        ("virtio2-input.0", ("rx", 0)),
        ("virtio2-output.0", ("tx", 0)),
        ("virtio12-input.7", ("rx", 7)),
        ("ena-eth0-Tx-Rx-3", ("combined", 3)),
        ("eth0-Tx-Rx-3", ("combined", 3)),
        ("eth2-3", ("combined", 3)),  # sfc
        ("hns3-0000:7d:00.0-TxRx-3", ("combined", 3)),
        ("nfp-0000:04:00.0-rxtx-3", ("combined", 3)),
        ("eth0-fp-5", ("combined", 5)),  # bnx2x / qede
        ("eth0-q2", ("combined", 2)),  # be2net
        # control, link, async and event vectors
        ("mlx5_async0@pci:0000:3b:00.0", None),
        ("mlx5_pages_eq", None),
        ("mlx5_pages_eq@pci:0000:3b:00.0", None),
        ("mlx5_cmd_eq@pci:0000:3b:00.0", None),
        ("mlx4-async@pci:0000:3b:00.0", None),
        ("eth2", None),
        ("virtio2-config", None),
        ("virtio3-event", None),
        ("virtio3-rx", None),  # vsock, no queue index
        ("virtio4-input", None),  # virtio-rng
        ("virtio1-req.0", None),  # virtio-blk
        ("virtio0-virtqueues", None),
        ("i40e-0000:3b:00.0:misc", None),
        ("ice-0000:3b:00.0:misc", None),
        ("ena-mgmnt@pci:0000:00:05.0", None),
        ("nvme0q3", None),
        ("PCIe PME, pciehp", None),
        ("eth0-TxRx-0, eth1-TxRx-0", None),
        ("", None),
        ("Local timer interrupts", None),
    ],
)
def test_irq_queue(name: str, queue: tuple[str, int] | None) -> None:
    assert irq_queue(name) == queue


# --- /proc/softirqs ----------------------------------------------------------------------------


def test_softirqs_6_18(fixtures: Path) -> None:
    softirqs = parse_softirqs(_read(fixtures, "softirqs-6.18-virtio"))
    assert set(softirqs) == {
        "HI",
        "TIMER",
        "NET_TX",
        "NET_RX",
        "BLOCK",
        "IRQ_POLL",
        "TASKLET",
        "SCHED",
        "HRTIMER",
        "RCU",
    }
    assert softirqs["NET_RX"] == {0: 4026, 1: 7676}
    assert softirqs["NET_TX"] == {0: 3, 1: 1}


def test_softirqs_3_10_lists_offline_cpus(fixtures: Path) -> None:
    softirqs = parse_softirqs(_read(fixtures, "softirqs-3.10-igb"))
    assert "BLOCK_IOPOLL" in softirqs  # renamed IRQ_POLL in 4.5
    # for_each_possible_cpu: CPU3 is listed although /proc/interrupts leaves it out
    assert sorted(softirqs["NET_RX"]) == list(range(8))
    assert softirqs["NET_RX"][3] == 7
    assert softirqs["NET_RX"][4] == 8542372


# --- /proc/net/softnet_stat --------------------------------------------------------------------


def test_softnet_3_10_eleven_columns(fixtures: Path) -> None:
    text = _read(fixtures, "softnet_stat-3.10-igb")
    rows = parse_softnet_stat(text)
    assert [r.cpu for r in rows] == list(range(7))  # no CPU column: row index
    online = parse_interrupts(_read(fixtures, "interrupts-3.10-igb")).cpus
    rows = parse_softnet_stat(text, cpus=online)
    assert [r.cpu for r in rows] == [0, 1, 2, 4, 5, 6, 7]
    cpu2 = rows[2]
    assert (cpu2.processed, cpu2.dropped, cpu2.time_squeeze) == (0x1A4B3C6, 0x2F, 0x1B5)
    assert cpu2.received_rps == 0x7D0
    assert cpu2.flow_limit_count == 0
    assert cpu2.backlog_len == 0
    assert rows[3].received_rps == 0xFA0  # the CPU4 row


def test_softnet_5_15_cpu_column(fixtures: Path) -> None:
    rows = parse_softnet_stat(_read(fixtures, "softnet_stat-5.15-mlx5"))
    assert [r.cpu for r in rows] == list(range(16))
    cpu7 = rows[7]
    assert cpu7 == SoftnetRow(
        cpu=7,
        processed=0x2C4E1F0A + 7 * 0x1234567,
        dropped=0x15,
        time_squeeze=0x9C4 + 7 * 0x11,
        received_rps=0,
        flow_limit_count=3,
        backlog_len=2,
    )


def test_softnet_6_x_fifteen_columns_with_offline_cpu(fixtures: Path) -> None:
    text = _read(fixtures, "softnet_stat-6.8-offline-cpu2")
    rows = parse_softnet_stat(text)
    assert [r.cpu for r in rows] == [0, 1, 3]
    # the printed CPU id wins over a caller's guess
    assert [r.cpu for r in parse_softnet_stat(text, cpus=[0, 1, 2])] == [0, 1, 3]
    assert rows[2].dropped == 7
    assert rows[1].backlog_len == 4
    assert rows[1].received_rps == 0x4E20


def test_softnet_6_18_capture(fixtures: Path) -> None:
    rows = parse_softnet_stat(_read(fixtures, "softnet_stat-6.18-virtio"))
    assert [(r.cpu, r.processed) for r in rows] == [(0, 0xC7A), (1, 0x2CA4)]


# --- /proc/net/snmp and /proc/net/netstat ------------------------------------------------------


def test_snmp_4_18(fixtures: Path) -> None:
    snmp = parse_snmp(_read(fixtures, "snmp-4.18"))
    tcp = snmp["Tcp"]
    assert tcp["RetransSegs"] == 10433127
    assert tcp["InSegs"] == 48211230977
    assert tcp["OutSegs"] == 52100331457
    assert tcp["MaxConn"] == -1
    assert "MemErrors" not in snmp["Udp"]
    assert snmp["IcmpMsg"]["OutType3"] == 20899
    assert snmp["Ip"]["Forwarding"] == 2


def test_netstat_4_18(fixtures: Path) -> None:
    netstat = parse_snmp(_read(fixtures, "netstat-4.18"))
    assert set(netstat) == {"TcpExt", "IpExt"}
    assert netstat["TcpExt"]["TCPSynRetrans"] == 40117
    assert netstat["TcpExt"]["TCPAckCompressed"] == 10213390
    assert len(netstat["TcpExt"]) == 114
    assert netstat["IpExt"]["InOctets"] == 61234098776651


def test_snmp_6_18(fixtures: Path) -> None:
    snmp = parse_snmp(_read(fixtures, "snmp-6.18-virtio"))
    tcp = snmp["Tcp"]
    assert (tcp["InSegs"], tcp["OutSegs"], tcp["RetransSegs"]) == (14540, 12507, 0)
    assert tcp["MaxConn"] == -1
    assert "OutTransmits" in snmp["Ip"]
    assert "MemErrors" in snmp["Udp"]


def test_netstat_6_18(fixtures: Path) -> None:
    netstat = parse_snmp(_read(fixtures, "netstat-6.18-virtio"))
    assert set(netstat) == {"TcpExt", "IpExt", "MPTcpExt"}
    assert netstat["TcpExt"]["TCPSynRetrans"] == 0
    assert netstat["TcpExt"]["TCPOrigDataSent"] == 4536
    assert netstat["IpExt"]["InOctets"] == 187953697


@pytest.mark.parametrize(
    "name", ["snmp-4.18", "netstat-4.18", "snmp-6.18-virtio", "netstat-6.18-virtio"]
)
def test_snmp_of_some_groups_is_the_whole_parse_of_those(fixtures: Path, name: str) -> None:
    """The groups the nic exporter asks for (the others' lines are skipped unparsed): the same
    as the whole file's parse, restricted to them."""
    text = _read(fixtures, name)
    whole = parse_snmp(text)
    for groups in (TCP_GROUPS, frozenset({"Ip", "TcpExt"}), frozenset({"Nope"}), frozenset()):
        assert parse_snmp(text, groups) == {g: v for g, v in whole.items() if g in groups}
    assert parse_snmp(text, TCP_GROUPS)  # this file has one of them


def test_snmp_odd_lines() -> None:
    text = (
        "Tcp: 1 2 3\n"  # values before any header: ignored
        "Tcp: A B C\n"
        "garbage\n"
        "Tcp: 1 -2\n"  # short values line: aligned prefix kept
        "Udp: X Y\n"
        "Udp: 1 two\n"  # not numbers: taken as a new header, never as values
        "Udp: 5 6\n"
    )
    assert parse_snmp(text) == {"Tcp": {"A": 1, "B": -2}, "Udp": {"1": 5, "two": 6}}


# --- garbage never raises ----------------------------------------------------------------------

_PARSERS: tuple[Callable[[str], object], ...] = (
    parse_interrupts,
    parse_softirqs,
    parse_softnet_stat,
    parse_snmp,
)

_GARBAGE = [
    "",
    "\n\n\n",
    "CPU0 CPU1\n",
    "CPU0 CPU1\n:\n : \n45:\n45: x\nNMI:\n²: ² ²\n 5: 1 2 3 4 5 6 7\n",
    "           CPU0       CPU1\n 45:          1          ²  IR-PCI-MSI  1-edge  x\n",
    "ffffffff zzzzzzzz\n0 0\n0 0 0\n-1 -2 -3\n",
    "Tcp:\nTcp: ::: :\n: 1 2\nIp Forwarding\n",
    "\x00\x01\x02 \t\x0b\x0c\r\n",
]


@pytest.mark.parametrize("text", _GARBAGE)
@pytest.mark.parametrize("parse", _PARSERS)
def test_garbage_does_not_raise(parse: Callable[[str], object], text: str) -> None:
    parse(text)


def test_truncated_and_noisy_fixtures_do_not_raise(fixtures: Path) -> None:
    rng = random.Random(4242)
    texts = [p.read_text() for p in sorted((fixtures / "proc" / "nic").iterdir())]
    for text in texts:
        for cut in range(0, len(text), max(1, len(text) // 40)):
            for parse in _PARSERS:
                parse(text[:cut])
        for _ in range(10):
            noisy = list(text)
            for _ in range(20):
                noisy[rng.randrange(len(noisy))] = chr(rng.randrange(0x20, 0x3000))
            for parse in _PARSERS:
                parse("".join(noisy))


def test_softnet_garbage_rows_skipped() -> None:
    text = "0000000a 00000001 00000002\nnot hex at all\n0000000b 00000000 00000003 zz\n"
    rows = parse_softnet_stat(text)
    assert rows == [SoftnetRow(0, 10, 1, 2, 0, 0, 0)]


def _bump(text: str, label: str) -> str:
    """The text with the first count of row `label` one higher."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        head, sep, tail = line.partition(":")
        if sep and head.strip() == label:
            first = tail.split()[0]
            at = tail.index(first)
            lines[i] = f"{head}:{tail[:at]}{int(first) + 1}{tail[at + len(first) :]}"
            return "".join(lines)
    raise AssertionError(f"no row {label}")


@pytest.mark.parametrize(
    "name",
    [
        "interrupts-6.18-virtio",
        "interrupts-4.18-ixgbe",
        "interrupts-5.15-mlx5",
        "interrupts-3.10-igb",
    ],
)
def test_interrupts_parser_reuses_a_row_only_while_its_text_is_unchanged(
    fixtures: Path, name: str
) -> None:
    """Issue 35: InterruptsParser gives what parse_interrupts gives, parse after parse; a
    changed count shows at the next parse, with `only` as without, and a CPU header change
    (hotplug) parses every row afresh."""
    text = _read(fixtures, name)
    parser = InterruptsParser()
    assert parser.parse(text) == parse_interrupts(text)
    again = parser.parse(text)
    assert again == parse_interrupts(text)
    label = next(k for k in again.rows if k.isdigit())
    bumped = _bump(text, label)
    now = parser.parse(bumped)
    assert now == parse_interrupts(bumped)
    assert now.rows[label].counts[0] == again.rows[label].counts[0] + 1
    only = {label}
    assert parser.parse(text, only=only) == parse_interrupts(text, only=only)
    assert parser.parse(bumped, only=only) == parse_interrupts(bumped, only=only)
    header, _, body = text.partition("\n")
    fewer = header.rsplit("CPU", 1)[0].rstrip() + "\n" + body  # one CPU less in the header
    assert parser.parse(fewer) == parse_interrupts(fewer)
    assert parser.parse(text) == parse_interrupts(text)
