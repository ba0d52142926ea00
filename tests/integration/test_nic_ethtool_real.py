"""The SIOCETHTOOL reader on a real veth pair, cross-checked against the ethtool binary."""

from __future__ import annotations

import errno
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from exporters.nic.ethtool import Ethtool, driver_info, queue_stats, read_stats
from tests.support.env import require
from tests.support.realparts import have, is_root


def ethtool_s(ifname: str) -> list[tuple[str, int]]:
    """(name, value) pairs as `ethtool -S` prints them: the independent reader."""
    out = subprocess.run(
        ["ethtool", "-S", ifname], capture_output=True, text=True, check=True
    ).stdout
    lines = out.splitlines()
    assert lines[0] == "NIC statistics:"
    pairs = []
    for line in lines[1:]:
        name, sep, value = line.strip().rpartition(": ")
        assert sep, line
        pairs.append((name, int(value)))
    return pairs


@pytest.fixture
def veth() -> Iterator[str]:
    """One end of a fresh veth pair (names unique per run), removed even if the test fails."""
    require(is_root(), "needs root to create a veth pair")
    require(have("ip"), "ip (iproute2) is not installed")
    tag = uuid.uuid4().hex[:8]
    name, peer = f"wbe{tag}", f"wbp{tag}"  # 11 characters: under IFNAMSIZ
    subprocess.run(
        ["ip", "link", "add", name, "type", "veth", "peer", "name", peer],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        # Deleting one end removes both.
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


@pytest.mark.root
def test_read_stats_matches_ethtool_binary(veth: str) -> None:
    require(have("ethtool"), "ethtool is not installed (apt-get install ethtool)")
    want = ethtool_s(veth)
    with Ethtool() as et:
        got = et.read_stats(veth)
        again = et.read_stats(veth)  # the socket is reusable
    # Same names in the same order, same values (veth's counters are static without XDP).
    assert [n for n, _ in got] == [n for n, _ in want]
    assert got == want
    assert again == got
    assert read_stats(veth) == got
    assert any(n.startswith("rx_queue_0_xdp") for n, _ in got)
    assert queue_stats(got) == []


@pytest.mark.root
def test_driver_info_is_veth(veth: str) -> None:
    driver, version, bus_info = driver_info(veth)
    assert driver == "veth"
    assert bus_info == ""
    if have("ethtool"):
        out = subprocess.run(
            ["ethtool", "-i", veth], capture_output=True, text=True, check=True
        ).stdout
        fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        assert fields["driver"] == driver
        assert fields["version"] == version


def test_loopback_has_no_stats() -> None:
    # lo has ethtool ops but no statistics string set; no root needed.
    with Ethtool() as et, pytest.raises(OSError) as e:
        et.read_stats("lo")
    assert e.value.errno == errno.EOPNOTSUPP


def test_missing_interface_is_enodev() -> None:
    with Ethtool() as et, pytest.raises(OSError) as e:
        et.read_stats(f"wbx{uuid.uuid4().hex[:8]}")
    assert e.value.errno == errno.ENODEV
