"""Every panel query of every dashboard, run against a real Prometheus holding real data.

The parts, all real and all on this machine (root needed):

* two loop disks under fio load, seen by a `wattbit agent` in the root namespace (eBPF);
* a veth pair between two fresh namespaces with iperf3 streaming from A to B, seen by a second
  `wattbit agent` running inside namespace A (an agent sees the interfaces of its own network
  namespace). Prometheus runs in the root namespace, so the second agent is scraped through a
  small TCP relay: the test opens the listening socket in the root namespace and hands it to a
  relay process started inside namespace A, which connects to the agent there;
* node_exporter (Debian `prometheus-node-exporter`, cpu collector only) on 127.0.0.1;
* a `wattbit collector` polling snmpsim serving a real PDU recording (APC AP8641), outlets 1-2
  mapped to the agents' host and component `server`, outlets 3-4 to component `switch`; a run
  started and stopped through the collector's run API (docs/runs.md);
* Prometheus scraping all of it every second with deploy/prometheus/prometheus.yml's jobs
  (targets replaced, the `host` label set explicitly on every agent and node target) and the
  rules of alerts/*.yml.

After 70 s of load every dashboard's template variables are expanded with the values
Prometheus holds, and every panel query (and the run annotation) is run through the HTTP API.

Substitution rules (what Grafana would send for these dashboards with every variable at All):

* `label_values(SELECTOR, LABEL)` variables: `/api/v1/label/LABEL/values?match[]=SELECTOR`
  over the test's window, after substituting the variables before them (host before device);
  a multi-value variable inside a regex matcher becomes `(v1|v2|...)`, each value
  regex-escaped (Grafana's regex formatting of a multi-value variable);
* `$__interval` = the step, 2 s; `$__rate_interval` = max(`$__interval` + scrape interval,
  4 x scrape interval) = max(3 s, 4 s) = `4s` (Grafana's definition, scrape interval 1 s);
* `$__range` = the window's length in whole seconds;
* range queries (`range: true`) go to `/api/v1/query_range` over the window at the step;
  instant queries (tables) to `/api/v1/query` at the window's end.

A query "returns data" when its result has at least one series (a series of zeros counts).
The only queries allowed to come back empty are listed in ALLOWED_EMPTY, each with its reason.

The results are saved as JSON; `dashboards/render.py` draws them (one PNG per dashboard).
With WATTBIT_DASHBOARD_RESULTS=PATH the JSON is also written to PATH, which is how
docs/dashboards/query-results.json and the PNGs next to it were made:

    sudo WATTBIT_DASHBOARD_RESULTS=docs/dashboards/query-results.json \\
        .venv/bin/python -m pytest tests/integration/test_dashboards_real.py
    .venv/bin/python dashboards/render.py docs/dashboards/query-results.json docs/dashboards
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.env import RECORDINGS, ROOT, require
from tests.support.realparts import (
    Agent,
    Collector,
    bcc_importable,
    free_port,
    have,
    is_root,
    loop_disks,
    veth_pair,
    wait_for,
)
from tests.support.snmpagents import SnmpSim, have_snmpsim

sys.path.insert(0, str(ROOT / "dashboards"))
import render

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.timeout(240)]

HOST = "wbhost"
TOKEN = "Zr8tQ2wLx5vN9cK3mB7pH4dashboards"
RECORDING = "apc_ap8641"
LOAD_SECONDS = 70  # > 1 min, so the rules' 1m windows fill
STEP = 2
SCRAPE = 1
DASHBOARD_DIR = ROOT / "dashboards" / "json"
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# (dashboard file stem, panel title, refId): why this query may legitimately return nothing here.
ALLOWED_EMPTY: dict[tuple[str, str, str], str] = {
    ("disks", "Firing disk alerts", "A"): (
        "no disk is failing in this test, so no WattbitDisk* alert fires (and the alert rules "
        "may not exist yet): an empty ALERTS is the correct answer"
    ),
    ("streaming", "NIC utilisation of link speed", "A"): (
        "no interface on this machine reports a link speed: virtio-net's and veth's "
        "/sys/class/net/IF/speed read -1, so wattbit_nic_link_speed_bytes_per_second is absent "
        "(docs/exporters/nic.md); on real NICs it is there"
    ),
    ("disks", "Skipped tracepoint events", "A"): (
        "wattbit_blockio_bpf_missed_events_total has a series only for events the kernel "
        "actually skipped; with no other BPF tracing program running there may be none"
    ),
    ("power", "Invalid values and poll failures", "A"): (
        "the reason-labelled counters appear only once a value was refused; the AP8641 "
        "recording may have none"
    ),
    ("power", "Invalid values and poll failures", "B"): (
        "poll failures appear only once a poll failed; snmpsim answers every poll"
    ),
}

RELAY = r"""
import socket, sys, threading
listener = socket.socket(fileno=int(sys.argv[1]))
target = ("127.0.0.1", int(sys.argv[2]))
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
while True:
    client, _ = listener.accept()
    try:
        upstream = socket.create_connection(target, timeout=5)
    except OSError:
        client.close()
        continue
    upstream.settimeout(None)
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""


