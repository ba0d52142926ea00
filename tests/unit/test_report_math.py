"""The report's pure arithmetic against numbers worked out by hand (in the comments)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from collector.report import compute as C
from collector.report import prom as P
from collector.report.cli import parse_time
from collector.report.render import num, safe_name, seconds, si

# --- counters -----------------------------------------------------------------------------


def test_counter_increase_counts_a_reset_from_zero() -> None:
    # 1→3: +2, 3→6: +3, 6→2: reset, counts 2, 2→5: +3  =>  10
    assert C.counter_increase([1, 3, 6, 2, 5]) == 10
    assert C.count_resets([1, 3, 6, 2, 5, 0]) == 2
    assert C.counter_increase([]) == 0 and C.counter_increase([7]) == 0


def test_bin_counter_base_gap_and_reset() -> None:
    edges = [0.0, 10.0, 20.0, 30.0, 40.0]
    # base 100 at t=0; bin 0 (0,10]: 105, 110 -> +10; bin 1 (10,20]: 130 -> +20;
    # bin 2 (20,30]: nothing; bin 3 (30,40]: 5 < 130 -> reset, counts 5 (spans bins 2-3)
    samples = [(0.0, 100.0), (5.0, 105.0), (10.0, 110.0), (20.0, 130.0), (40.0, 5.0)]
    cb = C.bin_counter(samples, edges)
    assert cb.increase == [10.0, 20.0, None, 5.0]
    assert cb.single == [True, True, False, False]
    assert cb.resets == 1
    assert cb.total() == 35.0
    # rates only where the increase spans exactly its bin: 10/10, 20/10
    assert cb.rates(edges) == [1.0, 2.0, None, None]


def test_bin_counter_without_base_and_samples_outside() -> None:
    edges = [100.0, 110.0, 120.0]
    # -5 before the window is overridden by the later base at 100; 999 after the end ignored
    samples = [(90.0, 1.0), (100.0, 50.0), (115.0, 80.0), (130.0, 999.0)]
    cb = C.bin_counter(samples, edges)
    assert cb.increase == [None, 30.0] and cb.single == [False, False]
    # no base at all: the first sample only starts the count
    cb = C.bin_counter([(105.0, 50.0), (110.0, 60.0), (120.0, 90.0)], edges)
    assert cb.increase == [10.0, 30.0] and cb.single == [False, True]


def test_bin_counter_last_per_bin_equals_raw_without_resets() -> None:
    edges = [0.0, 10.0, 20.0, 30.0]
    raw = [(0.0, 0.0), (3.0, 4.0), (7.0, 9.0), (10.0, 12.0), (14.0, 20.0), (27.0, 31.0)]
    last = [(0.0, 0.0), (10.0, 12.0), (20.0, 20.0), (30.0, 31.0)]
    a, b = C.bin_counter(raw, edges), C.bin_counter(last, edges)
    assert a.increase == b.increase == [12.0, 8.0, 11.0]
    assert a.single == b.single


def test_counter_from_last_equals_bin_counter_on_edges() -> None:
    edges = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    # base 100; bins: 110, -, 130, 5 (reset), 9; and a window with no base
    for last in ([100.0, 110.0, None, 130.0, 5.0, 9.0], [None, 3.0, 4.0, None, None, 2.0]):
        on_edges = [(edges[k], v) for k, v in enumerate(last) if v is not None]
        a, b = C.counter_from_last(last), C.bin_counter(on_edges, edges)
        assert (a.increase, a.single, a.resets) == (b.increase, b.single, b.resets)
    cb = C.counter_from_last([100.0, 110.0, None, 130.0, 5.0, 9.0])
    assert cb.increase == [10.0, None, 20.0, 5.0, 4.0] and cb.resets == 1
    assert cb.single == [True, False, False, True, True]


# --- gauges -------------------------------------------------------------------------------


def test_bin_mean() -> None:
    edges = [0.0, 10.0, 20.0, 30.0]
    samples = [(0.0, 999.0), (5.0, 100.0), (10.0, 200.0), (25.0, 50.0)]
    # (0,10]: 100, 200 -> 150; (10,20]: none; (20,30]: 50; t=0 belongs to no bin
    assert C.bin_mean(samples, edges) == [150.0, None, 50.0]


def test_trapezoid_integration() -> None:
    # 100 W -> 200 W -> 100 W over 10 s steps: 1500 J + 1500 J
    assert C.integrate_power([(0, 100), (10, 200), (20, 100)], 0, 20) == 3000
    # a 30 s gap is bridged by a straight line: 100 W flat for 30 s
    assert C.integrate_power([(0, 100), (30, 100)], 0, 30) == 3000
    # a sample before start interpolates the start: (-5,100),(5,200) -> 150 W at 0;
    # 0..5 s: (150+200)/2*5 = 875; the last value is held to the end: 200 W * 5 s = 1000
    assert C.integrate_power([(-5, 100), (5, 200)], 0, 10) == 1875
    # no sample before: the first value is held back to the start: 50 W * 10 s + 50 W * 10 s
    assert C.integrate_power([(10, 50), (20, 50)], 0, 20) == 1000
    assert C.integrate_power([], 0, 10) is None
    # samples after the end are ignored
    assert C.integrate_power([(0, 10), (10, 10), (20, 1e9)], 0, 10) == 100


def test_bin_energy_scales_over_gaps() -> None:
    edges = [0.0, 10.0, 20.0, 30.0, 40.0]
    # 100 W, 200 W, -, 300 W: 6000 J over 30 s covered -> 200 W average x 40 s = 8000 J
    assert C.bin_energy([100.0, 200.0, None, 300.0], edges) == 8000.0
    assert C.bin_energy([None, None, None, None], edges) is None


def test_counter_step_detects_coarse_registers() -> None:
    # a 36 kJ register at ~250 W x 10 s bins: mostly still, now and then one step
    inc: list[float | None] = [0.0, 0.0, 36000.0, 0.0, 0.0, 72000.0, None]
    watts: list[float | None] = [250.0] * 7
    assert C.counter_step(inc, watts) == 36000.0
    # a fine counter moves every bin: no step to speak of
    assert C.counter_step([2500.0, 2510.0, None, 2490.0], [250.0] * 4) is None
    # standing still while the outlet draws nothing is not coarse
    assert C.counter_step([0.0, 0.0, 2500.0], [0.0, 0.0, 250.0]) is None
    # never moving while drawing power: useless
    assert C.counter_step([0.0, 0.0], [250.0, 250.0]) == math.inf


# --- relations ----------------------------------------------------------------------------


def test_least_squares_exact_line() -> None:
    fit = C.least_squares([0, 1, 2, 3], [1, 3, 5, 7])  # y = 1 + 2x
    assert fit is not None
    assert (fit.intercept, fit.slope, fit.r_squared, fit.n) == (1.0, 2.0, 1.0, 4)


def test_least_squares_and_pearson_by_hand() -> None:
    xs, ys = [1, 2, 3, 4], [2, 3, 5, 4]
    # mean x 2.5, mean y 3.5; Sxx = 5, Syy = 5, Sxy = 2.25+0.25+0.75+0.75 = 4
    # slope 4/5 = 0.8, intercept 3.5 - 0.8*2.5 = 1.5, r = 4/sqrt(5*5) = 0.8, r² = 0.64
    fit = C.least_squares(xs, ys)
    assert fit is not None
    assert fit.slope == pytest.approx(0.8, abs=1e-15)
    assert fit.intercept == pytest.approx(1.5, abs=1e-15)
    assert fit.r_squared == pytest.approx(0.64, abs=1e-15)
    assert C.pearson(xs, ys) == pytest.approx(0.8, abs=1e-15)


def test_relations_refuse_degenerate_input() -> None:
    assert C.least_squares([1, 1, 1], [1, 2, 3]) is None  # no spread in x
    assert C.least_squares([1, 2], [1, 2]) is None  # too few points
    assert C.pearson([1, 2, 3], [5, 5, 5]) is None
    fit = C.least_squares([1, 2, 3], [5, 5, 5])  # flat y: slope 0, fully explained
    assert fit is not None and fit.slope == 0 and fit.r_squared == 1.0


def test_paired_skips_missing_and_shifts() -> None:
    x = [1.0, 2.0, None, 4.0]
    y = [10.0, None, 30.0, 40.0]
    assert C.paired(x, y) == ([1.0, 4.0], [10.0, 40.0])
    # lag 1: (x[k-1], y[k]) for k = 1..3 -> (1, None), (2, 30), (None, 40)
    assert C.paired(x, y, 1) == ([2.0], [30.0])
    # lag -1: (x[k+1], y[k]) for k = 0..2 -> (2, 10), (None, None), (4, 30)
    assert C.paired(x, y, -1) == ([2.0, 4.0], [10.0, 30.0])


def test_best_lag_finds_the_delay() -> None:
    x: list[float | None] = [0, 0, 1, 0, 0, 0, 3, 0, 0, 2, 0, 0, 0, 1, 0, 0]
    y: list[float | None] = [0.0, 0.0, *x[:-2]]  # y follows x two steps late
    best = C.best_lag(x, y, 4)
    assert best is not None and best[0] == 2 and best[1] == pytest.approx(1.0)
    best = C.best_lag(y, x, 4)  # the other way round: x leads, so -2
    assert best is not None and best[0] == -2
    assert C.best_lag([1.0] * 10, [2.0] * 10, 3) is None  # constant: no correlation


def test_lag_correlations_equal_pearson_of_the_pairs() -> None:
    """The one-pass lag search gives, at every lag, Pearson's r of exactly the paired values."""
    import random

    rnd = random.Random(3)
    x: list[float | None] = [rnd.uniform(0, 40) for _ in range(300)]
    y: list[float | None] = [200 + 6 * v + rnd.gauss(0, 5) if v is not None else None for v in x]
    for k in (*range(50, 62), 130, 131, 299):  # gaps in y, a lone gap and the last one in x
        y[k] = None
    for k in (*range(200, 204), 0):
        x[k] = None
    got = C.lag_correlations(x, y, 15)
    assert set(got) == set(range(-15, 16))
    for lag, r in got.items():
        px, py = C.paired(x, y, lag)
        ref = C.pearson(px, py)
        assert ref is not None and abs(r - ref) < 1e-12, (lag, r, ref)
    assert list(got)[:3] == [0, 1, -1]  # the search order that settles ties


