"""The power exporter (exporters/power/): RAPL zones from real and test powercap trees, the
counter kept monotonic across a wrap, hwmon power and energy channels, hostile files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters.base import ExportersCollector
from exporters.power.exporter import PowerExporter, advance
from exporters.power.hwmon import parse_chip, read_hwmon
from exporters.power.powercap import ZoneAttrs, parse_zones, read_powercap
from exporters.power.sysread import MAX_ATTR_BYTES, read_attr
from tests.support.env import FIXTURES
from tests.support.realparts import parse_samples, sample

POWER = FIXTURES / "power"
NODE = POWER / "node_exporter" / "sys"
KEPLER = POWER / "kepler_synthetic" / "sys"
WRAPPED = POWER / "wrap_synthetic" / "sys"

PKG_RAW, CORE_RAW, MAX_RANGE = 240422366267, 118821284256, 262143328850


def scrape(exporter: PowerExporter) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector([exporter]))
    return parse_samples(generate_latest(registry).decode())


def test_real_tree_zones() -> None:
    zones = parse_zones(read_powercap(NODE))
    assert [(z.zone, z.package, z.energy_uj, z.max_energy_range_uj) for z in zones] == [
        ("core", "0", CORE_RAW, MAX_RANGE),
        ("package", "0", PKG_RAW, MAX_RANGE),
    ]
    assert all(z.readable and z.control == "intel-rapl" for z in zones)


def test_first_scrape_is_the_raw_counter_in_joules() -> None:
    s = scrape(PowerExporter(NODE))
    assert sample(s, "wattbit_rapl_energy_joules_total", zone="package", package="0") == (
        PKG_RAW / 1e6
    )
    assert sample(s, "wattbit_rapl_energy_joules_total", zone="core", package="0") == (
        CORE_RAW / 1e6
    )
    assert sample(s, "wattbit_rapl_max_energy_range_joules", zone="package", package="0") == (
        MAX_RANGE / 1e6
    )
    assert sample(s, "wattbit_rapl_zone_readable", zone="package", package="0") == 1.0
    assert sample(s, "wattbit_exporter_up", exporter="power") == 1.0


def test_wrap_keeps_the_counter_monotonic() -> None:
    """Real first reading, then the package counter wrapped; the core one moved on."""
    roots = iter([NODE, WRAPPED])
    current = [NODE]

    def zones(_: Path) -> dict[str, ZoneAttrs]:
        return read_powercap(current[0])

    exporter = PowerExporter(Path("/nonexistent"), hwmon=False, read_zones=zones)
    current[0] = next(roots)
    first = scrape(exporter)
    current[0] = next(roots)
    second = scrape(exporter)
    pkg = "wattbit_rapl_energy_joules_total"
    step = MAX_RANGE - PKG_RAW + 1_000_000_000  # µJ: to the wrap, then from 0 to the new value
    assert sample(second, pkg, zone="package", package="0") == pytest.approx(
        sample(first, pkg, zone="package", package="0") + step / 1e6, abs=1e-6
    )
    assert sample(second, pkg, zone="core", package="0") == pytest.approx(
        (118_900_000_000) / 1e6, abs=1e-6
    )


@pytest.mark.parametrize(
    ("raws", "max_range", "total"),
    [
        ([5, 9, 12], 100, 12),  # no wrap: the raw counter itself
        ([90, 10], 100, 90 + (100 - 90) + 10),  # a wrap
        ([90, 90], 100, 90),  # no change
        ([90, 10], None, 90 + 10),  # a drop with no range known: a reset from 0
        ([90, 10], 50, 90 + 10),  # a range below the last reading cannot be a wrap: reset
        ([90, 10], 0, 90 + 10),  # some machines answer max_energy_range_uj with 0
    ],
)
def test_advance(raws: list[int], max_range: int | None, total: int) -> None:
    acc = None
    for r in raws:
        acc = advance(acc, r, max_range)
    assert acc is not None and acc.total_uj == total


def test_zone_that_leaves_takes_its_state() -> None:
    trees = {"now": read_powercap(NODE)}
    exporter = PowerExporter(Path("/x"), hwmon=False, read_zones=lambda _: trees["now"])
    scrape(exporter)
    assert set(exporter._acc) == {"intel-rapl:0", "intel-rapl:0:0"}
    trees["now"] = {k: v for k, v in trees["now"].items() if k != "intel-rapl:0:0"}
    s = scrape(exporter)
    assert set(exporter._acc) == {"intel-rapl:0"}
    assert ("wattbit_rapl_energy_joules_total", (("package", "0"), ("zone", "core"))) not in s


def test_mmio_duplicate_and_hex_zone_names() -> None:
    zones = parse_zones(read_powercap(KEPLER))
    got = {(z.key, z.zone, z.package) for z in zones}
    # intel-rapl-mmio:0 repeats package-0 through MMIO: the MSR zone is kept, once.
    assert got == {
        ("intel-rapl:0", "package", "0"),
        ("intel-rapl:0:0", "core", "0"),
        ("intel-rapl:a", "package", "10"),
    }


def test_mmio_alone_is_read() -> None:
    attrs = read_powercap(KEPLER)
    only = {k: v for k, v in attrs.items() if k.startswith("intel-rapl-mmio")}
    (z,) = parse_zones(only)
    assert (z.control, z.zone, z.package, z.energy_uj) == (
        "intel-rapl-mmio",
        "package",
        "0",
        PKG_RAW,
    )


def test_psys_dram_and_orphans() -> None:
    attrs = {
        "intel-rapl:0": ZoneAttrs("package-0", "10", "100"),
        "intel-rapl:0:2": ZoneAttrs("dram", "20", "100"),
        "intel-rapl:1": ZoneAttrs("psys", "30", "100"),
        "intel-rapl:5:0": ZoneAttrs("core", "40", "100"),  # no parent: whose is it?
        "intel-rapl:6": ZoneAttrs(None, "50", "100"),  # no name
        "intel-rapl:7": ZoneAttrs("Bad Name!", "60", "100"),
        "../etc:0": ZoneAttrs("package-9", "70", "100"),
    }
    got = {(z.zone, z.package, z.energy_uj) for z in parse_zones(attrs)}
    assert got == {("package", "0", 10), ("dram", "0", 20), ("psys", "", 30)}


def test_root_only_energy_is_no_value_and_says_so() -> None:
    attrs = {"intel-rapl:0": ZoneAttrs("package-0", None, "100", energy_readable=False)}
    exporter = PowerExporter(Path("/x"), hwmon=False, read_zones=lambda _: attrs)
    s = scrape(exporter)
    assert sample(s, "wattbit_rapl_zone_readable", zone="package", package="0") == 0.0
    assert not [k for k in s if k[0] == "wattbit_rapl_energy_joules_total"]
    assert "root-only" in exporter.startup_note()


def test_unreadable_file_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """energy_uj mode 0400 read by a non-root agent: EACCES (root reads any mode, so the
    kernel's answer is given by patching os.open rather than by chmod)."""
    z = tmp_path / "class" / "powercap" / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text("100\n")
    (z / "energy_uj").write_text("5\n")
    real_open = os.open

    def guarded(path: str | os.PathLike[str], flags: int, *a: int) -> int:
        if str(path).endswith("energy_uj"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", guarded)
    attrs = read_powercap(tmp_path)["intel-rapl:0"]
    assert attrs.energy_readable is False and attrs.energy_uj is None
    assert attrs.name == "package-0"


def test_hostile_attribute_files(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"1" * (MAX_ATTR_BYTES + 10))
    assert read_attr(big) is None
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    assert read_attr(tmp_path / "bin") is None
    assert read_attr(tmp_path / "absent") is None
    attrs = {
        "intel-rapl:0": ZoneAttrs("package-0", "-5", "100"),
        "intel-rapl:1": ZoneAttrs("package-1", "1e9", "100"),
        "intel-rapl:2": ZoneAttrs("package-2", str(1 << 64), "x"),
    }
    zones = parse_zones(attrs)
    assert [z.energy_uj for z in zones] == [None, None, None]
    assert [z.max_energy_range_uj for z in zones] == [100, 100, None]


def test_hwmon_tree() -> None:
    powers, energies = read_hwmon(KEPLER)
    got = {(p.chip, p.device, p.sensor): (p.watts, p.kind) for p in powers}
    assert got[("k10temp", "hwmon0", "Package")] == (45.0, "input")
    assert got[("k10temp", "hwmon0", "Core")] == (15.0, "input")
    # amdgpu has both: the average is preferred (what acpi_power_meter has only).
    assert got[("amdgpu", "hwmon1", "GPU")] == (118.0, "average")
    assert got[("platform_sensor", "hwmon2", "power1")] == (30.0, "input")
    # Two channels labelled "package" are named by channel, never one series twice.
    assert got[("multi_sensor", "hwmon_aggregate", "power1")] == (50.0, "input")
    assert got[("multi_sensor", "hwmon_aggregate", "power2")] == (30.0, "input")
    # power3_enable 0: switched off, no sample.
    assert ("test_power_chip", "hwmon_disabled_power", "PSU_Rail_C") not in got
    assert got[("test_power_chip", "hwmon_disabled_power", "PSU_Rail_A")] == (45.0, "input")
    # The device link names the chip's device; without a name file the directory names it.
    assert got[("hwmon_device_path", "card0", "device_path_test")] == (25.0, "input")
    e = {(x.chip, x.sensor): x.joules for x in energies}
    assert e[("energy_meter", "Total")] == 500.0
    assert e[("power_chip", "energy1")] == 300.0
    assert ("energy_with_enable", "Rail_C") not in e
    assert e[("multi_energy", "Sensor_B")] == 200.0


def test_hwmon_parse_is_strict() -> None:
    powers, energies = parse_chip(
        "c",
        "d",
        {
            "power1_average": "not a number",
            "power1_input": "7000000",  # the average is bad: the instant reading is used
            "power2_input": str(10**13),  # 10 MW: not a sensor's
            "power3_label": "\x1b[31mred",  # a label with control characters is not used
            "power3_input": "1",
            "energy1_input": None,  # unreadable
            "temp1_input": "42000",
        },
    )
    assert [(p.sensor, p.watts, p.kind) for p in powers] == [
        ("power1", 7.0, "input"),
        ("power3", 1e-6, "input"),
    ]
    assert energies == []


def test_hwmon_series_render() -> None:
    s = scrape(PowerExporter(KEPLER, rapl=False))
    assert (
        sample(s, "wattbit_hwmon_power_watts", chip="amdgpu", device="hwmon1", sensor="GPU")
        == 118.0
    )
    assert sample(
        s, "wattbit_hwmon_energy_joules_total", chip="energy_meter", device="hwmon_energy",
        sensor="Total",
    ) == 500.0  # fmt: skip


def test_no_powercap_no_hwmon(tmp_path: Path) -> None:
    exporter = PowerExporter(tmp_path)
    s = scrape(exporter)
    assert sample(s, "wattbit_exporter_up", exporter="power") == 1.0
    assert not [k for k in s if k[0].startswith(("wattbit_rapl_", "wattbit_hwmon_"))]
    assert exporter.startup_note() == "rapl: no powercap zones; hwmon: 0 power, 0 energy channels"


def test_agent_config_power_section(tmp_path: Path) -> None:
    """power: in the agent's configuration: on by default, each source can be switched off,
    unknown keys refused."""
    from pydantic import ValidationError

    from collector.agent.config import AgentConfig
    from collector.agent.main import build_exporters

    off = {"blockio": {"enabled": False}, "nic": {"enabled": False}, "smart": {"enabled": False},
           "pcie": {"enabled": False}}  # fmt: skip
    default = build_exporters(AgentConfig.model_validate(off), sys_root=NODE)
    power = [e for e in default if isinstance(e, PowerExporter)]
    assert len(power) == 1 and power[0].rapl and power[0].hwmon
    no_hwmon = AgentConfig.model_validate({**off, "power": {"hwmon": False}})
    (p,) = [e for e in build_exporters(no_hwmon, sys_root=NODE) if isinstance(e, PowerExporter)]
    assert p.rapl and not p.hwmon and p.sys_root == NODE
    disabled = AgentConfig.model_validate({**off, "power": {"enabled": False}})
    assert not [e for e in build_exporters(disabled) if isinstance(e, PowerExporter)]
    with pytest.raises(ValidationError, match=r"power\.rapls"):
        AgentConfig.model_validate({"power": {"rapls": True}})