# ---- helpers ----------------------------------------------------------------------------------


def api(port: int, path: str, params: dict[str, Any]) -> Any:
    url = f"http://127.0.0.1:{port}{path}?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=30) as resp:
        data = json.load(resp)
    assert data["status"] == "success", data
    return data["data"]


@contextlib.contextmanager
def process(cmd: list[str], log: Path, **kw: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess, terminated (then killed) on exit."""
    fh = log.open("wb")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        fh.close()


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[Agent]:
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.stop()


def prometheus_config(agent_port: int, relay_port: int, collector_port: int, node_port: int) -> str:
    """deploy/prometheus/prometheus.yml with the test's targets; 1 s intervals."""
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    cfg["global"].update(
        scrape_interval=f"{SCRAPE}s", scrape_timeout=f"{SCRAPE}s", evaluation_interval=f"{SCRAPE}s"
    )
    cfg["rule_files"] = [str(ROOT / "alerts" / "*.yml")]
    cfg.pop("alerting", None)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    jobs["wattbit-agent"]["static_configs"] = [
        {
            "targets": [f"127.0.0.1:{agent_port}", f"127.0.0.1:{relay_port}"],
            "labels": {"host": HOST},
        }
    ]
    jobs["wattbit-collector"]["static_configs"] = [{"targets": [f"127.0.0.1:{collector_port}"]}]
    jobs["node"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{node_port}"], "labels": {"host": HOST}}
    ]
    return yaml.safe_dump(cfg)


def collector_config(state: Path, snmp_endpoint: str) -> str:
    return f"""\
state_dir: {state}
interval: 1s
runs:
  token: {TOKEN}
auths:
  sim:
    version: 2c
    community: {RECORDING}
pdus:
  - name: rack1-a
    address: {snmp_endpoint}
    auth: sim
    timeout: 3s
    outlets:
      - index: [1, 2]
        host: {HOST}
        component: server
      - index: [3, 4]
        component: switch
"""


def run_api(port: int, method: str, path: str, body: object = None) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


# ---- expanding and running the dashboards --------------------------------------------------------

LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)


def regex_value(values: list[str]) -> str:
    """A multi-value variable in a regex matcher, as Grafana formats it."""
    escaped = [re.sub(r"[\\^$.|?*+()\[\]{}]", lambda m: "\\\\" + m.group(0), v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, variables: dict[str, str], start: float, end: float) -> str:
    builtins = {
        "__rate_interval": f"{max(STEP + SCRAPE, 4 * SCRAPE)}s",
        "__interval": f"{STEP}s",
        "__range": f"{int(end - start)}s",
    }
    # longest names first, so $__rate_interval is not read as $__range... or $host as $h
    for name, value in sorted({**builtins, **variables}.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in expr, f"unexpanded variable in {expr}"
    return expr


def expand_variables(doc: dict[str, Any], port: int, start: float, end: float) -> dict[str, Any]:
    variables: dict[str, str] = {}
    values: dict[str, list[str]] = {}
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = LABEL_VALUES.match(query)
        assert m, f"{doc['uid']}: variable {var['name']} is not label_values(): {query}"
        selector = substitute(m.group(1), variables, start, end)
        got = api(
            port,
            f"/api/v1/label/{m.group(2)}/values",
            {"match[]": selector, "start": start, "end": end},
        )
        assert got, f"{doc['uid']}: variable {var['name']} ({query}) has no values"
        values[var["name"]] = sorted(got)
        variables[var["name"]] = regex_value(sorted(got))
    return {"regex": variables, "values": values}


def run_dashboard(doc: dict[str, Any], port: int, start: float, end: float) -> dict[str, Any]:
    expanded = expand_variables(doc, port, start, end)
    out: dict[str, Any] = {
        "uid": doc["uid"],
        "title": doc["title"],
        "start": start,
        "end": end,
        "step": STEP,
        "variables": expanded["values"],
        "annotations": [],
        "panels": [],
    }
    for ann in doc["annotations"]["list"]:
        if "expr" not in ann:
            continue
        expr = substitute(ann["expr"], expanded["regex"], start, end)
        res = api(
            port, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": STEP}
        )["result"]
        out["annotations"].append({"name": ann["name"], "expr": expr, "result": res})
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        entry = {
            "title": panel["title"],
            "type": panel["type"],
            "unit": panel.get("fieldConfig", {}).get("defaults", {}).get("unit"),
            "queries": [],
        }
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], expanded["regex"], start, end)
            if target.get("instant"):
                data = api(port, "/api/v1/query", {"query": expr, "time": end})
            else:
                data = api(
                    port,
                    "/api/v1/query_range",
                    {"query": expr, "start": start, "end": end, "step": STEP},
                )
            entry["queries"].append(
                {
                    "refId": target["refId"],
                    "expr": target["expr"],
                    "expanded": expr,
                    "instant": bool(target.get("instant")),
                    "format": target.get("format", "time_series"),
                    "legend": target.get("legendFormat", ""),
                    "resultType": data["resultType"],
                    "result": data["result"],
                }
            )
        out["panels"].append(entry)
    return out


