"""exporters/hostfs, the one room for reading the host: bounded reads (a cap, regular files only,
clear errors), the tree walked inside its root, the PCI address pattern, the device filters.

The readers run on this machine's real /proc too (a procfs file is read whole past a page and
refused past its cap); the parsers' own tests are test_nic_procfs.py (/proc/interrupts),
test_topology.py (block devices) and test_pcie.py (PCI chains).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path

import pytest

from exporters.hostfs.blockdevs import BLOCK_EXCLUDE, DiskInfo, excluded
from exporters.hostfs.interrupts import parse_interrupts
from exporters.hostfs.netdevs import NIC_EXCLUDE, is_loopback, wanted_interfaces
from exporters.hostfs.numbers import parse_u32, parse_u64
from exporters.hostfs.pci import PCI_ADDR, ROOT_BUS, last_pci, msi_irqs
from exporters.hostfs.read import (
    ATTR_MAX,
    HeldAttrs,
    NotAFile,
    TooLarge,
    read_attr,
    read_bytes,
    read_proc,
)
from exporters.hostfs.tree import attr_in, bytes_in, entries_in, is_file_in, resolve_in
from tests.support.env import require
from tests.support.tree import sys_link, write_file

# --- bounded reads ----------------------------------------------------------------------------


def test_a_file_up_to_the_cap_is_read_whole_past_it_refused(tmp_path: Path) -> None:
    f = tmp_path / "big"
    f.write_bytes(b"x" * (3 << 20))  # several read() calls of 1 MiB
    assert read_bytes(f, 3 << 20) == b"x" * (3 << 20)
    with pytest.raises(TooLarge) as exc:
        read_bytes(f, (3 << 20) - 1)
    assert exc.value.errno == errno.EFBIG and str(f) in str(exc.value)
    assert read_attr(f) == ""  # an attribute over the cap is unknown, never a cut value
    assert read_proc(f, limit=10) == ""


@pytest.mark.parametrize(
    "size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 16, (3 << 16) + 1, 3 << 19]
)
def test_reads_that_grow_from_64_kib_meet_the_cap_exactly(tmp_path: Path, size: int) -> None:
    """The reads ask for 64 KiB, then twice the last (up to 1 MiB): around each step, a file
    of exactly the cap is read whole, one byte more is refused."""
    f = tmp_path / "f"
    data = os.urandom(size)
    f.write_bytes(data)
    assert read_bytes(f, size) == data
    assert read_bytes(f, size + 1) == data
    if size:
        with pytest.raises(TooLarge):
            read_bytes(f, size - 1)


def test_a_large_seq_file_is_read_whole_in_growing_reads() -> None:
    """procfs says size 0 and answers each read() in parts: /proc/kallsyms (megabytes) comes
    whole, as Python's own reads of it just before and after give it. It changes only when a
    module loads (another test's veth or netem may): then those two differ, and it is read
    again."""

    def python_read() -> str:
        with open("/proc/kallsyms") as f:
            return f.read()

    for _ in range(10):
        before, got, after = python_read(), read_proc("/proc/kallsyms"), python_read()
        if before == after:
            break
    assert before == after, "/proc/kallsyms changed at every try"
    assert len(before) > 4 << 20  # past every step of the growing reads
    assert got == before


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # with no writer: a blocking open would hang the scrape
    with pytest.raises(NotAFile, match="FIFO"):
        read_bytes(fifo, ATTR_MAX)
    with pytest.raises(NotAFile, match="directory"):
        read_bytes(tmp_path, ATTR_MAX)
    with pytest.raises(NotAFile, match="device"):
        read_bytes("/dev/zero", ATTR_MAX)  # endless: refused before any read
    assert read_attr(fifo) == "" and read_proc("/dev/zero") == ""


def test_refused_files_are_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fifo = tmp_path / "said-once"
    os.mkfifo(fifo)
    with caplog.at_level(logging.WARNING, logger="exporters.hostfs.read"):
        read_attr(fifo)
        read_attr(fifo)
    said = [r for r in caplog.records if str(fifo) in r.getMessage()]
    assert len(said) == 1 and "not a regular file" in said[0].getMessage()


def test_missing_and_links(tmp_path: Path) -> None:
    assert read_attr(tmp_path / "absent") == ""
    with pytest.raises(FileNotFoundError):
        read_bytes(tmp_path / "absent", ATTR_MAX)
    (tmp_path / "real").write_text(" 8.0 GT/s PCIe\n\x00")
    (tmp_path / "link").symlink_to("real")
    assert read_attr(tmp_path / "link") == "8.0 GT/s PCIe"  # stripped of blanks and NULs
    # follow=False: a path resolved inside a root and replaced by a link meanwhile
    assert read_attr(tmp_path / "link", follow=False) == ""
    with pytest.raises(OSError) as exc:
        read_bytes(tmp_path / "link", ATTR_MAX, follow=False)
    assert exc.value.errno == errno.ELOOP


def test_real_procfs_is_read_whole_past_a_page() -> None:
    # /proc files report a size of 0 and a seq_file may answer in parts: read to the end.
    # Cross-check against Python's own reader of the same file (its content is stable).
    text = read_proc("/proc/self/mountinfo")
    assert text == Path("/proc/self/mountinfo").read_text()
    assert len(text) > 4096 or text.count("\n") > 1  # several records, joined whole
    interrupts = read_proc("/proc/interrupts")
    parsed = parse_interrupts(interrupts)
    assert parsed.cpus, "the CPU header was not read"
    assert interrupts.splitlines()[0].split() == [f"CPU{c}" for c in parsed.cpus]
    assert interrupts.endswith("\n")  # not cut short
    with pytest.raises(TooLarge):
        read_bytes("/proc/interrupts", 64)


def test_real_sysfs_attribute() -> None:
    lo = Path("/sys/class/net/lo")
    require(lo.exists(), "no /sys/class/net/lo")
    assert read_attr(lo / "mtu") == (lo / "mtu").read_text().strip()
    assert is_loopback(Path("/sys"), "lo")


# --- the tree inside its root -----------------------------------------------------------------


def test_the_tree_never_leaves_its_root(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    write_file(root / "devices" / "pci0000:00" / "0000:00:1f.2" / "numa_node", "0\n")
    sys_link(root / "class" / "x" / "dev", root / "devices" / "pci0000:00" / "0000:00:1f.2")
    assert resolve_in(root, ("class", "x", "dev")) == ("devices", "pci0000:00", "0000:00:1f.2")
    assert attr_in(root, (), "class", "x", "dev", "numa_node") == "0"
    assert entries_in(root, ("devices",)) == ["pci0000:00"]
    (root / "class" / "x" / "abs").symlink_to("/sys")  # an absolute link: a foreign tree
    (root / "class" / "x" / "up").symlink_to("../../..")  # climbing above the root
    (root / "class" / "x" / "loop").symlink_to("loop")
    for name in ("abs", "up", "loop"):
        assert resolve_in(root, ("class", "x", name)) is None
        assert attr_in(root, ("class", "x"), name, "numa_node") == ""


def test_a_last_name_that_is_a_link_is_resolved_inside_the_root(tmp_path: Path) -> None:
    """The last name is opened with O_NOFOLLOW, not resolved first (issue 35): a link there is
    refused by the kernel, then resolved as any other component, never followed by the OS."""
    root = tmp_path / "sys"
    write_file(root / "devices" / "d" / "model", "real\n")
    (root / "devices" / "d" / "inside").symlink_to("model")
    (root / "devices" / "d" / "abs").symlink_to("/etc/hostname")  # a real file outside
    (root / "devices" / "d" / "up").symlink_to("../../../../../../../../etc/hostname")
    (root / "devices" / "d" / "loop").symlink_to("loop")
    (root / "devices" / "d" / "dir").mkdir()
    assert Path("/etc/hostname").is_file()  # what an escape would read
    assert attr_in(root, ("devices", "d"), "inside") == "real"
    assert bytes_in(root, ("devices",), "d", "inside") == b"real\n"
    assert is_file_in(root, ("devices", "d"), "inside")
    for name in ("abs", "up", "loop", "dir", "absent", "a\0b"):
        assert attr_in(root, ("devices", "d"), name) == "", name
        assert bytes_in(root, ("devices", "d"), name) is None, name
        assert not is_file_in(root, ("devices", "d"), name), name


def test_a_walk_shares_what_it_found_no_link(tmp_path: Path) -> None:
    """resolve_in's known: the directories found no link are skipped by the walk's next calls,
    and what is a link is never taken for one that is not."""
    root = tmp_path / "sys"
    for disk in ("a", "b"):
        write_file(root / "devices" / "virtual" / "block" / disk / "size", "8\n")
        sys_link(root / "class" / "block" / disk, root / "devices" / "virtual" / "block" / disk)
    (root / "class" / "block" / "gone").symlink_to("../../devices/virtual/block/gone")
    known: set[str] = set()
    for disk in ("a", "b", "gone"):
        alone = resolve_in(root, (disk,), ("class", "block"))
        assert resolve_in(root, (disk,), ("class", "block"), known) == alone
    top = str(root)
    assert {
        top + "/devices",
        top + "/devices/virtual/block",
        top + "/devices/virtual/block/b",
    } <= known
    assert not {top + "/class/block/a", top + "/devices/virtual/block/gone"} & known


def test_an_absolute_part_stays_inside_the_root(tmp_path: Path) -> None:
    """A part given as "/etc" is a name under the root, never the host's /etc (pathlib's
    joinpath, used before issue 35's string paths, would have restarted at "/")."""
    root = tmp_path / "sys"
    write_file(root / "devices" / "numa_node", "0\n")
    assert Path("/etc/hostname").is_file()  # what an escape would read
    assert resolve_in(root, ("/etc",)) is None
    assert attr_in(root, (), "/etc", "hostname") == ""
    assert entries_in(root, (), "/etc") == []
    assert attr_in(str(root), (), "devices", "numa_node") == "0"  # a str root as a Path one


# --- PCI addresses, numbers, filters ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "is_pci"),
    [
        ("0000:00:1f.2", True),
        ("10000:e1:00.0", True),  # Intel VMD: a domain wider than four digits
        ("0000:00:1f.8", False),  # functions are 0-7
        ("0000:00:1F.2", False),  # the kernel prints lower case
        ("pci0000:00", False),
        ("0000:00:1f.2.0", False),
    ],
)
def test_pci_address(name: str, is_pci: bool) -> None:
    assert bool(PCI_ADDR.match(name)) is is_pci


