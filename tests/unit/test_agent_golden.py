"""The whole agent's /metrics over fixture trees, byte for byte (as node_exporter keeps its
end-to-end output): a change in any exporter's output shows as one reviewable diff of
tests/fixtures/metrics/agent.prom.

The machine read is a VM captured from the fixtures: /sys is tests/fixtures/sys/captured_vm.tar
(virtio disk vda on PCI 0000:00:02.0; its MSI-X vectors 35 and 36 are added below, as
interrupts-6.18-virtio numbers them) plus, built below, its virtio NIC eth0 on 0000:00:03.0
(and lo and a docker0 the exclude pattern drops); /proc is the same VM's diskstats, interrupts,
softirqs, softnet_stat, snmp and netstat from tests/fixtures/proc; ethtool -S is
tests/fixtures/ethtool/virtio_net.txt, from a virtio_net before Linux 6.10 (which still had
per-queue counters there), so that the per-queue families have series; smartctl is what
this VM's virtio disk answered (tests/fixtures/smart/local_vda.json: no SMART). The agent is
built as `wattbit agent` builds it (build_exporters, collector.daemon.serve.build_registry) with
backend: diskstats, and /metrics is what its WSGI app serves. Two things vary from run to run
and are normalised: the process_* families (this test process's own resource use) are left
out, and wattbit_exporter_duration_seconds reads 0.

After an intended change, rewrite the golden with WATTBIT_UPDATE_GOLDEN=1 and review the diff;
by default a mismatch fails.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest

from collector.agent.config import AgentConfig
from collector.agent.main import build_exporters
from collector.daemon.serve import build_registry
from collector.web.exposition import metrics_app
from exporters.smart.exporter import SmartExporter
from exporters.smart.runner import RunOutcome
from exporters.tcp.exporter import TcpExporter
from tests.support.env import FIXTURES
from tests.support.golden import assert_golden, normalise, promtool_accepts, scrape
from tests.support.tcpdiag import RecordedDiag
from tests.support.tree import sys_link, write_file

GOLDEN = FIXTURES / "metrics" / "agent.prom"
# durations: read 0 in the golden
VARYING = ("wattbit_exporter_duration_seconds", "wattbit_tcp_sample_duration_seconds")

NIC_PCI = "devices/pci0000:00/0000:00:03.0"  # virtio2 in interrupts-6.18-virtio
# /sys/class/net/eth0/statistics: the sums of the recorded ethtool queues, a few drops
ETH0 = {
    "rx_bytes": 279141472810,
    "tx_bytes": 192526316842,
    "rx_packets": 247452306,
    "tx_packets": 147583378,
    "rx_errors": 0,
    "tx_errors": 0,
    "rx_dropped": 3,
    "tx_dropped": 0,
    "rx_missed_errors": 0,
}
# /proc/<file> of the machine: the fixture each one is
PROC = {
    "diskstats": "diskstats-6.18",
    "interrupts": "nic/interrupts-6.18-virtio",
    "softirqs": "nic/softirqs-6.18-virtio",
    "net/softnet_stat": "nic/softnet_stat-6.18-virtio",
    "net/snmp": "nic/snmp-6.18-virtio",
    "net/netstat": "nic/netstat-6.18-virtio",
}
IRQ_AFFINITY = {"37": ("0-1", "0"), "38": ("0-1", "1"), "39": ("0-1", "0")}
DISK_PCI = "devices/pci0000:00/0000:00:02.0"  # virtio1 (vda) in interrupts-6.18-virtio
DISK_IRQ_AFFINITY = {"35": ("0-1", "1"), "36": ("0-1", "1")}


def _interface(sys_root: Path, net: Path, stats: dict[str, int], loopback: bool = False) -> None:
    """/sys/class/net/<name> -> net, the interface's directory under devices/."""
    for counter, value in stats.items():
        write_file(net / "statistics" / counter, f"{value}\n")
    write_file(net / "flags", "0x9\n" if loopback else "0x1003\n")
    write_file(net / "mtu", "65536\n" if loopback else "1500\n")
    write_file(net / "operstate", "unknown\n" if loopback else "up\n")
    write_file(net / "ifindex", f"{len(list((sys_root / 'class' / 'net').iterdir())) + 1}\n")
    sys_link(sys_root / "class" / "net" / net.name, net)


