"""The simulated fleet bench/fleet/ measures (tests/support/synthetic.py), what its numbers
rest on: the served exposition stays a valid one (counters only go up, histogram buckets stay
cumulative, trouble counters are still at 0), and the collector and Prometheus configurations
it writes are accepted by the real loaders.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collector.config import load_model
from collector.site.config import CollectorConfig
from tests.support.env import require
from tests.support.realparts import have
from tests.support.synthetic import (
    TROUBLE,
    Exposition,
    collector_yml,
    prometheus_yml,
    record_exposition,
    series_of,
)

TEXT = record_exposition(disks=6, nics=1, queues=2, cpus=4)


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def test_the_recording_is_the_agents_exposition() -> None:
    names = {fam.name for fam in text_string_to_metric_families(TEXT)}
    assert {"wattbit_disk_io_latency_seconds", "wattbit_nic_bytes", "wattbit_exporter_up"} <= names
    assert series_of(TEXT) == len(_samples(TEXT.encode()))


def test_counters_move_and_stay_valid() -> None:
    expo = Exposition(TEXT)
    first, later = _samples(expo.body(0)), _samples(expo.body(3600))
    assert first.keys() == later.keys() == _samples(TEXT.encode()).keys()
    moved = 0
    for key, v0 in first.items():
        v1 = later[key]
        assert v1 >= v0, key
        moved += v1 > v0
        if TROUBLE.search(key[0]) and key[0].endswith("_total"):
            assert v0 == v1 == 0.0, key
    assert moved > len(first) / 2
    # every histogram's buckets cumulative, +Inf equal to _count, at both times
    for samples in (first, later):
        buckets: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = (
            defaultdict(list)
        )
        for (name, labels), v in samples.items():
            if name.endswith("_bucket"):
                rest = tuple(kv for kv in labels if kv[0] != "le")
                buckets[(name[: -len("_bucket")], rest)].append((float(dict(labels)["le"]), v))
        assert buckets
        for (base, rest), pairs in buckets.items():
            values = [v for _, v in sorted(pairs)]
            assert values == sorted(values), base
            assert values[-1] == samples[(base + "_count", rest)]


def test_the_generated_configurations_load(tmp_path: Path) -> None:
    (tmp_path / "collector.yml").write_text(collector_yml([1161, 1162], 7, 5, 15.0, tmp_path))
    cfg = load_model(CollectorConfig, tmp_path / "collector.yml")
    assert [p.name for p in cfg.pdus] == ["pdu001", "pdu002"]
    assert cfg.pdus[1].labels_for("3", "x") == ("mover007", "server")
    assert cfg.pdus[1].labels_for("5", "x") == ("", "spare")  # host 8 is not in the fleet
    require(have("promtool"), "promtool is not installed (Debian package prometheus)")
    (tmp_path / "prometheus.yml").write_text(prometheus_yml([9001, 9002], 9732, 15.0))
    r = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
