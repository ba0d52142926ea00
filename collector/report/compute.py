"""Pure arithmetic of the report: no I/O, no numpy, plain Python sequences in and out.

Conventions shared by every function here:

* A *sample* is a ``(timestamp_seconds, value)`` pair; samples are sorted by time.
* A *bin grid* is a list of edges ``e0 < e1 < ... < en``; bin ``k`` (0-based) is the half-open
  interval ``(e[k], e[k+1]]`` (Prometheus' own convention for a range ending at an evaluation
  time). A sample exactly on an edge belongs to the bin that ends there.
* ``None`` means "no data", never zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, islice, pairwise
from operator import mul

Sample = tuple[float, float]


# --- counters -----------------------------------------------------------------------------


def counter_increase(values: Sequence[float]) -> float:
    """Increase of a counter over consecutive raw values, counting resets like Prometheus.

    A reset is a value lower than the one before it: the counter restarted from zero, so the
    new value itself is the increase since the reset (what ``increase()`` does, without its
    extrapolation to the window's edges).
    """
    total = 0.0
    prev: float | None = None
    for v in values:
        if prev is not None:
            total += v - prev if v >= prev else v
        prev = v
    return total


def count_resets(values: Sequence[float]) -> int:
    """How many times the counter went down (Prometheus ``resets()``)."""
    return sum(1 for a, b in pairwise(values) if b < a)


@dataclass
class CounterBins:
    """A counter's increase attributed to the bins of a grid.

    ``increase[k]`` is the counter's increase from the last sample before bin k that exists to
    the last sample in bin k (``None`` when bin k has no sample, or no earlier sample exists to
    measure from). After a gap the accumulated increase lands in the first bin with a sample,
    so the sum over bins is the whole increase, gap included. ``single[k]`` says the increase
    spans exactly bin k (the previous sample is in bin k-1, or at or before e0 for k = 0): only
    those bins give a per-bin rate.
    """

    increase: list[float | None]
    single: list[bool]
    resets: int

    def total(self) -> float:
        """The counter's increase over the whole grid."""
        return math.fsum(v for v in self.increase if v is not None)

    def rates(self, edges: Sequence[float], interval: float = 0.0) -> list[float | None]:
        """Per-second rate in each bin whose increase spans exactly that bin, else None.

        The increase is taken over the bin's length, or over ``interval`` (the series' scrape
        interval) where the bin is shorter: two samples are never closer than that. A window's
        last bin is as long as what is left of it, often a few hundredths of a second; when a
        scrape falls in it, its increase is a whole interval's, and over the bin's own length
        it read as 30 times the real rate (a NIC found to "move 685 %" of its shaped link).
        """
        out: list[float | None] = []
        for k, inc in enumerate(self.increase):
            if inc is None or not self.single[k]:
                out.append(None)
            else:
                out.append(inc / max(edges[k + 1] - edges[k], interval))
        return out

    def window_rates(
        self, edges: Sequence[float], bins: int, interval: float = 0.0
    ) -> list[float | None]:
        """Per-second rate over the ``bins`` bins ending with each bin (fewer at the start).

        The increase from the last sample before the window's bins, or the first sample in
        them, to the last sample in the bin, over that span (as in :meth:`rates`, a sample
        stands at its bin's end, and the bin counts at least ``interval`` long); None where the
        bin has no sample or no span starts inside the window. ``bins`` 1 is :meth:`rates`.
        """
        if bins <= 1:
            return self.rates(edges, interval)
        # the edge each bin's increase counts from: its own start, or after a gap the end of
        # the last bin with a sample (None: unknown, before the first increase)
        base: list[int | None] = []
        prev: int | None = None
        for j, inc in enumerate(self.increase):
            if inc is None:
                base.append(None)
                continue
            base.append(j if self.single[j] else None if prev is None else prev + 1)
            prev = j
        out: list[float | None] = []
        for k, inc in enumerate(self.increase):
            j0 = max(0, k - bins + 1)
            start = next(
                (b for j in range(j0, k + 1) if (b := base[j]) is not None and b >= j0), None
            )
            if inc is None or start is None:
                out.append(None)
                continue
            total = math.fsum(v for v in self.increase[start : k + 1] if v is not None)
            out.append(total / (edges[k] - edges[start] + max(edges[k + 1] - edges[k], interval)))
        return out


def bin_counter(samples: Sequence[Sample], edges: Sequence[float]) -> CounterBins:
    """Attribute a counter's increase to the bins ``(e[k], e[k+1]]`` of a grid.

    Samples at or before ``e0`` only provide the base (the last of them is used); samples after
    the last edge are ignored. Works the same on raw samples and on one "last sample of the
    bin" per bin (what Prometheus' ``last_over_time`` returns), which is how the report keeps
    24-hour windows cheap; resets inside a bin need the raw samples.
    """
    n = len(edges) - 1
    increase: list[float | None] = [None] * n
    single = [False] * n
    resets = 0
    prev_v: float | None = None
    prev_bin = -1
    k = 0
    for t, v in samples:
        if t <= edges[0]:
            prev_v, prev_bin = v, -1
            continue
        if t > edges[-1]:
            break
        while t > edges[k + 1]:
            k += 1
        if prev_v is not None:
            if v >= prev_v:
                d = v - prev_v
            else:
                d = v
                resets += 1
            cur = increase[k]
            if cur is None:
                increase[k] = d
                # the increase spans exactly this bin when the previous sample is in the bin
                # before (or is the base for bin 0)
                single[k] = prev_bin == k - 1
            else:
                increase[k] = cur + d
        prev_v, prev_bin = v, k
    return CounterBins(increase, single, resets)


def counter_from_last(last: Sequence[float | None]) -> CounterBins:
    """:func:`bin_counter` for one "last sample of the bin" per edge (``last_over_time``).

    ``last[0]`` is the last value at or before e0 (the base), ``last[k]`` the last value in bin
    k-1, ``(e[k-1], e[k]]``; None where there is none. The same result as :func:`bin_counter`
    on those values placed at the edges, in one cheap pass (for 24-hour windows).
    """
    n = len(last) - 1
    increase: list[float | None] = [None] * n
    single = [False] * n
    resets = 0
    prev = last[0]
    prev_k = 0
    for k in range(1, n + 1):
        v = last[k]
        if v is None:
            continue
        if prev is not None:
            if v >= prev:
                increase[k - 1] = v - prev
            else:
                increase[k - 1] = v
                resets += 1
            single[k - 1] = prev_k == k - 1
        prev, prev_k = v, k
    return CounterBins(increase, single, resets)


# --- gauges -------------------------------------------------------------------------------


def bin_mean(samples: Sequence[Sample], edges: Sequence[float]) -> list[float | None]:
    """Mean of the samples in each bin (Prometheus ``avg_over_time`` over the bin)."""
    n = len(edges) - 1
    sums = [0.0] * n
    counts = [0] * n
    k = 0
    for t, v in samples:
        if t <= edges[0]:
            continue
        if t > edges[-1]:
            break
        while t > edges[k + 1]:
            k += 1
        sums[k] += v
        counts[k] += 1
    return [s / c if c else None for s, c in zip(sums, counts, strict=True)]


def integrate_power(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """Joules from watts over ``[start, end]`` by the trapezoid rule.

    Between two samples the power is taken as linear (so a gap is bridged by a straight line
    between the samples either side of it). A sample before ``start`` is used to interpolate the
    value at ``start``; before the first sample inside the window (when none precedes it) and
    after the last one, the nearest sample's value is held. ``None`` without any sample.
    """
    pts = [(t, v) for t, v in samples if t <= end]
    if not pts:
        return None
    # clip at start: interpolate between the last sample before start and the first after
    before = [p for p in pts if p[0] < start]
    inside = [p for p in pts if p[0] >= start]
    if not inside:
        return pts[-1][1] * (end - start)  # only samples before the window: hold the last
    if before:
        (t0, v0), (t1, v1) = before[-1], inside[0]
        v_start = v0 + (v1 - v0) * (start - t0) / (t1 - t0)
    else:
        v_start = inside[0][1]
    if inside[0][0] > start:
        inside = [(start, v_start), *inside]
    total = 0.0
    for (ta, va), (tb, vb) in pairwise(inside):
        total += (tb - ta) * (va + vb) / 2.0
    t_last, v_last = inside[-1]
    total += (end - t_last) * v_last
    return total


def bin_energy(watts: Sequence[float | None], edges: Sequence[float]) -> float | None:
    """Joules from per-bin mean watts: the mean over the bins with data × the window's length.

    A cross-check of an energy counter (a gap counts at the average power of the rest).
    """
    covered = 0.0
    joules = 0.0
    for k, w in enumerate(watts):
        if w is not None:
            dt = edges[k + 1] - edges[k]
            covered += dt
            joules += w * dt
    if covered <= 0:
        return None
    return joules * (edges[-1] - edges[0]) / covered


def counter_stalls(increase: Sequence[float | None], watts: Sequence[float | None]) -> bool:
    """Whether the counter stood still for a whole bin while its outlet drew power.

    Such a counter is coarse: its register did not reach its next step within a bin.
    """
    return any(
        inc is not None and inc == 0 and w is not None and w > 0
        for inc, w in zip(increase, watts, strict=False)
    )


def counter_step(increase: Sequence[float | None]) -> float | None:
    """The register step of a coarse counter: its smallest positive increase.

    None when it never moved: its step is then only known to exceed what the window drew.
    """
    moved = [inc for inc in increase if inc is not None and inc > 0]
    return min(moved) if moved else None


# --- relations ----------------------------------------------------------------------------


@dataclass
class Fit:
    """Least-squares line ``y = intercept + slope * x``."""

    intercept: float
    slope: float
    r_squared: float
    n: int


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """Ordinary least squares of y on x; None with fewer than 3 points or no spread in x."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx <= 0.0:
        return None
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = math.fsum((y - my) ** 2 for y in ys)
    slope = sxy / sxx
    intercept = my - slope * mx
    if syy <= 0.0:
        r2 = 1.0  # y is constant and the line (slope 0) explains it exactly
    else:
        ss_res = math.fsum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
        r2 = 1.0 - ss_res / syy
    return Fit(intercept, slope, r2, n)


def fit_through(xs: Sequence[float], ys: Sequence[float], intercept: float) -> Fit | None:
    """Least squares of y on x for the line through ``(0, intercept)``: only the slope is fitted.

    None with fewer than 3 points or no x other than 0. ``r_squared`` is 1 − SS_residual ÷
    SS_total of that line (negative when it explains less than the mean of y would; NaN for a
    constant y that it misses).
    """
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    sxx = math.fsum(x * x for x in xs)
    if sxx <= 0.0:
        return None
    slope = math.fsum(x * (y - intercept) for x, y in zip(xs, ys, strict=True)) / sxx
    my = math.fsum(ys) / n
    syy = math.fsum((y - my) ** 2 for y in ys)
    ss_res = math.fsum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    if syy > 0.0:
        return Fit(intercept, slope, 1.0 - ss_res / syy, n)
    # a constant y: the line explains it exactly, or r² is undefined
    return Fit(intercept, slope, 1.0 if ss_res <= 0.0 else math.nan, n)


def median(values: Sequence[float]) -> float | None:
    """The median (the mean of the middle two for an even count); None without values."""
    v = sorted(values)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation coefficient; None with fewer than 3 points or a constant series."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    if sxx <= 0.0 or syy <= 0.0:
        return None
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def paired(
    xs: Sequence[float | None], ys: Sequence[float | None], lag: int = 0
) -> tuple[list[float], list[float]]:
    """The pairs ``(xs[k - lag], ys[k])`` where both are present.

    With a positive lag, y is compared with x from ``lag`` steps earlier: y *follows* x.
    """
    ox: list[float] = []
    oy: list[float] = []
    n = min(len(xs), len(ys))
    for k in range(max(0, lag), min(n, n + lag)):
        x, y = xs[k - lag], ys[k]
        if x is not None and y is not None:
            ox.append(x)
            oy.append(y)
    return ox, oy


def best_lag(
    xs: Sequence[float | None], ys: Sequence[float | None], max_steps: int
) -> tuple[int, float] | None:
    """The lag in steps (``-max_steps..max_steps``) that maximises Pearson's r of y on lagged x.

    Positive: y follows x (power rises after traffic does). Ties (within 1e-12) go to the
    smaller |lag|, then to the positive one. None when no lag gives a correlation.
    """
    best: tuple[int, float] | None = None
    for lag, r in lag_correlations(xs, ys, max_steps).items():
        if best is None or r > best[1] + 1e-12:
            best = (lag, r)
    return best


def lag_correlations(
    xs: Sequence[float | None], ys: Sequence[float | None], max_steps: int
) -> dict[int, float]:
    """Pearson's r of ``paired(xs, ys, lag)`` for every lag that has one, 0, 1, -1, 2, ...

    The same r as :func:`pearson` over :func:`paired`, computed in one pass per lag: values
    are centred and zero where missing, so the co-moment is one sum of products; the sums and
    counts over the pairs come from prefix sums corrected at the (few) missing positions.
    """
    out: dict[int, float] = {}
    n = min(len(xs), len(ys))
    px = [v for v in xs[:n] if v is not None]
    py = [v for v in ys[:n] if v is not None]
    if len(px) < 3 or len(py) < 3:
        return out
    cx, cy = math.fsum(px) / len(px), math.fsum(py) / len(py)
    x0 = [0.0 if v is None else v - cx for v in xs[:n]]
    y0 = [0.0 if v is None else v - cy for v in ys[:n]]
    x2 = [v * v for v in x0]
    y2 = [v * v for v in y0]
    xmiss = [k for k in range(n) if xs[k] is None]
    ymiss = [k for k in range(n) if ys[k] is None]
    pre = {
        name: [0.0, *accumulate(arr)]
        for name, arr in (("x", x0), ("y", y0), ("xx", x2), ("yy", y2))
    }

    def span(name: str, lo: int, hi: int) -> float:
        p = pre[name]
        return p[hi] - p[lo]

    for lag in sorted(range(-max_steps, max_steps + 1), key=lambda s: (abs(s), -s)):
        # pairs (x[k - lag], y[k]) for k in [b0, b1)
        b0, b1 = max(0, lag), min(n, n + lag)
        if b1 - b0 < 3:
            continue
        a0, a1 = b0 - lag, b1 - lag
        # y missing at k: drop x[k - lag] from the x sums; x missing at j: drop y[j + lag]
        ym = [k for k in ymiss if b0 <= k < b1]
        xm = [j + lag for j in xmiss if a0 <= j < a1]
        sx = span("x", a0, a1) - math.fsum(x0[k - lag] for k in ym)
        sxx = span("xx", a0, a1) - math.fsum(x2[k - lag] for k in ym)
        sy = span("y", b0, b1) - math.fsum(y0[k] for k in xm)
        syy = span("yy", b0, b1) - math.fsum(y2[k] for k in xm)
        cnt = (b1 - b0) - len(set(ym) | set(xm))
        if cnt < 3:
            continue
        sxy = sum(map(mul, islice(x0, a0, a1), islice(y0, b0, b1)))
        vx = cnt * sxx - sx * sx
        vy = cnt * syy - sy * sy
        if vx <= 1e-12 * cnt * sxx or vy <= 1e-12 * cnt * syy:
            continue
        out[lag] = max(-1.0, min(1.0, (cnt * sxy - sx * sy) / math.sqrt(vx * vy)))
    return out


# --- coverage and helpers -----------------------------------------------------------------


def coverage(n_samples: int, interval: float, duration: float) -> float:
    """Share of the window with samples: samples present × scrape interval ÷ window, ≤ 1.

    Each sample stands for one scrape interval, so a window scraped without a miss has
    coverage 1 whatever the phase of the scrapes; jitter cannot lower it.
    """
    if duration <= 0 or interval <= 0:
        return 0.0
    return min(1.0, n_samples * interval / duration)


def longest_gap(present: Sequence[bool], edges: Sequence[float]) -> float:
    """Longest stretch of consecutive bins without a sample, in seconds."""
    best = 0.0
    run_start: int | None = None
    for k, p in enumerate([*present, True]):
        if not p and run_start is None:
            run_start = k
        elif p and run_start is not None:
            best = max(best, edges[k] - edges[run_start])
            run_start = None
    return best


def median_interval(times: Sequence[float]) -> float | None:
    """Median spacing of sorted timestamps (the scrape interval); None with < 2 samples."""
    d = sorted(b - a for a, b in pairwise(times) if b > a)
    if not d:
        return None
    m = len(d) // 2
    return d[m] if len(d) % 2 else (d[m - 1] + d[m]) / 2


NICE_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600)


def choose_step(interval: float, duration: float, max_bins: int = 10_000) -> float:
    """The analysis step: the smallest "nice" step ≥ the scrape interval and ≥ window/max_bins."""
    want = max(interval, duration / max_bins)
    for s in NICE_STEPS:
        if s >= want - 1e-9:
            return float(s)
    return float(math.ceil(want / 3600) * 3600)


def sum_bins(series: Sequence[Sequence[float | None]], n: int) -> list[float | None]:
    """Bin-wise sum of several series; None in a bin where any of them is None."""
    if not series:
        return [None] * n
    return [None if None in col else math.fsum(col) for col in zip(*series, strict=True)]  # type: ignore[arg-type]


def max_present(values: Sequence[float | None]) -> float | None:
    """Largest non-None value, or None."""
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None
