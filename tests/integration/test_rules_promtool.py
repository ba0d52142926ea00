"""The recording rules and the Prometheus configuration, checked by the real promtool and run
by a real Prometheus server.

* `promtool check rules`, `promtool test rules` (alerts/tests/, hand-computed values) and
  `promtool check config`: exit 0 and no warnings.
* Every raw metric a rule reads is documented in docs/exporters/*.md, every recorded name a
  rule reads is recorded by an earlier rule, and docs/rules.md shows every rule with its
  expression.
* deploy/prometheus/prometheus.yml's relabelling and honor_labels, end to end: a Prometheus on
  127.0.0.1 scrapes two fake agents and a fake collector through the file's own job settings,
  and the rules join them on `host`.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_alerts_promtool import PEER_TESTS, TESTS
from tests.support import realparts
from tests.support.env import ROOT, require
from tests.support.realparts import prometheus_server, wait_for

ALERTS = ROOT / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.yml"))
RULE_TESTS = sorted((ALERTS / "tests").glob("*.yml"))
# test_alerts_promtool runs these two (the alerts' cases, 480 KB of the 650): not again here
ALERT_CASES = {"alerts_test.yml", "disk_slow_peers_test.yml"}
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
EXPORTER_DOCS = sorted((ROOT / "docs" / "exporters").glob("*.md"))
RULES_DOC = ROOT / "docs" / "rules.md"

# level:metric:operations, the metric being a wattbit one
RECORD_NAME = re.compile(r"^[a-z]+(?:_[a-z]+)*:wattbit_[a-z_]+:[a-z0-9_]+$")
RAW_METRIC = re.compile(r"(?<![\w:])wattbit_[a-z_]+(?![\w:])")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    require(shutil.which("promtool") is not None, "promtool (Debian package prometheus) missing")
    return realparts.promtool(*args)


assert_clean = realparts.assert_promtool_clean


def rules() -> list[dict[str, Any]]:
    """Every recording rule of every rules file, in file order (alerts: test_alerts_promtool)."""
    out: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(r for r in group["rules"] if "record" in r)
    return out


# --- promtool -------------------------------------------------------------------------------


def test_rule_files_exist() -> None:
    assert [p.name for p in RULE_FILES] == ["wattbit-alerts.yml", "wattbit-recording.yml"]
    assert RULE_TESTS, "no promtool rule tests in alerts/tests/"


def test_promtool_check_rules() -> None:
    assert_clean(promtool("check", "rules", *[str(p.relative_to(ROOT)) for p in RULE_FILES]))


def test_every_case_file_is_run_once() -> None:
    """The alerts' own case files are test_alerts_promtool's; the rest are run here."""
    assert {TESTS.name, PEER_TESTS.name} == ALERT_CASES
    assert {p.name for p in RULE_TESTS} >= ALERT_CASES


@pytest.mark.parametrize(
    "case", [p for p in RULE_TESTS if p.name not in ALERT_CASES], ids=lambda p: p.name
)
def test_promtool_test_rules(case: Path) -> None:
    # One promtool per file: each has the hang guard's whole budget on a busy machine.
    assert_clean(promtool("test", "rules", str(case.relative_to(ROOT))))


def test_promtool_check_config() -> None:
    proc = promtool("check", "config", str(PROM_CONFIG.relative_to(ROOT)))
    assert_clean(proc)
    # the rule_files glob, resolved against the config's directory, found the rules file
    assert f"{len(RULE_FILES)} rule files found" in proc.stdout, proc.stdout
    assert "wattbit-recording.yml" in proc.stdout, proc.stdout


def test_config_jobs_label_hosts_and_keep_the_collectors_labels() -> None:
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    assert cfg["global"]["scrape_interval"] == "5s"
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    assert set(jobs) == {"wattbit-agent", "wattbit-collector", "node"}
    for name in ("wattbit-agent", "node"):
        assert any(r.get("target_label") == "host" for r in jobs[name]["relabel_configs"]), name
    collector = jobs["wattbit-collector"]
    assert collector["honor_labels"] is True
    assert "relabel_configs" not in collector
    assert all("host" not in sc.get("labels", {}) for sc in collector["static_configs"])


# --- the rules file ---------------------------------------------------------------------------


def test_one_group_at_the_global_interval() -> None:
    doc = yaml.safe_load((ALERTS / "wattbit-recording.yml").read_text())
    assert len(doc["groups"]) == 1
    assert "interval" not in doc["groups"][0]
    assert all("record" in r and "alert" not in r for r in doc["groups"][0]["rules"])


def test_rule_names_follow_the_convention_and_are_unique() -> None:
    names = [r["record"] for r in rules()]
    assert len(names) == len(set(names)), names
    for name in names:
        assert RECORD_NAME.match(name), name


def test_every_metric_a_rule_reads_is_documented_or_recorded_before() -> None:
    documented = set()
    for doc in EXPORTER_DOCS:
        documented |= set(RAW_METRIC.findall(doc.read_text()))
    assert "wattbit_nic_bytes_total" in documented  # the docs were read at all

    recorded: set[str] = set()
    raw_used: set[str] = set()
    for rule in rules():
        expr = QUOTED.sub('""', rule["expr"])  # label values may hold anything, even colons
        for name in RAW_METRIC.findall(expr):
            raw_used.add(name)
            base = re.sub(r"_(bucket|sum|count)$", "", name)  # a histogram's series
            assert name in documented or base in documented, (
                f"{rule['record']} reads {name}, not in docs/exporters/"
            )
        for ident in IDENT.findall(expr):
            if ident == rule["record"]:
                # a latch: the rule keeps its own last value (docs/rules.md, "last seen alone")
                assert f"last_over_time({ident}[" in expr, f"{ident} reads itself, not a latch"
            elif ":" in ident:
                assert ident in recorded, f"{rule['record']} reads {ident} before it is recorded"
        recorded.add(rule["record"])
    # the rules read what the brief says they read
    assert raw_used >= {
        "wattbit_nic_bytes_total",
        "wattbit_pdu_outlet_power_watts",
        "wattbit_disk_busy_seconds_total",
        "wattbit_disk_io_bytes_total",
        "wattbit_disk_info",
    }


def test_every_rule_is_documented_with_its_expression() -> None:
    text = RULES_DOC.read_text()
    blocks = [re.sub(r"\s+", "", b) for b in re.findall(r"```promql\n(.*?)```", text, re.S)]
    for rule in rules():
        assert f"### `{rule['record']}`" in text, f"{rule['record']} is not in docs/rules.md"
        expr = re.sub(r"\s+", "", rule["expr"])
        assert expr in blocks, f"docs/rules.md shows another expression for {rule['record']}"


# --- a real Prometheus with the file's scrape jobs ------------------------------------------------

AGENT_GBPS = {"localhost": (10.0, 2.0), "mover02": (0.5, 12.0)}  # host: (tx, rx) Gbit/s
OUTLETS = [  # (pdu, outlet, host, component, watts)
    ("rack1-a", "1", "localhost", "server", 200.0),
    ("rack1-b", "1", "localhost", "server", 160.0),
    ("rack1-a", "2", "mover02", "server", 250.0),
    ("rack1-a", "3", "", "switch", 90.0),
]


def agent_body(host: str, t0: float) -> Callable[[], bytes]:
    """/metrics of an agent whose NIC counters grow at the host's rates (no host label)."""
    tx, rx = AGENT_GBPS[host]

    def body() -> bytes:
        t = time.monotonic() - t0
        lines = ["# TYPE wattbit_nic_bytes_total counter"]
        for direction, gbps in (("tx", tx), ("rx", rx)):
            value = gbps * 1e9 / 8 * t
            lines.append(
                f'wattbit_nic_bytes_total{{interface="eth0",direction="{direction}"}} {value:.0f}'
            )
        return ("\n".join(lines) + "\n").encode()

    return body


