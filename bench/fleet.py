"""A site's fleet on one machine: N hosts and N/5 PDUs scraped every 15 s by Prometheus, and by
vmagent into VictoriaMetrics (rules by vmalert). What the store costs per series and per host.

Run: .venv/bin/python bench/fleet.py [--hosts 50,100,200] [--json FILE]   (~25 min)
     .venv/bin/python bench/fleet.py --quick                            (smoke run, < 2 min)

Everything runs on 127.0.0.1, in a temporary directory, each process in a session of its own
with a parent-death signal, and is stopped on the way out (Ctrl-C included). The measuring runs
hold /tmp/wattbit-bench.lock (others benchmark on this machine too; `flock` it for yours).

* **Hosts: SIMULATED, one recorded exposition served N times.** At start the bench renders a
  48-disk host's /metrics through the agent's own code path — collector/agent/main.py's
  registry (the exporters' health, the process collector) and the agent's renderer over
  tests/support/synthetic.py's synthetic blockio (48 disks x 4 ops, every histogram filled) and nic
  (8 NICs x 16 queues, 64 CPUs) content — so the content follows the current code (bucket
  layouts, labels). A simulator process (`--serve`, one asyncio loop) serves it on one port
  per host with every counter, histogram bucket and sum advancing each second (integers by
  integers, buckets staying cumulative): nearly every series changes every scrape, a busy
  fleet and the worst case for compression. Counters of trouble (errors, drops, retransmits,
  timeouts) are 0 and still: a healthy fleet, whose alerts group evaluates rather than fires
  (the phase records which alerts were pending or firing). All hosts serve the same values;
  the `host` label comes from the scrape configuration (`labels: {host: moverNNN}`, as in
  deploy/prometheus).
* **PDUs: SIMULATED, polled by a real collector.** One PDU per --hosts-per-pdu (5) hosts, each
  a UDP port of the same simulator answering from the demo's APC AP8641 recording
  (collector/pdu/responder.py); a real `wattbit collector` polls them every 15 s (profile
  named), its outlets 1-10 mapped two by two to the PDU's five hosts, so the rules' joins of
  watts and traffic have data. It also holds the run registry: each phase is a run, and
  `wattbit report` reads it back from the store.
* **Stores**, one at a time, each from an empty data directory, the order alternating from one
  N to the next: Prometheus 2.42 (scrape 15 s, rules alerts/wattbit-recording.yml and
  alerts/wattbit-alerts.yml evaluated every 15 s); VictoriaMetrics 1.79 single node fed by
  vmagent (the same scrape configuration) with vmalert evaluating the same two files against
  it and writing the recorded series back to it (`-search.maxUniqueTimeseries` raised so that
  rules and the report may touch every series of 200 hosts).

Per phase: the targets all up, a warm-up (--warmup), then a measured window (--measure) with
RSS sampled every 5 s (the window's peak is reported) and CPU from /proc/PID/stat over the
window (cores = CPU seconds / wall seconds), per process; samples ingested per second from the
store's own counter (Prometheus `prometheus_tsdb_head_samples_appended_total`; VictoriaMetrics
`vm_rows_inserted_total`; both include recorded rule results); rule evaluation time per group
(Prometheus `prometheus_rule_group_last_duration_seconds` sampled, median, and its five
costliest rules; vmalert `vmalert_iteration_duration_seconds` sum / count over the window).
The phase's run (from the warm-up's start to 30 s before the window's end, as VictoriaMetrics
shows samples 30 s late by default) then goes through `wattbit report` against the store,
--reports times (default 1: a report over 200 hosts takes ~1.5 min): the median wall time of
the command line, and the report's own analysis time. Series are the store's
`sum(scrape_samples_scraped)`. Ingest "kept up" when every target was up and the ingest rate
is at least 90 % of series / interval; rules "kept up" when no evaluation was missed or failed.
Each phase also records the CPU the rest of the machine used meanwhile (other users' work).

At the end: per store, least-squares lines of RSS and CPU against series (and per host), and
the JSON (--json) with every figure. docs/scaling.md reads these numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    bench_lock,
    cpu_model,
    cpu_seconds,
    die_with_parent,
    in_turn,
    machine_busy_seconds,
    rss_bytes,
)
from collector.demo.procs import free_port, wait_for  # noqa: E402
from tests.support.synthetic import (  # noqa: E402
    RULES,
    TOKEN,
    Exposition,
    collector_yml,
    prometheus_yml,
    record_exposition,
    scrape_config,
    series_of,
)

RECORDING = ROOT / "deploy" / "demo" / "apc_ap8641.snmprec"
STORES = ("prometheus", "victoriametrics")
TOOLS = {
    "prometheus": ["prometheus"],
    "victoriametrics": ["victoria-metrics", "vmagent", "vmalert"],
}
SAMPLE_EVERY_S = 5.0
REPORT_GUARD_S = 30.0  # the run ends this long before the window: VictoriaMetrics' latencyOffset
KEPT_UP = 0.9


# --- the simulator (a child process: --serve SPEC) ------------------------------------------


async def _serve(spec: dict[str, Any]) -> None:
    from aiohttp import web

    from collector.pdu.responder import Responder
    from collector.pdu.snmprec import read_recording

    expo = Exposition(Path(spec["exposition"]).read_text())
    epoch = time.monotonic()
    served = {"scrapes": 0, "bytes": 0, "alerts_posts": 0}
    headers = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}

    async def metrics(_: web.Request) -> web.Response:
        body = expo.body(int(time.monotonic() - epoch))
        served["scrapes"] += 1
        served["bytes"] += len(body)
        return web.Response(body=body, headers=headers)

    async def alerts(_: web.Request) -> web.Response:
        served["alerts_posts"] += 1  # vmalert's notifier: an Alertmanager that accepts all
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", alerts)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host_ports = []
    for _ in range(spec["hosts"] + 1):  # the last one is the Alertmanager sink
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock, backlog=1024).start()
        host_ports.append(int(sock.getsockname()[1]))

    responder = Responder(read_recording(Path(spec["recording"])), "public", max_repetitions=64)
    loop = asyncio.get_running_loop()

    class Pdu(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

        def datagram_received(self, data: bytes, addr: Any) -> None:
            reply = responder.answer(data)
            if reply is not None:
                self.transport.sendto(reply, addr)

    pdu_ports = []
    for _ in range(spec["pdus"]):
        transport, _proto = await loop.create_datagram_endpoint(Pdu, local_addr=("127.0.0.1", 0))
        pdu_ports.append(int(transport.get_extra_info("sockname")[1]))

    ready = Path(spec["ready"])
    ready.with_suffix(".tmp").write_text(
        json.dumps({"hosts": host_ports[:-1], "sink": host_ports[-1], "pdus": pdu_ports})
    )
    ready.with_suffix(".tmp").rename(ready)  # whole, or not there
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    Path(spec["stats"]).write_text(json.dumps(served))
    await runner.cleanup()


# --- processes --------------------------------------------------------------------------------


class Procs:
    """The bench's children: a log each, stopped newest first."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        """Start cmd with its output in logdir/NAME.log."""
        with (self.logdir / f"{name}.log").open("ab") as log:
            p = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.procs[name] = p
        return p

    def alive(self, *names: str) -> Callable[[], None]:
        """A check for wait_for: raise with the log's tail when one of `names` has exited."""

        def check() -> None:
            for n in names:
                p = self.procs[n]
                if p.poll() is not None:
                    tail = (self.logdir / f"{n}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{n} exited {p.returncode}:\n{tail}")

        return check

    def stop(self, *names: str) -> None:
        """SIGTERM these (all: none given), newest first; SIGKILL after 30 s."""
        chosen = [n for n in reversed(self.procs) if not names or n in names]
        for n in chosen:
            if self.procs[n].poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.procs[n].terminate()
        for n in chosen:
            p = self.procs.pop(n)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def get(url: str, timeout: float = 10.0) -> bytes:
    """GET a URL's body."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def post(url: str, body: object | None = None) -> Any:
    """POST JSON with the run token; the decoded answer."""
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.M)


def scrape(url: str, timeout: float = 60.0) -> list[tuple[str, str, float]]:
    """(name, labels text, value) of every sample at a /metrics URL."""
    # A store at its limit answers its own /metrics slowly (vmalert took > 10 s at 200 hosts).
    text = get(url, timeout).decode()
    return [(m[1], m[2] or "", float(m[3])) for m in _SAMPLE.finditer(text)]


def total(samples: list[tuple[str, str, float]], name: str) -> float:
    """The sum of a metric over its label sets (NaN when absent)."""
    vals = [v for n, _, v in samples if n == name]
    return sum(vals) if vals else math.nan


def by_label(samples: list[tuple[str, str, float]], name: str, label: str) -> dict[str, float]:
    """{value of `label`: sample} of one metric."""
    out: dict[str, float] = {}
    for n, labels, v in samples:
        m = re.search(rf'{label}="([^"]*)"', labels) if n == name else None
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def query(base: str, expr: str, at: float) -> float:
    """An instant query's single value (NaN when empty) at unix time `at`."""
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    data = json.loads(get(f"{base}/api/v1/query?{q}", timeout=60))
    result = data["data"]["result"]
    return float(result[0]["value"][1]) if result else math.nan


