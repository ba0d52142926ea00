"""Every panel query of every dashboard, run against a real Prometheus holding a demo's data,
and the story they tell: watts follow Gbit/s.

The parts are the demo's (collector/demo, `make demo`), all real and all on this machine (root
needed):

* four loop disks over files of random bytes in tmpfs, and the demo's stream: a sender
  reading them with O_DIRECT and writing to TCP through a veth pair into a fresh network
  namespace, where the demo's receiver discards it (`python -m collector.demo send|receive`);
* the demo's SIMULATED PDU (`python -m collector.demo.pdusim`: a real SNMP agent speaking
  APC's rPDU2 MIB whose outlet watts follow the load), with the demo's model except its CPU
  term (`--cpu-w 0`): the watts follow the busy time of the test's loop disks and the Gbit/s
  of its veth and nothing else, so no other process on the machine can move them; polled by a
  `wattbit collector` every second, outlets 1-2 mapped to the host and component `server`,
  outlet 3 to component `switch`; a run started and stopped through the collector's run API
  (docs/runs.md);
* one `wattbit agent` (eBPF) in the root namespace watching the test's loop disks, the
  machine's own disks (one of which the test writes to, so that a disk on a real controller
  has traffic) and NICs, and the veth's root end; nothing else (a demo running beside the
  test has its loop disks and its veth in the root namespace too);
* node_exporter (Debian `prometheus-node-exporter`, cpu collector only) on 127.0.0.1;
* Prometheus scraping all of it every second with deploy/prometheus/prometheus.yml's jobs
  (targets replaced, the `host` label set explicitly on the agent and node targets) and the
  rules of alerts/*.yml.

The load has the demo's large steps: IDLE_S seconds idle, FULL_S seconds of the full stream,
IDLE_S idle again, all inside the run. Then every dashboard's template variables are
expanded with the values Prometheus holds and every panel query (and the run annotation) is
run over the window, by dashboards/queries.py (its docstring has the substitution rules; here
the step is 2 s and the scrape interval 1 s, so `$__rate_interval` is 4 s).

Assertions:

* every query returns at least one series (a series of zeros counts), except the allow-list
  ALLOWED_EMPTY, each entry with its reason;
* the story: on the Wall, the site's Gbit/s and watts both change over the window (idle
  against a stream of at least 0.05 Gbit/s: the stream runs at `nice 15`, and a loaded
  machine gave it 0.35 Gbit/s where a quiet one gives several), and their Pearson correlation
  over the window's query_range samples is above 0.5. This cannot fail by chance: the stream
  is on or off, not a little more or less, and the watts are a function of the stream alone
  (9.8 W per Gbit/s of the veth, 6 W per busy loop disk, whole watts per outlet), so the
  points lie in two
  clusters, idle and full, along a rising line; only the few samples at the two steps lie
  between them (the PDU's watts trail the traffic rate by a poll or two). The fitted line
  rises, J/Gbit exists during the stream, and the energy in the range lies between the least
  and the most watts times the range.

The results are saved as JSON; `dashboards/render.py` draws them (one PNG per dashboard).
With WATTBIT_DASHBOARD_RESULTS=PATH the JSON is also written to PATH. The pictures in
docs/dashboards/ come from `make demo` itself (docs/dashboards.md says how).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import statistics
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.demo.loopdisks import loop_disks
from exporters.blockio.core.backend import OBJECT as CORE_OBJECT
from tests.support.env import ROOT, require
from tests.support.realparts import (
    Agent,
    Collector,
    free_port,
    have,
    is_root,
    process,
    running,
    veth_into_namespace,
    wait_for,
)

sys.path.insert(0, str(ROOT / "dashboards"))
import queries
import render

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.timeout(300)]

HOST = "wbhost"
RUN = "dash-demo"
TOKEN = "Zr8tQ2wLx5vN9cK3mB7pH4dashboards"
IDLE_S = 20  # each idle phase: 10 query steps, 5 rate windows
FULL_S = 30
STEP = 2
SCRAPE = 1
DISKS = 4
STREAM_PORT = 5201
NICE = ("nice", "-n", "15")  # as the demo: the stream leaves the scrapes their CPU
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# (dashboard file stem, panel title, refId): why this query may legitimately return nothing here.
ALLOWED_EMPTY: dict[tuple[str, str, str], str] = {
    ("power", "BMC against PDU", "A"): (
        "the demo's hosts have PDU outlets and no BMC: nothing to compare (the rule is checked "
        "with a BMC in tests/integration/test_power_sources_real.py)"
    ),
    ("power", "RAPL share of host watts", "A"): (
        "this VM has no RAPL (no /sys/class/powercap): the agent exports no RAPL energy "
        "(tests/integration/test_power_sources_real.py checks the share)"
    ),
    ("disks", "Firing disk alerts", "A"): (
        "no disk is failing in this test, so no WattbitDisk* alert fires: an empty ALERTS is "
        "the correct answer"
    ),
    ("streaming", "NIC utilisation of link speed", "A"): (
        "interfaces whose driver reports no link speed (virtio-net reads -1 in "
        "/sys/class/net/IF/speed) have no wattbit_nic_link_speed_bytes_per_second "
        "(docs/exporters/nic.md); on real NICs it is there"
    ),
    ("disks", "Skipped tracepoint events", "A"): (
        "wattbit_blockio_bpf_missed_events_total has a series only for events the kernel "
        "actually skipped; with no other BPF tracing program running there may be none"
    ),
    ("power", "Invalid values and poll failures", "A"): (
        "the reason-labelled counters appear only once a value was refused; the simulated "
        "PDU serves none"
    ),
    ("power", "Invalid values and poll failures", "B"): (
        "poll failures appear only once a poll failed; the simulated PDU answers every poll"
    ),
}


# ---- helpers ----------------------------------------------------------------------------------


def physical(kind: str) -> list[str]:
    """This machine's own disks (kind "block") or NICs ("net"): those with a device."""
    base = Path("/sys/class") / kind
    return sorted(d.name for d in base.iterdir() if (d / "device").exists())


