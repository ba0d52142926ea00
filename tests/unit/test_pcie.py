"""The pcie exporter on captured /sys trees of real machines, and on hostile ones.

Captured trees (tests/fixtures/sys/pcie/README.md has provenance and licence):
* node_exporter-sys.ttar: node_exporter's own fixture, an AMD root port 0000:00:02.1 (Gen3 x8
  running x4) above a Gen4 x4 NVMe 0000:01:00.0 running Gen3, and an Intel i350 0000:45:00.0
  (igb, Gen2 x4) below 0000:40:01.3. node_exporter's pcidevice collector read the same tree
  into node_exporter-e2e-pcidevice-links.prom (its end-to-end test output): the cross-check.
* procfs-sys.ttar: prometheus/procfs' fixture, with an mpt3sas HBA 0000:03:00.0 (Gen3 x8) in an
  x16 root port 0000:00:03.0, a SAS expander with three disks and one direct-attached disk,
  the same NVMe slot, and an ice NIC 0000:a2:00.0 (Gen4 x8) on root bus pci0000:a2.
Neither has block devices under its controllers: the tests add a disk's block directory
(dev file and class/block link, nothing else) where a disk is said to be, as a kernel would.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.pcie.disklinks import parse_sas, parse_sata
from exporters.pcie.exporter import PcieExporter
from exporters.pcie.links import (
    parse_speed,
    parse_width,
    read_chains,
    read_links,
    usable_bytes_per_second,
)
from tests.support.env import FIXTURES
from tests.support.tree import sys_link
from tests.support.ttar import extract

PCIE = FIXTURES / "sys" / "pcie"
NVME = "0000:01:00.0"
NVME_PORT = "0000:00:02.1"
HBA = "0000:03:00.0"
HBA_PORT = "0000:00:03.0"
ICE = "0000:a2:00.0"
I350 = "0000:45:00.0"
E1000E = "0000:00:1f.6"
HOST11 = f"devices/pci0000:00/{HBA_PORT}/{HBA}/host11"


@pytest.fixture(scope="module")
def trees() -> dict[str, Path]:
    """Both captured trees, extracted once (read-only for the tests that share them)."""
    dest = Path(tempfile.mkdtemp(prefix="wattbit-pcie-"))
    extract(PCIE / "node_exporter-sys.ttar", dest / "ne")
    extract(PCIE / "procfs-sys.ttar", dest / "pf")
    yield {"ne": dest / "ne" / "sys", "pf": dest / "pf" / "fixtures" / "sys"}
    shutil.rmtree(dest, ignore_errors=True)


def copy(tree: Path, tmp_path: Path) -> Path:
    """A private copy of a tree, to change."""
    root = tmp_path / "sys"
    shutil.copytree(tree, root, symlinks=True)
    return root


def add_disk(sys_root: Path, device_dir: str, name: str, minor: int) -> None:
    """A whole disk's block directory under device_dir, and its class/block link."""
    block = sys_root / device_dir / "block" / name
    block.mkdir(parents=True)
    (block / "dev").write_text(f"8:{minor}\n")
    (block / "size").write_text("1000\n")
    sys_link(sys_root / "class" / "block" / name, block)


def scrape(exporter: PcieExporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one collection."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def values(samples: dict, name: str, label: str = "pci") -> dict[str, float]:
    return {dict(k[1])[label]: v for k, v in samples.items() if k[0] == name}


# --- parsers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.5 GT/s PCIe", 2.5e9),
        ("5.0 GT/s PCIe", 5e9),
        ("8.0 GT/s PCIe\n", 8e9),
        ("16.0 GT/s PCIe", 16e9),
        ("32.0 GT/s PCIe", 32e9),
        ("64.0 GT/s PCIe", 64e9),
        ("2.5 GT/s", 2.5e9),  # before 4.17
        ("5 GT/s", 5e9),
        ("8 GT/s", 8e9),
        ("Unknown", None),
        ("Unknown speed", None),  # before 4.17
        ("", None),
        ("0 GT/s PCIe", None),
        ("-8 GT/s PCIe", None),
        ("nan GT/s PCIe", None),
        ("1e9 GT/s PCIe", None),
        ("9" * 5000 + " GT/s PCIe", None),
        ("8.0 GT/s PCIe 8.0 GT/s PCIe", None),
        ("33 MHz PCI", None),
    ],
)
def test_parse_speed(text: str, expected: float | None) -> None:
    assert parse_speed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *[("0", 0), ("1", 1), ("4\n", 4), ("16", 16), ("32", 32), ("x8", 8), ("33", None)],
        *[("", None), ("-1", None), ("four", None), ("9" * 5000, None), ("٤", None)],
    ],
)
def test_parse_width(text: str, expected: int | None) -> None:
    assert parse_width(text) == expected


