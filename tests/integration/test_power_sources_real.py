"""Host power from its source, end to end: a real Prometheus with the project's scrape jobs and
rules scrapes agents and site collectors, and `wattbit report` reads it.

One Prometheus for the module (issue #33, "one Prometheus per tier"): the module-scoped
`site` fixture starts the parts of all three cases at once, and the one Prometheus scrapes
them all; each test then only reads (waits for what it needs, queries, runs the report). Every
case has host names of its own, and each of its targets (agents and collector) has a `case`
target label, so `wattbit report --match case=CASE` reads one case's hosts, PDUs and BMCs
(the report reads raw series only, every selector with the match), and the tests read the
rules' per-host series of their own hosts (every rule they read sums `by (host)`; the
site-wide rules, which would mix the cases' PDUs, are read by none of them). The first test's
minute of stand-in data is the others' setup too: by the time it is done, theirs is in.

* `standin` (the first test) serves **stand-in** expositions (the agents' and the collector's,
  at known rates) for a full minute: it pins what the real collector cannot give, exact
  figures for the rules' 1m windows (J/Gbit, RAPL's share as a rule) and the report's
  arithmetic.
* In `bmcs` (the second), `wattbit collector` itself polls a real PDU recording (snmpsim) and
  four BMCs (`bmcs:`): three real servers' Redfish mockups (sushy-static) and pyghmi's DCMI
  simulator over IPMI (FreeIPMI's ipmi-raw). Hosts with no outlet and no feed get their watts
  and J/Gbit from their BMC (Redfish, IPMI); hosts with a metered outlet and a BMC get the
  outlet's, the reconciliation, and, where they disagree, the alert's expression returns them.
* In `feeds` (the third), another `wattbit collector` polls two real PDU recordings: an Eaton
  ePDU's whole unit mapped to one host (`feeds:`, source `pdu`) and two APC outlets mapped to
  another (source `outlets`).

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
from dataclasses import dataclass
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
from tests.support.realparts import Collector, prometheus_server, wait_for

# Each case's hosts: distinct across the cases, so the rules' per-host series never mix them.
GBPS = {"both01": 8.0, "bmc01": 4.0}  # standin: tx Gbit/s of each agent
RAPL_W = {"package": 100.0, "dram": 20.0, "core": 70.0}  # core is inside the package
OUTLET_W, BMC_W = 300.0, {"both01": ("redfish", 345.0), "bmc01": ("ipmi", 250.0)}

# bmcs: one APC AP8641 recording (snmpsim) meters outlets 1 (163 W) and 20 (97 W); four BMCs
# are real mockups served by sushy-static and pyghmi's DCMI simulator, polled by `wattbit
# collector` itself (`bmcs:` beside `pdus:`):
# * agree01: outlet 20 and the HPE DL325 Gen10 Plus mockup's BMC (97 W): they agree;
# * disagree01: outlet 1 and the Dell R750 mockup's BMC (234 W): +71 W, 44 %, beyond the
#   alert's 20 W and 10 %;
# * redfish01: no outlet, no feed: the Gigabyte H262-Z63 mockup's BMC (100 W, Redfish);
# * ipmi01: no outlet, no feed: the DCMI simulator (250 W, IPMI).
BMC_PDU = "apc_ap8641"
REAL_OUTLETS = {"agree01": ("20", 97.0), "disagree01": ("1", 163.0)}  # the recording's values
REAL_MOCKUPS = {
    "agree01": "hpe-dl325-gen10plus",
    "disagree01": "dell-poweredge-r750",
    "redfish01": "gigabyte-h262-z63",
}
IPMI_W = 250
REAL_GBPS = {"agree01": 2.0, "disagree01": 1.0, "redfish01": 4.0, "ipmi01": 0.5}
BMC_PASSWORD = "not-a-real-password"

# feeds: feed01 sits alone on an Eaton ePDU that meters no outlet it is given: the whole unit is
# mapped to it (`feeds:`). srv01 has two metered outlets of an APC AP8641. Both PDUs are real
# recordings (tests' shared corpus) served by snmpsim, polled by `wattbit collector` itself.
FEED_PDU, OUTLET_PDU = "eaton_epdu-ma-24x5-20r", "apc_ap8641"
FEED_GBPS = {"feed01": 3.0, "srv01": 1.5}

HOSTS = {"standin": set(GBPS), "bmcs": set(REAL_GBPS), "feeds": set(FEED_GBPS)}


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
    """The stand-in collector's /metrics: an outlet of both01, the BMCs of both hosts."""
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


