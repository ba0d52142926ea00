"""Ubuntu 24.04 and the Debian 12 package (docs/install.md, "Ubuntu 24.04"): a noble root made
by mmdebstrap from Ubuntu's archive, where apt refuses the .deb for its Python 3.11."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.debroot import NOBLE, DebRoot, base_tarball, built
from tests.support.env import require
from tests.support.realparts import have, is_root

pytestmark = [pytest.mark.root, pytest.mark.unshared, pytest.mark.timeout(1500)]


def test_the_debian_12_package_does_not_install_on_ubuntu_24_04(tmp_path: Path) -> None:
    """docs/install.md: the .deb is bound to Debian 12's Python 3.11; Ubuntu 24.04 has 3.12
    and no python3.11, so apt refuses it (rather than installing an environment that cannot
    run). Shown on a real noble root made by mmdebstrap from Ubuntu's archive."""
    require(is_root(), "needs root (chroot)")
    require(have("mmdebstrap"), "mmdebstrap is missing")
    deb = built()["deb"]
    root = DebRoot.fresh(tmp_path / "noble", base_tarball(*NOBLE))
    assert 'VERSION_ID="24.04"' in (root.path / "etc/os-release").read_text()
    r = root.run("apt-get", "install", "-y", root.copy_in(deb, f"/tmp/{deb.name}"), check=False)
    assert r.returncode != 0
    assert "python3.11 but it is not installable" in r.stdout, r.stdout[-2000:]
    assert not (root.path / "opt/wattbit").exists()
