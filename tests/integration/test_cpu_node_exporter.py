"""Cross-check: wattbit_cpu_seconds_total equals node_cpu_seconds_total, both reading the same
/proc/stat (Debian's prometheus-node-exporter, cpu collector only, --path.procfs on a copy).

Two captures: node_exporter's own fixture (8 CPUs, guest time) and this VM's /proc/stat
(tests/fixtures/proc/README.md). Equal label sets and equal values, so a rule can take either
series where the other is missing.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.cpu.exporter import CpuExporter
from tests.support.env import FIXTURES, require
from tests.support.realparts import have, server


def samples(text: str, name: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[(s.labels["cpu"], s.labels["mode"])] = s.value
    return out


@pytest.mark.parametrize("capture", ["stat-node_exporter", "stat-6.18-vm"])
def test_same_as_node_exporter(capture: str, tmp_path: Path) -> None:
    require(
        have("prometheus-node-exporter"),
        "prometheus-node-exporter (Debian package) is not installed",
    )
    proc = tmp_path / "proc"
    (tmp_path / "sys").mkdir()
    proc.mkdir()
    shutil.copyfile(FIXTURES / "proc" / capture, proc / "stat")
    command = [
        "prometheus-node-exporter",
        "--collector.disable-defaults",
        "--collector.cpu",
        f"--path.procfs={proc}",
        f"--path.sysfs={tmp_path / 'sys'}",
    ]
    with (
        server(
            "node_exporter",
            lambda port: [*command, f"--web.listen-address=127.0.0.1:{port}"],
            tmp_path,
            ready_path="/metrics",
        ) as url,
        urllib.request.urlopen(url + "/metrics", timeout=30) as r,
    ):
        theirs = samples(r.read().decode(), "node_cpu_seconds_total")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(CpuExporter(proc_root=proc))
    ours = samples(generate_latest(registry).decode(), "wattbit_cpu_seconds_total")
    assert len(theirs) >= 16  # >= 2 CPUs x 8 modes: node_exporter really read the file
    assert ours == theirs
