"""The report's whole output over two hand-built windows, byte for byte: RUN.json, RUN.md,
RUN.html and the lines `wattbit report` prints, so that a change in the analysis or the
renderers shows as one reviewable diff of tests/fixtures/report/.

The charts' PNGs are left out (their bytes are matplotlib's, which changes them between
versions); the per-bin series they draw are kept as RUN.series.json instead.

The windows are test_report_math's: ``small`` (two hosts, disks, an energy counter and a switch
on watts, compared with itself) and ``ph`` (three phase runs, idle watts from the idle
phases). Two things vary from run to run and are fixed here: ``generated_at`` (``now``) and
the timings.

After an intended change, rewrite the goldens with WATTBIT_UPDATE_GOLDEN=1 and review the diff;
by default a mismatch fails.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from collector.report import render
from collector.report.analyse import Result, analyse, compare
from collector.report.gather import Gathered
from collector.report.series import VerdictData
from tests.support.env import FIXTURES
from tests.support.golden import assert_golden
from tests.unit.test_report_math import phased_window, small_window

GOLDEN = FIXTURES / "report"
NOW = 1_714_557_600.0
PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")
TIMINGS = {"count": 0.25, "compute": 0.001, "total": 0.5}


def _result(g: Gathered, compared: bool) -> Result:
    res = analyse(g, now=NOW)
    doc = replace(res.doc, timings_seconds=dict(TIMINGS))
    if compared:
        doc = replace(doc, compare=compare(doc, doc))
    return replace(res, doc=doc)


def _flow_rates(n: int) -> dict[str, list[tuple[dict[str, str], list[float | None]]]]:
    """Two flow keys of the tcp exporter (synthetic): a stream to 10.1.2.0/24 window-limited a
    fifth of its busy time, and a SciTags-marked one whose sender sat waiting for data."""
    keys = (
        ({"host": "h", "peer": "10.1.2.0/24", "port": "5201"}, (1.0, 0.2, 1.5e8)),
        ({"host": "h", "peer": "2001:db8::/48", "experiment": "2", "activity": "5"},
         (0.1, 0.0, 5e7)),
    )  # fmt: skip
    out: dict[str, list[tuple[dict[str, str], list[float | None]]]] = {}
    for lab, (busy, rwnd, sent) in keys:
        for k, v in (("flow_busy", busy), ("flow_rwnd", rwnd), ("flow_sndbuf", 0.0),
                     ("flow_sent", sent), ("flow_received", sent / 50),
                     ("flow_retrans", 0.0), ("flow_segs", sent / 9000)):  # fmt: skip
            out.setdefault(k, []).append((lab, [v] * n))
    return out


def phased_with_limits() -> Gathered:
    """``ph`` with a link speed for eth0 (3.2 Gbit/s), so the verdict has something to judge:
    the full phase's 2 and 3 Gbit/s are 62.5 % and 93.75 % of it; and two flow keys, so the
    transfers section has rows."""
    g = phased_window()
    data = VerdictData(nic_speed={("h", "eth0"): [4e8] * g.grid.n}, rates=_flow_rates(g.grid.n))
    return replace(g, verdict=data)


@pytest.mark.parametrize(
    ("window", "compared"),
    [(small_window, True), (phased_with_limits, False)],
    ids=["small", "ph"],
)
def test_report_output_is_the_golden(window: object, compared: bool, tmp_path: Path) -> None:
    res = _result(window(), compared)  # type: ignore[operator]
    paths = render.write(res, tmp_path)
    text = tmp_path / f"{res.doc.run}.txt"
    text.write_text("\n".join(render.summary_lines(res.doc)) + "\n")
    series = tmp_path / f"{res.doc.run}.series.json"
    charts = {
        "timelines": {k: asdict(v) for k, v in res.timelines.items()},
        "disk_busy": res.disk_busy,
        "edges": res.grid.edges,
    }
    series.write_text(json.dumps(charts, indent=1) + "\n")
    for got in [*paths, text, series]:
        golden = GOLDEN / got.name
        assert_golden(golden, PNG.sub("data:image/png;base64,PNG", got.read_text()))


def test_a_nic_the_verdict_leaves_out_is_not_charted_at_100_percent() -> None:
    """``ph`` with a stated link speed of 0.8 Gbit/s, which its 2-3 Gbit/s disprove: the verdict
    leaves eth0 out (a wrong capacity), and the HTML's utilisation chart did draw it, capped, at
    100 %. It is now left out of the chart too, with the verdict's words under it."""
    g = phased_window()
    g = replace(g, verdict=VerdictData(nic_speed={("h", "eth0"): [1e8] * g.grid.n}))
    res = _result(g, compared=False)
    lb = res.doc.hosts["h"].limited_by
    assert lb is not None and "NIC eth0 left out" in lb.evidence, lb
    assert res.usage is not None and ("nic", "eth0") in res.usage.util["h"]  # computed, capped
    assert "nic" not in render.resource_lines(res, "h")
    page = render.html_report(res)
    note = re.search(
        r'<p class="note">Not in the utilisation chart, as in the verdict: (.*?)</p>', page
    )
    assert note is not None, "no note under the chart"
    assert note.group(1).startswith("NIC eth0 left out: it moved 312 % of its stated 0.8 Gbit/s")
    assert note.group(1).rstrip(".") in lb.evidence  # the verdict's own words
    # a capacity that holds (the golden's 3.2 Gbit/s) is charted, and no note is written
    ok = _result(phased_with_limits(), compared=False)
    assert "nic" in render.resource_lines(ok, "h")
    assert "Not in the utilisation chart" not in render.html_report(ok)
