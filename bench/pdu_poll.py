"""One full poll of many APC rPDU2 PDUs: wattbit vs prometheus-snmp-exporter 0.21 vs net-snmp.

Run: .venv/bin/python bench/pdu_poll.py [--pdus 100] [--rounds 5] [--json FILE]
     [--agents 4] [--concurrency 32] [--profile 30]

The PDUs are SIMULATED: synthetic recordings derived from the real APC AP8641 recording
(`apc_ap8641.snmprec`: its system group and whole rPDU2 branch, identity and unit rows
included), half of them with its 24 outlets and half extended to 48 outlets (new rows
25..48 in every rPDU2 outlet table, metered values copied from outlet i-24 and scaled by a
seeded factor of 0.7..1.3; the outlet counts, table sizes and the unit's power, energy and
current scaled to match). They are served by `--agents` snmpsim processes (single-threaded
Python, each with its own UDP port, one community per PDU = data file stem), PDU i on
process i % agents. snmpsim answers far slower than a real PDU's agent and shares this
machine's CPUs with the tool being measured, so it may bound the wall times: the table shows
the agents' CPU seconds and the machine's CPU use during each poll.

Compared, on exactly the same agents and the same 12 subtrees (the apc_rpdu2 profile's walk
roots; GETBULK max-repetitions 25, timeout 2 s, 1 retry), in round-robin order rotated every
round:

* wattbit: `PduPoller.poll_all()` in this process, profile `apc_rpdu2` configured (no
  detection), concurrency 32; CPU = this process's `time.process_time()` during the poll.
  Its GETBULKs ask for at most 25 var-binds in all; from its second poll on it walks short
  subtrees side by side and sizes every request from the lengths the previous poll found, as
  the collector does from its second poll on. The untimed warm-up poll is wattbit's first (its
  wall and CPU are printed: first-access costs of the agents also land in it).
* snmp_exporter: prometheus-snmp-exporter 0.21 with the hand-written module
  `bench/pdu_poll/snmp_exporter_module.yml` (copied once per community: 0.21 keeps the
  community inside the module), all targets scraped by 32 threads; CPU = the exporter's
  utime+stime from /proc/PID/stat (10 ms ticks). The scraping threads' own CPU is not counted.
* net-snmp: one `snmpbulkwalk -v2c -Cr25` per subtree and PDU (it walks one subtree per run),
  a PDU's subtrees one after the other, 32 PDUs at a time; CPU = the children's rusage.

Values: per PDU, outlets x outlet metrics present (current, power, energy) + the 4 unit metrics
(device power, device energy, phase current, phase voltage); for snmp_exporter and net-snmp
the samples / rows of those same 7 columns. Every poll is checked (all PDUs answered, outlets
per PDU = 24 or 48, values and the sum of outlet power as in the recordings) before its time
counts; a check failure aborts the run.

Goals: wattbit <= 60 CPU us per exported value; wattbit wall time no worse than snmp_exporter.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "pdu_poll"
MODULE_TEMPLATE = DATA / "snmp_exporter_module.yml"
PROFILE = "apc_rpdu2"
SNMP_EXPORTER = "prometheus-snmp-exporter"
SNMPBULKWALK = "snmpbulkwalk"
TIMEOUT, RETRIES, MAX_REPETITIONS = 2.0, 1, 25
CPU_GOAL_US = 60.0
TOOLS = ("wattbit", "snmp_exporter", "net-snmp")


if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.harness import (  # noqa: E402
    children_cpu,
    cpu_seconds,
    free_port,
    interruptible,
    load_average,
    machine_busy_seconds,
    table,
)
from bench.harness import machine as harness_machine  # noqa: E402
from tests.support.synthetic_pdu import (  # noqa: E402
    METERED_STATUS,
    SOURCE,
    Row,
    read_snmprec,
    synthesize,
)

# --- what a poll must read (the recordings are tests/support/synthetic_pdu.py's) ----------------


@dataclass(frozen=True)
class Expect:
    """What a complete read of one PDU yields."""

    outlets: int
    values: int  # rows of the 7 metric columns
    power_sum: int  # sum of the outlet power column (W)


@dataclass(frozen=True)
class Columns:
    """The profile's subtrees and metric columns (what every tool must read)."""

    roots: list[str]
    outlet_metrics: list[str]
    unit_metrics: list[str]
    outlet_power: str

    @property
    def metrics(self) -> list[str]:
        return [*self.outlet_metrics, *self.unit_metrics]

    def column_of(self, oid: str) -> str | None:
        """The metric column an instance OID belongs to."""
        parent = oid.rpartition(".")[0]
        return parent if parent in self._metric_set else None

    @property
    def _metric_set(self) -> frozenset[str]:
        return frozenset(self.metrics)


