"""Two sites, one VictoriaMetrics: the long-term store of docs/longterm-store.md, really running.

The parts, all real and on this machine (root: a veth into a namespace):

* one `wattbit agent` (eBPF where bcc loads, else /proc/diskstats) watching this machine's
  disks and NICs and the root end of a veth, through which the test streams a paced TCP
  stream into a namespace during the run's load phase;
* node_exporter (cpu collector only);
* the demo's SIMULATED PDU (a real SNMP agent whose watts follow the veth's Gbit/s), polled
  every second by two `wattbit collector`s, one per site, each with its own run registry and
  its own outlet mapping (site a: outlets 1-2 feed host mover-a; site b: outlet 1 feeds
  mover-b; outlet 3 is the switch at both);
* a real server's Redfish mockup (tests/fixtures/bmc, served by sushy-static), the BMC of
  each site's host in its collector, so that the rules comparing a host's power sources
  (BMC against PDU) have results to send;
* two site Prometheus servers, site a scraping every 1 s, site b every 2 s, each with the
  jobs of deploy/prometheus/prometheus.yml (the agent and node_exporter labelled with the
  site's host), the rules of alerts/*.yml, `external_labels: {site: a|b}` and the
  remote_write block of deploy/compose/prometheus-longterm.yml (its URL pointed at the
  test's VictoriaMetrics, its write_relabel_configs as shipped);
* Debian's VictoriaMetrics 1.79 receiving both.

Both collectors mark the same run, `fleet-run`, cut into three phases (idle, load, idle),
so the run name alone does not tell the sites apart in the shared store.

Remote write is asynchronous: the fixture waits (bounded polling, no fixed sleeps) until
VictoriaMetrics holds, for each site, exactly the samples the site's Prometheus holds over
the comparison window for every series the write filter keeps: the same series (with the
`site` label added), the same timestamps, values equal to 1e-12 relative, or within 1e-12 of
the series' largest value (VictoriaMetrics keeps a block of a series' values as decimals of
about 15 significant digits under one exponent). The tests then assert:

* the report: `wattbit report fleet-run --prometheus VM --match site=S` gives the figures of
  `wattbit report fleet-run --prometheus SITE_PROMETHEUS` (every number to 1e-6 relative,
  everything else equal: the verdict's evidence word for word), for both sites, and without
  `--match` it mixes the two sites' hosts (why the option exists). The words are exact
  because the report reads every value at the digits both stores keep: VictoriaMetrics
  stores a decimal of about 12 significant digits (0.116 where Prometheus keeps the
  exporter's 0.11599999999999999), and read as sent a flow key busy exactly 0.5 % of its
  time printed "1 %" from one store and "0 %" from the other (docs/longterm-store.md,
  quirk 7);
* the rules run at the site's Prometheus: the results of every recording rule (and ALERTS)
  arrive in VictoriaMetrics with the site's label, sample for sample (the delivery check
  above covers them); every recording rule has results at both sites but those whose inputs
  the machine may lack (listed in the test with a query for the input: PCIe link speeds,
  RAPL, a disk busy alone on its controller), which have none where it lacks them; and vmalert 1.79
  loads both rule files, made per site with group `params: {extra_label: [site=S]}` and
  `labels: {site: S}` and nothing else changed, evaluates every rule against VictoriaMetrics
  without an error, and writes recording results with the label sets the site's Prometheus
  records;
* the dashboards: every variable, annotation and panel query of dashboards/json runs on
  VictoriaMetrics as a Grafana data source with the custom query parameters
  `extra_label=site=S&nocache=1` sends it, and returns the series the site's Prometheus
  returns, label for label (the `site` label aside, and `__name__`, which MetricsQL keeps
  where PromQL drops it; a series Prometheus answers with NaN at every point is one MetricsQL
  leaves out). Values: a query without a rate-like function (rate, increase, irate, delta,
  deriv, changes, resets) answers at the same times with the same values (1e-9 relative).
  A query with one differs by design — MetricsQL counts from the last
  sample before the window and does not extrapolate (docs/longterm-store.md) — so there only
  the series and that both engines answer are compared. A topk over such a query (the busiest
  flow keys) ranks values that differ by design, so each engine may pick other flows among
  similar ones: its ranked expression is compared without the topk, and each engine's topk
  must pick at most k of that engine's ranked series.

The store is read after VictoriaMetrics' -search.latencyOffset (30 s) has passed since the
window's end: VictoriaMetrics 1.79 replaces range-query points newer than that with older
values, whatever the query asks (docs/longterm-store.md).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.bmcs import MOCKUPS, SushyStatic, sushy_static_path
from tests.support.env import ROOT, require
from tests.support.realparts import (
    Agent,
    Collector,
    free_port,
    have,
    is_root,
    process,
    prometheus_server,
    query_api,
    running,
    server,
    veth_into_namespace,
    victoria_metrics,
    vmalert,
    wait_for,
)

sys.path.insert(0, str(ROOT / "dashboards"))
import queries  # type: ignore[import-not-found]

sys.path.insert(0, str(ROOT / "alerts"))
import make_wall  # type: ignore[import-not-found]

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]

PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
LONGTERM_CONFIG = ROOT / "deploy" / "compose" / "prometheus-longterm.yml"
RULE_FILES = sorted((ROOT / "alerts").glob("*.yml"))
TOKEN = "Fl33tSt0reT0kenForTheRunRegistry"
RUN = "fleet-run"
PHASES = (
    ("fleet-idle-1", "idle", 4.0),
    ("fleet-load", "full", 8.0),
    ("fleet-idle-2", "idle", 4.0),
)
STREAM_BYTES_PER_S = 25_000_000  # 0.2 Gbit/s: well above the rules' 0.01 Gbit/s floor
STREAM_PORT = 5202
# The veth's /30, from this process' id: two runs of this test at once get different routes.
_NET = f"169.254.{100 + os.getpid() % 100}"
ADDR_ROOT, ADDR_NS = f"{_NET}.1", f"{_NET}.2"
BEFORE, AFTER = 10.0, 7.0  # the comparison window: the run widened by these
VM_LATENCY = 30.0  # VictoriaMetrics' -search.latencyOffset (its default, given explicitly)
STEP = 2.0  # the dashboards' query step
BMC_MOCKUP = "hpe-dl325-gen10plus"  # a real server's Redfish mockup: each site host's BMC
BMC_PASSWORD_ENV = "WB_FLEET_BMC_PASSWORD"  # sushy-static asks for none; the config needs one


@dataclass(frozen=True)
class Site:
    name: str
    host: str
    scrape: float  # seconds; the rules run at the same interval
    outlets: str  # the collector's outlet mapping (YAML list items)


SITES = (
    Site("a", "mover-a", 1.0, "      - index: [1, 2]\n        host: mover-a\n        component: "
         "server\n      - index: 3\n        component: switch\n"),
    Site("b", "mover-b", 2.0, "      - index: 1\n        host: mover-b\n        component: "
         "server\n      - index: 3\n        component: switch\n"),
)  # fmt: skip


@dataclass
class Fleet:
    vm: str
    prom: dict[str, str]  # site -> its Prometheus
    start: float  # the run's window, as the registry has it (site a's)
    end: float
    tmp: Path
    write_filter: str  # the shipped write_relabel_configs' keep regex

    @property
    def window(self) -> tuple[float, float]:
        return self.start - BEFORE, self.end + AFTER


# ---- configuration --------------------------------------------------------------------------


def remote_write_block(vm: str) -> list[dict[str, Any]]:
    """The shipped remote_write of the longterm compose configuration, pointed at `vm`."""
    blocks = yaml.safe_load(LONGTERM_CONFIG.read_text())["remote_write"]
    assert len(blocks) == 1, blocks
    block = dict(blocks[0])
    assert block["url"] == "http://victoriametrics:8428/api/v1/write"
    block["url"] = vm + "/api/v1/write"
    return [block]


def write_filter() -> str:
    """The keep regex of the shipped write_relabel_configs (on __name__)."""
    (relabel,) = yaml.safe_load(LONGTERM_CONFIG.read_text())["remote_write"][0][
        "write_relabel_configs"
    ]
    assert relabel["action"] == "keep" and relabel["source_labels"] == ["__name__"]
    return str(relabel["regex"])


def prometheus_config(site: Site, vm: str, agent: int, collector: int, node: int) -> str:
    """deploy/prometheus/prometheus.yml with the site's targets, label, remote_write, interval."""
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    every = f"{site.scrape:g}s"
    cfg["global"].update(scrape_interval=every, scrape_timeout=every, evaluation_interval=every)
    cfg["global"]["external_labels"] = {"site": site.name}
    cfg["rule_files"] = [str(p) for p in RULE_FILES]
    cfg.pop("alerting", None)
    cfg["remote_write"] = remote_write_block(vm)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    labels = {"host": site.host}
    jobs["wattbit-agent"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{agent}"], "labels": labels}
    ]
    jobs["wattbit-collector"]["static_configs"] = [{"targets": [f"127.0.0.1:{collector}"]}]
    jobs["node"]["static_configs"] = [{"targets": [f"127.0.0.1:{node}"], "labels": labels}]
    return yaml.safe_dump(cfg)


