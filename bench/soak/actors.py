"""The soak's main process at work: PDU specs, the scraper, sampler, stalled TLS, churn."""

from __future__ import annotations

import contextlib
import http.client
import random
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.soak.common import (
    FAULTS,
    JOULES_PER_UNIT,
    PROFILE,
    RETRIES,
    SCRAPE_TIMEOUT_S,
    TICKS_PER_S,
    TIMEOUT_S,
    proc_sample,
    udp_sockets,
)
from collector.demo.procs import Procs

# --- the main process: the PDUs, the servers, the scraper ----------------------------------------


@dataclass
class PduSpec:
    """One simulated PDU as the farm and the collector's configuration see it."""

    name: str
    community: str
    kind: str
    recording: str
    port: int = 0


def fault_plan(n: int) -> list[str]:
    """Each PDU's kind: FAULTS' shares of n (each at least once), the rest good, shuffled."""
    kinds: list[str] = []
    for kind, share in FAULTS.items():
        kinds += [kind] * max(1, round(n * share))
    kinds = kinds[: n // 2]  # a small site stays mostly good
    kinds += ["good"] * (n - len(kinds))
    random.Random(1).shuffle(kinds)
    return kinds


def collector_config(pdus: list[PduSpec], interval: float, concurrency: int, state: Path) -> str:
    """The collector's YAML: every PDU with its own community, the profile named."""
    lines = [f"interval: {interval:g}s", f"concurrency: {concurrency}", f"state_dir: {state}"]
    lines.append("auths:")
    lines += [f"  {p.community}: {{version: 2c, community: {p.community}}}" for p in pdus]
    lines.append("pdus:")
    for p in pdus:
        lines += [
            f"  - name: {p.name}",
            f"    address: 127.0.0.1:{p.port}",
            f"    auth: {p.community}",
            f"    profile: {PROFILE}",
            f"    timeout: {TIMEOUT_S:g}s",
            f"    retries: {RETRIES}",
        ]
    return "\n".join(lines) + "\n"


_SAMPLE = re.compile(
    rb"^(wattbit_pdu_up|wattbit_pdu_energy_joules_total|wattbit_pdu_poll_failures_total"
    rb"|wattbit_pdu_poll_duration_seconds)\{([^}]*)\} (\S+)",
    re.M,
)
_LABEL = re.compile(rb'(\w+)="([^"]*)"')


class Freshness:
    """What the collector's /metrics says about each PDU: when it was read, up, failures."""

    def __init__(self, epoch: float, names: list[str]) -> None:
        self.epoch = epoch
        self.lock = threading.Lock()
        self.reads: dict[str, list[float]] = {n: [] for n in names}  # distinct read times
        self.down: list[tuple[float, str]] = []  # (scrape time, pdu) with up 0 or missing
        self.failures: dict[tuple[str, str], float] = {}  # latest counters
        self.up: dict[str, float] = {}  # latest
        self.durations: dict[str, float] = {}  # latest poll durations
        self.marks: dict[str, dict[tuple[str, str], float]] = {}

    def update(self, now: float, body: bytes) -> None:
        """Read one scrape of the collector."""
        up: dict[str, float] = {}
        read: dict[str, float] = {}
        failures: dict[tuple[str, str], float] = {}
        durations: dict[str, float] = {}
        for m in _SAMPLE.finditer(body):
            labels = {k.decode(): v.decode() for k, v in _LABEL.findall(m[2])}
            value = float(m[3])
            if m[1] == b"wattbit_pdu_up":
                up[labels["pdu"]] = value
            elif m[1] == b"wattbit_pdu_poll_failures_total":
                failures[(labels["pdu"], labels["reason"])] = value
            elif m[1] == b"wattbit_pdu_poll_duration_seconds":
                durations[labels["pdu"]] = value
            else:
                read[labels["pdu"]] = self.epoch + value / JOULES_PER_UNIT / TICKS_PER_S
        with self.lock:
            self.failures, self.up, self.durations = failures, up, durations
            for name, reads in self.reads.items():
                if up.get(name) != 1.0 or name not in read:
                    self.down.append((now, name))
                elif not reads or read[name] != reads[-1]:
                    reads.append(read[name])

    def mark(self, phase: str) -> None:
        """Remember the failure counters as they are at the start of a phase."""
        with self.lock:
            self.marks[phase] = dict(self.failures)

    def polled_twice(self) -> bool:
        """Every PDU read at least twice (the collector then knows every walk's length)."""
        with self.lock:
            return all(len(r) >= 2 for r in self.reads.values())


@dataclass
class Scrape:
    """One scrape of one server by the well-behaved client."""

    t: float
    target: str
    seconds: float
    status: int  # 0: no answer
    error: str = ""
    retried: bool = False
    size: int = 0  # bytes of the body
    series: int = 0  # samples on /metrics (lines that are not comments)


class Scraper(threading.Thread):
    """Both /metrics every `every` s, one after the other, on kept-alive connections, timed."""

    def __init__(
        self,
        targets: dict[str, int],
        every: float,
        fresh: Freshness,
        tls: dict[str, ssl.SSLContext] | None = None,
    ) -> None:
        super().__init__(name="soak-scraper", daemon=True)
        self.targets = targets
        self.tls = tls or {}
        self.every = every
        self.fresh = fresh
        self.also: list[Callable[[float, bytes], None]] = []  # more readers of the collector's
        self.conns: dict[str, http.client.HTTPConnection | None] = dict.fromkeys(targets)
        self.records: list[Scrape] = []
        self.halt = threading.Event()

    def run(self) -> None:
        """Scrape until halted; one target at a time so that no scrape waits on another's work."""
        due = time.monotonic()
        while not self.halt.is_set():
            for name in self.targets:
                rec, body = self.scrape(name)
                self.records.append(rec)
                if name == "collector" and body:
                    self.fresh.update(rec.t, body)
                    for read in self.also:
                        read(rec.t, body)
            due = max(due + self.every, time.monotonic())
            self.halt.wait(due - time.monotonic())
        for conn in self.conns.values():
            if conn is not None:
                conn.close()

    def scrape(self, name: str) -> tuple[Scrape, bytes]:
        """One GET /metrics, timed from the first try; a closed kept-alive connection is retried."""
        # Once, as Go's HTTP client (Prometheus') retries an idempotent request on a kept-alive
        # connection the server closed while it was idle.
        t, start = time.time(), time.monotonic()
        for attempt in (0, 1):
            conn = self.conns[name]
            reused = conn is not None
            if conn is None:
                port = self.targets[name]
                if name in self.tls:
                    conn = http.client.HTTPSConnection(
                        "127.0.0.1", port, timeout=SCRAPE_TIMEOUT_S, context=self.tls[name]
                    )
                else:
                    conn = http.client.HTTPConnection("127.0.0.1", port, SCRAPE_TIMEOUT_S)
                self.conns[name] = conn
            try:
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self.conns[name] = None
                if reused and attempt == 0 and time.monotonic() - start < SCRAPE_TIMEOUT_S:
                    continue
                err = f"{type(exc).__name__}: {exc}"
                return Scrape(t, name, time.monotonic() - start, 0, err, attempt > 0), b""
            if resp.will_close:
                conn.close()
                self.conns[name] = None
            ok = resp.status == 200
            took = time.monotonic() - start
            series = sum(1 for ln in body.split(b"\n") if ln and not ln.startswith(b"#"))
            rec = Scrape(t, name, took, resp.status, "", attempt > 0, len(body), series)
            return rec, body if ok else b""
        raise AssertionError("unreachable")


class Sampler(threading.Thread):
    """fds, threads, RSS and CPU of the servers (and the collector's UDP drops), every `every` s."""

    def __init__(self, pids: dict[str, int], every: float) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.pids = pids
        self.every = every
        self.samples: list[dict[str, Any]] = []
        self.halt = threading.Event()
        self.phase = "warmup"  # set by the main thread; labels the samples taken from then on

    def sample(self, phase: str | None = None) -> None:
        """Take one sample now, labelled with `phase` or the current one."""
        s: dict[str, Any] = {"t": time.time(), "phase": phase or self.phase}
        for name, pid in self.pids.items():
            s[name] = proc_sample(pid)
        if "collector" in self.pids:
            s["collector_udp"] = udp_sockets(self.pids["collector"])
        self.samples.append(s)

    def run(self) -> None:
        """Sample until halted."""
        due = time.monotonic()
        while not self.halt.is_set():
            self.sample()
            due = max(due + self.every, time.monotonic())
            self.halt.wait(due - time.monotonic())


class StalledTls(threading.Thread):
    """Rounds of `clients` connections to a TLS port that send 6 bytes of a ClientHello and
    stall `hold` s (bench/tls_stall.py's attack), until halted."""

    def __init__(self, port: int, clients: int, hold: float) -> None:
        super().__init__(name="soak-stalled-tls", daemon=True)
        self.port, self.clients, self.hold = port, clients, hold
        self.rounds = 0
        self.opened = 0
        self.halt = threading.Event()

    def run(self) -> None:
        """One round after another."""
        from tests.support.tlsstall import CLIENT_HELLO_START

        while not self.halt.is_set():
            socks: list[socket.socket] = []
            try:
                for _ in range(self.clients):
                    if self.halt.is_set():
                        break
                    sk = socket.socket()
                    sk.settimeout(5)
                    try:
                        sk.connect(("127.0.0.1", self.port))
                        sk.sendall(CLIENT_HELLO_START)
                    except OSError:
                        sk.close()
                        continue
                    socks.append(sk)
                self.opened += len(socks)
                self.halt.wait(self.hold)
            finally:
                for sk in socks:
                    sk.close()
            self.rounds += 1


class Churn(threading.Thread):
    """Loop devices and veth pairs created, used and destroyed while the agent runs (root).

    Every `every` s: `loops` loop devices over sparse files, 1 MiB written to each with
    O_DIRECT (so the block layer sees I/O), then detached; `veths` veth pairs brought up and
    deleted. A disk or NIC that is gone must leave the agent's /metrics (issue 26: 2-4).
    """

    def __init__(self, work: Path, loops: int, veths: int, every: float) -> None:
        super().__init__(name="soak-churn", daemon=True)
        self.work, self.loops, self.veths, self.every = work, loops, veths, every
        self.cycles = 0
        self.disks = 0
        self.nics = 0
        self.errors: Counter[str] = Counter()
        self.halt = threading.Event()

    def _run(self, *cmd: str) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.errors[cmd[0]] += 1
            return ""
        return r.stdout.strip()

    def run(self) -> None:
        """Cycle until halted."""
        backing = [self.work / f"churn-{i}.img" for i in range(self.loops)]
        for f in backing:
            with f.open("wb") as fh:
                fh.truncate(16 * 1024 * 1024)
        while not self.halt.is_set():
            due = time.monotonic() + self.every
            devs = [
                d for d in (self._run("losetup", "--find", "--show", str(f)) for f in backing) if d
            ]
            for d in devs:
                self._run("dd", "if=/dev/zero", f"of={d}", "bs=64k", "count=16", "oflag=direct",
                          "status=none")  # fmt: skip
            names = [f"wbch{self.cycles % 1000}x{i}" for i in range(self.veths)]
            for n in names:
                if self._run("ip", "link", "add", n, "type", "veth", "peer", "name", n + "p") == "":
                    self._run("ip", "link", "set", n, "up")
            self.halt.wait(max(0.5, (due - time.monotonic()) / 2))  # seen by a scrape or two
            for d in devs:
                self._run("losetup", "-d", d)
            for n in names:
                self._run("ip", "link", "del", n)
            self.disks += len(devs)
            self.nics += len(names)
            self.cycles += 1
            self.halt.wait(max(0.0, due - time.monotonic()))
        for f in backing:
            with contextlib.suppress(OSError):
                f.unlink()


def http_ok(port: int, tls: ssl.SSLContext | None = None) -> bool:
    """GET /metrics answers 200."""
    conn = (
        http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=tls)
        if tls is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    )
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def start(procs: Procs, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
    """A child in its own session (Procs), sent SIGTERM should this process die without cleanup."""
    guard = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []
    return procs.start(name, [*guard, *cmd])


def stop_children(
    children: dict[str, subprocess.Popen[bytes]], timeout: float = 30.0
) -> dict[str, Any]:
    """SIGTERM to each at once, then wait: exit code and seconds to exit (SIGKILL past timeout)."""
    # Never a second SIGTERM: it could land after the collector's handler is gone (asyncio.run
    # has returned) and kill it with -15 in the middle of a clean shutdown.
    begin = time.monotonic()
    out: dict[str, Any] = {}
    for name, p in children.items():
        if p.poll() is not None:
            out[name] = {"exit_code": p.returncode, "seconds": 0.0, "killed": False,
                         "exited_before_sigterm": True}  # fmt: skip
        else:
            p.terminate()
    for name, p in children.items():
        if name in out:
            continue
        try:
            code, killed = p.wait(max(0.1, begin + timeout - time.monotonic())), False
        except subprocess.TimeoutExpired:
            p.kill()
            code, killed = p.wait(), True
        out[name] = {"exit_code": code, "seconds": time.monotonic() - begin, "killed": killed}
    return out


def hold(until: float, procs: Procs, stopped: frozenset[str] = frozenset()) -> None:
    """Sleep until `until` (time.time()), raising as soon as a child not `stopped` dies."""
    while (left := until - time.time()) > 0:
        for name, p in procs.procs:
            if name not in stopped and p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode}:\n{procs.log_tail(name)}")
        time.sleep(min(1.0, left))


def log_counts(path: Path) -> dict[str, int]:
    """Lines of a child's log: all, warnings, errors, tracebacks."""
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = text.splitlines()
    return {
        "lines": len(lines),
        "warnings": sum("WARNING" in x for x in lines),
        "errors": sum("ERROR" in x or "CRITICAL" in x for x in lines),
        "tracebacks": text.count("Traceback"),
    }
