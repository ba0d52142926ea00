"""Host power from its source, end to end: a real Prometheus with the project's scrape jobs and
rules scrapes agents and a site collector, and `wattbit report` reads it.

* The first test serves **stand-in** expositions (the agents' and the collector's, at known
  rates) for a full minute: it pins what the real collector cannot give, exact figures for the
  rules' 1m windows (J/Gbit, RAPL's share as a rule) and the report's arithmetic.
* In the second, `wattbit collector` itself polls a real PDU recording (snmpsim) and four
  BMCs (`bmcs:`): three real servers' Redfish mockups (sushy-static) and pyghmi's DCMI
  simulator over IPMI (FreeIPMI's ipmi-raw). Hosts with no outlet and no feed get their watts
  and J/Gbit from their BMC (Redfish, IPMI); hosts with a metered outlet and a BMC get the
  outlet's, the reconciliation, and, where they disagree, the alert's expression returns them.
* In the third, `wattbit collector` polls two real PDU recordings: an Eaton ePDU's whole unit
  mapped to one host (`feeds:`, source `pdu`) and two APC outlets mapped to another (source
  `outlets`).

The agents are stand-ins throughout (NIC counters and RAPL growing at known rates: the agent's
own exporters are tested on real parts elsewhere); Prometheus, its rules and the report are
the real ones.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_rules_promtool import (
    ALERTS,
    prometheus_config,
    query,
    serve_metrics,
)
from tests.support.env import ROOT, require
from tests.support.realparts import server, wait_for

GBPS = {"both01": 8.0, "bmc01": 4.0}  # tx Gbit/s of each agent
RAPL_W = {"package": 100.0, "dram": 20.0, "core": 70.0}  # core is inside the package
OUTLET_W, BMC_W = 300.0, {"both01": ("redfish", 345.0), "bmc01": ("ipmi", 250.0)}


def agent_body(gbps: float, t0: float, rapl: bool = False) -> Callable[[], bytes]:
    """An agent's /metrics (no host label: the scrape gives it): tx at ``gbps``, and RAPL."""

    def body() -> bytes:
        t = time.monotonic() - t0
        lines = ["# TYPE wattbit_nic_bytes_total counter",
                 f'wattbit_nic_bytes_total{{interface="eth0",direction="tx"}} '
                 f"{gbps * 1e9 / 8 * t:.0f}",
                 'wattbit_nic_bytes_total{interface="eth0",direction="rx"} 0']  # fmt: skip
        if rapl:
            lines.append("# TYPE wattbit_rapl_energy_joules_total counter")
            for zone, w in RAPL_W.items():
                lines.append(
                    f'wattbit_rapl_energy_joules_total{{zone="{zone}",package="0"}} {w * t:.6f}'
                )
        return ("\n".join(lines) + "\n").encode()

    return body


def collector_body() -> bytes:
    """The collector's /metrics: an outlet of both01, the BMCs of both hosts."""
    lines = [
        "# TYPE wattbit_pdu_outlet_power_watts gauge",
        'wattbit_pdu_outlet_power_watts{pdu="rack1",outlet="1",outlet_name="both01",'
        f'host="both01",component="server"}} {OUTLET_W}',
        "# TYPE wattbit_bmc_power_watts gauge",
    ]
    for host, (protocol, watts) in BMC_W.items():
        lines.append(
            f'wattbit_bmc_power_watts{{bmc="{host}-bmc",host="{host}",component="server",'
            f'protocol="{protocol}"}} {watts}'
        )
    return ("\n".join(lines) + "\n").encode()


def config(agents: dict[str, int], collector: int) -> str:
    """deploy/prometheus/prometheus.yml's jobs pointed at the stand-ins, 1s intervals."""
    targets = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"host": h}} for h, port in agents.items()
    ]
    return yaml.safe_dump(prometheus_config(targets, collector))


@contextlib.contextmanager
def prometheus(tmp_path: Path, agents: dict[str, int], collector: int) -> Iterator[tuple[str, int]]:
    """A real Prometheus scraping the agents and the collector (config()): its URL and port."""
    (tmp_path / "prometheus.yml").write_text(config(agents, collector))
    with server(
        "prometheus",
        lambda port: ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                      f"--storage.tsdb.path={tmp_path / 'data'}",
                      f"--web.listen-address=127.0.0.1:{port}"],
        tmp_path,
    ) as url:  # fmt: skip
        yield url, int(url.rsplit(":", 1)[1])