@pytest.mark.parametrize(
    ("speed", "width", "expected"),
    [
        (2.5e9, 1, 250e6),  # 8b/10b
        (5e9, 8, 4e9),
        (8e9, 4, 8e9 * 4 / 8 * 128 / 130),  # 128b/130b: 3.938 GB/s
        (16e9, 16, 16e9 * 16 / 8 * 128 / 130),  # 31.5 GB/s
        (32e9, 4, 32e9 * 4 / 8 * 128 / 130),
        (64e9, 1, 7.5625e9),  # flit mode, 242 of 256 bytes
        (8e9, 0, 0.0),  # link down
        (128e9, 16, None),  # an encoding the table does not know
        (None, 4, None),
        (8e9, None, None),
    ],
)
def test_usable_bytes(speed: float | None, width: int | None, expected: float | None) -> None:
    got = usable_bytes_per_second(speed, width)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("text", "sata", "sas"),
    [
        ("1.5 Gbps", 1.5e9, None),
        ("3.0 Gbps", 3e9, None),
        ("6.0 Gbps\n", 6e9, None),
        ("<unknown>", None, None),
        ("6.0 Gbit", None, 6e9),
        ("12.0 Gbit", None, 12e9),
        ("22.5 Gbit", None, 22.5e9),
        ("Unknown", None, None),
        ("Phy disabled", None, None),
        ("Link Rate Unknown", None, None),
        ("Phy reset problem", None, None),
        ("", None, None),
        ("9" * 3000 + " Gbit", None, None),
    ],
)
def test_parse_disk_link_rates(text: str, sata: float | None, sas: float | None) -> None:
    assert (parse_sata(text), parse_sas(text)) == (sata, sas)


# --- the cross-check with node_exporter ----------------------------------------------------


def test_same_values_as_node_exporter_pcidevice(trees: dict[str, Path]) -> None:
    """node_exporter's pcidevice collector on this tree (its recorded e2e output) and ours."""
    ours_by_name = {
        "node_pcidevice_current_link_transfers_per_second": "speed",
        "node_pcidevice_max_link_transfers_per_second": "max_speed",
        "node_pcidevice_current_link_width": "width",
        "node_pcidevice_max_link_width": "max_width",
    }
    theirs: dict[tuple[str, str], float] = {}
    text = (PCIE / "node_exporter-e2e-pcidevice-links.prom").read_text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            lab = s.labels
            pci = f"{lab['segment']}:{lab['bus']}:{lab['device']}.{lab['function']}"
            theirs[(pci, ours_by_name[s.name])] = s.value
    assert len(theirs) == 12  # 3 devices x 4 values: the file is what we think it is

    nodes = read_chains(trees["ne"], {NVME: "controller", I350: "nic"})
    links = read_links(trees["ne"], nodes)
    ours = {
        (pci, attr): float(getattr(link, attr))
        for pci, link in links.items()
        for attr in ours_by_name.values()
        if getattr(link, attr) is not None
    }
    assert ours == theirs


