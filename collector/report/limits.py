"""What limited a run: every resource's utilisation per analysis step, and the verdict.

The same figures as the "what limits it" recording rules (alerts/wattbit-recording.yml,
docs/rules.md), computed from the raw series so that a report works on data backfilled into
a Prometheus without the rules: each disk (busy), each storage controller (its PCIe link; its
busy disks against what each moved when last seen alone), each PCIe link and shared bridge or
root-port link, each NIC each way (against its link speed), the busiest CPU moving data, TCP
retransmits. :func:`fetch` asks Prometheus for what the report's other series do not hold
(topology, link speeds, requests/s, CPU time, TCP), its counters read as the report's own are
(:mod:`.binned`: the last sample per step, rates computed here, never a store's ``rate()``, so
that Prometheus and VictoriaMetrics give the same verdict); :func:`counters`, :func:`usage` and
:func:`verdict` are pure.

The verdict over a set of steps (the whole run, a phase): of the steps in which the host moved
data (NICs at least 10 Mbit/s or disks at least 1 MB/s), each subject's mean utilisation; each
resource's the largest of its subjects'; the limiter the largest resource, at least 0.7 (a
controller or link at 0.9 or more ahead of the disks it feeds, as the rule ranks them), else
``none``: the workload paced itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import binned as B
from .prom import Prometheus, Series, selector
from .series import BUSY, DISK_IO, NIC, Grid, Track

RESOURCES = ("disk", "controller", "pcie", "nic", "cpu", "tcp")
LIMIT = 0.7  # a resource at least this busy limits; below it the workload paced itself
SATURATED = 0.9  # a controller or link this busy is named ahead of the disks it feeds
HELD_BACK = 0.85  # busy disks moving less than this share of what they did alone wait
ALONE_BUSY, OTHERS_IDLE, BUSY_DISK = 0.9, 0.05, 0.5
INTERRUPT_SHARE = 0.1  # a CPU this much in irq + softirq moves data (a virtual NIC's softirq)
TCP_SATURATED = 0.01  # a 1 % retransmitted share is a TCP utilisation of 1
MOVING_NIC, MOVING_DISK = 10e6 / 8, 1e6  # bytes/s: a host below both moved no data
_NOUN = {
    "disk": "disk-bound",
    "controller": "controller-bound",
    "pcie": "PCIe-bound",
    "nic": "network-bound",
    "cpu": "CPU-bound",
    "tcp": "loss-bound (TCP retransmits)",
}

Bins = list[float | None]


@dataclass(frozen=True)
class LimitedBy:
    """What limited a host over some steps (the report's ``limited_by`` object)."""

    resource: str  # one of RESOURCES, or "none"
    subject: str | None  # device, PCI address, interface or CPU; None for tcp and none
    utilisation: float | None  # 0-1 over the steps that moved data; None: nothing measured
    evidence: str
    others: dict[str, float]  # every other resource's utilisation

    def to_json(self) -> dict[str, Any]:
        """``{"resource", "subject", "utilisation", "evidence", "others"}``."""
        return {
            "resource": self.resource,
            "subject": self.subject,
            "utilisation": self.utilisation,
            "evidence": self.evidence,
            "others": dict(self.others),
        }


@dataclass
class Raw:
    """What :func:`fetch` read: topology and link figures, and per-step series."""

    disk_controller: dict[tuple[str, str], str] = field(default_factory=dict)  # (h, dev) -> pci
    whole_disks: set[tuple[str, str]] = field(default_factory=set)  # (host, device)
    nic_pci: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, iface) -> pci
    nic_speed: dict[tuple[str, str], float] = field(default_factory=dict)  # bytes/s
    links: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # role, up, root
    usable: dict[tuple[str, str], float] = field(default_factory=dict)  # bytes/s per direction
    disk_ios: dict[tuple[str, str], Bins] = field(default_factory=dict)
    cpu_busy: dict[tuple[str, str], Bins] = field(default_factory=dict)  # (host, cpu)
    cpu_softirq: dict[tuple[str, str], Bins] = field(default_factory=dict)
    tcp_ratio: dict[str, Bins] = field(default_factory=dict)  # retransmitted share per host
    alone: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # seeds