def machine(root: Path) -> tuple[Path, Path]:
    """(sys_root, proc_root) of the captured VM, assembled under root."""
    with tarfile.open(FIXTURES / "sys" / "captured_vm.tar") as tar:
        tar.extractall(root)  # our own fixture archive
    sys_root = root / "captured_vm"
    (sys_root / "class" / "net").mkdir(parents=True)
    virtual = sys_root / "devices" / "virtual" / "net"
    _interface(sys_root, virtual / "lo", {"rx_bytes": 1, "tx_bytes": 1}, loopback=True)
    pci = sys_root / NIC_PCI
    write_file(pci / "numa_node", "-1\n")
    for irq in IRQ_AFFINITY:
        write_file(pci / "msi_irqs" / irq, "msix\n")
    for irq in DISK_IRQ_AFFINITY:
        write_file(sys_root / DISK_PCI / "msi_irqs" / irq, "msix\n")
    virtio = pci / "virtio2"
    (sys_root / "bus/virtio/drivers/virtio_net").mkdir(parents=True)
    sys_link(virtio / "driver", sys_root / "bus/virtio/drivers/virtio_net")
    eth0 = virtio / "net" / "eth0"
    _interface(sys_root, eth0, ETH0)
    sys_link(eth0 / "device", virtio)
    write_file(eth0 / "speed", "-1\n")  # virtio_net: unknown
    _interface(sys_root, virtual / "docker0", {"rx_bytes": 7})  # the exclude pattern drops it

    proc_root = root / "proc"
    for name, fixture in PROC.items():
        write_file(proc_root / name, (FIXTURES / "proc" / fixture).read_text())
    for irq, (allowed, effective) in (IRQ_AFFINITY | DISK_IRQ_AFFINITY).items():
        write_file(proc_root / "irq" / irq / "smp_affinity_list", f"{allowed}\n")
        write_file(proc_root / "irq" / irq / "effective_affinity_list", f"{effective}\n")
    for line in (FIXTURES / "tcp" / "sysctl-net-6.18.44.tsv").read_text().splitlines():
        path, value = line.split("\t", 1)
        write_file(proc_root / "sys" / path, value + "\n")
    return sys_root, proc_root


def recorded_tcp() -> RecordedDiag:
    """Three samples of sock_diag as captured on 6.18 (tests/fixtures/tcp): the rwnd-limited
    pair (the baseline), then the bulk pair appears while the sndbuf-limited pair is born and
    closes (destroy messages), then the bulk pair later, after 64 MiB more."""
    rwnd = [("rwnd-limited", s) for s in ("listener", "sender", "receiver")]
    bulk = [("bulk", s) for s in ("listener", "sender", "receiver")]
    later = [("bulk", f"{s}-later") for s in ("listener", "sender", "receiver")]
    return RecordedDiag(
        dumps=[rwnd, rwnd + bulk, rwnd + later],
        destroyed=[[], [("sndbuf-limited", "sender"), ("sndbuf-limited", "receiver")]],
    )


class RecordedSmartctl:
    """smartctl as recorded on the captured VM: its virtio disk has no SMART
    (tests/fixtures/smart/local_vda.json, exit status 1)."""

    def __init__(self) -> None:
        self.devices: list[str] = []
        self.closed = False

    def __call__(self, device: str, timeout: float) -> RunOutcome:
        self.devices.append(device)
        output = (FIXTURES / "smart" / "local_vda.json").read_bytes()
        return RunOutcome("done", output, exit_code=1, duration=0.015)

    def scan(self, timeout: float) -> RunOutcome:
        # this VM's real `smartctl --scan-open --json`: no devices
        return RunOutcome("done", (FIXTURES / "smart" / "local_scan_open.json").read_bytes(), 0)

    def close(self) -> None:
        self.closed = True