def test_node_exporter_tree_chains(trees: dict[str, Path]) -> None:
    nodes = read_chains(trees["ne"], {NVME: "controller", I350: "nic"})
    assert {p: (n.role, n.upstream, n.root, n.driver) for p, n in nodes.items()} == {
        NVME_PORT: ("root_port", "", NVME_PORT, "pcieport"),
        NVME: ("controller", NVME_PORT, NVME_PORT, "nvme"),
        "0000:40:01.3": ("root_port", "", "0000:40:01.3", ""),  # a bare directory there
        I350: ("nic", "0000:40:01.3", "0000:40:01.3", "igb"),
    }
    links = read_links(trees["ne"], nodes)
    # A Gen4 x4 NVMe in a Gen3 slot: the drive gives up half its bandwidth: flagged.
    assert links[NVME].downgraded is True
    # The Gen3 x8 root port running x4 to an x4 drive is at what both ends support.
    assert links[NVME_PORT].downgraded is False
    assert links[NVME_PORT].usable == pytest.approx(8e9 * 4 / 8 * 128 / 130)
    assert links[I350].downgraded is False
    assert links[I350].usable == pytest.approx(2e9)  # Gen2 x4: 500 MB/s per lane
    assert links["0000:40:01.3"].speed is None and links["0000:40:01.3"].downgraded is None


def test_procfs_tree_as_procfs_reads_it(trees: dict[str, Path]) -> None:
    """prometheus/procfs' sysfs.PciDevices() on this tree (sysfs/pci_device_test.go)."""
    nodes = read_chains(trees["pf"], {NVME: "controller", ICE: "nic", HBA: "controller"})
    links = read_links(trees["pf"], nodes)
    got = {p: (x.speed, x.width, x.max_speed, x.max_width) for p, x in links.items()}
    assert got[NVME_PORT] == (8e9, 4, 8e9, 8)
    assert got[NVME] == (8e9, 4, 8e9, 4)
    assert got[ICE] == (16e9, 8, 16e9, 8)
    # Not in procfs' bus/pci/devices, found through its own directory under devices/
    assert HBA not in nodes  # without a path hint: bus/pci/devices lacks it


def test_wide_root_port_above_a_narrower_hba_is_not_downgraded(trees: dict[str, Path]) -> None:
    path = ("devices", "pci0000:00", HBA_PORT, HBA)
    nodes = read_chains(trees["pf"], {HBA: "controller"}, {HBA: path})
    links = read_links(trees["pf"], nodes)
    assert nodes[HBA].driver == "mpt3sas" and nodes[HBA].upstream == HBA_PORT
    assert (links[HBA_PORT].width, links[HBA_PORT].max_width) == (8, 16)
    assert links[HBA_PORT].downgraded is False  # x16 slot, x8 card: both at the card's best
    assert links[HBA].downgraded is False
    assert nodes[ICE if ICE in nodes else HBA].root == HBA_PORT


# --- the exporter on the captured trees ----------------------------------------------------


SAS_DISKS = {  # where the SCSI disk directories are in procfs' tree, and their phy's rate
    "sdb": ("port-11:0/expander-11:0/port-11:0:0/end_device-11:0:0/target11:0:7/11:0:7:0", 6e9),
    "sdc": ("port-11:0/expander-11:0/port-11:0:1/end_device-11:0:1/target11:0:8/11:0:8:0", 12e9),
    "sdd": ("port-11:0/expander-11:0/port-11:0:2/end_device-11:0:2/target11:0:9/11:0:9:0", 6e9),
    "sde": ("port-11:2/end_device-11:2/target11:0:0/11:0:0:0", 12e9),  # direct: phy-11:7
}


def sas_host(trees: dict[str, Path], tmp_path: Path) -> Path:
    root = copy(trees["pf"], tmp_path)
    for minor, (name, (rel, _)) in enumerate(SAS_DISKS.items()):
        add_disk(root, f"{HOST11}/{rel}", name, 16 * (minor + 1))
    return root


