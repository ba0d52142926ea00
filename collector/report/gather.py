"""All of the report's Prometheus I/O: find a run's window, fetch and reduce its series.

The window ``(start, end]`` is cut into bins of one analysis step (the scrape interval, or
coarser for long windows so that there are at most ``max_bins`` bins). Prometheus reduces the
raw samples to one value per series and bin (``last_over_time`` for counters,
``avg_over_time`` for watts; both see only the samples inside the bin, so a scrape gap is an
empty bin and never a repeated value), and the report fetches raw samples only where exact
arithmetic needs them: counters that reset inside the window, and the watts of outlets whose
energy is integrated. ``count_over_time`` over the window gives the coverage.

The verdict's queries (:class:`~.series.VerdictData`: topology over the window, the
capacities of NICs and PCIe links per step, the rates of its counters per step) run in the same
pool, submitted as soon as the grid is known; the verdict itself (:mod:`.verdict`) reads no
store. The public interface is :func:`find_run` and :func:`gather`, which returns a
:class:`Gathered`; everything else here is private.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import binned as B
from . import compute as C
from .prom import LabelKey, PromError, Prometheus, Series, duration, label_key, selector
from .series import (
    ALL,
    COUNTERS,
    FLOW_GAUGES,
    NIC,
    PART_OF_LABEL,
    PHASE_LABEL,
    POWERS,
    RUN_ACTIVE,
    RUN_END,
    RUN_INFO,
    RUN_START,
    VERDICT_COUNTERS,
    Bins,
    Grid,
    Options,
    Outlet,
    PhaseRun,
    ReportError,
    Track,
    VerdictData,
    Window,
    choose_energy_sources,
    coarse_counters,
    outlets_of,
    run_labels,
)
from .verdict.tcp import subject as flow_subject

PROBE_SECONDS = 600.0
_Tracks = dict[tuple[str, LabelKey], Track]  # by metric and labels
LOOKBACKS = (86400.0, 7 * 86400.0, 31 * 86400.0, 366 * 86400.0)


# --- finding a run ------------------------------------------------------------------------


def find_run(
    prom: Prometheus, run: str, now: float | None = None, match: dict[str, str] | None = None
) -> Window:
    """The window of the latest run called ``run``, from the run registry's series.

    ``match``: labels every series read must have (``--match``), e.g. one site's in a store
    that holds several.
    """
    now = time.time() if now is None else now
    sel = {**(match or {}), "run": run}
    start: float | None = None
    for lb in LOOKBACKS:
        res = prom.query(f"max_over_time({selector(RUN_START, sel)}[{duration(lb)}])", now)
        if res:
            start = max(s.samples[-1][1] for s in res)
            break
    if start is not None and not math.isfinite(start):  # a time; a hostile store sends NaN
        raise PromError(f"{prom.url}: {RUN_START}{{run={run!r}}} is {start}, not a time")
    if start is None:
        raise ReportError(f"no run called {run!r} in Prometheus (no {RUN_START}{{run=...}})")
    span = duration(max(1.0, now - start) + 60)
    res = prom.query(f"max_over_time({selector(RUN_END, sel)}[{span}])", now)
    ends = [e for s in res if math.isfinite(e := s.samples[-1][1]) and e >= start]
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


def find_phases(
    prom: Prometheus, window: Window, interval: float, match: dict[str, str] | None = None
) -> list[PhaseRun]:
    """The runs marked as phases of ``window``, in the order they started.

    A phase is a run labelled ``phase=KIND``; of a run's report, those also labelled
    ``part_of=RUN``, of a ``--start/--end`` window every one. Only phases that start and end
    inside the window count (a phase whose name was started again since is left out); one
    still going at the window's end ends there. An ended run's end time reaches Prometheus at
    the collector's next scrape, so the registry's series are read up to a few scrape
    intervals past the window.
    """
    margin = max(5.0, 3.0 * interval)
    at = window.end + margin
    span = duration(window.duration + 2.0 * margin)
    info, starts, ends = (
        prom.query(f"max_over_time({selector(metric, match)}[{span}])", at)
        for metric in (RUN_INFO, RUN_START, RUN_END)
    )
    start_of = {s.labels.get("run", ""): s.samples[-1][1] for s in starts if s.samples}
    end_of = {s.labels.get("run", ""): s.samples[-1][1] for s in ends if s.samples}
    found: dict[str, PhaseRun] = {}  # by run: two collectors export the same registry
    for s in info:
        run = s.labels.get("run", "")
        labels = run_labels(s.labels.get("labels", ""))
        kind = labels.get(PHASE_LABEL)
        if not kind or run not in start_of or run in found:
            continue
        if window.source == "run" and labels.get(PART_OF_LABEL) != window.name:
            continue
        start, end = start_of[run], end_of.get(run)
        if end is None or end < start:
            end = window.end  # still going (or not yet scraped as ended)
        # a millisecond either way: the registry's times and the window's are rounded to it
        if start < window.start - 1e-3 or start >= window.end or end > window.end + 1e-3:
            continue
        found[run] = PhaseRun(run, kind, start, min(end, window.end), labels)
    return sorted(found.values(), key=lambda p: (p.start, p.end, p.run))


# --- gathering ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Gathered:
    """Every series of a window reduced to the bins of its grid, and how getting them went."""

    window: Window
    options: Options
    grid: Grid
    tracks: list[Track]  # in the order Prometheus listed them, metric by metric
    outlets: list[Outlet]  # energy sources chosen
    coarse: dict[str, float | None]  # too-coarse energy counters: {outlet: step J or None}
    interval: float  # the longest scrape interval seen
    timings: dict[str, float]  # seconds per phase, in the order they ran
    started: float  # time.monotonic() when gathering began
    prometheus: str  # the server's URL
    requests: int  # HTTP requests the client had made when gathering ended
    phases: list[PhaseRun] = field(default_factory=list)  # runs marked as its phases
    verdict: VerdictData | None = None  # what the verdict needs beyond the tracks
    verdict_error: str = ""  # why there is no verdict, when its queries failed


def gather(prom: Prometheus, window: Window, opts: Options | None = None) -> Gathered:
    """Fetch and reduce every series of ``window``; raises ReportError when there are none."""
    opts = opts or Options()
    started = time.monotonic()
    g = _Gatherer(prom, window, opts)
    try:
        grid, tracks, outlets = g.run()
        t0 = time.monotonic()
        phases = find_phases(prom, window, g.interval, opts.match)
        g.timings["phases"] = time.monotonic() - t0
        t0 = time.monotonic()
        data, verdict_error = None, ""
        try:
            data = g.verdict_data(grid)
        except PromError as exc:  # the verdict is left out, the rest of the report stands
            if exc.fatal:  # no answer in time, or one beyond the caps: the store is not fit
                raise
            verdict_error = str(exc)
        g.timings["verdict"] = time.monotonic() - t0  # the wait left once the bins are in
    finally:
        g.pool.shutdown(wait=False, cancel_futures=True)
    return Gathered(
        window=window,
        options=opts,
        grid=grid,
        tracks=list(tracks.values()),
        outlets=outlets,
        coarse=g.coarse,
        interval=g.interval,
        timings=g.timings,
        started=started,
        prometheus=prom.url,
        requests=prom.requests,
        phases=phases,
        verdict=data,
        verdict_error=verdict_error,
    )


class _Gatherer:
    """One window's fetches, four at a time."""

    def __init__(self, prom: Prometheus, window: Window, opts: Options) -> None:
        self.prom = prom
        self.w = window
        self.opts = opts
        self.pool = ThreadPoolExecutor(max_workers=max(1, opts.workers))
        self.timings: dict[str, float] = {}
        self.coarse: dict[str, float | None] = {}
        self.interval = 0.0
        # the verdict's queries, submitted as soon as the grid is known, ahead of the bins'
        self.verdict: _VerdictFutures | None = None

    def sel(self, metric: str, labels: dict[str, str] | None = None) -> str:
        """Selector of a metric, with --match's labels and the interface filter on NIC series."""
        if metric == NIC and self.opts.interfaces and labels is None:
            return selector(metric, self.opts.match, interface=self.opts.interfaces)
        return selector(metric, {**self.opts.match, **(labels or {})})

    def _map(self, fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
        return list(self.pool.map(fn, items))

    def _timed(self, name: str, t0: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - t0

    def run(self) -> tuple[Grid, _Tracks, list[Outlet]]:
        """Every track of the window reduced to the bins of the grid, and the outlets.

        The queries run concurrently in three waves: the sample counts and the interval probe
        (neither needs the step); then, with the step known, the bins, the reset counts and the
        raw watts of outlets whose energy is integrated; last, raw samples of the counters that
        reset (rare). Energy counters too coarse for the window add a fourth, for the watts of
        their outlets.
        """
        if self.w.duration <= 0:
            raise ReportError("the window is empty (end is not after start)")
        self.prom.closed_ranges()
        tracks, probed = self._count()
        self._probe(tracks, probed)
        grid = self._grid(tracks)
        self.verdict = self._verdict_queries(grid)
        outlets = outlets_of(list(tracks.values()))
        integrate = [o.power for o in choose_energy_sources(outlets) if o.power is not None]
        resets = self._bin(grid, tracks, integrate)
        self._raw_counters(grid, resets)
        for tr in tracks.values():
            tr.longest_gap = C.longest_gap(tr.present, grid.edges)
            if tr.counter is not None:
                tr.rates = tr.counter.rates(grid.edges, tr.interval or 0.0)
                tr.total = tr.counter.total()
        self._raw_power_coarse(grid, outlets, integrate)
        return grid, tracks, outlets

    def _count(self) -> tuple[_Tracks, dict[str, Future[list[Series]]]]:
        """Wave one: a track per series with its sample count, and the probe slices asked for."""
        w, prom = self.w, self.prom
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
        tracks: _Tracks = {}
        for metric, fut in count_f.items():
            for s in fut.result():
                labels = B.strip_name(s.labels)
                n = s.samples[-1][1]
                if not (math.isfinite(n) and n >= 0):  # a count; a hostile store sends NaN
                    raise PromError(f"{prom.url}: count_over_time({metric}) answered {n}")
                tracks[(metric, label_key(labels))] = Track(metric, labels, n_samples=int(n))
        if not tracks:
            raise ReportError(
                f"no wattbit series in Prometheus between {w.start:.0f} and {w.end:.0f}"
            )
        self._timed("count", t0)
        return tracks, probe_f

    def _probe(self, tracks: _Tracks, probed: dict[str, Future[list[Series]]]) -> None:
        """Each series' scrape interval from the first probe slice, or the last, or the middle."""
        w, prom = self.w, self.prom
        t0 = time.monotonic()
        p = min(w.duration, PROBE_SECONDS)
        self._set_intervals(tracks, {m: f.result() for m, f in probed.items()})
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

    def _grid(self, tracks: _Tracks) -> Grid:
        """The analysis grid (the step from the longest interval), and each track's coverage."""
        w = self.w
        interval = self.interval = max(
            (t.interval for t in tracks.values() if t.interval), default=15.0
        )
        step = self.opts.step or C.choose_step(interval, w.duration, self.opts.max_bins)
        grid = Grid.make(w.start, w.end, step)
        for tr in tracks.values():
            tr.interval = tr.interval or self._fallback_interval(tr, tracks, step)
            tr.coverage = C.coverage(tr.n_samples, tr.interval, w.duration)
        return grid

    def _bin(self, grid: Grid, tracks: _Tracks, integrate: list[Track]) -> list[Track]:
        """Wave two: every track's bins, and the raw watts of ``integrate``; returns the
        counters that reset in the window."""
        t0 = time.monotonic()
        jobs: list[tuple[str, str]] = [(m, "last_over_time") for m in COUNTERS]
        jobs += [(m, "avg_over_time") for m in POWERS]
        jobs += [(m, "resets") for m in COUNTERS]
        per_metric = Counter(m for m, _k in tracks)
        bins_f = {j: self.pool.submit(self._bins, grid, *j, per_metric[j[0]]) for j in jobs}
        raw_f = [self.pool.submit(self._raw, tr, grid) for tr in integrate]
        binned = {j: f.result() for j, f in bins_f.items()}
        for tr, f in zip(integrate, raw_f, strict=True):
            tr.raw = f.result()
        self._timed("bins", t0)
        for (metric, key), tr in tracks.items():
            if metric in COUNTERS:
                points = binned[(metric, "last_over_time")].get(key, {})
                last = B.last_values(points, grid)
                tr.counter = C.counter_from_last(last)
                tr.present = [v is not None for v in last[1:]]
            else:
                points = binned[(metric, "avg_over_time")].get(key, {})
                tr.values = [points.get(k + 1) for k in range(grid.n)]
                tr.present = [v is not None for v in tr.values]
        return [
            tr
            for (metric, key), tr in tracks.items()
            if metric in COUNTERS and binned[(metric, "resets")].get(key, {}).get(grid.n, 0) > 0
        ]

    def _raw_counters(self, grid: Grid, resets: list[Track]) -> None:
        """Wave three: raw samples where the bins are not exact, counters that reset."""
        t0 = time.monotonic()
        for tr, raw in zip(resets, self._map(lambda t: self._raw(t, grid), resets), strict=True):
            tr.raw = raw
            tr.counter = C.bin_counter(raw, grid.edges)
            tr.present = [False] * grid.n
            for t, _v in raw:
                if grid.start < t <= grid.end:
                    tr.present[_bin_of(grid, t)] = True
        self._timed("raw_counters", t0)

    def _raw_power_coarse(self, grid: Grid, outlets: list[Outlet], fetched: list[Track]) -> None:
        """Energy counters too coarse for this window: fetch those hosts' raw watts instead."""
        coarse = self.coarse = coarse_counters(outlets)
        if not coarse:
            return
        t0 = time.monotonic()
        had = {id(t) for t in fetched}
        again = [o.power for o in choose_energy_sources(outlets, set(coarse))]
        late = [t for t in again if t is not None and id(t) not in had]
        for tr, raw in zip(late, self._map(lambda t: self._raw(t, grid), late), strict=True):
            tr.raw = raw
        self._timed("raw_power_coarse", t0)

    def _raw(self, tr: Track, grid: Grid) -> list[tuple[float, float]]:
        """Raw samples of one track in ``(start - step, end]`` (the step before is the base)."""
        return B.raw(self.prom, self.sel(tr.metric, tr.labels), grid, tr.interval or grid.step)

    def _bins(
        self, grid: Grid, metric: str, fn: str, series: int = 1
    ) -> dict[LabelKey, dict[int, float]]:
        """``fn(metric[bin])`` for every bin: {labels: {edge index: value}}; ``series`` expected."""
        return B.bins(self.prom, grid, self.sel(metric), fn, series)

    def _verdict_queries(self, grid: Grid) -> _VerdictFutures:
        """The verdict's queries, submitted: topology over the window, the recording rules'
        "alone" seeds before it, capacities and counters per step."""
        prom, whole = self.prom, self.prom.range_for(grid.end - grid.start)
        # rates over a few scrapes, so that a step of one scrape interval still has two samples
        # and a CPU's softirq share is not one scrape's (it decides which CPUs move data)
        over = max(1, math.ceil(2.5 * self.interval / grid.step - 1e-9))
        sel = self._verdict_sel
        submit = self.pool.submit
        instant = {
            k: submit(prom.query, f"max by ({by}) (max_over_time({sel(m, lab)}[{whole}]))",
                      grid.end)
            for k, (m, lab, by) in _TOPOLOGY.items()
        }  # fmt: skip
        seeds = {
            k: submit(prom.query, f"last_over_time({sel(r)}[1h])", grid.start)
            for k, r in _SEEDS.items()
        }
        # capacities per step: a step's lowest usable figure, its highest link speed (as the
        # rules' max by / min by), so a link seen retrained in one scrape is that step's only
        capacity = {k: submit(B.bins, prom, grid, sel(m), fn) for k, (m, fn) in _CAPACITIES.items()}
        counters = {
            k: submit(B.counter_rates, prom, grid, m, sel(m, exact, **regex), self.interval, over)
            for k, (m, exact, regex) in VERDICT_COUNTERS.items()
        }
        gauges = {k: submit(B.bins, prom, grid, sel(m), "avg_over_time")
                  for k, m in FLOW_GAUGES.items()}  # fmt: skip
        return _VerdictFutures(instant, seeds, capacity, counters, gauges)

    def _verdict_sel(self, metric: str, labels: dict[str, str] | None = None, **regex: str) -> str:
        return selector(metric, {**self.opts.match, **(labels or {})}, **regex)

    def verdict_data(self, grid: Grid) -> VerdictData | None:
        """The verdict's answers, waited for and read into a :class:`VerdictData`."""
        if self.verdict is None:
            return None
        f = self.verdict
        got = {k: v.result() for k, v in f.instant.items()}
        seeded = {k: v.result() for k, v in f.seeds.items()}
        capacity = {k: v.result() for k, v in f.capacity.items()}
        rates = {k: v.result() for k, v in f.counters.items()}
        data = _verdict_data(got, seeded, capacity, rates, grid.n)
        _flow_data(data, got, {k: v.result() for k, v in f.gauges.items()}, grid.n)
        return data

    @staticmethod
    def _set_intervals(tracks: _Tracks, probed: dict[str, list[Series]]) -> None:
        """Scrape interval of each series: median spacing of its raw samples in a probe slice."""
        for metric, series in probed.items():
            for s in series:
                tr = tracks.get((metric, label_key(B.strip_name(s.labels))))
                if tr is not None and tr.interval is None:
                    tr.interval = C.median_interval([t for t, _ in s.samples])

    @staticmethod
    def _fallback_interval(tr: Track, tracks: _Tracks, step: float) -> float:
        same = [t.interval for t in tracks.values() if t.interval and t.source == tr.source]
        if same:
            return sorted(same)[len(same) // 2]
        return step


def _bin_of(grid: Grid, t: float) -> int:
    k = min(grid.n - 1, max(0, math.ceil((t - grid.start) / grid.step - 1e-9) - 1))
    while k + 1 < grid.n and t > grid.edges[k + 1]:
        k += 1
    return k


# --- the verdict's series -----------------------------------------------------------------

# Topology over the window: {key: (metric, exact labels, by)}.
_TOPOLOGY = {
    "disk_info": ("wattbit_disk_info", {"parent": ""}, "host, device, controller"),
    "nic_info": ("wattbit_nic_info", {}, "host, interface, pci"),
    "links": ("wattbit_pcie_link_info", {}, "host, pci, role, upstream, root"),
    # the tcp exporter: each key's process and the CPUs it ran on, the buffer maxima
    "tcp_process": (
        "wattbit_tcp_flow_process_info",
        {},
        "host, peer, port, cgroup, process, experiment, activity, comm, cpu",
    ),
    "tcp_buffers": ("wattbit_tcp_buffer_limit_bytes", {"bound": "max"}, "host, sysctl"),
}
# The recording rules' "alone" values just before the window, where there are rules.
_SEEDS = {
    "alone_bytes": "host_device:wattbit_disk_alone_bytes_per_second:last",
    "alone_ios": "host_device:wattbit_disk_alone_ios_per_second:last",
}
# Capacities per step: {key: (metric, the step's reduction)}.
_CAPACITIES = {
    "speed": ("wattbit_nic_link_speed_bytes_per_second", "max_over_time"),
    "usable": ("wattbit_pcie_link_usable_bytes_per_second", "min_over_time"),
}


@dataclass
class _VerdictFutures:
    instant: dict[str, Future[list[Series]]]
    seeds: dict[str, Future[list[Series]]]
    capacity: dict[str, Future[B.Points]]
    counters: dict[str, Future[list[tuple[dict[str, str], Bins]]]]
    gauges: dict[str, Future[B.Points]]


def _verdict_data(
    got: dict[str, list[Series]],
    seeded: dict[str, list[Series]],
    capacity: dict[str, B.Points],
    rates: dict[str, list[tuple[dict[str, str], Bins]]],
    n: int,
) -> VerdictData:
    """The verdict's answers as its typed data (every key per host)."""
    data = VerdictData(rates=rates)
    for s in got["disk_info"]:
        h, d = s.labels.get("host", ""), s.labels.get("device", "")
        data.whole_disks.add((h, d))
        if s.labels.get("controller"):
            data.disk_controller[(h, d)] = s.labels["controller"]
    for s in got["nic_info"]:
        if s.labels.get("pci"):
            data.nic_pci[(s.labels.get("host", ""), s.labels.get("interface", ""))] = s.labels[
                "pci"
            ]
    for s in got["links"]:
        key = (s.labels.get("host", ""), s.labels.get("pci", ""))
        data.links[key] = {k: s.labels.get(k, "") for k in ("role", "upstream", "root")}
    data.nic_speed = _per_step(capacity["speed"], ("host", "interface"), max, n)
    data.usable = _per_step(capacity["usable"], ("host", "pci"), min, n)
    b = {_hd(s): v for s in seeded["alone_bytes"] if (v := _last(s)) is not None}
    i = {_hd(s): v for s in seeded["alone_ios"] if (v := _last(s)) is not None}
    data.alone = {k: (b[k], i.get(k, 0.0)) for k in b}
    return data


def _per_step(
    points: B.Points, by: tuple[str, str], pick: Callable[[float, float], float], n: int
) -> dict[tuple[str, str], Bins]:
    """A gauge per step and key (``pick`` of the series sharing a key), positive values only;
    a step without a sample holds the value before it (the first, the one after): the capacity
    in force, as a gauge's lookback would give."""
    merged: dict[tuple[str, str], dict[int, float]] = {}
    for labels, pts in points.items():
        lab = dict(labels)
        d = merged.setdefault((lab.get(by[0], ""), lab.get(by[1], "")), {})
        for k, v in pts.items():
            if math.isfinite(v) and v > 0:
                d[k] = pick(d[k], v) if k in d else v
    out: dict[tuple[str, str], Bins] = {}
    for key, d in merged.items():
        if not d:
            continue
        first = d[min(d)]
        row: Bins = []
        held = first
        for k in range(1, n + 1):  # bins' edge indices 1..n
            held = d.get(k, held)
            row.append(held)
        out[key] = row
    return out


def _flow_data(
    data: VerdictData, got: dict[str, list[Series]], gauges: dict[str, B.Points], n: int
) -> None:
    """The tcp exporter's flow gauges per step and key, each key's process, the buffers."""
    for what, points in gauges.items():
        by_key: dict[tuple[str, str], Bins] = {}
        for labels, pts in points.items():
            lab = dict(labels)
            row = by_key.setdefault((lab.get("host", ""), flow_subject(lab)), [None] * n)
            for k, v in pts.items():
                if 1 <= k <= n and math.isfinite(v):
                    row[k - 1] = (row[k - 1] or 0.0) + v
        data.flow_gauges[what] = by_key
    cpus: dict[tuple[str, str], tuple[str, set[str]]] = {}
    for s in got.get("tcp_process", []):
        key = (s.labels.get("host", ""), flow_subject(s.labels))
        _comm, seen = cpus.setdefault(key, (s.labels.get("comm", ""), set()))
        seen.add(s.labels.get("cpu", ""))
    data.flow_process = {k: (c, ",".join(sorted(seen - {""}))) for k, (c, seen) in cpus.items()}
    for s in got.get("tcp_buffers", []):
        if (top := _last(s)) is not None:
            data.buffers.setdefault(s.labels.get("host", ""), {})[s.labels.get("sysctl", "")] = top


def _hd(s: Series) -> tuple[str, str]:
    return (s.labels.get("host", ""), s.labels.get("device", ""))


def _last(s: Series) -> float | None:
    v = s.samples[-1][1] if s.samples else None
    return v if v is not None and math.isfinite(v) else None
