"""The power exporter against an independent reader: Debian's node_exporter (its rapl and hwmon
collectors) reading the same powercap and hwmon trees (tests/fixtures/power/README.md)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from exporters.power.exporter import PowerExporter
from tests.support.env import FIXTURES, require
from tests.support.realparts import have, parse_samples, server
from tests.unit.test_power_exporter import scrape

TREES = ["node_exporter", "kepler_synthetic"]


def node_exporter_samples(sys_root: Path, tmp: Path) -> dict:
    require(have("prometheus-node-exporter"), "prometheus-node-exporter (Debian) is missing")
    with server(
        "node_exporter",
        lambda port: [
            "prometheus-node-exporter", f"--path.sysfs={sys_root}",
            "--collector.disable-defaults", "--collector.rapl", "--collector.hwmon",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp,
        ready_path="/metrics",
    ) as url, urllib.request.urlopen(url + "/metrics", timeout=10) as r:  # fmt: skip
        return parse_samples(r.read().decode())


@pytest.mark.parametrize("tree", TREES)
def test_rapl_zones_equal_node_exporters(tree: str, tmp_path: Path) -> None:
    root = FIXTURES / "power" / tree / "sys"
    node = node_exporter_samples(root, tmp_path)
    ours = scrape(PowerExporter(root, hwmon=False))
    mine = {
        (dict(lbl)["zone"], dict(lbl)["package"]): v
        for (name, lbl), v in ours.items()
        if name == "wattbit_rapl_energy_joules_total"
    }
    theirs: dict[tuple[str, str], set[float]] = {}
    for (name, lbl), v in node.items():
        if name.startswith("node_rapl_") and name.endswith("_joules_total"):
            zone = name[len("node_rapl_") : -len("_joules_total")]
            theirs.setdefault((zone, dict(lbl)["index"]), set()).add(v)
    assert mine, "no zones read"
    # node_exporter names a zone by its name and its top-level index; it also counts the
    # MMIO duplicate of package 0, with the same value (wattbit keeps one).
    assert set(mine) == set(theirs)
    for key, v in mine.items():
        assert theirs[key] == {v}, key


def test_hwmon_channels_equal_node_exporters(tmp_path: Path) -> None:
    root = FIXTURES / "power" / "kepler_synthetic" / "sys"
    node = node_exporter_samples(root, tmp_path)
    ours = scrape(PowerExporter(root, rapl=False))
    disabled = {
        (dict(lbl)["chip"], dict(lbl)["sensor"])
        for (name, lbl), v in node.items()
        if name in ("node_hwmon_power_enable_watt", "node_hwmon_energy_enable_joule_total")
        and v == 0
    }

    def node_values(metric: str, prefer: str | None = None) -> list[tuple[str, float]]:
        chans: dict[tuple[str, str], float] = {}
        for (name, lbl), v in node.items():
            if name not in (metric, prefer):
                continue
            key = (dict(lbl)["chip"], dict(lbl)["sensor"])
            if key in disabled:
                continue
            if name == metric and key not in chans:
                chans[key] = v
            if prefer and name == prefer:
                chans[key] = v  # the average, where the driver has one, wins
        return sorted((chip, v) for (chip, _), v in chans.items())

    def our_values(metric: str) -> list[tuple[str, float]]:
        return sorted((dict(lbl)["chip"], v) for (name, lbl), v in ours.items() if name == metric)

    assert our_values("wattbit_hwmon_power_watts") == node_values(
        "node_hwmon_power_watt", prefer="node_hwmon_power_average_watt"
    )
    assert our_values("wattbit_hwmon_energy_joules_total") == node_values(
        "node_hwmon_energy_joule_total"
    )
    assert our_values("wattbit_hwmon_power_watts")  # not vacuous