def test_last_pci_and_msi(tmp_path: Path) -> None:
    assert ROOT_BUS.match("pci0000:00") and ROOT_BUS.match("pci10000:e0")
    path = ("devices", "pci0000:00", "0000:00:01.0", "0000:01:00.0", "host0", "target0:0:0")
    assert last_pci(path) == path[:4]
    assert last_pci(("devices", "virtual", "block", "loop0")) is None
    assert last_pci(None) is None
    for irq in ("10", "9", "100"):
        write_file(tmp_path / "msi_irqs" / irq, "msix\n")
    assert msi_irqs(tmp_path) == ("9", "10", "100")
    assert msi_irqs(tmp_path / "absent") == ()


def test_numbers() -> None:
    assert parse_u64("18446744073709551615") == (1 << 64) - 1
    assert parse_u64("18446744073709551616") is None
    assert parse_u64("²") is None and parse_u64("-1") is None and parse_u64("") is None
    assert parse_u64("ffffffff", 16) == 0xFFFFFFFF
    assert parse_u32("4294967296") is None and parse_u32("7") == 7


def _disk(device: str, parent: str = "") -> DiskInfo:
    return DiskInfo(device, 8, 0, "", "", "", "", "", parent, 1 << 30)


def test_device_filters(tmp_path: Path) -> None:
    block = re.compile(BLOCK_EXCLUDE)
    assert excluded(block, _disk("zram0")) and excluded(block, _disk("sr0"))
    assert not excluded(block, _disk("sda")) and not excluded(block, _disk("nvme0n1"))
    assert excluded(re.compile("^sdb$"), _disk("sdb1", parent="sdb"))  # a partition follows
    for name, flags in (("lo", "0x9"), ("eth0", "0x1003"), ("veth12", "0x1003")):
        write_file(tmp_path / "class" / "net" / name / "flags", flags + "\n")
    assert wanted_interfaces(tmp_path, re.compile(NIC_EXCLUDE)) == ["eth0"]
    assert wanted_interfaces(tmp_path, None) == ["eth0", "veth12"]  # lo never
    assert wanted_interfaces(tmp_path / "absent", None) == []


