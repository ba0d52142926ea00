"""The report's verdict (collector/report/verdict/) on hand-built steps from issue 23's runs:
the same cases as the recording rules' promtool tests (alerts/tests/gen_limits.py), computed
from raw per-step series as the report does on backfilled data; and what must not move it
(issues 34 and 31): a PCI address of another host, one sample of a retrained link, a
capacity the data proves wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.report.series import BUSY, DISK_IO, NIC, Bins, Grid, PerSeries, Track, VerdictData
from collector.report.verdict import usage, verdict

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


def _nic(host: str, iface: str, rx: float, tx: float, n: int = N) -> list[Track]:
    return [
        _track(NIC, host, _flat(rx, n), interface=iface, direction="rx"),
        _track(NIC, host, _flat(tx, n), interface=iface, direction="tx"),
    ]


def _cpus(
    host: str, busy: dict[str, Bins], softirq: dict[str, Bins] | None = None
) -> dict[str, PerSeries]:
    """node_exporter's CPU time for CPUs ``busy`` moving data (taking a NIC's interrupts) in
    every step with a value, idle in the others; ``softirq`` their softirq share."""
    node: PerSeries = []
    irqs: PerSeries = []
    for c, b in busy.items():
        node.append(
            ({"host": host, "cpu": c, "mode": "idle"}, [None if v is None else 1 - v for v in b])
        )
        soft = (softirq or {}).get(c)
        if soft is not None:
            node.append(({"host": host, "cpu": c, "mode": "softirq"}, soft))
        irqs.append(
            ({"host": host, "cpu": c, "irq": "40"}, [None if v is None else 1.0 for v in b])
        )
    return {"node_cpu": node, "nic_irqs": irqs}


def _tcp(host: str, share: Bins) -> dict[str, PerSeries]:
    """TCP's counters' rates for a retransmitted ``share`` of 100 segments/s sent."""
    return {
        "retransmitted": [({"host": host}, [None if v is None else 100 * v for v in share])],
        "segments_out": [({"host": host, "direction": "out"}, [100.0] * len(share))],
    }


def test_disk_bound_42_gbit_stream() -> None:
    """Disks 96 % busy, NIC 70 % of 60 Gbit/s, busiest CPU 41 %: disk-bound, with headroom."""
    h = "stream01"
    tracks = _disks(
        h, {f"nvme{i}n1": (_flat(0.96 if i == 0 else 0.95), _flat(1.3125e9)) for i in range(4)}
    )
    tracks += _nic(h, "bond0", 0.0, 5.25e9)
    raw = VerdictData(
        whole_disks={(h, f"nvme{i}n1") for i in range(4)},
        disk_controller={(h, f"nvme{i}n1"): "0000:41:00.0" for i in range(4)},
        nic_speed={(h, "bond0"): _flat(7.5e9)},
        usable={(h, "0000:41:00.0"): _flat(31.5e9)},
        links={
            (h, "0000:41:00.0"): {
                "role": "controller",
                "upstream": "0000:40:01.1",
                "root": "0000:40:01.1",
            }
        },
        rates=_cpus(h, {"2": _flat(0.41)}, {"2": _flat(0.2)}),
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
    raw = VerdictData(
        nic_speed={(h, "eth2"): _flat(1.25e9), (h, "eth3"): _flat(1.25e9)},
        rates=_cpus(h, {"0": _flat(0.99), "1": [0.2] * 5 + [None] * 5}, {"0": _flat(0.6)}),
    )
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("cpu", "0")
    assert abs(lb.utilisation - 0.99) < 1e-9  # type: ignore[operator]
    assert abs(lb.others["nic"] - 0.515) < 1e-9
    assert "60 % softirq" in lb.evidence and lb.evidence.endswith("CPU-bound")


def _plateau(
    host: str, ctls: list[str], per: int, alone: float, together: float, busy: float
) -> tuple[list[Track], VerdictData, int]:
    """Each disk alone for one step (one per controller at a time), then all together."""
    slots = per
    n = slots + 6
    grid_n = n
    tracks: list[Track] = []
    raw = VerdictData()
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
            ios = [None if x is None else x / alone * 120 for x in r]
            raw.rates.setdefault("ios", []).append(
                ({"host": host, "device": dev, "op": "read"}, ios)
            )
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
    raw = VerdictData(
        whole_disks={(h, "sda"), (h, "sdb")},
        disk_controller={(h, "sda"): "0000:03:00.0", (h, "sdb"): "0000:03:00.0"},
        rates={
            "ios": [
                ({"host": h, "device": "sda", "op": "read"}, [120.0, 0.0] + [250.0] * 8),
                ({"host": h, "device": "sdb", "op": "read"}, [0.0, 120.0] + [250.0] * 8),
            ]
        },
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
    raw = VerdictData(nic_speed={(h, "eth0"): _flat(1.25e9)}, rates=_cpus(h, {"0": _flat(0.05)}))
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert lb.resource == "none" and lb.subject is None
    assert abs(lb.utilisation - 0.1) < 1e-9  # type: ignore[operator]
    assert lb.others == {"nic": 0.1, "cpu": 0.05}
    assert "paced itself" in lb.evidence


def test_idle_steps_are_not_judged() -> None:
    """No data moved: no limiter, whatever the CPUs do."""
    h = "idle01"
    tracks = _nic(h, "eth0", 0.0, 0.0)
    raw = VerdictData(nic_speed={(h, "eth0"): _flat(1.25e9)}, rates=_cpus(h, {"1": _flat(1.0)}))
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.utilisation) == ("none", None)


def test_nic_bound_and_tcp() -> None:
    """A NIC at 96 % of its speed is the limiter; a 1.5 % retransmitted share is tcp."""
    h = "nic01"
    raw = VerdictData(nic_speed={(h, "eth0"): _flat(1.25e9)}, rates=_tcp(h, _flat(0.0001)))
    lb = verdict(usage(GRID, _nic(h, "eth0", 1e6, 1.2e9), raw), h, range(N))
    assert (lb.resource, lb.subject) == ("nic", "eth0") and abs(lb.others["tcp"] - 0.01) < 1e-9
    raw = VerdictData(nic_speed={(h, "eth0"): _flat(1.25e9)}, rates=_tcp(h, _flat(0.015)))
    lb = verdict(usage(GRID, _nic(h, "eth0", 1e6, 1.25e8), raw), h, range(N))
    assert (lb.resource, lb.subject, lb.utilisation) == ("tcp", None, 1.0)


def test_shared_switch_uplink() -> None:
    """Two NICs at 1.9e9 B/s each behind a Gen3 x4 switch uplink (3.94e9): pcie, the uplink,
    at 96 %, named ahead of the NICs (61 % of their 25 Gbit/s). (More than 3.94e9 together
    could not pass the uplink: a link measured above its capacity is left out, below.)"""
    h = "sw01"
    tracks = _nic(h, "eth0", 1e6, 1.9e9) + _nic(h, "eth1", 1e6, 1.9e9)
    up, root = "0000:10:00.0", "0000:00:03.0"
    raw = VerdictData(
        nic_pci={(h, "eth0"): "0000:11:00.0", (h, "eth1"): "0000:12:00.0"},
        nic_speed={(h, "eth0"): _flat(3.125e9), (h, "eth1"): _flat(3.125e9)},
        links={
            (h, "0000:11:00.0"): {"role": "nic", "upstream": up, "root": root},
            (h, "0000:12:00.0"): {"role": "nic", "upstream": up, "root": root},
        },
        usable={
            (h, "0000:11:00.0"): _flat(7.88e9),
            (h, "0000:12:00.0"): _flat(7.88e9),
            (h, up): _flat(3.94e9),
            (h, root): _flat(15.75e9),
        },
    )
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("pcie", up)
    assert lb.utilisation == pytest.approx(3.8e9 / 3.94e9)
    assert lb.others["nic"] == pytest.approx(0.608)


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
    raw = VerdictData(whole_disks={(h, "nvme0n1")}, disk_controller={(h, "nvme0n1"): NVME})
    for (name, labels), v in samples.items():
        lab = dict(labels)
        if name == "wattbit_pcie_link_info":
            raw.links[(h, lab["pci"])] = {k: lab[k] for k in ("role", "upstream", "root")}
        elif name == "wattbit_pcie_link_usable_bytes_per_second":
            raw.usable[(h, lab["pci"])] = _flat(v)
    assert raw.links[(h, NVME)]["upstream"] == NVME_PORT  # the capture's chain, as exported
    usable = raw.usable[(h, NVME)][0] or 0.0
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

    doc = analyse(replace(phased_window(), verdict_error="Prometheus timed out")).doc
    assert any(w == "no verdict (what limited it): Prometheus timed out" for w in doc.warnings)
    assert doc.hosts["h"].limited_by is None and doc.hosts["h"].joules_per_gigabit is not None
    assert all(not p.limited_by for p in doc.phases)


def test_counters_combine_per_series_rates_as_the_rules_do() -> None:
    """The verdict's counters: the per-series rates the report computed (never a store's rate())
    summed as the rules' `sum by` do, node_exporter's CPU time ahead of the agent's for a host
    with both, CPUs taking interrupts picked, TCP's retransmitted share per host."""
    from collector.report.verdict import cpu, disk, tcp

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
    ios, (busy, soft), share = disk.requests(per, n), cpu.moving(per, n), tcp.retransmitted(per, n)
    assert ios == {("h", "sda"): [120.0, None, 50.0]}
    # CPU 0 of h: 50 % softirq in step 0 moves data; step 1 neither softirq nor interrupts
    assert busy[("h", "0")] == [pytest.approx(0.8), None, None]
    assert soft[("h", "0")] == [0.5, None, None]
    # CPU 1 of h takes the NIC's interrupts in step 1 only; its idle is node_exporter's
    assert busy[("h", "1")] == [None, pytest.approx(0.9), None]
    assert busy[("g", "0")] == [pytest.approx(0.7), None, pytest.approx(0.7)]
    assert share == {"h": [0.01, None, None]}  # no segments sent: no share
    assert (disk.requests({}, n), cpu.moving({}, n), tcp.retransmitted({}, n)) == ({}, ({}, {}), {})