def query_vector(base: str, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
    """An instant query's (labels, value) pairs at unix time `at`."""
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    data = json.loads(get(f"{base}/api/v1/query?{q}", timeout=60))
    return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]


# --- configuration ------------------------------------------------------------------------------


# --- one phase: a store scraping the fleet ------------------------------------------------------


@dataclass
class Store:
    """A running store: its query URL, the processes that are it, where their metrics are."""

    name: str
    query_url: str
    targets_url: str  # the scraper's /api/v1/targets
    pids: dict[str, int]
    metrics: dict[str, str]  # process name -> its /metrics URL
    data: list[Path] = field(default_factory=list)


def start_prometheus(
    procs: Procs, d: Path, ports: list[int], collector: int, interval: float
) -> Store:
    """Prometheus 2.42 with the rules, an empty TSDB in d."""
    (d / "prometheus.yml").write_text(prometheus_yml(ports, collector, interval))
    port = free_port()
    p = procs.start(
        "prometheus",
        ["prometheus", f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
         "--query.max-samples=200000000"],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(
        lambda: get(f"{url}/-/ready", 2), 60, "prometheus ready", alive=procs.alive("prometheus")
    )
    return Store("prometheus", url, f"{url}/api/v1/targets", {"prometheus": p.pid},
                 {"prometheus": f"{url}/metrics"}, [d / "tsdb"])  # fmt: skip


def start_victoriametrics(
    procs: Procs, d: Path, ports: list[int], collector: int, interval: float, sink: int
) -> Store:
    """VictoriaMetrics 1.79 single node, vmagent scraping into it, vmalert with the rules."""
    (d / "scrape.yml").write_text(
        f"global:\n  scrape_interval: {interval:g}s\nscrape_configs:\n"
        + scrape_config(ports, collector, interval)
    )
    vm, agent, alert = free_port(), free_port(), free_port()
    url = f"http://127.0.0.1:{vm}"
    v = procs.start(
        "victoria-metrics",
        ["victoria-metrics", f"-storageDataPath={d / 'vm'}", f"-httpListenAddr=127.0.0.1:{vm}",
         "-retentionPeriod=1d", "-search.maxUniqueTimeseries=5000000",
         "-search.maxSamplesPerQuery=2000000000"],
    )  # fmt: skip
    wait_for(lambda: get(f"{url}/health", 2), 60, "victoria-metrics ready",
             alive=procs.alive("victoria-metrics"))  # fmt: skip
    a = procs.start(
        "vmagent",
        ["vmagent", f"-promscrape.config={d / 'scrape.yml'}",
         f"-remoteWrite.url={url}/api/v1/write", f"-remoteWrite.tmpDataPath={d / 'vmagent'}",
         f"-httpListenAddr=127.0.0.1:{agent}"],
    )  # fmt: skip
    r = procs.start(
        "vmalert",
        ["vmalert", *(f"-rule={p}" for p in RULES), f"-datasource.url={url}",
         f"-remoteWrite.url={url}", f"-notifier.url=http://127.0.0.1:{sink}",
         f"-evaluationInterval={interval:g}s", f"-httpListenAddr=127.0.0.1:{alert}"],
    )  # fmt: skip
    for name, port in (("vmagent", agent), ("vmalert", alert)):
        wait_for(lambda port=port: get(f"http://127.0.0.1:{port}/health", 2), 60,  # type: ignore[misc]
                 f"{name} ready", alive=procs.alive(name))  # fmt: skip
    return Store(
        "victoriametrics", url, f"http://127.0.0.1:{agent}/api/v1/targets",
        {"victoria-metrics": v.pid, "vmagent": a.pid, "vmalert": r.pid},
        {"victoria-metrics": f"{url}/metrics", "vmagent": f"http://127.0.0.1:{agent}/metrics",
         "vmalert": f"http://127.0.0.1:{alert}/metrics"},
        [d / "vm", d / "vmagent"],
    )  # fmt: skip


def targets_up(url: str, want: int) -> bool:
    """True when the scraper lists `want` targets, every one up."""
    active = json.loads(get(url))["data"]["activeTargets"]
    return len(active) == want and all(t["health"] == "up" for t in active)


def store_counters(store: Store) -> dict[str, Any]:
    """Ingest counter, series and rule timings from the store's own /metrics."""
    if store.name == "prometheus":
        s = scrape(store.metrics["prometheus"])
        return {
            "ingested": total(s, "prometheus_tsdb_head_samples_appended_total"),
            "head_series": total(s, "prometheus_tsdb_head_series"),
            "rule_last": {
                k.rpartition(";")[2]: v
                for k, v in by_label(
                    s, "prometheus_rule_group_last_duration_seconds", "rule_group"
                ).items()
            },
            "rule_failures": total(s, "prometheus_rule_evaluation_failures_total"),
            "rule_missed": total(s, "prometheus_rule_group_iterations_missed_total"),
        }
    vm = scrape(store.metrics["victoria-metrics"])
    va = scrape(store.metrics["vmalert"])
    return {
        "ingested": total(vm, "vm_rows_inserted_total"),
        "head_series": by_label(vm, "vm_cache_entries", "type").get(
            "storage/hour_metric_ids", math.nan
        ),
        "rule_sum": by_label(va, "vmalert_iteration_duration_seconds_sum", "group"),
        "rule_count": by_label(va, "vmalert_iteration_duration_seconds_count", "group"),
        "rule_failures": total(va, "vmalert_execution_errors_total"),
        "rule_missed": total(va, "vmalert_iteration_missed_total"),
    }


def costliest_rules(base: str, n: int = 5) -> list[tuple[str, float]]:
    """Prometheus: the n rules whose last evaluation took longest, (name, seconds)."""
    groups = json.loads(get(f"{base}/api/v1/rules", timeout=30))["data"]["groups"]
    rules = [(r["name"], float(r["evaluationTime"])) for g in groups for r in g["rules"]]
    return sorted(rules, key=lambda r: -r[1])[:n]


def du(paths: list[Path]) -> int:
    """Bytes of the files under these directories."""
    return sum(f.stat().st_size for p in paths if p.exists() for f in p.rglob("*") if f.is_file())


@dataclass
class Fleet:
    """What every phase of one N shares: the simulator's ports and the collector."""

    hosts: int
    host_ports: list[int]
    sink: int
    collector_port: int
    sim_pid: int
    collector_pid: int


def phase(
    store_name: str, fleet: Fleet, procs: Procs, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Start a store over the fleet, measure it, report a run from it, stop it."""
    d = work / f"{store_name}-{fleet.hosts}"
    d.mkdir()
    interval = args.interval
    if store_name == "prometheus":
        store = start_prometheus(procs, d, fleet.host_ports, fleet.collector_port, interval)
    else:
        store = start_victoriametrics(
            procs, d, fleet.host_ports, fleet.collector_port, interval, fleet.sink
        )
    names = list(store.pids)
    try:
        wait_for(
            lambda: targets_up(store.targets_url, fleet.hosts + 1),
            3 * interval + 60,
            f"{store_name}: all {fleet.hosts + 1} targets up",
            alive=procs.alive(*names),
            interval=1.0,
        )
        # The phase's run spans the warm-up and ends REPORT_GUARD_S before the window does, so
        # the report right after the window sees all of it in either store.
        run = f"fleet-{store_name}-{fleet.hosts}"
        collector = f"http://127.0.0.1:{fleet.collector_port}/api/v1/runs"
        post(collector, {"name": run, "labels": {"hosts": str(fleet.hosts)}})
        run_started = time.monotonic()
        time.sleep(args.warmup)
        pids = {**store.pids, "simulator": fleet.sim_pid, "collector": fleet.collector_pid}
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        busy0 = machine_busy_seconds()
        c0, t0 = store_counters(store), time.monotonic()
        wall0 = time.time()
        rss: dict[str, list[int]] = {n: [] for n in pids}
        rule_samples: dict[str, list[float]] = {}
        run_stopped, stopped_at = False, 0.0
        stop_due = max(run_started + 10.0, t0 + args.measure - REPORT_GUARD_S)
        while (now := time.monotonic()) < t0 + args.measure:
            procs.alive(*names)()
            for n, p in pids.items():
                rss[n].append(rss_bytes(p))
            if store_name == "prometheus":
                with contextlib.suppress(OSError):  # a sample missed, not the phase
                    for g, v in store_counters(store)["rule_last"].items():
                        rule_samples.setdefault(g, []).append(v)
            if not run_stopped and now >= stop_due:
                post(f"{collector}/{run}/stop")
                run_stopped, stopped_at = True, now
            time.sleep(min(SAMPLE_EVERY_S, max(0.0, t0 + args.measure - time.monotonic())))
        c1, t1 = store_counters(store), time.monotonic()
        cpu1 = {n: cpu_seconds(p) for n, p in pids.items()}
        busy1 = machine_busy_seconds()
        if not run_stopped:
            post(f"{collector}/{run}/stop")
            stopped_at = time.monotonic()
        dt = t1 - t0
        at = wall0 + dt - 1
        series = query(store.query_url, "sum(scrape_samples_scraped)", at)
        alerts = query_vector(store.query_url, "count by (alertname, alertstate) (ALERTS)", at)
        up = query(store.query_url, "count(up == 1)", at)
        if store_name == "prometheus":
            rules = {g: statistics.median(v) for g, v in rule_samples.items() if v}
        else:
            rules = {
                g: (c1["rule_sum"][g] - c0["rule_sum"].get(g, 0.0))
                / max(1.0, c1["rule_count"][g] - c0["rule_count"].get(g, 0.0))
                for g in c1["rule_sum"]
            }
        ingest = (c1["ingested"] - c0["ingested"]) / dt
        top_rules = costliest_rules(store.query_url) if store_name == "prometheus" else []
        cores = {n: (cpu1[n] - cpu0[n]) / dt for n in pids}
        peak = {n: max(v) for n, v in rss.items() if v}
        result: dict[str, Any] = {
            "store": store_name,
            "hosts": fleet.hosts,
            "pdus": math.ceil(fleet.hosts / args.hosts_per_pdu),
            "series": series,
            "store_series": c1["head_series"],
            "targets_up": up,
            "ingest_samples_per_s": ingest,
            "expected_samples_per_s": series / interval,
            "cpu_cores": cores,
            "rss_peak_bytes": peak,
            "store_processes": names,
            "store_cpu_cores": sum(cores[n] for n in names),
            "store_rss_bytes": sum(peak[n] for n in names),
            "rule_seconds": rules,
            "rule_top": top_rules,
            # what the alerts group had to keep track of: a healthy fleet fires little
            "alerts": {f"{m['alertname']}/{m['alertstate']}": v for m, v in alerts},
            "rule_failures": c1["rule_failures"] - c0["rule_failures"],
            "rule_missed": c1["rule_missed"] - c0["rule_missed"],
            # what else kept the machine busy: other users' work, and the bench's own
            "machine_busy_cores": (busy1 - busy0) / dt,
            "others_cores": (busy1 - busy0) / dt - sum(cores.values()),
            "loadavg_end": os.getloadavg()[0],
            "window_s": dt,
            "run": run,
        }
        result["ingest_kept_up"] = bool(
            up == fleet.hosts + 1 and ingest >= KEPT_UP * result["expected_samples_per_s"]
        )
        result["rules_kept_up"] = not result["rule_missed"] and not result["rule_failures"]
        result["kept_up"] = result["ingest_kept_up"] and result["rules_kept_up"]
        # the report, once the store shows the whole run (VictoriaMetrics: 30 s late)
        time.sleep(max(0.0, stopped_at + REPORT_GUARD_S - time.monotonic()))
        result["report"] = report_times(run, store.query_url, d, args.reports)
        result["disk_bytes"] = du(store.data)
        return result
    finally:
        procs.stop(*names)


def report_times(run: str, url: str, d: Path, repeat: int) -> dict[str, Any]:
    """`wattbit report RUN --prometheus URL`, `repeat` times: wall seconds, and what it saw."""
    times, error, hosts, analysis = [], "", 0, []
    for i in range(repeat):
        out = d / f"report{i}"
        t = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "collector.cli", "report", run, "--prometheus", url,
             "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        times.append(time.monotonic() - t)
        if r.returncode != 0:
            error = (r.stderr or r.stdout).strip()[-500:]
            break
        doc = json.loads((out / f"{run}.json").read_text())
        hosts = len(doc.get("hosts", []))
        analysis.append(float(doc["timings_seconds"]["total"]))
    return {
        "seconds": statistics.median(times) if times else math.nan,
        "all_seconds": times,
        # the report's own timing of its queries and arithmetic (no start-up, charts, files)
        "analysis_seconds": statistics.median(analysis) if analysis else math.nan,
        "hosts": hosts,
        "error": error,
    }


# --- the run --------------------------------------------------------------------------------------


def fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least squares y = a + b x (None with fewer than two distinct x)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = cpu_model()
    mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    versions = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package} ${Version}\n", "prometheus", "victoria-metrics"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        versions = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if " " in ln)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", default="50,100,200", help="fleet sizes, comma-separated")
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--interval", type=float, default=15.0, help="scrape, poll and rule interval")
    ap.add_argument("--warmup", type=float, default=45.0, help="seconds after all targets are up")
    ap.add_argument("--measure", type=float, default=120.0, help="measured window, seconds")
    ap.add_argument("--reports", type=int, default=1, help="wattbit report runs per phase")
    ap.add_argument("--hosts-per-pdu", type=int, default=5)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--cpus", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 hosts, short phases")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--keep", type=Path, help="keep the data and logs in this directory")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the simulator child
    args = ap.parse_args(argv)
    if args.quick:
        args.hosts, args.interval, args.warmup, args.measure, args.reports = (
            "10",
            5.0,
            10.0,
            30.0,
            1,
        )
    args.sizes = sorted({int(x) for x in args.hosts.split(",")})
    args.store_list = [s for s in args.stores.split(",") if s]
    unknown = set(args.store_list) - set(STORES)
    if unknown or not args.sizes or min(args.sizes) < 1:
        ap.error(f"--stores: some of {', '.join(STORES)}; --hosts: positive numbers")
    return args


def start_fleet(
    procs: Procs, work: Path, hosts: int, sim: dict[str, Any], args: argparse.Namespace
) -> Fleet:
    """The collector for `hosts` hosts (its PDUs polled once), beside the running simulator."""
    pdus = math.ceil(hosts / args.hosts_per_pdu)
    d = work / f"collector-{hosts}"
    d.mkdir()
    cfg = d / "collector.yml"
    cfg.write_text(
        collector_yml(sim["pdus"][:pdus], hosts, args.hosts_per_pdu, args.interval, d / "state")
    )
    port = free_port()
    name = f"collector-{hosts}"
    p = procs.start(
        name,
        [sys.executable, "-m", "collector.cli", "collector", "--config", str(cfg),
         "--listen", f"127.0.0.1:{port}"],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(
        lambda: total(scrape(url), "wattbit_pdu_up") == pdus,
        60,
        f"collector: {pdus} PDUs polled",
        alive=procs.alive(name),
        interval=0.5,
    )
    return Fleet(hosts, sim["hosts"][:hosts], sim["sink"], port, procs.procs["sim"].pid, p.pid)


def main(argv: list[str] | None = None) -> int:
    """Record, serve, measure each (N, store), print and fit."""
    args = parse_args(argv)
    if args.serve:
        asyncio.run(_serve(json.loads(args.serve.read_text())))
        return 0
    missing = [t for s in args.store_list for t in TOOLS[s] if shutil.which(t) is None]
    if missing:
        print(f"bench/fleet: not installed: {', '.join(missing)} (Debian packages prometheus, "
              "victoria-metrics)")  # fmt: skip
        return 1
    work = args.keep or Path(tempfile.mkdtemp(prefix="wattbit-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    procs = Procs(work)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    results: list[dict[str, Any]] = []
    try:
        text = record_exposition(args.disks, args.nics, args.queues, args.cpus)
        (work / "host.prom").write_text(text)
        per_host = series_of(text)
        print(f"host exposition: {args.disks} disks, {args.nics} NICs x {args.queues} queues, "
              f"{args.cpus} CPUs: {per_host} series, {len(text.encode()) / 1e6:.2f} MB "
              "(recorded from the agent's renderer)", flush=True)  # fmt: skip
        with bench_lock():
            spec = {
                "exposition": str(work / "host.prom"),
                "hosts": max(args.sizes),
                "pdus": math.ceil(max(args.sizes) / args.hosts_per_pdu),
                "recording": str(RECORDING),
                "ready": str(work / "sim-ready.json"),
                "stats": str(work / "sim-stats.json"),
            }
            (work / "sim.json").write_text(json.dumps(spec))
            procs.start("sim", [sys.executable, str(Path(__file__).resolve()), "--serve",
                                str(work / "sim.json")])  # fmt: skip
            sim = wait_for(
                lambda: json.loads((work / "sim-ready.json").read_text()),
                120, "simulator ready", alive=procs.alive("sim"),
                errors=(OSError, ValueError),
            )  # fmt: skip
            for i, hosts in enumerate(args.sizes):
                fleet = start_fleet(procs, work, hosts, sim, args)
                for store in in_turn(args.store_list, i):  # the order alternating by size
                    t = time.monotonic()
                    try:
                        r = phase(store, fleet, procs, work, args)
                    except (OSError, RuntimeError, ValueError, KeyError) as exc:
                        # a store that falls over at this size: said so, and the run goes on
                        r = {
                            "store": store,
                            "hosts": hosts,
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                    r["phase_seconds"] = time.monotonic() - t
                    results.append(r)
                    print(line(r), flush=True)
                procs.stop(f"collector-{hosts}")
            procs.stop()
        summary = summarise(results, args, per_host)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1, default=str))
        return 0 if all(r.get("kept_up") and not r["report"]["error"] for r in results) else 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        procs.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def mib(n: float) -> float:
    return n / 2**20


def line(r: dict[str, Any]) -> str:
    """One phase, one line."""
    if "error" in r:
        return f"{r['store']:15s} N={r['hosts']:<4d} FAILED: {r['error'][-300:]}"
    rules = " + ".join(f"{g.removeprefix('wattbit-')} {v * 1e3:.0f} ms" for g, v in
                       sorted(r["rule_seconds"].items()))  # fmt: skip
    rep = r["report"]
    report = (
        f"{rep['seconds']:.1f} s (analysis {rep['analysis_seconds']:.1f} s; {rep['hosts']} hosts)"
        if not rep["error"]
        else (f"FAILED: {rep['error'][-200:]}")
    )
    return (
        f"{r['store']:15s} N={r['hosts']:<4d} series {r['series']:>9,.0f}  "
        f"ingest {r['ingest_samples_per_s']:>8,.0f}/s "
        f"(expected {r['expected_samples_per_s']:,.0f})  "
        f"RSS {mib(r['store_rss_bytes']):6.0f} MiB  CPU {r['store_cpu_cores']:.2f} cores  "
        f"rules {rules}  report {report}  "
        f"ingest {'kept up' if r['ingest_kept_up'] else 'DID NOT KEEP UP'}, "
        f"rules {'kept up' if r['rules_kept_up'] else 'DID NOT KEEP UP'}"
        + (f"  rule failures {r['rule_failures']:.0f}" if r["rule_failures"] else "")
        + (f"  rule iterations missed {r['rule_missed']:.0f}" if r["rule_missed"] else "")
        + f"  (others on the machine: {r['others_cores']:.2f} cores)"
    )


def summarise(
    results: list[dict[str, Any]], args: argparse.Namespace, per_host: int
) -> dict[str, Any]:
    """Print the table and the fits; return everything for --json."""
    print("\n| store | hosts | series | samples/s | RSS MiB | CPU cores | RSS KiB / 1k series "
          "| CPU millicores / 1k series | rule time per cycle (both groups) | report "
          "| kept up (ingest, rules) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    fits: dict[str, Any] = {}
    for store in args.store_list:
        rs = sorted(
            (r for r in results if r["store"] == store and "error" not in r),
            key=lambda r: r["hosts"],
        )
        for r in rs:
            k = r["series"] / 1000
            rules = sum(r["rule_seconds"].values())
            rep = r["report"]
            cells = [
                store,
                str(r["hosts"]),
                f"{r['series']:,.0f}",
                f"{r['ingest_samples_per_s']:,.0f}",
                f"{mib(r['store_rss_bytes']):,.0f}",
                f"{r['store_cpu_cores']:.2f}",
                f"{r['store_rss_bytes'] / 1024 / k:,.0f}",
                f"{r['store_cpu_cores'] * 1e3 / k:.1f}",
                f"{rules:.2f} s",
                f"{rep['seconds']:.1f} s",
                ", ".join("yes" if r[k] else "no" for k in ("ingest_kept_up", "rules_kept_up")),
            ]
            print("| " + " | ".join(cells) + " |")
        # The fits take the phases whose ingest kept up (a saturated store's CPU is capped).
        good = [r for r in rs if r["ingest_kept_up"]]
        xs = [r["series"] for r in good]
        rss_fit = fit(xs, [r["store_rss_bytes"] for r in good])
        cpu_fit = fit(xs, [r["store_cpu_cores"] for r in good])
        rule_fit = fit(xs, [sum(r["rule_seconds"].values()) for r in good])
        rep_fit = fit([r["hosts"] for r in good], [r["report"]["seconds"] for r in good])
        fits[store] = {"rss_bytes": rss_fit, "cpu_cores": cpu_fit, "rule_seconds": rule_fit,
                       "report_seconds_per_host": rep_fit}  # fmt: skip
        if rss_fit and cpu_fit:
            print(f"{store}: RSS = {mib(rss_fit[0]):.0f} MiB + {rss_fit[1] * 1000 / 1024:.0f} KiB "
                  f"per 1k series ({rss_fit[1] * per_host / 2**20:.1f} MiB per host); CPU = "
                  f"{cpu_fit[0]:.3f} + {cpu_fit[1] * 1e6:.2f} millicores per 1k series "
                  f"({cpu_fit[1] * per_host * 1e3:.1f} millicores per host)")  # fmt: skip
        if rule_fit and rep_fit:
            print(f"{store}: rule time per cycle = {rule_fit[0]:.2f} s + {rule_fit[1] * 1e6:.2f} s "
                  f"per million series; wattbit report = {rep_fit[0]:.1f} s + "
                  f"{rep_fit[1]:.2f} s per host")  # fmt: skip
    cmd = " ".join(
        [
            "  .venv/bin/python bench/fleet.py",
            *(
                ["--quick"]
                if args.quick
                else [
                    f"--hosts {args.hosts}",
                    f"--warmup {args.warmup:g}",
                    f"--measure {args.measure:g}",
                ]
            ),
        ]
    )
    print(f"\nreproduce:\n{cmd}")
    return {
        "machine": machine(),
        "args": {k: v for k, v in vars(args).items() if k not in ("serve",)},
        "series_per_host": per_host,
        "phases": results,
        "fits": fits,
    }


if __name__ == "__main__":
    sys.exit(main())
