"""How the report reads a series off the store: reduced to the bins of its grid, or raw.

The store reduces each series to one value per bin with a function that sees only the samples
inside the bin (``last_over_time`` for counters, ``avg_over_time`` for watts) and that
Prometheus and VictoriaMetrics evaluate alike; ``resets`` over the window says which counters
restarted, and those are read raw. The arithmetic (increases, per-second rates, resets) is
Python's (:mod:`.compute`). The report never asks a store for ``rate()``: VictoriaMetrics'
MetricsQL counts from the sample before the window and does not extrapolate, so its rates
differ from Prometheus' (docs/longterm-store.md, quirk 5), and a report must give the same
figures from every store. :mod:`.gather` reads the report's own series this way, and the
verdict's counters.

Every value comes at the significant digits every store keeps (:func:`.prom.steady`), so
that both stores give this arithmetic the same numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict

from . import compute as C
from .prom import LabelKey, Prometheus, Series, label_key, selector
from .series import Grid

Bins = list[float | None]
Points = dict[LabelKey, dict[int, float]]  # {labels: {edge index: value}}


def strip_name(labels: dict[str, str]) -> dict[str, str]:
    """The labels without ``__name__`` (some functions keep it, most drop it)."""
    return {k: v for k, v in labels.items() if k != "__name__"}


def stamp(series: list[Series], t: float) -> list[Series]:
    """Stamp instant-query answers with exactly ``t`` (Prometheus rounds to ms)."""
    for s in series:
        s.samples = [(t, v) for _, v in s.samples]
    return series


def bins(prom: Prometheus, grid: Grid, sel: str, fn: str, series: int = 1) -> Points:
    """``fn(sel[bin])`` for every bin: {labels: {edge index: value}}; ``series`` expected.

    ``fn`` is ``last_over_time`` (edges 0..n: edge 0 is a counter's base, the last value in
    the step before the window), ``avg_over_time`` (edges 1..n) or ``resets`` (one number
    over the whole window and the step before it, at edge n).
    """
    out: Points = defaultdict(dict)

    def put(answer: list[Series]) -> None:
        for s in answer:
            d = out[label_key(strip_name(s.labels))]
            for t, v in s.samples:
                if v != v:  # NaN
                    continue
                k = grid.index(t)
                if k is not None:
                    d[k] = v

    if fn == "resets":
        span = prom.range_for(grid.end - grid.start + grid.step)
        put(stamp(prom.query(f"resets({sel}[{span}])", grid.end), grid.end))
        return out
    # bins 0..n-2 end on the regular grid; the last one ends at `end` and may be shorter
    first = 0 if fn == "last_over_time" else 1
    if grid.n - 1 >= first:
        put(
            prom.query_range(
                f"{fn}({sel}[{prom.range_for(grid.step)}])",
                grid.edges[first],
                grid.edges[grid.n - 1],
                grid.step,
                series,
            )
        )
    last_len = grid.end - grid.edges[grid.n - 1]
    put(stamp(prom.query(f"{fn}({sel}[{prom.range_for(last_len)}])", grid.end), grid.end))
    return out


def raw(prom: Prometheus, sel: str, grid: Grid, interval: float) -> list[tuple[float, float]]:
    """Raw samples of one series in ``(start - step, end]`` (the step before is the base)."""
    chunk = max(60.0, 20_000 * interval)
    res = prom.raw(sel, grid.start - grid.step, grid.end, chunk_seconds=chunk)
    return [p for p in res[0].samples if math.isfinite(p[1])] if res else []


def last_values(points: dict[int, float], grid: Grid) -> list[float | None]:
    """A counter's ``last_over_time`` per edge, 0..n (None where a bin had no sample)."""
    return [points.get(k) for k in range(grid.n + 1)]


def counter_rates(
    prom: Prometheus, grid: Grid, metric: str, sel: str, interval: float, over: int = 1
) -> list[tuple[dict[str, str], Bins]]:
    """Every series of the counter ``sel`` picks, its per-second rate per bin.

    The report's tracks' arithmetic (:meth:`compute.CounterBins.rates`): a bin's increase over
    its length, None where the bin or the one before had no sample; with ``over`` > 1, over
    that many bins ending with each (:meth:`compute.CounterBins.window_rates`). A series that
    reset inside the window is read raw (``selector(metric, its labels)``) and binned in Python.
    """
    resets = bins(prom, grid, sel, "resets")
    last = bins(prom, grid, sel, "last_over_time", max(1, len(resets)))
    out: list[tuple[dict[str, str], Bins]] = []
    for key, points in last.items():
        labels = dict(key)
        if resets.get(key, {}).get(grid.n, 0) > 0:
            counter = C.bin_counter(raw(prom, selector(metric, labels), grid, interval), grid.edges)
        else:
            counter = C.counter_from_last(last_values(points, grid))
        out.append((labels, counter.window_rates(grid.edges, over, interval)))
    return out