def collector_body() -> bytes:
    """/metrics of a collector: outlets labelled as the outlet mapping labels them."""
    lines = ["# TYPE wattbit_pdu_outlet_power_watts gauge"]
    for pdu, outlet, host, component, watts in OUTLETS:
        lines.append(
            f'wattbit_pdu_outlet_power_watts{{pdu="{pdu}",outlet="{outlet}",outlet_name="o{outlet}",'
            f'host="{host}",component="{component}"}} {watts}'
        )
    return ("\n".join(lines) + "\n").encode()


@contextlib.contextmanager
def serve_metrics(body: Callable[[], bytes]) -> Iterator[int]:
    """Serve body() on 127.0.0.1:<ephemeral>/metrics; yields the port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def prometheus_config(agents: list[dict[str, Any]], collector_port: int) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with its targets pointed at the fakes (`agents`: the
    agent job's static_configs), nothing else of the jobs changed (relabelling, honor_labels);
    1s intervals to be quick."""
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(ALERTS / "*.yml")]
    cfg.pop("alerting", None)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    jobs["wattbit-agent"]["static_configs"] = agents
    jobs["wattbit-collector"]["static_configs"] = [{"targets": [f"127.0.0.1:{collector_port}"]}]
    del jobs["node"]
    cfg["scrape_configs"] = list(jobs.values())
    return cfg