def config(agents: dict[str, dict[str, int]], collectors: dict[str, int]) -> str:
    """deploy/prometheus/prometheus.yml's jobs pointed at every case's agents ({case: {host:
    port}}) and collectors ({case: port}), each target labelled with its case; 1s intervals."""
    targets = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"host": h, "case": case}}
        for case, ports in agents.items()
        for h, port in ports.items()
    ]
    cfg = prometheus_config(targets, 0)
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "wattbit-collector"]
    # the job's honor_labels keeps the series' own host; `case` is on no collector series
    job["static_configs"] = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"case": case}}
        for case, port in collectors.items()
    ]
    return yaml.safe_dump(cfg)


def bmcs_config(sim_endpoint: str, redfish: dict[str, str], ipmi: tuple[str, str]) -> str:
    """The `bmcs` case's collector.yml: the APC's two mapped outlets, three Redfish BMCs
    ({host: URL}) and the IPMI one ((address, user)); the password from the environment."""
    bmcs = "\n".join(
        f"""\
  - name: {h}-bmc
    protocol: redfish
    address: {url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_BMC_PASSWORD
    timeout: 4s
    host: {h}
    component: server"""
        for h, url in redfish.items()
    )
    outlets = "\n".join(
        f"      - {{index: {i}, host: {h}, component: server}}"
        for h, (i, _) in REAL_OUTLETS.items()
    )
    return f"""\
interval: 5s
auths:
  pdu: {{version: 2c, community: bmcpdu}}
pdus:
  - name: rack-apc
    address: "{sim_endpoint}"
    auth: pdu
    timeout: 3s
    outlets:
{outlets}
bmcs:
{bmcs}
  - name: ipmi01-bmc
    protocol: ipmi
    address: {ipmi[0]}
    username: {ipmi[1]}
    password_env: WB_TEST_BMC_PASSWORD
    timeout: 4s
    host: ipmi01
    component: server
"""


def feeds_config(sim_endpoint: str) -> str:
    """The `feeds` case's collector.yml: the Eaton's unit to feed01, two APC outlets to srv01."""
    return f"""\
interval: 5s
auths:
  feedpdu: {{version: 2c, community: feedpdu}}
  outletpdu: {{version: 2c, community: outletpdu}}
pdus:
  - name: rack-eaton
    address: "{sim_endpoint}"
    auth: feedpdu
    timeout: 3s
    feeds:
      - {{feed: unit, host: feed01, component: server}}
  - name: rack-apc
    address: "{sim_endpoint}"
    auth: outletpdu
    timeout: 3s
    outlets:
      - {{index: [1, 2], host: srv01, component: server}}
"""


@dataclass
class Site:
    """The module's one Prometheus and what it scrapes: the stand-in collector's port, and
    the `bmcs` and `feeds` cases' real collectors."""

    url: str
    port: int
    standin: int
    bmcs: Collector
    feeds: Collector


