"""packaging/libexec/rapl-access, run as the agent unit's ExecStartPre runs it (root, the
real program), on a powercap tree laid out as the kernel lays it out (zone links in
class/powercap into devices/virtual/powercap; this VM has no RAPL): afterwards the power
exporter, as an unprivileged uid of the group, reads the energy it could not read before;
links out of the tree and symlinked attribute files are left alone.
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.env import require
from tests.support.realparts import ROOT, have, is_root, setpriv

PROGRAM = ROOT / "packaging" / "libexec" / "rapl-access"
GROUP = "nogroup"  # gid 65534 here; the package's is "wattbit"

_READ = """
import json, sys
from pathlib import Path
from exporters.power.exporter import PowerExporter
e = PowerExporter(sys_root=Path(sys.argv[1]), hwmon=False)
print(json.dumps({z.key: j for z, j in e.rapl_zones()}))
"""


def _zone(base: Path, name: str, domain: str, uj: int) -> Path:
    z = base / name
    z.mkdir(parents=True)
    (z / "name").write_text(domain + "\n")
    for attr, value, mode in (
        ("energy_uj", uj, 0o400),
        ("max_energy_range_uj", 262143328850, 0o444),
    ):
        (z / attr).write_text(f"{value}\n")
        (z / attr).chmod(mode)  # as the kernel has them (energy_uj root-only: CVE-2020-8694)
    return z


def _as_nobody(sys_root: Path) -> dict[str, float | None]:
    out = subprocess.run(
        [*setpriv("65534", []), sys.executable, "-c", _READ, str(sys_root)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout)


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    # uid 65534 walks the tree: pytest's tmp_path is root-only.
    d = Path(tempfile.mkdtemp(prefix="wattbit-privilege-rapl-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_rapl_access_lets_the_group_read_energy(world_readable_tmp: Path) -> None:
    require(is_root() and have("setpriv"), "needs root (it chowns) and setpriv")
    require(grp.getgrnam(GROUP).gr_gid == 65534, "needs nogroup as gid 65534")
    tmp_path = world_readable_tmp
    sys_root = tmp_path / "sys"
    rapl = sys_root / "devices" / "virtual" / "powercap" / "intel-rapl"
    pkg = _zone(rapl, "intel-rapl:0", "package-0", 1234567)
    core = _zone(pkg, "intel-rapl:0:0", "core", 7654321)
    # Outside /sys: a "zone" link leading out, and an attribute that is a symlink.
    outside = _zone(tmp_path / "elsewhere", "intel-rapl:1", "package-1", 42)
    secret = tmp_path / "secret"
    secret.write_text("99\n")
    secret.chmod(0o400)
    dram = _zone(rapl, "intel-rapl:0:1", "dram", 5)
    (dram / "energy_uj").unlink()
    (dram / "energy_uj").symlink_to(secret)
    for d in (sys_root, tmp_path / "elsewhere"):
        for p in [d, *d.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
    cls = sys_root / "class" / "powercap"
    cls.mkdir(parents=True)
    for z in (pkg, core, dram):
        (cls / z.name).symlink_to(os.path.relpath(z, cls))
    (cls / "intel-rapl:1").symlink_to(outside)

    before = _as_nobody(sys_root)
    none = dict.fromkeys(("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"))
    assert before == none

    run = subprocess.run(
        ["/usr/bin/python3", "-IS", str(PROGRAM), "--sys-root", str(sys_root), "--group", GROUP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "intel-rapl:1: leads out of" in run.stderr
    assert "5 files readable by group nogroup" in run.stderr  # 2 per zone, not dram's link

    after = _as_nobody(sys_root)
    # The package and its core zone readable; dram (a symlinked counter) and the zone whose
    # link leads out of the tree still not.
    assert after == {**none, "intel-rapl:0": 1.234567, "intel-rapl:0:0": 7.654321}
    for f, mode in ((pkg / "energy_uj", 0o440), (core / "max_energy_range_uj", 0o444)):
        st = f.stat()
        assert st.st_gid == 65534 and stat.S_IMODE(st.st_mode) == mode
    # Left alone: what lies outside, and what a symlink points at.
    assert "energy_uj: Too many levels of symbolic links, left alone" in run.stderr
    for f in (outside / "energy_uj", secret):
        st = f.stat()
        assert st.st_gid == 0 and stat.S_IMODE(st.st_mode) == 0o400


def test_rapl_access_without_powercap_or_group(tmp_path: Path) -> None:
    require(is_root(), "needs root")
    ok = subprocess.run(
        ["/usr/bin/python3", "-IS", str(PROGRAM), "--sys-root", str(tmp_path), "--group", GROUP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and "0 files readable" in ok.stderr  # a host without RAPL
    bad = subprocess.run(
        ["/usr/bin/python3", "-IS", str(PROGRAM), "--sys-root", str(tmp_path), "--group", "nx-grp"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and "no group nx-grp" in bad.stderr
