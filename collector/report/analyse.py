"""Read a run's series from Prometheus and turn them into the report's numbers.

The window ``(start, end]`` is cut into bins of one analysis step (the scrape interval, or
coarser for long windows so that there are at most ``max_bins`` bins). Prometheus reduces the
raw samples to one value per series and bin (``last_over_time`` for counters,
``avg_over_time`` for watts; both see only the samples inside the bin, so a scrape gap is an
empty bin and never a repeated value), and the report fetches raw samples only where exact
arithmetic needs them: counters that reset inside the window, and the watts of outlets whose
energy is integrated. ``count_over_time`` over the window gives the coverage. All the
arithmetic is in :mod:`collector.report.compute`.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import compute as C
from .prom import LabelKey, PromError, Prometheus, Series, duration, label_key, selector

NIC = "wattbit_nic_bytes_total"
BUSY = "wattbit_disk_busy_seconds_total"
DISK_IO = "wattbit_disk_io_bytes_total"
POWER = "wattbit_pdu_outlet_power_watts"
ENERGY = "wattbit_pdu_outlet_energy_joules_total"
COUNTERS = (NIC, BUSY, DISK_IO, ENERGY)
ALL = (NIC, BUSY, DISK_IO, POWER, ENERGY)
RUN_START = "wattbit_run_start_time_seconds"
RUN_END = "wattbit_run_end_time_seconds"
RUN_ACTIVE = "wattbit_run_active"

SCHEMA = "wattbit.report/1"
PROBE_SECONDS = 600.0
COARSE_COUNTER = 0.01  # an energy counter whose register step exceeds 1 % of the energy
ENERGY_DISAGREEMENT = 0.05  # warn when an energy counter and the watts differ by more
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


# --- finding a run ------------------------------------------------------------------------

LOOKBACKS = (86400.0, 7 * 86400.0, 31 * 86400.0, 366 * 86400.0)


def find_run(prom: Prometheus, run: str, now: float | None = None) -> Window:
    """The window of the latest run called ``run``, from the run registry's series."""
    now = time.time() if now is None else now
    sel = {"run": run}
    start: float | None = None
    for lb in LOOKBACKS:
        res = prom.query(f"max_over_time({selector(RUN_START, sel)}[{duration(lb)}])", now)
        if res:
            start = max(s.samples[-1][1] for s in res)
            break
    if start is None:
        raise ReportError(f"no run called {run!r} in Prometheus (no {RUN_START}{{run=...}})")
    span = duration(max(1.0, now - start) + 60)
    res = prom.query(f"max_over_time({selector(RUN_END, sel)}[{span}])", now)
    ends = [s.samples[-1][1] for s in res if s.samples[-1][1] >= start]
    if ends:
        return Window(run, start, max(ends), "run")
    # No end time: still going, or the registry never said. Use the run_active series.
    active = prom.query(selector(RUN_ACTIVE, sel), now)
    if any(s.samples[-1][1] >= 1 for s in active):
        return Window(run, start, now, "run", in_progress=True)
    raw = prom.raw(selector(RUN_ACTIVE, sel), start, now, chunk_seconds=86400.0)
    last = [t for s in raw for t, v in s.samples if v >= 1]
    if last:
        return Window(run, start, max(last), "run")
    raise ReportError(f"run {run!r} started at {start:.0f} but has no end; pass --start/--end")


# --- data model ---------------------------------------------------------------------------


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


@dataclass
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
        if not h and self.metric not in (POWER, ENERGY):
            h = self.labels.get("instance", "")
        return h

    @property
    def source(self) -> str:
        """The scrape source: ``agent:HOST`` or ``pdu:NAME``."""
        if self.metric in (POWER, ENERGY):
            return "pdu:" + self.labels.get("pdu", "?")
        return "agent:" + (self.host or "?")


