"""The report's verdict (collector/report/limits.py) on hand-built steps from issue 23's runs:
the same cases as the recording rules' promtool tests (alerts/tests/gen_limits.py), computed
from raw per-step series as the report does on backfilled data."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.report.limits import Raw, usage, verdict
from collector.report.series import BUSY, DISK_IO, NIC, Grid, Track

N = 10
GRID = Grid.make(0.0, 10.0 * N, 10.0)


def _track(metric: str, host: str, rates: list[float | None], **labels: str) -> Track:
    return Track(metric, {"host": host, **labels}, rates=list(rates))


def _flat(v: float, n: int = N) -> list[float | None]:
    return [v] * n


def _disks(
    host: str, rows: dict[str, tuple[list[float | None], list[float | None]]]
) -> list[Track]:
    """{device: (busy per step, read bytes/s per step)}."""
    out = []
    for dev, (busy, read) in rows.items():
        out.append(_track(BUSY, host, busy, device=dev))
        out.append(_track(DISK_IO, host, read, device=dev, op="read"))
        out.append(_track(DISK_IO, host, _flat(0.0, len(read)), device=dev, op="write"))
    return out


def _nic(host: str, iface: str, rx: float, tx: float) -> list[Track]:
    return [
        _track(NIC, host, _flat(rx), interface=iface, direction="rx"),
        _track(NIC, host, _flat(tx), interface=iface, direction="tx"),
    ]


def test_disk_bound_42_gbit_stream() -> None:
    """Disks 96 % busy, NIC 70 % of 60 Gbit/s, busiest CPU 41 %: disk-bound, with headroom."""
    h = "stream01"
    tracks = _disks(
        h, {f"nvme{i}n1": (_flat(0.96 if i == 0 else 0.95), _flat(1.3125e9)) for i in range(4)}
    )
    tracks += _nic(h, "bond0", 0.0, 5.25e9)
    raw = Raw(
        whole_disks={(h, f"nvme{i}n1") for i in range(4)},
        disk_controller={(h, f"nvme{i}n1"): "0000:41:00.0" for i in range(4)},
        nic_speed={(h, "bond0"): 7.5e9},
        usable={(h, "0000:41:00.0"): 31.5e9},
        links={
            (h, "0000:41:00.0"): {
                "role": "controller",
                "upstream": "0000:40:01.1",
                "root": "0000:40:01.1",
            }
        },
        cpu_busy={(h, "2"): _flat(0.41)},
        cpu_softirq={(h, "2"): _flat(0.2)},
    )
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("disk", "nvme0n1")
    assert abs(lb.utilisation - 0.96) < 1e-9  # type: ignore[operator]
    assert abs(lb.others["nic"] - 0.7) < 1e-9 and abs(lb.others["cpu"] - 0.41) < 1e-9
    assert abs(lb.others["controller"] - 5.25e9 / 31.5e9) < 1e-4
    assert lb.evidence.startswith("disk nvme0n1 96 % busy")
    assert (
        "NIC bond0 70 % of 60 Gbit/s" in lb.evidence
        and "CPU 2 41 % busy (20 % softirq)" in lb.evidence
    )
    assert lb.evidence.endswith(": disk-bound")
    assert set(lb.to_json()) == {"resource", "subject", "utilisation", "evidence", "others"}


def test_cpu_bound_receiver_cpu0_takes_both_nics() -> None:
    """10.3 Gbit/s on two 10G NICs (0.515 each), CPU 0 99 % busy, 60 % softirq: CPU-bound."""
    h = "recv01"
    tracks = _nic(h, "eth2", 0.64375e9, 1e6) + _nic(h, "eth3", 0.64375e9, 1e6)
    raw = Raw(
        nic_speed={(h, "eth2"): 1.25e9, (h, "eth3"): 1.25e9},
        cpu_busy={(h, "0"): _flat(0.99), (h, "1"): [0.2] * 5 + [None] * 5},
        cpu_softirq={(h, "0"): _flat(0.6)},
    )
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("cpu", "0")
    assert abs(lb.utilisation - 0.99) < 1e-9  # type: ignore[operator]
    assert abs(lb.others["nic"] - 0.515) < 1e-9
    assert "60 % softirq" in lb.evidence and lb.evidence.endswith("CPU-bound")


def _plateau(
    host: str, ctls: list[str], per: int, alone: float, together: float, busy: float
) -> tuple[list[Track], Raw, int]:
    """Each disk alone for one step (one per controller at a time), then all together."""
    slots = per
    n = slots + 6
    grid_n = n
    tracks: list[Track] = []
    raw = Raw()
    share = together / (len(ctls) * per)
    for ci, ctl in enumerate(ctls):
        raw.links[(host, ctl)] = {
            "role": "controller",
            "upstream": "0000:00:02.1",
            "root": "0000:00:02.0",
        }
        for k in range(per):
            dev = f"sd{chr(97 + ci)}{chr(97 + k)}"
            b: list[float | None] = [0.0] * grid_n
            r: list[float | None] = [0.0] * grid_n
            b[k], r[k] = 1.0, alone
            for j in range(slots, grid_n):
                b[j], r[j] = busy, share
            tracks += _disks(host, {dev: (b, r)})
            raw.whole_disks.add((host, dev))
            raw.disk_controller[(host, dev)] = ctl
            raw.disk_ios[(host, dev)] = [None if x is None else x / alone * 120 for x in r]
    return tracks, raw, n


def test_brick_plateau_names_the_shared_bridge() -> None:
    """24 disks on three 8-port controllers behind one PCI-X bridge at 1.05 GB/s (each alone
    60 MB/s): yield 0.73, the bridge is named, ahead of the 100 % busy disks."""
    ctls = ["0000:02:01.0", "0000:02:02.0", "0000:02:03.0"]
    tracks, raw, n = _plateau("brick01", ctls, 8, 60e6, 1.05e9, 1.0)
    grid = Grid.make(0.0, 10.0 * n, 10.0)
    u = usage(grid, tracks, raw)
    together = range(8, n)
    lb = verdict(u, "brick01", together)
    assert (lb.resource, lb.subject) == ("pcie", "0000:00:02.1"), lb
    assert lb.others["controller"] == 1.0 and lb.others["disk"] == 1.0
    assert "moving 73 % of what they did alone" in lb.evidence
    # the near miss: 16 disks scale linearly (60 MB/s each): the disks are the limit
    tracks, raw, n = _plateau("brick01", ctls, 5, 60e6, 15 * 60e6, 0.98)
    lb = verdict(usage(Grid.make(0.0, 10.0 * n, 10.0), tracks, raw), "brick01", range(5, n))
    assert lb.resource == "disk" and "controller" not in lb.others and "pcie" not in lb.others


def test_highpoint_controller_saturated() -> None:
    """One Highpoint at 346 MB/s with 8 drives that did 57.7 MB/s alone: controller-bound."""
    tracks, raw, n = _plateau("hpt01", ["0000:05:00.0"], 8, 346e6 / 6, 346e6, 1.0)
    lb = verdict(usage(Grid.make(0.0, 10.0 * n, 10.0), tracks, raw), "hpt01", range(8, n))
    assert (lb.resource, lb.subject) == ("controller", "0000:05:00.0")
    assert "pcie" not in lb.others  # one controller: its bridge is not blamed


def test_random_io_is_the_disks_not_the_controller() -> None:
    """Disks 100 % busy with random I/O (few bytes, many requests): disk-bound, and the
    controller is not held back (requests share above what they did alone)."""
    h = "db01"
    busy_a: list[float | None] = [1.0, 0.0] + [1.0] * 8
    busy_b: list[float | None] = [0.0, 1.0] + [0.9] * 8
    rd_a: list[float | None] = [60e6, 0.0] + [2.048e6] * 8
    rd_b: list[float | None] = [0.0, 60e6] + [2.048e6] * 8
    tracks = _disks(h, {"sda": (busy_a, rd_a), "sdb": (busy_b, rd_b)})
    raw = Raw(
        whole_disks={(h, "sda"), (h, "sdb")},
        disk_controller={(h, "sda"): "0000:03:00.0", (h, "sdb"): "0000:03:00.0"},
        disk_ios={(h, "sda"): [120.0, 0.0] + [250.0] * 8, (h, "sdb"): [0.0, 120.0] + [250.0] * 8},
    )
    u = usage(GRID, tracks, raw)
    lb = verdict(u, h, range(2, N))
    assert (lb.resource, lb.subject) == ("disk", "sda") and lb.utilisation == 1.0
    assert lb.evidence.startswith("disk sda 100 % busy at 2.05 MB/s in 8 KiB requests")
    assert "controller" not in lb.others
    assert abs((u.yields[(h, "0000:03:00.0")][5] or 0) - 500 / 240) < 1e-9


def test_none_when_paced_and_unrelated_cpu_is_ignored() -> None:
    """1 Gbit/s of 10 while a compile keeps a CPU busy: that CPU was not fetched as moving
    data (the query keeps CPUs taking interrupts or 10 % in interrupt work), so: none."""
    h = "build01"
    tracks = _nic(h, "eth0", 1e6, 1.25e8)
    raw = Raw(nic_speed={(h, "eth0"): 1.25e9}, cpu_busy={(h, "0"): _flat(0.05)})
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert lb.resource == "none" and lb.subject is None
    assert abs(lb.utilisation - 0.1) < 1e-9  # type: ignore[operator]
    assert lb.others == {"nic": 0.1, "cpu": 0.05}
    assert "paced itself" in lb.evidence


def test_idle_steps_are_not_judged() -> None:
    """No data moved: no limiter, whatever the CPUs do."""
    h = "idle01"
    tracks = _nic(h, "eth0", 0.0, 0.0)
    raw = Raw(nic_speed={(h, "eth0"): 1.25e9}, cpu_busy={(h, "1"): _flat(1.0)})
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.utilisation) == ("none", None)


def test_nic_bound_and_tcp() -> None:
    """A NIC at 96 % of its speed is the limiter; a 1.5 % retransmitted share is tcp."""
    h = "nic01"
    raw = Raw(nic_speed={(h, "eth0"): 1.25e9}, tcp_ratio={h: _flat(0.0001)})
    lb = verdict(usage(GRID, _nic(h, "eth0", 1e6, 1.2e9), raw), h, range(N))
    assert (lb.resource, lb.subject) == ("nic", "eth0") and abs(lb.others["tcp"] - 0.01) < 1e-9
    raw = Raw(nic_speed={(h, "eth0"): 1.25e9}, tcp_ratio={h: _flat(0.015)})
    lb = verdict(usage(GRID, _nic(h, "eth0", 1e6, 1.25e8), raw), h, range(N))
    assert (lb.resource, lb.subject, lb.utilisation) == ("tcp", None, 1.0)


def test_shared_switch_uplink() -> None:
    """Two NICs at 2.5e9 B/s each behind a Gen3 x4 switch uplink (3.94e9): pcie, the uplink."""
    h = "sw01"
    tracks = _nic(h, "eth0", 1e6, 2.5e9) + _nic(h, "eth1", 1e6, 2.5e9)
    up, root = "0000:10:00.0", "0000:00:03.0"
    raw = Raw(
        nic_pci={(h, "eth0"): "0000:11:00.0", (h, "eth1"): "0000:12:00.0"},
        nic_speed={(h, "eth0"): 3.125e9, (h, "eth1"): 3.125e9},
        links={
            (h, "0000:11:00.0"): {"role": "nic", "upstream": up, "root": root},
            (h, "0000:12:00.0"): {"role": "nic", "upstream": up, "root": root},
        },
        usable={
            (h, "0000:11:00.0"): 7.88e9,
            (h, "0000:12:00.0"): 7.88e9,
            (h, up): 3.94e9,
            (h, root): 15.75e9,
        },
    )
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject, lb.utilisation) == ("pcie", up, 1.0)
    assert abs(lb.others["nic"] - 0.8) < 1e-9


def test_gen4_nvme_trained_at_gen3_from_a_real_capture(tmp_path: Path) -> None:
    """The pcie exporter on node_exporter's captured tree (tests/fixtures/sys/pcie: a Gen4 x4
    NVMe 0000:01:00.0 trained at Gen3 x4 below root port 0000:00:02.1), and a drive reading
    3.8e9 B/s through it: its link (3.94e9 B/s usable) is the limit, the controller is named
    ahead of the 100 % busy disk, and the root port, whose link is the same one, is not a
    second, shared link."""
    from exporters.pcie.exporter import PcieExporter
    from tests.support.ttar import extract
    from tests.unit.test_pcie import NVME, NVME_PORT, PCIE, add_disk, scrape

    extract(PCIE / "node_exporter-sys.ttar", tmp_path / "ne")
    root = tmp_path / "ne" / "sys"
    nvme = root / "devices/pci0000:00/0000:00:02.1/0000:01:00.0"
    add_disk(root, str((nvme / "nvme/nvme0").relative_to(root)), "nvme0n1", 0)
    samples = scrape(PcieExporter(sys_root=root, proc_root=tmp_path / "noproc"))
    h = "nvme01"
    raw = Raw(whole_disks={(h, "nvme0n1")}, disk_controller={(h, "nvme0n1"): NVME})
    for (name, labels), v in samples.items():
        lab = dict(labels)
        if name == "wattbit_pcie_link_info":
            raw.links[(h, lab["pci"])] = {k: lab[k] for k in ("role", "upstream", "root")}
        elif name == "wattbit_pcie_link_usable_bytes_per_second":
            raw.usable[(h, lab["pci"])] = v
    assert raw.links[(h, NVME)]["upstream"] == NVME_PORT  # the capture's chain, as exported
    usable = raw.usable[(h, NVME)]
    assert usable == pytest.approx(8e9 * 4 / 8 * 128 / 130)  # Gen3 x4, not the drive's Gen4
    tracks = _disks(h, {"nvme0n1": (_flat(1.0), _flat(3.8e9))})
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("controller", NVME), lb
    assert lb.utilisation == pytest.approx(3.8e9 / usable)
    assert lb.others == {"disk": 1.0}  # no pcie: the root port's link is the drive's own
    assert lb.evidence.startswith(f"controller {NVME} at 96 %")


def test_a_failed_verdict_leaves_the_rest_of_the_report() -> None:
    """When the verdict's queries fail (a store that times out), the report has no verdict and
    says why; its other figures stand."""
    from dataclasses import replace

    from collector.report.analyse import analyse
    from tests.unit.test_report_math import phased_window

    doc = analyse(replace(phased_window(), limits_error="Prometheus timed out")).doc
    assert any(w == "no verdict (what limited it): Prometheus timed out" for w in doc.warnings)
    assert doc.hosts["h"].limited_by is None and doc.hosts["h"].joules_per_gigabit is not None
    assert all(not p.limited_by for p in doc.phases)


def test_counters_combine_per_series_rates_as_the_rules_do() -> None:
    """limits.counters: the per-series rates the report computed (never a store's rate())
    summed as the rules' `sum by` do, node_exporter's CPU time ahead of the agent's for a host
    with both, CPUs taking interrupts picked, TCP's retransmitted share per host."""
    from collector.report.limits import counters

    n = 3
    per = {
        "ios": [
            ({"host": "h", "device": "sda", "op": "read"}, [100.0, None, 50.0]),
            ({"host": "h", "device": "sda", "op": "write"}, [20.0, None, None]),
        ],
        "node_cpu": [
            ({"host": "h", "cpu": "0", "mode": "idle"}, [0.2, 0.9, None]),
            ({"host": "h", "cpu": "0", "mode": "softirq"}, [0.5, 0.0, None]),
            ({"host": "h", "cpu": "1", "mode": "idle"}, [0.1, 0.1, 0.1]),
        ],
        "agent_cpu": [
            # h has node_exporter: its agent's CPU time is not read; g has only the agent's
            ({"host": "h", "cpu": "1", "mode": "idle"}, [0.9, 0.9, 0.9]),
            ({"host": "g", "cpu": "0", "mode": "idle"}, [0.3, 0.3, 0.3]),
        ],
        "nic_irqs": [({"host": "h", "cpu": "1", "irq": "40"}, [0.0, 10.0, None])],
        "controller_irqs": [({"host": "g", "cpu": "0", "vector": "1"}, [5.0, 0.0, 5.0])],
        "retransmitted": [({"host": "h"}, [1.0, 0.0, None])],
        "segments_out": [({"host": "h", "direction": "out"}, [100.0, 0.0, 50.0])],
    }
    ios, busy, soft, tcp = counters(per, n)
    assert ios == {("h", "sda"): [120.0, None, 50.0]}
    # CPU 0 of h: 50 % softirq in step 0 moves data; step 1 neither softirq nor interrupts
    assert busy[("h", "0")] == [pytest.approx(0.8), None, None]
    assert soft[("h", "0")] == [0.5, None, None]
    # CPU 1 of h takes the NIC's interrupts in step 1 only; its idle is node_exporter's
    assert busy[("h", "1")] == [None, pytest.approx(0.9), None]
    assert busy[("g", "0")] == [pytest.approx(0.7), None, pytest.approx(0.7)]
    assert tcp == {"h": [0.01, None, None]}  # no segments sent: no share
    assert counters({}, n) == ({}, {}, {}, {})