def collector_scrapes(port: int, collector: int, window: str) -> float:
    """How many times Prometheus scraped the collector over the last window ("40s")."""
    job = f"instance=127.0.0.1:{collector},job=wattbit-collector"
    return query(port, f'count_over_time(up{{job="wattbit-collector"}}[{window}])').get(job, 0)


def wait_hosts_watts(port: int, collector: int, hosts: int) -> None:
    """Wait (2 min at most) for 25 s of the collector's scrapes and every host's watts."""
    wait_for(
        lambda: len(query(port, "host:wattbit_power_watts:sum")) == hosts
        and collector_scrapes(port, collector, "40s") >= 25,
        120,
        f"25 s of scrapes with the {hosts} hosts' watts",
    )  # fmt: skip


def report(url: str, name: str, out: Path) -> None:
    """`wattbit report` of the last 20 s (to 2 s ago) into out, as name; it must succeed."""
    end = time.time() - 2
    start = end - 20
    r = subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", "--start", f"{start:.3f}",
         "--end", f"{end:.3f}", "--name", name, "--prometheus", url, "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout


def test_host_power_by_source_rules_and_report(tmp_path: Path) -> None:
    """Stand-ins at exact rates for a minute: the rules' 1m values (J/Gbit, RAPL's share) and
    the report's arithmetic to the joule, which a real collector's polling cannot pin."""
    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    t0 = time.monotonic() - 30
    with (
        serve_metrics(agent_body(GBPS["both01"], t0, rapl=True)) as a1,
        serve_metrics(agent_body(GBPS["bmc01"], t0)) as a2,
        serve_metrics(collector_body) as c,
        prometheus(tmp_path, {"both01": a1, "bmc01": a2}, c) as (url, port),
    ):
        # A full minute of scrapes: the rules' 1m rates are fair once their window is full
        # (before, rate() divides a shorter span's increase by the whole minute).
        wait_for(
            lambda: len(query(port, "host:wattbit_joules_per_gigabit:ratio1m")) == 2
            and collector_scrapes(port, c, "90s") >= 65,
            180,
            "65 s of scrapes and J/Gbit for both hosts",
        )  # fmt: skip
        at = time.time() - 1.5
        # --- the rules: one source per host, carried to J/Gbit
        assert query(port, "host:wattbit_power_watts:sum", at) == {
            "host=both01,source=outlets": OUTLET_W,
            "host=bmc01,source=ipmi": 250.0,
        }
        assert set(query(port, "host:wattbit_joules_per_gigabit:ratio1m", at)) == {
            "host=both01,source=outlets",
            "host=bmc01,source=ipmi",
        }
        assert query(port, "host:wattbit_power_watts:bmc_minus_pdu", at) == {
            "bmc_source=redfish,host=both01,pdu_source=outlets": 45.0
        }
        assert query(port, "host:wattbit_power_bmc_over_pdu:ratio", at) == {
            "bmc_source=redfish,host=both01,pdu_source=outlets": pytest.approx(1.15)
        }
        share = query(port, "host:wattbit_power_rapl_share:ratio", at)
        assert set(share) == {"host=both01,source=outlets"}
        assert share["host=both01,source=outlets"] == pytest.approx(120 / 300, rel=0.02)

        # --- the report over the last 20 s
        out = tmp_path / "report"
        report(url, "sources", out)
    doc = json.loads((out / "sources.json").read_text())
    hosts, power = doc["hosts"], doc["power"]
    duration = doc["window"]["duration_seconds"]
    for h, watts, source in (("both01", OUTLET_W, "outlets"), ("bmc01", 250.0, "ipmi")):
        d = hosts[h]
        assert d["power_source"] == source, h
        # constant watts: the energy is watts x the window, exactly
        assert d["energy_joules"] == pytest.approx(watts * duration, rel=1e-9), h
        # bits from counters growing at GBPS: within two 1 s scrapes of the window's
        assert d["gigabits"] == pytest.approx(GBPS[h] * duration, abs=2 * GBPS[h]), h
        assert d["joules_per_gigabit"] == pytest.approx(d["energy_joules"] / d["gigabits"]), h
    assert hosts["bmc01"]["outlets"] == ["bmc:bmc01-bmc"]
    rec = power["both01"]["reconciliation"]
    assert (rec["pdu_source"], rec["bmc_source"], rec["disagree"]) == ("outlets", "redfish", True)
    assert rec["pdu_watts_mean"] == pytest.approx(OUTLET_W) and rec["ratio"] == pytest.approx(1.15)
    assert power["bmc01"]["reconciliation"] is None
    rapl = power["both01"]["rapl"]
    assert rapl["zones"] == ["dram/0", "package/0"]
    assert rapl["share"] == pytest.approx(120 / 300, abs=120 * 1.0 / (300 * duration) * 2)
    # the site: the outlet and bmc01's BMC (both01's BMC would count it twice)
    assert doc["site"]["energy_joules"] == pytest.approx((OUTLET_W + 250.0) * duration, rel=1e-9)
    assert any("host both01: its redfish BMC" in w for w in doc["warnings"])
    md = (out / "sources.md").read_text()
    assert "## Power sources" in md and "| bmc01 | ipmi |" in md
    html = (out / "sources.html").read_text()
    assert "<h2>Power sources</h2>" in html