# --- coverage and helpers -----------------------------------------------------------------


def test_coverage() -> None:
    # 20 minutes scraped every 10 s: 120 samples expected; 12 missing -> 108/120
    assert C.coverage(108, 10.0, 1200.0) == pytest.approx(0.9)
    assert C.coverage(121, 10.0, 1200.0) == 1.0  # an extra sample on the edge: still 1
    assert C.coverage(5, 0.0, 100.0) == 0.0


def test_longest_gap() -> None:
    edges = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert C.longest_gap([True, False, False, True, False], edges) == 20.0
    assert C.longest_gap([True] * 5, edges) == 0.0
    assert C.longest_gap([False] * 5, edges) == 50.0


def test_median_interval_and_step() -> None:
    assert C.median_interval([0, 10, 20, 150, 160]) == 10
    assert C.median_interval([0, 1, 3]) == 1.5
    assert C.median_interval([5]) is None
    assert C.choose_step(10, 1200) == 10  # the scrape interval
    assert C.choose_step(1, 86400) == 10  # 24 h in at most 10 000 bins: 8.64 s -> 10 s
    assert C.choose_step(7, 100) == 10
    assert C.choose_step(0.3, 60) == 0.5
    # ten years in 10 000 bins: 31 536 s, beyond the table: whole hours, 9 h
    assert C.choose_step(1, 10 * 86400 * 365) == 9 * 3600


