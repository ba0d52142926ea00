"""Turn a window's gathered series into the report's document: pure, no I/O.

:func:`analyse` reads a :class:`~.gather.Gathered` (the grid, one track per series, the
outlets with their energy sources) and makes the typed :class:`~.document.Report` and the
per-bin series behind the charts; :func:`compare` puts two reports side by side. All the
arithmetic is in :mod:`.compute`.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from . import compute as C
from . import verdict as V
from .document import (
    COMPARE_KEYS,
    CompareRow,
    CompareRows,
    Comparison,
    ComponentScope,
    DiskFigures,
    DiskSummary,
    EnergyView,
    HostScope,
    OutletFigures,
    PhaseFigures,
    Report,
    ReportWindow,
    Scope,
    SourceCoverage,
)
from .gather import Gathered
from .power import component_meters, host_meters, host_power, site_meters
from .power import warnings as power_warnings
from .series import (
    BUSY,
    DISK_IO,
    IDLE_PHASE,
    METERS,
    NIC,
    Grid,
    Outlet,
    PhaseRun,
    Track,
    Window,
)

ENERGY_DISAGREEMENT = 0.05  # warn when an energy counter and the watts differ by more
MIN_IDLE_STEPS = 3  # idle phases with fewer steps with watts leave idle watts to the fit


@dataclass
class Timeline:
    """Per-bin series of one scope, for the charts."""

    watts: list[float | None]
    gbps: list[float | None]


@dataclass(frozen=True)
class Result:
    """A report: the document and the per-bin series behind its charts."""

    doc: Report
    grid: Grid
    timelines: dict[str, Timeline]  # "site", "host:NAME", "component:NAME"
    disk_busy: dict[str, dict[str, list[float | None]]]  # host -> device -> busy ratio per bin
    usage: V.Usage | None = None  # every resource's utilisation per bin (the verdict's)


def analyse(g: Gathered, now: float | None = None) -> Result:
    """Make the report of one gathered window (``now``: its ``generated_at``, default now)."""
    t0 = time.monotonic()
    ix = _Index.of(g)
    warnings = _window_warnings(g)
    timelines: dict[str, Timeline] = {}
    hosts, disk_busy = _host_scopes(g, ix, timelines, warnings)
    usage = V.usage(g.grid, g.tracks, g.verdict) if g.verdict is not None else None
    if g.verdict_error:
        warnings.append(f"no verdict (what limited it): {g.verdict_error}")
    if usage is not None:
        every = range(g.grid.n)
        hosts = {h: replace(d, limited_by=V.verdict(usage, h, every)) for h, d in hosts.items()}
    components = _component_scopes(g, ix, timelines)
    site, timelines["site"] = ix.scope(site_meters(g.outlets), sorted(ix.nic_by_host))
    power = host_power(ix.hosts, g.outlets, g.tracks, ix.joules, g.window.duration)
    warnings += power_warnings(power)
    phases = [_phase_doc(p, g.grid, timelines["site"], usage, list(hosts)) for p in g.phases]
    if ix.idle_bins and g.outlets and site.idle_watts_source != "idle_phases":
        warnings.append(
            f"the idle phases hold {site.idle_steps} analysis step(s) with watts, fewer than "
            f"{MIN_IDLE_STEPS}: idle watts are the fit's intercept instead"
        )
    sources = _sources(g.tracks, g.outlets)
    warnings += _coverage_warnings(sources, g.options.coverage_threshold)
    warnings += _outlet_warnings(g, ix.joules)
    doc = Report(
        run=g.window.name,
        window=_window_doc(g.window),
        prometheus=g.prometheus,
        generated_at=_iso(time.time() if now is None else now),
        step_seconds=g.grid.step,
        max_lag_seconds=ix.lag_steps * g.grid.step,
        coverage_threshold=g.options.coverage_threshold,
        interfaces_regex=g.options.interfaces,
        match=dict(g.options.match),
        site=site,
        hosts=hosts,
        components=components,
        outlets=[_outlet_doc(o, g.grid, ix.joules[o]) for o in g.outlets if o.kind == "outlets"],
        sources=sources,
        warnings=warnings,
        timings_seconds=_timings(g, t0),
        prometheus_requests=g.requests,
        phases=phases,
        energy_view=_energy_view(site, phases),
        power=power,
    )
    return Result(doc, g.grid, timelines, disk_busy, usage)


@dataclass(frozen=True)
class _Index:
    """A window's tracks by host, and what every scope's figures are made from."""

    g: Gathered
    nic_by_host: dict[str, list[Track]]
    disk_by_host: dict[str, list[Track]]
    hosts: list[str]  # with NIC or disk series, or an outlet mapped to them
    joules: dict[Outlet, float | None]  # each outlet's energy over the window
    lag_steps: int  # the longest watts-behind-bits lag tried, in steps
    idle_bins: list[int]  # the bins wholly inside an idle phase

    @classmethod
    def of(cls, g: Gathered) -> _Index:
        """Index the tracks of ``g``."""
        nic_by_host: dict[str, list[Track]] = defaultdict(list)
        disk_by_host: dict[str, list[Track]] = defaultdict(list)
        for tr in g.tracks:
            if tr.metric == NIC:
                nic_by_host[tr.host].append(tr)
            elif tr.metric in (BUSY, DISK_IO):
                disk_by_host[tr.host].append(tr)
        outlet_hosts = {o.host for o in g.outlets if o.host}
        return cls(
            g=g,
            nic_by_host=nic_by_host,
            disk_by_host=disk_by_host,
            hosts=sorted(set(nic_by_host) | set(disk_by_host) | outlet_hosts),
            joules={o: _outlet_energy(o, g.window) for o in g.outlets},
            lag_steps=max(1, math.ceil(g.options.max_lag / g.grid.step - 1e-9)),
            idle_bins=sorted({k for p in g.phases if p.idle for k in _bins_inside(g.grid, p)}),
        )

    def scope(self, outs: list[Outlet], bits_hosts: list[str]) -> tuple[Scope, Timeline]:
        """The figures of the energy of ``outs`` against the bits of ``bits_hosts``."""
        nics = [tr for h in bits_hosts for tr in self.nic_by_host.get(h, [])]
        disks = [tr for h in bits_hosts for tr in self.disk_by_host.get(h, [])]
        return _scope(self, outs, nics, disks)


def _window_warnings(g: Gathered) -> list[str]:
    """What the window itself makes less certain: a step shorter than the scrapes, a run going."""
    warnings = []
    if g.grid.step < g.interval - 1e-9:
        warnings.append(
            f"the step ({g.grid.step:g} s) is shorter than the longest scrape interval "
            f"({g.interval:g} s): many steps have no sample and stay out of the fit"
        )
    if g.window.in_progress:
        warnings.append(f"run {g.window.name!r} is still going: the window ends now")
    return warnings


def _host_scopes(
    g: Gathered, ix: _Index, timelines: dict[str, Timeline], warnings: list[str]
) -> tuple[dict[str, HostScope], dict[str, dict[str, list[float | None]]]]:
    """Each host's figures (its outlets against its own bits) and its disks' busy per bin."""
    docs: dict[str, HostScope] = {}
    disk_busy: dict[str, dict[str, list[float | None]]] = {}
    for h in ix.hosts:
        source, outs = host_meters(g.outlets, h)  # one source per host (docs/report.md)
        figures, timelines["host:" + h] = ix.scope(outs, [h])
        disks, disk_busy[h] = _disks(g.window, ix.disk_by_host.get(h, []))
        docs[h] = HostScope(
            **_figures(figures),
            interfaces=sorted({t.labels.get("interface", "?") for t in ix.nic_by_host.get(h, [])}),
            outlets=[o.name for o in outs],
            disks=disks,
            disk_summary=_disk_summary(disks),
            power_source=source,
        )
        if not outs:
            warnings.append(
                f"host {h}: no PDU outlet, PDU/bank/phase or BMC is mapped to it, so no "
                "energy figures"
            )
        if h not in ix.nic_by_host:
            warnings.append(f"host {h}: no NIC byte counters, so no Gbit/s figures")
    return docs, disk_busy


def _component_scopes(
    g: Gathered, ix: _Index, timelines: dict[str, Timeline]
) -> dict[str, ComponentScope]:
    """Each component's figures: its outlets against the bits of the hosts they feed (or the
    whole site's, where they feed none with NIC series, e.g. a switch)."""
    docs: dict[str, ComponentScope] = {}
    meters = component_meters(g.outlets)
    for comp in sorted({o.component for o in meters if o.component}):
        outs = [o for o in meters if o.component == comp]
        fed = sorted({o.host for o in outs if o.host and o.host in ix.nic_by_host})
        bits_of = fed if fed else sorted(ix.nic_by_host)
        figures, timelines["component:" + comp] = ix.scope(outs, bits_of)
        docs[comp] = ComponentScope(
            **_figures(figures),
            bits_from="hosts" if fed else "site",
            bits_hosts=bits_of,
            outlets=[o.name for o in outs],
        )
    return docs


