"""The report's figures and words are the same from Prometheus and from VictoriaMetrics.

The two stores keep other last bits of the same sample: Prometheus the exporter's double as
sent, VictoriaMetrics 1.79 a decimal of about 12 significant digits. The answers below are the
two stores' real answers in one run of tests/integration/test_fleet_store.py (site b, 2 s
steps, the flow key of a scrape connection): `last_over_time` per step of
`wattbit_tcp_flow_busy_seconds_total`, 0.11599999999999999 from Prometheus 2.42 where
VictoriaMetrics 1.79 answered 0.116. Read as sent, the key's busy share over the first six
steps came out 0.005 from one and 0.005000000000000001 from the other, and the evidence's
"busy 0 % of the time" read "1 %" from VictoriaMetrics (a clean-clone CI run failed on that,
for "the other flows": docs/longterm-store.md, quirk 7).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.report import binned as B
from collector.report import compute as C
from collector.report import prom as P
from collector.report.series import Grid
from collector.report.verdict import steps as S
from collector.report.verdict import tcp

GRID = Grid.make(1795971826.975, 1795971843.19, 2.0)  # 9 steps, the last one 0.215 s
LABELS = {"host": "mover-b", "peer": "127.0.0.1", "port": "50173", "cgroup": "/"}
# last_over_time per edge index (edges 0-2 had no sample: the key's socket was not open yet)
BUSY = {
    "prometheus": {3: 0.044, 4: 0.044, 5: 0.11599999999999999, 6: 0.11599999999999999,
                   7: 0.11599999999999999, 8: 0.22},
    "victoriametrics": {3: 0.044, 4: 0.044, 5: 0.116, 6: 0.116, 7: 0.116, 8: 0.22},
}  # fmt: skip
SOCKETS = [None, None, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, None]  # both gauges' step means, both
STEPS = list(range(6))


class Store(P.Prometheus):
    """A store answering the report's queries of one counter with recorded values."""

    def __init__(self, kind: str, values: dict[int, float]) -> None:
        super().__init__(f"http://{kind}.invalid")
        self.kind, self.values = kind, values

    def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
        assert params is not None
        q = params["query"]
        if q == P.RANGE_PROBE:  # Prometheus 2's ranges include their left end, VM's do not
            n = "11" if self.kind == "prometheus" else "10"
            return {"resultType": "vector", "result": [{"metric": {}, "value": [0, n]}]}
        if path == "/api/v1/query_range":
            assert q.startswith("last_over_time("), q
            start, end, step = (float(params[k]) for k in ("start", "end", "step"))
            times = [start + i * step for i in range(round((end - start) / step) + 1)]
            points = [[t, repr(self.values[k])] for t in times
                      if (k := GRID.index(t)) is not None and k in self.values]  # fmt: skip
            return {"resultType": "matrix", "result": [{"metric": LABELS, "values": points}]}
        t = float(params["time"])
        value = 0.0 if q.startswith("resets(") else self.values.get(GRID.n)
        answer = [] if value is None else [{"metric": LABELS, "value": [t, repr(value)]}]
        return {"resultType": "vector", "result": answer}


def busy_share(rates: B.Bins) -> float | None:
    """The key's busy share per feeding socket over STEPS, as the verdict judges it."""
    flow = tcp.Flow(GRID.n, busy=rates, sent=[1.0] * GRID.n, received=[0.0] * GRID.n)
    flow.gauges = {"sockets": SOCKETS, "app_limited": SOCKETS}
    return tcp.judge(flow, STEPS, GRID.step).busy_per_socket


def test_the_stores_answers_as_sent_put_the_figure_on_either_side_of_a_boundary() -> None:
    """The premise: the arithmetic on the answers as the stores sent them differs in its
    last bit, on a boundary of the evidence's words."""
    shares = {}
    for kind, values in BUSY.items():
        last = [values.get(k) for k in range(GRID.n + 1)]
        shares[kind] = busy_share(C.counter_from_last(last).window_rates(GRID.edges, 3))
    assert shares == {"prometheus": 0.005, "victoriametrics": 0.005000000000000001}
    assert (S.pct(shares["prometheus"]), S.pct(shares["victoriametrics"])) == ("0 %", "1 %")


def test_counter_rates_are_the_same_from_both_stores() -> None:
    """Read through binned (as gathering does), both stores give the same rates, bit for bit,
    and so the same share and the same words."""
    got = {}
    for kind, values in BUSY.items():
        ((labels, rates),) = B.counter_rates(
            Store(kind, values), GRID, "wattbit_tcp_flow_busy_seconds_total", "m", 2.0, 3
        )
        assert labels == LABELS
        got[kind] = rates
    assert got["prometheus"] == got["victoriametrics"]
    share = busy_share(got["prometheus"])
    assert share is not None and math.isclose(share, 0.005, rel_tol=1e-12)
    assert share == busy_share(got["victoriametrics"])


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        (0.11599999999999999, 0.116),  # Prometheus' double, VictoriaMetrics' decimal
        (0.055999999999999994, 0.056),
        (0.0007059999999999999, 0.000706),  # a gauge's step mean (srtt, seconds)
        (12345678.123000002, 12345678.123),  # above 1e6 VictoriaMetrics keeps about 15 digits
        (-0.11599999999999999, -0.116),
    ],
)
def test_steady_gives_the_digits_every_store_keeps(sent: float, kept: float) -> None:
    assert P.steady(sent) == P.steady(kept) == kept


@pytest.mark.parametrize(
    "v",
    [0.0, -0.0, 3.0, 409201.0, 12345678901234.0, float(2**53 - 1), 1795971894.123, 0.116,
     math.inf, -math.inf],
)  # fmt: skip
def test_steady_keeps_integers_short_decimals_and_registry_times(v: float) -> None:
    """Integers (byte and segment counters) are exact in both stores and stay exact; a
    millisecond time (13 digits, above 1e6) keeps its milliseconds."""
    assert P.steady(v) == v


def test_steady_keeps_nan() -> None:
    assert math.isnan(P.steady(math.nan))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_short_answer_is_steady_already(x: float) -> None:
    """The parser's cheap case: a value written in at most DIGITS + 1 characters is taken as
    it is, and that is what steady() gives; a longer one is steadied."""
    for text in (repr(x), f"{x:.12g}", f"{x:.6g}"):
        ((_t, v),) = P.Series({}, [P._sample([1.0, text])]).samples
        assert v == P.steady(float(text)), text
