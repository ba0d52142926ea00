"""What the report works on: the window, its grid of bins, one track per series, the outlets.

Gathering (:mod:`.gather`) fills these in from Prometheus; analysis (:mod:`.analyse`) reads
them. Which of an outlet's series gives its energy is decided here, by pure functions, because
that choice also decides which raw samples gathering has to fetch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import compute as C
from .prom import LabelKey, label_key

NIC = "wattbit_nic_bytes_total"
BUSY = "wattbit_disk_busy_seconds_total"
DISK_IO = "wattbit_disk_io_bytes_total"
POWER = "wattbit_pdu_outlet_power_watts"
ENERGY = "wattbit_pdu_outlet_energy_joules_total"
# The other meters of a host's power (docs/rules.md, "Host power and its source"): a whole
# PDU, bank or phase mapped to it, and its BMC; and the CPUs' RAPL energy from the agent.
FEED_POWER = "wattbit_pdu_feed_power_watts"
FEED_ENERGY = "wattbit_pdu_feed_energy_joules_total"
BMC_POWER = "wattbit_bmc_power_watts"
BMC_ENERGY = "wattbit_bmc_energy_joules_total"
RAPL_ENERGY = "wattbit_rapl_energy_joules_total"
POWERS = (POWER, FEED_POWER, BMC_POWER)  # gauges in watts: a meter's power track
ENERGIES = (ENERGY, FEED_ENERGY, BMC_ENERGY)  # the same meters' energy counters
METERS = POWERS + ENERGIES
COUNTERS = (NIC, BUSY, DISK_IO, ENERGY, FEED_ENERGY, BMC_ENERGY, RAPL_ENERGY)
ALL = (NIC, BUSY, DISK_IO, POWER, ENERGY, FEED_POWER, FEED_ENERGY, BMC_POWER, BMC_ENERGY,
       RAPL_ENERGY)  # fmt: skip
RUN_START = "wattbit_run_start_time_seconds"
RUN_END = "wattbit_run_end_time_seconds"
RUN_ACTIVE = "wattbit_run_active"
RUN_INFO = "wattbit_run_info"
PHASE_LABEL, PART_OF_LABEL = "phase", "part_of"  # a phase run's labels (docs/report.md)
IDLE_PHASE = "idle"

COARSE_COUNTER = 0.01  # an energy counter whose register step exceeds 1 % of the energy
# Labels Prometheus or the scrape adds: not part of an outlet's identity.
TARGET_LABELS = ("job", "instance")


class ReportError(Exception):
    """The report cannot be made (unknown run, empty window, unreachable Prometheus)."""


@dataclass
class Options:
    """Knobs of the analysis."""

    step: float | None = None  # analysis step in seconds; default: chosen from the data
    max_lag: float = 120.0  # lag search range in seconds, either way
    interfaces: str | None = None  # regex on the `interface` label (default: all exported)
    # exact label matchers on every series read (--match): one site's series in a shared store
    match: dict[str, str] = field(default_factory=dict)
    coverage_threshold: float = 0.95
    max_bins: int = 10_000
    workers: int = 4


@dataclass
class Window:
    """The time window of a report."""

    name: str
    start: float
    end: float
    source: str  # "run" or "explicit"
    in_progress: bool = False

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.end - self.start


@dataclass
class Grid:
    """The bins of the window: edges ``start = e0 < e1 < ... < en = end``."""

    start: float
    end: float
    step: float
    edges: list[float]

    @classmethod
    def make(cls, start: float, end: float, step: float) -> Grid:
        """Bins of one step from ``start``; the last one ends at ``end`` and may be shorter."""
        n = max(1, math.ceil((end - start) / step - 1e-9))
        edges = [start + k * step for k in range(n)] + [end]
        return cls(start, end, step, edges)

    @property
    def n(self) -> int:
        """Number of bins."""
        return len(self.edges) - 1

    def index(self, t: float) -> int | None:
        """Edge index of an evaluation timestamp (None when it is not an edge)."""
        if abs(t - self.end) < 1e-3:
            return self.n
        k = round((t - self.start) / self.step)
        if 0 <= k < self.n and abs(self.start + k * self.step - t) < 1e-3:
            return k
        return None


@dataclass(eq=False)
class Track:
    """One series of the window, reduced to bins."""

    metric: str
    labels: dict[str, str]
    n_samples: int = 0
    interval: float | None = None
    values: list[float | None] = field(default_factory=list)  # means (watts) per bin
    counter: C.CounterBins | None = None
    raw: list[tuple[float, float]] | None = None
    coverage: float = 0.0
    longest_gap: float = 0.0
    present: list[bool] = field(default_factory=list)  # per bin: had a sample in it
    rates: list[float | None] = field(default_factory=list)  # counters: per-second rate per bin
    total: float = 0.0  # counters: increase over the window

    @property
    def host(self) -> str:
        """The host the series belongs to (``host`` label; ``instance`` for agents without)."""
        h = self.labels.get("host", "")
        if not h and self.metric not in METERS:
            h = self.labels.get("instance", "")
        return h

    @property
    def source(self) -> str:
        """The scrape source: ``agent:HOST``, ``pdu:NAME`` or ``bmc:NAME``."""
        if self.metric in (BMC_POWER, BMC_ENERGY):
            return "bmc:" + self.labels.get("bmc", "?")
        if self.metric in METERS:
            return "pdu:" + self.labels.get("pdu", "?")
        return "agent:" + (self.host or "?")


# eq=False: outlets are told apart by identity (two can share ``pdu/outlet`` when another
# label changed inside the window), and analysis keys dicts by them.
@dataclass(eq=False)
class Outlet:
    """A meter of power: a PDU outlet, or a PDU/bank/phase or BMC mapped to a host (``kind``);
    its power and (maybe) energy-counter tracks, and its energy source."""

    labels: dict[str, str]
    power: Track | None = None
    energy: Track | None = None
    energy_source: str = "none"  # counter | power | none
    energy_note: str = ""  # why not the counter, when it exists and is not used
    energy_counter_step: float | None = None  # register step of a coarse counter, joules

    @property
    def host(self) -> str:
        """``host`` label (empty when the outlet feeds no monitored host)."""
        return self.labels.get("host", "")

    @property
    def component(self) -> str:
        """``component`` label."""
        return self.labels.get("component", "")

    @property
    def kind(self) -> str:
        """What meters it: ``outlets``, ``pdu`` (a whole PDU, bank or phase) or the BMC's
        protocol (``redfish``, ``ipmi``): the rules' ``source`` (docs/rules.md)."""
        metric = (self.power or self.energy or Track("", {})).metric
        if metric in (BMC_POWER, BMC_ENERGY):
            return self.labels.get("protocol", "") or "bmc"
        if metric in (FEED_POWER, FEED_ENERGY):
            return "pdu"
        return "outlets"

    @property
    def name(self) -> str:
        """``pdu/outlet``; ``pdu/feed`` for a PDU, bank or phase; ``bmc:NAME`` for a BMC."""
        if self.kind == "outlets":
            return f"{self.labels.get('pdu', '?')}/{self.labels.get('outlet', '?')}"
        if self.kind == "pdu":
            return f"{self.labels.get('pdu', '?')}/{self.labels.get('feed', '?')}"
        return "bmc:" + self.labels.get("bmc", "?")

    def tracks(self) -> list[Track]:
        """The tracks the report's numbers use (energy only when it is the counter source)."""
        out = [t for t in (self.power,) if t is not None]
        if self.energy is not None and self.energy_source == "counter":
            out.append(self.energy)
        return out