def _coverage_warnings(sources: dict[str, SourceCoverage], threshold: float) -> list[str]:
    """A warning for each source whose coverage is below ``--coverage-threshold``."""
    return [
        f"coverage of {src} is {cov.coverage * 100:.1f} % "
        f"(below {threshold * 100:.0f} %); longest gap "
        f"{cov.longest_gap_seconds:.0f} s: figures from it are less certain"
        for src, cov in sources.items()
        if cov.coverage < threshold
    ]


def _outlet_warnings(g: Gathered, joules: dict[Outlet, float | None]) -> list[str]:
    """Each outlet's energy troubles: counter resets, no source, too coarse, disagreement."""
    warnings = []
    for o in g.outlets:
        what = "outlet" if o.kind == "outlets" else "meter"  # a PDU/bank/phase or a BMC
        if o.energy_source == "counter" and o.energy and o.energy.counter:
            r = o.energy.counter.resets
            if r:
                warnings.append(
                    f"energy counter of {what} {o.name} reset {r} time(s) in the window; "
                    "counted from zero after each reset"
                )
        if o.energy_source == "none":
            warnings.append(f"{what} {o.name}: neither watts nor an energy counter")
        if o.name in g.coarse:
            q = g.coarse[o.name]
            how = (
                f"did not move in the window while the {what} drew power"
                if q is None
                else f"moves in steps of {q:.0f} J"
            )
            warnings.append(
                f"energy counter of {what} {o.name} {how}, too coarse for this window: its "
                "host's energy is integrated from watts instead"
            )
        est = C.bin_energy(o.power.values, g.grid.edges) if o.power else None
        j = joules[o]
        if o.energy_source == "counter" and j and est:
            diff = (j - est) / est
            if abs(diff) > ENERGY_DISAGREEMENT:
                warnings.append(
                    f"{what} {o.name}: its energy counter ({j:.0f} J) and its "
                    f"watts ({est:.0f} J) disagree by {diff * 100:+.1f} %"
                )
    return warnings