@dataclass
class Outlet:
    """A PDU outlet: its power and (maybe) energy-counter tracks."""

    labels: dict[str, str]
    power: Track | None = None
    energy: Track | None = None
    energy_joules: float | None = None
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
    def name(self) -> str:
        """``pdu/outlet``."""
        return f"{self.labels.get('pdu', '?')}/{self.labels.get('outlet', '?')}"

    def tracks(self) -> list[Track]:
        """The tracks the report's numbers use (energy only when it is the counter source)."""
        out = [t for t in (self.power,) if t is not None]
        if self.energy is not None and self.energy_source == "counter":
            out.append(self.energy)
        return out


# --- gathering ----------------------------------------------------------------------------


class Gatherer:
    """Fetch and reduce every series of a window."""

    def __init__(self, prom: Prometheus, window: Window, opts: Options) -> None:
        self.prom = prom
        self.w = window
        self.opts = opts
        self.pool = ThreadPoolExecutor(max_workers=max(1, opts.workers))
        self.timings: dict[str, float] = {}
        self.coarse: dict[str, float] = {}  # outlets whose energy counter is too coarse
        self.interval = 0.0  # the longest scrape interval seen

    def sel(self, metric: str, labels: dict[str, str] | None = None) -> str:
        """Selector of a metric, with the interface filter on NIC series."""
        if metric == NIC and self.opts.interfaces and labels is None:
            return selector(metric, None, interface=self.opts.interfaces)
        return selector(metric, labels)

    def _map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        return list(self.pool.map(fn, items))

    def _timed(self, name: str, t0: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - t0

    def gather(self) -> tuple[Grid, dict[tuple[str, LabelKey], Track], list[Outlet]]:
        """Every track of the window reduced to the bins of the grid, and the outlets.

        The queries run concurrently in three waves: the sample counts and the interval probe
        (neither needs the step); then, with the step known, the bins, the reset counts and the
        raw watts of outlets whose energy is integrated; last, raw samples of the counters that
        reset (rare).
        """
        w, prom = self.w, self.prom
        if w.duration <= 0:
            raise ReportError("the window is empty (end is not after start)")
        prom.closed_ranges()
        t0 = time.monotonic()
        whole = prom.range_for(w.duration)
        p = min(w.duration, PROBE_SECONDS)
        count_f = {
            m: self.pool.submit(prom.query, f"count_over_time({self.sel(m)}[{whole}])", w.end)
            for m in ALL
        }
        probe_f = {
            m: self.pool.submit(prom.raw, self.sel(m), w.start, w.start + p, p + 1) for m in ALL
        }
        tracks: dict[tuple[str, LabelKey], Track] = {}
        for metric, fut in count_f.items():
            for s in fut.result():
                labels = _strip_name(s.labels)
                tracks[(metric, label_key(labels))] = Track(
                    metric, labels, n_samples=int(s.samples[-1][1])
                )
        if not tracks:
            raise ReportError(
                f"no wattbit series in Prometheus between {w.start:.0f} and {w.end:.0f}"
            )
        self._timed("count", t0)
        t0 = time.monotonic()
        self._set_intervals(tracks, {m: f.result() for m, f in probe_f.items()})
        mid = w.start + (w.duration - p) / 2
        for a, b in ((w.end - p, w.end), (mid, mid + p)):  # series the first slice missed
            missing = {m for (m, _k), t in tracks.items() if t.interval is None}
            if not missing:
                break
            self._set_intervals(
                tracks,
                dict(
                    self._map(lambda m, a=a, b=b: (m, prom.raw(self.sel(m), a, b, p + 1)), missing)
                ),
            )
        self._timed("probe", t0)
        interval = self.interval = max(
            (t.interval for t in tracks.values() if t.interval), default=15.0
        )
        step = self.opts.step or C.choose_step(interval, w.duration, self.opts.max_bins)
        grid = Grid.make(w.start, w.end, step)
        for tr in tracks.values():
            tr.interval = tr.interval or self._fallback_interval(tr, tracks, step)
            tr.coverage = C.coverage(tr.n_samples, tr.interval, w.duration)
        outlets = _outlets(tracks)
        integrate = [o.power for o in _choose_energy_sources(outlets) if o.power is not None]

        t0 = time.monotonic()
        jobs: list[tuple[str, str]] = [(m, "last_over_time") for m in COUNTERS]
        jobs.append((POWER, "avg_over_time"))
        jobs += [(m, "resets") for m in COUNTERS]
        bins_f = {j: self.pool.submit(self._bins, grid, *j) for j in jobs}
        raw_f = [self.pool.submit(self._raw, tr, grid) for tr in integrate]
        binned = {j: f.result() for j, f in bins_f.items()}
        for tr, f in zip(integrate, raw_f, strict=True):
            tr.raw = f.result()
        self._timed("bins", t0)
        for (metric, key), tr in tracks.items():
            if metric in COUNTERS:
                points = binned[(metric, "last_over_time")].get(key, {})
                last = [points.get(k) for k in range(grid.n + 1)]
                tr.counter = C.counter_from_last(last)
                tr.present = [v is not None for v in last[1:]]
            else:
                points = binned[(POWER, "avg_over_time")].get(key, {})
                tr.values = [points.get(k + 1) for k in range(grid.n)]
                tr.present = [v is not None for v in tr.values]

        # raw samples where the bins are not exact: counters that reset in the window
        t0 = time.monotonic()
        resets = [
            tr
            for (metric, key), tr in tracks.items()
            if metric in COUNTERS and binned[(metric, "resets")].get(key, {}).get(grid.n, 0) > 0
        ]
        for tr, raw in zip(resets, self._map(lambda t: self._raw(t, grid), resets), strict=True):
            tr.raw = raw
            tr.counter = C.bin_counter(raw, grid.edges)
            tr.present = [False] * grid.n
            for t, _v in raw:
                if grid.start < t <= grid.end:
                    tr.present[_bin_of(grid, t)] = True
        self._timed("raw_counters", t0)
        for tr in tracks.values():
            tr.longest_gap = C.longest_gap(tr.present, grid.edges)
            if tr.counter is not None:
                tr.rates = tr.counter.rates(grid.edges)
                tr.total = tr.counter.total()

        # energy counters too coarse for this window: integrate those hosts' watts instead
        coarse = self.coarse = _coarse_counters(outlets)
        if coarse:
            t0 = time.monotonic()
            fetched = {id(t) for t in integrate}
            again = [o.power for o in _choose_energy_sources(outlets, set(coarse))]
            late = [t for t in again if t is not None and id(t) not in fetched]
            for tr, raw in zip(late, self._map(lambda t: self._raw(t, grid), late), strict=True):
                tr.raw = raw
            self._timed("raw_power_coarse", t0)
        return grid, tracks, outlets

    def _raw(self, tr: Track, grid: Grid) -> list[tuple[float, float]]:
        """Raw samples of one track in ``(start - step, end]`` (the step before is the base)."""
        chunk = max(60.0, 20_000 * (tr.interval or grid.step))
        res = self.prom.raw(
            selector(tr.metric, tr.labels), grid.start - grid.step, grid.end, chunk_seconds=chunk
        )
        return [p for p in res[0].samples if math.isfinite(p[1])] if res else []

    def _bins(self, grid: Grid, metric: str, fn: str) -> dict[LabelKey, dict[int, float]]:
        """``fn(metric[bin])`` for every bin: {labels: {edge index: value}}."""
        prom, sel = self.prom, self.sel(metric)
        out: dict[LabelKey, dict[int, float]] = defaultdict(dict)

        def put(series: list[Series]) -> None:
            start, step, end, n = grid.start, grid.step, grid.end, grid.n
            for s in series:
                # some functions keep the metric name (last_over_time), most drop it
                d = out[label_key(_strip_name(s.labels))]
                for t, v in s.samples:
                    if v != v:  # NaN
                        continue
                    if abs(t - end) < 1e-3:
                        d[n] = v
                        continue
                    k = round((t - start) / step)
                    if 0 <= k < n and abs(start + k * step - t) < 1e-3:
                        d[k] = v

        if fn == "resets":  # one number over the whole window and the step before it
            span = prom.range_for(grid.end - grid.start + grid.step)
            put(_at(prom.query(f"resets({sel}[{span}])", grid.end), grid.end))
            return out
        # bins 0..n-2 end on the regular grid; the last one ends at `end` and may be shorter
        first = 0 if fn == "last_over_time" else 1  # edge 0 is the counters' base
        if grid.n - 1 >= first:
            put(
                prom.query_range(
                    f"{fn}({sel}[{prom.range_for(grid.step)}])",
                    grid.edges[first],
                    grid.edges[grid.n - 1],
                    grid.step,
                )
            )
        last_len = grid.end - grid.edges[grid.n - 1]
        put(_at(prom.query(f"{fn}({sel}[{prom.range_for(last_len)}])", grid.end), grid.end))
        return out

    @staticmethod
    def _set_intervals(
        tracks: dict[tuple[str, LabelKey], Track], probed: dict[str, list[Series]]
    ) -> None:
        """Scrape interval of each series: median spacing of its raw samples in a probe slice."""
        for metric, series in probed.items():
            for s in series:
                tr = tracks.get((metric, label_key(_strip_name(s.labels))))
                if tr is not None and tr.interval is None:
                    tr.interval = C.median_interval([t for t, _ in s.samples])

    @staticmethod
    def _fallback_interval(
        tr: Track, tracks: dict[tuple[str, LabelKey], Track], step: float
    ) -> float:
        same = [t.interval for t in tracks.values() if t.interval and t.source == tr.source]
        if same:
            return sorted(same)[len(same) // 2]
        return step


def _strip_name(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "__name__"}


def _at(series: list[Series], t: float) -> list[Series]:
    """Stamp instant-query answers with exactly ``t`` (Prometheus rounds to ms)."""
    for s in series:
        s.samples = [(t, v) for _, v in s.samples]
    return series


def _bin_of(grid: Grid, t: float) -> int:
    k = min(grid.n - 1, max(0, math.ceil((t - grid.start) / grid.step - 1e-9) - 1))
    while k + 1 < grid.n and t > grid.edges[k + 1]:
        k += 1
    return k


# --- the numbers --------------------------------------------------------------------------


@dataclass
class Timeline:
    """Per-bin series of one scope, for the charts."""

    watts: list[float | None]
    gbps: list[float | None]


@dataclass
class Result:
    """A report: the JSON document and the per-bin series behind its charts."""

    doc: dict[str, Any]
    grid: Grid
    timelines: dict[str, Timeline]  # "site", "host:NAME", "component:NAME"
    disk_busy: dict[str, dict[str, list[float | None]]]  # host -> device -> busy ratio per bin
    outlets: list[Outlet]


def analyse(prom: Prometheus, window: Window, opts: Options | None = None) -> Result:
    """Make the report of one window."""
    opts = opts or Options()
    t_start = time.monotonic()
    g = Gatherer(prom, window, opts)
    try:
        grid, tracks, outlets = g.gather()
        coarse_steps = g.coarse
    finally:
        g.pool.shutdown(wait=False)
    t0 = time.monotonic()
    for o in outlets:
        _outlet_energy(o, window)
    warnings: list[str] = []
    if grid.step < g.interval - 1e-9:
        warnings.append(
            f"the step ({grid.step:g} s) is shorter than the longest scrape interval "
            f"({g.interval:g} s): many steps have no sample and stay out of the fit"
        )
    if window.in_progress:
        warnings.append(f"run {window.name!r} is still going: the window ends now")
    nic_by_host: dict[str, list[Track]] = defaultdict(list)
    disk_by_host: dict[str, list[Track]] = defaultdict(list)
    for (metric, _), tr in tracks.items():
        if metric == NIC:
            nic_by_host[tr.host].append(tr)
        elif metric in (BUSY, DISK_IO):
            disk_by_host[tr.host].append(tr)
    outlet_hosts = {o.host for o in outlets if o.host}
    hosts = sorted(set(nic_by_host) | set(disk_by_host) | outlet_hosts)
    lag_steps = max(1, math.ceil(opts.max_lag / grid.step - 1e-9))

    def scope(
        outs: list[Outlet], nic_hosts: list[str], extra: dict[str, Any]
    ) -> tuple[dict[str, Any], Timeline]:
        nics = [tr for h in nic_hosts for tr in nic_by_host.get(h, [])]
        disks = [tr for h in nic_hosts for tr in disk_by_host.get(h, [])]
        return _scope(grid, window, outs, nics, disks, lag_steps, extra)

    timelines: dict[str, Timeline] = {}
    host_docs: dict[str, Any] = {}
    disk_busy: dict[str, dict[str, list[float | None]]] = {}
    for h in hosts:
        outs = [o for o in outlets if o.host == h]
        d, tl = scope(outs, [h], {})
        d["interfaces"] = sorted(
            {f"{t.labels.get('interface', '?')}" for t in nic_by_host.get(h, [])}
        )
        d["outlets"] = [o.name for o in outs]
        d["disks"], disk_busy[h] = _disks(grid, window, disk_by_host.get(h, []))
        d["disk_summary"] = _disk_summary(d["disks"])
        host_docs[h] = d
        timelines["host:" + h] = tl
        if not outs:
            warnings.append(f"host {h}: no PDU outlet is mapped to it, so no energy figures")
        if h not in nic_by_host:
            warnings.append(f"host {h}: no NIC byte counters, so no Gbit/s figures")

    comp_docs: dict[str, Any] = {}
    for comp in sorted({o.component for o in outlets if o.component}):
        outs = [o for o in outlets if o.component == comp]
        fed = sorted({o.host for o in outs if o.host and o.host in nic_by_host})
        bits_of = fed if fed else sorted(nic_by_host)
        d, tl = scope(outs, bits_of, {"bits_from": "hosts" if fed else "site"})
        d["bits_hosts"] = bits_of
        d["outlets"] = [o.name for o in outs]
        comp_docs[comp] = d
        timelines["component:" + comp] = tl

    site_doc, timelines["site"] = scope(outlets, sorted(nic_by_host), {})

    sources = _sources(tracks.values(), outlets)
    for src, cov in sorted(sources.items()):
        if cov["coverage"] < opts.coverage_threshold:
            warnings.append(
                f"coverage of {src} is {cov['coverage'] * 100:.1f} % "
                f"(below {opts.coverage_threshold * 100:.0f} %); longest gap "
                f"{cov['longest_gap_seconds']:.0f} s: figures from it are less certain"
            )
    for o in outlets:
        if o.energy_source == "counter" and o.energy and o.energy.counter:
            r = o.energy.counter.resets
            if r:
                warnings.append(
                    f"energy counter of outlet {o.name} reset {r} time(s) in the window; "
                    "counted from zero after each reset"
                )
        if o.energy_source == "none":
            warnings.append(f"outlet {o.name}: neither watts nor an energy counter")
        if o.name in coarse_steps:
            warnings.append(
                f"energy counter of outlet {o.name} moves in steps of "
                f"{coarse_steps[o.name]:.0f} J, too coarse for this window: its host's energy "
                "is integrated from watts instead"
            )
        est = C.bin_energy(o.power.values, grid.edges) if o.power else None
        if o.energy_source == "counter" and o.energy_joules and est:
            diff = (o.energy_joules - est) / est
            if abs(diff) > ENERGY_DISAGREEMENT:
                warnings.append(
                    f"outlet {o.name}: its energy counter ({o.energy_joules:.0f} J) and its "
                    f"watts ({est:.0f} J) disagree by {diff * 100:+.1f} %"
                )

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run": window.name,
        "window": {
            "start": window.start,
            "end": window.end,
            "start_iso": _iso(window.start),
            "end_iso": _iso(window.end),
            "duration_seconds": window.duration,
            "source": window.source,
            "in_progress": window.in_progress,
        },
        "prometheus": prom.url,
        "generated_at": _iso(time.time()),
        "step_seconds": grid.step,
        "max_lag_seconds": lag_steps * grid.step,
        "coverage_threshold": opts.coverage_threshold,
        "interfaces_regex": opts.interfaces,
        "site": site_doc,
        "hosts": host_docs,
        "components": comp_docs,
        "outlets": [_outlet_doc(o, grid) for o in outlets],
        "sources": sources,
        "warnings": warnings,
    }
    g._timed("compute", t0)
    doc["timings_seconds"] = {k: round(v, 3) for k, v in g.timings.items()}
    doc["timings_seconds"]["total"] = round(time.monotonic() - t_start, 3)
    doc["prometheus_requests"] = prom.requests
    return Result(doc, grid, timelines, disk_busy, outlets)


def _outlets(tracks: dict[tuple[str, LabelKey], Track]) -> list[Outlet]:
    by: dict[LabelKey, Outlet] = {}
    for (metric, _), tr in tracks.items():
        if metric not in (POWER, ENERGY):
            continue
        ident = {k: v for k, v in tr.labels.items() if k not in TARGET_LABELS}
        o = by.setdefault(label_key(ident), Outlet(ident))
        if metric == POWER:
            o.power = tr
        else:
            o.energy = tr
    return sorted(by.values(), key=lambda o: (o.labels.get("pdu", ""), _natural(o)))


def _natural(o: Outlet) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in o.labels.get("outlet", "").split("."))


