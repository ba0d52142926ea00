"""The report's document (schema ``wattbit.report/1``) as typed, frozen dataclasses.

Each class's ``to_json()`` writes its part of ``RUN.json``: the keys in the order written
there, the values as computed (``None`` for a figure that cannot be computed, never zero).
docs/report.md describes every key; tests/unit/test_report_math.py pins the key lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .power import HostPower


SCHEMA = "wattbit.report/1"

Json = dict[str, Any]

# The figures a comparison puts side by side, in the order it lists them.
COMPARE_KEYS = (
    "duration_seconds",
    "energy_joules",
    "bytes_tx",
    "bytes_rx",
    "gbit_per_second_mean",
    "gbit_per_second_peak",
    "watts_mean",
    "joules_per_gigabit",
    "idle_watts",
    "marginal_joules_per_gigabit",
    "r_squared",
    "pearson_r",
    "lag_seconds",
    "coverage",
)

# What can limit a host, in the order a tie is broken (docs/report.md, "What limited it").
RESOURCES = ("disk", "controller", "pcie", "nic", "cpu", "tcp")


@dataclass(frozen=True)
class LimitedBy:
    """What limited a host over some steps (the report's ``limited_by`` object)."""

    resource: str  # one of RESOURCES, or "none"
    subject: str | None  # device, PCI address, interface or CPU; None for tcp and none
    utilisation: float | None  # 0-1 over the steps that moved data; None: nothing measured
    evidence: str
    others: dict[str, float]  # every other resource's utilisation

    def to_json(self) -> Json:
        """``{"resource", "subject", "utilisation", "evidence", "others"}``."""
        return {
            "resource": self.resource,
            "subject": self.subject,
            "utilisation": self.utilisation,
            "evidence": self.evidence,
            "others": dict(self.others),
        }


@dataclass(frozen=True)
class ReportWindow:
    """The window the report covers."""

    start: float
    end: float
    start_iso: str
    end_iso: str
    duration_seconds: float
    source: str  # "run" or "explicit"
    in_progress: bool

    def to_json(self) -> Json:
        """The ``window`` object."""
        return {
            "start": self.start,
            "end": self.end,
            "start_iso": self.start_iso,
            "end_iso": self.end_iso,
            "duration_seconds": self.duration_seconds,
            "source": self.source,
            "in_progress": self.in_progress,
        }


@dataclass(frozen=True)
class PhaseFigures:
    """A run marked as a phase of the report's run, with the site's figures over it."""

    run: str
    phase: str
    labels: dict[str, str]
    start: float
    end: float
    start_iso: str
    end_iso: str
    duration_seconds: float
    steps: int  # analysis steps wholly inside the phase
    gbit_per_second_mean: float | None  # site: mean of those steps' Gbit/s
    watts_mean: float | None  # site: mean of those steps' watts
    limited_by: dict[str, LimitedBy] = field(default_factory=dict)  # by host

    def to_json(self) -> Json:
        """One entry of ``phases``."""
        return {
            "run": self.run,
            "phase": self.phase,
            "labels": dict(self.labels),
            "start": self.start,
            "end": self.end,
            "start_iso": self.start_iso,
            "end_iso": self.end_iso,
            "duration_seconds": self.duration_seconds,
            "steps": self.steps,
            "gbit_per_second_mean": self.gbit_per_second_mean,
            "watts_mean": self.watts_mean,
            "joules_per_gigabit": self.joules_per_gigabit,
            "limited_by": {h: v.to_json() for h, v in self.limited_by.items()},
        }

    @property
    def joules_per_gigabit(self) -> float | None:
        """The site's mean watts over its mean Gbit/s in the phase (None below 0.01 Gbit/s)."""
        g, w = self.gbit_per_second_mean, self.watts_mean
        return w / g if g is not None and w is not None and g >= 0.01 else None


@dataclass(frozen=True)
class Scope:
    """The figures of one scope: the site, a host or a component."""

    duration_seconds: float
    bytes_tx: float | None
    bytes_rx: float | None
    gigabits: float | None
    gbit_per_second_mean: float | None
    gbit_per_second_peak: float | None
    energy_joules: float | None
    energy_source: str  # counter | power | mixed | none
    watts_mean: float | None
    watts_peak: float | None
    joules_per_gigabit: float | None
    idle_watts: float | None
    idle_watts_source: str | None  # "idle_phases" or "fit"; None without idle watts
    idle_steps: int  # steps of idle phases the idle watts are the median of (0: the fit's)
    marginal_joules_per_gigabit: float | None
    r_squared: float | None
    fit_points: int
    pearson_r: float | None
    lag_seconds: float | None
    pearson_r_at_lag: float | None
    coverage: float | None
    coverage_sources: dict[str, float]

    def figure(self, key: str) -> float | None:
        """One of the :data:`COMPARE_KEYS` figures by name (for comparisons)."""
        if key not in COMPARE_KEYS:
            raise KeyError(key)
        value: float | None = getattr(self, key)
        return value

    def to_json(self) -> Json:
        """The scope's keys (a host or component adds its own after these)."""
        return {
            "duration_seconds": self.duration_seconds,
            "bytes_tx": self.bytes_tx,
            "bytes_rx": self.bytes_rx,
            "gigabits": self.gigabits,
            "gbit_per_second_mean": self.gbit_per_second_mean,
            "gbit_per_second_peak": self.gbit_per_second_peak,
            "energy_joules": self.energy_joules,
            "energy_source": self.energy_source,
            "watts_mean": self.watts_mean,
            "watts_peak": self.watts_peak,
            "joules_per_gigabit": self.joules_per_gigabit,
            "idle_watts": self.idle_watts,
            "idle_watts_source": self.idle_watts_source,
            "idle_steps": self.idle_steps,
            "marginal_joules_per_gigabit": self.marginal_joules_per_gigabit,
            "r_squared": self.r_squared,
            "fit_points": self.fit_points,
            "pearson_r": self.pearson_r,
            "lag_seconds": self.lag_seconds,
            "pearson_r_at_lag": self.pearson_r_at_lag,
            "coverage": self.coverage,
            "coverage_sources": dict(self.coverage_sources),
        }


@dataclass(frozen=True)
class DiskFigures:
    """One disk device of a host.

    The busy figures are None when the device has no busy-time counter (and then absent
    from the JSON); the byte dicts, keyed by op (``read``, ``write``), are empty without I/O
    byte counters (and then absent too).
    """

    coverage: float
    busy_seconds: float | None
    busy_ratio: float | None
    busy_ratio_peak: float | None
    bytes: dict[str, float]
    bytes_per_second_mean: dict[str, float]
    bytes_per_second_peak: dict[str, float | None]

    def to_json(self) -> Json:
        """The device's object in a host's ``disks``."""
        out: Json = {"coverage": self.coverage}
        if self.busy_seconds is not None:
            out["busy_seconds"] = self.busy_seconds
            out["busy_ratio"] = self.busy_ratio
            out["busy_ratio_peak"] = self.busy_ratio_peak
        if self.bytes:
            out["bytes"] = dict(self.bytes)
            out["bytes_per_second_mean"] = dict(self.bytes_per_second_mean)
            out["bytes_per_second_peak"] = dict(self.bytes_per_second_peak)
        return out


@dataclass(frozen=True)
class DiskSummary:
    """A host's disks in one line; the busy figures are None without busy-time counters."""

    devices: int
    bytes_per_second_mean: dict[str, float]  # op -> sum over the devices
    busy_ratio_mean: float | None = None
    busy_ratio_min: float | None = None
    busy_ratio_max: float | None = None
    busiest: str | None = None

    def to_json(self) -> Json:
        """The host's ``disk_summary`` (busy keys only when some disk has a busy counter)."""
        out: Json = {
            "devices": self.devices,
            "bytes_per_second_mean": dict(self.bytes_per_second_mean),
        }
        if self.busiest is not None:
            out["busy_ratio_mean"] = self.busy_ratio_mean
            out["busy_ratio_min"] = self.busy_ratio_min
            out["busy_ratio_max"] = self.busy_ratio_max
            out["busiest"] = self.busiest
        return out


@dataclass(frozen=True)
class HostScope(Scope):
    """A host: its scope figures, then its interfaces, outlets and disks."""

    interfaces: list[str]
    outlets: list[str]  # the meters of its energy: pdu/outlet, pdu/feed or bmc:NAME
    disks: dict[str, DiskFigures]  # by device
    disk_summary: DiskSummary | None  # None without disks
    power_source: str | None = None  # outlets | pdu | redfish | ipmi; None without any
    limited_by: LimitedBy | None = None  # what limited it over the whole window

    def to_json(self) -> Json:
        """The host's object in ``hosts``."""
        return {
            **super().to_json(),
            "interfaces": list(self.interfaces),
            "power_source": self.power_source,
            "outlets": list(self.outlets),
            "disks": {dev: d.to_json() for dev, d in self.disks.items()},
            "disk_summary": (
                self.disk_summary.to_json() if self.disk_summary is not None else None
            ),
            "limited_by": self.limited_by.to_json() if self.limited_by is not None else None,
        }


@dataclass(frozen=True)
class ComponentScope(Scope):
    """A component: its scope figures, then whose bits it is charged with, and its outlets."""

    bits_from: str  # "hosts" (those its outlets feed) or "site"
    bits_hosts: list[str]
    outlets: list[str]  # pdu/outlet

    def to_json(self) -> Json:
        """The component's object in ``components``."""
        return {
            **super().to_json(),
            "bits_from": self.bits_from,
            "bits_hosts": list(self.bits_hosts),
            "outlets": list(self.outlets),
        }


@dataclass(frozen=True)
class OutletFigures:
    """One PDU outlet."""

    pdu: str
    outlet: str
    outlet_name: str
    host: str
    component: str
    energy_joules: float | None
    energy_source: str  # counter | power | none
    energy_note: str | None
    energy_counter_step_joules: float | None
    energy_joules_from_watts_bins: float | None
    energy_counter_resets: int | None
    watts_peak: float | None
    coverage: float | None

    def to_json(self) -> Json:
        """The outlet's object in ``outlets``."""
        return {
            "pdu": self.pdu,
            "outlet": self.outlet,
            "outlet_name": self.outlet_name,
            "host": self.host,
            "component": self.component,
            "energy_joules": self.energy_joules,
            "energy_source": self.energy_source,
            "energy_note": self.energy_note,
            "energy_counter_step_joules": self.energy_counter_step_joules,
            "energy_joules_from_watts_bins": self.energy_joules_from_watts_bins,
            "energy_counter_resets": self.energy_counter_resets,
            "watts_peak": self.watts_peak,
            "coverage": self.coverage,
        }


@dataclass(frozen=True)
class SourceCoverage:
    """How complete one source's series are (``agent:HOST`` or ``pdu:NAME``)."""

    coverage: float
    longest_gap_seconds: float
    series: int
    interval_seconds: float | None

    def to_json(self) -> Json:
        """The source's object in ``sources``."""
        return {
            "coverage": self.coverage,
            "longest_gap_seconds": self.longest_gap_seconds,
            "series": self.series,
            "interval_seconds": self.interval_seconds,
        }


@dataclass(frozen=True)
class CompareRow:
    """One figure of two runs; change = (this - other) / |other|."""

    this: float | None
    other: float | None
    change: float | None

    def to_json(self) -> Json:
        """``{this, other, change}``."""
        return {"this": self.this, "other": self.other, "change": self.change}


CompareRows = dict[str, CompareRow]  # figure (one of COMPARE_KEYS) -> row


@dataclass(frozen=True)
class Comparison:
    """Another run side by side with this one."""

    run: str
    window: ReportWindow
    site: CompareRows
    hosts: dict[str, CompareRows]  # hosts in both runs
    components: dict[str, CompareRows]  # components in both runs
    only_in_this: list[str]  # hosts
    only_in_other: list[str]
    report: Report  # the other run's whole report

    def to_json(self) -> Json:
        """The ``compare`` object."""

        def rows(r: CompareRows) -> Json:
            return {k: row.to_json() for k, row in r.items()}

        other = self.report.to_json()
        other.pop("compare", None)
        return {
            "run": self.run,
            "window": self.window.to_json(),
            "site": rows(self.site),
            "hosts": {h: rows(r) for h, r in self.hosts.items()},
            "components": {c: rows(r) for c, r in self.components.items()},
            "only_in_this": list(self.only_in_this),
            "only_in_other": list(self.only_in_other),
            "report": other,
        }


@dataclass(frozen=True)
class EnergyView:
    """The site's energy over the window: how much was idle, what the best phase would cost."""

    energy_joules: float | None
    idle_joules: float | None  # idle watts x the window's length
    idle_share: float | None  # idle_joules / energy_joules
    best_phase: str | None  # the phase with the lowest J/Gbit (moving at least 0.01 Gbit/s)
    best_phase_joules_per_gigabit: float | None
    joules_at_best_phase: float | None  # the window's gigabits at that J/Gbit

    def to_json(self) -> Json:
        """The ``energy_view`` object."""
        return {
            "energy_joules": self.energy_joules,
            "idle_joules": self.idle_joules,
            "idle_share": self.idle_share,
            "best_phase": self.best_phase,
            "best_phase_joules_per_gigabit": self.best_phase_joules_per_gigabit,
            "joules_at_best_phase": self.joules_at_best_phase,
        }


@dataclass(frozen=True)
class Report:
    """The whole report of one window."""

    run: str
    window: ReportWindow
    prometheus: str  # the URL read
    generated_at: str
    step_seconds: float
    max_lag_seconds: float
    coverage_threshold: float
    interfaces_regex: str | None
    match: dict[str, str]  # --match: labels every series read had
    site: Scope
    hosts: dict[str, HostScope]
    components: dict[str, ComponentScope]
    outlets: list[OutletFigures]
    sources: dict[str, SourceCoverage]
    warnings: list[str]
    timings_seconds: dict[str, float]
    prometheus_requests: int
    compare: Comparison | None = None  # with --compare only
    phases: list[PhaseFigures] = field(default_factory=list)  # written after ``window``
    energy_view: EnergyView | None = None  # the site's; written after ``site``
    power: dict[str, HostPower] = field(default_factory=dict)  # by host (collector/report/power)

    def to_json(self) -> Json:
        """The whole of ``RUN.json``."""
        out: Json = {
            "schema": SCHEMA,
            "run": self.run,
            "window": self.window.to_json(),
            "phases": [p.to_json() for p in self.phases],
            "prometheus": self.prometheus,
            "generated_at": self.generated_at,
            "step_seconds": self.step_seconds,
            "max_lag_seconds": self.max_lag_seconds,
            "coverage_threshold": self.coverage_threshold,
            "interfaces_regex": self.interfaces_regex,
            "match": dict(self.match),
            "site": self.site.to_json(),
            "energy_view": self.energy_view.to_json() if self.energy_view is not None else None,
            "hosts": {h: d.to_json() for h, d in self.hosts.items()},
            "components": {c: d.to_json() for c, d in self.components.items()},
            "power": {h: p.to_json() for h, p in self.power.items()},
            "outlets": [o.to_json() for o in self.outlets],
            "sources": {s: c.to_json() for s, c in self.sources.items()},
            "warnings": list(self.warnings),
            "timings_seconds": dict(self.timings_seconds),
            "prometheus_requests": self.prometheus_requests,
        }
        if self.compare is not None:
            out["compare"] = self.compare.to_json()
        return out
