"""The EL9 RPM, built with Debian's rpmbuild from the same tree (docs/install.md says what this
can and cannot show: no EL9 root is reachable here, so it is read, not installed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.debroot import built, bytecode_problems
from tests.support.env import require
from tests.support.realparts import have, is_root

pytestmark = [pytest.mark.root, pytest.mark.unshared, pytest.mark.timeout(1500)]


def _rpm(*args: str) -> str:
    return subprocess.run(["rpm", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def rpm() -> Path:
    require(is_root(), "the packages are built as root")
    require(have("rpmbuild"), "rpmbuild (Debian's rpm) is missing")
    return built()["rpm"]


def test_rpm_carries_the_same_files_as_the_deb(rpm: Path) -> None:
    deb = built()["deb"]
    lines = _rpm(
        "-qp",
        "--qf",
        "[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILENAMES}\n]",
        str(rpm),
    )
    files = {line.split()[-1]: line.split()[:3] for line in lines.splitlines()}
    for path in (
        "/usr/bin/wattbit",
        "/usr/lib/systemd/system/wattbit-agent.service",
        "/usr/lib/systemd/system/wattbit-collector.service",
        "/usr/lib/systemd/system/wattbit-smartctl.socket",
        "/usr/lib/systemd/system/wattbit-smartctl@.service",
        "/usr/lib/wattbit/rapl-access",
        "/usr/lib/wattbit/smartctl-helper",
        "/opt/wattbit/lib/python3.11/site-packages/exporters/blockio/core/blockio.bpf.o",
    ):
        assert path in files, path
    assert files["/var/lib/wattbit"] == ["drwxr-x---", "wattbit", "wattbit"]
    assert files["/etc/wattbit/secrets"] == ["drwxr-x---", "root", "wattbit"]
    # the same environment as the .deb's (same wheels): the same Python files in it
    deb_list = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True)
    deb_py = {x.split()[-1].lstrip(".") for x in deb_list.stdout.splitlines() if x.endswith(".py")}
    rpm_py = {p for p in files if p.startswith("/opt/wattbit/") and p.endswith(".py")}
    assert rpm_py == deb_py
    # the units are the Debian package's, byte for byte
    unit = _rpm2cpio_file(rpm, "./usr/lib/systemd/system/wattbit-agent.service")
    assert (
        unit == (Path(__file__).parents[2] / "packaging/systemd/wattbit-agent.service").read_bytes()
    )


def test_rpm_configs_user_scriptlets_and_requires(rpm: Path) -> None:
    configs = _rpm("-qpc", str(rpm)).split()
    assert configs == ["/etc/wattbit/agent.yml", "/etc/wattbit/collector.yml"]
    flags = dict(
        reversed(line.split(" ", 1))
        for line in _rpm(
            "-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", str(rpm)
        ).splitlines()
    )
    for conf in configs:
        assert set(flags[conf]) >= {"c", "n"}, (conf, flags[conf])  # %config(noreplace)
    scripts = _rpm("-qp", "--scripts", str(rpm))
    assert "useradd -r -g wattbit -d /var/lib/wattbit" in scripts
    assert "systemctl --no-reload preset wattbit-agent.service" in scripts
    requires = _rpm("-qpR", str(rpm)).split("\n")
    names = {r.split()[0] for r in requires if r}
    assert {"python3.11", "libbpf", "smartmontools"} <= names
    assert not [n for n in names if n.startswith(("gcc", "clang", "llvm", "kernel-devel"))]
    # the wheels' bundled libraries are not offered to the system
    provides = _rpm("-qpP", str(rpm))
    assert ".so" not in provides


def test_rpm_ships_the_same_bytecode_checks_as_the_deb(rpm: Path, tmp_path: Path) -> None:
    """The RPM's .pyc: one per .py, unchecked-hash, of that source, named as installed."""
    cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True).stdout
    subprocess.run(
        ["cpio", "-id", "--quiet", "./opt/wattbit/*"], input=cpio, cwd=tmp_path, check=True
    )
    checked, problems = bytecode_problems(tmp_path / "opt/wattbit")
    assert checked > 1000 and problems == [], problems[:20]


def _rpm2cpio_file(rpm: Path, member: str) -> bytes:
    cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True).stdout
    return subprocess.run(
        ["cpio", "-i", "--to-stdout", member], input=cpio, capture_output=True, check=True
    ).stdout