@dataclass
class Usage:
    """Per host: each (resource, subject)'s utilisation per step, and what the evidence cites."""

    util: dict[str, dict[tuple[str, str], Bins]]
    moving: dict[str, list[bool]]  # per host and step: moved data
    speed: dict[tuple[str, str], float]  # (host, interface) -> bytes/s
    softirq: dict[tuple[str, str], Bins]  # (host, cpu)
    disk_bytes: dict[tuple[str, str], Bins]  # (host, device)
    disk_ios: dict[tuple[str, str], Bins]  # (host, device): requests/s
    yields: dict[tuple[str, str], Bins]  # (host, controller or bridge) -> share


# --- fetching -----------------------------------------------------------------------------


# The verdict's counters: {what: (metric, exact labels, regex labels)}. Each is read as the
# report's own counters are (binned.counter_rates: last sample per bin, Python's arithmetic),
# never as a store's rate(), whose figures differ between Prometheus and VictoriaMetrics.
CPU_MODES = "idle|iowait|irq|softirq"
COUNTERS: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {
    "ios": ("wattbit_disk_ios_total", {}, {"op": "read|write"}),
    # seconds per second of each mode: a CPU's modes add up to 1 (the counters count its time),
    # so the shares need no second query for the total
    "node_cpu": ("node_cpu_seconds_total", {}, {"mode": CPU_MODES}),
    "agent_cpu": ("wattbit_cpu_seconds_total", {}, {"mode": CPU_MODES}),
    "nic_irqs": ("wattbit_nic_cpu_interrupts_total", {}, {}),
    "controller_irqs": ("wattbit_controller_cpu_interrupts_total", {}, {}),
    "retransmitted": ("wattbit_tcp_retransmitted_segments_total", {}, {}),
    "segments_out": ("wattbit_tcp_segments_total", {"direction": "out"}, {}),
}
PerSeries = list[tuple[dict[str, str], Bins]]  # (labels, per-second rate per step)


def fetch(
    prom: Prometheus, grid: Grid, interval: float, match: dict[str, str], workers: int = 4
) -> Raw:
    """Read what the verdict needs beyond the report's own series (a few queries at once)."""
    raw = Raw()
    m = dict(match)
    whole = prom.range_for(grid.end - grid.start)

    def sel(metric: str, labels: dict[str, str] | None = None, **regex: str) -> str:
        return selector(metric, {**m, **(labels or {})}, **regex)

    at = grid.end
    instant: dict[str, str] = {
        "disk_info": f"max by (host, device, controller) "
        f"(max_over_time({sel('wattbit_disk_info', {'parent': ''})}[{whole}]))",
        "nic_info": f"max by (host, interface, pci) "
        f"(max_over_time({sel('wattbit_nic_info')}[{whole}]))",
        "speed": f"max by (host, interface) "
        f"(max_over_time({sel('wattbit_nic_link_speed_bytes_per_second')}[{whole}]))",
        "links": f"max by (host, pci, role, upstream, root) "
        f"(max_over_time({sel('wattbit_pcie_link_info')}[{whole}]))",
        "usable": f"min by (host, pci) "
        f"(min_over_time({sel('wattbit_pcie_link_usable_bytes_per_second')}[{whole}]))",
    }
    seeds = {
        "alone_bytes": "host_device:wattbit_disk_alone_bytes_per_second:last",
        "alone_ios": "host_device:wattbit_disk_alone_ios_per_second:last",
    }
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        fi = {k: pool.submit(prom.query, q, at) for k, q in instant.items()}
        # the recording rules' alone values just before the window, where there are rules
        fs = {
            k: pool.submit(prom.query, f"last_over_time({sel(r)}[1h])", grid.start)
            for k, r in seeds.items()
        }
        fc = {
            k: pool.submit(B.counter_rates, prom, grid, metric, sel(metric, exact, **regex),
                           interval)
            for k, (metric, exact, regex) in COUNTERS.items()
        }  # fmt: skip
        got = {k: f.result() for k, f in fi.items()}
        seeded = {k: f.result() for k, f in fs.items()}
        per = {k: f.result() for k, f in fc.items()}
    for s in got["disk_info"]:
        h, d = s.labels.get("host", ""), s.labels.get("device", "")
        raw.whole_disks.add((h, d))
        if s.labels.get("controller"):
            raw.disk_controller[(h, d)] = s.labels["controller"]
    for s in got["nic_info"]:
        if s.labels.get("pci"):
            raw.nic_pci[(s.labels.get("host", ""), s.labels.get("interface", ""))] = s.labels["pci"]
    for s in got["speed"]:
        if (v := _last(s)) is not None and v > 0:
            raw.nic_speed[(s.labels.get("host", ""), s.labels.get("interface", ""))] = v
    for s in got["links"]:
        key = (s.labels.get("host", ""), s.labels.get("pci", ""))
        raw.links[key] = {k: s.labels.get(k, "") for k in ("role", "upstream", "root")}
    for s in got["usable"]:
        if (v := _last(s)) is not None and v > 0:
            raw.usable[(s.labels.get("host", ""), s.labels.get("pci", ""))] = v
    b = {_hd(s): v for s in seeded["alone_bytes"] if (v := _last(s)) is not None}
    i = {_hd(s): v for s in seeded["alone_ios"] if (v := _last(s)) is not None}
    raw.alone = {k: (b[k], i.get(k, 0.0)) for k in b}
    raw.disk_ios, raw.cpu_busy, raw.cpu_softirq, raw.tcp_ratio = counters(per, grid.n)
    return raw