# --- what must not move the verdict (issue 34, issue 31 item 6) ---------------------------

X1 = 8e9 / 8 * 128 / 130  # a Gen3 x1 link's usable bytes/s each way
NIC_PCI = "0000:01:00.0"
NIC_LINK = {"role": "nic", "upstream": "0000:00:01.0", "root": "0000:00:01.0"}


def test_a_pci_address_belongs_to_its_host() -> None:
    """Host a's NIC at 99 % of its x1 link is PCIe-bound, whatever host b has at the same
    PCI address (a storage controller here). Before, the addresses of every host's
    controllers were one set: a's NIC counted as a controller without disks, and a got
    `none` (NIC 8 % of 100 Gbit/s)."""
    raw = VerdictData(
        nic_pci={("a", "eth0"): NIC_PCI},
        nic_speed={("a", "eth0"): _flat(12.5e9)},
        links={("a", NIC_PCI): NIC_LINK, ("b", NIC_PCI): {"role": "controller"}},
        usable={("a", NIC_PCI): _flat(X1), ("b", NIC_PCI): _flat(4 * X1)},
        disk_controller={("b", "sda"): NIC_PCI},
        whole_disks={("b", "sda")},
    )
    tracks = _nic("a", "eth0", 0.99 * X1, 1e6) + _disks("b", {"sda": (_flat(0.5), _flat(1e9))})
    u = usage(GRID, tracks, raw)
    lb = verdict(u, "a", range(N))
    assert (lb.resource, lb.subject) == ("pcie", NIC_PCI), lb
    assert lb.utilisation == pytest.approx(0.99)
    assert lb.evidence.startswith(f"PCIe link {NIC_PCI} 99 % used; NIC eth0 8 % of 100 Gbit/s")
    # and b's controller is judged against b's link: 1e9 of 3.94e9
    assert u.util["b"][("controller", NIC_PCI)][0] == pytest.approx(1e9 / (4 * X1))