def physical(kind: str) -> list[str]:
    """This machine's own disks (kind "block") or NICs ("net"): those with a device."""
    base = Path("/sys/class") / kind
    return sorted(d.name for d in base.iterdir() if (d / "device").exists())


def agent_config(veth: str) -> str:
    """The machine's own disks and NICs and the test's veth; nothing another test made."""
    disks = "|".join(re.escape(n) for n in physical("block"))
    nics = "|".join(re.escape(n) for n in [veth, *physical("net")])
    return (
        f"blockio:\n  exclude: '^(?!({disks})$)'\n"
        f"nic:\n  exclude: '^(?!({nics})$)'\n"
        "smart:\n  enabled: false\n"
    )


def collector_config(site: Site, state: Path, pdu_port: int, community: Path, bmc: str) -> str:
    return (
        f"state_dir: {state}\ninterval: 1s\nruns:\n  token: {TOKEN}\n"
        f"auths:\n  sim:\n    version: 2c\n    community_file: {community}\n"
        f"pdus:\n  - name: {site.name}-pdu1\n    address: 127.0.0.1:{pdu_port}\n"
        f"    auth: sim\n    profile: apc_rpdu2\n    timeout: 3s\n    outlets:\n{site.outlets}"
        f"bmcs:\n  - name: {site.name}-bmc\n    protocol: redfish\n    address: {bmc}\n"
        f"    allow_plain_http: true\n    auth: basic\n    username: wattbit\n"
        f"    password_env: {BMC_PASSWORD_ENV}\n    timeout: 3s\n    host: {site.host}\n"
        "    component: server\n"
    )


# ---- processes --------------------------------------------------------------------------------