def counters(
    per: dict[str, PerSeries], n: int
) -> tuple[
    dict[tuple[str, str], Bins],
    dict[tuple[str, str], Bins],
    dict[tuple[str, str], Bins],
    dict[str, Bins],
]:
    """The verdict's per-step figures from its counters' per-series rates (keys of COUNTERS;
    a missing key has no series): requests/s per disk, busy and softirq shares per CPU moving
    data, retransmitted share of segments sent per host."""

    def by(what: str, *labels: str) -> dict[tuple[str, ...], Bins]:
        # `sum by (labels)`: a step's sum over the series with a value in it
        groups: dict[tuple[str, ...], list[Bins]] = defaultdict(list)
        for lab, b in per.get(what, []):
            groups[tuple(lab.get(k, "") for k in labels)].append(b)
        return {k: _sum(bs, n) for k, bs in groups.items()}

    ios = {(k[0], k[1]): b for k, b in by("ios", "host", "device").items()}
    # node_exporter's CPU time where the host has it, else the agent's own (cpu.enabled)
    modes = by("node_cpu", "host", "cpu", "mode")
    with_node = {k[0] for k in modes}
    modes |= {k: b for k, b in by("agent_cpu", "host", "cpu", "mode").items()
              if k[0] not in with_node}  # fmt: skip
    # CPUs taking NIC or storage interrupts in a step
    nic_irq, ctl_irq = by("nic_irqs", "host", "cpu"), by("controller_irqs", "host", "cpu")
    irqs: dict[tuple[str, str], Bins] = {}
    for k in nic_irq.keys() | ctl_irq.keys():
        none: Bins = [None] * n
        a, c = nic_irq.get(k, none), ctl_irq.get(k, none)
        irqs[(k[0], k[1])] = [
            x if x is not None and x > 0 else y if y is not None and y > 0 else None
            for x, y in zip(a, c, strict=True)
        ]
    busy, soft = _cpus({(k[0], k[1], k[2]): b for k, b in modes.items()}, irqs)
    retrans, sent = by("retransmitted", "host"), by("segments_out", "host")
    tcp = {
        h[0]: [None if r is None or s is None or s <= 0 else r / s
               for r, s in zip(retrans[h], sent[h], strict=True)]
        for h in retrans.keys() & sent.keys()
    }  # fmt: skip
    return ios, busy, soft, tcp