def outlets_of(tracks: list[Track]) -> list[Outlet]:
    """The meters of the PDU and BMC tracks: outlets by PDU then outlet number (``2`` before
    ``10``), then PDUs/banks/phases mapped to hosts, then BMCs."""
    by: dict[tuple[int, LabelKey], Outlet] = {}
    for tr in tracks:
        if tr.metric not in METERS:
            continue
        family = METERS.index(tr.metric) % len(POWERS)
        ident = {k: v for k, v in tr.labels.items() if k not in TARGET_LABELS}
        # A BMC's energy counter has no ``protocol`` label; its power has: one meter.
        key = {k: v for k, v in ident.items() if k != "protocol"}
        o = by.setdefault((family, label_key(key)), Outlet(ident))
        if tr.metric in POWERS:
            o.power = tr
            o.labels = ident
        else:
            o.energy = tr
    order = {"outlets": 0, "pdu": 1}
    return sorted(
        by.values(),
        key=lambda o: (order.get(o.kind, 2), o.labels.get("pdu", o.labels.get("bmc", "")),
                       _natural(o), o.labels.get("feed", "")),
    )  # fmt: skip


def _natural(o: Outlet) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in o.labels.get("outlet", "").split("."))


def choose_energy_sources(outlets: list[Outlet], coarse: set[str] | None = None) -> list[Outlet]:
    """Counters for a host whose every outlet has a usable one; else integrate all its watts.

    A counter is unusable when it has fewer than two samples or is in ``coarse`` (its
    register steps are too big for the window's energy). Outlets that feed no host decide
    alone. Sets each outlet's ``energy_source`` and ``energy_note``; returns the outlets whose
    watts are integrated.
    """
    coarse = coarse or set()
    groups: dict[str, list[Outlet]] = defaultdict(list)
    for o in outlets:
        # a host's meters of one kind decide together (its outlets; its BMCs)
        groups[f"{o.kind}\0{o.host}" if o.host else "\0" + o.name].append(o)
    integrate: list[Outlet] = []
    for outs in groups.values():
        usable = [
            o.energy is not None and o.energy.n_samples >= 2 and o.name not in coarse for o in outs
        ]
        if all(usable):
            for o in outs:
                o.energy_source = "counter"
            continue
        for o, ok in zip(outs, usable, strict=True):
            if o.power is not None:
                o.energy_source = "power"
                integrate.append(o)
                if o.name in coarse and o.energy_counter_step is None:
                    o.energy_note = "its counter did not move while the outlet drew power"
                elif o.name in coarse:
                    o.energy_note = "its counter's register steps are too coarse"
                elif ok:
                    o.energy_note = "another outlet of the host has no usable counter"
                elif o.energy is None:
                    o.energy_note = "the PDU reports no energy counter for it"
            elif o.energy is not None and o.energy.n_samples >= 2:
                o.energy_source = "counter"  # no watts at all: the counter is all there is
            else:
                o.energy_source = "none"
    return integrate