def _window_doc(w: Window) -> ReportWindow:
    return ReportWindow(
        start=w.start,
        end=w.end,
        start_iso=_iso(w.start),
        end_iso=_iso(w.end),
        duration_seconds=w.duration,
        source=w.source,
        in_progress=w.in_progress,
    )


def _timings(g: Gathered, t0: float) -> dict[str, float]:
    """Seconds per phase of gathering, the analysis since ``t0``, and the whole report."""
    timings = dict(g.timings)
    timings["compute"] = time.monotonic() - t0
    rounded = {k: round(v, 3) for k, v in timings.items()}
    rounded["total"] = round(time.monotonic() - g.started, 3)
    return rounded


def _figures(s: Scope) -> dict[str, Any]:
    """A scope's fields as keyword arguments, to make a host or component of it."""
    return {f.name: getattr(s, f.name) for f in fields(Scope)}


def _outlet_energy(o: Outlet, w: Window) -> float | None:
    if o.energy_source == "counter" and o.energy is not None and o.energy.counter is not None:
        return o.energy.total
    if o.energy_source == "power" and o.power is not None:
        return C.integrate_power(o.power.raw or [], w.start, w.end)
    return None


def _scope(
    ix: _Index, outs: list[Outlet], nics: list[Track], disks: list[Track]
) -> tuple[Scope, Timeline]:
    grid, d = ix.g.grid, ix.g.window.duration
    tx, rx, gigabits, gbps = _bits(nics, grid.n)
    none: list[float | None] = [None] * grid.n
    watts = C.sum_bins([o.power.values if o.power else none for o in outs], grid.n)
    energy, source = _energy(outs, ix.joules)
    rel = _relation(gbps, watts, ix.idle_bins, ix.lag_steps)
    series = [t for o in outs for t in o.tracks()] + nics + disks
    by_src: dict[str, float] = {}
    for t in series:
        by_src[t.source] = min(by_src.get(t.source, 1.0), t.coverage)
    figures = Scope(
        duration_seconds=d,
        bytes_tx=tx,
        bytes_rx=rx,
        gigabits=gigabits,
        gbit_per_second_mean=gigabits / d if gigabits is not None else None,
        gbit_per_second_peak=C.max_present(gbps),
        energy_joules=energy,
        energy_source=source,
        watts_mean=energy / d if energy is not None else None,
        watts_peak=C.max_present(watts),
        joules_per_gigabit=energy / gigabits if energy is not None and gigabits else None,
        idle_watts=rel.idle_watts,
        idle_watts_source=rel.idle_source,
        idle_steps=rel.idle_steps,
        marginal_joules_per_gigabit=rel.fit.slope if rel.fit else None,
        r_squared=rel.fit.r_squared if rel.fit else None,
        fit_points=rel.points,
        pearson_r=rel.pearson_r,
        lag_seconds=rel.lag[0] * grid.step if rel.lag else None,
        pearson_r_at_lag=rel.lag[1] if rel.lag else None,
        coverage=min((t.coverage for t in series), default=None),
        coverage_sources=dict(sorted(by_src.items())),
    )
    return figures, Timeline(watts, gbps)