def test_one_sample_of_a_retrained_link_does_not_decide() -> None:
    """A NIC moving 99 % of an x1 link's bytes through its x4 link, seen retrained to x1 in
    one scrape of 145: 25 % used, `none`, and the evidence shows the retrain. Before, the
    capacity was the window's minimum (min_over_time over the window): "PCIe-bound 99 %"."""
    n = 145
    grid = Grid.make(0.0, 1.0 * n, 1.0)
    usable: Bins = [4 * X1] * n
    usable[70] = X1
    raw = VerdictData(
        nic_pci={("a", "eth0"): NIC_PCI},
        nic_speed={("a", "eth0"): _flat(12.5e9, n)},
        links={("a", NIC_PCI): NIC_LINK},
        usable={("a", NIC_PCI): usable},
    )
    lb = verdict(usage(grid, _nic("a", "eth0", 0.99 * X1, 1e6, n), raw), "a", range(n))
    assert lb.resource == "none", lb
    assert lb.utilisation == pytest.approx((144 * 0.2475 + 0.99) / 145)
    assert f"PCIe link {NIC_PCI} 25 % used, its link at 985 MB/s usable in 1 of 145 steps" in (
        lb.evidence
    )
    # in the step it was retrained, that step's capacity counts: 99 %
    assert usage(grid, _nic("a", "eth0", 0.99 * X1, 1e6, n), raw).util["a"][("pcie", NIC_PCI)][
        70
    ] == pytest.approx(0.99)