def _cpus(
    modes: dict[tuple[str, str, str], Bins], irqs: dict[tuple[str, str], Bins]
) -> tuple[dict[tuple[str, str], Bins], dict[tuple[str, str], Bins]]:
    """Per CPU moving data and step, its busy share and its softirq share (None: not moving
    data, or no figure): CPUs taking NIC or storage interrupts, or INTERRUPT_SHARE of their
    time in irq + softirq. Busy is everything but idle and iowait: 1 - their seconds per
    second (a CPU's modes add up to one second per second). ``modes``: seconds per second by
    (host, cpu, mode); ``irqs``: interrupts per second by (host, cpu), None where none."""
    by_mode: dict[tuple[str, str], dict[str, Bins]] = defaultdict(dict)
    for (h, c, mode), b in modes.items():
        by_mode[(h, c)][mode] = b
    busy: dict[tuple[str, str], Bins] = {}
    soft: dict[tuple[str, str], Bins] = {}
    for key, mb in by_mode.items():
        idle = mb.get("idle")
        if idle is None:
            continue  # without idle time there is no busy share
        n = len(idle)
        zero: Bins = [None] * n
        iowait, hard, softirq = (mb.get(m, zero) for m in ("iowait", "irq", "softirq"))
        taking = irqs.get(key, zero)
        b_out: Bins = [None] * n
        s_out: Bins = [None] * n
        for k in range(n):
            i = idle[k]
            if i is None:
                continue
            si = softirq[k] or 0.0
            if taking[k] is None and (hard[k] or 0.0) + si < INTERRUPT_SHARE:
                continue  # not moving data in this step
            b_out[k] = min(1.0, max(0.0, 1.0 - i - (iowait[k] or 0.0)))
            s_out[k] = min(1.0, si)
        if any(v is not None for v in b_out):
            busy[key], soft[key] = b_out, s_out
    return busy, soft


def _hd(s: Series) -> tuple[str, str]:
    return (s.labels.get("host", ""), s.labels.get("device", ""))


def _last(s: Series) -> float | None:
    v = s.samples[-1][1] if s.samples else None
    return v if v is not None and math.isfinite(v) else None


# --- utilisation per step (pure) -----------------------------------------------------------


def usage(grid: Grid, tracks: Iterable[Track], raw: Raw) -> Usage:
    """Every resource's utilisation per step, per host, from the tracks and what fetch read."""
    n = grid.n
    busy: dict[tuple[str, str], Bins] = {}
    dbytes: dict[tuple[str, str], Bins] = defaultdict(lambda: [None] * n)
    dread: dict[tuple[str, str], Bins] = defaultdict(lambda: [None] * n)
    dwrite: dict[tuple[str, str], Bins] = defaultdict(lambda: [None] * n)
    nic: dict[tuple[str, str, str], Bins] = {}
    hosts: set[str] = set()
    for tr in tracks:
        h = tr.host
        if tr.metric == BUSY:
            busy[(h, tr.labels.get("device", ""))] = _clamp(tr.rates)
            hosts.add(h)
        elif tr.metric == DISK_IO and tr.labels.get("op") in ("read", "write"):
            key = (h, tr.labels.get("device", ""))
            _add(dbytes[key], tr.rates)
            _add((dread if tr.labels["op"] == "read" else dwrite)[key], tr.rates)
            hosts.add(h)
        elif tr.metric == NIC:
            nic[(h, tr.labels.get("interface", ""), tr.labels.get("direction", ""))] = tr.rates
            hosts.add(h)
    util: dict[str, dict[tuple[str, str], Bins]] = defaultdict(dict)
    # disks: whole disks (where the agent says which are whole)
    has_info = {h for h, _d in raw.whole_disks}
    for (h, d), b in busy.items():
        if h not in has_info or (h, d) in raw.whole_disks:
            util[h][("disk", d)] = b
    # NICs: the busier direction against the link speed
    for (h, iface), speed in raw.nic_speed.items():
        nic_ways = [w for d in ("rx", "tx") if (w := nic.get((h, iface, d))) is not None]
        if nic_ways:
            util[h][("nic", iface)] = _busier(nic_ways, speed)
    # PCIe: bytes through each function per direction, its own link and the shared ones
    through: dict[tuple[str, str, str], Bins] = defaultdict(lambda: [None] * n)
    for (h, d), ctl in raw.disk_controller.items():
        _add(through[(h, ctl, "up")], dread.get((h, d), []))
        _add(through[(h, ctl, "down")], dwrite.get((h, d), []))
    ctl_pcis = set(raw.disk_controller.values())
    for (h, iface), pci in raw.nic_pci.items():
        if pci in ctl_pcis:
            continue  # a function that is both counts as a controller
        _add(through[(h, pci, "up")], nic.get((h, iface, "rx"), []))
        _add(through[(h, pci, "down")], nic.get((h, iface, "tx"), []))
    own: dict[tuple[str, str], Bins] = {}
    for (h, pci), cap in raw.usable.items():
        ways = [through[(h, pci, d)] for d in ("up", "down") if (h, pci, d) in through]
        if ways:
            own[(h, pci)] = _busier(ways, cap)
    # a port's own link figures are of its link to the one device below it: shared only where
    # two or more functions are below (a dual-port NIC's two functions, a switch's devices)
    below: dict[tuple[str, str], set[str]] = defaultdict(set)
    for h, pci, _d in through:
        info = raw.links.get((h, pci), {})
        for above in {info.get("upstream", ""), info.get("root", "")} - {"", pci}:
            below[(h, above)].add(pci)
    shared: dict[tuple[str, str, str], Bins] = defaultdict(lambda: [None] * n)
    for (h, pci, d), b in list(through.items()):
        info = raw.links.get((h, pci), {})
        for above in {info.get("upstream", ""), info.get("root", "")} - {"", pci}:
            if len(below[(h, above)]) >= 2:
                _add(shared[(h, above, d)], b)
    for h, pci in sorted({(h, pci) for h, pci, _d in shared}):
        link = raw.usable.get((h, pci))
        if link:
            ways = [shared[(h, pci, d)] for d in ("up", "down") if (h, pci, d) in shared]
            util[h][("pcie", pci)] = _busier(ways, link)
    for (h, pci), b in own.items():
        if raw.links.get((h, pci), {}).get("role") == "controller" or pci in ctl_pcis:
            util[h][("controller", pci)] = b
        else:
            _max_into(util[h], ("pcie", pci), b)
    # controllers and bridges whose busy disks are held back
    yields = _plateaus(grid, busy, dbytes, raw, util)
    # CPUs, TCP
    for (h, c), b in raw.cpu_busy.items():
        util[h][("cpu", c)] = b
    for h, b in raw.tcp_ratio.items():
        util[h][("tcp", "")] = [None if v is None else min(1.0, v / TCP_SATURATED) for v in b]
    moving: dict[str, list[bool]] = {}
    for h in hosts | set(util):
        nic_sum = _sum([b for (hh, _i, _d), b in nic.items() if hh == h], n)
        disk_sum = _sum([b for (hh, _d), b in dbytes.items() if hh == h], n)
        moving[h] = [
            (a or 0) >= MOVING_NIC or (d or 0) >= MOVING_DISK
            for a, d in zip(nic_sum, disk_sum, strict=True)
        ]
    return Usage(
        util=dict(util),
        moving=moving,
        speed=dict(raw.nic_speed),
        softirq=dict(raw.cpu_softirq),
        disk_bytes=dict(dbytes),
        disk_ios=dict(raw.disk_ios),
        yields=yields,
    )