def _bits(
    nics: list[Track], n: int
) -> tuple[float | None, float | None, float | None, list[float | None]]:
    """Bytes sent and received, gigabits (None without NIC series) and Gbit/s per bin."""
    tx = math.fsum(t.total for t in nics if t.labels.get("direction") == "tx")
    rx = math.fsum(t.total for t in nics if t.labels.get("direction") == "rx")
    gbps = C.sum_bins(
        [[None if r is None else r * 8 / 1e9 for r in t.rates] for t in nics if t.counter], n
    )
    if not nics:
        return None, None, None, gbps
    return tx, rx, (tx + rx) * 8 / 1e9, gbps


def _energy(outs: list[Outlet], joules: dict[Outlet, float | None]) -> tuple[float | None, str]:
    """The outlets' energy (None when none of them has one) and where it comes from."""
    energies = [joules[o] for o in outs]
    energy = math.fsum(e for e in energies if e is not None) if outs else None
    if outs and all(e is None for e in energies):
        energy = None
    kinds = {o.energy_source for o in outs}
    source = "none" if not outs else kinds.pop() if len(kinds) == 1 else "mixed"
    return energy, source


@dataclass(frozen=True)
class _Relation:
    """Watts against Gbit/s: idle watts, the line above them, the correlation and its lag."""

    idle_watts: float | None
    idle_source: str | None  # "idle_phases", "fit" or None
    idle_steps: int
    fit: C.Fit | None
    points: int
    pearson_r: float | None
    lag: tuple[int, float] | None  # steps, r at that lag


def _relation(
    gbps: list[float | None], watts: list[float | None], idle_bins: list[int], lag_steps: int
) -> _Relation:
    xs, ys = C.paired(gbps, watts)
    # Idle phases measure idle watts: their median, since an idle phase's first steps still
    # carry the watts of the load before it (the PDU, the poll and the scrape each lag).
    # The marginal cost is then the slope of the line through that measured point.
    idle = [v for k in idle_bins if (v := watts[k]) is not None]
    idle_w = C.median(idle) if len(idle) >= MIN_IDLE_STEPS else None
    fit = C.least_squares(xs, ys) if idle_w is None else C.fit_through(xs, ys, idle_w)
    return _Relation(
        idle_watts=idle_w if idle_w is not None else fit.intercept if fit else None,
        idle_source="idle_phases" if idle_w is not None else "fit" if fit is not None else None,
        idle_steps=len(idle),
        fit=fit,
        points=len(xs),
        pearson_r=C.pearson(xs, ys),
        lag=C.best_lag(gbps, watts, lag_steps),
    )


