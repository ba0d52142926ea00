"""Host power from its source, end to end: a real Prometheus with the project's scrape jobs and
rules scrapes two agents and a site collector, and `wattbit report` reads it.

* both01 has a metered outlet (300 W) and a Redfish BMC (345 W: +45 W, 15 %), and RAPL on its
  agent (package 100 W + dram 20 W): its watts and J/Gbit are the outlet's, the BMC is set
  against it (rules and report), RAPL's share is 120 / 300;
* bmc01's PDU meters no outlet: its watts and J/Gbit come from its BMC (250 W, IPMI).

The agents and the collector are **stand-ins**: small HTTP servers serving the exposition the
real ones serve (the agent's RAPL counter and NIC counters growing at known rates; the
collector's outlet series and the BMC series of docs/exporters/bmc.md, whose poller is another
helper's work and not on main when this was written). Prometheus, its rules and the report are
the real ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.test_rules_promtool import ALERTS, PROM_CONFIG, query, serve_metrics
from tests.support.env import ROOT, require
from tests.support.realparts import server, wait_for

GBPS = {"both01": 8.0, "bmc01": 4.0}  # tx Gbit/s of each agent
RAPL_W = {"package": 100.0, "dram": 20.0, "core": 70.0}  # core is inside the package
OUTLET_W, BMC_W = 300.0, {"both01": ("redfish", 345.0), "bmc01": ("ipmi", 250.0)}
C = 'job="x"'


def agent_body(host: str, t0: float):  # type: ignore[no-untyped-def]
    """The agent's /metrics (no host label: the scrape gives it)."""

    def body() -> bytes:
        t = time.monotonic() - t0
        lines = ["# TYPE wattbit_nic_bytes_total counter",
                 f'wattbit_nic_bytes_total{{interface="eth0",direction="tx"}} '
                 f"{GBPS[host] * 1e9 / 8 * t:.0f}",
                 'wattbit_nic_bytes_total{interface="eth0",direction="rx"} 0']  # fmt: skip
        if host == "both01":
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
        serve_metrics(agent_body("both01", t0)) as a1,
        serve_metrics(agent_body("bmc01", t0)) as a2,
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