def _choose_energy_sources(outlets: list[Outlet], coarse: set[str] | None = None) -> list[Outlet]:
    """Counters for a host whose every outlet has a usable one; else integrate all its watts.

    A counter is unusable when it has fewer than two samples or is in ``coarse`` (its
    register steps are too big for the window's energy). Outlets that feed no host decide
    alone. Returns the outlets whose watts are integrated.
    """
    coarse = coarse or set()
    groups: dict[str, list[Outlet]] = defaultdict(list)
    for o in outlets:
        groups[o.host if o.host else "\0" + o.name].append(o)
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
                if o.name in coarse:
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


def _coarse_counters(outlets: list[Outlet]) -> dict[str, float]:
    """Outlets whose energy counter moves in steps bigger than 1 % of the window's energy.

    PDUs keep energy in Wh, 0.01 kWh or 0.1 kWh registers; a 0.1 kWh (360 kJ) register over a
    20-minute run at 300 W moves once or twice. {outlet name: register step in joules}.
    """
    out: dict[str, float] = {}
    for o in outlets:
        if o.energy is None or o.energy.counter is None or o.power is None:
            continue
        q = C.counter_step(o.energy.counter.increase, o.power.values)
        o.energy_counter_step = q
        if q is not None and (math.isinf(q) or q > COARSE_COUNTER * max(o.energy.total, 0.0)):
            out[o.name] = q
    return out


