"""Cross-check: the pcie exporter's link values and parents equal what prometheus/procfs'
sysfs.PciDevices() reads from the same captured trees (the library node_exporter's pcidevice
collector is built on; Debian's node_exporter 1.5 predates that collector).

tests/crosscheck/procfs_pci is a small Go program over procfs v0.19.2 (go.mod, go.sum pinned);
it is built here with the Go toolchain (>= 1.24: /usr/local/go on this machine kind, or `go`
on PATH), its modules from the Go module proxy or the local module cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from exporters.pcie.links import read_chains, read_links
from tests.support.env import FIXTURES, ROOT, require
from tests.support.ttar import extract
from tests.unit.test_pcie import switch_tree

PROGRAM = ROOT / "tests" / "crosscheck" / "procfs_pci"


def go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None


@pytest.fixture(scope="module")
def procfs_pci(tmp_path_factory: pytest.TempPathFactory) -> Path:
    toolchain = go()
    require(toolchain is not None, "the Go toolchain (>= 1.24) is not installed")
    assert toolchain is not None
    binary = tmp_path_factory.mktemp("go") / "procfs_pci"
    r = subprocess.run(
        [toolchain, "build", "-mod=readonly", "-o", str(binary), "."],
        cwd=PROGRAM,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return binary


def procfs_view(binary: Path, sys_root: Path) -> dict[str, dict]:
    r = subprocess.run(
        [str(binary), str(sys_root)], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(r.stdout)


def compare(binary: Path, sys_root: Path, devices: dict[str, str]) -> dict[str, dict]:
    """Assert both readers agree on every device procfs lists; return procfs' view."""
    theirs = procfs_view(binary, sys_root)
    nodes = read_chains(sys_root, devices)
    links = read_links(sys_root, nodes)
    assert set(theirs) <= set(nodes), set(theirs) - set(nodes)
    for pci, t in theirs.items():
        ours = links[pci]

        def giga(x: float | None) -> float | None:
            return None if x is None else x / 1e9

        assert (giga(ours.speed), ours.width, giga(ours.max_speed), ours.max_width) == (
            t["current_link_speed"],
            t["current_link_width"],
            t["max_link_speed"],
            t["max_link_width"],
        ), pci
        assert nodes[pci].upstream == t["parent"], pci
    return theirs


def test_node_exporter_tree(procfs_pci: Path, tmp_path: Path) -> None:
    extract(FIXTURES / "sys" / "pcie" / "node_exporter-sys.ttar", tmp_path)
    seen = compare(
        procfs_pci, tmp_path / "sys", {"0000:01:00.0": "controller", "0000:45:00.0": "nic"}
    )
    assert set(seen) == {"0000:00:02.1", "0000:01:00.0", "0000:45:00.0"}


def test_procfs_tree(procfs_pci: Path, tmp_path: Path) -> None:
    extract(FIXTURES / "sys" / "pcie" / "procfs-sys.ttar", tmp_path)
    seen = compare(
        procfs_pci,
        tmp_path / "fixtures" / "sys",
        {"0000:01:00.0": "controller", "0000:a2:00.0": "nic"},
    )
    assert set(seen) == {"0000:00:02.1", "0000:01:00.0", "0000:a2:00.0"}


def test_switch_tree_synthetic(procfs_pci: Path, tmp_path: Path) -> None:
    switch_tree(tmp_path)
    # the identity files procfs insists on (made up: a switch, an HBA and a NIC)
    bridges = ("0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:02:01.0")
    for pci in (*bridges, "0000:03:00.0", "0000:04:00.0"):
        d = tmp_path / "bus/pci/devices" / pci
        klass = "0x060400" if pci in bridges else "0x010700"
        for name, value in (("class", klass), ("vendor", "0x1000"), ("device", "0x0097"),
                            ("subsystem_vendor", "0x1000"), ("subsystem_device", "0x3090"),
                            ("revision", "0x02")):  # fmt: skip
            (d / name).write_text(value + "\n")
    seen = compare(procfs_pci, tmp_path, {"0000:03:00.0": "controller", "0000:04:00.0": "nic"})
    assert len(seen) == 6