def test_a_nic_speed_the_data_disproves_is_left_out() -> None:
    """`make demo`: 16.9 Gbit/s through a veth whose made-up speed is 10 Gbit/s while CPU 1
    is 99 % busy (40 % softirq). The NIC's speed cannot be true: it is left out and said so,
    and the CPU is named. Before: "network-bound: NIC wbdemo0 100 % of 10 Gbit/s"."""
    h = "demo"
    raw = VerdictData(
        nic_speed={(h, "wbdemo0"): _flat(1.25e9)},
        rates=_cpus(h, {"1": _flat(0.99)}, {"1": _flat(0.4)}),
    )
    lb = verdict(usage(GRID, _nic(h, "wbdemo0", 1e6, 16.9e9 / 8), raw), h, range(N))
    assert (lb.resource, lb.subject) == ("cpu", "1"), lb
    assert "nic" not in lb.others
    assert lb.evidence == (
        "CPU 1 99 % busy (40 % softirq): CPU-bound (NIC wbdemo0 left out: it moved 169 % of "
        "its stated 10 Gbit/s link speed, which cannot be: that capacity is wrong)"
    )
    # at 105 % of its speed (a counter's timing over a few steps) the NIC still counts
    lb = verdict(usage(GRID, _nic(h, "wbdemo0", 1e6, 1.05 * 1.25e9), raw), h, range(N))
    assert (lb.resource, lb.subject, lb.utilisation) == ("nic", "wbdemo0", 1.0)


def test_a_link_the_data_disproves_is_left_out() -> None:
    """Two NICs moving 5e9 B/s through a switch uplink that states 3.94e9: the uplink's
    figure is wrong (left out, said so); the NICs at 80 % are the limit."""
    h = "sw02"
    up = "0000:10:00.0"
    raw = VerdictData(
        nic_pci={(h, "eth0"): "0000:11:00.0", (h, "eth1"): "0000:12:00.0"},
        nic_speed={(h, "eth0"): _flat(3.125e9), (h, "eth1"): _flat(3.125e9)},
        links={
            (h, "0000:11:00.0"): {"role": "nic", "upstream": up, "root": up},
            (h, "0000:12:00.0"): {"role": "nic", "upstream": up, "root": up},
        },
        usable={(h, up): _flat(3.94e9)},
    )
    tracks = _nic(h, "eth0", 1e6, 2.5e9) + _nic(h, "eth1", 1e6, 2.5e9)
    lb = verdict(usage(GRID, tracks, raw), h, range(N))
    assert (lb.resource, lb.subject) == ("nic", "eth0"), lb
    assert "pcie" not in lb.others
    assert lb.evidence.endswith(
        f"network-bound (PCIe link {up} left out: it moved 127 % of its stated 3.94 GB/s "
        "usable, which cannot be: that capacity is wrong)"
    )


def test_gather_reads_capacities_per_step() -> None:
    """What gather makes of the capacities' per-step answers ({labels: {edge: value}}, edges
    1..n): per (host, subject) the lowest usable figure of a step (two series of one link:
    two scrape jobs), a step without a sample keeps the one before (the first, the one after),
    zero, negative and NaN are no capacity; and everything keyed by host."""
    from collector.report.gather import _per_step
    from collector.report.prom import label_key

    a = {"host": "a", "pci": NIC_PCI, "job": "agent"}
    points = {
        label_key(a): {2: 4e9, 3: 1e9, 5: 4e9, 6: float("nan")},
        label_key({**a, "job": "other"}): {3: 2e9, 4: 0.0},
        label_key({"host": "b", "pci": NIC_PCI}): {1: 8e9},
        label_key({"host": "c", "pci": NIC_PCI}): {1: -1.0},
    }
    got = _per_step(points, ("host", "pci"), min, 6)
    assert got == {
        ("a", NIC_PCI): [4e9, 4e9, 1e9, 1e9, 4e9, 4e9],
        ("b", NIC_PCI): [8e9] * 6,
    }


def test_a_nic_that_renegotiated_once_is_shown_not_judged_by_it() -> None:
    """A 10G NIC at 6 Gbit/s, seen at 1 Gbit/s in one step of ten (a renegotiation): that
    step is judged against 1 Gbit/s (capped at 100 %), the others against 10; the evidence
    names the speed in force and the change. The NIC is not left out: over the ten steps it
    moved 66 % of what its speeds allowed (that one step's 600 % weighs one step)."""
    h = "nic02"
    speed: Bins = _flat(1.25e9)
    speed[4] = 1.25e8
    raw = VerdictData(nic_speed={(h, "eth0"): speed})
    lb = verdict(usage(GRID, _nic(h, "eth0", 1e6, 0.75e9), raw), h, range(N))
    assert lb.resource == "none" and lb.utilisation == pytest.approx((9 * 0.6 + 1.0) / 10)
    assert lb.evidence.startswith(
        "NIC eth0 64 % of 10 Gbit/s, its link at 1 Gbit/s in 1 of 10 steps"
    )
