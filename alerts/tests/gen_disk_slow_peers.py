"""Generate alerts/tests/disk_slow_peers_test.yml: WattbitDiskSlow on a host with 48 disks.

    python alerts/tests/gen_disk_slow_peers.py            # rewrite disk_slow_peers_test.yml
    python alerts/tests/gen_disk_slow_peers.py --check    # exit 1 if it is out of date

Each case is one `promtool test rules` test group: 48 NVMe disks of one host (nvme0n1 ...
nvme47n1), each with its wattbit_disk_info series, its wattbit_disk_io_latency_clock_info series
(clock="device", every disk's latency histogram on the same clock) and, per op, the latency
histogram's _sum and _count and the bytes counter wattbit_disk_io_bytes_total, as Prometheus
stores them after scraping (job, instance, host). Every completion is timed here, so the bytes
counter counts the same requests as the histogram. Counters grow by the same amount every
minute (or change their pace once, at DRIFT_AT), so every 5m window holds whole minutes and the
expected values are exact: they are written below from the scenario's figures, not copied from
a run.

The peers of every case: writes 6000/min (100/s) of 128 KiB at 0.5 ms; where a case has reads
too, reads 3000/min (50/s) of 16 KiB at 0.5 ms. By Little's law a disk's mean queue of an op is
requests/s x mean latency: 100/s x 0.5 ms = 0.05 writes in flight for a peer.

Next to WattbitDiskSlow the tests run WattbitDiskSlowLatencyOnly (disk-slow-latency-only.yaml),
the rule as it was before it took load into account, to show where the two differ.
tests/integration/test_alerts_promtool.py fails when the committed YAML is not what this script
makes, and runs it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "disk_slow_peers_test.yml"
DISKS = [f"nvme{i}n1" for i in range(48)]
MINUTES = 60  # samples at 0m ... 60m
DRIFT_AT = 20  # a drifting disk takes its new pace from the sample after this minute
LABELS = 'job="wattbit-agent",instance="mover01:9731",host="mover01"'
CLOCK = "device"  # the clock of every disk's latency histogram (peers never mix clocks)
KIB = 1024


@dataclass(frozen=True)
class Load:
    """One op of one disk: requests per minute, mean latency (s, as a decimal string), bytes
    per request."""

    per_min: int
    latency: str
    size: int


WRITE = Load(6000, "0.0005", 128 * KIB)
READ = Load(3000, "0.0005", 16 * KIB)


@dataclass
class Case:
    title: str  # the first comment line; test_alerts_promtool looks for some of them
    comment: str
    ops: tuple[str, ...] = ("write",)
    # {(device, op): Load}: disks that differ from the peers from the start
    special: dict[tuple[str, str], Load] = field(default_factory=dict)
    # {(device, op): Load}: disks that take this pace after DRIFT_AT ("*": every disk)
    drift: dict[tuple[str, str], Load] = field(default_factory=dict)
    # [(eval minute, alertname, [expected alert dicts])]
    checks: list[tuple[int, str, list[dict[str, object]]]] = field(default_factory=list)


def num(x: Decimal) -> str:
    """A decimal as promtool reads it, without exponent or trailing zeros."""
    return format(x.normalize(), "f")


def counter(start_per_min: Decimal, after_per_min: Decimal | None) -> str:
    """promtool's expanding notation for a counter from 0 growing by start_per_min each minute,
    and by after_per_min from DRIFT_AT + 1 on (if given)."""
    if after_per_min is None:
        return f"0+{num(start_per_min)}x{MINUTES}"
    at_drift = start_per_min * DRIFT_AT
    return (
        f"0+{num(start_per_min)}x{DRIFT_AT} "
        f"{num(at_drift + after_per_min)}+{num(after_per_min)}x{MINUTES - DRIFT_AT - 1}"
    )


def series_for(case: Case) -> list[tuple[str, str]]:
    out = []
    for dev in DISKS:
        out.append(
            (
                f'wattbit_disk_info{{{LABELS},device="{dev}",model="MZQL23T8HCLS",'
                f'serial="S-{dev}",controller="0000:3b:00.0",numa_node="0",rotational="0",parent=""}}',
                f"1x{MINUTES}",
            )
        )
        out.append(
            (
                f'wattbit_disk_io_latency_clock_info{{{LABELS},device="{dev}",clock="{CLOCK}"}}',
                f"1x{MINUTES}",
            )
        )
        for op in case.ops:
            base = WRITE if op == "write" else READ
            load = case.special.get((dev, op), base)
            later = case.drift.get((dev, op)) or case.drift.get(("*", op))
            lat = Decimal(load.latency) * load.per_min
            lat2 = Decimal(later.latency) * later.per_min if later else None
            cnt = Decimal(load.per_min)
            cnt2 = Decimal(later.per_min) if later else None
            nbytes = Decimal(load.size * load.per_min)
            nbytes2 = Decimal(later.size * later.per_min) if later else None
            sel = f'{{{LABELS},device="{dev}",op="{op}"}}'
            out.append((f"wattbit_disk_io_latency_seconds_sum{sel}", counter(lat, lat2)))
            out.append((f"wattbit_disk_io_latency_seconds_count{sel}", counter(cnt, cnt2)))
            out.append((f"wattbit_disk_io_bytes_total{sel}", counter(nbytes, nbytes2)))
    return out


def slow(
    dev: str, op: str, latency: str, lat_ratio: str, load: str, value: str
) -> dict[str, object]:
    """An expected WattbitDiskSlow alert, its annotations filled in with the given figures:
    the mean latency, its ratio to the peers' median, the load ratio and the alert's value."""
    return {
        "labels": {"host": "mover01", "device": dev, "op": op, "severity": "warning"},
        "annotations": {
            "summary": (
                f"Disk {dev} on mover01 is slow on {op}s compared with its peers at its load"
            ),
            "description": (
                f"Mean {op} latency of {dev} on mover01 over 5m is {latency}, {lat_ratio} times "
                "the median of the host's disks of the same kind and latency clock, at "
                f"{load} times their median load (requests/s or bytes/s; less counts as the "
                f"same): {value} times their latency per unit of load (threshold 4 times, and "
                "above 1ms), for 10m."
            ),
            "runbook": "docs/alerts.md#wattbitdiskslow",
        },
    }


def latency_only(dev: str, op: str) -> dict[str, object]:
    """An expected WattbitDiskSlowLatencyOnly alert (the old rule: no labels or annotations of
    its own)."""
    return {"labels": {"host": "mover01", "device": dev, "op": op}}


SLOW = "WattbitDiskSlow"
OLD = "WattbitDiskSlowLatencyOnly"
HIGH = "WattbitDiskLatencyHigh"

CASES = [
    Case(
        "WattbitDiskSlow near miss: busy, not slow -- one of 48 disks takes five times its "
        "peers' writes and queues them.",
        """nvme7n1 writes 30000/min (500/s, 5x its peers) at 3 ms (6x): 500/s x 3 ms = 1.5 writes