def agent_config(loops: list[str], veth: str) -> str:
    """The test's loop disks and veth, and the machine's own disks and NICs: nothing else.

    Not the loop devices, veths or other interfaces of whatever else runs on the machine (a
    demo's stream would be counted in the site's Gbit/s without moving the test's watts).
    """
    disks = "|".join(re.escape(n) for n in [*loops, *physical("block")])
    nics = "|".join(re.escape(n) for n in [veth, *physical("net")])
    return (
        f"blockio:\n  backend: core\n  exclude: '^(?!({disks})$)'\n"
        f"nic:\n  exclude: '^(?!({nics})$)'\n"
    )


def prometheus_config(agent_port: int, collector_port: int, node_port: int) -> str:
    """deploy/prometheus/prometheus.yml with the test's targets; 1 s intervals."""
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    cfg["global"].update(
        scrape_interval=f"{SCRAPE}s", scrape_timeout=f"{SCRAPE}s", evaluation_interval=f"{SCRAPE}s"
    )
    cfg["rule_files"] = [str(ROOT / "alerts" / "*.yml")]
    cfg.pop("alerting", None)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    jobs["wattbit-agent"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{agent_port}"], "labels": {"host": HOST}}
    ]
    jobs["wattbit-collector"]["static_configs"] = [{"targets": [f"127.0.0.1:{collector_port}"]}]
    jobs["node"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{node_port}"], "labels": {"host": HOST}}
    ]
    return yaml.safe_dump(cfg)