def site_config(agent_port: int, agent2_port: int, collector_port: int) -> dict[str, Any]:
    """prometheus_config for two agents: host from the address ("localhost"), and host set
    explicitly as labels, as in the file."""
    return prometheus_config(
        [
            {"targets": [f"localhost:{agent_port}"]},
            {"targets": [f"127.0.0.1:{agent2_port}"], "labels": {"host": "mover02"}},
        ],
        collector_port,
    )


def query(port: int, expr: str, at: float | None = None) -> dict[str, float]:
    """Instant query (now, or at a unix time); {'k=v,...': value}, the metric name left out."""
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        data = json.load(resp)
    assert data["status"] == "success", data
    out = {}
    for r in data["data"]["result"]:
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k != "__name__")
        out[labels] = float(r["value"][1])
    return out


def _evaluated_after(port: int, at: float) -> bool:
    """Every rule group's evaluation before `at` is complete: each one began a later one."""
    url = f"http://127.0.0.1:{port}/api/v1/rules"
    with urllib.request.urlopen(url, timeout=10) as resp:
        groups = json.load(resp)["data"]["groups"]
    # 3.11's fromisoformat takes Prometheus' "Z" and nanoseconds (truncated)
    return bool(groups) and all(
        datetime.fromisoformat(g["lastEvaluation"]).timestamp() > at for g in groups
    )


