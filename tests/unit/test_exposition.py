"""The memoising renderer writes exactly what prometheus_client.generate_latest writes."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Timestamp

from collector.web.exposition import TextRenderer, metrics_app
from exporters.base import ExportersCollector, clean_text
from tests.support.synthetic import SyntheticBlockio


def _stable(body: bytes) -> bytes:
    """The exposition without the one value that changes on every collection."""
    return re.sub(rb"(wattbit_exporter_duration_seconds\{[^}]*\}) \S+", rb"\1 X", body)


def _registry() -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=False)
    r.register(ExportersCollector([SyntheticBlockio(6)]))
    Gauge("odd_labels", 'quotes " and \\ and\nnewline', ["v"], registry=r).labels(
        v='a"b\\c\nd'
    ).set(float("nan"))
    Counter("plain", "a counter with _created", registry=r).inc(3)  # OpenMetrics sample
    Histogram("h", "hist", registry=r).observe(0.3)
    return r


def test_byte_for_byte_generate_latest() -> None:
    r = _registry()
    renderer = TextRenderer(r)
    for _ in range(3):  # cold cache, then warm
        assert _stable(renderer.render()) == _stable(generate_latest(r))


class _Families:
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> list[Any]:
        return self.families


_NAMES = st.sampled_from(["a", "b_total", "c_created", "c_gsum", "c_gcount", "c", "c_bucket"])
_SAMPLE = st.tuples(
    _NAMES,
    st.dictionaries(st.sampled_from(["le", "dev", "x-y"]), st.text(max_size=4), max_size=2),
    st.floats(allow_nan=False) | st.sampled_from([float("nan"), -0.0]),
    st.none()
    | st.floats(0, 2e9)
    | st.builds(Timestamp, st.integers(0, 2**31), st.integers(0, 999999999)),
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["gauge", "counter", "gaugehistogram", "histogram", "info", "unknown"]),
    samples=st.lists(_SAMPLE, max_size=6),
)
def test_families_with_timestamps_or_openmetrics_samples_as_generate_latest(
    kind: str, samples: list[tuple[str, dict[str, str], float, Any]]
) -> None:
    """Those the renderer writes whole, itself: as the library does, in any mix."""
    m = Metric("c", "doc \\ and\nline", kind)
    for name, labels, value, ts in samples:
        m.add_sample(name, labels, value, ts)
    r = _Families([m])
    renderer = TextRenderer(r)
    assert renderer.render() == generate_latest(r)  # type: ignore[arg-type]
    assert renderer.render() == generate_latest(r)  # type: ignore[arg-type]


def test_values_change_prefixes_stay() -> None:
    r = CollectorRegistry(auto_describe=False)

    class C:
        value = 1.0

        def collect(self) -> list[CounterMetricFamily]:
            f = CounterMetricFamily("x", "x", labels=["device"])
            f.add_metric(["sda"], self.value)
            return [f]

    c = C()
    r.register(c)
    renderer = TextRenderer(r)
    assert b'x_total{device="sda"} 1.0' in renderer.render()
    c.value = 2.5e20
    assert b'x_total{device="sda"} 2.5e+20' in renderer.render()
    assert renderer.render() == generate_latest(r)
    # the last line is reused only for a value written alike: not 0.0 for -0.0, nor NaN
    for value in (0.0, -0.0, 0.0, float("nan"), float("nan"), 1, 1.0, float("inf"), 3.0):
        c.value = value  # type: ignore[assignment]
        assert renderer.render() == generate_latest(r), value


def test_an_equal_family_is_reused_and_any_change_shows_at_the_next_render() -> None:
    """Issue 35: a family equal to its last one (names, labels, values' bits, help, type) is
    written as then; whatever changes (a value, its sign, a label, the help, the type, a sample
    more) shows at the very next render, as generate_latest writes it."""
    r = CollectorRegistry(auto_describe=False)

    class C:
        def __init__(self) -> None:
            self.kind, self.doc = "gauge", "help"
            self.rows: list[tuple[str, float]] = [("sda", 1.0), ("sdb", 0.0)]

        def collect(self) -> list[Any]:
            cls = GaugeMetricFamily if self.kind == "gauge" else CounterMetricFamily
            f = cls("y", self.doc, labels=["device"])
            for device, value in self.rows:
                f.add_metric([device], value)
            return [f]

    c = C()
    r.register(c)
    renderer = TextRenderer(r)
    first = renderer.render()
    assert first == generate_latest(r)
    text = renderer._families["y"].text
    assert renderer.render() == first and renderer._families["y"].text is text  # reused
    changes: list[Callable[[], None]] = [
        lambda: setattr(c, "rows", [("sda", 2.0), ("sdb", 0.0)]),  # a value
        lambda: setattr(c, "rows", [("sda", 2.0), ("sdb", -0.0)]),  # equal, written "-0.0"
        lambda: setattr(c, "rows", [("sda", 2.0), ("sdb", 0.0)]),
        lambda: setattr(c, "rows", [("sda", 2.0), ("sdc", 0.0)]),  # a label
        lambda: setattr(c, "rows", [("sda", 2.0), ("sdc", 0.0), ("sdd", 5.0)]),  # one more
        lambda: setattr(c, "rows", [("sda", float("nan")), ("sdc", 0.0)]),
        lambda: setattr(c, "rows", [("sda", float("inf")), ("sdc", 0.0)]),
        lambda: setattr(c, "doc", "other help"),
        lambda: setattr(c, "kind", "counter"),
        lambda: setattr(c, "rows", []),
    ]
    for change in changes:
        before = renderer.render()
        change()
        after = renderer.render()
        assert after == generate_latest(r)
        assert after != before
        assert renderer.render() == after  # and the same again while unchanged


def test_wsgi_app_gzip_and_head() -> None:
    r = _registry()
    app = metrics_app(r)
    got: dict[str, object] = {}

    def start(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app({"HTTP_ACCEPT_ENCODING": "gzip", "REQUEST_METHOD": "GET"}, start))
    assert got["status"] == "200 OK"
    assert _stable(gzip.decompress(body)) == _stable(generate_latest(r))
    assert b"".join(app({"REQUEST_METHOD": "HEAD"}, start)) == b""


@pytest.mark.parametrize("method", ["POST", "PUT", "TRACE", "DELETE", "OPTIONS"])
def test_wsgi_app_refuses_other_methods(method: str) -> None:
    app = metrics_app(_registry())
    got: dict[str, object] = {}

    def start(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    b"".join(app({"REQUEST_METHOD": method}, start))
    assert got["status"] == "405 Method Not Allowed"
    assert got["headers"] == {"Content-Type": "text/plain; charset=utf-8", "Allow": "GET, HEAD"}


def test_a_lone_surrogate_costs_its_character_not_the_page() -> None:
    """A label value no exporter cleaned (a lone surrogate: valid JSON, not UTF-8) renders
    with that character replaced; every other series stays (issue 34)."""
    r = CollectorRegistry(auto_describe=False)
    g = Gauge("bmc_like", "doc", ["model"], registry=r)
    g.labels(model="R750\ud800x").set(1)
    g.labels(model="healthy").set(2)
    body = TextRenderer(r).render().decode("utf-8")
    assert 'bmc_like{model="healthy"} 2.0' in body
    assert 'bmc_like{model="R750?x"} 1.0' in body


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Contoso\ud800", "Contoso\ufffd"),
        ("a\x1b[31mb", "a\ufffd[31mb"),
        ("line\nFORGED", "line\ufffdFORGED"),
        ("  PowerEdge R750  ", "PowerEdge R750"),
        (7, ""),
        ("x" * 300, "x" * 128),
    ],
)
def test_clean_text(raw: object, clean: str) -> None:
    """Strings from outside: printable, one line, bounded; anything else empty."""
    assert clean_text(raw) == clean