def expect_of(rows: list[Row], cols: Columns) -> Expect:
    counted = [(o, v) for o, t, v in rows if cols.column_of(o) is not None]
    outlets = {o for o, _ in counted if o.rpartition(".")[0] in cols.outlet_metrics}
    power = [int(v) for o, v in counted if o.rpartition(".")[0] == cols.outlet_power]
    return Expect(len(outlets) // len(cols.outlet_metrics), len(counted), sum(power))


# --- processes ---------------------------------------------------------------------------------

_children: set[subprocess.Popen[bytes]] = set()
_children_lock = threading.Lock()
_stopping = threading.Event()  # set on the way out: worker threads start nothing new


def _track(p: subprocess.Popen[bytes], add: bool) -> None:
    with _children_lock:
        (_children.add if add else _children.discard)(p)


def kill_children() -> None:
    """Kill every snmpbulkwalk still running (Ctrl-C or error in the middle of a poll)."""
    _stopping.set()
    with _children_lock:
        procs = list(_children)
    for p in procs:
        with contextlib.suppress(OSError):
            p.kill()


class Exporter:
    """prometheus-snmp-exporter on 127.0.0.1:<free port> with one module per community."""

    def __init__(self, workdir: Path, communities: list[str]) -> None:
        import yaml

        self.workdir = workdir
        template = yaml.safe_load(MODULE_TEMPLATE.read_text())
        self.walk = [str(w) for w in template["walk"]]
        modules = {}
        for c in communities:
            module = copy.deepcopy(template)
            module["auth"] = {"community": c}
            modules[self.module(c)] = module
        self.config = workdir / "snmp.yml"
        self.config.write_text(yaml.safe_dump(modules, sort_keys=False))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "snmp_exporter.log"

    @staticmethod
    def module(community: str) -> str:
        return f"apc_{community}"

    def start(self) -> None:
        exe = shutil.which(SNMP_EXPORTER)
        if exe is None:
            raise RuntimeError(f"{SNMP_EXPORTER} not found: apt-get install {SNMP_EXPORTER}")
        for _ in range(3):
            self.port = free_port()
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [
                        exe,
                        f"--config.file={self.config}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                    conn.request("GET", "/")
                    if conn.getresponse().status == 200:
                        conn.close()
                        return
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"snmp_exporter did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


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
        if _stopping.is_set():
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
            if _stopping.is_set():
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
            _track(proc, True)
            if _stopping.is_set():  # kill_children() may have missed it
                proc.kill()
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                _track(proc, False)
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


# --- report ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return harness_machine(
        packages=("pysnmp", "snmpsim"),
        tools={
            "snmp_exporter": [SNMP_EXPORTER, "--version"],
            "net-snmp": [SNMPBULKWALK, "--version"],
        },
    )


def report(polls: dict[str, list[Poll]], total_values: int, ncpu: int) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    print()
    rows: list[list[str]] = []
    for tool, ps in polls.items():
        walls = [p.wall for p in ps]
        cpus = [p.cpu for p in ps]
        per = [p.cpu_us_per_value for p in ps]
        agents = [p.agent_cpu for p in ps]
        others = [p.others_cpu for p in ps]
        busy = [p.machine_cpu / (p.wall * ncpu) for p in ps]
        s = {
            "wall_s_median": statistics.median(walls),
            "cpu_s_median": statistics.median(cpus),
            "cpu_us_per_value_median": statistics.median(per),
            "agent_cpu_s_median": statistics.median(agents),
            "others_cpu_s_median": statistics.median(others),
            "machine_busy_share_median": statistics.median(busy),
        }
        summary[tool] = s
        rows.append([
            tool, f"{s['wall_s_median']:.3f}", f"({min(walls):.2f}..{max(walls):.2f})",
            f"{s['cpu_s_median']:.3f}", f"{s['cpu_us_per_value_median']:.1f}",
            f"({min(per):.0f}..{max(per):.0f})", f"{s['agent_cpu_s_median']:.2f}",
            f"{s['others_cpu_s_median']:.2f}", f"{s['machine_busy_share_median']:.0%}",
        ])  # fmt: skip
    head = ["tool", "wall s", "(min..max)", "CPU s", "CPU us/value", "(min..max)",
            "agents CPU s", "others CPU s", "machine busy"]  # fmt: skip
    table(head, rows)
    print()
    print(f"average CPUs in use during a poll (median round; this machine has {ncpu}):")
    for tool, ps in polls.items():
        mid = sorted(ps, key=lambda p: p.wall)[len(ps) // 2]
        print(
            f"  {tool:<14} tool {mid.cpu / mid.wall:4.2f}, snmpsim agents"
            f" {mid.agent_cpu / mid.wall:4.2f}, other users {mid.others_cpu / mid.wall:4.2f}"
        )
    w, e = summary["wattbit"], summary["snmp_exporter"]
    wall_ratio = w["wall_s_median"] / e["wall_s_median"]
    cpu_ratio = w["cpu_us_per_value_median"] / e["cpu_us_per_value_median"]
    cpu_ok = w["cpu_us_per_value_median"] <= CPU_GOAL_US
    wall_ok = w["wall_s_median"] <= e["wall_s_median"]
    print()
    print(f"wattbit / snmp_exporter:  wall {wall_ratio:.2f}x   CPU per value {cpu_ratio:.2f}x")
    print(
        f"goal: wattbit CPU <= {CPU_GOAL_US:g} us/value: {w['cpu_us_per_value_median']:.1f}"
        f" -> {'met' if cpu_ok else 'MISSED'}"
    )
    print(
        f"goal: wattbit wall <= snmp_exporter wall: {w['wall_s_median']:.3f} s vs"
        f" {e['wall_s_median']:.3f} s -> {'met' if wall_ok else 'MISSED'}"
    )
    print(
        f"values per poll: {total_values}. Medians over rounds. 'agents': the snmpsim processes;"
        f" 'others': every other process on the machine (not this bench, not the tool, not the"
        f" agents); 'machine busy': all non-idle CPU time / (wall x {ncpu} CPUs)"
    )
    summary["ratios_wattbit_over_snmp_exporter"] = {"wall": wall_ratio, "cpu_per_value": cpu_ratio}
    summary["goals"] = {
        "wattbit_cpu_us_per_value_max": CPU_GOAL_US,
        "wattbit_cpu_met": cpu_ok,
        "wattbit_wall_not_worse_than_snmp_exporter": wall_ok,
    }
    return summary


def decode_costs(repeat: int = 300) -> tuple[float, float]:
    """CPU seconds to decode one 25-var-bind v2c GetResponse: (pyasn1 as pysnmp does, ber.py)."""
    from pyasn1.codec.ber import decoder, encoder
    from pysnmp.proto import api
    from pysnmp.proto.mpmod.rfc2576 import SnmpV2cMessageProcessingModel

    from exporters.snmp import ber

    p = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    pdu = p.ResponsePDU()
    p.apiPDU.set_defaults(pdu)
    p.apiPDU.set_varbinds(
        pdu,
        [(p.ObjectIdentifier(f"{METERED_STATUS}.7.{i}"), p.Integer(100 + i)) for i in range(1, 26)],
    )
    msg = p.Message()
    p.apiMessage.set_defaults(msg)
    p.apiMessage.set_community(msg, "pdu000_24")
    p.apiMessage.set_pdu(msg, pdu)
    wire = encoder.encode(msg)
    spec = SnmpV2cMessageProcessingModel.SNMP_MSG_SPEC()
    t0 = time.process_time()
    for _ in range(repeat):
        decoder.decode(wire, asn1Spec=spec)
    t1 = time.process_time()
    for _ in range(repeat * 10):
        ber.decode_response(wire)
    t2 = time.process_time()
    return (t1 - t0) / repeat, (t2 - t1) / (repeat * 10)


def _group(path: str, func: str) -> str:
    if "/pyasn1/" in path:
        return "pyasn1 (BER decode/encode, ASN.1 objects)"
    if "/pysnmp/" in path:
        return "pysnmp (engine, message processing, cmdgen)"
    if "/exporters/pdu/" in path:
        return "wattbit exporters/pdu"
    if "asyncio" in path:
        return "asyncio"
    if path == "~" and ("sendto" in func or "recv" in func):
        return "socket sendto/recvfrom (syscalls)"
    return "other"


def profile_wattbit(bench: Bench, top: int, median_cpu: float, responses: int) -> dict[str, Any]:
    """cProfile (timer: this process's CPU time, not wall) of one more wattbit poll_all."""
    import cProfile
    import io
    import pstats

    from exporters.pdu.poller import PduPoller

    # Same targets and client; a long deadline, as the profiler slows the poll down a lot.
    poller = PduPoller(
        bench.poller.targets,
        bench.poller.profiles,
        bench.client,
        interval=600,
        concurrency=bench.args.concurrency,
    )
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    states = bench.loop.run_until_complete(poller.poll_all())
    prof.disable()
    down = sum(not s.up for s in states)
    stats = pstats.Stats(prof)
    raw_stats: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw_stats.values())
    groups: dict[str, float] = {}
    for (path, _, func), (_, _, tt, _, callers) in raw_stats.items():
        g = _group(path, func)
        if path == "~" and g == "other" and callers:
            # C builtins (isinstance, len, dict methods...) count for the code calling them
            for (cpath, _, cfunc), cv in callers.items():
                cg = _group(cpath, cfunc)
                groups[cg] = groups.get(cg, 0.0) + cv[2]
        else:
            groups[g] = groups.get(g, 0.0) + tt
    print(
        f"\ncProfile of one wattbit poll_all (CPU-time timer: {total:.2f} s profiled CPU, about"
        f" {total / max(median_cpu, 1e-9):.1f}x the unprofiled poll, as the profiler inflates"
        f" call-heavy code{f'; {down} PDUs DOWN' if down else ''})."
    )
    print("Own time by package (C builtins counted for their callers):")
    for g, t in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {t / total:6.1%}  {t:6.2f} s  {g}")
    per_msg, ours = decode_costs()
    print(
        f"Unprofiled check, one 25-var-bind GetResponse: pyasn1 (as in pysnmp)"
        f" {per_msg * 1e6:.0f}"
        f" us CPU, wattbit's ber.py {ours * 1e6:.0f} us ({per_msg / ours:.0f}x); wattbit received"
        f" {responses} responses per poll ({median_cpu:.2f} s CPU per poll)"
    )
    import pysnmp

    site = str(Path(pysnmp.__file__ or "").parent.parent) + "/"
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        text = buf.getvalue().replace(site, "").replace(str(ROOT) + "/", "")
        start = text.find("   ncalls")
        print(f"\ntop {top} by {key}:")
        print(text[start:].rstrip() if start >= 0 else text.rstrip())
    return {
        "profiled_cpu_s": total,
        "down": down,
        "own_cpu_s_by_package": groups,
        "pyasn1_decode_25_varbind_response_s": per_msg,
        "ber_decode_25_varbind_response_s": ours,
        "responses_per_poll": responses,
    }


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pdus", type=int, default=100, help="simulated PDUs (half 24, half 48)")
    ap.add_argument("--rounds", type=int, default=5, help="timed polls per tool")
    ap.add_argument("--json", type=Path, help="write every raw number to this file")
    ap.add_argument("--agents", type=int, default=4, help="snmpsim processes serving the PDUs")
    ap.add_argument("--concurrency", type=int, default=32, help="PDUs polled at once, per tool")
    ap.add_argument(
        "--profile", type=int, default=0, metavar="N", help="cProfile one wattbit poll, top N"
    )
    args = ap.parse_args(argv)
    args.agents = min(args.agents, args.pdus)
    if args.pdus < 2 or args.rounds < 1 or args.agents < 1 or args.concurrency < 1:
        ap.error("--pdus >= 2, --rounds >= 1, --agents >= 1, --concurrency >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from collector.site.profiles import load_profiles
    from tests.support.snmpagents import SnmpSim, have_netsnmp, have_snmpsim

    if not have_snmpsim() or not have_netsnmp() or shutil.which(SNMP_EXPORTER) is None:
        print("needs snmpsim (venv), net-snmp's snmpbulkwalk and", SNMP_EXPORTER, file=sys.stderr)
        return 2
    profile = {p.name: p for p in load_profiles()}[PROFILE]
    assert profile.outlets is not None and profile.outlets.power_watts is not None
    cols = Columns(
        roots=profile.walk_roots(),
        outlet_metrics=[s.oid for _, s in profile.outlets.metrics()],
        unit_metrics=[s.oid for _, s in profile.unit.metrics()],
        outlet_power=profile.outlets.power_watts.oid,
    )
    assert not profile.scalar_oids(), "the bench assumes walks only"

    info = machine()
    print(
        f"PDU poll bench: {args.pdus} SIMULATED APC rPDU2 PDUs ({args.pdus - args.pdus // 2} x 24"
        f" outlets, {args.pdus // 2} x 48), {args.rounds} rounds, concurrency {args.concurrency}"
    )
    print(
        f"agents: {args.agents} snmpsim {info['snmpsim']} processes (single-threaded Python) on"
        " 127.0.0.1, sharing this machine's CPUs with the tools: they may bound the wall times"
    )
    print(
        f"machine: {info['cpu']}, {info['cpus']} CPUs, {info['memory']}, kernel"
        f" {info['kernel']}, Python {info['python']}, pysnmp {info['pysnmp']}"
    )
    print(f"tools: wattbit; {info['snmp_exporter']}; {info['net-snmp']}")
    load_start = load_average()
    print(f"load average at start: {load_start}")

    tmp = Path(tempfile.mkdtemp(prefix="wattbit-bench-pdu-"))
    sims: list[Any] = []
    bench: Bench | None = None
    exporter: Exporter | None = None
    raw: dict[str, Any] = {"config": vars(args) | {"json": str(args.json)}, "machine": info}
    with interruptible(), contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        try:
            # recordings
            source = read_snmprec(SOURCE)
            templates = {n: synthesize(source, n, seed=n) for n in (24, 48)}
            rec_dir = tmp / "recordings"
            rec_dir.mkdir()
            files: list[dict[str, Path]] = [{} for _ in range(args.agents)]
            specs: list[tuple[str, int, Expect]] = []
            for i in range(args.pdus):
                n = 24 if i < args.pdus - args.pdus // 2 else 48
                community = f"pdu{i:03d}_{n}"
                path = rec_dir / f"{community}.snmprec"
                path.write_text(
                    "".join(f"{o}|{t}|{v}\n" for o, t, v in templates[n]), encoding="latin-1"
                )
                files[i % args.agents][community] = path
                specs.append((community, i % args.agents, expect_of(templates[n], cols)))
            # agents
            for agent_files in files:
                if agent_files:
                    sim = SnmpSim(agent_files)
                    stack.callback(sim.stop)
                    sim.start()
                    sims.append(sim)
            pdus = [Pdu(c, sims[a].port, a, e) for c, a, e in specs]
            total_values = sum(p.expect.values for p in pdus)
            bench = Bench(args, pdus, cols)
            stack.callback(bench.close)
            bench.agent_pids = [s._proc.pid for s in sims]  # the harness keeps it private
            # snmp_exporter
            exporter = Exporter(tmp, [p.community for p in pdus])
            if exporter.walk != cols.roots:
                raise RuntimeError(
                    f"{MODULE_TEMPLATE.name} walks {exporter.walk}, the profile {cols.roots}"
                )
            stack.callback(exporter.stop)
            exporter.start()
            bench.exporter = exporter
            bench.setup_wattbit()
            print(
                f"values per full poll: {total_values} ({args.pdus} PDUs; per PDU outlets x 3"
                " outlet metrics + 4 unit metrics); subtrees per PDU:"
                f" {len(cols.roots)}"
            )

            # untimed warm-up and check: snmpsim indexes its files, every tool must read all
            print("warm-up poll (untimed) and correctness check of every tool...")
            raw["warmup"] = {}
            for tool in TOOLS:
                p = bench.run(tool)
                raw["warmup"][tool] = p.raw()
                status = "ok" if not p.problems else f"{len(p.problems)} PROBLEMS"
                print(
                    f"  {tool:<14} {p.wall:6.2f} s {p.cpu_us_per_value:6.0f} us/value  {p.values}"
                    f" values, outlets per PDU {sorted(set(p.outlets))}: {status}"
                )
                if p.problems:
                    for line in p.problems[:10]:
                        print(f"    {line}")
                    raise RuntimeError(f"{tool} did not read every value: not timing it")

            polls: dict[str, list[Poll]] = {t: [] for t in TOOLS}
            raw["rounds"] = []
            print()
            print(
                "per round: wall, CPU us per value, o = CPU s of other users' processes meanwhile"
            )
            print(f"{'round':<6} {'order':<34} " + " ".join(f"{t:>24}" for t in TOOLS))
            for r in range(args.rounds):
                order = [TOOLS[(r + k) % len(TOOLS)] for k in range(len(TOOLS))]
                got: dict[str, Poll] = {}
                for tool in order:
                    p = bench.run(tool)
                    if p.problems:
                        raw["failed_poll"] = {"round": r + 1, "tool": tool} | p.raw()
                        print(
                            f"round {r + 1}: {tool} FAILED the check ({len(p.problems)} PDUs):"
                            f" wall {p.wall:.2f} s, CPU {p.cpu:.2f} s, agents CPU"
                            f" {p.agent_cpu:.2f} s, other users' CPU {p.others_cpu:.2f} s,"
                            f" load average {load_average()}"
                        )
                        for line in p.problems[:10]:
                            print(f"    {line}")
                        raise RuntimeError(f"round {r + 1}: {tool} did not read every value")
                    got[tool] = p
                    polls[tool].append(p)
                raw["rounds"].append(
                    {"round": r + 1, "order": order, "load_average": load_average()}
                    | {t: got[t].raw() for t in TOOLS}
                )
                cells = " ".join(f"{got[t].cell():>24}" for t in TOOLS)
                print(f"{r + 1:<6} {' > '.join(order):<34} {cells}")
            raw["summary"] = report(polls, total_values, os.cpu_count() or 1)
            retried = sum(p.extra.get("snmp_packets_retried", 0) for p in polls["snmp_exporter"])
            w_in = statistics.median(p.extra["snmp_responses"] for p in polls["wattbit"])
            w_vb = statistics.median(p.extra["var_binds"] for p in polls["wattbit"])
            e_out = statistics.median(p.extra["snmp_packets_sent"] for p in polls["snmp_exporter"])
            print(
                f"SNMP messages per poll: wattbit received {w_in:.0f} ({w_vb:.0f} var-binds,"
                f" {w_vb / total_values:.2f} per value), snmp_exporter sent {e_out:.0f};"
                f" net-snmp ran {len(pdus) * len(cols.roots)} snmpbulkwalk"
            )
            failures = sum(p.extra.get("failures", 0) for p in polls["wattbit"])
            print(
                f"retries/failures during timed rounds: snmp_exporter packets retried {retried:g},"
                f" wattbit poll failures {failures}"
            )
            raw["load_average_end"] = load_average()
            print(f"load average at end: {raw['load_average_end']} (start: {load_start})")
            if args.profile:
                raw["profile"] = profile_wattbit(
                    bench,
                    args.profile,
                    raw["summary"]["wattbit"]["cpu_s_median"],
                    int(statistics.median(p.extra["snmp_responses"] for p in polls["wattbit"])),
                )
        except KeyboardInterrupt:
            print("\ninterrupted: cleaning up", file=sys.stderr)
            return 130
        finally:
            # cleanup (the ExitStack, next) must not be cut short by a second signal
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            if args.json:
                args.json.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
