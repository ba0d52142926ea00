"""The report's power sources (collector/report/power.py): one source per host in the rules'
order, a host without metered outlets measured by its BMC, the BMC against the PDU, RAPL's
share, and a site total that counts every watt once."""

from __future__ import annotations

from collector.report.analyse import analyse
from collector.report.gather import Gathered
from collector.report.render import markdown, summary_lines
from collector.report.series import (
    BMC_ENERGY,
    BMC_POWER,
    FEED_POWER,
    NIC,
    RAPL_ENERGY,
    Grid,
    Track,
    Window,
    outlets_of,
)
from tests.unit.test_report_math import PDU_TARGET, _counter, _watts, gathered


def _meter(metric: str, labels: dict[str, str], values: list[float], grid: Grid) -> Track:
    tr = _watts({**labels, **PDU_TARGET}, list(values), grid)
    tr.metric = metric
    return tr


def window() -> Gathered:
    """30 s in three 10 s bins.

    both     outlet p/1 400 W and a Redfish BMC 460 W (+60 W, 1.15: they disagree); RAPL package
             150 W + dram 30 W = 180 W (its core zone, inside the package, left out): 45 %
    bmconly  no outlet: an IPMI BMC 250 W with an energy counter (7 500 J), 1 Gbit/s
    feed     bank 1 of rack4 (which meters no outlets) 300 W, an IPMI BMC 290 W (-10 W: agree)
    p/2      a switch outlet on no host, 50 W; p/unit a whole-unit feed of PDU p on no host
             (PDU p meters outlets: the site must not count it again)
    """
    w = Window("pw", 1000.0, 1030.0, "run")
    g = Grid.make(w.start, w.end, 10.0)

    def agent(h: str) -> dict[str, str]:
        return {"host": h, "instance": f"{h}:9731", "job": "wattbit-agent"}

    tracks = [
        _counter(NIC, {**agent("both"), "interface": "eth0", "direction": "tx"},
                 [0, 1.25e9, 2.5e9, 3.75e9], g),
        _counter(NIC, {**agent("bmconly"), "interface": "eth0", "direction": "tx"},
                 [0, 1.25e9, 2.5e9, 3.75e9], g),
        _counter(RAPL_ENERGY, {**agent("both"), "zone": "package", "package": "0"},
                 [0, 1500, 3000, 4500], g),
        _counter(RAPL_ENERGY, {**agent("both"), "zone": "dram", "package": "0"},
                 [0, 300, 600, 900], g),
        _counter(RAPL_ENERGY, {**agent("both"), "zone": "core", "package": "0"},
                 [0, 1000, 2000, 3000], g),
        _watts({"pdu": "p", "outlet": "1", "outlet_name": "both", "host": "both",
                "component": "server", **PDU_TARGET}, [400.0] * 3, g),
        _watts({"pdu": "p", "outlet": "2", "outlet_name": "sw", "host": "",
                "component": "switch", **PDU_TARGET}, [50.0] * 3, g),
        _meter(FEED_POWER, {"pdu": "p", "feed": "unit", "host": "", "component": ""},
               [460.0] * 3, g),
        _meter(FEED_POWER, {"pdu": "rack4", "feed": "bank:1", "host": "feed",
                            "component": "storage"}, [300.0] * 3, g),
        _meter(BMC_POWER, {"bmc": "both-bmc", "host": "both", "component": "server",
                           "protocol": "redfish"}, [460.0] * 3, g),
        _meter(BMC_POWER, {"bmc": "bmconly-bmc", "host": "bmconly", "component": "server",
                           "protocol": "ipmi"}, [250.0] * 3, g),
        _counter(BMC_ENERGY, {"bmc": "bmconly-bmc", "host": "bmconly", "component": "server",
                              **PDU_TARGET}, [0, 2500, 5000, 7500], g),
        _meter(BMC_POWER, {"bmc": "feed-bmc", "host": "feed", "component": "storage",
                           "protocol": "ipmi"}, [290.0] * 3, g),
    ]  # fmt: skip
    return gathered(w, g, tracks, count_seconds=0.1, requests=1)