def _plateaus(
    grid: Grid,
    busy: dict[tuple[str, str], Bins],
    dbytes: dict[tuple[str, str], Bins],
    raw: Raw,
    util: dict[str, dict[tuple[str, str], Bins]],
) -> dict[tuple[str, str], Bins]:
    """Controllers (and bridges over two or more) whose busy disks move less than alone.

    Walks the steps in order keeping each disk's bytes/s and requests/s of the last step it
    was alone on its controller (at least 90 % busy, no other disk 5 % busy), seeded from the
    recording rule's value before the window where there is one.
    """
    n = grid.n
    by_ctl: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (h, d), ctl in sorted(raw.disk_controller.items()):
        if (h, d) in busy:
            by_ctl[(h, ctl)].append(d)
    upstream: dict[tuple[str, str], str] = {}
    for h, ctl in by_ctl:
        up = raw.links.get((h, ctl), {}).get("upstream", "")
        if up:
            upstream[(h, ctl)] = up
    alone = dict(raw.alone)
    yields: dict[tuple[str, str], Bins] = defaultdict(lambda: [None] * n)
    held: dict[tuple[str, str], Bins] = defaultdict(lambda: [None] * n)
    # per bridge and step: (bytes now, bytes alone, yield, mean busy) of each controller below
    Part = tuple[float, float, float, float]
    parts_of: dict[tuple[str, str], list[list[Part]]] = defaultdict(lambda: [[] for _ in range(n)])
    for k in range(n):
        for (h, ctl), devs in by_ctl.items():
            b = {d: busy[(h, d)][k] for d in devs}
            active = [d for d, v in b.items() if v is not None and v >= OTHERS_IDLE]
            if len(active) == 1 and (b[active[0]] or 0) >= ALONE_BUSY:
                d = active[0]
                by = _at(dbytes.get((h, d)), k)
                io = _at(raw.disk_ios.get((h, d)), k)
                if by is not None:
                    alone[(h, d)] = (by, io or 0.0)
            busy_devs = [d for d, v in b.items() if v is not None and v >= BUSY_DISK]
            seen = [d for d in busy_devs if (h, d) in alone]
            if not seen:
                continue
            now_b = math.fsum(_at(dbytes.get((h, d)), k) or 0.0 for d in seen)
            now_i = math.fsum(_at(raw.disk_ios.get((h, d)), k) or 0.0 for d in seen)
            was_b = math.fsum(alone[(h, d)][0] for d in seen)
            was_i = math.fsum(alone[(h, d)][1] for d in seen)
            shares = [a / z for a, z in ((now_b, was_b), (now_i, was_i)) if z > 0]
            if not shares:
                continue
            y = max(shares)
            yields[(h, ctl)][k] = y
            mean_busy = math.fsum(b[d] or 0.0 for d in busy_devs) / len(busy_devs)
            if y < HELD_BACK:
                held[(h, ctl)][k] = mean_busy
            if (h, ctl) in upstream:
                parts_of[(h, upstream[(h, ctl)])][k].append((now_b, was_b, y, mean_busy))
    for (h, ctl), hb in held.items():
        _max_into(util[h], ("controller", ctl), hb)
    for (h, up), steps in parts_of.items():
        plateau: Bins = [None] * n
        yb: Bins = [None] * n
        for k, vals in enumerate(steps):
            now_b, was_b = math.fsum(v[0] for v in vals), math.fsum(v[1] for v in vals)
            if not vals or was_b <= 0:
                continue
            y = yb[k] = now_b / was_b
            # two or more controllers, every one held back: the bridge they share is the
            # common factor (three saturated controllers look the same: docs/rules.md)
            if len(vals) >= 2 and all(v[2] < HELD_BACK for v in vals) and y < HELD_BACK:
                plateau[k] = math.fsum(v[3] for v in vals) / len(vals)
        yields[(h, up)] = yb
        _max_into(util[h], ("pcie", up), plateau)
    return dict(yields)