def _outlet_energy(o: Outlet, w: Window) -> None:
    if o.energy_source == "counter" and o.energy is not None and o.energy.counter is not None:
        o.energy_joules = o.energy.total
    elif o.energy_source == "power" and o.power is not None:
        o.energy_joules = C.integrate_power(o.power.raw or [], w.start, w.end)


def _scope(
    grid: Grid,
    w: Window,
    outs: list[Outlet],
    nics: list[Track],
    disks: list[Track],
    lag_steps: int,
    extra: dict[str, Any],
) -> tuple[dict[str, Any], Timeline]:
    n = grid.n
    tx = math.fsum(t.total for t in nics if t.labels.get("direction") == "tx")
    rx = math.fsum(t.total for t in nics if t.labels.get("direction") == "rx")
    none: list[float | None] = [None] * n
    gbps = C.sum_bins(
        [[None if r is None else r * 8 / 1e9 for r in t.rates] for t in nics if t.counter], n
    )
    watts = C.sum_bins([o.power.values if o.power else none for o in outs], n)
    energies = [o.energy_joules for o in outs]
    energy = math.fsum(e for e in energies if e is not None) if outs else None
    if outs and all(e is None for e in energies):
        energy = None
    kinds = {o.energy_source for o in outs}
    source = "none" if not outs else kinds.pop() if len(kinds) == 1 else "mixed"
    gigabits = (tx + rx) * 8 / 1e9 if nics else None
    d = w.duration
    doc: dict[str, Any] = {
        "duration_seconds": d,
        "bytes_tx": tx if nics else None,
        "bytes_rx": rx if nics else None,
        "gigabits": gigabits,
        "gbit_per_second_mean": gigabits / d if gigabits is not None else None,
        "gbit_per_second_peak": C.max_present(gbps),
        "energy_joules": energy,
        "energy_source": source,
        "watts_mean": energy / d if energy is not None else None,
        "watts_peak": C.max_present(watts),
        "joules_per_gigabit": (energy / gigabits if energy is not None and gigabits else None),
    }
    xs, ys = C.paired(gbps, watts)
    fit = C.least_squares(xs, ys)
    doc["idle_watts"] = fit.intercept if fit else None
    doc["marginal_joules_per_gigabit"] = fit.slope if fit else None
    doc["r_squared"] = fit.r_squared if fit else None
    doc["fit_points"] = len(xs)
    doc["pearson_r"] = C.pearson(xs, ys)
    best = C.best_lag(gbps, watts, lag_steps)
    doc["lag_seconds"] = best[0] * grid.step if best else None
    doc["pearson_r_at_lag"] = best[1] if best else None
    series = [t for o in outs for t in o.tracks()] + nics + disks
    doc["coverage"] = min((t.coverage for t in series), default=None)
    by_src: dict[str, float] = {}
    for t in series:
        by_src[t.source] = min(by_src.get(t.source, 1.0), t.coverage)
    doc["coverage_sources"] = dict(sorted(by_src.items()))
    doc.update(extra)
    return doc, Timeline(watts, gbps)