def collector_config(state: Path, pdu_port: int, community: Path) -> str:
    return f"""\
state_dir: {state}
interval: 1s
runs:
  token: {TOKEN}
auths:
  sim:
    version: 2c
    community_file: {community}
pdus:
  - name: demo-pdu-simulated
    address: 127.0.0.1:{pdu_port}
    auth: sim
    profile: apc_rpdu2
    timeout: 3s
    outlets:
      - index: [1, 2]
        host: {HOST}
        component: server
      - index: 3
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


def panel(results: dict[str, Any], stem: str, title: str) -> dict[str, Any]:
    return next(p for p in results[stem]["panels"] if p["title"] == title)


def values(results: dict[str, Any], stem: str, title: str, ref: str = "A") -> dict[float, float]:
    """{time: value} of the one series of a panel's range query."""
    query = next(q for q in panel(results, stem, title)["queries"] if q["refId"] == ref)
    assert len(query["result"]) == 1, (stem, title, ref, query["result"])
    return {float(t): float(v) for t, v in query["result"][0]["values"]}


# ---- the site ------------------------------------------------------------


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require(is_root(), "needs root (loop devices, namespaces, BPF)")
    require(CORE_OBJECT.exists(), f"{CORE_OBJECT} is not built (scripts/build-bpf.sh)")
    for cmd in ("prometheus", "prometheus-node-exporter", "losetup", "ip", "nice"):
        require(have(cmd), f"{cmd} is not installed")
    tmp = tmp_path_factory.mktemp("dashboards")
    py = sys.executable
    with contextlib.ExitStack() as stack:
        disks = stack.enter_context(loop_disks(DISKS, 128, nomerges=False, fill=True))
        # The demo's layout (a veth from the root namespace into another) under names of
        # this test's own, so that it never meets a demo's.
        addr_ns = "169.254.78.2"
        ns, if_root = stack.enter_context(veth_into_namespace("wbdash", "169.254.78.1", addr_ns))
        community = tmp / "community"
        community.write_text("dashdemo\n")
        community.chmod(0o600)
        pdu_port = free_port(socket.SOCK_DGRAM)
        names = "|".join(d.name for d in disks)
        stack.enter_context(
            process(
                [py, "-m", "collector.demo.pdusim", "--listen", f"127.0.0.1:{pdu_port}",
                 "--community-file", str(community), "--interfaces", f"^{if_root}$",
                 "--disks", f"^({names})$", "--cpu-w", "0"],
                tmp / "pdusim.log",
            )
        )  # fmt: skip
        (tmp / "agent").mkdir()
        (tmp / "collector").mkdir()
        agent = stack.enter_context(
            running(Agent(agent_config([d.name for d in disks], if_root), tmp / "agent"))
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
            running(
                Collector(collector_config(tmp / "state", pdu_port, community), tmp / "collector")
            )
        )
        prom_port = free_port()
        url = f"http://127.0.0.1:{prom_port}"
        (tmp / "prometheus.yml").write_text(
            prometheus_config(agent.port, collector.port, node_port)
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
        stack.enter_context(
            process(
                ["ip", "netns", "exec", ns, *NICE, py, "-m", "collector.demo", "receive",
                 addr_ns, str(STREAM_PORT)],
                tmp / "receiver.log",
            )
        )  # fmt: skip
        try:

            def ready() -> bool:
                up = queries.api(url, "/api/v1/query", {"query": "up == 1"})["result"]
                watts = queries.api(url, "/api/v1/query", {"query": "site:wattbit_power_watts:sum"})
                return len(up) == 3 and bool(watts["result"])

            wait_for(ready, 90, "all three targets up and the PDU's watts recorded")
            start = time.time()
            run_api(
                collector.port, "POST", "/api/v1/runs", {"name": RUN, "labels": {"setup": "loop4"}}
            )
            time.sleep(IDLE_S)
            sender = stack.enter_context(
                process(
                    # the demo's sender streams until a time.monotonic() instant
                    [*NICE, py, "-m", "collector.demo", "send", addr_ns, str(STREAM_PORT),
                     str(time.monotonic() + FULL_S), *(d.device for d in disks)],
                    tmp / "sender.log",
                )
            )  # fmt: skip
            # writes to the root disk, so a disk on a real controller has traffic too
            with open(tmp / "root-disk-writes.bin", "wb") as fh:
                for _ in range(8):
                    fh.write(os.urandom(1 << 20))
                    fh.flush()
                    os.fsync(fh.fileno())
            sender.wait(timeout=FULL_S + 60)
            assert sender.returncode == 0, (tmp / "sender.log").read_text()[-2000:]
            streamed = time.time()  # the full stream's end: what a live Wall showed then
            time.sleep(IDLE_S)
            run_api(collector.port, "POST", f"/api/v1/runs/{RUN}/stop")
            _settled(url, time.time())  # the stop scraped, and every rule evaluated after it
            end = time.time()
            out = queries.run_all(url, start, end, STEP, SCRAPE)
            _instant_while_streaming(out, url, streamed)
            out["_meta"] = {
                "idle_seconds": IDLE_S,
                "full_seconds": FULL_S,
                "host": HOST,
                "disks": [d.name for d in disks],
                "veth": if_root,
            }
            assert prom.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
            return out
        except BaseException:
            for name in ("prometheus.log", "agent/agent.log", "collector/collector.log",
                         "pdusim.log", "sender.log", "receiver.log"):  # fmt: skip
                with contextlib.suppress(OSError):
                    print(f"--- {name}\n" + (tmp / name).read_text()[-3000:])
            raise


def _rfc3339(text: str) -> float:
    """A Prometheus API time ("2026-11-29T11:22:00.123456789Z") as Unix seconds."""
    return datetime.fromisoformat(text).timestamp()  # 3.11: "Z" and nanoseconds (truncated)


def _settled(url: str, after: float) -> None:
    """Wait until the collector was scraped after `after`, then every rule group evaluated
    after that scrape (what a fixed 3 s pause used to stand for)."""

    def collector_scraped() -> float | None:
        targets = queries.api(url, "/api/v1/targets", {"state": "active"})["activeTargets"]
        times = [
            _rfc3339(t["lastScrape"])
            for t in targets
            if t["labels"].get("job") == "wattbit-collector"
        ]
        return min(times) if times and min(times) > after else None

    scraped = wait_for(collector_scraped, 60, "a scrape of the collector after the run's stop")

    def evaluated() -> bool:
        groups = queries.api(url, "/api/v1/rules", {})["groups"]
        return bool(groups) and all(_rfc3339(g["lastEvaluation"]) > scraped for g in groups)

    wait_for(evaluated, 60, "every rule group evaluated after the run's stop was scraped")


def _instant_while_streaming(out: dict[str, Any], url: str, streamed: float) -> None:
    """An instant panel empty at the window's end is asked again at the stream's end.

    Instant panels answer for one moment (Grafana's "now"). The Wall's "what limits it"
    reads 20-second rules on purpose (issue 31: a phase's limiter shows within seconds), so
    IDLE_S idle seconds after the stream it is rightly empty: nothing moved data. At the
    moment the stream ended it must have an answer; `at` records which moment answered.
    """
    for stem, dash in out.items():
        if stem.startswith("_"):
            continue
        for p in dash["panels"]:
            for q in p["queries"]:
                if q["instant"] and not q["result"]:
                    got = queries.api(
                        url, "/api/v1/query", {"query": q["expanded"], "time": streamed}
                    )
                    q["result"], q["at"] = got["result"], "stream end"


def test_every_panel_query_returns_data(results: dict[str, Any]) -> None:
    save = os.environ.get("WATTBIT_DASHBOARD_RESULTS")
    if save:
        Path(save).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    empty, allowed_seen = [], []
    counted = 0
    for stem, dash in results.items():
        if stem.startswith("_"):
            continue
        for name, vals in dash["variables"].items():
            assert vals, f"{stem}: variable {name} has no values"
        for ann in dash["annotations"]:
            assert ann["result"], f"{stem}: annotation {ann['name']} returned nothing"
        for p in dash["panels"]:
            for query in p["queries"]:
                counted += 1
                key = (stem, p["title"], query["refId"])
                if query["result"]:
                    continue
                if key in ALLOWED_EMPTY:
                    allowed_seen.append(key)
                else:
                    empty.append(f"{key}: {query['expanded']}")
    assert counted >= 50, counted
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
    veth = results["_meta"]["veth"]
    tx = [
        s
        for s in panel(results, "network", "Throughput per interface")["queries"][0]["result"]
        if s["metric"].get("interface") == veth and s["metric"]["direction"] == "tx"
    ]
    assert tx and max(float(v) for _, v in tx[0]["values"]) > 0.05e9
    devices = {
        s["metric"]["device"]
        for s in panel(results, "disks", "IOPS per device")["queries"][0]["result"]
    }
    assert set(results["_meta"]["disks"]) <= devices
    for stem in ("streaming", "wall"):
        assert results[stem]["variables"]["run"] == [RUN]
        assert results[stem]["variables"]["host"] == [HOST]


def test_the_wall_tells_the_story(results: dict[str, Any]) -> None:
    """Watts and Gbit/s both move, together: correlation above 0.5 over the window."""
    title = "Watts against Gbit/s (line: the run's fit)"
    gbps = values(results, "wall", title, "A")
    watts = values(results, "wall", title, "B")
    both = sorted(set(gbps) & set(watts))
    assert len(both) >= (2 * IDLE_S + FULL_S) // STEP * 3 // 4, len(both)
    x = [gbps[t] / 1e9 for t in both]
    y = [watts[t] for t in both]
    # idle and full: the stream is on or off
    assert max(x) > 0.05 and min(x) < max(x) / 10, (min(x), max(x))
    assert max(y) - min(y) >= 2, (min(y), max(y))
    r = statistics.correlation(x, y)
    print(f"Gbit/s {min(x):.3f}..{max(x):.3f}, watts {min(y):.0f}..{max(y):.0f}, r = {r:.3f}")
    assert r > 0.5, f"watts and Gbit/s correlate by {r:.3f} only"
    # the run's fitted line rises (watts per Gbit/s > 0)
    fit = values(results, "wall", title, "C")
    pts = sorted((gbps[t] / 1e9, fit[t]) for t in fit if t in gbps)
    assert pts[-1][0] - pts[0][0] > 0.05 and pts[-1][1] > pts[0][1], pts[:3] + pts[-3:]
    # the big numbers vary over the window too, and J/Gbit exists during the stream
    for big in ("Gbit/s", "Site watts", "Disks busy"):
        v = values(results, "wall", big).values()
        assert max(v) > min(v), big
    jpg = values(results, "wall", "J/Gbit")
    assert jpg and all(v > 0 for v in jpg.values())
    # energy in the range: between the least and the most watts times the range
    energy = panel(results, "streaming", "Energy in the time range (zoom to a run)")
    site = next(q for q in energy["queries"] if q["refId"] == "B")["result"]
    joules = float(site[0]["value"][1])
    seconds = int(results["streaming"]["end"] - results["streaming"]["start"])
    assert min(y) * seconds * 0.95 <= joules <= max(y) * seconds * 1.05, (joules, min(y), max(y))


def test_render_draws_one_png_per_dashboard(results: dict[str, Any], tmp_path: Path) -> None:
    data = tmp_path / "results.json"
    data.write_text(json.dumps(results))
    pngs = render.render_file(data, tmp_path / "png")
    assert sorted(p.name for p in pngs) == sorted(
        f"{s}.png" for s in results if not s.startswith("_")
    )
    assert "wall.png" in {p.name for p in pngs}
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