class RecordedEthtool:
    """ethtool -S as recorded from a virtio_net NIC (tests/fixtures/ethtool)."""

    def __init__(self) -> None:
        self.closed = False

    def read_stats(self, ifname: str) -> list[tuple[str, int]]:
        if ifname != "eth0":
            raise OSError(95, "Operation not supported")
        text = (FIXTURES / "ethtool" / "virtio_net.txt").read_text()
        pairs = []
        for line in text.splitlines()[1:]:  # after "NIC statistics:"
            name, _, value = line.strip().rpartition(": ")
            pairs.append((name, int(value)))
        return pairs

    def driver_info(self, ifname: str) -> tuple[str, str, str]:
        if ifname != "eth0":
            raise OSError(95, "Operation not supported")
        return ("virtio_net", "1.0.0", "0000:00:03.0")

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def agent_metrics(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    sys_root, proc_root = machine(tmp_path_factory.mktemp("machine"))
    cfg = AgentConfig.model_validate(
        {"blockio": {"backend": "diskstats"}, "smart": {"smartctl": "direct"}}
    )
    ethtool = RecordedEthtool()
    smartctl = RecordedSmartctl()
    tcp = recorded_tcp()
    exporters = build_exporters(
        cfg,
        sys_root=sys_root,
        proc_root=proc_root,
        ethtool=ethtool,
        smartctl=smartctl,
        tcp_reader=tcp,
    )
    try:
        assert [e.startup_note() for e in exporters] == [
            "backend: diskstats (configured)",
            "",
            "every 300s, timeout 30s; via smartctl (configured)",
            "rapl: no powercap zones; hwmon: 0 power, 0 energy channels",  # a VM: neither
            "",
            "every 5s, closes by destroy messages (recorded)",
        ]
        tcp_exporter = exporters[-1]
        assert isinstance(tcp_exporter, TcpExporter)
        for _ in range(3):
            tcp_exporter.sample_once()
        smart = exporters[2]
        assert isinstance(smart, SmartExporter)
        assert smart.wait_idle(timeout=60), "the first SMART cycle did not finish"
        assert smartctl.devices == ["/dev/vda"]  # loop devices are virtual: never run
        app = metrics_app(build_registry(exporters))
        first = scrape(app)
        assert normalise(scrape(app), VARYING) == normalise(
            first, VARYING
        )  # nothing but time varies
    finally:
        for e in exporters:
            e.close()
    assert ethtool.closed
    assert smartctl.closed
    assert tcp.closed
    return normalise(first, VARYING)


def test_golden_metrics(agent_metrics: bytes) -> None:
    assert_golden(GOLDEN, agent_metrics.decode())


def test_golden_covers_every_exporter(agent_metrics: bytes) -> None:
    text = agent_metrics.decode()
    for exporter in ("blockio", "nic", "smart", "pcie", "tcp"):
        assert f'wattbit_exporter_up{{exporter="{exporter}"}} 1.0\n' in text
    assert 'wattbit_disk_io_bytes_total{device="vda",op="read"}' in text
    assert 'wattbit_nic_queue_bytes_total{direction="rx",interface="eth0",queue="0"}' in text
    assert 'wattbit_nic_irq_info{affinity="0-1",effective_affinity="1",interface="eth0"' in text
    assert 'wattbit_disk_smart_available{device="vda",reason="no_smart"} 0.0\n' in text
    # virtio on conventional PCI: the chain is there, no link values (never made-up zeros)
    assert (
        'wattbit_pcie_link_info{driver="",pci="0000:00:02.0",role="controller",'
        'root="pci0000:00",upstream=""} 1.0\n'
    ) in text
    assert "wattbit_pcie_link_current_width{" not in text
    assert 'wattbit_controller_cpu_interrupts_total{controller="0000:00:02.0",cpu="1"}' in text
    assert 'interface="docker0"' not in text and 'interface="lo"' not in text
    assert not re.search(r"(?m)^(# (HELP|TYPE) )?process_", text)
    # the bulk pair, born after the baseline: its two phases of 64 MiB, once, under its
    # service port (its listener's); the sndbuf-limited pair, born and closed between two
    # samples: its 8 MiB from the destroy messages
    assert (
        'wattbit_tcp_flow_received_bytes_total{activity="",cgroup="",experiment="",'
        'peer="127.0.0.1",port="34647",process=""} 1.34217728e+08\n'
    ) in text
    assert (
        'wattbit_tcp_flow_received_bytes_total{activity="",cgroup="",experiment="",'
        'peer="127.0.0.1",port="60036",process=""} 8.388608e+06\n'
    ) in text


def test_promtool_accepts_the_golden() -> None:
    promtool_accepts(GOLDEN)


def test_machine_is_only_the_fixtures(tmp_path: Path) -> None:
    """The tree holds no link out of itself: nothing of the real machine is read."""
    sys_root, _ = machine(tmp_path)
    for dirpath, dirnames, filenames in os.walk(sys_root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                assert os.path.realpath(path).startswith(str(sys_root.resolve()) + os.sep), path


def test_cpu_exporter_is_opt_in(tmp_path: Path) -> None:
    """Off by default (node_exporter has node_cpu_seconds_total); on, the VM's /proc/stat."""
    sys_root, proc_root = machine(tmp_path)
    (proc_root / "stat").write_text((FIXTURES / "proc" / "stat-6.18-vm").read_text())
    off = {
        "blockio": {"backend": "diskstats"},
        "smart": {"enabled": False},
        "tcp": {"enabled": False},
    }
    default = AgentConfig.model_validate(off)
    on = AgentConfig.model_validate({**off, "cpu": {"enabled": True}})
    for cfg, expected in (
        (default, ["blockio", "nic", "power", "pcie"]),
        (on, ["blockio", "nic", "power", "pcie", "cpu"]),
    ):
        exporters = build_exporters(
            cfg, sys_root=sys_root, proc_root=proc_root, ethtool=RecordedEthtool()
        )
        try:
            assert [e.name for e in exporters] == expected
            body = scrape(metrics_app(build_registry(exporters))).decode()
        finally:
            for e in exporters:
                e.close()
        assert ('wattbit_cpu_seconds_total{cpu="1",mode="steal"} 0.88' in body) == (cfg is on)