in flight against the peers' 0.05 -- a queue, not a failing drive; it completes every write
it is given. Latency alone (the old rule) fires at 11m, 6x the median; per unit of load it is
6 / 5 = 1.2: WattbitDiskSlow never fires.""",
        special={("nvme7n1", "write"): Load(30000, "0.003", 128 * KIB)},
        checks=[
            (11, OLD, [latency_only("nvme7n1", "write")]),
            (11, SLOW, []),
            (30, SLOW, []),
            (60, SLOW, []),
            (60, HIGH, []),
        ],
    ),
    Case(
        "WattbitDiskSlow: one of 48 disks drifting slow while doing no more work.",
        """nvme12n1 reads and writes as much as its peers; after 20m each request takes 3.5 ms
instead of 0.5 ms. 5m windows: at 22m two slow minutes of five, (2 x 3.5 + 3 x 0.5) / 5 =
1.7 ms, 3.4x; at 23m 2.3 ms, 4.6x: pending from 23m, firing at 33m with 7x (3.5 ms), for
reads and for writes. Its load is its peers' (1.0).""",
        ops=("read", "write"),
        drift={
            ("nvme12n1", "read"): Load(3000, "0.0035", 16 * KIB),
            ("nvme12n1", "write"): Load(6000, "0.0035", 128 * KIB),
        },
        checks=[
            (22, SLOW, []),
            (32, SLOW, []),
            (
                33,
                SLOW,
                [
                    slow("nvme12n1", "read", "3.5ms", "7.0", "1.0", "7.0"),
                    slow("nvme12n1", "write", "3.5ms", "7.0", "1.0", "7.0"),
                ],
            ),
        ],
    ),
    Case(
        "WattbitDiskSlow: one of 48 disks slow only on writes.",
        """nvme5n1 reads like its peers (0.5 ms) and writes as much as they do, at 5 ms (10x):
pending from the first evaluation with a rate (1m), firing at 11m, for op=write only.""",
        ops=("read", "write"),
        special={("nvme5n1", "write"): Load(6000, "0.005", 128 * KIB)},
        checks=[
            (10, SLOW, []),
            (11, SLOW, [slow("nvme5n1", "write", "5ms", "10.0", "1.0", "10.0")]),
            (40, SLOW, [slow("nvme5n1", "write", "5ms", "10.0", "1.0", "10.0")]),
        ],
    ),
    Case(
        "WattbitDiskSlow: busier and slow -- more work excuses proportionally more latency, "
        "not any latency.",
        """Three of 48 disks write twice as much as their peers (2.0). nvme20n1 at 10 ms: 20x the
median latency, 10x per unit of load: fires at 11m. nvme21n1 at 4.2 ms: 8.4x, 4.2x per unit
of load: fires. Near miss: nvme30n1 at 3.8 ms: 7.6x, 3.8x per unit of load: silent (latency
alone fires on all three).""",
        special={
            ("nvme20n1", "write"): Load(12000, "0.01", 128 * KIB),
            ("nvme21n1", "write"): Load(12000, "0.0042", 128 * KIB),
            ("nvme30n1", "write"): Load(12000, "0.0038", 128 * KIB),
        },
        checks=[
            (10, SLOW, []),
            (
                11,
                OLD,
                [
                    latency_only("nvme20n1", "write"),
                    latency_only("nvme21n1", "write"),
                    latency_only("nvme30n1", "write"),
                ],
            ),
            (
                11,
                SLOW,
                [
                    slow("nvme20n1", "write", "10ms", "20.0", "2.0", "10.0"),
                    slow("nvme21n1", "write", "4.2ms", "8.4", "2.0", "4.2"),
                ],
            ),
        ],
    ),
    Case(
        "WattbitDiskSlow near miss: busy with larger requests, not slow.",
        """nvme3n1 writes as many requests as its peers, 1 MiB each instead of 128 KiB (8x the
bytes/s), at 2.5 ms (5x). Per unit of load (the larger of the requests and the bytes ratio,
8.0) it is 0.6x: silent. Latency alone fires at 11m.""",
        special={("nvme3n1", "write"): Load(6000, "0.0025", 1024 * KIB)},
        checks=[
            (11, OLD, [latency_only("nvme3n1", "write")]),
            (11, SLOW, []),
            (60, SLOW, []),
        ],
    ),
    Case(
        "WattbitDiskSlow near miss: all 48 disks slow together.",
        """Every disk's writes go from 0.5 ms to 5 ms after 20m: the median moves with them, every
ratio stays 1. Nothing fires (5 ms is far below WattbitDiskLatencyHigh's 100 ms, which does not
judge hosts with 3 or more peers anyway).""",
        drift={("*", "write"): Load(6000, "0.005", 128 * KIB)},
        checks=[
            (40, SLOW, []),
            (60, SLOW, []),
            (60, OLD, []),
            (60, HIGH, []),
        ],
    ),
    Case(
        "WattbitDiskSlow near miss: a near-idle disk among 48.",
        """nvme40n1 writes 30/min (0.5/s, below the 1/s floor) at 25 ms, 50x its peers: a
handful of slow requests is no mean. It has no latency of record and is nobody's peer.""",
        special={("nvme40n1", "write"): Load(30, "0.025", 128 * KIB)},
        checks=[
            (11, SLOW, []),
            (60, SLOW, []),
            (60, HIGH, []),
        ],
    ),
]


