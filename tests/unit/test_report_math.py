"""The report's pure arithmetic against numbers worked out by hand (in the comments)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from typing import Any

import pytest

from collector.report import compute as C
from collector.report import prom as P
from collector.report.analyse import Result, analyse, compare
from collector.report.cli import parse_match, parse_time
from collector.report.document import COMPARE_KEYS, Scope
from collector.report.gather import Gathered, find_phases
from collector.report.render import finite, markdown, num, safe_name, seconds, si, summary_lines
from collector.report.series import (
    BUSY,
    DISK_IO,
    ENERGY,
    NIC,
    POWER,
    Grid,
    Options,
    PhaseRun,
    Track,
    Window,
    choose_energy_sources,
    coarse_counters,
    outlets_of,
)

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


def test_window_rates_span_several_bins_and_gaps() -> None:
    """CounterBins.window_rates (the verdict's rates over a few scrapes): the increase over
    the last `bins` bins ending with each, across a gap, None without a base or a sample."""
    edges = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    cb = C.counter_from_last([100.0, 110.0, None, 130.0, 5.0, 9.0])  # increases 10,-,20,5,4
    assert cb.window_rates(edges, 1) == cb.rates(edges) == [1.0, None, None, 0.5, 0.4]
    # bin 2's +20 spans bins 1-2 (the gap): over two bins it counts where the window starts
    # at bin 1, not at bin 2 (then only bin 3's +5 does)
    assert cb.window_rates(edges, 2) == [1.0, None, 1.0, 0.5, 9.0 / 20.0]
    assert cb.window_rates(edges, 3) == [1.0, None, 1.0, 25.0 / 30.0, 9.0 / 20.0]
    # no base: the first sample (bin 0) only starts the count
    cb = C.counter_from_last([None, 3.0, 4.0, None, None, 6.0])  # increases -,1,-,-,2
    assert cb.window_rates(edges, 2) == [None, 0.1, None, None, None]
    assert cb.window_rates(edges, 4) == [None, 0.1, None, None, 3.0 / 40.0]


def test_a_short_last_bin_is_taken_as_one_scrape_interval_long() -> None:
    """A window's last bin is what is left of it (here 0.03 s); a scrape that falls in it
    carries a whole interval's increase (1 s at 24 MB/s). Over the bin's own length that read
    as 33 times the rate; over the interval it is the rate (a clean-clone run's NIC-bound
    scenario saw its shaped veth "move 685 %" of its link this way)."""
    edges = [0.0, 1.0, 2.0, 3.0, 3.03]
    samples = [(t + 0.01, 24e6 * t) for t in (-1.0, 0.0, 1.0, 2.0, 3.0)]  # 10 ms past edges
    cb = C.bin_counter(samples, edges)
    assert cb.increase == [24e6, 24e6, 24e6, 24e6] and all(cb.single)
    assert cb.rates(edges, 1.0) == [24e6, 24e6, 24e6, 24e6]
    assert cb.rates(edges)[-1] == pytest.approx(24e6 / 0.03)  # the bin's own length: no
    assert cb.window_rates(edges, 3, 1.0) == [24e6, 24e6, 24e6, 24e6]
    assert cb.window_rates(edges, 3)[-1] == pytest.approx(3 * 24e6 / 2.03)
    # a full bin is its own length whatever the interval below it (step >= interval)
    assert cb.rates(edges, 0.5)[:3] == [24e6, 24e6, 24e6]
    # and a last bin longer than the interval is its own length
    edges = [0.0, 10.0, 20.0, 25.0]
    cb = C.counter_from_last([0.0, 10.0, 20.0, 25.0])
    assert cb.rates(edges, 1.0) == [1.0, 1.0, 1.0]


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
    assert C.counter_stalls(inc, watts) and C.counter_step(inc) == 36000.0
    # a fine counter moves every bin: no step to speak of
    assert not C.counter_stalls([2500.0, 2510.0, None, 2490.0], [250.0] * 4)
    # standing still while the outlet draws nothing is not coarse
    assert not C.counter_stalls([0.0, 0.0, 2500.0], [0.0, 0.0, 250.0])
    # never moving while drawing power: coarse, with no step seen (never an infinite one)
    assert C.counter_stalls([0.0, 0.0], [250.0, 250.0])
    assert C.counter_step([0.0, 0.0]) is None and C.counter_step([None]) is None


# --- relations ----------------------------------------------------------------------------


def test_fit_through_a_measured_intercept() -> None:
    # through (0, 100): slope = sum x (y - 100) / sum x^2 = (2*60 + 3*90) / 13 = 30
    fit = C.fit_through([0, 2, 3], [100, 160, 190], 100.0)
    assert fit is not None and fit.intercept == 100.0 and fit.slope == 30.0
    assert fit.r_squared == 1.0 and fit.n == 3
    # residuals 1, -1, 0 around y = 100 + 30 x: r^2 = 1 - 2 / SS_total
    fit = C.fit_through([0, 2, 0, 3], [101, 160, 99, 190], 100.0)
    assert fit is not None and fit.slope == 30.0
    ys = [101, 160, 99, 190]
    ss_tot = sum((y - sum(ys) / 4) ** 2 for y in ys)
    assert math.isclose(fit.r_squared, 1 - 2 / ss_tot)
    assert C.fit_through([0, 0, 0], [1, 2, 3], 1.0) is None  # no traffic: no slope
    assert C.fit_through([1, 2], [1, 2], 0.0) is None
    assert C.median([3.0, 1.0, 2.0]) == 2.0 and C.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert C.median([]) is None


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
            assert params is not None
            if params["query"] == P.RANGE_PROBE:  # Prometheus 2: 11 points, closed ranges
                return {"resultType": "vector", "result": [{"metric": {}, "value": [1, "11"]}]}
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


class Probed(P.Prometheus):
    """Answers the range probe with `points` (or an error) and buildinfo with `version`."""

    def __init__(self, points: str | None, version: str | None) -> None:
        super().__init__("http://prom.invalid")
        self.points, self.version = points, version
        self.paths: list[str] = []

    def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.paths.append(path)
        if path.endswith("buildinfo"):
            if self.version is None:
                raise P.PromError("HTTP 404")
            return {"version": self.version} if self.version else {}
        assert params is not None and params["query"] == P.RANGE_PROBE
        if self.points is None:
            raise P.PromError("HTTP 400: bad_data: unknown function")
        return {"resultType": "vector", "result": [{"metric": {}, "value": [1, self.points]}]}


@pytest.mark.parametrize(
    ("points", "version", "closed", "asked_version"),
    [
        ("11", "2.42.0", True, False),  # Prometheus 2
        ("10", "3.1.0", False, False),  # Prometheus 3
        ("10", "", False, False),  # VictoriaMetrics 1.79: buildinfo without a version
        ("10", "2.24.0", False, False),  # VictoriaMetrics 1.96 on: a made-up version
        (None, "3.0.0", False, True),  # no subqueries: the version decides
        (None, "2.53.2", True, True),
        (None, None, True, True),  # nothing known: closed (1 ms shorter is exact there)
        ("7", "3.0.0", False, True),  # an answer that is neither 10 nor 11
    ],
)
def test_range_semantics_are_asked_of_the_server(
    points: str | None, version: str | None, closed: bool, asked_version: bool
) -> None:
    prom = Probed(points, version)
    assert prom.closed_ranges() is closed
    assert prom.closed_ranges() is closed  # asked once
    assert prom.paths.count("/api/v1/query") == 1
    assert ("/api/v1/status/buildinfo" in prom.paths) is asked_version
    assert prom.range_for(10) == ("9999ms" if closed else "10000ms")


def test_queries_ask_victoriametrics_not_to_move_them() -> None:
    fake = FakeProm()
    fake.query_range("up", 1000.25, 1100.25, 1.0)
    assert fake.calls[0]["nocache"] == "1" and fake.calls[0]["latency_offset"] == "0"
    asked: list[dict[str, str]] = []

    class Instant(P.Prometheus):
        def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
            assert params is not None
            asked.append(params)
            return {"resultType": "vector", "result": []}

    Instant("http://prom.invalid").query("up", 1000.25)
    assert asked == [{"query": "up", "time": "1000.250", "nocache": "1", "latency_offset": "0"}]


def test_match_options() -> None:
    assert parse_match([]) == {}
    assert parse_match(["site=lab-a", "rack=r1=x", "site=lab-a"]) == {
        "site": "lab-a",
        "rack": "r1=x",
    }
    for bad in (["site"], ["=a"], ["1x=a"], ["__name__=up"], ["site=a", "site=b"]):
        with pytest.raises(ValueError, match="--match"):
            parse_match(bad)


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


# --- the document: analysis without Prometheus, and the JSON schema -----------------------

# The keys of RUN.json, in the order written (schema wattbit.report/1, docs/report.md). A change
# to the schema must show here as a diff.
TOP_KEYS = ["schema", "run", "window", "phases", "prometheus", "generated_at", "step_seconds",
            "max_lag_seconds", "coverage_threshold", "interfaces_regex", "match", "site",
            "energy_view", "hosts", "components", "power", "transfers", "outlets", "sources",
            "warnings", "timings_seconds",
            "prometheus_requests"]  # fmt: skip
WINDOW_KEYS = ["start", "end", "start_iso", "end_iso", "duration_seconds", "source",
               "in_progress"]  # fmt: skip
SCOPE_KEYS = ["duration_seconds", "bytes_tx", "bytes_rx", "gigabits", "gbit_per_second_mean",
              "gbit_per_second_peak", "energy_joules", "energy_source", "watts_mean",
              "watts_peak", "joules_per_gigabit", "idle_watts", "idle_watts_source",
              "idle_steps", "marginal_joules_per_gigabit", "r_squared", "fit_points",
              "pearson_r", "lag_seconds", "pearson_r_at_lag", "coverage",
              "coverage_sources"]  # fmt: skip
HOST_KEYS = [*SCOPE_KEYS, "interfaces", "power_source", "outlets", "disks", "disk_summary",
             "limited_by"]  # fmt: skip
COMPONENT_KEYS = [*SCOPE_KEYS, "bits_from", "bits_hosts", "outlets"]
DISK_BUSY_KEYS = ["busy_seconds", "busy_ratio", "busy_ratio_peak"]
DISK_IO_KEYS = ["bytes", "bytes_per_second_mean", "bytes_per_second_peak"]
DISK_SUMMARY_KEYS = ["devices", "bytes_per_second_mean", "busy_ratio_mean", "busy_ratio_min",
                     "busy_ratio_max", "busiest"]  # fmt: skip
OUTLET_KEYS = ["pdu", "outlet", "outlet_name", "host", "component", "energy_joules",
               "energy_source", "energy_note", "energy_counter_step_joules",
               "energy_joules_from_watts_bins", "energy_counter_resets", "watts_peak",
               "coverage"]  # fmt: skip
SOURCE_KEYS = ["coverage", "longest_gap_seconds", "series", "interval_seconds"]
PHASE_KEYS = ["run", "phase", "labels", "start", "end", "start_iso", "end_iso",
              "duration_seconds", "steps", "gbit_per_second_mean", "watts_mean",
              "joules_per_gigabit", "limited_by"]  # fmt: skip
LIMITED_BY_KEYS = ["resource", "subject", "cause", "utilisation", "evidence", "others"]
ENERGY_VIEW_KEYS = ["energy_joules", "idle_joules", "idle_share", "best_phase",
                    "best_phase_joules_per_gigabit", "joules_at_best_phase"]  # fmt: skip
COMPARISON_KEYS = ["run", "window", "site", "hosts", "components", "only_in_this",
                   "only_in_other", "report"]  # fmt: skip

PDU_TARGET = {"instance": "collector:9732", "job": "wattbit-collector"}


def _counter(metric: str, labels: dict[str, str], last: list[float | None], grid: Grid) -> Track:
    """A counter track as gathering leaves it, from its last value at each edge."""
    cb = C.counter_from_last(last)
    return Track(
        metric, labels, n_samples=len(last), interval=10.0, counter=cb, coverage=1.0,
        present=[v is not None for v in last[1:]], rates=cb.rates(grid.edges), total=cb.total(),
    )  # fmt: skip


def _watts(labels: dict[str, str], values: list[float | None], grid: Grid) -> Track:
    """A watts track with one sample at the end of each bin."""
    raw = [(t, v) for t, v in zip(grid.edges[1:], values, strict=True) if v is not None]
    return Track(
        POWER, labels, n_samples=len(raw), interval=10.0, values=values, coverage=1.0,
        present=[v is not None for v in values], raw=raw,
    )  # fmt: skip


def small_window() -> Gathered:
    """30 s in three 10 s bins: host h (NIC, 3 disks, outlet p/1 with an energy counter),
    host k (one disk with I/O bytes only), a switch outlet p/2 on no host (watts only)."""
    w = Window("small", 1000.0, 1030.0, "run")
    grid = Grid.make(w.start, w.end, 10.0)
    h = {"host": "h", "instance": "h:9731", "job": "wattbit-agent"}
    p1 = {"pdu": "p", "outlet": "1", "outlet_name": "h-psu", "host": "h", "component": "server"}
    p2 = {"pdu": "p", "outlet": "2", "outlet_name": "sw", "host": "", "component": "switch"}
    tracks = [
        _counter(
            NIC, {**h, "interface": "eth0", "direction": "tx"}, [0, 1.25e9, 2.5e9, 3.75e9], grid
        ),
        _counter(NIC, {**h, "interface": "eth0", "direction": "rx"}, [0, 0, 0, 0], grid),
        _counter(BUSY, {**h, "device": "sda"}, [0, 5, 10, 15], grid),
        _counter(BUSY, {**h, "device": "sdb"}, [0, 1, 2, 3], grid),
        _counter(DISK_IO, {**h, "device": "sda", "op": "read"}, [0, 1e6, 2e6, 3e6], grid),
        _counter(DISK_IO, {**h, "device": "nvme0n1", "op": "write"}, [0, 3e6, 6e6, 9e6], grid),
        _counter(DISK_IO, {"host": "k", "device": "sdz", "op": "read"}, [0, 1, 2, 3], grid),
        _watts({**p1, **PDU_TARGET}, [100.0, 110.0, 120.0], grid),
        _counter(ENERGY, {**p1, **PDU_TARGET}, [0, 1000, 2100, 3300], grid),
        _watts({**p2, **PDU_TARGET}, [50.0, 50.0, 50.0], grid),
    ]
    return gathered(w, grid, tracks, count_seconds=0.25, requests=7)


def gathered(
    w: Window, grid: Grid, tracks: list[Track], count_seconds: float, requests: int
) -> Gathered:
    """What gather() would hand analyse() for these tracks, at a 10 s scrape interval."""
    outlets = outlets_of(tracks)
    choose_energy_sources(outlets)
    return Gathered(
        window=w, options=Options(), grid=grid, tracks=tracks, outlets=outlets,
        coarse=coarse_counters(outlets), interval=10.0, timings={"count": count_seconds},
        started=time.monotonic(), prometheus="http://prom.invalid:9090", requests=requests,
    )  # fmt: skip


def small_report() -> Result:
    """The report of :func:`small_window`."""
    return analyse(small_window(), now=1_714_557_600.0)


def test_analysis_needs_no_prometheus() -> None:
    doc = small_report().doc
    h = doc.hosts["h"]
    # 3.75e9 bytes sent in 30 s: 30 Gbit, 1 Gbit/s; 3 300 J from the energy counter
    assert h.gigabits == 30.0 and h.gbit_per_second_mean == 1.0
    assert h.energy_joules == 3300.0 and h.energy_source == "counter"
    assert h.joules_per_gigabit == 110.0
    # the switch: 50 W held over the 30 s (its watts are integrated), charged with the site's bits
    sw = doc.components["switch"]
    assert sw.energy_joules == 1500.0 and sw.bits_from == "site" and sw.bits_hosts == ["h"]
    assert doc.site.energy_joules == 4800.0 and doc.site.energy_source == "mixed"
    assert h.disks["sda"].busy_ratio == 0.5 and h.disks["nvme0n1"].busy_ratio is None
    assert h.disk_summary is not None and h.disk_summary.busiest == "sda"
    assert doc.generated_at == "2024-05-01T10:00:00Z" and doc.prometheus_requests == 7
    assert list(doc.timings_seconds) == ["count", "compute", "total"]
    assert (
        "host k: no PDU outlet, PDU/bank/phase or BMC is mapped to it, so no energy figures"
        in doc.warnings
    )


def test_window_times_are_rfc3339() -> None:
    # milliseconds go before the Z (2026-11-23T18:24:25Z.543 is no time at all); none on a
    # whole second; a time a hair before the next second is that second, never ".1000"
    g = small_window()
    for start, iso in ((1795458265.543, "2026-11-23T18:24:25.543Z"),
                       (1795458265.0, "2026-11-23T18:24:25Z"),
                       (1795458265.9996, "2026-11-23T18:24:26Z")):  # fmt: skip
        w = Window("t", start, start + 30.0, "run")
        doc = analyse(replace(g, window=w, grid=Grid.make(w.start, w.end, 10.0)), now=start).doc
        assert doc.window.start_iso == iso and doc.generated_at == iso
        assert parse_time(doc.window.start_iso) == round(start, 3)


def test_a_counter_that_never_moved_is_not_a_step_of_inf() -> None:
    # p/1's energy counter stands still for the whole window while the outlet draws 100 W
    # or more: a register coarser than the window's energy, whose step was never seen
    g = small_window()
    tracks = [
        _counter(ENERGY, t.labels, [5000.0] * 4, g.grid) if t.metric == ENERGY else t
        for t in g.tracks
    ]
    outlets = outlets_of(tracks)
    coarse = coarse_counters(outlets)
    assert coarse == {"p/1": None}
    choose_energy_sources(outlets, set(coarse))
    doc = analyse(replace(g, tracks=tracks, outlets=outlets, coarse=coarse)).doc
    warning = next(w for w in doc.warnings if "p/1" in w)
    assert warning == (
        "energy counter of outlet p/1 did not move in the window while the outlet drew power, "
        "too coarse for this window: its host's energy is integrated from watts instead"
    )
    assert "inf" not in " ".join(doc.warnings)
    o = doc.outlets[0]
    assert o.energy_source == "power" and o.energy_counter_step_joules is None
    assert o.energy_note == "its counter did not move while the outlet drew power"
    # from its watts: 100 W held back to the start, then trapezoids to 110 and 120 W
    assert doc.hosts["h"].energy_joules == 10 * 100 + 10 * 105 + 10 * 115


def phased_window(idle_2: tuple[float, float] | None = (1040.0, 1060.0)) -> Gathered:
    """60 s in six 10 s bins of host h (one NIC, outlet p/1 with watts only) and three phase
    runs: idle (bins 0-1), full (2-3), idle (4-5; its first bin still carries the load)."""
    w = Window("ph", 1000.0, 1060.0, "run")
    grid = Grid.make(w.start, w.end, 10.0)
    h = {"host": "h", "instance": "h:9731", "job": "wattbit-agent"}
    p1 = {"pdu": "p", "outlet": "1", "outlet_name": "h-psu", "host": "h", "component": "server"}
    # 0, 0, 2, 3, 0, 0 Gbit/s: 2.5e9 and 3.75e9 bytes in bins 2 and 3
    tx = [0.0, 0.0, 0.0, 2.5e9, 6.25e9, 6.25e9, 6.25e9]
    tracks = [
        _counter(NIC, {**h, "interface": "eth0", "direction": "tx"}, list(tx), grid),
        _counter(NIC, {**h, "interface": "eth0", "direction": "rx"}, [0.0] * 7, grid),
        _watts({**p1, **PDU_TARGET}, [101.0, 99.0, 160.0, 190.0, 125.0, 100.0], grid),
    ]
    outlets = outlets_of(tracks)
    choose_energy_sources(outlets)
    lab = {"part_of": "ph"}
    phases = [
        PhaseRun("ph-idle-1", "idle", 1000.0, 1020.0, {**lab, "phase": "idle"}),
        PhaseRun("ph-full", "full", 1020.0, 1040.0, {**lab, "phase": "full"}),
    ]
    if idle_2 is not None:
        phases.append(PhaseRun("ph-idle-2", "idle", *idle_2, {**lab, "phase": "idle"}))
    return Gathered(
        window=w, options=Options(), grid=grid, tracks=tracks, outlets=outlets, coarse={},
        interval=10.0, timings={}, started=time.monotonic(), prometheus="http://p.invalid",
        requests=1, phases=phases,
    )  # fmt: skip


def test_idle_watts_from_idle_phases() -> None:
    doc = analyse(phased_window()).doc
    h = doc.hosts["h"]
    # the median of the idle steps' watts 101, 99, 125, 100: (100 + 101) / 2; the 125 W of
    # the step after the load does not pull it
    assert h.idle_watts == 100.5 and h.idle_watts_source == "idle_phases" and h.idle_steps == 4
    # the line through (0, 100.5): slope = (2 * 59.5 + 3 * 89.5) / (2^2 + 3^2)
    assert h.marginal_joules_per_gigabit == pytest.approx(387.5 / 13, rel=1e-12)
    assert h.fit_points == 6 and doc.site.idle_watts == 100.5
    ph = doc.phases
    assert [(p.run, p.phase, p.steps) for p in ph] == [
        ("ph-idle-1", "idle", 2), ("ph-full", "full", 2), ("ph-idle-2", "idle", 2)
    ]  # fmt: skip
    assert ph[1].gbit_per_second_mean == 2.5 and ph[1].watts_mean == 175.0
    assert ph[0].gbit_per_second_mean == 0.0 and ph[2].watts_mean == 112.5
    assert ph[0].start_iso == "1970-01-01T00:16:40Z" and ph[0].duration_seconds == 20.0
    j = doc.to_json()
    assert list(j)[:4] == ["schema", "run", "window", "phases"]
    assert [list(p) for p in j["phases"]] == [PHASE_KEYS] * 3
    assert j["phases"][0]["labels"] == {"part_of": "ph", "phase": "idle"}
    assert not doc.warnings
    md = markdown(doc, "ph.html")
    assert "## Phases" in md and "| ph-full | full |" in md
    site = summary_lines(doc)[1]
    assert "idle 100 W (idle phases, 4 steps) + 29.8 J/Gbit" in site, site


def test_too_few_idle_steps_leave_idle_watts_to_the_fit() -> None:
    # one idle phase of two steps: not enough to measure idle watts, so the least-squares fit
    # of the six points gives them, and the report says why
    doc = analyse(phased_window(idle_2=None)).doc
    h = doc.hosts["h"]
    fit = C.least_squares([0, 0, 2, 3, 0, 0], [101, 99, 160, 190, 125, 100])
    assert fit is not None
    assert h.idle_watts_source == "fit" and h.idle_steps == 2
    assert h.idle_watts == pytest.approx(fit.intercept, rel=1e-12)
    assert h.marginal_joules_per_gigabit == pytest.approx(fit.slope, rel=1e-12)
    assert doc.warnings == [
        "the idle phases hold 2 analysis step(s) with watts, fewer than 3: idle watts are the "
        "fit's intercept instead"
    ]
    # without phases the fit is all there is, and nothing needs saying
    plain = analyse(replace(phased_window(), phases=[])).doc
    assert plain.hosts["h"].idle_watts_source == "fit" and plain.hosts["h"].idle_steps == 0
    assert plain.phases == [] and not plain.warnings


class _Registry:
    """What Prometheus answers about the run registry's series, for find_phases."""

    def __init__(self, runs: dict[str, tuple[str, float, float | None]]) -> None:
        self.runs = runs  # run -> (labels, start, end or None)
        self.asked: list[tuple[str, float]] = []

    def query(self, expr: str, at: float) -> list[P.Series]:
        self.asked.append((expr, at))
        out = []
        for run, (labels, start, end) in self.runs.items():
            if "wattbit_run_info" in expr:
                out.append(P.Series({"run": run, "labels": labels}, [(at, 1.0)]))
            elif "start_time" in expr:
                out.append(P.Series({"run": run}, [(at, start)]))
            elif end is not None:
                out.append(P.Series({"run": run}, [(at, end)]))
        return out


def test_find_phases_of_a_run() -> None:
    reg = _Registry({
        "r": ("", 1000.0, 1100.0),
        "r-idle": ("part_of=r,phase=idle", 1000.0, 1020.0),
        "r-full": ("part_of=r,phase=full,streams=4", 1020.0, 1080.0),
        "r-tail": ("part_of=r,phase=idle", 1080.0, None),  # its end not scraped yet
        "other-idle": ("part_of=other,phase=idle", 1010.0, 1030.0),
        "r-unlabelled": ("part_of=r", 1010.0, 1030.0),  # no phase label: not a phase
        "r-later": ("part_of=r,phase=idle", 1200.0, 1210.0),  # started again since
    })  # fmt: skip
    w = Window("r", 1000.0, 1100.0, "run")
    phases = find_phases(reg, w, 1.0)  # type: ignore[arg-type]
    assert [(p.run, p.phase, p.start, p.end) for p in phases] == [
        ("r-idle", "idle", 1000.0, 1020.0),
        ("r-full", "full", 1020.0, 1080.0),
        ("r-tail", "idle", 1080.0, 1100.0),
    ]
    assert phases[1].labels == {"part_of": "r", "phase": "full", "streams": "4"}
    assert phases[0].idle and not phases[1].idle
    # read up to 5 s past the window (3 scrape intervals of 1 s are less): an end comes late
    assert {at for _, at in reg.asked} == {1105.0}
    assert all("[110000ms]" in expr for expr, _ in reg.asked)
    # a --start/--end window takes every phase inside it, whoever's part it is
    explicit = find_phases(reg, Window("w", 1000.0, 1100.0, "explicit"), 15.0)  # type: ignore[arg-type]
    assert [p.run for p in explicit] == ["r-idle", "other-idle", "r-full", "r-tail"]
    assert reg.asked[-1][1] == 1145.0


def test_find_phases_reads_only_matching_series() -> None:
    reg = _Registry({"r-idle": ("part_of=r,phase=idle", 1000.0, 1020.0)})
    phases = find_phases(reg, Window("r", 1000.0, 1100.0, "run"), 1.0, {"site": "lab-a"})  # type: ignore[arg-type]
    assert [p.run for p in phases] == ["r-idle"]
    assert len(reg.asked) == 3
    assert all('{site="lab-a"}[' in expr for expr, _ in reg.asked), reg.asked


def test_json_keys_keep_the_schema() -> None:
    res = small_report()
    doc = replace(res.doc, compare=compare(res.doc, res.doc))
    j = doc.to_json()
    assert list(j) == [*TOP_KEYS, "compare"]
    assert j["schema"] == "wattbit.report/1"
    assert list(j["window"]) == WINDOW_KEYS
    assert list(j["site"]) == SCOPE_KEYS
    assert list(j["hosts"]) == ["h", "k"] and list(j["components"]) == ["server", "switch"]
    for host in j["hosts"].values():
        assert list(host) == HOST_KEYS
    for comp in j["components"].values():
        assert list(comp) == COMPONENT_KEYS
    # a disk has the busy keys with a busy-time counter, the byte keys with I/O byte counters
    disks = j["hosts"]["h"]["disks"]
    assert list(disks) == ["nvme0n1", "sda", "sdb"]
    assert list(disks["sda"]) == ["coverage", *DISK_BUSY_KEYS, *DISK_IO_KEYS]
    assert list(disks["sdb"]) == ["coverage", *DISK_BUSY_KEYS]
    assert list(disks["nvme0n1"]) == ["coverage", *DISK_IO_KEYS]
    assert list(j["hosts"]["h"]["disk_summary"]) == DISK_SUMMARY_KEYS
    assert list(j["hosts"]["k"]["disk_summary"]) == DISK_SUMMARY_KEYS[:2]
    assert [list(o) for o in j["outlets"]] == [OUTLET_KEYS, OUTLET_KEYS]
    assert list(j["sources"]) == ["agent:h", "agent:k", "pdu:p"]
    assert all(list(s) == SOURCE_KEYS for s in j["sources"].values())
    cmp = j["compare"]
    assert list(cmp) == COMPARISON_KEYS
    assert list(cmp["site"]) == list(COMPARE_KEYS)
    assert set(COMPARE_KEYS) <= set(SCOPE_KEYS)
    assert cmp["site"]["energy_joules"] == {"this": 4800.0, "other": 4800.0, "change": 0.0}
    assert list(cmp["report"]) == TOP_KEYS  # the other run's report, without a comparison
    # plain JSON, and the same after a trip through it
    assert json.loads(json.dumps(j, allow_nan=False)) == j


def test_finite_document_and_renderers() -> None:
    res = small_report()
    o = replace(res.doc.outlets[0], energy_counter_step_joules=math.inf)
    doc = replace(res.doc, outlets=[o, *res.doc.outlets[1:]])
    assert finite(doc).outlets[0].energy_counter_step_joules is None
    assert finite(doc.to_json())["outlets"][0]["energy_counter_step_joules"] is None
    with pytest.raises(KeyError):
        doc.site.figure("energy_source")
    assert isinstance(doc.site, Scope)
    md = markdown(finite(doc), "small.html")
    assert "| host h | 30s | 3.3 kJ | counter |" in md
    # every device counts, the busy figures are over the two with a busy-time counter
    assert "* h: 3 disks were 30 % busy on average (min 10 %, max 50 % on sda)" in md
    assert summary_lines(doc)[0] == (
        "run small: 1970-01-01T00:16:40Z → 1970-01-01T00:17:10Z (30s), step 10 s"
    )