def require_parts() -> None:
    """Every part of the three cases is here (under CI=true: fail, not skip)."""
    from tests.support.bmcs import sushy_static_path
    from tests.support.env import RECORDINGS
    from tests.support.snmpagents import have_snmpsim

    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(sushy_static_path() is not None, "sushy-static (sushy-tools, PyPI) missing")
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) missing")
    require(RECORDINGS.is_dir(), f"no PDU recordings at {RECORDINGS}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Every case's parts, started at once, and one Prometheus scraping them all."""
    from tests.support.bmcs import MOCKUPS, IpmiSim, SushyStatic
    from tests.support.env import RECORDINGS
    from tests.support.snmpagents import SnmpSim

    require_parts()
    tmp = tmp_path_factory.mktemp("power-sources")
    dirs = {case: tmp / case for case in ("standin", "bmcs", "feeds", "prometheus")}
    for d in dirs.values():
        d.mkdir()
    recs = {n: RECORDINGS / f"{n}.snmprec" for n in (BMC_PDU, FEED_PDU, OUTLET_PDU)}
    with contextlib.ExitStack() as stack:
        enter = stack.enter_context
        t0 = time.monotonic() - 30
        agents = {
            "standin": {
                "both01": enter(serve_metrics(agent_body(GBPS["both01"], t0, rapl=True))),
                "bmc01": enter(serve_metrics(agent_body(GBPS["bmc01"], t0))),
            },
            "bmcs": {
                h: enter(serve_metrics(agent_body(g, t0, rapl=h == "disagree01")))
                for h, g in REAL_GBPS.items()
            },
            "feeds": {h: enter(serve_metrics(agent_body(g, t0))) for h, g in FEED_GBPS.items()},
        }
        standin = enter(serve_metrics(collector_body))
        sim = enter(
            SnmpSim(
                {
                    "bmcpdu": recs[BMC_PDU],
                    "feedpdu": recs[FEED_PDU],
                    "outletpdu": recs[OUTLET_PDU],
                }
            )
        )
        redfish = {
            h: enter(SushyStatic(MOCKUPS / m, dirs["bmcs"])).url for h, m in REAL_MOCKUPS.items()
        }
        ipmi = enter(IpmiSim(dirs["bmcs"], BMC_PASSWORD, watts=IPMI_W))
        # both collectors start before either is waited for: their startups overlap
        bmcs = Collector(
            bmcs_config(sim.endpoint, redfish, (f"127.0.0.1:{ipmi.port}", ipmi.user)),
            dirs["bmcs"],
            env={"WB_TEST_BMC_PASSWORD": BMC_PASSWORD},
        )
        stack.callback(bmcs.stop)
        feeds = Collector(feeds_config(sim.endpoint), dirs["feeds"])
        stack.callback(feeds.stop)
        bmcs.wait_ready()
        feeds.wait_ready()
        cfg = config(agents, {"standin": standin, "bmcs": bmcs.port, "feeds": feeds.port})
        url = enter(prometheus_server(cfg, dirs["prometheus"]))
        yield Site(url, int(url.rsplit(":", 1)[1]), standin, bmcs, feeds)


def of_hosts(expr: str, hosts: set[str]) -> str:
    """A rule's series name with a matcher for one case's hosts (every case has its own)."""
    return f'{expr}{{host=~"{"|".join(sorted(hosts))}"}}'


def labels_of(key: str) -> dict[str, str]:
    """The labels of one of query()'s keys ("k=v,k2=v2")."""
    return dict(kv.split("=", 1) for kv in key.split(","))


def collector_scrapes(port: int, collector: int, window: str) -> float:
    """How many times Prometheus scraped one collector over the last window ("40s")."""
    up = f'up{{job="wattbit-collector",instance="127.0.0.1:{collector}"}}'
    return sum(query(port, f"count_over_time({up}[{window}])").values())


def wait_hosts_watts(port: int, collector: int, hosts: set[str]) -> None:
    """Wait (2 min at most) for 25 s of the collector's scrapes and every host's watts."""
    wait_for(
        lambda: len(query(port, of_hosts("host:wattbit_power_watts:sum", hosts))) == len(hosts)
        and collector_scrapes(port, collector, "40s") >= 25,
        120,
        f"25 s of scrapes with the {len(hosts)} hosts' watts",
    )  # fmt: skip


def report(url: str, name: str, case: str, out: Path) -> dict:
    """`wattbit report --match case=CASE` of the last 20 s (to 2 s ago) into out, as name; it
    must succeed, and holds that case's hosts, no other; its JSON."""
    end = time.time() - 2
    start = end - 20
    r = subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", "--start", f"{start:.3f}",
         "--end", f"{end:.3f}", "--name", name, "--prometheus", url, "--out", str(out),
         "--match", f"case={case}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    doc: dict = json.loads((out / f"{name}.json").read_text())
    assert set(doc["hosts"]) == HOSTS[case]
    return doc


def test_host_power_by_source_rules_and_report(site: Site, tmp_path: Path) -> None:
    """Stand-ins at exact rates for a minute: the rules' 1m values (J/Gbit, RAPL's share) and
    the report's arithmetic to the joule, which a real collector's polling cannot pin."""
    port, hosts = site.port, HOSTS["standin"]
    # A full minute of scrapes: the rules' 1m rates are fair once their window is full
    # (before, rate() divides a shorter span's increase by the whole minute).
    wait_for(
        lambda: len(query(port, of_hosts("host:wattbit_joules_per_gigabit:ratio1m", hosts))) == 2
        and collector_scrapes(port, site.standin, "90s") >= 65,
        180,
        "65 s of scrapes and J/Gbit for both hosts",
    )  # fmt: skip
    at = time.time() - 1.5
    # --- the rules: one source per host, carried to J/Gbit
    assert query(port, of_hosts("host:wattbit_power_watts:sum", hosts), at) == {
        "host=both01,source=outlets": OUTLET_W,
        "host=bmc01,source=ipmi": 250.0,
    }
    assert set(query(port, of_hosts("host:wattbit_joules_per_gigabit:ratio1m", hosts), at)) == {
        "host=both01,source=outlets",
        "host=bmc01,source=ipmi",
    }
    assert query(port, of_hosts("host:wattbit_power_watts:bmc_minus_pdu", hosts), at) == {
        "bmc_source=redfish,host=both01,pdu_source=outlets": 45.0
    }
    assert query(port, of_hosts("host:wattbit_power_bmc_over_pdu:ratio", hosts), at) == {
        "bmc_source=redfish,host=both01,pdu_source=outlets": pytest.approx(1.15)
    }
    share = query(port, of_hosts("host:wattbit_power_rapl_share:ratio", hosts), at)
    assert set(share) == {"host=both01,source=outlets"}
    assert share["host=both01,source=outlets"] == pytest.approx(120 / 300, rel=0.02)

    # --- the report over the last 20 s
    out = tmp_path / "report"
    doc = report(site.url, "sources", "standin", out)
    hosts_doc, power = doc["hosts"], doc["power"]
    duration = doc["window"]["duration_seconds"]
    for h, watts, source in (("both01", OUTLET_W, "outlets"), ("bmc01", 250.0, "ipmi")):
        d = hosts_doc[h]
        assert d["power_source"] == source, h
        # constant watts: the energy is watts x the window, exactly
        assert d["energy_joules"] == pytest.approx(watts * duration, rel=1e-9), h
        # bits from counters growing at GBPS: within two 1 s scrapes of the window's
        assert d["gigabits"] == pytest.approx(GBPS[h] * duration, abs=2 * GBPS[h]), h
        assert d["joules_per_gigabit"] == pytest.approx(d["energy_joules"] / d["gigabits"]), h
    assert hosts_doc["bmc01"]["outlets"] == ["bmc:bmc01-bmc"]
    rec = power["both01"]["reconciliation"]
    assert (rec["pdu_source"], rec["bmc_source"], rec["disagree"]) == ("outlets", "redfish", True)
    assert rec["pdu_watts_mean"] == pytest.approx(OUTLET_W) and rec["ratio"] == pytest.approx(1.15)
    assert power["bmc01"]["reconciliation"] is None
    rapl = power["both01"]["rapl"]
    assert rapl["zones"] == ["dram/0", "package/0"]
    assert rapl["share"] == pytest.approx(120 / 300, abs=120 * 1.0 / (300 * duration) * 2)
    # the site: the outlet and bmc01's BMC (both01's BMC would count it twice); the other
    # cases' PDUs and BMCs are in the same Prometheus, and --match leaves them out
    assert doc["site"]["energy_joules"] == pytest.approx((OUTLET_W + 250.0) * duration, rel=1e-9)
    assert any("host both01: its redfish BMC" in w for w in doc["warnings"])
    md = (out / "sources.md").read_text()
    assert "## Power sources" in md and "| bmc01 | ipmi |" in md
    html = (out / "sources.html").read_text()
    assert "<h2>Power sources</h2>" in html


# --- the real collector polling real BMCs beside a real PDU --------------------------------


def alert_expr(name: str) -> str:
    """The PromQL of one alert of alerts/wattbit-alerts.yml (its `for:` is promtool's part)."""
    doc = yaml.safe_load((ALERTS / "wattbit-alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name]
    assert len(rules) == 1, name
    return str(rules[0]["expr"])


def by_host(s: dict, name: str) -> dict[str, float]:
    """{host: value} of a scrape's series mapped to a host (the PDU's others have "")."""
    return {dict(lb)["host"]: v for (n, lb), v in s.items() if n == name and dict(lb)["host"]}


def test_real_collector_bmcs_and_outlets(site: Site, tmp_path: Path) -> None:
    """`wattbit collector` polls one real PDU recording and four BMCs (three real Redfish
    mockups, the DCMI simulator): hosts without an outlet get their watts and J/Gbit from their
    BMC (Redfish, IPMI); hosts with both get the outlet's, the reconciliation, and the
    disagreement alert's expression returns the one whose BMC is far from its outlet."""
    from tests.integration.test_bmc_redfish_mockups import HEADLINE

    port, collector, hosts = site.port, site.bmcs, HOSTS["bmcs"]
    bmc_w = {h: HEADLINE[m] for h, m in REAL_MOCKUPS.items()}
    assert bmc_w == {"agree01": 97.0, "disagree01": 234.0, "redfish01": 100.0}
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
        dict(lb)["host"]: dict(lb)["protocol"] for (n, lb) in s if n == "wattbit_bmc_power_watts"
    }
    assert protocols == {**{h: "redfish" for h in bmc_w}, "ipmi01": "ipmi"}
    every_outlet = sum(v for (n, _), v in s.items() if n == "wattbit_pdu_outlet_power_watts")
    target = f"case=bmcs,instance=127.0.0.1:{collector.port},job=wattbit-collector"
    wait_hosts_watts(port, collector.port, hosts)
    at = time.time() - 1.5
    # --- the recording rules: one source per host, the BMC set against the outlet
    assert query(port, of_hosts("host:wattbit_power_watts:sum", hosts), at) == {
        "host=agree01,source=outlets": 97.0,
        "host=disagree01,source=outlets": 163.0,
        "host=redfish01,source=redfish": 100.0,
        "host=ipmi01,source=ipmi": float(IPMI_W),
    }
    assert query(port, of_hosts("host:wattbit_power_watts:bmc_minus_pdu", hosts), at) == {
        "bmc_source=redfish,host=agree01,pdu_source=outlets": 0.0,
        "bmc_source=redfish,host=disagree01,pdu_source=outlets": 71.0,
    }
    assert query(port, of_hosts("host:wattbit_power_bmc_over_pdu:ratio", hosts), at) == {
        "bmc_source=redfish,host=agree01,pdu_source=outlets": 1.0,
        "bmc_source=redfish,host=disagree01,pdu_source=outlets": pytest.approx(234 / 163),
    }
    # the alert's expression (its 15m `for:` is promtool's: test_alerts_promtool), on every
    # case's hosts (it joins on host only); of this case's, it returns disagree01's alone
    fired = query(port, alert_expr("WattbitPowerSourcesDisagree"), at)
    mine = {k: v for k, v in fired.items() if labels_of(k)["host"] in hosts}
    assert mine == {"bmc_source=redfish,host=disagree01,pdu_source=outlets": 71.0}
    assert query(port, 'wattbit_bmc_up{case="bmcs"}', at) == {
        f"bmc={h}-bmc,{target}": 1.0 for h in (*bmc_w, "ipmi01")
    }
    out = tmp_path / "report"
    doc = report(site.url, "real", "bmcs", out)
    hosts_doc, power = doc["hosts"], doc["power"]
    duration = doc["window"]["duration_seconds"]
    expected = {
        "agree01": ("outlets", 97.0, ["rack-apc/20"]),
        "disagree01": ("outlets", 163.0, ["rack-apc/1"]),
        "redfish01": ("redfish", 100.0, ["bmc:redfish01-bmc"]),
        "ipmi01": ("ipmi", float(IPMI_W), ["bmc:ipmi01-bmc"]),
    }
    for h, (source, watts, meters) in expected.items():
        d = hosts_doc[h]
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
    assert power["redfish01"]["reconciliation"] is None
    assert power["ipmi01"]["reconciliation"] is None
    disagreeing = [w for w in doc["warnings"] if "BMC" in w and "disagree by" in w]
    assert len(disagreeing) == 1 and disagreeing[0].startswith("host disagree01: its redfish BMC")
    share = power["disagree01"]["rapl"]["share"]
    assert share == pytest.approx(120 / 163.0, abs=120 * 1.0 / (163.0 * duration) * 2)
    # the site: every outlet (mapped or not) and the BMCs of the hosts without one; the BMCs
    # of agree01 and disagree01 would count their outlets' watts twice. The `feeds` case
    # polls the same APC recording as another collector: --match leaves its outlets out.
    site_w = every_outlet + 100.0 + IPMI_W
    assert doc["site"]["energy_joules"] == pytest.approx(site_w * duration, rel=1e-9)
    md = (out / "real.md").read_text()
    assert "| redfish01 | redfish |" in md and "| ipmi01 | ipmi |" in md


# --- the real site collector polling real PDU recordings -------------------------------------


def test_real_collector_feed_and_outlets(site: Site, tmp_path: Path) -> None:
    """A host on a whole PDU (source pdu) and a host on outlets (source outlets), from the real
    collector: the rules' watts are the collector's own readings, the report's energy too."""
    port, collector, hosts = site.port, site.feeds, HOSTS["feeds"]
    # the APC's own outlets, not any outlet: the Eaton has outlets too (unmapped), and
    # its poll can be in before the APC's (a CI run failed on that race)
    s = collector.scrape_until(
        "the feed's and the outlets' watts",
        lambda s: (
            any(k[0] == "wattbit_pdu_feed_power_watts" for k in s)
            and any(
                k[0] == "wattbit_pdu_outlet_power_watts" and dict(k[1]).get("host") == "srv01"
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
    wait_hosts_watts(port, collector.port, hosts)
    at = time.time() - 1.5
    # a recording answers the same every poll: the watts are the collector's own
    assert query(port, of_hosts("host:wattbit_power_watts:sum", hosts), at) == {
        "host=feed01,source=pdu": feed_w[0],
        "host=srv01,source=outlets": pytest.approx(sum(outlet_w.values())),
    }
    out = tmp_path / "report"
    doc = report(site.url, "feeds", "feeds", out)
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
