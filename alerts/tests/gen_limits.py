"""Generate alerts/tests/limits_test.yml: the "what limits it" rules on the issue's real runs.

    python alerts/tests/gen_limits.py            # rewrite limits_test.yml
    python alerts/tests/gen_limits.py --check    # exit 1 if it is out of date

Each case is one `promtool test rules` test group: the series of one host as Prometheus stores
them after scraping (job, instance, host), built from the figures of a run the issue names
(issue 23), and the values the rules must give, written from those figures. Every series moves
at a constant pace within a phase; phases are whole minutes; the checks fall at least one minute
into a phase, so every 1m window holds one pace and rates are exact. Values are compared to
four decimal places (`round(..., 0.0001)`): promtool compares floats exactly, and 0.96 is not a
binary fraction.

The alone values (host_device:wattbit_disk_alone_*:last) need each disk to have run alone on
its controller once: the plateau cases start with one disk per controller at a time, as the
brick was measured ("each ~60 MB/s"), then run every disk together.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "limits_test.yml"
STEP = 15  # seconds between samples
PER_MIN = 60 // STEP

Phase = tuple[int, float]  # (minutes, rate per second)


def counter(phases: list[Phase]) -> str:
    """promtool's expanding notation for a counter growing at each phase's rate."""
    out: list[str] = []
    last = 0.0
    first = True
    for minutes, rate in phases:
        steps = minutes * PER_MIN
        inc = rate * STEP
        if first:
            out.append(f"0+{inc:.17g}x{steps}")
            last = inc * steps
            first = False
        else:
            out.append(f"{last + inc:.17g}+{inc:.17g}x{steps - 1}")
            last += inc * steps
    return " ".join(out)


def gauge(value: float, minutes: int) -> str:
    """A constant gauge over the whole case."""
    return f"{value:g}+0x{minutes * PER_MIN}"


@dataclass
class Case:
    """One test group: its comment, input series, and checks (expr, eval minute, samples)."""

    title: str
    comment: str
    minutes: int
    series: list[tuple[str, str]] = field(default_factory=list)
    checks: list[tuple[str, int, list[tuple[str, float]]]] = field(default_factory=list)

    def agent(self, host: str, metric: str, labels: str, values: str) -> None:
        """An agent series (job wattbit-agent)."""
        lab = f'job="wattbit-agent",instance="{host}:9731",host="{host}"'
        self.series.append((f"{metric}{{{lab}{',' + labels if labels else ''}}}", values))

    def node(self, host: str, metric: str, labels: str, values: str) -> None:
        """A node_exporter series (job node)."""
        lab = f'job="node",instance="{host}:9100",host="{host}"'
        self.series.append((f"{metric}{{{lab},{labels}}}", values))

    def disk(
        self,
        host: str,
        device: str,
        controller: str,
        busy: list[Phase],
        read: list[Phase],
        ios: list[Phase],
    ) -> None:
        """A whole disk on a controller: info, busy, read bytes and read requests."""
        self.agent(
            host,
            "wattbit_disk_info",
            f'device="{device}",model="m",serial="s-{device}",controller="{controller}",'
            f'numa_node="0",rotational="1",parent=""',
            gauge(1, self.minutes),
        )
        self.agent(host, "wattbit_disk_busy_seconds_total", f'device="{device}"', counter(busy))
        self.agent(
            host, "wattbit_disk_io_bytes_total", f'device="{device}",op="read"', counter(read)
        )
        self.agent(host, "wattbit_disk_ios_total", f'device="{device}",op="read"', counter(ios))

    def nic(
        self, host: str, interface: str, pci: str, speed: float | None, rx: float, tx: float
    ) -> None:
        """A NIC at constant rates (bytes/s) with its link speed (bytes/s) and PCI address."""
        m = self.minutes
        self.agent(
            host,
            "wattbit_nic_info",
            f'interface="{interface}",driver="ixgbe",pci="{pci}",numa_node="0",mtu="9000",'
            f'operstate="up"',
            gauge(1, m),
        )
        if speed is not None:
            self.agent(
                host,
                "wattbit_nic_link_speed_bytes_per_second",
                f'interface="{interface}",source="kernel"',
                gauge(speed, m),
            )
        for d, r in (("rx", rx), ("tx", tx)):
            self.agent(
                host,
                "wattbit_nic_bytes_total",
                f'interface="{interface}",direction="{d}"',
                counter([(m, r)]),
            )

    def cpus(self, host: str, shares: dict[str, dict[str, float]]) -> None:
        """node_cpu_seconds_total per CPU: the share of each mode (the rest is idle)."""
        for cpu, modes in shares.items():
            idle = 1 - sum(modes.values())
            for mode, share in {**modes, "idle": idle}.items():
                self.node(
                    host,
                    "node_cpu_seconds_total",
                    f'cpu="{cpu}",mode="{mode}"',
                    counter([(self.minutes, share)]),
                )

    def link(
        self, host: str, pci: str, role: str, upstream: str, root: str, usable: float | None
    ) -> None:
        """A device of the PCIe chain, and its usable bytes/s per direction when known."""
        self.agent(
            host,
            "wattbit_pcie_link_info",
            f'pci="{pci}",role="{role}",upstream="{upstream}",root="{root}",driver="d"',
            gauge(1, self.minutes),
        )
        if usable is not None:
            self.agent(
                host,
                "wattbit_pcie_link_usable_bytes_per_second",
                f'pci="{pci}"',
                gauge(usable, self.minutes),
            )

    def check(self, expr: str, minute: int, samples: list[tuple[str, float]]) -> None:
        """At `minute`, round(expr, 0.0001) gives exactly these (labels, value) samples."""
        self.checks.append((expr, minute, samples))

    def render(self) -> str:
        """The YAML of this test group."""
        lines = ["", "  # " + "-" * 90, f"  # {self.title}"]
        lines += [f"  # {c}" if c else "  #" for c in self.comment.strip().splitlines()]
        lines += ["  # " + "-" * 90, "  - interval: 15s", "    input_series:"]
        for name, values in self.series:
            lines.append(f"      - series: '{name}'")
            lines.append(f"        values: '{values}'")
        lines.append("    promql_expr_test:")
        # every check of the limiter or the utilisations again on the Wall's 20 s copy
        # (alerts/make_wall.py): each phase keeps one pace, so it gives the same values
        twins = [(wall(e), m, s) for e, m, s in self.checks if wall(e) != e]
        for expr, minute, samples in self.checks + twins:
            lines.append(f"      - expr: 'round({expr}, 0.0001)'")
            lines.append(f"        eval_time: {minute}m")
            if not samples:
                lines.append("        exp_samples: []")
                continue
            lines.append("        exp_samples:")
            for labels, value in samples:
                lines.append(f"          - labels: '{{{labels}}}'")
                lines.append(f"            value: {round(value, 4)!r}")
        return "\n".join(lines) + "\n"


LIMITER = "host:wattbit_limiter:ratio1m"
UTIL = "host_resource:wattbit_utilisation:ratio1m"


def wall(expr: str) -> str:
    """The expression on the Wall's 20 s copies of the limiter and the utilisations."""
    for name in (LIMITER, UTIL):
        expr = expr.replace(name, name.removesuffix("1m") + "20s")
    return expr