# --- the real collector polling real BMCs beside a real PDU --------------------------------

# One APC AP8641 recording (snmpsim) meters outlets 1 (163 W) and 20 (97 W); four BMCs are
# real mockups served by sushy-static and pyghmi's DCMI simulator, polled by `wattbit
# collector` itself (`bmcs:` beside `pdus:`):
# * agree01: outlet 20 and the HPE DL325 Gen10 Plus mockup's BMC (97 W): they agree;
# * disagree01: outlet 1 and the Dell R750 mockup's BMC (234 W): +71 W, 44 %, beyond the
#   alert's 20 W and 10 %;
# * bmc01: no outlet, no feed: the Gigabyte H262-Z63 mockup's BMC (100 W, Redfish);
# * ipmi01: no outlet, no feed: the DCMI simulator (250 W, IPMI).
BMC_PDU = "apc_ap8641"
REAL_OUTLETS = {"agree01": ("20", 97.0), "disagree01": ("1", 163.0)}  # the recording's values
REAL_MOCKUPS = {
    "agree01": "hpe-dl325-gen10plus",
    "disagree01": "dell-poweredge-r750",
    "bmc01": "gigabyte-h262-z63",
}
IPMI_W = 250
REAL_GBPS = {"agree01": 2.0, "disagree01": 1.0, "bmc01": 4.0, "ipmi01": 0.5}