def q(s: str) -> str:
    """A YAML double-quoted scalar."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render() -> str:
    lines = [
        "# GENERATED by alerts/tests/gen_disk_slow_peers.py -- do not edit; run the script.",
        "# `promtool test rules alerts/tests/disk_slow_peers_test.yml`: WattbitDiskSlow judged",
        "# against its peers at their load, on a host with 48 disks (the script's docstring says",
        "# how the series are made). Samples every minute; a [5m] window holds 6 samples.",
        "rule_files:",
        "  - ../wattbit-recording.yml",
        "  - ../wattbit-alerts.yml",
        "  # the rule before it took load into account, for comparison (not a production rule)",
        "  - disk-slow-latency-only.yaml",
        "",
        "evaluation_interval: 1m",
        "group_eval_order: [wattbit-recording, wattbit-alerts, test-disk-slow-latency-only]",
        "",
        "tests:",
    ]
    for case in CASES:
        lines.append("  # " + "-" * 90)
        lines.append(f"  # {case.title}")
        lines.extend(f"  # {line}" for line in case.comment.splitlines())
        lines.append("  # " + "-" * 90)
        lines.append("  - interval: 1m")
        lines.append("    input_series:")
        for name, values in series_for(case):
            lines.append(f"      - series: '{name}'")
            lines.append(f"        values: '{values}'")
        lines.append("    alert_rule_test:")
        for minute, alertname, alerts in case.checks:
            lines.append(f"      - eval_time: {minute}m")
            lines.append(f"        alertname: {alertname}")
            if not alerts:
                lines.append("        exp_alerts: []")
                continue
            lines.append("        exp_alerts:")
            for alert in alerts:
                labels = alert["labels"]
                assert isinstance(labels, dict)
                flow = ", ".join(f"{k}: {v}" for k, v in labels.items())
                lines.append(f"          - exp_labels: {{{flow}}}")
                annotations = alert.get("annotations")
                if annotations:
                    assert isinstance(annotations, dict)
                    lines.append("            exp_annotations:")
                    for k, v in annotations.items():
                        lines.append(f"              {k}: {q(v)}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    want = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != want:
            print(f"{TARGET} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