@dataclass
class _Disk:
    """A device's figures while its tracks are read (a later track of a kind wins)."""

    coverage: float = 1.0
    busy: tuple[float, float, float | None] | None = None  # seconds, ratio, peak ratio
    bytes: dict[str, float] = field(default_factory=dict)
    mean: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float | None] = field(default_factory=dict)


def _disks(
    w: Window, tracks: list[Track]
) -> tuple[dict[str, DiskFigures], dict[str, list[float | None]]]:
    acc: dict[str, _Disk] = {}
    busy: dict[str, list[float | None]] = {}
    for tr in sorted(tracks, key=lambda t: (t.labels.get("device", ""), t.metric)):
        dev = tr.labels.get("device", "?")
        d = acc.setdefault(dev, _Disk())
        d.coverage = min(d.coverage, tr.coverage)
        assert tr.counter is not None
        rates = tr.rates
        if tr.metric == BUSY:
            d.busy = (tr.total, tr.total / w.duration, C.max_present(rates))
            busy[dev] = rates
        else:
            op = tr.labels.get("op", "?")
            d.bytes[op] = tr.total
            d.mean[op] = tr.total / w.duration
            d.peak[op] = C.max_present(rates)
    out = {
        dev: DiskFigures(
            coverage=d.coverage,
            busy_seconds=d.busy[0] if d.busy else None,
            busy_ratio=d.busy[1] if d.busy else None,
            busy_ratio_peak=d.busy[2] if d.busy else None,
            bytes=d.bytes,
            bytes_per_second_mean=d.mean,
            bytes_per_second_peak=d.peak,
        )
        for dev, d in acc.items()
    }
    return out, busy


def _disk_summary(disks: dict[str, DiskFigures]) -> DiskSummary | None:
    if not disks:
        return None
    ratios = {k: v.busy_ratio for k, v in disks.items() if v.busy_ratio is not None}
    total = {
        op: math.fsum(v.bytes_per_second_mean.get(op, 0.0) for v in disks.values())
        for op in sorted({op for v in disks.values() for op in v.bytes})
    }
    if not ratios:
        return DiskSummary(len(disks), total)
    busiest = max(ratios, key=lambda k: ratios[k])
    return DiskSummary(
        devices=len(disks),
        bytes_per_second_mean=total,
        busy_ratio_mean=math.fsum(ratios.values()) / len(ratios),
        busy_ratio_min=min(ratios.values()),
        busy_ratio_max=ratios[busiest],
        busiest=busiest,
    )


def _sources(tracks: Iterable[Track], outlets: list[Outlet]) -> dict[str, SourceCoverage]:
    used = {id(t) for o in outlets for t in o.tracks()}
    by: dict[str, list[Track]] = defaultdict(list)
    for t in tracks:
        if t.metric in METERS and id(t) not in used:
            continue  # an energy counter the report did not use
        by[t.source].append(t)
    return {
        src: SourceCoverage(
            coverage=min([1.0, *(t.coverage for t in ts)]),
            longest_gap_seconds=max([0.0, *(t.longest_gap for t in ts)]),
            series=len(ts),
            interval_seconds=max((t.interval for t in ts if t.interval), default=None),
        )
        for src, ts in sorted(by.items())
    }


def _outlet_doc(o: Outlet, grid: Grid, joules: float | None) -> OutletFigures:
    covs = [t.coverage for t in o.tracks()]
    return OutletFigures(
        pdu=o.labels.get("pdu", ""),
        outlet=o.labels.get("outlet", ""),
        outlet_name=o.labels.get("outlet_name", ""),
        host=o.host,
        component=o.component,
        energy_joules=joules,
        energy_source=o.energy_source,
        energy_note=o.energy_note or None,
        energy_counter_step_joules=o.energy_counter_step,
        energy_joules_from_watts_bins=(
            C.bin_energy(o.power.values, grid.edges) if o.power else None
        ),
        energy_counter_resets=(o.energy.counter.resets if o.energy and o.energy.counter else None),
        watts_peak=C.max_present(o.power.values) if o.power else None,
        coverage=min(covs) if covs else None,
    )