def test_held_attrs_read_the_value_now_through_one_descriptor(tmp_path: Path) -> None:
    """HeldAttrs: the text read_attr gives, re-read at offset 0 on every call (a file rewritten
    in place shows its new text), one descriptor per path, and the same refusals."""
    f = tmp_path / "rx_bytes"
    f.write_text("10\n")
    held = HeldAttrs()
    assert held.read(f) == "10" == read_attr(f)
    with f.open("r+") as w:  # the same inode, as sysfs regenerates the same file
        w.write("42\n")
    assert held.read(f) == "42"
    assert len(held) == 1
    big = tmp_path / "big"
    big.write_bytes(b"1" * (ATTR_MAX + 1))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert held.read(big) == held.read(fifo) == held.read(tmp_path / "missing") == ""
    assert len(held) == 1  # refused files hold nothing
    held.clear()
    assert len(held) == 0 and held.read(f) == "42"
    held.close()


def test_held_attrs_reopen_by_path_when_the_descriptor_fails(tmp_path: Path) -> None:
    """A descriptor that fails (ENODEV when its device left) is dropped and the path opened
    again: a successor under the same name is read, not taken for missing."""
    f = tmp_path / "diskseq"
    f.write_text("7\n")
    held = HeldAttrs()
    assert held.read(f) == "7"

    def fail() -> None:  # the held descriptor now fails to read (EISDIR), as a gone device's
        os.close(held._fds[str(f)])
        held._fds[str(f)] = os.open(tmp_path, os.O_RDONLY)

    fail()
    f.unlink()
    f.write_text("8\n")  # the successor: a new file under the same path
    assert held.read(f) == "8"
    fail()
    f.unlink()
    assert held.read(f) == ""  # gone for good: unknown
    assert len(held) == 0


def test_held_attrs_are_bounded_and_agree_with_the_live_sys(tmp_path: Path) -> None:
    """Past max_open, files are read by path; on the live /sys a held read is read_attr's."""
    files = [tmp_path / f"a{i}" for i in range(3)]
    for i, f in enumerate(files):
        f.write_text(f"{i}\n")
    held = HeldAttrs(max_open=2)
    assert [held.read(f) for f in files] == ["0", "1", "2"]
    assert len(held) == 2
    held.close()
    lo = Path("/sys/class/net/lo")
    require(lo.exists(), "no /sys/class/net/lo (no sysfs in this sandbox)")
    held = HeldAttrs()
    try:
        for _ in range(2):
            assert held.read(lo / "mtu") == read_attr(lo / "mtu") != ""
            assert held.read(lo / "ifindex") == read_attr(lo / "ifindex")
    finally:
        held.close()