def test_exporter_on_a_sas_host(trees: dict[str, Path], tmp_path: Path) -> None:
    root = sas_host(trees, tmp_path)
    samples = scrape(PcieExporter(sys_root=root, proc_root=tmp_path / "noproc"))
    rates = {
        dict(k[1])["device"]: (dict(k[1])["transport"], v)
        for k, v in samples.items()
        if k[0] == "wattbit_disk_link_rate_bits_per_second"
    }
    assert rates == {name: ("sas", rate) for name, (_, rate) in SAS_DISKS.items()}
    info = {dict(k[1])["pci"]: dict(k[1]) for k in samples if k[0] == "wattbit_pcie_link_info"}
    # The HBA is found from its disks' own paths (procfs' bus/pci/devices does not list it);
    # eth0 is the e1000e-like function 00:1f.6 on the root bus (no PCIe link files there).
    assert set(info) == {HBA, HBA_PORT, E1000E}
    assert info[E1000E] == {
        "pci": E1000E,
        "role": "nic",
        "upstream": "",
        "root": "pci0000:00",
        "driver": "",
    }
    assert info[HBA] == {
        "pci": HBA,
        "role": "controller",
        "upstream": HBA_PORT,
        "root": HBA_PORT,
        "driver": "mpt3sas",
    }
    assert info[HBA_PORT]["role"] == "root_port" and info[HBA_PORT]["upstream"] == ""
    assert values(samples, "wattbit_pcie_link_usable_bytes_per_second") == {
        HBA: pytest.approx(8e9 * 8 / 8 * 128 / 130),
        HBA_PORT: pytest.approx(8e9 * 8 / 8 * 128 / 130),
    }
    assert values(samples, "wattbit_pcie_link_downgraded") == {HBA: 0.0, HBA_PORT: 0.0}


def test_a_wide_port_sums_its_phys(trees: dict[str, Path], tmp_path: Path) -> None:
    """A disk hanging off the HBA's 4-phy wide port (as the expander does): 4 x 12 Gbit."""
    root = copy(trees["pf"], tmp_path)
    rel = f"{HOST11}/port-11:0/end_device-11:9/target11:0:20/11:0:20:0"
    add_disk(root, rel, "sdz", 16)
    samples = scrape(PcieExporter(sys_root=root, proc_root=tmp_path / "noproc"))
    assert values(samples, "wattbit_disk_link_rate_bits_per_second", "device") == {"sdz": 48e9}


def test_sata_disks_synthetic_tree(tmp_path: Path) -> None:
    """libata's layout (drivers/ata/libata-transport.c), values as the kernel prints them."""
    root = tmp_path / "sys"
    ahci = "devices/pci0000:00/0000:00:17.0"
    (root / ahci).mkdir(parents=True)
    sys_link(root / "bus/pci/devices/0000:00:17.0", root / ahci)
    for port, spd in ((1, "6.0 Gbps\n"), (2, "3.0 Gbps\n"), (3, "<unknown>\n")):
        link = root / ahci / f"ata{port}/link{port}/ata_link/link{port}"
        link.mkdir(parents=True)
        (link / "sata_spd").write_text(spd)
        add_disk(root, f"{ahci}/ata{port}/host{port - 1}/target{port - 1}:0:0/{port - 1}:0:0:0",
                 f"sd{'abc'[port - 1]}", 16 * port)  # fmt: skip
    # a port multiplier: two links under one port, the disk's is not known
    pmp = root / ahci / "ata4"
    for sub in ("link4", "link4.0", "link4.1"):
        (pmp / sub / "ata_link" / sub).mkdir(parents=True)
        (pmp / sub / "ata_link" / sub / "sata_spd").write_text("6.0 Gbps\n")
    add_disk(root, f"{ahci}/ata4/host3/target3:1:0/3:1:0:0", "sdd", 64)
    samples = scrape(PcieExporter(sys_root=root, proc_root=tmp_path / "noproc"))
    assert values(samples, "wattbit_disk_link_rate_bits_per_second", "device") == {
        "sda": 6e9,
        "sdb": 3e9,
    }
    assert {dict(k[1])["transport"] for k in samples if k[0].startswith("wattbit_disk_link")} == {
        "sata"
    }
    # conventional PCI (no link files): the chain's info only, never made-up zeros
    assert values(samples, "wattbit_pcie_link_info") == {"0000:00:17.0": 1.0}
    assert not values(samples, "wattbit_pcie_link_current_width")