ANY_DISK = f"max by (host, resource) ({LIMITER})"  # every disk equally busy: which one is a tie


def disk_bound() -> Case:
    """The 42 Gbit/s disk-to-network stream: disks 96 % busy, NIC 70 % of 60 Gbit/s."""
    c = Case(
        "Disk-bound: the 42 Gbit/s stream, disks 96 % busy, the network to spare",
        """
stream01 reads 4 NVMe disks (1.3125e9 B/s each: 42 Gbit/s together) behind a Gen4 x16
controller (usable 31.5e9 B/s per direction) and sends it on bond0, whose speed is 60 Gbit/s
(7.5e9 B/s): NIC tx 5.25e9/7.5e9 = 0.7. nvme0n1 is 96 % busy, the others 95 %. CPU 2 takes
bond0's interrupts and is 41 % busy (20 % softirq); CPU 3 runs an unrelated job at 30 % user.
No disk was ever alone: no yield, the controller is its link only: 5.25e9/31.5e9 = 0.1667. Its
root port 0000:40:01.1 has no other device below it: its link is the controller's, not shared.
Expected: disk nvme0n1 0.96 is the limiter; the NIC 0.7, the CPU 0.41 are the headroom.
""",
        10,
    )
    h, ctl = "stream01", "0000:41:00.0"
    for i in range(4):
        busy = 0.96 if i == 0 else 0.95
        c.disk(h, f"nvme{i}n1", ctl, [(10, busy)], [(10, 1.3125e9)], [(10, 10014.0)])
    c.link(h, ctl, "controller", "0000:40:01.1", "0000:40:01.1", 31.5e9)
    c.link(h, "0000:40:01.1", "root_port", "", "0000:40:01.1", 31.5e9)
    c.nic(h, "bond0", "", 7.5e9, 0, 5.25e9)
    c.agent(
        h, "wattbit_nic_cpu_interrupts_total", 'interface="bond0",cpu="2"', counter([(10, 5000)])
    )
    c.cpus(
        h,
        {
            "0": {"user": 0.05, "system": 0.05},
            "1": {"user": 0.05, "system": 0.05},
            "2": {"system": 0.21, "softirq": 0.2},
            "3": {"user": 0.3},
        },
    )
    c.check(LIMITER, 5, [(f'host="{h}",resource="disk",subject="nvme0n1"', 0.96)])
    c.check(
        f'{UTIL}{{host="{h}",resource!="disk"}}',
        5,
        [
            (f'host="{h}",resource="controller",subject="{ctl}"', 5.25e9 / 31.5e9),
            (f'host="{h}",resource="cpu",subject="2"', 0.41),
            (f'host="{h}",resource="nic",subject="bond0"', 0.7),
        ],
    )
    c.check(
        "host_interface_direction:wattbit_nic_utilisation:ratio1m",
        5,
        [
            (f'direction="rx",host="{h}",interface="bond0"', 0),
            (f'direction="tx",host="{h}",interface="bond0"', 0.7),
        ],
    )
    c.check(
        "host_cpu:wattbit_cpu_softirq:ratio1m",
        5,
        [(f'cpu="2",host="{h}"', 0.2)],  # CPUs without softirq time have no series
    )
    c.check("host_cpu:wattbit_cpu_busiest:ratio1m", 5, [(f'cpu="2",host="{h}"', 0.41)])
    c.check("host_cpu:wattbit_cpu_irq_busiest:ratio1m", 5, [(f'cpu="2",host="{h}"', 0.41)])
    return c