def test_sum_bins() -> None:
    assert C.sum_bins([[1.0, 2.0, None], [10.0, 20.0, 30.0]], 3) == [11.0, 22.0, None]
    assert C.sum_bins([], 2) == [None, None]
    assert C.max_present([None, 3.0, 1.0]) == 3.0 and C.max_present([None]) is None


# --- the Prometheus client's pure parts ---------------------------------------------------


def test_selectors_and_durations() -> None:
    assert P.escape('a"b\\c') == '"a\\"b\\\\c"'
    assert P.selector("m", {"run": "x", "__name__": "m"}) == 'm{run="x"}'
    assert P.selector("m", None, interface="eth.*") == 'm{interface=~"eth.*"}'
    assert P.selector("m") == "m"
    assert P.duration(10) == "10000ms" and P.duration(0.0001) == "1ms"


class FakeProm(P.Prometheus):
    """Answers query_range with one point per evaluation time, and records the calls."""

    def __init__(self) -> None:
        super().__init__("http://prom.invalid")
        self.calls: list[dict[str, str]] = []

    def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
        assert params is not None
        self.calls.append(params)
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        n = round((end - start) / step) + 1
        values = [[start + i * step, str(i)] for i in range(n)]
        return {"resultType": "matrix", "result": [{"metric": {"a": "1"}, "values": values}]}


