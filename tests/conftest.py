"""Shared fixtures, and how the suite is split among parallel workers (docs/testing.md).

Helpers live in tests/support and are imported as tests.support.*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.pdu.profile import Profile
from tests.support.env import FIXTURES

# Tests that touch state the whole machine shares (loop devices, BPF programs, network
# namespaces, mounts, /sys writes, fixed names and device numbers) are marked `root`, `bpf`
# or `serial`. Under `pytest -n N --dist loadgroup` they form one serial lane: one worker
# runs them one after the other, while the other workers run the rest (docs/testing.md).
# One lane, not several: test_blockio_churn.py adds and removes loop devices by number, which
# any `losetup --find` running beside it could be handed and lose.
# A `root` test also marked `unshared` needs root only for what is its own (a throwaway chroot
# in a private mount namespace, rpmbuild; no loop device, BPF program or namespace of the
# machine's): it keeps its module's group, beside the lane. The package tier's Ansible, RPM
# and Ubuntu tests are; their minutes (an apt install, two Ansible runs, mmdebstrap) were the
# lane's. tests/support/debroot.py builds the packages once for all workers.
SERIAL_MARKERS = ("root", "bpf", "serial")
SERIAL_LANE = "serial"


def _group(item: pytest.Item) -> str | None:
    """The xdist group of a test: the serial lane, its integration module, or none."""
    lane = [m for m in SERIAL_MARKERS if item.get_closest_marker(m)]
    if item.get_closest_marker("unshared") and lane == ["root"]:
        lane = []
    if lane:
        return SERIAL_LANE
    if "integration" in item.path.parts:
        return f"module:{item.path.stem}"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for xdist: the serial lane together and first, each integration
    module whole.

    A module's tests share its module-scoped fixtures (a Prometheus, a site of daemons):
    split among workers, each worker would start them again. Unit tests stay ungrouped and
    spread one by one.
    """
    groups = {item: _group(item) for item in items}
    for item, group in groups.items():
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))

    # The lane first: its minutes (mostly waiting) are the run's longest chain, and started
    # last it would be the run's tail. `make test` passes --no-loadscope-reorder so that xdist
    # keeps this order instead of sorting the groups by their number of tests.
    items.sort(key=lambda item: groups[item] != SERIAL_LANE)  # stable: file order otherwise


# after pytest-xdist has (or has not) applied the groups
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def check_groups_applied(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stop when --dist loadgroup is on but a group did not reach the node ids.

    pytest-xdist carries the group in the node id ("...@serial"); a pytest whose node ids it
    cannot rewrite would run the serial tests side by side instead
    (pytest-dev/pytest-xdist#1386).
    """
    if not config.getoption("loadgroup", default=False):  # set on xdist workers only
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"pytest-xdist did not group {item.nodeid}: see pytest-dev/pytest-xdist#1386"
            )


@pytest.fixture
def fixtures() -> Path:
    """The tests/fixtures directory."""
    return FIXTURES


@pytest.fixture(scope="session")
def profiles() -> list[Profile]:
    """Every shipped PDU profile."""
    from collector.site.profiles import load_profiles

    return load_profiles()