def random_near_miss() -> Case:
    """Disks busy with random I/O: the disks limit, the controller is not held back."""
    c = Case(
        "Near miss: disks busy because the workload is random (busy, but few bytes)",
        """
db01: sda and sdb on one SAS controller (no PCIe figure). Each runs alone first (minutes
0-3 sda, 3-6 sdb): 100 % busy, 60e6 B/s in 120 requests/s of 512 KiB. Then both run a random
workload (minutes 6-16): sda 100 % busy, sdb 90 %, each 250 requests/s of 8 KiB = 2.048e6 B/s.
Bytes: 4.096e6 / 1.2e8 = 0.0341 of what they moved alone, but requests: 500/240 = 2.0833: the
disks are not held back, the controller is not their limit (no controller utilisation at all);
the limiter is disk sda, 100 % busy. The alone values stay latched after the disks ran alone.
""",
        16,
    )
    h, ctl = "db01", "0000:03:00.0"
    c.disk(
        h,
        "sda",
        ctl,
        [(3, 1), (3, 0), (10, 1)],
        [(3, 6e7), (3, 0), (10, 2.048e6)],
        [(3, 120), (3, 0), (10, 250)],
    )
    c.disk(
        h,
        "sdb",
        ctl,
        [(3, 0), (3, 1), (10, 0.9)],
        [(3, 0), (3, 6e7), (10, 2.048e6)],
        [(3, 0), (3, 120), (10, 250)],
    )
    c.check(
        "host_device:wattbit_disk_alone_bytes_per_second:last",
        14,
        [(f'device="sda",host="{h}"', 6e7), (f'device="sdb",host="{h}"', 6e7)],
    )
    c.check(
        "host_controller:wattbit_disk_yield:ratio1m",
        14,
        [(f'controller="{ctl}",host="{h}"', 500 / 240)],
    )
    c.check("host_controller:wattbit_controller_utilisation:ratio1m", 14, [])
    c.check(LIMITER, 14, [(f'host="{h}",resource="disk",subject="sda"', 1)])
    return c


