"""The blockio exporter yields its last families again only while every input is equal, and
the renderer reuses a reused family's text only for that very object (issue 35)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from collector.web.exposition import TextRenderer
from exporters.base import REUSED, ExportersCollector, reusable
from exporters.blockio import exporter as blockio
from exporters.blockio.model import DeviceStats, OpStats
from exporters.hostfs.blockdevs import DiskInfo
from tests.support.synthetic import synthetic_devices


class InPlaceBackend:
    """A backend that hands back the same objects every read, changed in place (the worst
    case for a cache keyed on its output)."""

    name = "core"
    size_histogram = True

    def __init__(self, devices: dict[str, DeviceStats]) -> None:
        self.devices = devices
        self.missed = {"complete": 0}
        self.stats = {"complete": (10**9, 10**7)}

    def read(self) -> dict[str, DeviceStats]:
        return self.devices

    def missed_events(self) -> dict[str, int]:
        return self.missed

    def prog_stats(self) -> dict[str, tuple[int, int]]:
        return self.stats

    def map_full(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


def _exporter(tmp_path: Path, devices: dict[str, DeviceStats]) -> blockio.BlockioExporter:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "diskstats").write_text("")
    (tmp_path / "sys" / "class" / "block").mkdir(parents=True)
    e = blockio.BlockioExporter("diskstats", sys_root=tmp_path / "sys", proc_root=tmp_path / "proc")
    e.backend = InPlaceBackend(devices)  # type: ignore[assignment]
    return e


def _stable(body: bytes) -> bytes:
    return re.sub(rb"(wattbit_exporter_duration_seconds\{[^}]*\}) \S+", rb"\1 X", body)


def test_the_key_covers_every_field_of_the_stats() -> None:
    """A field added to OpStats and not to the key would be served stale: this fails first."""
    assert tuple(f.name for f in dataclasses.fields(OpStats)) == blockio.STATS_KEY_FIELDS
    assert {f.name for f in dataclasses.fields(DeviceStats)} == {
        "ops",
        "busy_seconds",
        "inflight",
        "clock",
    }


def test_same_inputs_same_families_any_change_new_ones(tmp_path: Path) -> None:
    devices = synthetic_devices(4, ("read", "write"), True)
    e = _exporter(tmp_path, devices)
    first = list(e.collect())
    again = list(e.collect())
    assert all(a is b for a, b in zip(first, again, strict=True))
    name = sorted(devices)[2]
    changes = [
        lambda: devices[name].ops["read"].lat_slots.__setitem__(3, 7 + 10**6),  # type: ignore[union-attr]
        lambda: setattr(devices[name].ops["write"], "bytes", 123456789),
        lambda: setattr(devices[name], "busy_seconds", 99.5),
        lambda: setattr(devices[name], "inflight", 5),
        lambda: setattr(devices[name].ops["read"], "unseen", 3),
        lambda: e.backend.missed_events().__setitem__("complete", 2),  # type: ignore[attr-defined]
        lambda: devices.pop(sorted(devices)[0]),
    ]
    for change in changes:
        before = list(e.collect())[:-1]
        change()
        after = list(e.collect())[:-1]
        assert not all(a is b for a, b in zip(before, after, strict=False))
        # what it serves is what rendering the inputs now gives
        fresh = list(
            blockio.render(
                devices,
                "core",
                e.reason,
                e.backend.missed_events(),  # type: ignore[attr-defined]
                prog_stats=e.backend.prog_stats(),  # type: ignore[attr-defined]
                map_full={},
            )
        )
        assert after == fresh


def test_renderer_reuses_text_only_for_the_same_object(tmp_path: Path) -> None:
    """Byte for byte generate_latest over scrapes where the reused families stay, change
    (new objects) and go."""
    devices = synthetic_devices(3, ("read", "write"), False)
    e = _exporter(tmp_path, devices)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector([e]))
    renderer = TextRenderer(registry)
    name = sorted(devices)[1]
    for step in range(6):
        if step == 2:
            devices[name].ops["read"].ios += 1
        if step == 4:
            devices.pop(name)
        assert _stable(renderer.render()) == _stable(generate_latest(registry))


def test_a_new_object_of_a_reused_name_is_rendered_afresh() -> None:
    values = iter([1.0, 1.0, 2.0])

    class Exp:
        def collect(self):  # type: ignore[no-untyped-def]
            g = GaugeMetricFamily("x", "doc", labels=["a"])
            g.add_metric(["b"], next(values))
            return reusable([g])

    renderer = TextRenderer(Exp())  # type: ignore[arg-type]
    assert [renderer.render().splitlines()[-1] for _ in range(3)] == [
        b'x{a="b"} 1.0',
        b'x{a="b"} 1.0',
        b'x{a="b"} 2.0',
    ]


def test_disk_info_is_the_same_object_while_the_topology_is_equal(tmp_path: Path) -> None:
    """wattbit_disk_info is built again only when a disk's /sys facts changed, came or went."""
    devices = synthetic_devices(2, ("read",), False)
    e = _exporter(tmp_path, devices)
    a, b = sorted(devices)
    infos = {
        n: DiskInfo(n, 7, i, "m", f"s{i}", "0000:00:01.0", "0", "0", "", 1 << 30)
        for i, n in enumerate((a, b))
    }
    e.topology.get = lambda names: dict(infos)  # type: ignore[method-assign]

    def info() -> GaugeMetricFamily:
        (family,) = [f for f in e.collect() if f.name == "wattbit_disk_info"]
        return family  # type: ignore[return-value]

    first = info()
    assert info() is first and getattr(first, REUSED)
    assert [s.labels["serial"] for s in first.samples] == ["s0", "s1"]
    infos[b] = dataclasses.replace(infos[b], serial="new")  # a disk swapped in that bay
    second = info()
    assert second is not first and [s.labels["serial"] for s in second.samples] == ["s0", "new"]
    del infos[a]
    assert [s.labels["device"] for s in info().samples] == [b]