def _disks(
    grid: Grid, w: Window, tracks: list[Track]
) -> tuple[dict[str, Any], dict[str, list[float | None]]]:
    out: dict[str, Any] = {}
    busy: dict[str, list[float | None]] = {}
    for tr in sorted(tracks, key=lambda t: (t.labels.get("device", ""), t.metric)):
        dev = tr.labels.get("device", "?")
        d = out.setdefault(dev, {"coverage": 1.0})
        d["coverage"] = min(d["coverage"], tr.coverage)
        assert tr.counter is not None
        rates = tr.rates
        if tr.metric == BUSY:
            d["busy_seconds"] = tr.total
            d["busy_ratio"] = tr.total / w.duration
            d["busy_ratio_peak"] = C.max_present(rates)
            busy[dev] = rates
        else:
            op = tr.labels.get("op", "?")
            total = tr.total
            d.setdefault("bytes", {})[op] = total
            d.setdefault("bytes_per_second_mean", {})[op] = total / w.duration
            d.setdefault("bytes_per_second_peak", {})[op] = C.max_present(rates)
    return out, busy


def _disk_summary(disks: dict[str, Any]) -> dict[str, Any] | None:
    ratios = {k: v["busy_ratio"] for k, v in disks.items() if "busy_ratio" in v}
    if not disks:
        return None
    total = {
        op: math.fsum(v.get("bytes_per_second_mean", {}).get(op, 0.0) for v in disks.values())
        for op in sorted({op for v in disks.values() for op in v.get("bytes", {})})
    }
    out: dict[str, Any] = {"devices": len(disks), "bytes_per_second_mean": total}
    if ratios:
        busiest = max(ratios, key=lambda k: ratios[k])
        out.update(
            busy_ratio_mean=math.fsum(ratios.values()) / len(ratios),
            busy_ratio_min=min(ratios.values()),
            busy_ratio_max=ratios[busiest],
            busiest=busiest,
        )
    return out


