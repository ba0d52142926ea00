"""The units in packaging/systemd hold the contract of issue 30 (docs/install.md): who runs,
with exactly which capabilities, what may be written, which sockets, and the smartctl socket's
owner and mode. The package tier (tests/integration/test_package_deb.py) runs them."""

from __future__ import annotations

import configparser

import pytest

from tests.support.debroot import Unit
from tests.support.env import ROOT

UNITS = ROOT / "packaging" / "systemd"
HARDENING = {
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "NoNewPrivileges": "yes",
    "Restart": "on-failure",
    "Type": "notify",
}


def _one(unit: Unit, key: str) -> str:
    values = unit.settings.get(key, [])
    assert len(values) == 1, (key, values)
    return values[0]


@pytest.mark.parametrize("name", ["wattbit-agent.service", "wattbit-collector.service"])
def test_daemons_are_hardened_and_run_as_wattbit(name: str) -> None:
    unit = Unit.read(UNITS / name)
    assert (unit.user, unit.group) == ("wattbit", "wattbit")
    for key, value in HARDENING.items():
        assert _one(unit, key) == value, key
    for key in ("SystemCallFilter", "MemoryMax", "LimitNOFILE", "RestrictAddressFamilies"):
        assert unit.settings.get(key), key


def test_agent_capabilities_exactly_bpf_and_perfmon() -> None:
    unit = Unit.read(UNITS / "wattbit-agent.service")
    assert sorted(unit.ambient) == ["CAP_BPF", "CAP_PERFMON"]
    assert sorted(unit.bounding or []) == ["CAP_BPF", "CAP_PERFMON"]
    families = set(_one(unit, "RestrictAddressFamilies").split())
    assert families == {"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"}  # nic: netlink
    assert unit.exec_start_pre == ["+/usr/lib/wattbit/rapl-access"]
    assert "ReadWritePaths" not in unit.settings  # the agent writes nothing


def test_collector_has_no_capability_and_writes_only_its_state() -> None:
    unit = Unit.read(UNITS / "wattbit-collector.service")
    assert unit.ambient == [] and unit.bounding == []
    assert unit.settings["ReadWritePaths"] == ["/var/lib/wattbit"]
    assert set(_one(unit, "RestrictAddressFamilies").split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}


def test_smartctl_socket_and_helper_as_the_contract_says() -> None:
    socket = configparser.ConfigParser(interpolation=None, strict=False)
    socket.optionxform = str  # type: ignore[assignment,method-assign]
    socket.read(UNITS / "wattbit-smartctl.socket")
    s = socket["Socket"]
    assert s["ListenStream"] == "/run/wattbit/smartctl.sock"
    assert (s["SocketUser"], s["SocketGroup"], s["SocketMode"]) == ("root", "wattbit", "0660")
    assert s["Accept"] == "yes"
    helper = Unit.read(UNITS / "wattbit-smartctl@.service")
    assert helper.user == "root"
    assert sorted(helper.bounding or []) == ["CAP_SYS_ADMIN", "CAP_SYS_RAWIO"]
    assert helper.exec_start == ["/usr/lib/wattbit/smartctl-helper"]
    assert _one(helper, "PrivateNetwork") == "yes"
    assert (ROOT / "packaging" / "libexec" / "smartctl-helper").is_file()