def plateau(
    title: str,
    comment: str,
    host: str,
    controllers: list[str],
    bridge: str,
    per_ctl: list[int],
    alone: float,
    alone_ios: float,
    together: float,
    busy: float,
) -> Case:
    """Disks that each run alone on their controller, then all together at `together` B/s."""
    slots = max(per_ctl)
    minutes = 2 * slots + 8
    c = Case(title, comment, minutes)
    for ci, (ctl, n) in enumerate(zip(controllers, per_ctl, strict=True)):
        c.link(host, ctl, "controller", bridge, "0000:00:02.0", None)
        for k in range(n):
            dev = f"sd{chr(ord('a') + ci)}{chr(ord('a') + k)}"
            before, after = 2 * k, minutes - 2 * slots
            share = together / sum(per_ctl)
            c.disk(
                host,
                dev,
                ctl,
                [(before, 0), (2, 1), (2 * slots - before - 2, 0), (after, busy)][
                    (0 if before else 1) :
                ],
                [(before, 0), (2, alone), (2 * slots - before - 2, 0), (after, share)][
                    (0 if before else 1) :
                ],
                [
                    (before, 0),
                    (2, alone_ios),
                    (2 * slots - before - 2, 0),
                    (after, alone_ios * share / alone),
                ][(0 if before else 1) :],
            )
    c.link(host, bridge, "bridge", "0000:00:02.0", "0000:00:02.0", None)
    c.link(host, "0000:00:02.0", "root_port", "", "0000:00:02.0", None)
    return c


def _drop_empty(c: Case) -> Case:
    """Phases of 0 minutes (a disk of the last slot has no idle time after it) left out."""
    out = []
    for name, values in c.series:
        out.append((name, " ".join(p for p in values.split() if "x-1" not in p)))
    c.series = out
    return c


