"""Histogram lines written from per-slot counts say what prometheus_client writes (issue 35)."""

from __future__ import annotations

from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from collector.web.exposition import TextRenderer
from exporters.base import reusable
from exporters.blockio.lines import HistogramLines, SeriesLines
from exporters.textfamily import TextFamily, count_text

LE = ("1e-05", "0.001", "1.0", "+Inf")
NAME = "wattbit_disk_io_latency_seconds"


class _Families:
    def __init__(self, *families: object) -> None:
        self.families = list(families)

    def collect(self) -> list[object]:
        return self.families


def _exposition(*families: object) -> bytes:
    r = CollectorRegistry(auto_describe=False)
    r.register(_Families(*families))  # type: ignore[arg-type]
    return generate_latest(r)


def _library(series: list[tuple[str, str, list[int], float]]) -> HistogramMetricFamily:
    """What the exporter built before: HistogramMetricFamily.add_metric of cumulated counts."""
    fam = HistogramMetricFamily(NAME, "latency", labels=["device", "op"])
    for device, op, slots, total in series:
        buckets = [(le, float(n)) for le, n in zip(LE, accumulate(slots), strict=True)]
        fam.add_metric([device, op], buckets, total)
    return fam


def _written(lines: HistogramLines, series: list[tuple[str, str, list[int], float]]) -> TextFamily:
    lines.begin()
    for device, op, slots, total in series:
        lines.add(device, op, slots, total)
    return lines.family("latency")


def _text(fam: TextFamily) -> bytes:
    return TextRenderer(_Families(fam)).render()  # type: ignore[arg-type]


_COUNT = st.one_of(st.integers(0, 400_000), st.integers(0, 2**64 - 1))
_SERIES = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12),  # a device name from the host: any text
        st.sampled_from(["read", "write", "discard", "flush"]),
        st.lists(_COUNT, min_size=len(LE), max_size=len(LE)),
        st.floats(min_value=0, allow_nan=False, allow_infinity=True),
    ),
    max_size=6,
    unique_by=lambda s: (s[0], s[1]),
)


def test_a_percent_in_a_device_name_is_written_as_is() -> None:
    """The bucket lines are a %-format of the counts: a label's own % stays a character."""
    series = [
        ("a%b", "read", [1, 2, 3, 4], 0.5),
        ("%d%%", "write", [0, 0, 7, 1], 2.0),
        ("%(x)s", "read", [5, 0, 0, 0], 1.25),
        ("%", "flush", [2_000_000, 0, 0, 1], 3.0),  # past 10^6: the other way of writing
    ]
    assert _text(_written(HistogramLines(NAME, LE), series)) == _exposition(_library(series))


@settings(max_examples=300, deadline=None)
@given(_SERIES)
def test_lines_are_generate_latests(series: list[tuple[str, str, list[int], float]]) -> None:
    fam = _written(HistogramLines(NAME, LE), series)
    # the renderer writes the family's lines; generate_latest its (lazily built) samples;
    # both what prometheus_client writes of the family the exporter built before
    want = _exposition(_library(series))
    assert _text(fam) == want
    assert _exposition(fam) == want
    assert fam.count == len(_library(series).samples)


@given(st.one_of(st.integers(0, 10**7), st.integers(0, 2**70)))
def test_count_text_is_go_float(n: int) -> None:
    assert count_text(n) == floatToGoString(float(n))


@pytest.mark.parametrize("n", [0, 1, 999_999, 1_000_000, 1_234_567, 2**53 + 1, 10**20])
def test_count_text_edges(n: int) -> None:
    assert count_text(n) == floatToGoString(float(n))


def test_unchanged_series_keep_their_lines_changed_ones_are_rewritten() -> None:
    lines = HistogramLines(NAME, LE)
    first = _written(
        lines, [("sda", "read", [1, 2, 3, 4], 0.5), ("sdb", "read", [0, 0, 1, 0], 1.0)]
    )
    second = _written(
        lines, [("sda", "read", [1, 2, 3, 4], 0.5), ("sdb", "read", [0, 0, 2, 0], 1.5)]
    )
    assert first.lines.split("sdb")[0] == second.lines.split("sdb")[0]
    assert 'device="sdb",le="1.0",op="read"} 2.0' in second.lines
    assert 'sum{device="sdb",op="read"} 1.5' in second.lines
    # a sum alone changed: rewritten too
    third = _written(
        lines, [("sda", "read", [1, 2, 3, 4], 0.75), ("sdb", "read", [0, 0, 2, 0], 1.5)]
    )
    assert 'sum{device="sda",op="read"} 0.75' in third.lines