def test_meters_and_their_kinds() -> None:
    meters = outlets_of(window().tracks)
    got = [(m.name, m.kind, m.host, m.energy is not None) for m in meters]
    assert got == [
        ("p/1", "outlets", "both", False),
        ("p/2", "outlets", "", False),
        ("p/unit", "pdu", "", False),
        ("rack4/bank:1", "pdu", "feed", False),
        # the BMC's energy counter (no protocol label) pairs with its power
        ("bmc:bmconly-bmc", "ipmi", "bmconly", True),
        ("bmc:both-bmc", "redfish", "both", False),
        ("bmc:feed-bmc", "ipmi", "feed", False),
    ]


def test_each_host_has_one_source() -> None:
    doc = analyse(window(), now=0.0).doc
    both, bmconly, feed = doc.hosts["both"], doc.hosts["bmconly"], doc.hosts["feed"]
    # the outlet's 400 W, not the BMC's: J/Gbit of 30 Gbit from 12 000 J
    assert (both.power_source, both.outlets, both.energy_joules) == ("outlets", ["p/1"], 12000.0)
    assert both.joules_per_gigabit == 400.0
    # no outlet: the BMC's energy counter gives its energy and its J/Gbit
    assert (bmconly.power_source, bmconly.outlets) == ("ipmi", ["bmc:bmconly-bmc"])
    assert bmconly.energy_joules == 7500.0 and bmconly.energy_source == "counter"
    assert bmconly.joules_per_gigabit == 250.0
    assert (feed.power_source, feed.energy_joules) == ("pdu", 9000.0)


def test_reconciliation_and_rapl_share() -> None:
    doc = analyse(window(), now=0.0).doc
    both = doc.power["both"]
    r = both.reconciliation
    assert r is not None
    assert (r.pdu_source, r.bmc_source) == ("outlets", "redfish")
    assert (r.pdu_watts_mean, r.bmc_watts_mean, r.difference_watts) == (400.0, 460.0, 60.0)
    assert r.ratio == 1.15 and r.disagree
    assert both.rapl is not None
    assert both.rapl.zones == ["dram/0", "package/0"]
    assert (both.rapl.energy_joules, both.rapl.watts_mean, both.rapl.share) == (5400.0, 180.0, 0.45)
    f = doc.power["feed"].reconciliation
    assert f is not None and (f.pdu_source, f.bmc_source, f.difference_watts) == (
        "pdu",
        "ipmi",
        -10.0,
    )
    assert not f.disagree  # 10 W: within 20 W
    assert doc.power["bmconly"].reconciliation is None  # nothing to compare with
    assert [w for w in doc.warnings if "disagree" in w] == [
        "host both: its redfish BMC (460 W) and its PDU's outlets (400 W) disagree by +60 W, "
        "BMC/PDU 1.15; its energy is the PDU's (docs/alerts.md#wattbitpowersourcesdisagree)"
    ]


def test_site_and_components_count_every_watt_once() -> None:
    doc = analyse(window(), now=0.0).doc
    # p/1 12 000 + p/2 1 500 + rack4/bank:1 9 000 + bmconly's BMC 7 500; not PDU p's unit feed
    # (its outlets are counted), nor the BMCs of hosts a PDU meters
    assert doc.site.energy_joules == 30000.0
    assert doc.components["server"].energy_joules == 12000.0  # outlets only, no BMC
    assert doc.components["storage"].energy_joules == 9000.0  # the feed
    assert doc.components["switch"].energy_joules == 1500.0
    assert [o.outlet for o in doc.outlets] == ["1", "2"]  # the outlets table: outlets only


def test_rendered() -> None:
    doc = analyse(window(), now=0.0).doc
    md = markdown(doc, "pw.html")
    assert "## Power sources" in md
    assert (
        "| both | outlets | 400 |  | 460 (redfish) | +60 | 1.15 — disagree | 180 | 45.0 % |" in md
    )
    assert "| bmconly | ipmi |  |  | 250 (ipmi) |  |  |  |  |" in md
    assert "| feed | pdu |  | 300 | 290 (ipmi) | -10 | 0.967 |  |  |" in md
    lines = summary_lines(doc)
    assert (
        "  power of both: energy from outlets; redfish BMC 460 W vs outlets 400 W "
        "(BMC/PDU 1.15, disagree); RAPL 180 W (45.0 % of it)"
    ) in lines
    j = doc.to_json()
    assert j["hosts"]["bmconly"]["power_source"] == "ipmi"
    assert j["power"]["both"]["reconciliation"]["ratio"] == 1.15