def alert_expr(name: str) -> str:
    """The PromQL of one alert of alerts/wattbit-alerts.yml (its `for:` is promtool's part)."""
    doc = yaml.safe_load((ALERTS / "wattbit-alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name]
    assert len(rules) == 1, name
    return str(rules[0]["expr"])


def test_real_collector_bmcs_and_outlets(tmp_path: Path) -> None:
    """`wattbit collector` polls one real PDU recording and four BMCs (three real Redfish
    mockups, the DCMI simulator): hosts without an outlet get their watts and J/Gbit from their
    BMC (Redfish, IPMI); hosts with both get the outlet's, the reconciliation, and the
    disagreement alert's expression returns the one whose BMC is far from its outlet."""
    from tests.integration.test_bmc_redfish_mockups import HEADLINE
    from tests.support.bmcs import MOCKUPS, IpmiSim, SushyStatic, sushy_static_path
    from tests.support.env import RECORDINGS
    from tests.support.realparts import Collector, running
    from tests.support.snmpagents import SnmpSim, have_snmpsim

    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(sushy_static_path() is not None, "sushy-static (sushy-tools, PyPI) missing")
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) missing")
    require(RECORDINGS.is_dir(), f"no PDU recordings at {RECORDINGS}")
    bmc_w = {h: HEADLINE[m] for h, m in REAL_MOCKUPS.items()}
    assert bmc_w == {"agree01": 97.0, "disagree01": 234.0, "bmc01": 100.0}
    password = "not-a-real-password"
    with (
        SnmpSim({"pdu": RECORDINGS / f"{BMC_PDU}.snmprec"}) as sim,
        SushyStatic(MOCKUPS / REAL_MOCKUPS["agree01"], tmp_path) as agree,
        SushyStatic(MOCKUPS / REAL_MOCKUPS["disagree01"], tmp_path) as disagree,
        SushyStatic(MOCKUPS / REAL_MOCKUPS["bmc01"], tmp_path) as gb,
        IpmiSim(tmp_path, password, watts=IPMI_W) as ipmi,
    ):
        redfish = "\n".join(
            f"""\
  - name: {h}-bmc
    protocol: redfish
    address: {s.url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_BMC_PASSWORD
    timeout: 4s
    host: {h}
    component: server"""
            for h, s in (("agree01", agree), ("disagree01", disagree), ("bmc01", gb))
        )
        outlets = "\n".join(
            f"      - {{index: {i}, host: {h}, component: server}}"
            for h, (i, _) in REAL_OUTLETS.items()
        )
        cfg = f"""\
interval: 5s
auths:
  pdu: {{version: 2c, community: pdu}}
pdus:
  - name: rack-apc
    address: "{sim.endpoint}"
    auth: pdu
    timeout: 3s
    outlets:
{outlets}
bmcs:
{redfish}
  - name: ipmi01-bmc
    protocol: ipmi
    address: 127.0.0.1:{ipmi.port}
    username: {ipmi.user}
    password_env: WB_TEST_BMC_PASSWORD
    timeout: 4s
    host: ipmi01
    component: server
"""
        t0 = time.monotonic() - 30
        env = {"WB_TEST_BMC_PASSWORD": password}
        with (
            running(Collector(cfg, tmp_path, env=env)) as collector,
            serve_metrics(agent_body(REAL_GBPS["agree01"], t0)) as a1,
            serve_metrics(agent_body(REAL_GBPS["disagree01"], t0, rapl=True)) as a2,
            serve_metrics(agent_body(REAL_GBPS["bmc01"], t0)) as a3,
            serve_metrics(agent_body(REAL_GBPS["ipmi01"], t0)) as a4,
        ):

            def by_host(s: dict, name: str) -> dict[str, float]:
                """{host: value} of the series mapped to a host (the PDU's others have "")."""
                return {
                    dict(lb)["host"]: v
                    for (n, lb), v in s.items()
                    if n == name and dict(lb)["host"]
                }

            s = collector.scrape_until(
                "every outlet's and every BMC's watts",
                lambda s: (
                    len(by_host(s, "wattbit_pdu_outlet_power_watts")) == 2
                    and len(by_host(s, "wattbit_bmc_power_watts")) == 4
                ),
                timeout=120,
            )
            # the collector's readings are the recording's and the mockups' own figures
            assert by_host(s, "wattbit_pdu_outlet_power_watts") == {
                h: w for h, (_, w) in REAL_OUTLETS.items()
            }
            assert by_host(s, "wattbit_bmc_power_watts") == {**bmc_w, "ipmi01": IPMI_W}
            protocols = {
                dict(lb)["host"]: dict(lb)["protocol"]
                for (n, lb) in s
                if n == "wattbit_bmc_power_watts"
            }
            assert protocols == {**{h: "redfish" for h in bmc_w}, "ipmi01": "ipmi"}
            every_outlet = sum(
                v for (n, _), v in s.items() if n == "wattbit_pdu_outlet_power_watts"
            )
            agents = {"agree01": a1, "disagree01": a2, "bmc01": a3, "ipmi01": a4}
            with prometheus(tmp_path, agents, collector.port) as (url, port):
                job = f"instance=127.0.0.1:{collector.port},job=wattbit-collector"
                wait_hosts_watts(port, collector.port, 4)
                at = time.time() - 1.5
                # --- the recording rules: one source per host, the BMC set against the outlet
                assert query(port, "host:wattbit_power_watts:sum", at) == {
                    "host=agree01,source=outlets": 97.0,
                    "host=disagree01,source=outlets": 163.0,
                    "host=bmc01,source=redfish": 100.0,
                    "host=ipmi01,source=ipmi": float(IPMI_W),
                }
                assert query(port, "host:wattbit_power_watts:bmc_minus_pdu", at) == {
                    "bmc_source=redfish,host=agree01,pdu_source=outlets": 0.0,
                    "bmc_source=redfish,host=disagree01,pdu_source=outlets": 71.0,
                }
                assert query(port, "host:wattbit_power_bmc_over_pdu:ratio", at) == {
                    "bmc_source=redfish,host=agree01,pdu_source=outlets": 1.0,
                    "bmc_source=redfish,host=disagree01,pdu_source=outlets": pytest.approx(
                        234 / 163
                    ),
                }
                # the alert's expression (its 15m `for:` is promtool's: test_alerts_promtool)
                fired = query(port, alert_expr("WattbitPowerSourcesDisagree"), at)
                assert fired == {"bmc_source=redfish,host=disagree01,pdu_source=outlets": 71.0}
                assert query(port, "wattbit_bmc_up", at) == {
                    f"bmc={h}-bmc,{job}": 1.0 for h in (*bmc_w, "ipmi01")
                }
                out = tmp_path / "report"
                report(url, "real", out)
    doc = json.loads((out / "real.json").read_text())
    hosts, power = doc["hosts"], doc["power"]
    duration = doc["window"]["duration_seconds"]
    expected = {
        "agree01": ("outlets", 97.0, ["rack-apc/20"]),
        "disagree01": ("outlets", 163.0, ["rack-apc/1"]),
        "bmc01": ("redfish", 100.0, ["bmc:bmc01-bmc"]),
        "ipmi01": ("ipmi", float(IPMI_W), ["bmc:ipmi01-bmc"]),
    }
    for h, (source, watts, meters) in expected.items():
        d = hosts[h]
        assert (d["power_source"], d["outlets"]) == (source, meters), h
        # the collector's readings never change (a recording, a mockup): watts x the window
        assert d["energy_joules"] == pytest.approx(watts * duration, rel=1e-9), h
        assert d["gigabits"] == pytest.approx(REAL_GBPS[h] * duration, abs=2 * REAL_GBPS[h]), h
        assert d["joules_per_gigabit"] == pytest.approx(d["energy_joules"] / d["gigabits"]), h
    rec = power["agree01"]["reconciliation"]
    assert (rec["pdu_source"], rec["bmc_source"], rec["disagree"]) == ("outlets", "redfish", False)
    assert rec["bmc_watts_mean"] == pytest.approx(97.0) and rec["ratio"] == pytest.approx(1.0)
    rec = power["disagree01"]["reconciliation"]
    assert (rec["pdu_source"], rec["bmc_source"], rec["disagree"]) == ("outlets", "redfish", True)
    assert rec["pdu_watts_mean"] == pytest.approx(163.0)
    assert rec["bmc_watts_mean"] == pytest.approx(234.0)
    assert rec["ratio"] == pytest.approx(234 / 163)
    assert power["bmc01"]["reconciliation"] is None and power["ipmi01"]["reconciliation"] is None
    disagreeing = [w for w in doc["warnings"] if "BMC" in w and "disagree by" in w]
    assert len(disagreeing) == 1 and disagreeing[0].startswith("host disagree01: its redfish BMC")
    share = power["disagree01"]["rapl"]["share"]
    assert share == pytest.approx(120 / 163.0, abs=120 * 1.0 / (163.0 * duration) * 2)
    # the site: every outlet (mapped or not) and the BMCs of the hosts without one; the BMCs
    # of agree01 and disagree01 would count their outlets' watts twice
    site_w = every_outlet + 100.0 + IPMI_W
    assert doc["site"]["energy_joules"] == pytest.approx(site_w * duration, rel=1e-9)
    md = (out / "real.md").read_text()
    assert "| bmc01 | redfish |" in md and "| ipmi01 | ipmi |" in md


# --- the real site collector polling real PDU recordings -------------------------------------

# feed01 sits alone on an Eaton ePDU that meters no outlet it is given: the whole unit is mapped
# to it (`feeds:`). srv01 has two metered outlets of an APC AP8641. Both PDUs are real
# recordings (tests' shared corpus) served by snmpsim, polled by `wattbit collector` itself.
FEED_PDU, OUTLET_PDU = "eaton_epdu-ma-24x5-20r", "apc_ap8641"


def test_real_collector_feed_and_outlets(tmp_path: Path) -> None:
    """A host on a whole PDU (source pdu) and a host on outlets (source outlets), from the real
    collector: the rules' watts are the collector's own readings, the report's energy too."""
    from tests.support.env import RECORDINGS
    from tests.support.realparts import Collector, running
    from tests.support.snmpagents import SnmpSim, have_snmpsim

    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(RECORDINGS.is_dir(), f"no PDU recordings at {RECORDINGS}")
    recs = {n: RECORDINGS / f"{n}.snmprec" for n in (FEED_PDU, OUTLET_PDU)}
    with SnmpSim({"feedpdu": recs[FEED_PDU], "outletpdu": recs[OUTLET_PDU]}) as sim:
        cfg = f"""\
interval: 5s
auths:
  feedpdu: {{version: 2c, community: feedpdu}}
  outletpdu: {{version: 2c, community: outletpdu}}
pdus:
  - name: rack-eaton
    address: "{sim.endpoint}"
    auth: feedpdu
    timeout: 3s
    feeds:
      - {{feed: unit, host: feed01, component: server}}
  - name: rack-apc
    address: "{sim.endpoint}"
    auth: outletpdu
    timeout: 3s
    outlets:
      - {{index: [1, 2], host: srv01, component: server}}
"""
        t0 = time.monotonic() - 30
        with (
            running(Collector(cfg, tmp_path)) as collector,
            serve_metrics(agent_body(3.0, t0)) as a1,
            serve_metrics(agent_body(1.5, t0)) as a2,
        ):
            # the APC's own outlets, not any outlet: the Eaton has outlets too (unmapped), and
            # its poll can be in before the APC's (a CI run failed on that race)
            s = collector.scrape_until(
                "the feed's and the outlets' watts",
                lambda s: (
                    any(k[0] == "wattbit_pdu_feed_power_watts" for k in s)
                    and any(
                        k[0] == "wattbit_pdu_outlet_power_watts"
                        and dict(k[1]).get("host") == "srv01"
                        for k in s
                    )
                ),
                timeout=120,
            )
            feed_w = [v for (n, lb), v in s.items() if n == "wattbit_pdu_feed_power_watts"]
            outlet_w = {
                dict(lb)["outlet"]: v
                for (n, lb), v in s.items()
                if n == "wattbit_pdu_outlet_power_watts" and dict(lb).get("host") == "srv01"
            }
            assert len(feed_w) == 1 and feed_w[0] > 0 and sorted(outlet_w) == ["1", "2"]
            with prometheus(tmp_path, {"feed01": a1, "srv01": a2}, collector.port) as (url, port):
                wait_hosts_watts(port, collector.port, 2)
                at = time.time() - 1.5
                # a recording answers the same every poll: the watts are the collector's own
                assert query(port, "host:wattbit_power_watts:sum", at) == {
                    "host=feed01,source=pdu": feed_w[0],
                    "host=srv01,source=outlets": pytest.approx(sum(outlet_w.values())),
                }
                out = tmp_path / "report"
                report(url, "feeds", out)
    doc = json.loads((out / "feeds.json").read_text())
    duration = doc["window"]["duration_seconds"]
    feed, srv = doc["hosts"]["feed01"], doc["hosts"]["srv01"]
    assert (feed["power_source"], feed["outlets"]) == ("pdu", ["rack-eaton/unit"])
    assert srv["power_source"] == "outlets"
    assert sorted(srv["outlets"]) == ["rack-apc/1", "rack-apc/2"]
    # A recording's energy register never moves while its unit draws power: too coarse, so
    # the feed's watts are integrated (docs/report.md), constant watts x the window.
    assert feed["energy_source"] == "power"
    assert feed["energy_joules"] == pytest.approx(feed_w[0] * duration, rel=1e-9)
    assert any("rack-eaton/unit" in w and "too coarse" in w for w in doc["warnings"])
    assert feed["joules_per_gigabit"] == pytest.approx(feed["energy_joules"] / feed["gigabits"])
    assert doc["power"]["feed01"]["sources"]["pdu"]["meters"] == ["rack-eaton/unit"]
