"""The opt-in cpu exporter: /proc/stat parsing with node_exporter's names and semantics."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.cpu.exporter import CpuExporter, parse_proc_stat
from tests.support.env import FIXTURES


def scrape(exporter: CpuExporter) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.labels["cpu"], s.labels["mode"])] = s.value
    return out


def test_node_exporter_fixture() -> None:
    stats = parse_proc_stat((FIXTURES / "proc" / "stat-node_exporter").read_text())
    assert sorted(stats) == list(range(8))  # the aggregate "cpu" line is not a CPU
    # "cpu0 44490 19 21045 1087069 220 1 3410 0 2 1": USER_HZ ticks / 100; guest columns out
    assert stats[0] == {
        "user": 444.9,
        "nice": 0.19,
        "system": 210.45,
        "idle": 10870.69,
        "iowait": 2.2,
        "irq": 0.01,
        "softirq": 34.1,
        "steal": 0.0,
    }


def test_old_kernels_and_malformed_lines() -> None:
    text = (
        "cpu  1 2 3 4\n"
        "cpu0 100 0 50 1000\n"  # 2.6.0: four columns only
        "cpu1 100 0 50 1000 7 1 2\n"  # 2.6.11 before steal
        "cpu2 x 0 50 1000\n"
        "cpu3 " + "9" * 30 + " 0 50 1000\n"  # beyond 64 bits
        "cpu4 1 2\n"
        "cpuX 1 2 3 4\n"
        "intr 1 2 3\n"
    )
    stats = parse_proc_stat(text)
    assert stats == {
        0: {"user": 1.0, "nice": 0.0, "system": 0.5, "idle": 10.0},
        1: {"user": 1.0, "nice": 0.0, "system": 0.5, "idle": 10.0}
        | {"iowait": 0.07, "irq": 0.01, "softirq": 0.02},
    }


def test_idle_and_iowait_never_go_backwards_and_offline_cpus_leave(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu0 100 0 50 1000 70 0 0 0 0 0\ncpu1 1 0 1 10 1 0 0 0 0 0\n")
    exporter = CpuExporter(proc_root=tmp_path)
    first = scrape(exporter)
    assert first[("0", "iowait")] == 0.7 and ("1", "idle") in first
    # iowait and idle can decrease on NO_HZ kernels; cpu1 went offline
    stat.write_text("cpu0 120 0 50 990 60 0 0 0 0 0\n")
    second = scrape(exporter)
    assert second[("0", "idle")] == 10.0 and second[("0", "iowait")] == 0.7
    assert second[("0", "user")] == 1.2
    assert not any(cpu == "1" for cpu, _ in second)


def test_missing_proc_stat(tmp_path: Path) -> None:
    assert scrape(CpuExporter(proc_root=tmp_path)) == {}
