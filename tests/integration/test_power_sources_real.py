"""Host power from its source, end to end: a real Prometheus with the project's scrape jobs and
rules scrapes two agents and a site collector, and `wattbit report` reads it.

* both01 has a metered outlet (300 W) and a Redfish BMC (345 W: +45 W, 15 %), and RAPL on its
  agent (package 100 W + dram 20 W): its watts and J/Gbit are the outlet's, the BMC is set
  against it (rules and report), RAPL's share is 120 / 300;
* bmc01's PDU meters no outlet: its watts and J/Gbit come from its BMC (250 W, IPMI).

In the first test the agents and the collector are **stand-ins**: small HTTP servers serving
the exposition the real ones serve (the agent's RAPL counter and NIC counters growing at known
rates; the collector's outlet series and the BMC series of docs/exporters/bmc.md). In the
second the BMC series come from the **real BMC poller and exporter** (exporters/bmc) polling
sushy-static serving two real servers' mockups (tests/fixtures/bmc), run in this process
because the site collector has no `bmcs:` configuration yet; the outlet and the agents are
stand-ins. In the third, `wattbit collector` itself polls two real PDU recordings served by
snmpsim: an Eaton ePDU's whole unit mapped to one host (`feeds:`, source `pdu`) and two APC
outlets mapped to another (source `outlets`). Prometheus, its rules and the report are the
real ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.integration.test_rules_promtool import ALERTS, PROM_CONFIG, query, serve_metrics
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
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(ALERTS / "*.yml")]
    cfg.pop("alerting", None)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    jobs["wattbit-agent"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"host": h}} for h, port in agents.items()
    ]
    jobs["wattbit-collector"]["static_configs"] = [{"targets": [f"127.0.0.1:{collector}"]}]
    del jobs["node"]
    cfg["scrape_configs"] = list(jobs.values())
    return yaml.safe_dump(cfg)


def test_host_power_by_source_rules_and_report(tmp_path: Path) -> None:
    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    t0 = time.monotonic() - 30
    with (
        serve_metrics(agent_body(GBPS["both01"], t0, rapl=True)) as a1,
        serve_metrics(agent_body(GBPS["bmc01"], t0)) as a2,
        serve_metrics(collector_body) as c,
    ):
        (tmp_path / "prometheus.yml").write_text(config({"both01": a1, "bmc01": a2}, c))
        with server(
            "prometheus",
            lambda port: ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'data'}",
                          f"--web.listen-address=127.0.0.1:{port}"],
            tmp_path,
        ) as url:  # fmt: skip
            port = int(url.rsplit(":", 1)[1])
            # A full minute of scrapes: the rules' 1m rates are fair once their window is full
            # (before, rate() divides a shorter span's increase by the whole minute).
            wait_for(
                lambda: len(query(port, "host:wattbit_joules_per_gigabit:ratio1m")) == 2
                and query(port, 'count_over_time(up{job="wattbit-collector"}[90s])')
                .get(f"instance=127.0.0.1:{c},job=wattbit-collector", 0) >= 65,
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
            end = time.time() - 2
            start = end - 20
            out = tmp_path / "report"
            r = subprocess.run(
                [sys.executable, "-m", "collector.cli", "report", "--start", f"{start:.3f}",
                 "--end", f"{end:.3f}", "--name", "sources", "--prometheus", url,
                 "--out", str(out)],
                cwd=ROOT, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr + r.stdout
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


# --- the real BMC poller against real mockups -------------------------------------------------

# hpe01: its BMC (HPE DL325 Gen10 Plus mockup, 97 W) and a metered outlet (105 W, a stand-in):
# 8 W apart, they agree. gb01 (Gigabyte H262-Z63 mockup, 100 W): no outlet, its BMC's watts.
REAL_BMCS = {"gb01": "gigabyte-h262-z63", "hpe01": "hpe-dl325-gen10plus"}
HPE_OUTLET_W = 105.0


def test_real_poller_against_sushy_static(tmp_path: Path) -> None:
    """The BMC poller and exporter (exporters/bmc) polling sushy-static serving two real
    mockups, in this process; the collector's /metrics is its registry plus a stand-in outlet
    (the site collector's `bmcs:` configuration is not there yet to run it as a process)."""
    import asyncio
    import threading

    from prometheus_client import CollectorRegistry, generate_latest

    from exporters.bmc.exporter import BmcExporter
    from exporters.bmc.poller import BmcPoller, BmcTarget
    from exporters.bmc.redfish import RedfishTarget
    from tests.integration.test_bmc_redfish_mockups import HEADLINE
    from tests.support.bmcs import MOCKUPS, SushyStatic, sushy_static_path

    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    require(sushy_static_path() is not None, "sushy-static (sushy-tools, PyPI) missing")
    watts = {h: HEADLINE[m] for h, m in REAL_BMCS.items()}
    assert watts == {"gb01": 100.0, "hpe01": 97.0}
    with (
        SushyStatic(MOCKUPS / REAL_BMCS["gb01"], tmp_path) as gb,
        SushyStatic(MOCKUPS / REAL_BMCS["hpe01"], tmp_path) as hpe,
    ):
        targets = [
            BmcTarget(name=f"{h}-bmc", protocol="redfish", labels=(h, "server"), deadline=10,
                      redfish=RedfishTarget(s.url, "wattbit", "not-a-real-password", timeout=5))
            for h, s in (("gb01", gb), ("hpe01", hpe))
        ]  # fmt: skip
        poller = BmcPoller(targets, interval=1.0)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BmcExporter(poller))
        done = threading.Event()

        def run() -> None:
            async def main() -> None:
                stop = asyncio.Event()
                task = asyncio.create_task(poller.run(stop))
                while not done.is_set():
                    await asyncio.sleep(0.1)
                stop.set()
                await task

            asyncio.run(main())

        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def collector() -> bytes:
            outlet = (
                "# TYPE wattbit_pdu_outlet_power_watts gauge\n"
                'wattbit_pdu_outlet_power_watts{pdu="rack2",outlet="4",outlet_name="hpe01",'
                f'host="hpe01",component="server"}} {HPE_OUTLET_W}\n'
            )
            return generate_latest(registry) + outlet.encode()

        t0 = time.monotonic() - 30
        try:
            with (
                serve_metrics(agent_body(2.0, t0)) as a1,
                serve_metrics(agent_body(1.0, t0)) as a2,
                serve_metrics(collector) as c,
            ):
                (tmp_path / "prometheus.yml").write_text(config({"gb01": a1, "hpe01": a2}, c))
                with server(
                    "prometheus",
                    lambda port: ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={tmp_path / 'data'}",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                    tmp_path,
                ) as url:  # fmt: skip
                    port = int(url.rsplit(":", 1)[1])
                    wait_for(
                        lambda: len(query(port, "host:wattbit_power_watts:sum")) == 2
                        and query(port, 'count_over_time(up{job="wattbit-collector"}[40s])')
                        .get(f"instance=127.0.0.1:{c},job=wattbit-collector", 0) >= 25,
                        90,
                        "25 s of scrapes with both hosts' watts",
                    )  # fmt: skip
                    at = time.time() - 1.5
                    assert query(port, "host:wattbit_power_watts:sum", at) == {
                        "host=gb01,source=redfish": 100.0,
                        "host=hpe01,source=outlets": HPE_OUTLET_W,
                    }
                    assert query(port, "host:wattbit_power_watts:bmc_minus_pdu", at) == {
                        "bmc_source=redfish,host=hpe01,pdu_source=outlets": 97.0 - HPE_OUTLET_W
                    }
                    assert query(port, "wattbit_bmc_up", at) == {
                        f"bmc={h}-bmc,instance=127.0.0.1:{c},job=wattbit-collector": 1.0
                        for h in REAL_BMCS
                    }
                    end = time.time() - 2
                    start = end - 20
                    out = tmp_path / "report"
                    r = subprocess.run(
                        [sys.executable, "-m", "collector.cli", "report", "--start",
                         f"{start:.3f}", "--end", f"{end:.3f}", "--name", "real", "--prometheus",
                         url, "--out", str(out)],
                        cwd=ROOT, capture_output=True, text=True, timeout=120,
                    )  # fmt: skip
                    assert r.returncode == 0, r.stderr + r.stdout
        finally:
            done.set()
            thread.join(timeout=30)
    doc = json.loads((out / "real.json").read_text())
    duration = doc["window"]["duration_seconds"]
    gb, hp = doc["hosts"]["gb01"], doc["hosts"]["hpe01"]
    assert (gb["power_source"], gb["outlets"]) == ("redfish", ["bmc:gb01-bmc"])
    assert gb["energy_joules"] == pytest.approx(100.0 * duration, rel=1e-9)
    assert gb["joules_per_gigabit"] == pytest.approx(gb["energy_joules"] / gb["gigabits"])
    assert gb["gigabits"] == pytest.approx(2.0 * duration, abs=4.0)
    assert hp["power_source"] == "outlets"
    assert hp["energy_joules"] == pytest.approx(HPE_OUTLET_W * duration, rel=1e-9)
    rec = doc["power"]["hpe01"]["reconciliation"]
    assert rec["bmc_watts_mean"] == pytest.approx(97.0) and not rec["disagree"]
    assert rec["ratio"] == pytest.approx(97.0 / HPE_OUTLET_W)
    assert doc["power"]["gb01"]["reconciliation"] is None


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
            s = collector.scrape_until(
                "the feed's and the outlets' watts",
                lambda s: (
                    any(k[0] == "wattbit_pdu_feed_power_watts" for k in s)
                    and any(k[0] == "wattbit_pdu_outlet_power_watts" for k in s)
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
            (tmp_path / "prometheus.yml").write_text(
                config({"feed01": a1, "srv01": a2}, collector.port)
            )
            with server(
                "prometheus",
                lambda port: ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp_path / 'data'}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                tmp_path,
            ) as url:  # fmt: skip
                port = int(url.rsplit(":", 1)[1])
                wait_for(
                    lambda: len(query(port, "host:wattbit_power_watts:sum")) == 2
                    and query(port, 'count_over_time(up{job="wattbit-collector"}[40s])')
                    .get(f"instance=127.0.0.1:{collector.port},job=wattbit-collector", 0) >= 25,
                    120,
                    "25 s of scrapes with both hosts' watts",
                )  # fmt: skip
                at = time.time() - 1.5
                # a recording answers the same every poll: the watts are the collector's own
                assert query(port, "host:wattbit_power_watts:sum", at) == {
                    "host=feed01,source=pdu": feed_w[0],
                    "host=srv01,source=outlets": pytest.approx(sum(outlet_w.values())),
                }
                end = time.time() - 2
                start = end - 20
                out = tmp_path / "report"
                r = subprocess.run(
                    [sys.executable, "-m", "collector.cli", "report", "--start", f"{start:.3f}",
                     "--end", f"{end:.3f}", "--name", "feeds", "--prometheus", url,
                     "--out", str(out)],
                    cwd=ROOT, capture_output=True, text=True, timeout=120,
                )  # fmt: skip
                assert r.returncode == 0, r.stderr + r.stdout
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
