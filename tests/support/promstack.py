"""A real node_exporter (cpu collector only) and a real Prometheus scraping it and an agent
every second with the fast recording rules, on free 127.0.0.1 ports, and the windows of the
scenarios they watch: what the limits tests share (test_limits_real.py, test_tcp_limits_real.py
and, by the latter's `observed`, test_tcp_sndbuf_real.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.env import ROOT
from tests.support.realparts import process, server

FAST_RULES = ROOT / "alerts" / "test-overrides" / "wattbit-recording-fast.yml"
PROM_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def prometheus_config(agent_port: int, node_port: int, host: str) -> str:
    """deploy/prometheus/prometheus.yml's jobs with the test's targets (labelled host); 1 s;
    the fast rules."""
    cfg = yaml.safe_load(PROM_CONFIG.read_text())
    cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(FAST_RULES)]
    cfg.pop("alerting", None)
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    jobs["wattbit-agent"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{agent_port}"], "labels": {"host": host}}
    ]
    jobs["node"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{node_port}"], "labels": {"host": host}}
    ]
    cfg["scrape_configs"] = [jobs["wattbit-agent"], jobs["node"]]
    return yaml.safe_dump(cfg)


@contextlib.contextmanager
def node_and_prometheus(agent_port: int, tmp: Path, host: str) -> Iterator[str]:
    """node_exporter, then Prometheus (its configuration and data in tmp) scraping it and the
    agent on agent_port: Prometheus' URL once it is ready (what it has scraped by then is the
    caller's to wait for); both stopped after."""
    with contextlib.ExitStack() as stack:
        node_url = stack.enter_context(
            server(
                "node_exporter",
                lambda port: ["prometheus-node-exporter",
                              f"--web.listen-address=127.0.0.1:{port}",
                              "--collector.disable-defaults", "--collector.cpu"],
                tmp, ready_path="/metrics",
            )
        )  # fmt: skip
        node_port = int(node_url.rsplit(":", 1)[1])
        (tmp / "prometheus.yml").write_text(prometheus_config(agent_port, node_port, host))
        yield stack.enter_context(
            server(
                "prometheus",
                lambda port: ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp / 'prom'}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                tmp,
            )
        )  # fmt: skip


@dataclass
class Window:
    """One scenario's stretch of time."""

    start: float
    end: float


def scenario_window(
    name: str, cmd: list[str], tmp: Path, timeout: float, extra: list[list[str]] | None = None
) -> Window:
    """Run cmd to its end (with the extra processes beside it; their output in tmp, NAME.log
    and NAME-extraI.log): the window."""
    start = time.time()
    with contextlib.ExitStack() as s:
        for i, e in enumerate(extra or []):
            s.enter_context(process(e, tmp / f"{name}-extra{i}.log"))
        with process(cmd, tmp / f"{name}.log") as p:
            p.wait(timeout=timeout)
            assert p.returncode == 0, (tmp / f"{name}.log").read_text()[-2000:]
    return Window(start, time.time())