# --- a switch, downgrades, hostile trees ---------------------------------------------------


def switch_tree(root: Path, card_width: str = "8", card_max_width: str = "8") -> dict[str, str]:
    """Synthetic: root port 00:01.0 -> switch upstream 01:00.0 -> downstream 02:00.0 and
    02:01.0 -> an HBA 03:00.0 and a NIC 04:00.0 (Gen4 all along but where told)."""
    chain = {
        "0000:00:01.0": "devices/pci0000:00/0000:00:01.0",
        "0000:01:00.0": "devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        "0000:02:00.0": "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        "0000:02:01.0": "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
        "0000:03:00.0": "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        "0000:04:00.0": "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
    }
    widths = {
        "0000:00:01.0": ("16", "16"),
        "0000:01:00.0": ("16", "16"),
        "0000:02:00.0": (card_width, "16"),
        "0000:02:01.0": ("8", "8"),
        "0000:03:00.0": (card_width, card_max_width),
        "0000:04:00.0": ("8", "8"),
    }
    for pci, rel in chain.items():
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        current, maximum = widths[pci]
        for name, value in (
            ("current_link_speed", "16.0 GT/s PCIe"),
            ("max_link_speed", "16.0 GT/s PCIe"),
            ("current_link_width", current),
            ("max_link_width", maximum),
        ):
            (d / name).write_text(value + "\n")
        sys_link(root / "bus" / "pci" / "devices" / pci, d)
    return chain


def test_switch_roles_and_shared_upstream(tmp_path: Path) -> None:
    switch_tree(tmp_path)
    nodes = read_chains(tmp_path, {"0000:03:00.0": "controller", "0000:04:00.0": "nic"})
    got = {p: (n.role, n.upstream, n.root, n.faces_down) for p, n in nodes.items()}
    assert got == {
        "0000:00:01.0": ("root_port", "", "0000:00:01.0", True),
        "0000:01:00.0": ("bridge", "0000:00:01.0", "0000:00:01.0", False),  # upstream port
        "0000:02:00.0": ("bridge", "0000:01:00.0", "0000:00:01.0", True),  # downstream ports
        "0000:02:01.0": ("bridge", "0000:01:00.0", "0000:00:01.0", True),
        "0000:03:00.0": ("controller", "0000:02:00.0", "0000:00:01.0", False),
        "0000:04:00.0": ("nic", "0000:02:01.0", "0000:00:01.0", False),
    }
    links = read_links(tmp_path, nodes)
    assert not any(link.downgraded for link in links.values())
    # the HBA and the NIC share the switch's x16 Gen4 uplink: 31.5 GB/s each way
    assert links["0000:00:01.0"].usable == pytest.approx(16e9 * 16 / 8 * 128 / 130)


def test_card_trained_narrower_than_both_ends_flags_card_and_port(tmp_path: Path) -> None:
    switch_tree(tmp_path, card_width="4")  # an x8 card in an x16 slot running x4: a fault
    nodes = read_chains(tmp_path, {"0000:03:00.0": "controller"})
    links = read_links(tmp_path, nodes)
    assert links["0000:03:00.0"].downgraded is True
    assert links["0000:02:00.0"].downgraded is True
    assert links["0000:00:01.0"].downgraded is False


def test_card_in_a_narrower_slot_flags_the_card_only(tmp_path: Path) -> None:
    switch_tree(tmp_path, card_width="8", card_max_width="16")  # x16 card, x8 slot
    (tmp_path / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/max_link_width"
     ).write_text("8\n")  # fmt: skip
    nodes = read_chains(tmp_path, {"0000:03:00.0": "controller"})
    links = read_links(tmp_path, nodes)
    assert links["0000:03:00.0"].downgraded is True  # the card could do twice as much
    assert links["0000:02:00.0"].downgraded is False  # the slot is at its best