def test_a_series_not_added_leaves_with_its_prefixes() -> None:
    lines = HistogramLines(NAME, LE)
    for k in range(50):  # disks come and go: what is kept follows the last family
        fam = _written(
            lines, [(f"loop{k}", "read", [k, 0, 0, 0], 0.0), ("sda", "write", [1, 1, 1, 1], 2.0)]
        )
        assert f'loop{k - 1}"' not in fam.lines
        assert len(lines._prefixes) == 2 and len(lines._last) == 2
    assert _written(lines, []).count == 0
    assert lines._prefixes == {} and lines._last == {}


def test_a_render_that_failed_half_way_adds_nothing() -> None:
    lines = HistogramLines(NAME, LE)
    lines.add("sdz", "read", [1, 1, 1, 1], 1.0)  # a render that raised after this
    fam = _written(lines, [("sda", "read", [1, 0, 0, 0], 0.0)])
    assert "sdz" not in fam.lines and "sdz" not in str(fam.samples)


def test_slots_must_match_the_buckets() -> None:
    with pytest.raises(ValueError, match="3 slots for 4 buckets"):
        HistogramLines(NAME, LE).add("sda", "read", [1, 2, 3], 0.0)
    with pytest.raises(ValueError, match=r"\+Inf"):
        HistogramLines(NAME, ("1.0",))


def test_reused_text_family_renders_alike() -> None:
    fams = reusable([_written(HistogramLines(NAME, LE), [("sda", "read", [1, 2, 3, 4], 0.5)])])
    renderer = TextRenderer(_Families(*fams))  # type: ignore[arg-type]
    assert renderer.render() == renderer.render() == _exposition(*fams)


_VALUES = st.lists(
    st.tuples(st.text(max_size=8), st.text(max_size=8), st.floats(allow_nan=True)),
    max_size=6,
    unique_by=lambda s: (s[0], s[1]),
)


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.sampled_from(["counter", "gauge"]), st.booleans())
def test_series_lines_are_generate_latests(
    series: list[tuple[str, str, float]], typ: str, twice: bool
) -> None:
    kind = CounterMetricFamily if typ == "counter" else GaugeMetricFamily
    want = kind("wattbit_disk_io_bytes", "bytes", labels=["device", "op"])
    for device, op, value in series:
        want.add_metric([device, op], value)
    lines = SeriesLines("wattbit_disk_io_bytes", typ, ("device", "op"))
    for _ in range(2 if twice else 1):  # the second family from lines kept from the first
        lines.begin()
        for device, op, value in series:
            lines.add((device, op), value)
        fam = lines.family("bytes")
    assert _text(fam) == _exposition(want)
    assert _exposition(fam) == _exposition(want)


def test_series_lines_rewrite_what_changed_and_forget_what_left() -> None:
    lines = SeriesLines("wattbit_disk_busy_seconds", "counter", ("device",))
    for k in range(20):
        lines.begin()
        lines.add((f"loop{k}",), 1.0)
        lines.add(("sda",), 0.0 if k % 2 else -0.0)  # -0.0 is written otherwise than 0.0
        fam = lines.family("busy")
        assert (
            fam.lines.splitlines()[1]
            == f'wattbit_disk_busy_seconds_total{{device="sda"}} {"0.0" if k % 2 else "-0.0"}'
        )
        assert f"loop{k - 1}" not in fam.lines and len(lines._prefixes) == 2
    with pytest.raises(ValueError, match="histogram is not a counter"):
        SeriesLines("x", "histogram", ())
    with pytest.raises(ValueError, match="1 label values"):
        SeriesLines("x", "gauge", ("a", "b")).add(("a",), 1.0)