def test_prometheus_joins_agents_and_collector_on_host(tmp_path: Path) -> None:
    require(shutil.which("prometheus") is not None, "prometheus (Debian package) missing")
    t0 = time.monotonic() - 30  # counters already running
    with (
        serve_metrics(agent_body("localhost", t0)) as a1,
        serve_metrics(agent_body("mover02", t0)) as a2,
        serve_metrics(collector_body) as c,
        prometheus_server(yaml.safe_dump(site_config(a1, a2, c)), tmp_path) as url,
    ):
        port = int(url.rsplit(":", 1)[1])
        try:
            # the relabel: host from the address without the port, or as set in labels
            wait_for(
                lambda: (
                    set(query(port, "up == 1"))
                    == {
                        f"host=localhost,instance=localhost:{a1},job=wattbit-agent",
                        f"host=mover02,instance=127.0.0.1:{a2},job=wattbit-agent",
                        f"instance=127.0.0.1:{c},job=wattbit-collector",
                    }
                ),
                30,
                "all three targets up with their host labels",
            )
            # honor_labels: outlets keep the mapping's host; the unmapped outlet has none
            outlets = query(port, "wattbit_pdu_outlet_power_watts")
            hosts = []
            for key in outlets:
                labels = dict(kv.split("=", 1) for kv in key.split(","))
                assert "exported_host" not in labels, key
                if "host" in labels:
                    hosts.append(labels["host"])
            assert sorted(hosts) == ["localhost", "localhost", "mover02"]
            # the rules, once a rate has two samples
            wait_for(
                lambda: len(query(port, "host:wattbit_joules_per_gigabit:ratio1m")) == 2,
                30,
                "host:wattbit_joules_per_gigabit:ratio1m for both hosts",
            )
            # One evaluation, read at a fixed time: the first minute's rates are extrapolated
            # from a partly filled window (too low), so the checks are on what the rates do
            # not change: the join, the label sets, the directions' ratio, watts / Gbit/s.
            at = time.time() + 1.5  # after the ratio first appeared
            wait_for(lambda: _evaluated_after(port, at), 60, "every rule group evaluated")
            assert query(port, "host:wattbit_power_watts:sum", at) == {
                "host=localhost,source=outlets": 360.0,
                "host=mover02,source=outlets": 250.0,
            }
            gbps = query(port, "host:wattbit_nic_gigabits_per_second:rate1m", at)
            assert set(gbps) == {
                f"direction={d},host={h}" for h in AGENT_GBPS for d in ("rx", "tx")
            }
            jpg = query(port, "host:wattbit_joules_per_gigabit:ratio1m", at)
            watts = {"localhost": 360.0, "mover02": 250.0}
            for h, (tx, rx) in AGENT_GBPS.items():
                got_tx, got_rx = gbps[f"direction=tx,host={h}"], gbps[f"direction=rx,host={h}"]
                assert got_tx / got_rx == pytest.approx(tx / rx, rel=1e-6)
                expected = watts[h] / (got_tx + got_rx)
                assert jpg[f"host={h},source=outlets"] == pytest.approx(expected, rel=1e-9)
            assert query(port, "site:wattbit_power_watts:sum", at) == {"": 700.0}
            assert set(query(port, "site:wattbit_nic_gigabits_per_second:rate1m", at)) == {
                "direction=rx",
                "direction=tx",
            }
        except BaseException:
            print((tmp_path / "prometheus.log").read_text()[-4000:])  # shown on failure
            raise


# --- what limits it (alerts/tests/limits_test.yml) -----------------------------------------------


def test_the_limits_cases_are_generated_and_current() -> None:
    """limits_test.yml is what gen_limits.py makes, and covers every "what limits it" rule
    with the issue's runs and its near misses."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("gen_limits", ALERTS / "tests" / "gen_limits.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_limits"] = gen  # its dataclasses look their module up
    spec.loader.exec_module(gen)
    path = ALERTS / "tests" / "limits_test.yml"
    assert path.read_text() == gen.render(), "run alerts/tests/gen_limits.py"
    text = path.read_text()
    for case in ("disks 96 % busy", "the workload is random", "24 disks on three 8-port",
                 "16 disks on three 8-port", "Highpoint: 1 controller(s), 8 drives",
                 "Highpoint: 2 controller(s)", "both NICs' interrupts on CPU 0",
                 "a CPU busy with an unrelated job", "NIC-bound, TCP loss"):  # fmt: skip
        assert case in text, case
    # every rule of the section is read by at least one check or by a rule a check reads
    first = "host_device:wattbit_disk_busy_by_controller:ratio1m"
    start = [r["record"] for r in rules()].index(first)
    section = rules()[start:]
    used = {m for r in section for m in IDENT.findall(r["expr"]) if ":" in m}
    checked = set(re.findall(r"[a-z_]+:wattbit_[a-z_]+:[a-z0-9_]+", text))
    for rule in section:
        assert rule["record"] in used | checked, f"no promtool case reads {rule['record']}"
