"""Block-device topology parsed from captured and reconstructed /sys trees.

Goldens: tests/fixtures/sys/<scenario>.prom hold the exact exposition of wattbit_disk_info for
the tree in tests/fixtures/sys/<scenario>.tar. The trees are kept as tar archives because
sysfs is full of symlink cycles (device -> ... -> device) that os.walk(followlinks=True) in
packaging and collection tools would follow for ever; they are unpacked once per session.
After an intended change, rewrite the goldens with WATTBIT_UPDATE_GOLDEN=1 and review the
diff; by default a mismatch fails.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from exporters.blockio.diskinfo import INFO_LABELS, disk_info_metric
from exporters.hostfs.blockdevs import DiskInfo, SharedTopology, devt_names, read_topology
from tests.support.clock import ManualClock

SYS_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sys"


def _unpack() -> Path:
    dest = Path(tempfile.mkdtemp(prefix="wattbit-sysfs-"))
    for archive in sorted(SYS_FIXTURES.glob("*.tar")):
        with tarfile.open(archive) as tar:
            tar.extractall(dest)  # our own fixture archives
    return dest


TREES = _unpack()
atexit.register(shutil.rmtree, TREES, True)
SCENARIOS = [
    "captured_vm",  # this machine, by capture.py: virtio vda, unbound loops, zram
    "nvme_two_socket",
    "sata_ahci",
    "sas_mpt3sas",
    "dm_md",
    "nvme_multipath",
]
UPDATE = os.environ.get("WATTBIT_UPDATE_GOLDEN") == "1"


class _Static:
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> list[Metric]:
        return [self.metric]


def render(infos: dict[str, DiskInfo]) -> bytes:
    registry = CollectorRegistry()
    registry.register(_Static(disk_info_metric(infos.values())))
    return generate_latest(registry)


def copy_tree(scenario: str, dest: Path) -> Path:
    root = dest / scenario
    shutil.copytree(TREES / scenario, root, symlinks=True)
    return root


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_exposition(scenario: str) -> None:
    golden = SYS_FIXTURES / f"{scenario}.prom"
    got = render(read_topology(TREES / scenario))
    if UPDATE:
        golden.write_bytes(got)
    assert golden.exists(), f"no golden {golden}: run with WATTBIT_UPDATE_GOLDEN=1"
    # Compared as text for a readable diff; UTF-8 both ways, so equal text is equal bytes.
    assert got.decode() == golden.read_bytes().decode(), "intended? WATTBIT_UPDATE_GOLDEN=1"


def test_every_fixture_tree_is_tested() -> None:
    trees = sorted(p.name for p in TREES.iterdir() if p.is_dir() and p.name[0] != "_")
    assert trees == sorted(SCENARIOS)


def test_fixture_links_are_relative_and_stay_inside() -> None:
    for scenario in SCENARIOS:
        root = TREES / scenario
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                if path.is_symlink():
                    target = os.readlink(path)
                    assert not os.path.isabs(target), path
                    assert os.path.realpath(path).startswith(str(root.resolve()) + os.sep), path


def test_metric_shape() -> None:
    topo = read_topology(TREES / "sata_ahci")
    family = disk_info_metric(reversed(list(topo.values())))
    assert family.name == "wattbit_disk_info"
    assert family.type == "gauge"
    assert [s.labels["device"] for s in family.samples] == ["sda", "sda1", "sda2", "sdb"]
    for sample in family.samples:
        assert sample.name == "wattbit_disk_info"
        assert sample.value == 1.0
        assert set(sample.labels) == set(INFO_LABELS)
    text = render(topo).decode()
    assert "wattbit_disk_info{" in text
    assert "_info_info" not in text
    assert 'wattbit_disk_info{controller="0000:00:17.0",device="sda1",' in text


def test_captured_vm() -> None:
    topo = read_topology(TREES / "captured_vm")
    vda = topo["vda"]
    assert (vda.major, vda.minor) == (254, 0)
    assert vda.controller == "0000:00:02.0"  # the virtio-blk PCI function, not virtio1
    assert vda.numa_node == "-1"  # a VM without NUMA affinity
    assert vda.serial == "overlayblk"  # virtio's own "serial" attribute
    assert vda.model == ""
    assert vda.size_bytes == 536870912 * 512
    # Unbound loops are returned; the caller filters.
    assert topo["loop3"].size_bytes == 0
    assert topo["loop3"].controller == topo["loop3"].numa_node == ""
    assert set(topo) == {f"loop{i}" for i in range(8)} | {"vda", "zram0"}


def test_nvme_two_socket() -> None:
    topo = read_topology(TREES / "nvme_two_socket")
    assert topo["nvme0n1"].controller == "0000:31:00.0"
    assert topo["nvme0n1"].numa_node == "0"
    assert topo["nvme1n1"].controller == "0000:b1:00.0"
    assert topo["nvme1n1"].numa_node == "1"
    # Behind a PCIe switch: the endpoint, not the root or switch ports above it.
    assert topo["nvme2n1"].controller == "0000:4d:00.0"
    assert topo["nvme0n1"].serial == "S64HNE0R401234"  # device/serial of the controller
    assert topo["nvme0n1"].model == "SAMSUNG MZQL23T8HCLS-00A07"
    for part in ("nvme0n1p1", "nvme0n1p2"):
        info = topo[part]
        assert info.parent == "nvme0n1"
        assert (info.controller, info.numa_node, info.rotational) == ("0000:31:00.0", "0", "0")
    assert topo["nvme0n1p1"].size_bytes == 1048576 * 512
    assert topo["nvme0n1"].parent == ""


def test_sata_ahci() -> None:
    topo = read_topology(TREES / "sata_ahci")
    assert topo["sda1"].parent == topo["sda2"].parent == "sda"
    assert topo["sda1"].controller == "0000:00:17.0"
    assert topo["sda"].rotational == "0"
    assert topo["sdb"].rotational == "1"
    # Serials from vpd_pg80, with the ATA padding (right for Samsung, left for WD) stripped.
    assert topo["sda"].serial == "S3Z2NB0K123456A"
    assert topo["sdb"].serial == "WD-WCC7K1234567"
    assert topo["sda2"].serial == "S3Z2NB0K123456A"
    assert topo["sdb"].model == "WDC WD40EFRX-68N"  # the 16-byte SCSI model, padding stripped


def test_sas_mpt3sas() -> None:
    topo = read_topology(TREES / "sas_mpt3sas")
    assert topo["sdb"].controller == topo["sdc"].controller == "0000:3b:00.0"
    assert topo["sdb"].numa_node == "0"
    assert topo["sdb"].serial == "ZC1ABCDE0000C830F1A2"
    assert topo["sdc"].serial == "Y9S0A01ATNTF"
    assert (topo["sdb"].major, topo["sdb"].minor) == (8, 16)


def test_dm_md_have_no_controller_and_no_model() -> None:
    topo = read_topology(TREES / "dm_md")
    for name in ("dm-0", "md0"):
        info = topo[name]
        assert (info.model, info.serial, info.controller, info.numa_node) == ("", "", "", "")
        assert info.parent == ""
    assert topo["dm-0"].model != "vg0-root"  # dm/name is a volume name
    assert (topo["dm-0"].major, topo["md0"].major) == (253, 9)
    assert topo["sdb1"].parent == "sdb"


def test_nvme_multipath_heads() -> None:
    topo = read_topology(TREES / "nvme_multipath")
    # Hidden path devices (no dev_t) are not block devices userspace sees.
    assert set(topo) == {"nvme0n1", "nvme0n1p1", "nvme1n1"}
    assert topo["nvme0n1"].controller == "0000:c1:00.0"
    assert topo["nvme0n1"].numa_node == "1"
    assert topo["nvme0n1"].serial == "X1T0A00ATLF8"  # from the subsystem
    # Two paths: the first in natural order, nvme1c1n1 on controller nvme1.
    assert topo["nvme1n1"].controller == "0000:41:00.0"
    assert topo["nvme1n1"].numa_node == "0"
    assert topo["nvme0n1p1"].parent == "nvme0n1"
    assert topo["nvme0n1p1"].controller == "0000:c1:00.0"


def test_nvme_multipath_without_multipath_dir(tmp_path: Path) -> None:
    # Kernels before the head's multipath/ group: fall back to the subsystem's controllers.
    root = copy_tree("nvme_multipath", tmp_path)
    for head in root.glob("devices/virtual/nvme-subsystem/*/nvme*n*"):
        shutil.rmtree(head / "multipath")
    topo = read_topology(root)
    assert topo["nvme0n1"].controller == "0000:c1:00.0"
    assert topo["nvme1n1"].controller == "0000:41:00.0"


def test_hidden_path_device_with_a_dev_t(tmp_path: Path) -> None:
    # Kernels that still exported a dev for hidden disks: not a device of its own in the
    # topology (the head stands for it), but its dev_t still has a name for event decoding.
    root = copy_tree("nvme_multipath", tmp_path)
    (path_dev,) = root.glob("devices/**/nvme/nvme0/nvme0c0n1")
    (path_dev / "dev").write_text("259:7\n")
    assert "nvme0c0n1" not in read_topology(root)
    assert devt_names(root)[(259, 7)] == "nvme0c0n1"


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("sata_ahci", {(8, 0): "sda", (8, 1): "sda1", (8, 2): "sda2", (8, 16): "sdb"}),
        ("nvme_multipath", {(259, 0): "nvme0n1", (259, 1): "nvme0n1p1", (259, 2): "nvme1n1"}),
        (
            "dm_md",
            {
                (8, 0): "sda",
                (8, 1): "sda1",
                (8, 16): "sdb",
                (8, 17): "sdb1",
                (9, 0): "md0",
                (253, 0): "dm-0",
            },
        ),
    ],
)
def test_devt_names(scenario: str, expected: dict[tuple[int, int], str]) -> None:
    assert devt_names(TREES / scenario) == expected


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_devt_names_agree_with_topology(scenario: str) -> None:
    topo = read_topology(TREES / scenario)
    names = devt_names(TREES / scenario)
    assert names == {(i.major, i.minor): i.device for i in topo.values()}


def test_wwid_when_no_vpd_pg80(tmp_path: Path) -> None:
    root = copy_tree("sas_mpt3sas", tmp_path)
    (pg80,) = root.glob("devices/**/0:0:1:0/vpd_pg80")
    pg80.unlink()
    assert read_topology(root)["sdb"].serial == "naa.5000c500a1b2c3d4"


def test_unreadable_files_give_empty_strings(tmp_path: Path) -> None:
    root = copy_tree("sata_ahci", tmp_path)
    (sdev,) = root.glob("devices/**/2:0:0:0")
    (sdev / "model").unlink()
    (sdev / "model").mkdir()  # reading a directory fails like an unreadable attribute
    (sdev / "vpd_pg80").write_bytes(b"\x00\x80")  # truncated page
    (sdev / "wwid").unlink()
    (sdev / "wwid").symlink_to("nowhere")  # dangling
    (root / "devices/pci0000:00/0000:00:17.0/numa_node").unlink()
    sda = read_topology(root)["sda"]
    assert (sda.model, sda.serial) == ("", "")
    # numa_node also missing from bus/pci/devices (the same file): unknown, not "".
    assert (sda.controller, sda.numa_node) == ("0000:00:17.0", "-1")


def test_links_never_leave_the_tree(tmp_path: Path) -> None:
    root = copy_tree("captured_vm", tmp_path)
    block = root / "class" / "block"
    outside = tmp_path / "outside"  # next to the tree, as the real /sys would be
    outside.mkdir()
    (outside / "dev").write_text("8:0\n")
    (outside / "model").write_text("LEAKED\n")
    os.symlink(os.path.relpath(outside, block), block / "escape")
    os.symlink(str(outside), block / "absolute")
    os.symlink("cyclic", block / "cyclic")
    vda = next(root.glob("devices/**/block/vda"))
    (vda / "device").unlink()
    os.symlink(os.path.relpath(outside, vda), vda / "device")
    assert (vda / "device" / "model").read_text() == "LEAKED\n"  # what the OS would do
    topo = read_topology(root)
    assert not {"escape", "absolute", "cyclic"} & set(topo)
    assert topo["vda"].model == ""
    assert (8, 0) not in devt_names(root)
    assert devt_names(root)[(254, 0)] == "vda"


def test_vmd_domain_controller(tmp_path: Path) -> None:
    # Intel VMD: NVMe behind it sits in PCI domain 10000+, five hex digits.
    disk = tmp_path / (
        "devices/pci0000:64/0000:64:05.5/pci10000:00/10000:00:02.0/10000:01:00.0/nvme/nvme0/nvme0n1"
    )
    disk.mkdir(parents=True)
    (disk / "dev").write_text("259:0\n")
    (disk.parents[2] / "numa_node").write_text("0\n")
    (tmp_path / "class/block").mkdir(parents=True)
    os.symlink(os.path.relpath(disk, tmp_path / "class/block"), tmp_path / "class/block/nvme0n1")
    info = read_topology(tmp_path)["nvme0n1"]
    assert (info.controller, info.numa_node) == ("10000:01:00.0", "0")
    assert (info.rotational, info.size_bytes) == ("", 0)


def test_empty_or_missing_tree(tmp_path: Path) -> None:
    assert read_topology(tmp_path) == {}
    assert read_topology(tmp_path / "absent") == {}
    assert devt_names(tmp_path / "absent") == {}
    assert render({}) == (
        b"# HELP wattbit_disk_info Block device topology: model, serial, host controller PCI "
        b"address and its NUMA node.\n# TYPE wattbit_disk_info gauge\n"
    )


def test_pure_over_the_tree(tmp_path: Path) -> None:
    root = copy_tree("sata_ahci", tmp_path)
    first = read_topology(root)
    assert read_topology(root) == first
    next(root.glob("devices/**/block/sdb/queue/rotational")).write_text("0\n")
    assert read_topology(root)["sdb"].rotational == "0"  # no caching across calls


def test_capture_roundtrip(tmp_path: Path) -> None:
    # capture.py keeps everything the parser reads: capturing a fixture changes nothing.
    spec = importlib.util.spec_from_file_location("capture", SYS_FIXTURES / "capture.py")
    assert spec is not None and spec.loader is not None
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    for scenario in SCENARIOS:
        dest = tmp_path / scenario
        assert capture.main(["--src", str(TREES / scenario), str(dest)]) == 0
        assert read_topology(dest) == read_topology(TREES / scenario), scenario


def test_shared_topology_reads_once_for_its_readers_until_devices_change(tmp_path: Path) -> None:
    """SharedTopology (blockio and pcie in one agent, issue 35): a second reader within max_age
    gets the same read; a device that comes, max_age passing, or force read afresh."""
    root = copy_tree("sata_ahci", tmp_path)
    clock = ManualClock(100.0)
    shared = SharedTopology(root, max_age=1.0, clock=clock)
    first = shared.read()
    assert first == read_topology(root) and shared.reads == 1
    clock.now += 0.5
    assert shared.read() is first and shared.reads == 1  # the other reader, same scrape
    assert shared.read(force=True) == first and shared.reads == 2  # blockio: an unknown device
    clock.now += 1.0
    shared.read()
    assert shared.reads == 3  # older than max_age
    block = root / "class" / "block"
    name = sorted(os.listdir(block))[0]
    (block / name).rename(block / "gone")  # the listing changes within max_age
    changed = shared.read()
    assert shared.reads == 4 and name not in changed
    alone = SharedTopology(root, max_age=0.0, clock=clock)  # an exporter's own: every time
    alone.read()
    alone.read()
    assert alone.reads == 2


def test_the_agent_gives_blockio_and_pcie_one_topology() -> None:
    from collector.agent.config import AgentConfig
    from collector.agent.main import build_exporters
    from exporters.blockio.exporter import BlockioExporter
    from exporters.pcie.exporter import PcieExporter

    root = TREES / "sata_ahci"
    cfg = AgentConfig.model_validate({"blockio": {"backend": "diskstats"}})
    exporters = build_exporters(cfg, sys_root=root, start=False)
    try:
        (blockio,) = [e for e in exporters if isinstance(e, BlockioExporter)]
        (pcie,) = [e for e in exporters if isinstance(e, PcieExporter)]
        assert blockio.topology._source is pcie._disks
        assert isinstance(pcie._disks, SharedTopology) and pcie._disks.max_age > 0
    finally:
        for e in exporters:
            e.close()
