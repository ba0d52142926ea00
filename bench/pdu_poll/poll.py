"""One full poll per tool (wattbit, snmp_exporter, net-snmp), checked, timed."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench.harness import (
    children_cpu,
    cpu_seconds,
    machine_busy_seconds,
)
from bench.pdu_poll.common import (
    MAX_REPETITIONS,
    MODULE_TEMPLATE,
    PROFILE,
    RETRIES,
    SNMPBULKWALK,
    TIMEOUT,
    Columns,
    Expect,
)
from bench.pdu_poll.procs import STOPPING, Exporter, kill_children, track

# --- one poll per tool -------------------------------------------------------------------------


@dataclass
class Pdu:
    community: str
    port: int
    agent: int
    expect: Expect


@dataclass
class Poll:
    """One full poll of all PDUs by one tool, and what it read."""

    tool: str
    wall: float
    cpu: float
    agent_cpu: float
    bench_cpu: float  # this Python process (for wattbit: the tool itself)
    machine_cpu: float  # every CPU of the machine, not idle
    values: int = 0
    outlets: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def others_cpu(self) -> float:
        """CPU of everything else on the machine (other users' jobs, unattributed kernel)."""
        own = 0.0 if self.tool == "wattbit" else self.bench_cpu
        return self.machine_cpu - self.cpu - self.agent_cpu - own

    @property
    def cpu_us_per_value(self) -> float:
        return self.cpu / self.values * 1e6 if self.values else float("nan")

    def cell(self) -> str:
        return f"{self.wall:.2f}s {self.cpu_us_per_value:.0f}us/v o{self.others_cpu:.1f}"

    def raw(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall,
            "cpu_s": self.cpu,
            "cpu_us_per_value": self.cpu_us_per_value,
            "values": self.values,
            "agent_cpu_s": self.agent_cpu,
            "bench_process_cpu_s": self.bench_cpu,
            "machine_busy_cpu_s": self.machine_cpu,
            "others_cpu_s": self.others_cpu,
            "outlets_per_pdu": self.outlets,
            "problems": self.problems,
            **self.extra,
        }


class Bench:
    def __init__(self, args: argparse.Namespace, pdus: list[Pdu], cols: Columns) -> None:
        self.args = args
        self.pdus = pdus
        self.cols = cols
        self.agent_pids: list[int] = []
        self.exporter: Exporter | None = None
        self.pool = ThreadPoolExecutor(max_workers=args.concurrency)
        self.local = threading.local()
        self.loop: Any = None
        self.client: Any = None
        self.poller: Any = None
        self.env = {**os.environ, "MIBS": ""}

    def agents_cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.agent_pids)

    def timed(self, tool: str, run: Callable[[], Any], cpu: Callable[[], float]) -> Poll:
        m0, b0, a0, c0 = machine_busy_seconds(), time.process_time(), self.agents_cpu(), cpu()
        t0 = time.perf_counter()
        result = run()
        wall = time.perf_counter() - t0
        c1, a1, b1, m1 = cpu(), self.agents_cpu(), time.process_time(), machine_busy_seconds()
        poll = Poll(tool, wall, c1 - c0, a1 - a0, b1 - b0, m1 - m0)
        poll.extra["_result"] = result
        return poll

    # wattbit

    def setup_wattbit(self) -> None:
        import asyncio

        from collector.site.profiles import load_profiles
        from exporters.pdu.poller import PduPoller, PduTarget
        from exporters.snmp.client import Auth, SnmpClient, Target

        targets = [
            PduTarget(
                p.community,
                Target(
                    "127.0.0.1",
                    p.port,
                    Auth("2c", community=p.community),
                    timeout=TIMEOUT,
                    retries=RETRIES,
                    max_repetitions=MAX_REPETITIONS,
                ),
                profile=PROFILE,
            )
            for p in self.pdus
        ]
        self.loop = asyncio.new_event_loop()
        self.client = SnmpClient()
        # the collector's default deadline (interval 10 s) per PDU poll
        self.poller = PduPoller(
            targets, load_profiles(), self.client, concurrency=self.args.concurrency
        )

    def poll_wattbit(self) -> Poll:
        poller = self.poller
        failures_before = sum(poller.failures.values())
        counts_before = self.client.counts()
        poll = self.timed(
            "wattbit",
            lambda: self.loop.run_until_complete(poller.poll_all()),
            time.process_time,
        )
        states = poll.extra.pop("_result")
        power = 0.0
        for p, st in zip(self.pdus, states, strict=True):
            if not st.up or st.reading is None:
                poll.problems.append(f"{p.community}: down ({st.error})")
                poll.outlets.append(0)
                continue
            r = st.reading
            n = sum(
                v is not None
                for o in r.outlets
                for v in (o.power_watts, o.current_amperes, o.voltage_volts, o.energy_joules)
            )
            n += sum(
                v is not None
                for v in (
                    r.unit_power_watts,
                    r.unit_energy_joules,
                    r.unit_current_amperes,
                    r.unit_voltage_volts,
                )
            )
            poll.values += n
            poll.outlets.append(len(r.outlets))
            pw = sum(o.power_watts or 0.0 for o in r.outlets)
            power += pw
            self._check(poll, p, len(r.outlets), n, pw)
        poll.extra["failures"] = sum(poller.failures.values()) - failures_before
        counts = self.client.counts()
        poll.extra["snmp_responses"] = counts["received"] - counts_before["received"]
        poll.extra["var_binds"] = counts["var_binds"] - counts_before["var_binds"]
        poll.extra["outlet_power_sum_w"] = power
        return poll

    # snmp_exporter

    def _scrape(self, path: str) -> tuple[int, bytes]:
        assert self.exporter is not None
        if STOPPING.is_set():
            raise RuntimeError("stopping")
        conn = getattr(self.local, "conn", None)
        for attempt in range(2):
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.exporter.port, timeout=60)
                self.local.conn = conn
            try:
                conn.request("GET", path)
                rsp = conn.getresponse()
                return rsp.status, rsp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def poll_exporter(self) -> Poll:
        assert self.exporter is not None
        paths = [
            f"/snmp?target=127.0.0.1:{p.port}&module={Exporter.module(p.community)}"
            for p in self.pdus
        ]
        pid = self.exporter.pid
        poll = self.timed(
            "snmp_exporter",
            lambda: list(self.pool.map(self._scrape, paths)),
            lambda: cpu_seconds(pid),
        )
        bodies = poll.extra.pop("_result")
        metric_names = self._exporter_metric_names()
        outlet_names = {metric_names[c] for c in self.cols.outlet_metrics}
        power_name = metric_names[self.cols.outlet_power]
        wanted = set(metric_names.values())
        power = 0.0
        sent = retried = 0.0
        for p, (status, body) in zip(self.pdus, bodies, strict=True):
            if status != 200:
                poll.problems.append(f"{p.community}: HTTP {status} {body[:200]!r}")
                poll.outlets.append(0)
                continue
            n = 0
            outlets: set[str] = set()
            pw = 0.0
            for line in body.decode("utf-8", "replace").splitlines():
                if not line or line[0] == "#":
                    continue
                name, _, rest = line.partition("{")
                if not rest:
                    name = line.split(" ", 1)[0]
                value = float(line.rsplit(" ", 1)[1])
                if name == "snmp_scrape_packets_sent":
                    sent += value
                elif name == "snmp_scrape_packets_retried":
                    retried += value
                if name not in wanted:
                    continue
                n += 1
                if name in outlet_names:
                    outlets.add(rest.split("}", 1)[0])
                if name == power_name:
                    pw += value
            labels_per_outlet = len(outlets)
            poll.values += n
            poll.outlets.append(labels_per_outlet)
            power += pw
            self._check(poll, p, labels_per_outlet, n, pw)
        poll.extra.update(
            outlet_power_sum_w=power, snmp_packets_sent=sent, snmp_packets_retried=retried
        )
        return poll

    def _exporter_metric_names(self) -> dict[str, str]:
        import yaml

        template = yaml.safe_load(MODULE_TEMPLATE.read_text())
        return {m["oid"]: m["name"] for m in template["metrics"] if m["oid"] in self.cols.metrics}

    # net-snmp

    def _bulkwalk_pdu(self, p: Pdu) -> tuple[list[str], str]:
        outs, errs = [], []
        for root in self.cols.roots:
            if STOPPING.is_set():
                raise RuntimeError("stopping")
            cmd = [
                SNMPBULKWALK,
                "-v2c",
                "-c",
                p.community,
                f"-Cr{MAX_REPETITIONS}",
                "-t",
                f"{TIMEOUT:g}",
                "-r",
                str(RETRIES),
                "-m",
                "",
                "-On",
                "-Oq",
                f"127.0.0.1:{p.port}",
                root,
            ]
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
            )
            track(proc, True)
            if STOPPING.is_set():  # kill_children() may have missed it
                proc.kill()
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                track(proc, False)
            outs.append(out.decode("latin-1"))
            if proc.returncode != 0 or err.strip():
                errs.append(f"{root}: rc {proc.returncode} {err.decode(errors='replace')[:200]}")
        return outs, "; ".join(errs)

    def poll_netsnmp(self) -> Poll:
        poll = self.timed(
            "net-snmp", lambda: list(self.pool.map(self._bulkwalk_pdu, self.pdus)), children_cpu
        )
        results = poll.extra.pop("_result")
        power = 0.0
        for p, (outs, err) in zip(self.pdus, results, strict=True):
            if err:
                poll.problems.append(f"{p.community}: {err}")
            n = 0
            outlets: set[str] = set()
            pw = 0.0
            for text in outs:
                for line in text.splitlines():
                    oid, _, value = line.partition(" ")
                    col = self.cols.column_of(oid.lstrip("."))
                    if col is None:
                        continue
                    n += 1
                    if col in self.cols.outlet_metrics:
                        outlets.add(oid.rpartition(".")[2])
                    if col == self.cols.outlet_power:
                        pw += float(value)
            poll.values += n
            poll.outlets.append(len(outlets))
            power += pw
            self._check(poll, p, len(outlets), n, pw)
        poll.extra["outlet_power_sum_w"] = power
        poll.extra["processes"] = len(self.pdus) * len(self.cols.roots)
        return poll

    def _check(self, poll: Poll, p: Pdu, outlets: int, values: int, power: float) -> None:
        e = p.expect
        if outlets != e.outlets or values != e.values or abs(power - e.power_sum) > 1e-6:
            poll.problems.append(
                f"{p.community}: read {outlets} outlets, {values} values, {power:g} W;"
                f" expected {e.outlets}, {e.values}, {e.power_sum} W"
            )

    def run(self, tool: str) -> Poll:
        return {
            "wattbit": self.poll_wattbit,
            "snmp_exporter": self.poll_exporter,
            "net-snmp": self.poll_netsnmp,
        }[tool]()

    def close(self) -> None:
        kill_children()
        self.pool.shutdown(wait=True, cancel_futures=True)
        # an interrupted poll's PDUs fail as the client closes: nothing to report about them
        logging.getLogger("exporters.pdu").setLevel(logging.CRITICAL)
        if self.client is not None:
            self.client.close()
        if self.loop is not None:
            import asyncio

            # let pysnmp's cancelled timer task finish before the loop goes
            with contextlib.suppress(Exception):
                tasks = asyncio.all_tasks(self.loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.close()
