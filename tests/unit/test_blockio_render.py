"""The blockio exporter's exposition: histogram convention, absent ops, fallback, golden."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporters.blockio.exporter import le_labels, render
from exporters.blockio.model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    SIZE_SLOTS,
    DeviceStats,
    OpStats,
)
from tests.support.env import FIXTURES, require
from tests.support.realparts import have, parse_samples, sample

GOLDEN = FIXTURES / "metrics" / "blockio_render.prom"


def _text(
    devices: dict[str, DeviceStats],
    backend: str = "core",
    reason: str = "",
    prog_stats: dict[str, tuple[int, int]] | None = None,
    map_full: dict[str, int] | None = None,
) -> str:
    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(
                render(
                    devices,
                    backend,
                    reason,
                    {"issue": 0, "complete": 2},
                    prog_stats=prog_stats,
                    map_full=map_full,
                )
            )

    r = CollectorRegistry(auto_describe=False)
    r.register(One())
    return generate_latest(r).decode()


def _devices() -> dict[str, DeviceStats]:
    n = len(DEFAULT_LAT_BOUNDS_SECONDS) + 1
    lat = [0] * n
    lat[0], lat[2], lat[n - 1] = 3, 5, 1  # <=10us, (20,50]us, > 1 s
    size = [0] * SIZE_SLOTS
    size[3] = 9  # 4 KiB
    read = OpStats(
        ios=9,
        bytes=9 * 4096,
        errors=1,
        lat_slots=lat,
        lat_sum_seconds=20.000017,
        size_slots=size,
        size_sum_bytes=9 * 4096,
        untimed=2,
    )
    return {
        "nvme0n1": DeviceStats(
            ops={"read": read, "write": OpStats(errors=0)},
            busy_seconds=1.5,
            inflight=2,
            clock="device",
        ),
    }


def test_histogram_is_cumulative_with_inf_count_and_sum() -> None:
    s = parse_samples(_text(_devices()))
    b = "wattbit_disk_io_latency_seconds_bucket"
    assert sample(s, b, device="nvme0n1", op="read", le="1e-05") == 3
    assert sample(s, b, device="nvme0n1", op="read", le="2e-05") == 3
    assert sample(s, b, device="nvme0n1", op="read", le="5e-05") == 8
    assert sample(s, b, device="nvme0n1", op="read", le="1.0") == 8
    assert sample(s, b, device="nvme0n1", op="read", le="+Inf") == 9
    assert sample(s, "wattbit_disk_io_latency_seconds_count", device="nvme0n1", op="read") == 9
    assert sample(s, "wattbit_disk_io_latency_seconds_sum", device="nvme0n1", op="read") == (
        20.000017
    )
    assert (
        sample(s, "wattbit_disk_io_size_bytes_bucket", device="nvme0n1", op="read", le="4096.0")
        == 9
    )
    assert sample(s, "wattbit_disk_io_errors_total", device="nvme0n1", op="read") == 1
    # An op with no traffic has no series at all.
    assert not any(dict(k[1]).get("op") == "write" for k in s)
    assert sample(s, "wattbit_blockio_bpf_missed_events_total", event="complete") == 2
    assert sample(s, "wattbit_disk_io_latency_clock_info", device="nvme0n1", clock="device") == 1
    assert sample(s, "wattbit_disk_io_untimed_total", device="nvme0n1", op="read") == 2
    # bpf_stats off: no run-time series at all (not zeros that look like a free program).
    assert not any(k[0].startswith("wattbit_blockio_bpf_run") for k in s)


def test_bpf_run_time_when_the_kernel_counts_it() -> None:
    s = parse_samples(_text(_devices(), prog_stats={"complete": (1_190_000, 10_000)}))
    assert sample(s, "wattbit_blockio_bpf_run_seconds_total", program="complete") == 0.00119
    assert sample(s, "wattbit_blockio_bpf_runs_total", program="complete") == 10_000


def test_map_full_from_the_start_and_absent_without_bpf() -> None:
    """Exported at 0 before the first failure (increase() sees the first one), by map."""
    s = parse_samples(_text(_devices(), map_full={"stats": 0, "start": 5}))
    assert ("wattbit_blockio_bpf_map_full_total", (("map", "stats"),)) in s
    assert sample(s, "wattbit_blockio_bpf_map_full_total", map="start") == 5
    assert "wattbit_blockio_bpf_map_full" not in _text(_devices())


def test_size_histogram_only_when_filled() -> None:
    devices = _devices()
    devices["nvme0n1"].ops["read"].size_slots = None  # blockio.size_histogram: false
    assert "wattbit_disk_io_size_bytes" not in _text(devices)


def test_configured_bounds_are_the_le_labels() -> None:
    dev = DeviceStats(ops={"read": OpStats(ios=3, lat_slots=[1, 1, 1])}, clock="queue")

    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(render({"sda": dev}, "core", "", lat_le=le_labels([0.001, 0.25])))

    r = CollectorRegistry(auto_describe=False)
    r.register(One())
    s = parse_samples(generate_latest(r).decode())
    b = "wattbit_disk_io_latency_seconds_bucket"
    assert [sample(s, b, device="sda", op="read", le=le) for le in ("0.001", "0.25", "+Inf")] == [
        1,
        2,
        3,
    ]
    assert sample(s, "wattbit_disk_io_latency_clock_info", device="sda", clock="queue") == 1


def test_fallback_has_no_histograms_or_errors() -> None:
    dev = DeviceStats(ops={"read": OpStats(ios=4, bytes=4096, time_seconds=0.5)})
    text = _text({"sda": dev}, backend="diskstats", reason="missing CAP_BPF+CAP_PERFMON")
    assert "wattbit_disk_io_latency_seconds_bucket{" not in text
    assert "wattbit_disk_io_errors_total{" not in text
    assert 'wattbit_disk_io_time_seconds_total{device="sda",op="read"} 0.5' in text
    info = 'wattbit_blockio_backend_info{backend="diskstats",reason="missing CAP_BPF+CAP_PERFMON"}'
    assert f"{info} 1.0" in text


def test_golden_exposition() -> None:
    text = _text(_devices())
    if os.environ.get("WATTBIT_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_promtool_accepts_it(tmp_path: Path) -> None:
    require(have("promtool"), "promtool (Debian package prometheus) is not installed")
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=_text(_devices()), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_unseen_completions_only_where_some_were() -> None:
    """wattbit_disk_ios_unseen_total: absent while zero; an op the program never saw but the
    kernel completed gets its series (with ios 0, as the program counted)."""
    devices = _devices()
    assert not any(k[0] == "wattbit_disk_ios_unseen_total" for k in parse_samples(_text(devices)))
    devices["nvme0n1"].ops["read"].unseen = 3
    devices["nvme0n1"].ops["discard"] = OpStats(errors=0, unseen=1)
    s = parse_samples(_text(devices))
    assert sample(s, "wattbit_disk_ios_unseen_total", device="nvme0n1", op="read") == 3
    assert sample(s, "wattbit_disk_ios_unseen_total", device="nvme0n1", op="discard") == 1
    assert ("wattbit_disk_ios_total", (("device", "nvme0n1"), ("op", "discard"))) in s
    assert not any(dict(k[1]).get("op") == "write" for k in s)