@pytest.mark.parametrize(
    ("speed", "width", "expect"),
    [
        ("Unknown\n", "8\n", {"width": 8.0}),
        ("16.0 GT/s PCIe\n", "0\n", {"speed": 16e9, "width": 0.0, "usable": 0.0, "down": 1.0}),
        ("garbage\x00\xff", "x\n", {}),
        ("", "", {}),
    ],
)
def test_odd_link_files(tmp_path: Path, speed: str, width: str, expect: dict[str, float]) -> None:
    switch_tree(tmp_path)
    d = tmp_path / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
    (d / "current_link_speed").write_text(speed, errors="surrogateescape")
    (d / "current_link_width").write_text(width)
    samples = scrape(PcieExporter(sys_root=tmp_path, proc_root=tmp_path / "noproc"))
    assert samples == {}  # no controller or NIC placed: the tree has no disks or interfaces
    nodes = read_chains(tmp_path, {"0000:04:00.0": "nic"})
    link = read_links(tmp_path, nodes)["0000:04:00.0"]
    got = {
        k: float(v)
        for k, v in (
            ("speed", link.speed),
            ("width", link.width),
            ("usable", link.usable),
            ("down", link.downgraded),
        )
        if v is not None
    }
    assert got == expect


def test_huge_attribute_is_read_bounded(tmp_path: Path) -> None:
    switch_tree(tmp_path)
    d = tmp_path / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
    (d / "current_link_speed").write_text("8" * (1 << 22))  # 4 MiB of digits
    nodes = read_chains(tmp_path, {"0000:04:00.0": "nic"})
    assert read_links(tmp_path, nodes)["0000:04:00.0"].speed is None


def test_symlink_loops_and_escapes(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "bus/pci/devices").mkdir(parents=True)
    (root / "bus/pci/devices/0000:05:00.0").symlink_to("0000:06:00.0")
    (root / "bus/pci/devices/0000:06:00.0").symlink_to("0000:05:00.0")  # a loop
    (root / "bus/pci/devices/0000:07:00.0").symlink_to("/sys/devices")  # absolute: foreign
    (root / "bus/pci/devices/0000:08:00.0").symlink_to("../../../../../../etc")  # escapes
    devices = {p: "nic" for p in ("0000:05:00.0", "0000:07:00.0", "0000:08:00.0", "bogus")}
    assert read_chains(root, devices) == {}
    # and through the exporter: a class/block entry looping on itself, an interface whose
    # device link loops, one leaving the tree for the machine's own /etc
    (root / "class/block").mkdir(parents=True)
    (root / "class/block/sdx").symlink_to("sdx")
    (root / "class/net/eth9").mkdir(parents=True)
    (root / "class/net/eth9/device").symlink_to("device")
    (root / "class/net/eth8").mkdir(parents=True)
    (root / "class/net/eth8/device").symlink_to("/sys/devices/pci0000:00")
    assert scrape(PcieExporter(sys_root=root, proc_root=tmp_path / "noproc")) == {}


def test_churn_a_controller_and_a_nic_leave(trees: dict[str, Path], tmp_path: Path) -> None:
    root = sas_host(trees, tmp_path)
    # the i350 of node_exporter's tree, moved in as this host's NIC eth3
    nic = root / "devices/pci0000:40/0000:40:01.3/0000:45:00.0"
    shutil.copytree(trees["ne"] / "devices/pci0000:40", root / "devices/pci0000:40", symlinks=True)
    (root / "devices/pci0000:40/0000:40:01.3/0000:45:00.0/driver").unlink()
    eth3 = nic / "net" / "eth3"
    eth3.mkdir(parents=True)
    (eth3 / "flags").write_text("0x1003\n")
    sys_link(eth3 / "device", nic)
    sys_link(root / "class" / "net" / "eth3", eth3)
    clock = [0.0]
    exporter = PcieExporter(sys_root=root, proc_root=tmp_path / "noproc", clock=lambda: clock[0])
    first = values(scrape(exporter), "wattbit_pcie_link_info")
    assert set(first) == {HBA, HBA_PORT, E1000E, I350, "0000:40:01.3"}

    (root / "class/net/eth3").unlink()  # the NIC leaves: at once, not after the refresh
    clock[0] = 1.0
    second = scrape(exporter)
    assert set(values(second, "wattbit_pcie_link_info")) == {HBA, HBA_PORT, E1000E}
    assert not any(dict(k[1]).get("pci") in (I350, "0000:40:01.3") for k in second)

    for name in SAS_DISKS:  # every disk of the HBA leaves
        (root / "class/block" / name).unlink()
    clock[0] = 2.0
    third = scrape(exporter)
    assert set(values(third, "wattbit_pcie_link_info")) == {E1000E}
    assert not values(third, "wattbit_disk_link_rate_bits_per_second", "device")