def _at(b: Bins | None, k: int) -> float | None:
    return b[k] if b is not None and k < len(b) else None


def _clamp(b: Bins) -> Bins:
    return [None if v is None else min(1.0, max(0.0, v)) for v in b]


def _add(into: Bins, b: Bins) -> None:
    for k, v in enumerate(b):
        if v is not None and k < len(into):
            into[k] = (into[k] or 0.0) + v


def _sum(bs: list[Bins], n: int) -> Bins:
    out: Bins = [None] * n
    for b in bs:
        _add(out, b)
    return out


def _busier(ways: list[Bins], capacity: float) -> Bins:
    """Per step the busier direction against ``capacity``, capped at 1 (None: no value)."""
    out: Bins = []
    for vals in zip(*ways, strict=True):
        known = [v for v in vals if v is not None]
        out.append(min(1.0, max(known) / capacity) if known else None)
    return out


def _max_into(d: dict[tuple[str, str], Bins], key: tuple[str, str], b: Bins) -> None:
    if key not in d:
        d[key] = list(b)
        return
    d[key] = [
        None if x is None and y is None else max(v for v in (x, y) if v is not None)
        for x, y in zip(d[key], b, strict=True)
    ]


# --- the verdict (pure) -------------------------------------------------------------------


def verdict(u: Usage, host: str, steps: Iterable[int]) -> LimitedBy:
    """What limited ``host`` over ``steps`` (bin indices): see the module's docstring."""
    moving = u.moving.get(host, [])
    chosen = [k for k in steps if k < len(moving) and moving[k]]
    if not chosen:
        return LimitedBy("none", None, None, "no data moved in these steps", {})
    means: dict[tuple[str, str], float] = {}
    series = u.util.get(host, {})
    for key, b in series.items():
        if key[0] == "cpu":
            continue
        vals = [v for k in chosen if (v := b[k]) is not None]
        if vals:
            means[key] = math.fsum(vals) / len(vals)
    # CPUs: the busiest moving data in each step (only the few busiest were fetched), named
    # by the one that was busiest most often
    cpus = {key[1]: b for key, b in series.items() if key[0] == "cpu"}
    top: list[float] = []
    count: dict[str, int] = defaultdict(int)
    for k in chosen:
        here = [(b[k], c) for c, b in cpus.items() if b[k] is not None]
        if here:
            v, c = max(here)
            top.append(v)  # type: ignore[arg-type]
            count[c] += 1
        elif cpus:
            top.append(0.0)  # no CPU moved data in this step: none was busy doing so
    if top:
        means[("cpu", max(sorted(count), key=lambda c: count[c]))] = math.fsum(top) / len(top)
    per: dict[str, tuple[float, str]] = {}
    for (res, subj), v in sorted(means.items()):
        if res not in per or v > per[res][0]:
            per[res] = (v, subj)
    if not per:
        return LimitedBy("none", None, None, "no resource was measured in these steps", {})

    def rank(res: str) -> float:
        v = per[res][0]
        bonus = {"pcie": 0.2, "controller": 0.1}.get(res, 0.0) if v >= SATURATED else 0.0
        return v + bonus

    best = max(per, key=lambda r: (rank(r), -RESOURCES.index(r)))
    util, subject = per[best]
    if util < LIMIT:
        others = {r: round(v, 4) for r, (v, _s) in per.items()}
        parts = [_phrase(u, host, r, s, v, chosen) for r, (v, s) in _ordered(per)]
        return LimitedBy(
            "none",
            None,
            util,
            "; ".join(parts) + ": nothing reached 70 %, the workload paced itself",
            others,
        )
    others = {r: round(v, 4) for r, (v, _s) in per.items() if r != best}
    parts = [_phrase(u, host, best, subject, util, chosen)]
    parts += [_phrase(u, host, r, s, v, chosen) for r, (v, s) in _ordered(per) if r != best]
    return LimitedBy(best, subject or None, util, "; ".join(parts) + f": {_NOUN[best]}", others)