def coarse_counters(outlets: list[Outlet]) -> dict[str, float | None]:
    """Outlets whose energy counter moves in steps bigger than 1 % of the window's energy.

    PDUs keep energy in Wh, 0.01 kWh or 0.1 kWh registers; a 0.1 kWh (360 kJ) register over a
    20-minute run at 300 W moves once or twice, and over a 90-second demo not at all. Sets
    ``energy_counter_step``; returns {outlet name: register step in joules, or None for a
    counter that never moved while its outlet drew power}.
    """
    out: dict[str, float | None] = {}
    for o in outlets:
        if o.energy is None or o.energy.counter is None or o.power is None:
            continue
        if not C.counter_stalls(o.energy.counter.increase, o.power.values):
            continue
        q = C.counter_step(o.energy.counter.increase)
        o.energy_counter_step = q
        if q is None or q > COARSE_COUNTER * max(o.energy.total, 0.0):
            out[o.name] = q
    return out


@dataclass(frozen=True)
class PhaseRun:
    """A run marked as a phase of the report's run (labels ``phase`` and ``part_of``)."""

    run: str
    phase: str  # idle, ramp, full, ... (the ``phase`` label)
    start: float
    end: float  # clipped to the window
    labels: dict[str, str]

    @property
    def idle(self) -> bool:
        """Whether the phase is an idle one (its watts are the idle baseline)."""
        return self.phase == IDLE_PHASE


def run_labels(text: str) -> dict[str, str]:
    """The labels of ``wattbit_run_info``'s ``labels`` label (``k=v,k2=v2``, docs/runs.md)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if sep and k:
            out[k] = v
    return out


Bins = list[float | None]  # one value per analysis step, None where there is none
PerSeries = list[tuple[dict[str, str], Bins]]  # (labels, per-second rate per step)


@dataclass
class VerdictData:
    """What gathering read for the verdict beyond the tracks (:mod:`.verdict`).

    Topology is keyed by (host, device, interface or PCI address): a PCI address or a device
    name means nothing across hosts. Capacities are per step, read over the same steps as
    the rates they divide (a link retrained for one scrape is that step's, not the window's).
    ``rates`` holds the per-series rates of the verdict's counters, by the keys of
    :data:`VERDICT_COUNTERS` (a missing key: no series).
    """

    disk_controller: dict[tuple[str, str], str] = field(default_factory=dict)  # (h, dev) -> pci
    whole_disks: set[tuple[str, str]] = field(default_factory=set)  # (host, device)
    nic_pci: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, iface) -> pci
    links: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # role, up, root
    nic_speed: dict[tuple[str, str], Bins] = field(default_factory=dict)  # bytes/s per step
    usable: dict[tuple[str, str], Bins] = field(default_factory=dict)  # B/s each way, per step
    alone: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # seeds
    rates: dict[str, PerSeries] = field(default_factory=dict)


# The verdict's counters: {key: (metric, exact labels, regex labels)}. Gathering reads each as
# the report's own counters are (binned.counter_rates: last sample per step, Python's
# arithmetic), never as a store's rate(), whose figures differ between Prometheus and
# VictoriaMetrics.
CPU_MODES = "idle|iowait|irq|softirq"
VERDICT_COUNTERS: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {
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