# ---- the site ------------------------------------------------------------


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require(is_root(), "needs root (loop devices, namespaces, BPF)")
    require(bcc_importable(), "bcc (Debian python3-bpfcc) is not importable")
    for cmd in ("prometheus", "prometheus-node-exporter", "iperf3", "fio", "losetup", "ip"):
        require(have(cmd), f"{cmd} is not installed")
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require((RECORDINGS / f"{RECORDING}.snmprec").exists(), f"no recording {RECORDING}")
    tmp = tmp_path_factory.mktemp("dashboards")
    with contextlib.ExitStack() as stack:
        disks = stack.enter_context(loop_disks(2, size_mb=256))
        pair = stack.enter_context(veth_pair())
        sim = stack.enter_context(SnmpSim({RECORDING: RECORDINGS / f"{RECORDING}.snmprec"}))
        (tmp / "agent").mkdir()
        (tmp / "agent-ns").mkdir()
        (tmp / "collector").mkdir()
        agent = stack.enter_context(running(Agent("blockio:\n  backend: bcc\n", tmp / "agent")))
        ns_agent = stack.enter_context(
            running(
                Agent(
                    "blockio:\n  enabled: false\nnic:\n  exclude: ''\n",
                    tmp / "agent-ns",
                    netns=pair.ns_a,
                )
            )
        )
        # the relay: a listening socket of the root namespace, served from inside namespace A
        listener = socket.socket()
        stack.callback(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        relay_port = listener.getsockname()[1]
        stack.enter_context(
            process(
                [
                    "ip",
                    "netns",
                    "exec",
                    pair.ns_a,
                    sys.executable,
                    "-c",
                    RELAY,
                    str(listener.fileno()),
                    str(ns_agent.port),
                ],
                tmp / "relay.log",
                pass_fds=(listener.fileno(),),
            )
        )
        node_port = free_port()
        stack.enter_context(
            process(
                [
                    "prometheus-node-exporter",
                    f"--web.listen-address=127.0.0.1:{node_port}",
                    "--collector.disable-defaults",
                    "--collector.cpu",
                ],
                tmp / "node_exporter.log",
            )
        )
        collector = stack.enter_context(
            running(Collector(collector_config(tmp / "state", sim.endpoint), tmp / "collector"))
        )
        prom_port = free_port()
        (tmp / "prometheus.yml").write_text(
            prometheus_config(agent.port, relay_port, collector.port, node_port)
        )
        prom = stack.enter_context(
            process(
                [
                    "prometheus",
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                tmp / "prometheus.log",
            )
        )
        try:
            wait_for(
                lambda: len(api(prom_port, "/api/v1/query", {"query": "up == 1"})["result"]) == 4,
                60,
                "all four targets up",
            )
            start = time.time()
            run_api(
                collector.port,
                "POST",
                "/api/v1/runs",
                {"name": "dash-demo", "labels": {"setup": "loop2-veth"}},
            )
            stack.enter_context(
                process(
                    ["ip", "netns", "exec", pair.ns_b, "iperf3", "-s", "-1", "-B", pair.addr_b],
                    tmp / "iperf3-server.log",
                )
            )
            time.sleep(0.5)
            iperf = stack.enter_context(
                process(
                    [
                        "ip",
                        "netns",
                        "exec",
                        pair.ns_a,
                        "iperf3",
                        "-c",
                        pair.addr_b,
                        "-t",
                        str(LOAD_SECONDS),
                        "-b",
                        "2G",
                    ],
                    tmp / "iperf3-client.log",
                )
            )
            fio_cmd = [
                "fio",
                "--ioengine=libaio",
                "--direct=1",
                "--time_based",
                f"--runtime={LOAD_SECONDS}",
                "--bs=4k",
                "--rw=randrw",
            ]
            for i, (disk, iops) in enumerate(zip(disks, (3000, 600), strict=True)):
                fio_cmd += [
                    f"--name=d{i}",
                    f"--filename={disk.device}",
                    "--iodepth=8",
                    f"--rate_iops={iops}",
                ]
            fio = stack.enter_context(process(fio_cmd, tmp / "fio.log"))
            # writes to the root disk, so a disk on a real controller has traffic too
            with open(tmp / "vda-writes.bin", "wb") as fh:
                for _ in range(8):
                    fh.write(os.urandom(1 << 20))
                    fh.flush()
                    os.fsync(fh.fileno())
            fio.wait(timeout=LOAD_SECONDS + 60)
            iperf.wait(timeout=60)
            assert fio.returncode == 0, (tmp / "fio.log").read_text()[-2000:]
            assert iperf.returncode == 0, (tmp / "iperf3-client.log").read_text()[-2000:]
            run_api(collector.port, "POST", "/api/v1/runs/dash-demo/stop")
            time.sleep(3)  # the stop is scraped and the last rule evaluation done
            end = time.time()
            out = {}
            for path in sorted(DASHBOARD_DIR.glob("*.json")):
                doc = json.loads(path.read_text())
                out[path.stem] = run_dashboard(doc, prom_port, start, end)
            out["_meta"] = {
                "load_seconds": LOAD_SECONDS,
                "host": HOST,
                "recording": RECORDING,
                "disks": [d.name for d in disks],
                "veth": pair.if_a,
            }
            assert prom.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
            return out
        except BaseException:
            for name in (
                "prometheus.log",
                "agent/agent.log",
                "agent-ns/agent.log",
                "collector/collector.log",
                "relay.log",
            ):
                with contextlib.suppress(OSError):
                    print(f"--- {name}\n" + (tmp / name).read_text()[-3000:])
            raise


def test_every_panel_query_returns_data(results: dict[str, Any], tmp_path: Path) -> None:
    save = os.environ.get("WATTBIT_DASHBOARD_RESULTS")
    if save:
        Path(save).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    empty, allowed_seen = [], []
    counted = 0
    for stem, dash in results.items():
        if stem.startswith("_"):
            continue
        for ann in dash["annotations"]:
            assert ann["result"], f"{stem}: annotation {ann['name']} returned nothing"
        for panel in dash["panels"]:
            for query in panel["queries"]:
                counted += 1
                key = (stem, panel["title"], query["refId"])
                if query["result"]:
                    continue
                if key in ALLOWED_EMPTY:
                    allowed_seen.append(key)
                else:
                    empty.append(f"{key}: {query['expanded']}")
    assert counted >= 40, counted
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
    # the allow-list holds only real panels
    titles = {
        (s, p["title"], q["refId"])
        for s, d in results.items()
        if not s.startswith("_")
        for p in d["panels"]
        for q in p["queries"]
    }
    assert set(ALLOWED_EMPTY) <= titles, set(ALLOWED_EMPTY) - titles
    print(f"{counted} queries, empty but allowed: {allowed_seen}")


def test_the_figures_are_the_run_we_made(results: dict[str, Any]) -> None:
    """Spot checks that the data is this run's: the veth stream, the loop disks, the run."""

    def series(stem: str, title: str, ref: str = "A") -> list[dict[str, Any]]:
        panel = next(p for p in results[stem]["panels"] if p["title"] == title)
        return next(q for q in panel["queries"] if q["refId"] == ref)["result"]

    veth = results["_meta"]["veth"]
    tx = [
        s
        for s in series("network", "Throughput per interface")
        if s["metric"].get("interface") == veth and s["metric"]["direction"] == "tx"
    ]
    assert tx and max(float(v) for _, v in tx[0]["values"]) > 0.5e9  # iperf3 at 2 Gbit/s
    devices = {s["metric"]["device"] for s in series("disks", "IOPS per device")}
    assert set(results["_meta"]["disks"]) <= devices
    assert results["streaming"]["variables"]["run"] == ["dash-demo"]
    assert results["streaming"]["variables"]["host"] == [HOST]
    jpg = series("streaming", "Joules per gigabit")
    assert jpg and all(float(v) > 0 for s in jpg for _, v in s["values"])


def test_render_draws_one_png_per_dashboard(results: dict[str, Any], tmp_path: Path) -> None:
    data = tmp_path / "results.json"
    data.write_text(json.dumps(results))
    pngs = render.render_file(data, tmp_path / "png")
    assert sorted(p.name for p in pngs) == sorted(
        f"{s}.png" for s in results if not s.startswith("_")
    )
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    if shutil.which("true") and os.environ.get("WATTBIT_DASHBOARD_RESULTS"):
        render.render_file(
            Path(os.environ["WATTBIT_DASHBOARD_RESULTS"]),
            Path(os.environ["WATTBIT_DASHBOARD_RESULTS"]).parent,
        )