def _iso(t: float) -> str:
    """RFC 3339 in UTC: milliseconds before the Z when there are any."""
    d = datetime.fromtimestamp(round(t, 3), UTC)
    return d.isoformat(timespec="milliseconds" if d.microsecond else "seconds").replace(
        "+00:00", "Z"
    )


def _bins_inside(grid: Grid, p: PhaseRun) -> list[int]:
    """The bins wholly inside a phase (a millisecond of slack: both are rounded to it)."""
    e = grid.edges
    return [k for k in range(grid.n) if e[k] >= p.start - 1e-3 and e[k + 1] <= p.end + 1e-3]


def _energy_view(site: Scope, phases: list[PhaseFigures]) -> EnergyView | None:
    """The share of the site's energy that was idle power, and the data at the best phase's
    J/Gbit (of the phases that moved at least 0.01 Gbit/s, the idle ones excluded)."""
    energy = site.energy_joules
    if energy is None:
        return None
    idle = site.idle_watts * site.duration_seconds if site.idle_watts is not None else None
    best = min(
        (p for p in phases if p.phase != IDLE_PHASE and p.joules_per_gigabit is not None),
        key=lambda p: p.joules_per_gigabit or math.inf,
        default=None,
    )
    jpg = best.joules_per_gigabit if best is not None else None
    return EnergyView(
        energy_joules=energy,
        idle_joules=idle,
        idle_share=idle / energy if idle is not None and energy > 0 else None,
        best_phase=best.run if best is not None else None,
        best_phase_joules_per_gigabit=jpg,
        joules_at_best_phase=jpg * site.gigabits if jpg is not None and site.gigabits else None,
    )


def _phase_doc(
    p: PhaseRun, grid: Grid, site: Timeline, usage: V.Usage | None, hosts: list[str]
) -> PhaseFigures:
    bins = _bins_inside(grid, p)
    gbps = [v for k in bins if (v := site.gbps[k]) is not None]
    watts = [v for k in bins if (v := site.watts[k]) is not None]
    return PhaseFigures(
        run=p.run,
        phase=p.phase,
        labels=dict(p.labels),
        start=p.start,
        end=p.end,
        start_iso=_iso(p.start),
        end_iso=_iso(p.end),
        duration_seconds=p.end - p.start,
        steps=len(bins),
        gbit_per_second_mean=math.fsum(gbps) / len(gbps) if gbps else None,
        watts_mean=math.fsum(watts) / len(watts) if watts else None,
        limited_by={h: V.verdict(usage, h, bins) for h in hosts} if usage is not None else {},
    )


# --- comparing two runs -------------------------------------------------------------------


def compare(this: Report, other: Report) -> Comparison:
    """Side by side: for the site and every host and component in both, each figure's values."""

    def pair(a: Scope, b: Scope) -> CompareRows:
        out: CompareRows = {}
        for k in COMPARE_KEYS:
            va, vb = a.figure(k), b.figure(k)
            change = None
            if isinstance(va, int | float) and isinstance(vb, int | float) and vb != 0:
                change = (va - vb) / abs(vb)
            out[k] = CompareRow(va, vb, change)
        return out

    return Comparison(
        run=other.run,
        window=other.window,
        site=pair(this.site, other.site),
        hosts={
            h: pair(this.hosts[h], other.hosts[h])
            for h in sorted(set(this.hosts) & set(other.hosts))
        },
        components={
            c: pair(this.components[c], other.components[c])
            for c in sorted(set(this.components) & set(other.components))
        },
        only_in_this=sorted(set(this.hosts) - set(other.hosts)),
        only_in_other=sorted(set(other.hosts) - set(this.hosts)),
        report=other,
    )