def _sources(tracks: Iterable[Track], outlets: list[Outlet]) -> dict[str, Any]:
    used = {id(t) for o in outlets for t in o.tracks()}
    out: dict[str, dict[str, Any]] = {}
    for t in tracks:
        if t.metric in (POWER, ENERGY) and id(t) not in used:
            continue  # an energy counter the report did not use
        s = out.setdefault(
            t.source,
            {"coverage": 1.0, "longest_gap_seconds": 0.0, "series": 0, "interval_seconds": None},
        )
        s["coverage"] = min(s["coverage"], t.coverage)
        s["longest_gap_seconds"] = max(s["longest_gap_seconds"], t.longest_gap)
        s["series"] += 1
        if t.interval and (s["interval_seconds"] is None or t.interval > s["interval_seconds"]):
            s["interval_seconds"] = t.interval
    return dict(sorted(out.items()))


def _outlet_doc(o: Outlet, grid: Grid) -> dict[str, Any]:
    covs = [t.coverage for t in o.tracks()]
    return {
        "pdu": o.labels.get("pdu", ""),
        "outlet": o.labels.get("outlet", ""),
        "outlet_name": o.labels.get("outlet_name", ""),
        "host": o.host,
        "component": o.component,
        "energy_joules": o.energy_joules,
        "energy_source": o.energy_source,
        "energy_note": o.energy_note or None,
        "energy_counter_step_joules": o.energy_counter_step,
        "energy_joules_from_watts_bins": (
            C.bin_energy(o.power.values, grid.edges) if o.power else None
        ),
        "energy_counter_resets": (
            o.energy.counter.resets if o.energy and o.energy.counter else None
        ),
        "watts_peak": C.max_present(o.power.values) if o.power else None,
        "coverage": min(covs) if covs else None,
    }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) + (
        f"{t % 1:.3f}"[1:] if t % 1 else ""
    )