def brick(disks: int) -> Case:
    """The 48-disk brick's three 8-port controllers behind one PCI-X bridge."""
    per = [disks // 3 + (1 if i < disks % 3 else 0) for i in range(3)]
    total = min(disks * 60e6, 1.05e9)
    y = total / (disks * 60e6)
    verdict = (
        f"bridge-level yield {y:.4f} < 0.85 with all three controllers held back: PCIe/PCI-X "
        f"bridge 0000:00:02.1 is named (the disks' mean busy, 1.0), ahead of the disks"
        if y < 0.85
        else "yield 1.0: the disks deliver what they did alone, they are the limit (98 % busy)"
    )
    c = plateau(
        f"The 48-disk brick with {disks} disks on three 8-port controllers behind one bridge"
        + ("" if y < 0.85 else " (near miss: before the plateau)"),
        f"""
brick01: controllers 0000:02:01.0, 0000:02:02.0, 0000:02:03.0 (PCI-X: no PCIe link figures)
behind bridge 0000:00:02.1, {per} disks. Each disk runs alone first (2 minutes per slot, one
disk per controller at a time): 60e6 B/s, 100 % busy, 120 requests/s. Then all {disks} run:
together {total:.4g} B/s (the brick scaled linearly to 16 disks, then plateaued at ~1.05 GB/s
with 19 or more), {total / disks:.6g} B/s each, {"100" if y < 0.85 else "98"} % busy.
Yield {total:.4g} / {disks * 60e6:.4g} = {y:.4f}: {verdict}.
""",
        "brick01",
        ["0000:02:01.0", "0000:02:02.0", "0000:02:03.0"],
        "0000:00:02.1",
        per,
        60e6,
        120,
        total,
        1.0 if y < 0.85 else 0.98,
    )
    c = _drop_empty(c)
    t = c.minutes - 2
    h = "brick01"
    if y < 0.85:
        c.check(
            "host_controller:wattbit_disk_yield:ratio1m",
            t,
            [
                (f'controller="{ctl}",host="{h}"', y)
                for ctl in ("0000:02:01.0", "0000:02:02.0", "0000:02:03.0")
            ],
        )
        c.check("host_pci:wattbit_disk_yield:ratio1m", t, [(f'host="{h}",pci="0000:00:02.1"', y)])
        c.check(
            "host_controller:wattbit_controller_utilisation:ratio1m",
            t,
            [
                (f'controller="{ctl}",host="{h}"', 1)
                for ctl in ("0000:02:01.0", "0000:02:02.0", "0000:02:03.0")
            ],
        )
        c.check(LIMITER, t, [(f'host="{h}",resource="pcie",subject="0000:00:02.1"', 1)])
    else:
        c.check("host_pci:wattbit_disk_yield:ratio1m", t, [(f'host="{h}",pci="0000:00:02.1"', 1)])
        c.check("host_controller:wattbit_controller_utilisation:ratio1m", t, [])
        c.check(f'{UTIL}{{resource="pcie"}}', t, [])
        c.check(ANY_DISK, t, [(f'host="{h}",resource="disk"', 0.98)])
    return c


def highpoint(pairs: int, drives: int) -> Case:
    """The Highpoint controller saturating at 6 drives (346 MB/s); two gave little more."""
    alone = 346e6 / 6
    # one saturates at 346 MB/s; two gave "little more than one"
    total = min(drives * alone, 346e6) if pairs == 1 else 400e6
    y = total / (pairs * drives * alone)
    ctls = ["0000:05:00.0", "0000:06:00.0"][:pairs]
    c = plateau(
        f"Highpoint: {pairs} controller(s), {drives} drives each"
        + (" (near miss: below saturation)" if y >= 0.85 else ""),
        f"""
hpt01: {pairs} Highpoint controller(s) ({", ".join(ctls)}) behind bridge 0000:00:06.0, {drives}
drives each, no PCIe link figure. Each drive alone: {alone:.6g} B/s (346 MB/s over 6 drives),
120 requests/s, 100 % busy. Together: {total:.4g} B/s ("one Highpoint controller saturated at
6 drives (346 MB/s) and two gave little more than one"). Yield {total:.4g} /
{pairs * drives * alone:.6g} = {y:.4f}.
""",
        "hpt01",
        ctls,
        "0000:00:06.0",
        [drives] * pairs,
        alone,
        120,
        total,
        1.0 if y < 0.85 else 0.97,
    )
    c = _drop_empty(c)
    t, h = c.minutes - 2, "hpt01"
    if y >= 0.85:
        c.check(ANY_DISK, t, [(f'host="{h}",resource="disk"', 0.97)])
        c.check("host_controller:wattbit_controller_utilisation:ratio1m", t, [])
    elif pairs == 1:
        c.check(
            "host_controller:wattbit_disk_yield:ratio1m",
            t,
            [(f'controller="{ctls[0]}",host="{h}"', y)],
        )
        c.check(f'{UTIL}{{resource="pcie"}}', t, [])  # one controller behind the bridge
        c.check(LIMITER, t, [(f'host="{h}",resource="controller",subject="{ctls[0]}"', 1)])
    else:
        c.check("host_pci:wattbit_disk_yield:ratio1m", t, [(f'host="{h}",pci="0000:00:06.0"', y)])
        c.check(LIMITER, t, [(f'host="{h}",resource="pcie",subject="0000:00:06.0"', 1)])
    return c


def cpu_bound() -> Case:
    """The 17.8 Gbit/s copy stopped at 10.3 by CPU 0 taking both NICs' interrupts."""
    c = Case(
        "CPU-bound receiver: 10.3 Gbit/s with both NICs' interrupts on CPU 0 (99 %)",
        """
recv01 receives 10.3 Gbit/s on eth2 and eth3 (10 Gbit/s each, 1.25e9 B/s; 0.64375e9 B/s each:
each NIC 0.515 rx). Both NICs' queue interrupts and the RAID controller's go to CPU 0: 99 %
busy, 60 % softirq, 30 % system, 9 % user. CPUs 1-3 are 20 % busy. Expected: cpu "0" 0.99.
""",
        8,
    )
    h = "recv01"
    c.nic(h, "eth2", "0000:3b:00.0", 1.25e9, 0.64375e9, 1e6)
    c.nic(h, "eth3", "0000:3b:00.1", 1.25e9, 0.64375e9, 1e6)
    for i in ("eth2", "eth3"):
        c.agent(
            h, "wattbit_nic_cpu_interrupts_total", f'interface="{i}",cpu="0"', counter([(8, 20000)])
        )
    c.agent(
        h,
        "wattbit_controller_cpu_interrupts_total",
        'controller="0000:5e:00.0",cpu="0"',
        counter([(8, 3000)]),
    )
    c.cpus(
        h,
        {
            "0": {"user": 0.09, "system": 0.3, "softirq": 0.6},
            "1": {"user": 0.1, "system": 0.1},
            "2": {"user": 0.1, "system": 0.1},
            "3": {"user": 0.1, "system": 0.1},
        },
    )
    c.check(LIMITER, 5, [(f'host="{h}",resource="cpu",subject="0"', 0.99)])
    c.check("host_cpu:wattbit_cpu_irq_busiest:ratio1m", 5, [(f'cpu="0",host="{h}"', 0.99)])
    c.check('host_cpu:wattbit_cpu_softirq:ratio1m{cpu="0"}', 5, [(f'cpu="0",host="{h}"', 0.6)])
    c.check(
        f'{UTIL}{{resource="nic"}}',
        5,
        [(f'host="{h}",resource="nic",subject="{i}"', 0.515) for i in ("eth2", "eth3")],
    )
    return c


def unrelated_cpu() -> Case:
    """A CPU busy with an unrelated job: idle network, then 1 Gbit/s of 10."""
    c = Case(
        "Near miss: a CPU busy with an unrelated job (the network idle, then lightly used)",
        """
build01: CPU 1 runs a compile, 100 % busy (95 % user, 5 % system). CPU 0 takes eth0's
interrupts and is 5 % busy. Minutes 0-5 eth0 is idle: no data moves, no limiter. Minutes 5-12
eth0 sends 1 Gbit/s of its 10 (0.1): data moves, but CPU 1 is not moving it (no interrupts,
no interrupt work): the CPU resource is CPU 0 at 5 %, the limiter "none" at the NIC's 0.1.
""",
        12,
    )
    h = "build01"
    c.agent(
        h,
        "wattbit_nic_info",
        'interface="eth0",driver="ixgbe",pci="0000:01:00.0",numa_node="0",mtu="1500",operstate="up"',
        gauge(1, 12),
    )
    c.agent(
        h,
        "wattbit_nic_link_speed_bytes_per_second",
        'interface="eth0",source="kernel"',
        gauge(1.25e9, 12),
    )
    c.agent(
        h,
        "wattbit_nic_bytes_total",
        'interface="eth0",direction="tx"',
        counter([(5, 0), (7, 1.25e8)]),
    )
    c.agent(h, "wattbit_nic_bytes_total", 'interface="eth0",direction="rx"', counter([(12, 0)]))
    c.agent(h, "wattbit_nic_cpu_interrupts_total", 'interface="eth0",cpu="0"', counter([(12, 10)]))
    c.cpus(
        h,
        {"0": {"user": 0.01, "system": 0.02, "softirq": 0.02}, "1": {"user": 0.95, "system": 0.05}},
    )
    c.check("host_cpu:wattbit_cpu_busiest:ratio1m", 4, [(f'cpu="1",host="{h}"', 1)])
    c.check(LIMITER, 4, [])  # idle: nothing to limit
    c.check(f'{UTIL}{{resource="cpu"}}', 10, [(f'host="{h}",resource="cpu",subject="0"', 0.05)])
    c.check(LIMITER, 10, [(f'host="{h}",resource="none"', 0.1)])
    return c


def nic_and_tcp() -> Case:
    """A NIC at its speed; retransmits; two NICs sharing a switch's upstream link."""
    c = Case(
        "NIC-bound, TCP loss, and two NICs sharing one PCIe switch uplink",
        """
Three hosts. nic01 sends 9.6 Gbit/s on eth0 (10 Gbit/s): nic 0.96 is the limiter. lossy01
sends 1 Gbit/s of 10 with 1.5 % of its segments retransmitted: tcp utilisation 1.5/1 capped
at 1, the limiter. sw01 has two 25 Gbit/s NICs (3.125e9 B/s) at 2.5e9 B/s tx each behind a
PCIe switch: each NIC's Gen3 x8 link (7.88e9 B/s usable) is 0.3173 used, the switch's uplink
0000:10:00.0 (Gen3 x4, 3.94e9 B/s) carries 5e9 B/s "down": capped at 1, named pcie ahead of
the NICs at 0.8; the root port above it (Gen3 x16, 15.75e9 B/s) 0.3175.
""",
        8,
    )
    c.nic("nic01", "eth0", "0000:01:00.0", 1.25e9, 1e6, 1.2e9)
    c.nic("lossy01", "eth0", "0000:01:00.0", 1.25e9, 1e6, 1.25e8)
    c.agent("lossy01", "wattbit_tcp_segments_total", 'direction="out"', counter([(8, 10000)]))
    c.agent("lossy01", "wattbit_tcp_retransmitted_segments_total", "", counter([(8, 150)]))
    c.agent("nic01", "wattbit_tcp_segments_total", 'direction="out"', counter([(8, 10000)]))
    c.agent("nic01", "wattbit_tcp_retransmitted_segments_total", "", counter([(8, 1)]))
    for i, pci in (("eth0", "0000:11:00.0"), ("eth1", "0000:12:00.0")):
        c.nic("sw01", i, pci, 3.125e9, 1e6, 2.5e9)
        c.link("sw01", pci, "nic", "0000:10:00.0", "0000:00:03.0", 7.88e9)
    c.link("sw01", "0000:10:00.0", "bridge", "0000:00:03.0", "0000:00:03.0", 3.94e9)
    c.link("sw01", "0000:00:03.0", "root_port", "", "0000:00:03.0", 15.75e9)
    c.check(
        LIMITER,
        5,
        [
            ('host="lossy01",resource="tcp"', 1),
            ('host="nic01",resource="nic",subject="eth0"', 0.96),
            ('host="sw01",resource="pcie",subject="0000:10:00.0"', 1),
        ],
    )
    c.check(
        "host:wattbit_tcp_retransmitted:ratio1m",
        5,
        [('host="lossy01"', 0.015), ('host="nic01"', 0.0001)],
    )
    c.check(
        'host_pci:wattbit_pcie_link_utilisation:ratio1m{host="sw01"}',
        5,
        [
            ('host="sw01",pci="0000:11:00.0"', 2.5e9 / 7.88e9),
            ('host="sw01",pci="0000:12:00.0"', 2.5e9 / 7.88e9),
        ],
    )
    c.check(
        "host_pci:wattbit_pcie_shared_link_utilisation:ratio1m",
        5,
        [
            ('host="sw01",pci="0000:00:03.0"', 5e9 / 15.75e9),
            ('host="sw01",pci="0000:10:00.0"', 1),
        ],
    )
    return c


CASES = [
    disk_bound,
    random_near_miss,
    lambda: brick(24),
    lambda: brick(16),
    lambda: highpoint(1, 8),
    lambda: highpoint(1, 5),
    lambda: highpoint(2, 8),
    cpu_bound,
    unrelated_cpu,
    nic_and_tcp,
]

HEADER = """\
# GENERATED by alerts/tests/gen_limits.py -- do not edit; change the script and rerun it.
# `promtool test rules`: the "what limits it" rules of alerts/wattbit-recording.yml
# (docs/rules.md, "What limits it") on runs built from issue 23's figures.
rule_files:
  - ../wattbit-recording.yml

evaluation_interval: 15s

tests:"""


def render() -> str:
    """The whole file."""
    return HEADER + "".join(case().render() for case in CASES)


def main(argv: list[str]) -> int:
    """Write the file, or with --check say whether it is current."""
    text = render()
    if "--check" in argv:
        if TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