def test_chains_are_cached_until_the_refresh(trees: dict[str, Path], tmp_path: Path) -> None:
    root = sas_host(trees, tmp_path)
    clock = [0.0]
    exporter = PcieExporter(
        sys_root=root, proc_root=tmp_path / "noproc", refresh=60, clock=lambda: clock[0]
    )
    scrape(exporter)
    hba = root / "devices/pci0000:00/0000:00:03.0/0000:03:00.0"
    (hba / "max_link_width").write_text("16\n")  # cached: not read again before the refresh
    (hba / "current_link_width").write_text("4\n")  # read every scrape
    clock[0] = 30.0
    samples = scrape(exporter)
    assert values(samples, "wattbit_pcie_link_max_width")[HBA] == 8.0
    assert values(samples, "wattbit_pcie_link_current_width")[HBA] == 4.0
    assert values(samples, "wattbit_pcie_link_downgraded")[HBA] == 1.0
    clock[0] = 61.0
    assert values(scrape(exporter), "wattbit_pcie_link_max_width")[HBA] == 16.0


# --- controller interrupts -----------------------------------------------------------------


INTERRUPTS_SYNTHETIC = """\
           CPU0       CPU1       CPU2       CPU3
  28:          0          0       5000          7  IO-APIC  16-fasteoi   mpt3sas0
  80:         12          0          0          0  IR-PCI-MSI 1048576-edge      nvme0q0
  81:       3000          0          0          0  IR-PCI-MSI 1048577-edge      nvme0q1
  82:          0       4000          0          0  IR-PCI-MSI 1048578-edge      nvme0q2
"""


def test_controller_interrupts(trees: dict[str, Path], tmp_path: Path) -> None:
    """mpt3sas on a legacy line (its `irq` file: 28) and the NVMe's MSI-X vectors."""
    root = sas_host(trees, tmp_path)
    nvme = root / "devices/pci0000:00/0000:00:02.1/0000:01:00.0"
    add_disk(root, str((nvme / "nvme/nvme0").relative_to(root)), "nvme0n1", 0)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "interrupts").write_text(INTERRUPTS_SYNTHETIC)
    for irq, (allowed, effective) in {
        "28": ("0-3", "2"),
        "81": ("0", "0"),
        "82": ("1", "1"),
    }.items():
        (proc / "irq" / irq).mkdir(parents=True)
        (proc / "irq" / irq / "smp_affinity_list").write_text(allowed + "\n")
        (proc / "irq" / irq / "effective_affinity_list").write_text(effective + "\n")
    samples = scrape(PcieExporter(sys_root=root, proc_root=proc))
    per_cpu = {
        (dict(k[1])["controller"], dict(k[1])["cpu"]): v
        for k, v in samples.items()
        if k[0] == "wattbit_controller_cpu_interrupts_total"
    }
    assert per_cpu == {
        (HBA, "2"): 5000.0,
        (HBA, "3"): 7.0,
        (NVME, "0"): 3000.0,  # q1 only: 80 is not among its msi_irqs
        (NVME, "1"): 4000.0,
    }
    info = {
        (dict(k[1])["controller"], dict(k[1])["irq"]): (
            dict(k[1])["affinity"],
            dict(k[1])["effective_affinity"],
        )
        for k in samples
        if k[0] == "wattbit_controller_irq_info"
    }
    # The NVMe's msi_irqs lists 81-89; 80 is not among them, 83-89 not in /proc/interrupts.
    assert info == {(HBA, "28"): ("0-3", "2"), (NVME, "81"): ("0", "0"), (NVME, "82"): ("1", "1")}