def _ordered(per: dict[str, tuple[float, str]]) -> list[tuple[str, tuple[float, str]]]:
    return sorted(per.items(), key=lambda kv: -kv[1][0])


def _rate(bps: float) -> str:
    """Bytes/s in three figures: '2.05 MB/s', '1.31 GB/s'."""
    for div, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps:.3g} B/s"


def _pct(v: float) -> str:
    return f"{100 * v:.0f} %"


def _mean(b: Bins | None, steps: list[int]) -> float | None:
    if b is None:
        return None
    vals = [v for k in steps if k < len(b) and (v := b[k]) is not None]
    return math.fsum(vals) / len(vals) if vals else None


def _phrase(u: Usage, host: str, res: str, subj: str, v: float, steps: list[int]) -> str:
    """One resource in a few words: "disk sda 96 % busy", "NIC eth2 70 % of 60 Gbit/s"."""
    if res == "disk":
        mb = _mean(u.disk_bytes.get((host, subj)), steps)
        moved = f" at {_rate(mb)}" if mb is not None else ""
        ios = _mean(u.disk_ios.get((host, subj)), steps)
        if mb is not None and ios:
            # small requests say "random I/O": busy, and few bytes for it
            moved += f" in {mb / ios / 1024:.3g} KiB requests"
        return f"disk {subj} {_pct(v)} busy{moved}"
    if res == "controller":
        y = _mean(u.yields.get((host, subj)), steps)
        held = f", its busy disks moving {_pct(y)} of what they did alone" if y is not None else ""
        return f"controller {subj} at {_pct(v)}{held}"
    if res == "pcie":
        y = _mean(u.yields.get((host, subj)), steps)
        held = ""
        if y is not None and y < HELD_BACK:
            held = f", the disks behind it moving {_pct(y)} of what they did alone"
        return f"PCIe link {subj} {_pct(v)} used{held}"
    if res == "nic":
        speed = u.speed.get((host, subj))
        of = f" of {speed * 8 / 1e9:.3g} Gbit/s" if speed else ""
        return f"NIC {subj} {_pct(v)}{of}"
    if res == "cpu":
        si = _mean(u.softirq.get((host, subj)), steps)
        soft = f" ({_pct(si)} softirq)" if si is not None else ""
        return f"CPU {subj} {_pct(v)} busy{soft}"
    return f"TCP retransmits at {_pct(v)} of the 1 % that holds a stream down"