def run_api(port: int, path: str, body: object | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def stream(addr: str, seconds: float) -> None:
    """A TCP stream at STREAM_BYTES_PER_S for `seconds` (paced in 10 ms slices)."""
    chunk = bytes(STREAM_BYTES_PER_S // 100)
    deadline = time.monotonic() + seconds
    with socket.create_connection((addr, STREAM_PORT), timeout=10) as s:
        tick = time.monotonic()
        while tick < deadline:
            s.sendall(chunk)
            tick += 0.01
            time.sleep(max(0.0, tick - time.monotonic()))


# ---- reading both stores ----------------------------------------------------------------------


def instant(url: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr, "nocache": "1"}
    if at is not None:
        params["time"] = f"{at:.3f}"
    return list(query_api(url, "/api/v1/query", params)["result"])


Key = tuple[tuple[str, str], ...]
Raw = dict[Key, list[tuple[float, float]]]


def raw_samples(url: str, selector: str, w0: float, w1: float) -> Raw:
    """Every raw sample in (w0, w1] of the series `selector` picks, the `site` label dropped."""
    span = math.ceil(w1 - w0) + 5
    out: Raw = {}
    for s in instant(url, f"{selector}[{span}s]", w1):
        key = tuple(sorted((k, v) for k, v in s["metric"].items() if k != "site"))
        pts = [(round(float(t), 3), float(v)) for t, v in s["values"] if w0 < float(t) <= w1]
        pts = [(t, v) for t, v in pts if not math.isnan(v)]
        if pts:
            out[key] = pts
    return out


def close(a: float, b: float, rel: float) -> bool:
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def raw_differences(prom: Raw, vm: Raw, rel: float = 1e-12) -> list[str]:
    """What VictoriaMetrics lacks, has more of, or holds otherwise; empty when equal."""
    out = [f"missing in VM: {dict(k)}" for k in prom.keys() - vm.keys()]
    out += [f"only in VM: {dict(k)}" for k in vm.keys() - prom.keys()]
    for k in prom.keys() & vm.keys():
        a, b = prom[k], vm[k]
        if [t for t, _ in a] != [t for t, _ in b]:
            out.append(f"{dict(k)}: {len(a)} samples on Prometheus, {len(b)} on VM")
            continue
        # VictoriaMetrics keeps a block of a series' samples as integers under one decimal
        # exponent (lib/decimal's AppendFloatToDecimal), so its precision is relative to the
        # series' largest value, not each value's: a rounding residue near 0 (a ratio's
        # 1 - x) beside 0.87 comes back rounded at 0.87's scale. So a value may also differ
        # by `rel` of the series' largest.
        scale = rel * max(abs(v) for _, v in a + b)
        bad = [(t, x, y) for (t, x), (_, y) in zip(a, b, strict=True)
               if not close(x, y, rel) and abs(x - y) > scale]  # fmt: skip
        if bad:
            out.append(f"{dict(k)}: values differ (time, Prometheus, VM): {bad[:3]}")
    return sorted(out)


def site_selectors(fleet: Fleet, site: str) -> tuple[str, str]:
    """The series the write filter keeps: on the site's Prometheus, and on VM for the site."""
    return (
        f'{{__name__=~"{fleet.write_filter}"}}',
        f'{{__name__=~"{fleet.write_filter}", site="{site}"}}',
    )


# ---- the fleet ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require(is_root(), "needs root (a veth into a network namespace)")
    for cmd in ("prometheus", "victoria-metrics", "vmalert", "prometheus-node-exporter", "ip"):
        require(have(cmd), f"{cmd} is not installed (scripts/bootstrap.sh)")
    require(sushy_static_path() is not None, "sushy-static (sushy-tools, PyPI) is not installed")
    tmp = tmp_path_factory.mktemp("fleet")
    py = sys.executable
    t_start = time.monotonic()
    with contextlib.ExitStack() as stack:
        vm = stack.enter_context(
            victoria_metrics(tmp, "victoria-metrics", f"-search.latencyOffset={VM_LATENCY:g}s")
        )
        ns, veth = stack.enter_context(veth_into_namespace("wbfleet", ADDR_ROOT, ADDR_NS))
        stack.enter_context(
            process(
                ["ip", "netns", "exec", ns, py, "-m", "collector.demo", "receive",
                 ADDR_NS, str(STREAM_PORT)],
                tmp / "receiver.log",
            )
        )  # fmt: skip
        community = tmp / "community"
        community.write_text("fleetstore\n")
        community.chmod(0o600)
        pdu_port = free_port(socket.SOCK_DGRAM)
        stack.enter_context(
            process(
                [py, "-m", "collector.demo.pdusim", "--listen", f"127.0.0.1:{pdu_port}",
                 "--community-file", str(community), "--interfaces", f"^{veth}$", "--cpu-w",
                 "0"],
                tmp / "pdusim.log",
            )
        )  # fmt: skip
        bmc = stack.enter_context(SushyStatic(MOCKUPS / BMC_MOCKUP, tmp))
        (tmp / "agent").mkdir()
        agent = stack.enter_context(running(Agent(agent_config(veth), tmp / "agent")))
        node = stack.enter_context(
            server(
                "node_exporter",
                lambda port: [
                    "prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}",
                    "--collector.disable-defaults", "--collector.cpu",
                ],
                tmp,
                ready_path="/metrics",
            )
        )  # fmt: skip
        node_port = int(node.rsplit(":", 1)[1])
        collectors: dict[str, Collector] = {}
        prom: dict[str, str] = {}
        for site in SITES:
            d = tmp / f"collector-{site.name}"
            d.mkdir()
            cfg = collector_config(site, d / "state", pdu_port, community, bmc.url)
            c = Collector(cfg, d, env={BMC_PASSWORD_ENV: "not-a-real-password"})
            collectors[site.name] = stack.enter_context(running(c))
        for site in SITES:
            cfg = prometheus_config(site, vm, agent.port, collectors[site.name].port, node_port)
            prom[site.name] = stack.enter_context(
                prometheus_server(cfg, tmp, f"prometheus-{site.name}")
            )
        try:

            def ready(url: str) -> bool:
                up = instant(url, "up == 1")
                watts = instant(url, "site:wattbit_power_watts:sum")
                bmc = instant(url, "host:wattbit_power_watts:bmc_minus_pdu")
                return len(up) == 3 and bool(watts) and bool(bmc)

            print(f"fleet: started in {time.monotonic() - t_start:.1f} s")
            for url in prom.values():
                wait_for(partial(ready, url), 90, "all targets up, the PDU's and the BMC's watts")
            print(f"fleet: ready in {time.monotonic() - t_start:.1f} s")
            ports = [c.port for c in collectors.values()]
            for p in ports:
                run_api(p, "/api/v1/runs", {"name": RUN, "labels": {"setup": "fleet"}})
            for name, phase, seconds in PHASES:
                labels = {"part_of": RUN, "phase": phase}
                for p in ports:
                    run_api(p, "/api/v1/runs", {"name": name, "labels": labels})
                if phase == "idle":
                    time.sleep(seconds)  # the load's shape, not a wait for anything
                else:
                    stream(ADDR_NS, seconds)
                for p in ports:
                    run_api(p, f"/api/v1/runs/{name}/stop")
            for p in ports:
                run_api(p, f"/api/v1/runs/{RUN}/stop")
            print(f"fleet: run done in {time.monotonic() - t_start:.1f} s")
            fl = finish(Fleet(vm, prom, 0.0, 0.0, tmp, write_filter()))
            print(f"fleet: delivered in {time.monotonic() - t_start:.1f} s")
            yield fl
        except BaseException:
            for log in sorted(tmp.rglob("*.log")):
                with contextlib.suppress(OSError):
                    print(f"--- {log.relative_to(tmp)}\n" + log.read_text()[-3000:])
            raise


def finish(fl: Fleet) -> Fleet:
    """The run's window (site a's registry); wait until both sites' data are complete in VM."""
    start_end = {}
    for site in SITES:
        url = fl.prom[site.name]

        def ended(url: str = url) -> tuple[float, float] | None:
            s = instant(url, f'wattbit_run_start_time_seconds{{run="{RUN}"}}')
            e = instant(url, f'wattbit_run_end_time_seconds{{run="{RUN}"}}')
            if not s or not e:
                return None
            return float(s[0]["value"][1]), float(e[0]["value"][1])

        start_end[site.name] = wait_for(ended, 30, f"site {site.name}: the run's end scraped")
    t0 = time.monotonic()
    fl.start, fl.end = start_end["a"]
    w0, w1 = fl.window
    for site in SITES:
        url = fl.prom[site.name]
        # the site's Prometheus has scraped (and evaluated the rules) past the window

        def past(url: str = url, s: Site = site) -> bool:
            return (
                min(float(r["value"][1]) for r in instant(url, "timestamp(up)")) > w1 + 2 * s.scrape
            )

        wait_for(past, 60, f"site {site.name}: scrapes past the window")
    print(f"fleet: scraped past the window after {time.monotonic() - t0:.1f} s")
    last: dict[str, list[str]] = {}

    def delivered() -> bool:
        for site in SITES:
            on_prom, on_vm = site_selectors(fl, site.name)
            diff = raw_differences(
                raw_samples(fl.prom[site.name], on_prom, w0, w1),
                raw_samples(fl.vm, on_vm, w0, w1),
            )
            last[site.name] = diff
            if diff:
                return False
        return True

    try:
        wait_for(delivered, 90, "VictoriaMetrics to hold every sample of both sites", interval=2)
    except TimeoutError as exc:
        summary = {s: [*d[:20], f"... {len(d)} differences"] for s, d in last.items()}
        raise AssertionError(f"{exc}: {json.dumps(summary, indent=1)}") from None
    return fl


# ---- what arrived ---------------------------------------------------------------------------


def names(url: str, selector: str, at: float) -> set[str]:
    return {r["metric"]["__name__"] for r in instant(url, f"last_over_time({selector}[1m])", at)}


def recorded_names() -> list[str]:
    return [r["record"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]
            for r in g["rules"] if "record" in r]  # fmt: skip


def test_each_site_arrives_under_its_own_label(fleet: Fleet) -> None:
    """Both sites' raw series and rule results are in the store, apart; the filter works."""
    at = fleet.end
    for site in SITES:
        on_vm = names(fleet.vm, f'{{site="{site.name}"}}', at)
        for family in ("wattbit_nic_bytes_total", "wattbit_disk_busy_seconds_total",
                       "wattbit_pdu_outlet_power_watts", "wattbit_run_start_time_seconds",
                       "node_cpu_seconds_total", "up"):  # fmt: skip
            assert family in on_vm, (site.name, family)
        hosts = {r["metric"].get("host") for r in instant(
            fleet.vm, f'wattbit_nic_bytes_total{{site="{site.name}"}}', at)}  # fmt: skip
        assert hosts == {site.host}
        # what the filter leaves at the site: Prometheus' own series about each scrape
        assert "scrape_duration_seconds" in names(fleet.prom[site.name], "{job!=''}", at)
        assert not any(n.startswith("scrape_") for n in on_vm)
    assert {r["metric"].get("site") for r in instant(fleet.vm, "up", at)} == {"a", "b"}


# Recording rules that need inputs a machine may not have, each with a query that is empty
# when the site lacks them (over the last hour: longer than the site has run). The agent watches
# this machine's own disks and NICs: PCIe link speeds (a VM's virtual devices have none), a
# controller under a PCIe bridge, RAPL (no /sys/class/powercap in most VMs), and a disk at
# least 90 % busy alone on its controller (which other work on the machine may or may not
# cause). Where the query is empty the rule must have no results (so the list cannot hide a
# broken rule); every other recording rule must have results at both sites.
USABLE = "max_over_time(wattbit_pcie_link_usable_bytes_per_second[1h])"
UPSTREAM = 'max_over_time(wattbit_pcie_link_info{role="controller", upstream!=""}[1h])'
RAPL = 'max_over_time(wattbit_rapl_energy_joules_total{zone=~"package|dram"}[1h])'
ALONE = "max_over_time(host_device:wattbit_disk_busy_by_controller:ratio1m[1h]) >= 0.9"
NEEDS = {
    "host_pci:wattbit_pcie_link_utilisation:ratio1m": USABLE,
    "host_pci:wattbit_pcie_shared_link_utilisation:ratio1m": USABLE,
    "host_pci:wattbit_pcie_utilisation:ratio1m": f"{USABLE} or ({UPSTREAM} and on () {ALONE})",
    "host_controller:wattbit_pcie_link_upstream:info": UPSTREAM,
    "host_pci:wattbit_disk_yield:ratio1m": f"{UPSTREAM} and on () {ALONE}",
    "host:wattbit_power_rapl_share:ratio": RAPL,
    "host_device:wattbit_disk_alone_bytes_per_second:last": ALONE,
    "host_device:wattbit_disk_alone_ios_per_second:last": ALONE,
    "host_controller_share:wattbit_disk_now_per_second:sum1m": ALONE,
    "host_controller_share:wattbit_disk_alone_per_second:sum1m": ALONE,
    "host_controller:wattbit_disk_yield:ratio1m": ALONE,
    "host_controller:wattbit_controller_utilisation:ratio1m": f"{USABLE} or {ALONE}",
}
# The Wall's short-window copies (alerts/make_wall.py, docs/rules.md "The Wall's window") read
# the same inputs over 20 s instead of 1 m (the latches and the upstream info as they are), so
# each copy of a rule above needs what that rule needs, and has results where it has them.
NEEDS |= {make_wall.short(rule): need for rule, need in NEEDS.items() if rule.endswith("1m")}


def test_the_rules_results_travel_with_the_site(fleet: Fleet) -> None:
    """The rules run at the site's Prometheus; what they record is in the store, per site.

    The delivery check made every sample of them equal; here: every recording rule (but
    host_device_op:, whose 5m windows and 1 request/s floor need a longer run, and those of
    NEEDS whose inputs the site lacks, which must have none) has results at both sites (the
    BMC-against-PDU ones from the mockup BMC, the joules per gigabit from the load phase),
    and the same names are in the store under the site's label.
    """
    recorded = recorded_names()
    assert set(NEEDS) <= set(recorded), set(NEEDS) - set(recorded)
    core = {n for n in recorded if not n.startswith("host_device_op:")}
    at = fleet.end
    for site in SITES:
        url = fleet.prom[site.name]
        at_site = names(url, '{__name__=~".+:wattbit_.+"}', at)
        in_store = names(fleet.vm, f'{{__name__=~".+:wattbit_.+", site="{site.name}"}}', at)
        lacking = {rule for rule, expr in NEEDS.items() if not instant(url, expr, at)}
        print(f"site {site.name}: inputs lacking for {sorted(lacking)}")
        assert not lacking & at_site, (site.name, "results without inputs", lacking & at_site)
        want = core - set(NEEDS)
        assert want <= at_site, (site.name, "no results", want - at_site)
        assert at_site == in_store, at_site ^ in_store
        jpg = instant(fleet.vm, f'host:wattbit_joules_per_gigabit:ratio1m{{site="{site.name}"}}',
                      fleet.start + sum(s for _, _, s in PHASES[:2]))  # fmt: skip
        assert [r["metric"]["host"] for r in jpg] == [site.host]
        bmc = instant(fleet.vm, f'host:wattbit_power_bmc_over_pdu:ratio{{site="{site.name}"}}', at)
        assert [(r["metric"]["host"], r["metric"]["bmc_source"]) for r in bmc] == [
            (site.host, "redfish")
        ]


class _Sink(http.server.BaseHTTPRequestHandler):
    """Alertmanager's alert API, for vmalert to send its alerts to (and forget them)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def alert_sink() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def per_site_rules(directory: Path) -> list[Path]:
    """alerts/*.yml for vmalert, one copy per site: each group reads and labels its site only."""
    out = []
    for site in SITES:
        for f in RULE_FILES:
            doc = yaml.safe_load(f.read_text())
            for g in doc["groups"]:
                g["name"] = f"{g['name']}-{site.name}"
                g["params"] = {"extra_label": [f"site={site.name}"]}
                g["labels"] = {"site": site.name}
            path = directory / f"{site.name}-{f.name}"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            out.append(path)
    return out


# Recorded whenever there is data at all (no traffic floor, no 1 request/s floor, no 5m window).
STABLE = ("host:wattbit_power_watts:sum", "component:wattbit_power_watts:sum",
          "site:wattbit_power_watts:sum", "host:wattbit_nic_gigabits_per_second:rate1m",
          "site:wattbit_nic_gigabits_per_second:rate1m", "host_device:wattbit_disk_busy:ratio1m",
          "host_device:wattbit_disk_bytes_per_second:rate1m")  # fmt: skip


def test_vmalert_evaluates_the_rules_per_site(fleet: Fleet) -> None:
    """The alternative placement works: vmalert 1.79 on the unchanged rules, scoped per site."""
    d = fleet.tmp / "vmalert"
    d.mkdir()
    rules = per_site_rules(d)
    dry = subprocess.run(["vmalert", "-dryRun", *(f"-rule={r}" for r in RULE_FILES)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert dry.returncode == 0 and "error" not in dry.stderr.lower(), dry.stderr[-2000:]
    expected = {
        f"{g['name']}-{site.name}": [r.get("record") or r.get("alert") for r in g["rules"]]
        for site in SITES
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
    }
    started = time.time()
    with (
        alert_sink() as sink,
        vmalert(rules, d, fleet.vm, "vmalert",
                f"-remoteWrite.url={fleet.vm}", "-remoteWrite.flushInterval=1s",
                f"-notifier.url={sink}", "-evaluationInterval=2s",
                "-external.label=ruler=vmalert") as url,
    ):  # fmt: skip

        def evaluated() -> dict[str, Any] | None:
            groups = query_api(url, "/api/v1/rules")["groups"]
            done = all(
                r["lastEvaluation"] > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started))
                for g in groups for r in g["rules"]
            )  # fmt: skip
            return {g["name"]: g for g in groups} if done else None

        groups = wait_for(evaluated, 60, "vmalert: every rule evaluated once")
        assert {n: [r["name"] for r in g["rules"]] for n, g in groups.items()} == expected
        errors = [(n, r["name"], r["lastError"]) for n, g in groups.items() for r in g["rules"]
                  if r["lastError"] or r["health"] != "ok"]  # fmt: skip
        assert not errors, errors

        def label_sets(url: str, name: str, sel: str, at: float | None) -> set[Key]:
            return {
                tuple(sorted((k, v) for k, v in r["metric"].items()
                             if k not in ("__name__", "site", "ruler")))
                for r in instant(url, f"last_over_time({name}{sel}[10s])", at)
            }  # fmt: skip

        for site in SITES:
            # the site's Prometheus records these for every host, disk, component: so does
            # vmalert from the store, for the site (its results carry site and ruler labels)
            for name in STABLE:
                want = label_sets(fleet.prom[site.name], name, "", None)
                assert want, (site.name, name)
                sel = f'{{site="{site.name}", ruler="vmalert"}}'

                def recorded(name: str = name, sel: str = sel, want: set[Key] = want) -> bool:
                    return label_sets(fleet.vm, name, sel, None) == want

                wait_for(recorded, 30, f"vmalert's {name} for site {site.name} in the store")


# ---- the report ------------------------------------------------------------------------------

VARIES = ("prometheus", "generated_at", "timings_seconds", "prometheus_requests", "match")


def wattbit_report(out: Path, *args: str) -> dict[str, Any]:
    """The real command line; its JSON."""
    r = subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", RUN, "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads((out / f"{RUN}.json").read_text()))


def differences(a: Any, b: Any, rel: float, path: str = "") -> list[str]:
    """Where two JSON documents differ: numbers beyond `rel`, anything else at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only on one side" for k in a.keys() ^ b.keys()]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], rel, f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, rel, f"{path}[{i}]")]  # fmt: skip
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return [] if close(float(a), float(b), rel) else [f"{path}: {a!r} against {b!r}"]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


@dataclass
class Answers:
    """What each store answered: reports {"a-prom", "a-vm", ..., "vm-unmatched"} and the
    dashboards' results {"a-prom", "a-vm", ...}."""

    reports: dict[str, dict[str, Any]]
    dashboards: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def answers(fleet: Fleet) -> Answers:
    """Ask the sites first, then the store once the window's end is older than its
    -search.latencyOffset.

    VictoriaMetrics 1.79 answers a range query's points newer than that with the value of the
    last point before them, whatever the query asks (`nocache=1` does not change it; later
    versions take `latency_offset=0`): read earlier, a counter looks flat at the end.
    """
    out = fleet.tmp / "reports"
    w0, w1 = math.floor(fleet.window[0]), math.ceil(fleet.window[1])
    jobs: dict[str, list[str]] = {}
    dashboards: dict[str, dict[str, Any]] = {}
    for site in SITES:
        jobs[f"{site.name}-prom"] = ["--prometheus", fleet.prom[site.name]]
        dashboards[f"{site.name}-prom"] = queries.run_all(
            fleet.prom[site.name], w0, w1, STEP, site.scrape
        )
    on_vm = {f"{s.name}-vm": ["--prometheus", fleet.vm, "--match", f"site={s.name}"] for s in SITES}
    on_vm["vm-unmatched"] = ["--prometheus", fleet.vm]
    with ThreadPoolExecutor(3) as pool:
        reports = dict(zip(jobs, pool.map(lambda k: wattbit_report(out / k, *jobs[k]), jobs),
                           strict=True))  # fmt: skip
        wait_for(lambda: time.time() > w1 + VM_LATENCY + 1, VM_LATENCY + 60,
                 "the window's end older than -search.latencyOffset", interval=0.5)  # fmt: skip
        reports |= dict(zip(on_vm, pool.map(lambda k: wattbit_report(out / k, *on_vm[k]), on_vm),
                            strict=True))  # fmt: skip
    for site in SITES:
        extra = {"extra_label": f"site={site.name}", "nocache": "1"}
        dashboards[f"{site.name}-vm"] = queries.run_all(
            fleet.vm, w0, w1, STEP, site.scrape, extra=extra
        )
    return Answers(reports, dashboards)


def test_report_from_the_store_equals_the_sites(answers: Answers) -> None:
    reports = answers.reports
    for site in SITES:
        prom, vm = reports[f"{site.name}-prom"], reports[f"{site.name}-vm"]
        assert vm["match"] == {"site": site.name} and prom["match"] == {}
        a = {k: v for k, v in prom.items() if k not in VARIES}
        b = {k: v for k, v in vm.items() if k not in VARIES}
        diff = differences(a, b, 1e-6)
        assert not diff, f"site {site.name}:\n" + "\n".join(diff[:40])
        # the site's own figures, not the other's
        assert set(vm["hosts"]) == {site.host}
        assert {o["pdu"] for o in vm["outlets"]} == {f"{site.name}-pdu1"}
        assert [p["run"] for p in vm["phases"]] == [name for name, _, _ in PHASES]
        assert vm["site"]["joules_per_gigabit"] is not None
        print(f"site {site.name}: {vm['site']['gigabits']:.3f} Gbit, "
              f"{vm['site']['energy_joules']:.0f} J, {vm['site']['joules_per_gigabit']:.1f} "
              "J/Gbit on both")  # fmt: skip


def test_report_without_match_mixes_the_sites(answers: Answers) -> None:
    """Why --match exists: the store holds both sites' hosts and PDUs under one run name."""
    mixed = answers.reports["vm-unmatched"]
    assert set(mixed["hosts"]) == {s.host for s in SITES}
    assert {o["pdu"] for o in mixed["outlets"]} == {f"{s.name}-pdu1" for s in SITES}


# ---- the dashboards ----------------------------------------------------------------------------

RATE_LIKE = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv|changes|resets)\s*\(")


def series(result: list[dict[str, Any]], drop: tuple[str, ...]) -> dict[Key, dict[float, float]]:
    """{labels without `drop`: {time: value}} of an answer, NaN points and all-NaN series out."""
    out: dict[Key, dict[float, float]] = {}
    for r in result:
        points = r["values"] if "values" in r else [r["value"]]
        vals = {round(float(t), 3): float(v) for t, v in points if not math.isnan(float(v))}
        if vals:
            out[tuple(sorted((k, v) for k, v in r["metric"].items() if k not in drop))] = vals
    return out


def compare_query(prom: list[dict[str, Any]], vm: list[dict[str, Any]], quirks: set[str],
                  where: str) -> list[str]:  # fmt: skip
    """What differs between the two answers of one query (empty when they agree)."""
    p, v = series(prom, ()), series(vm, ("site",))
    if p.keys() != v.keys():
        # MetricsQL keeps the name where PromQL drops it (avg_over_time, clamp_max, ...)
        p, v = series(prom, ("__name__",)), series(vm, ("site", "__name__"))
        if p.keys() == v.keys():
            quirks.add(f"{where}: MetricsQL keeps __name__")
    if p.keys() != v.keys():
        return [f"{where}: series only on Prometheus {sorted(p.keys() - v.keys())[:3]}, only "
                f"on VictoriaMetrics {sorted(v.keys() - p.keys())[:3]}"]  # fmt: skip
    out = []
    for key in p:
        a, b = p[key], v[key]
        if a.keys() != b.keys():
            out.append(f"{where} {dict(key)}: points at {sorted(a.keys() ^ b.keys())[:4]}")
            continue
        bad = [(t, a[t], b[t]) for t in a if not close(a[t], b[t], 1e-9)
               and abs(a[t] - b[t]) > 1e-12]  # fmt: skip
        if bad:
            out.append(f"{where} {dict(key)}: values {bad[:3]}")
    return out


def ask(fleet: Fleet, site: Site, dash: dict[str, Any], expr: str, instant: bool,
        vm: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """`expr` asked of one site's Prometheus (or of the store, for that site) as the panel is."""
    extra = {"extra_label": f"site={site.name}", "nocache": "1"} if vm else None
    if instant:
        path, params = "/api/v1/query", {"query": expr, "time": dash["end"]}
    else:
        path = "/api/v1/query_range"
        params = {"query": expr, "start": dash["start"], "end": dash["end"], "step": dash["step"]}
    url = fleet.vm if vm else fleet.prom[site.name]
    return list(queries.api(url, path, params, extra=extra)["result"])


Result = list[dict[str, Any]]


def compare_rate(fleet: Fleet, site: Site, dash: dict[str, Any], q: dict[str, Any],
                 prom: Result, vm: Result, where: str) -> list[str]:  # fmt: skip
    """Rate-like answers: the same series, up to the sample just before each window.

    MetricsQL's rate() starts from the last sample before the window, PromQL's from the first
    inside it (https://docs.victoriametrics.com/metricsql/#rate). A counter that moves once in
    several scrapes -- a flow key whose sockets are rarely busy -- then has a rate > 0 at a
    step on VictoriaMetrics and 0, cut by a `> 0`, on Prometheus: a CI run saw a loopback
    flow's limited share on the store alone. That sample may lie far back: a flow key's series
    stops while the key has no socket and comes back with its next connection (another CI run
    saw one again past a window widened by 4 scrapes), and a series that begins inside the
    window has no sample before it at all, where MetricsQL may count its first value from 0.
    So every series the store alone answers must be one Prometheus answers with each window
    reaching back over the whole range, or else one whose labels Prometheus holds samples of
    in that range; a series Prometheus alone answers is a difference (the store sees every
    sample Prometheus does, and more).
    """
    p, v = series(prom, ("__name__",)), series(vm, ("site", "__name__"))
    only_p, only_v = p.keys() - v.keys(), v.keys() - p.keys()
    window = dash["builtins"]["__rate_interval"]
    reach = queries.seconds(window) + max(4 * site.scrape, int(dash["builtins"]["__range_s"]))
    if only_v:
        expr = q["expanded"].replace(f"[{window}]", f"[{queries.fmt_seconds(reach)}]")
        only_v -= series(ask(fleet, site, dash, expr, q["instant"]), ("__name__",)).keys()
    only_v = {k for k in only_v if not held(fleet, site, dash, k, reach)}
    if only_p or only_v:
        return [f"{where}: series only on Prometheus {sorted(only_p)[:3]}, only on "
                f"VictoriaMetrics (even against wider windows) {sorted(only_v)[:3]}"]  # fmt: skip
    return []


def held(fleet: Fleet, site: Site, dash: dict[str, Any], key: Key, reach: float) -> bool:
    """Whether Prometheus holds samples, within `reach` seconds before the range's end, of a
    series with these labels (of any name; an answer aggregated by them has no others)."""
    if not key:
        return False
    matchers = ",".join(f"{k}={json.dumps(v)}" for k, v in key)
    expr = f"count_over_time({{{matchers}}}[{queries.fmt_seconds(reach)}])"
    return any(set(key) <= r["metric"].items() for r in ask(fleet, site, dash, expr, True))


TOPK = re.compile(r"\s*topk\(\s*(\d+)\s*,(.*)\)\s*", re.DOTALL)


def topk_of(expr: str) -> tuple[int, str] | None:
    """(k, the ranked expression) when `expr` is `topk(k, X)` as a whole, else None."""
    m = TOPK.fullmatch(expr)
    if m is None:
        return None
    depth = 0
    for i, ch in enumerate(expr):  # the final ")" must close topk's own "(", not an inner one
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch == ")" and i < len(expr.rstrip()) - 1:
            return None
    return int(m.group(1)), m.group(2)


def compare_topk(fleet: Fleet, site: Site, dash: dict[str, Any], q: dict[str, Any],
                 qv: dict[str, Any], where: str) -> list[str]:  # fmt: skip
    """A topk over a rate-like expression, on both stores.

    Which k series win depends on their values, and rate-like values differ by design
    (MetricsQL does not extrapolate): among flows of similar rates (the test's own loopback
    connections) each engine may rank others first. So the ranked expression is asked of
    both stores without the topk and compared as every rate-like query is (the same series);
    and each engine's topk must answer at most k series per point, every one of them a series
    that engine's ranked expression has.
    """
    k, inner = topk_of(q["expanded"]) or (0, "")
    full_p = ask(fleet, site, dash, inner, q["instant"])
    full_v = ask(fleet, site, dash, inner, q["instant"], vm=True)
    out = compare_rate(fleet, site, dash, {**q, "expanded": inner}, full_p, full_v,
                       f"{where} (without topk)")  # fmt: skip
    sides = (("Prometheus", q["result"], full_p, ()),
             ("VictoriaMetrics", qv["result"], full_v, ("site",)))  # fmt: skip
    for name, top, full, drop in sides:
        ranked, picked = series(full, (*drop, "__name__")), series(top, (*drop, "__name__"))
        if not picked.keys() <= ranked.keys():
            out.append(f"{where}: {name}'s topk has series its ranked expression lacks: "
                       f"{sorted(picked.keys() - ranked.keys())[:3]}")  # fmt: skip
        per_point: dict[float, int] = {}
        for pts in picked.values():
            for t in pts:
                per_point[t] = per_point.get(t, 0) + 1
        if any(n > k for n in per_point.values()):
            out.append(f"{where}: {name}'s topk({k}) answers {max(per_point.values())} at a point")
        if ranked and not picked:
            out.append(f"{where}: {name}'s topk is empty, its ranked expression is not")
    return out


@pytest.mark.parametrize("site", SITES, ids=lambda s: f"site-{s.name}")
def test_every_dashboard_query_answers_alike(fleet: Fleet, answers: Answers, site: Site) -> None:
    on_prom = answers.dashboards[f"{site.name}-prom"]
    on_vm = answers.dashboards[f"{site.name}-vm"]
    problems: list[str] = []
    quirks: set[str] = set()
    counts = {"same values": 0, "rate-like": 0, "answered": 0, "empty on both": 0, "topk": 0}
    for stem, dash in on_prom.items():
        other = on_vm[stem]
        assert dash["variables"] == other["variables"], stem
        assert dash["variables"].get("host") == [site.host], stem
        for a, b in zip(dash["annotations"], other["annotations"], strict=True):
            problems += compare_query(a["result"], b["result"], quirks, f"{stem} {a['name']}")
        for panel, twin in zip(dash["panels"], other["panels"], strict=True):
            for q, qv in zip(panel["queries"], twin["queries"], strict=True):
                assert q["expanded"] == qv["expanded"]
                rate_like = bool(RATE_LIKE.search(q["expanded"]))
                where = f"{stem} / {panel['title']} / {q['refId']}"
                if rate_like and topk_of(q["expanded"]):
                    counts["topk"] += 1
                    problems += compare_topk(fleet, site, dash, q, qv, where)
                elif rate_like:
                    problems += compare_rate(fleet, site, dash, q, q["result"], qv["result"], where)
                else:
                    problems += compare_query(q["result"], qv["result"], quirks, where)
                if not series(q["result"], ()):  # (and on VM: compare_query said otherwise)
                    counts["empty on both"] += 1
                    continue
                counts["answered"] += 1
                counts["rate-like" if rate_like else "same values"] += 1
    assert not problems, "\n".join(problems)
    print(f"site {site.name}: {counts}; quirks: {sorted(quirks)}")
    assert counts["answered"] >= 40 and counts["same values"] >= 15, counts
