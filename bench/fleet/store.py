"""One phase of the fleet bench: a store (Prometheus or VictoriaMetrics) scraping the fleet."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fleet.common import (
    KEPT_UP,
    REPORT_GUARD_S,
    ROOT,
    SAMPLE_EVERY_S,
    by_label,
    get,
    post,
    query,
    query_vector,
    scrape,
    total,
)
from bench.harness import (
    Children,
    cpu_seconds,
    free_port,
    machine_busy_seconds,
    rss_bytes,
)
from collector.demo.procs import wait_for
from tests.support.synthetic import (
    RULES,
    prometheus_yml,
    scrape_config,
)

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
    procs: Children, d: Path, ports: list[int], collector: int, interval: float
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
    procs: Children, d: Path, ports: list[int], collector: int, interval: float, sink: int
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
    store_name: str, fleet: Fleet, procs: Children, work: Path, args: argparse.Namespace
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