# --- comparing two runs -------------------------------------------------------------------

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


def compare(this: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Side by side: for the site and every host and component in both, each key's values."""

    def pair(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k in COMPARE_KEYS:
            va, vb = a.get(k), b.get(k)
            row: dict[str, Any] = {"this": va, "other": vb, "change": None}
            if isinstance(va, int | float) and isinstance(vb, int | float) and vb != 0:
                row["change"] = (va - vb) / abs(vb)
            out[k] = row
        return out

    return {
        "run": other["run"],
        "window": other["window"],
        "site": pair(this["site"], other["site"]),
        "hosts": {
            h: pair(this["hosts"][h], other["hosts"][h])
            for h in sorted(set(this["hosts"]) & set(other["hosts"]))
        },
        "components": {
            c: pair(this["components"][c], other["components"][c])
            for c in sorted(set(this["components"]) & set(other["components"]))
        },
        "only_in_this": sorted(set(this["hosts"]) - set(other["hosts"])),
        "only_in_other": sorted(set(other["hosts"]) - set(this["hosts"])),
        "report": {k: v for k, v in other.items() if k != "compare"},
    }


__all__ = [
    "Options",
    "PromError",
    "ReportError",
    "Result",
    "Window",
    "analyse",
    "compare",
    "find_run",
]