def test_controller_irqs_can_be_turned_off(trees: dict[str, Path], tmp_path: Path) -> None:
    root = sas_host(trees, tmp_path)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "interrupts").write_text(INTERRUPTS_SYNTHETIC)
    on = scrape(PcieExporter(sys_root=root, proc_root=proc))
    off = scrape(PcieExporter(sys_root=root, proc_root=proc, controller_irqs=False))
    assert any(k[0].startswith("wattbit_controller_") for k in on)
    assert not any(k[0].startswith("wattbit_controller_") for k in off)
    assert {k for k in on if not k[0].startswith("wattbit_controller_")} == set(off)


def test_affinity_labels_follow_within_the_refresh(trees: dict[str, Path], tmp_path: Path) -> None:
    """irqbalance moves the HBA's line from CPU 2 to CPU 3: the per-CPU counts show it at once,
    the info's affinity labels at the next refresh of the chains."""
    root = sas_host(trees, tmp_path)
    proc = tmp_path / "proc"
    (proc / "irq" / "28").mkdir(parents=True)
    (proc / "interrupts").write_text(INTERRUPTS_SYNTHETIC)
    (proc / "irq/28/smp_affinity_list").write_text("0-3\n")
    (proc / "irq/28/effective_affinity_list").write_text("2\n")
    clock = [0.0]
    exporter = PcieExporter(sys_root=root, proc_root=proc, refresh=60, clock=lambda: clock[0])

    def hba() -> tuple[set[str], dict[str, float]]:
        samples = scrape(exporter)
        effective = {
            dict(k[1])["effective_affinity"]
            for k in samples
            if k[0] == "wattbit_controller_irq_info" and dict(k[1])["controller"] == HBA
        }
        per_cpu = {
            dict(k[1])["cpu"]: v
            for k, v in samples.items()
            if k[0] == "wattbit_controller_cpu_interrupts_total" and dict(k[1])["controller"] == HBA
        }
        return effective, per_cpu

    assert hba() == ({"2"}, {"2": 5000.0, "3": 7.0})
    (proc / "irq/28/effective_affinity_list").write_text("3\n")
    (proc / "interrupts").write_text(INTERRUPTS_SYNTHETIC.replace("7  IO-APIC", "9007  IO-APIC"))
    clock[0] = 30.0
    assert hba() == ({"2"}, {"2": 5000.0, "3": 9007.0})
    clock[0] = 61.0
    assert hba() == ({"3"}, {"2": 5000.0, "3": 9007.0})


def test_vmd_domain(tmp_path: Path) -> None:
    """Intel VMD: NVMe behind root ports of a domain (10000) under a VMD endpoint on bus 0."""
    root = tmp_path / "sys"
    vmd = root / "devices/pci0000:00/0000:00:0e.0/pci10000:00"
    port, drive = vmd / "10000:00:02.0", vmd / "10000:00:02.0/10000:01:00.0"
    for d, (cur, mx) in ((port, ("4", "4")), (drive, ("4", "4"))):
        d.mkdir(parents=True, exist_ok=True)
        (d / "current_link_speed").write_text("16.0 GT/s PCIe\n")
        (d / "max_link_speed").write_text("16.0 GT/s PCIe\n")
        (d / "current_link_width").write_text(cur + "\n")
        (d / "max_link_width").write_text(mx + "\n")
    sys_link(root / "bus/pci/devices/10000:01:00.0", drive)
    nodes = read_chains(root, {"10000:01:00.0": "controller"})
    assert {p: (n.role, n.upstream, n.root) for p, n in nodes.items()} == {
        "10000:00:02.0": ("root_port", "", "10000:00:02.0"),
        "10000:01:00.0": ("controller", "10000:00:02.0", "10000:00:02.0"),
    }
    assert not any(link.downgraded for link in read_links(root, nodes).values())