def test_query_range_is_chunked_under_the_points_limit() -> None:
    fake = FakeProm()
    # 25 000 points at 1 s: three requests of at most 11 000 points, joined into one series
    series = fake.query_range("up", 1000.0, 1000.0 + 24_999, 1.0)
    assert len(fake.calls) == 3
    for c in fake.calls:
        pts = round(float(c["end"]) - float(c["start"])) + 1
        assert pts <= P.MAX_POINTS
    assert len(series) == 1
    times = [t for t, _ in series[0].samples]
    assert len(times) == 25_000 and times == sorted(times) and len(set(times)) == 25_000
    assert times[0] == 1000.0 and times[-1] == 1000.0 + 24_999


def test_raw_fetch_is_chunked_and_clipped() -> None:
    calls: list[str] = []

    class Raw(P.Prometheus):
        def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
            if path.endswith("buildinfo"):
                return {"version": "2.42.0"}
            assert params is not None
            calls.append(params["query"])
            t = float(params["time"])
            return {
                "resultType": "matrix",
                "result": [{"metric": {}, "values": [[t - 5, "1"], [t, "2"]]}],
            }

    r = Raw("http://prom.invalid")
    series = r.raw("m", 0.0, 250.0, chunk_seconds=100.0)
    # (0,100], (100,200], (200,250]; Prometheus 2 ranges are closed: 1 ms shorter
    assert calls == ["m[99999ms]", "m[99999ms]", "m[49999ms]"]
    assert [t for t, _ in series[0].samples] == [95.0, 100.0, 195.0, 200.0, 245.0, 250.0]


# --- command-line and rendering helpers ---------------------------------------------------


def test_parse_time() -> None:
    assert parse_time("1700000000") == 1700000000.0
    assert parse_time("2024-05-01T10:00:00Z") == 1714557600.0
    assert parse_time("2024-05-01T12:00:00+02:00") == 1714557600.0
    assert parse_time("now", now=5000.0) == 5000.0
    assert parse_time("now-1h", now=5000.0) == 1400.0
    with pytest.raises(Exception, match="time zone"):
        parse_time("2024-05-01T10:00:00")


def test_formatting() -> None:
    assert si(1234567, "J") == "1.23 MJ"
    assert si(None, "J") == "—"
    assert num(0.96) == "0.96" and num(None) == "—" and num(12345.6) == "12 346"
    assert seconds(3723) == "1h 02m 03s" and seconds(61) == "1m 01s"
    assert safe_name("a/b c") == "a_b_c" and safe_name("..") == "report"
