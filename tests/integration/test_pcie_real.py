"""The pcie exporter on this machine's real /sys and /proc.

This VM's disk vda is virtio-blk on PCI function 0000:00:02.0 and its NIC virtio-net on
0000:00:03.0, both on conventional PCI (no PCIe link files): their chains are there with no
link values, never made-up zeros. The controller's interrupts are real: the test writes a
file on the disk the repository sits on, synced write by write (so the writes reach the
device and complete with interrupts), and checks the exporter's per-CPU counts against
/proc/interrupts read before and after the scrape by a parse of its own (split on
whitespace): each count lies between the two.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.hostfs.blockdevs import read_topology
from exporters.pcie.exporter import PcieExporter
from tests.support.env import ROOT, require


def interrupts_of(irqs: set[str]) -> dict[str, int]:
    """{cpu: interrupts} summed over irqs, from /proc/interrupts (an independent parse)."""
    lines = Path("/proc/interrupts").read_text().splitlines()
    cpus = [c.removeprefix("CPU") for c in lines[0].split()]
    out = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        if label.strip() in irqs:
            for cpu, count in zip(cpus, rest.split()[: len(cpus)], strict=True):
                out[cpu] += int(count)
    return out


def write_through(directory: Path, count: int = 32) -> None:
    """count 64 KiB writes to a new file in directory, each made durable (fdatasync): each
    reaches the disk under it and completes with an interrupt."""
    path = directory / f".wattbit-pcie-real-{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for i in range(count):
            os.pwrite(fd, os.urandom(65536), i * 65536)
            os.fdatasync(fd)
    finally:
        os.close(fd)
        path.unlink()


def test_real_virtio_controller_and_its_interrupts() -> None:
    # The disk under the repository's own file system, if it sits on a PCI controller.
    st = os.stat(ROOT)
    disks = {
        n: d
        for n, d in read_topology(Path("/sys")).items()
        if d.controller and (d.major, d.minor) == (os.major(st.st_dev), os.minor(st.st_dev))
    }
    require(bool(disks), "the repository is not on a disk with a PCI controller here")
    disk = disks[sorted(disks)[0]]
    controller = disk.controller
    msi = {p.name for p in Path(f"/sys/bus/pci/devices/{controller}/msi_irqs").iterdir()}
    require(bool(msi), f"{controller} has no MSI vectors")

    exporter = PcieExporter()
    write_through(ROOT)
    before = interrupts_of(msi)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    body = generate_latest(registry).decode()
    after = interrupts_of(msi)

    samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
    info = {s.labels["pci"]: s.labels for s in samples if s.name == "wattbit_pcie_link_info"}
    assert info[controller]["role"] == "controller"
    link_files = Path(f"/sys/bus/pci/devices/{controller}/current_link_speed")
    speeds = {s.labels["pci"] for s in samples if s.name.endswith("current_transfers_per_second")}
    assert (controller in speeds) == link_files.exists()  # virtio here: no PCIe link, no value
    vectors = {
        s.labels["irq"]
        for s in samples
        if s.name == "wattbit_controller_irq_info" and s.labels["controller"] == controller
    }
    assert vectors and vectors <= msi
    per_cpu = {
        s.labels["cpu"]: s.value
        for s in samples
        if s.name == "wattbit_controller_cpu_interrupts_total"
        and s.labels["controller"] == controller
    }
    assert per_cpu, "the synced writes raised no interrupt on any CPU"
    for cpu, count in per_cpu.items():
        assert before[cpu] <= count <= after[cpu], cpu
    # CPUs that took none have no series; every CPU that took some has one
    took_before = {cpu for cpu, count in before.items() if count}
    took_after = {cpu for cpu, count in after.items() if count}
    assert took_before <= set(per_cpu) <= took_after
