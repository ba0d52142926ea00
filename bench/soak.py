"""Soak of the site collector and the agent under hostile peers (not in CI: it runs for long).

    .venv/bin/python bench/soak.py [--minutes 30] [--pdus 100] [--slow-clients 200] [--out FILE]

Everything runs on 127.0.0.1, each process in a session of its own (with a parent-death signal),
and is stopped on the way out, Ctrl-C included:

* a PDU farm (this file, `_pdus`): one asyncio loop serving --pdus SIMULATED APC rPDU2 PDUs, a
  UDP port each, through the demo's responder (collector/pdu/responder.py), from the real
  AP8641 recording (half with its 24 outlets, half extended to 48 as bench/pdu_poll.py does).
  Every answer carries the time it was made in the PDU's energy register
  (rPDU2DeviceStatusEnergy, a tenth of a second a unit), so the collector's
  wattbit_pdu_energy_joules_total says when it last read that PDU;
* a real `wattbit collector` polling all of them (--interval, --concurrency, timeout 2 s,
  1 retry) and a real `wattbit agent` (blockio backend --agent-blockio: eBPF as root, and nic);
* a well-behaved scraper (this process) getting both /metrics every --scrape-every seconds on
  kept-alive connections, as Prometheus does, timing each scrape (a failed one counts with the
  time it took).

Phases: a warm-up (every PDU read twice; not measured), an idle phase (--idle-minutes, default
10 % of --minutes and at least one minute: every PDU healthy, no attack), then the attack until
--minutes have passed:

* a fifth of the PDUs turn hostile: dead (port closed, so ICMP refused; or a blackhole), slow
  (answers 1.5 s, 2.4 s or 5 s late, against the 2 s timeout) or garbage (answers cut in half,
  or random bytes);
* an attacker process (`_attack`, niced: at a site the attackers have CPUs of their own) keeps
  --slow-clients slowloris connections (half on each server, all on the collector when the
  agent serves HTTPS, below: request headers trickled a byte
  a second, reconnecting when dropped), --idle-clients connections that never send a byte,
  --body-clients requests that announce a body and never send it (GET /metrics and, on the
  collector, POST /api/v1/runs; shared out the same way; issue 34), reconnecting when answered,
  and floods the collector's SNMP socket (found through /proc/PID/fd and /proc/PID/net/udp)
  with --flood-pps SNMP datagrams, half from a port of its own and half, as root (raw socket),
  spoofed from the good PDUs' addresses.

* with --stalled-tls N (default 1000; 0 turns it off), the agent serves HTTPS (a self-signed
  certificate; the scraper checks it) and this process keeps rounds of N connections to it
  that send 6 bytes of a ClientHello and stall --stalled-tls-hold s (bench/tls_stall.py);
* with --churn (root), loop devices and veth pairs are created, written to (O_DIRECT) or
  brought up, and destroyed every --churn-every s (--churn-loops, --churn-veths a cycle), so
  the agent sees disks and NICs come and go for the whole attack; the agent's series count on
  /metrics per phase says whether gone ones leave.

Then, beyond --minutes, a recovery phase (--recovery-minutes, default as long as the idle one):
the attacker gone and every PDU healthy again (the refused ones on their old ports), to see the
servers' fds come back down, the hostile PDUs read again, and /metrics latency once more without
an attack (a control for the machine's own drift).

Every --sample-every seconds: fds, threads, RSS and CPU of both servers, and the drops of the
collector's UDP sockets. At the end, printed and written to --out as JSON: fds, threads and RSS
when the attack is in full swing (after a ramp) and at its end, their maxima and slopes per
10 minutes (least squares over the attack after the ramp); polls of good PDUs missed (two reads
more than 1.5 intervals apart) and the poll cycles in which any good PDU was stale; the failure
counters of every PDU by reason; /metrics p50/p99 idle, under attack and in recovery for each
server; how soon the hostile PDUs came back; exit codes after SIGTERM and processes left over.
Slopes from a short run (a steady window under 10 minutes) are mostly noise.

Goals (the issue's): fds, threads and RSS flat (slope at most FLAT per 10 minutes); every good
PDU fresh every cycle (no missed poll, never down, no failure counted); /metrics p99 under attack
at most twice the idle p99, for each server. Also checked: both exit 0 on SIGTERM and nothing is
left running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import cpu_seconds as proc_cpu  # noqa: E402
from bench.harness import interruptible as signals  # noqa: E402
from bench.harness import load_average as loadavg  # noqa: E402
from bench.harness import machine as harness_machine  # noqa: E402
from collector.demo.procs import Procs, free_port, wait_for  # noqa: E402
from collector.pdu.responder import Responder  # noqa: E402
from collector.pdu.snmprec import read_snmprec  # noqa: E402
from exporters.snmp.types import Value  # noqa: E402
from tests.support.berbuild import integer, oid_content, response, var_bind  # noqa: E402
from tests.support.synthetic_pdu import SOURCE, synthesize  # noqa: E402
from tests.support.synthetic_pdu import read_snmprec as read_rows  # noqa: E402

PROFILE = "apc_rpdu2"
DEVICE_ENERGY = "1.3.6.1.4.1.318.1.1.26.4.3.1.9.1"  # rPDU2DeviceStatusEnergy, 0.1 kWh a unit
JOULES_PER_UNIT = 360_000.0  # the apc_rpdu2 profile's scale of that register
TICKS_PER_S = 10  # the farm writes the time of each answer there, in tenths of a second
OUTLET_POWER = (1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 9, 4, 3, 1, 7)  # rPDU2OutletMeteredStatusPower
TIMEOUT_S, RETRIES = 2.0, 1
# hostile PDUs: kind -> share of all PDUs
FAULTS = {
    "refused": 0.04,  # port closed: ICMP port unreachable
    "blackhole": 0.04,  # bound, never answers
    "slow_ok": 0.03,  # inside the timeout: only the poll takes longer
    "slow_late": 0.03,  # past the first try's timeout, before the retry's: answers still count
    "slow_dead": 0.02,  # past both tries
    "garbage_cut": 0.02,  # every answer cut in half (its header still readable)
    "garbage_noise": 0.02,  # random bytes
}
DELAYS = {"slow_ok": 1.5, "slow_late": 2.4, "slow_dead": 5.0}
FLAT = {"fds": 10.0, "threads": 1.0, "rss_mib": 2.0}  # most growth per 10 minutes called flat
STALE_GAP = 1.5  # intervals between two reads of a PDU past which a poll was missed
LATENCY_RATIO_GOAL = 2.0
SCRAPE_TIMEOUT_S = 10.0  # Prometheus' default scrape timeout
SLOW_PREFIX = b"GET /metrics HTTP/1.1\r\nHost: soak\r\n"
SLOW_TRICKLE = b"X-Soak: " + b"a" * 8000  # never complete at a byte a second
# Requests announcing a body they never send (issue 34), unauthenticated.
BODY_HEADS = {
    "get": b"GET /metrics HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n",
    "post": b"POST /api/v1/runs HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n",
}
AFTER_S = 5.0  # from the attacker's exit to the sample of what it left behind
STAGGER_S = 10.0  # hostile clients start spread over this, as connections from many hosts do
LOOPBACK = socket.inet_aton("127.0.0.1")

# --- /proc ---------------------------------------------------------------------------------------


def proc_sample(pid: int) -> dict[str, float] | None:
    """fds, threads, RSS (MiB) and CPU seconds of a live process; None once it is gone."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        status = Path(f"/proc/{pid}/status").read_text()
        cpu = proc_cpu(pid)
    except (OSError, ValueError):
        return None
    threads = re.search(r"^Threads:\s+(\d+)", status, re.M)
    rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    if threads is None or rss is None:
        return None  # a zombie has no VmRSS
    return {"fds": fds, "threads": int(threads[1]), "rss_mib": int(rss[1]) / 1024, "cpu_s": cpu}


def udp_sockets(pid: int) -> list[dict[str, Any]]:
    """The UDP sockets a process holds: family, local port, receive queue bytes and drops."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
    out = []
    for family in ("udp", "udp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{family}").read_text().splitlines()[1:]:
                f = line.split()
                if len(f) > 12 and int(f[9]) in inodes:
                    out.append(
                        {
                            "family": family,
                            "port": int(f[1].rsplit(":", 1)[1], 16),
                            "rx_queue": int(f[4].split(":")[1], 16),
                            "drops": int(f[12]),
                        }
                    )
    return out


def session_members(sids: set[int]) -> list[str]:
    """Live processes in any of these sessions (each child leads its own): 'pid comm'."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()
        if int(f[3]) in sids and f[0] != "Z":
            out.append(f"{d} {comm}")
    return out


# --- the PDU farm (child process) ----------------------------------------------------------------


@dataclass(eq=False)
class FarmPdu:
    """One simulated PDU of the farm."""

    name: str
    kind: str
    responder: Responder
    transport: asyncio.DatagramTransport | None = None
    requests: int = 0
    answers: int = 0


class Farm:
    """Every simulated PDU, healthy until turn_hostile()."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.epoch: float = spec["epoch"]
        self.hostile = False
        self.rnd = random.Random(7)
        walks = {r: read_snmprec(Path(r)) for r in {p["recording"] for p in spec["pdus"]}}
        self.pdus = [
            FarmPdu(p["name"], p["kind"], Responder(walks[p["recording"]], p["community"]))
            for p in spec["pdus"]
        ]

    def turn_hostile(self) -> None:
        """From now on each PDU behaves as its kind says; the refused ones close their ports."""
        self.hostile = True
        for p in self.pdus:
            if p.kind == "refused" and p.transport is not None:
                p.transport.close()

    async def heal(self) -> None:
        """Every PDU healthy again; the refused ones bind their old ports again."""
        self.hostile = False
        loop = asyncio.get_running_loop()
        for p in self.pdus:
            if p.kind == "refused" and p.transport is not None and p.transport.is_closing():
                port = p.transport.get_extra_info("sockname")[1]
                with contextlib.suppress(OSError):  # taken meanwhile: it stays refused
                    await loop.create_datagram_endpoint(
                        lambda p=p: FarmPort(self, p),  # type: ignore[misc]
                        local_addr=("127.0.0.1", port),
                    )

    def stats(self) -> dict[str, Any]:
        """Requests and answers per kind."""
        req: Counter[str] = Counter()
        ans: Counter[str] = Counter()
        for p in self.pdus:
            req[p.kind] += p.requests
            ans[p.kind] += p.answers
        return {"requests_by_kind": dict(req), "answers_by_kind": dict(ans)}


class FarmPort(asyncio.DatagramProtocol):
    """One PDU's UDP port."""

    def __init__(self, farm: Farm, pdu: FarmPdu) -> None:
        self.farm = farm
        self.pdu = pdu

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio: bound."""
        self.pdu.transport = cast("asyncio.DatagramTransport", transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """Answer one request as this PDU's kind says."""
        pdu = self.pdu
        pdu.requests += 1
        kind = pdu.kind if self.farm.hostile else "good"
        if kind in ("blackhole", "refused"):
            return
        stamp = round((time.time() - self.farm.epoch) * TICKS_PER_S)
        pdu.responder.set({DEVICE_ENERGY: Value("Integer32", stamp)})
        reply = pdu.responder.answer(data)
        if reply is None:
            return
        if kind == "garbage_cut":
            reply = reply[: len(reply) // 2]
        elif kind == "garbage_noise":
            reply = self.farm.rnd.randbytes(len(reply))
        delay = DELAYS.get(kind)
        if delay is None:
            self._send(reply, addr)
        else:
            asyncio.get_running_loop().call_later(delay, self._send, reply, addr)

    def _send(self, reply: bytes, addr: Any) -> None:
        if self.pdu.transport is not None and not self.pdu.transport.is_closing():
            self.pdu.transport.sendto(reply, addr)
            self.pdu.answers += 1


async def _farm(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    farm = Farm(spec)
    loop = asyncio.get_running_loop()
    for p in farm.pdus:
        await loop.create_datagram_endpoint(
            lambda p=p: FarmPort(farm, p),  # type: ignore[misc]
            local_addr=("127.0.0.1", 0),
        )
    ports = {
        p.name: int(p.transport.get_extra_info("sockname")[1])
        for p in farm.pdus
        if p.transport is not None
    }
    ready = Path(spec["ready"])
    ready.with_suffix(".tmp").write_text(json.dumps({"ports": ports}))
    ready.with_suffix(".tmp").rename(ready)  # whole, or not there
    stop = asyncio.Event()
    healing: set[asyncio.Task[None]] = set()  # a reference, so that it is not collected
    loop.add_signal_handler(signal.SIGUSR1, farm.turn_hostile)
    loop.add_signal_handler(signal.SIGUSR2, lambda: healing.add(loop.create_task(farm.heal())))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for p in farm.pdus:
        if p.transport is not None:
            p.transport.close()
    Path(spec["stats"]).write_text(json.dumps(farm.stats()))


# --- the attacker (child process) ----------------------------------------------------------------


@dataclass
class AttackStats:
    """What the attacker did and what the servers did to its connections."""

    connects: Counter[str] = field(default_factory=Counter)
    connect_failures: Counter[str] = field(default_factory=Counter)
    dropped_by_server: Counter[str] = field(default_factory=Counter)
    lifetimes: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    answers: Counter[str] = field(default_factory=Counter)  # first line of what a server sent
    flood: Counter[str] = field(default_factory=Counter)
    flood_ports: list[int] = field(default_factory=list)

    def dump(self) -> dict[str, Any]:
        """As plain data, lifetimes summarised."""
        return {
            "connects": dict(self.connects),
            "connect_failures": dict(self.connect_failures),
            "dropped_by_server": dict(self.dropped_by_server),
            "open_at_end": {k: n - self.dropped_by_server[k] for k, n in self.connects.items()},
            "lifetime_s": {k: summary(v) for k, v in sorted(self.lifetimes.items())},
            "answers": dict(self.answers),
            "flood": dict(self.flood),
            "flood_target_ports": self.flood_ports,
        }


async def hang(
    target: str, port: int, kind: str, trickle: float, stats: AttackStats, rnd: random.Random
) -> None:
    """One hostile client: connect, trickle headers (slow) or say nothing (idle); again when cut."""
    key = f"{target}/{kind}"
    await asyncio.sleep(rnd.uniform(0, STAGGER_S))
    while True:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port), SCRAPE_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            stats.connect_failures[key] += 1
            await asyncio.sleep(1.0)
            continue
        stats.connects[key] += 1
        start = time.monotonic()
        eof = asyncio.ensure_future(reader.read(4096))
        try:
            if kind == "body":  # the run API only on the collector
                post = target == "collector" and rnd.random() < 0.5
                writer.write(BODY_HEADS["post" if post else "get"])
            if kind == "slow":
                writer.write(SLOW_PREFIX)
                i = 0
                while not eof.done():
                    await asyncio.wait({eof}, timeout=trickle)
                    if not eof.done():
                        writer.write(SLOW_TRICKLE[i % len(SLOW_TRICKLE) :][:1])
                        i += 1
            data = await eof
            if data:
                first = data.split(b"\r\n", 1)[0][:60].decode("latin-1")
                stats.answers[f"{key}: {first}"] += 1
        except OSError:
            pass  # reset by the server: dropped all the same
        finally:
            eof.cancel()
            writer.close()
        stats.dropped_by_server[key] += 1
        stats.lifetimes[key].append(time.monotonic() - start)
        # Answered at once when the server does not wait for a body: a second apart, so that
        # 300 of them open ~300 connections a second (the issue's figure), not a thousand.
        await asyncio.sleep(rnd.uniform(0.5, 1.5) if kind == "body" else rnd.uniform(0.1, 0.5))


def flood_datagrams(communities: list[str], rnd: random.Random) -> list[bytes]:
    """The flood's datagrams: Responses a PDU could send, cut ones, big ones, noise."""
    out = []
    for i in range(256):
        kind = i % 10
        n = 400 if kind == 9 else rnd.randint(1, 25)  # about 9 KB for the big ones
        community = rnd.choice(communities) if kind < 6 else rnd.randbytes(8).hex()
        vbs = [
            var_bind(
                oid_content((*OUTLET_POWER, rnd.randint(1, 48))), integer(rnd.randint(0, 3000))
            )
            for _ in range(n)
        ]
        msg = response(vbs, rnd.randint(1, 2**31 - 1), community.encode())
        if kind in (6, 7):
            msg = msg[: len(msg) // 2]
        elif kind == 8:
            msg = rnd.randbytes(rnd.randint(1, 1500))
        out.append(msg)
    return out


def spoofed(sport: int, dport: int, payload: bytes) -> bytes:
    """An IPv4 + UDP packet 127.0.0.1:sport -> 127.0.0.1:dport (raw(7) fills checksum and id)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload  # 0: no checksum
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0, LOOPBACK, LOOPBACK
    )
    return ip + udp


async def flood(spec: dict[str, Any], stats: AttackStats) -> None:
    """SNMP datagrams at the collector's UDP sockets, from our own port and spoofed from PDUs'."""
    pps: float = spec["flood_pps"]
    if pps <= 0:
        return
    pool = flood_datagrams(spec["communities"], random.Random(11))
    own = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    own.bind(("127.0.0.1", 0))
    own.setblocking(False)
    raw = None
    spoof: list[int] = spec["spoof_ports"]
    if spoof and os.geteuid() == 0:
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        raw.setblocking(False)
    ports: list[int] = []
    next_scan = 0.0
    budget, last, i = 0.0, time.monotonic(), 0
    try:
        while True:
            now = time.monotonic()
            if now >= next_scan:  # the collector could open another socket: look again
                found = udp_sockets(spec["collector_pid"])
                ports = [s["port"] for s in found if s["family"] == "udp"]
                stats.flood_ports = ports
                next_scan = now + 5.0
            budget = min(budget + (now - last) * pps, pps)  # never more than a second's worth
            last = now
            while budget >= 1 and ports:
                data, dport = pool[(i // 2) % len(pool)], ports[i % len(ports)]
                try:
                    if raw is not None and i % 2:
                        packet = spoofed(spoof[(i // 2) % len(spoof)], dport, data)
                        raw.sendto(packet, ("127.0.0.1", 0))
                        stats.flood["spoofed_from_pdus"] += 1
                    else:
                        own.sendto(data, ("127.0.0.1", dport))
                        stats.flood["from_own_port"] += 1
                except OSError:
                    stats.flood["send_errors"] += 1
                i += 1
                budget -= 1
            await asyncio.sleep(0.01)
    finally:
        own.close()
        if raw is not None:
            raw.close()


async def _attack(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    os.nice(10)  # the attackers' CPU is not the servers' at a site; here it must not starve them
    stats = AttackStats()
    rnd = random.Random(5)
    out = Path(spec["stats"])
    tasks = [asyncio.ensure_future(flood(spec, stats))]
    for t in spec["targets"]:
        for kind in ("slow", "idle", "body"):
            tasks += [
                asyncio.ensure_future(
                    hang(t["name"], t["port"], kind, spec["trickle_s"], stats, rnd)
                )
                for _ in range(t.get(kind, 0))
            ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 10)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError("an attack task failed") from task.exception()
        out.write_text(json.dumps(stats.dump()))  # readable while it runs
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out.write_text(json.dumps(stats.dump()))


# --- numbers -------------------------------------------------------------------------------------


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile (0..1), interpolated; nan without data."""
    if not xs:
        return math.nan
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=1000, method="inclusive")[round(q * 1000) - 1]


def summary(xs: list[float]) -> dict[str, float]:
    """n, p10, median, p90, max."""
    return {
        "n": len(xs),
        "p10": quantile(xs, 0.1),
        "median": quantile(xs, 0.5),
        "p90": quantile(xs, 0.9),
        "max": max(xs, default=math.nan),
    }


def slope_per_10min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per 10 minutes; nan with fewer than 3 points."""
    if len(points) < 3:
        return math.nan
    xs, ys = zip(*points, strict=True)
    if len(set(ys)) == 1:
        return 0.0
    return statistics.linear_regression(xs, ys).slope * 600


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


# --- analysis ------------------------------------------------------------------------------------


def latency(records: list[Scrape], phases: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """p50/p99 of each server's scrapes per phase and the p99 ratio attack / idle."""
    out: dict[str, Any] = {}
    for target in sorted({r.target for r in records}):
        per: dict[str, Any] = {}
        for phase, (a, b) in phases.items():
            rs = [r for r in records if r.target == target and a <= r.t < b]
            ms = [r.seconds * 1e3 for r in rs]
            per[phase] = {
                "scrapes": len(rs),
                "failed": sum(r.status != 200 for r in rs),
                "retried": sum(r.retried for r in rs),
                "p50_ms": quantile(ms, 0.5),
                "p99_ms": quantile(ms, 0.99),
                "max_ms": max(ms, default=math.nan),
                "body_bytes_median": quantile([float(r.size) for r in rs if r.size], 0.5),
                "errors": dict(Counter(r.error or str(r.status) for r in rs if r.status != 200)),
            }
        ratio = per["attack"]["p99_ms"] / per["idle"]["p99_ms"]
        per["p99_ratio"] = ratio
        per["goal_met"] = ratio <= LATENCY_RATIO_GOAL and per["attack"]["failed"] == 0
        out[target] = per
    return out


def resources(
    samples: list[dict[str, Any]], name: str, marks: dict[str, float], ramp: float
) -> dict[str, Any]:
    """One server's fds, threads, RSS around the attack, their slopes, and its CPU per phase."""
    # before: the last idle sample; attack_start: the first after the ramp (every attacker
    # connected and cycled once); end: the last under attack; after_attack: once the attacker's
    # connections are gone; end_of_run: after the recovery. The slope is fitted after the ramp.
    attack = marks["attack"]
    have = [s for s in samples if s.get(name)]
    idle = [s for s in have if s["phase"] == "idle"]
    before = [s for s in have if s["phase"] in ("warmup", "idle")]
    during = sorted((s for s in have if s["phase"] == "attack"), key=lambda s: s["t"])
    after = sorted(
        (s for s in have if s["phase"] in ("after_attack", "recovery")), key=lambda s: s["t"]
    )
    steady = [s for s in during if s["t"] >= attack + ramp]
    out: dict[str, Any] = {"samples_steady": len(steady)}
    if not steady:
        return out
    for key, limit in FLAT.items():
        slope = slope_per_10min([(s["t"], s[name][key]) for s in steady])
        out[key] = {
            "before_attack": before[-1][name][key] if before else math.nan,
            "attack_start": steady[0][name][key],
            "end": steady[-1][name][key],
            "after_attack": after[0][name][key] if after else math.nan,
            "end_of_run": after[-1][name][key] if after else math.nan,
            "max": max(s[name][key] for s in during),
            "slope_per_10min": slope,
            "flat": not slope > limit,
        }
    if len(idle) >= 2:
        idle_cpu = (idle[-1][name]["cpu_s"] - idle[0][name]["cpu_s"]) / max(
            idle[-1]["t"] - idle[0]["t"], 1e-9
        )
        attack_cpu = (during[-1][name]["cpu_s"] - before[-1][name]["cpu_s"]) / max(
            during[-1]["t"] - before[-1]["t"], 1e-9
        )
        out["cpu_percent"] = {"idle": 100 * idle_cpu, "attack": 100 * attack_cpu}
    out["flat"] = all(out[k]["flat"] for k in FLAT)
    return out


def missed(reads: list[float], a: float, b: float, interval: float) -> list[float]:
    """When polls of one PDU were missed in [a, b], from the times it was read."""
    # A gap over STALE_GAP intervals between two reads (or from the last read to b) misses
    # about gap / interval - 1 polls: a poll's read lands anywhere within its own duration.
    before = [t for t in reads if t < a]
    inside = [t for t in reads if a <= t <= b]
    prev = before[-1] if before else a
    out: list[float] = []
    for t in inside:
        gap = t - prev
        if gap > STALE_GAP * interval:
            out += [prev + k * interval for k in range(1, max(1, round(gap / interval) - 1) + 1)]
        prev = t
    if b - prev > STALE_GAP * interval:
        out += [prev + k * interval for k in range(1, max(1, int((b - prev) / interval - 0.5)) + 1)]
    return out


def freshness(
    fresh: Freshness,
    pdus: list[PduSpec],
    phases: dict[str, tuple[float, float]],
    interval: float,
    ends: dict[str, float],
) -> dict[str, Any]:
    """Missed polls and stale cycles of good PDUs per phase; failure counters of every kind."""
    good = [p.name for p in pdus if p.kind == "good"]
    out: dict[str, Any] = {"good_pdus": len(good)}
    with fresh.lock:
        reads = {n: list(r) for n, r in fresh.reads.items()}
        down = list(fresh.down)
        marks = {k: dict(v) for k, v in fresh.marks.items()}
        final = dict(fresh.failures)
    for phase, (a, _) in phases.items():
        b = ends[phase]  # the last scrape of the phase
        times: dict[str, list[float]] = {n: missed(reads[n], a, b, interval) for n in good}
        cycles = {int((t - a) // interval) for ts in times.values() for t in ts}
        downs = [(t, n) for t, n in down if a <= t < b and n in good]
        ages = [
            max(0.0, b - max(t for t in reads[n] if t <= b)) for n in good if reads[n]
        ]  # how old each good PDU's reading was at the phase's last scrape
        base = marks.get(phase, {})
        nxt = marks.get(_next_phase(phase), final)
        fails = {
            f"{pdu}/{reason}": v - base.get((pdu, reason), 0.0)
            for (pdu, reason), v in nxt.items()
            if pdu in good and v > base.get((pdu, reason), 0.0)
        }
        out[phase] = {
            "cycles": int((b - a) // interval),
            "missed_polls": sum(len(ts) for ts in times.values()),
            "pdus_with_missed_polls": sorted(n for n, ts in times.items() if ts),
            "stale_cycles": len(cycles),
            "scrapes_with_a_good_pdu_down": len({t for t, _ in downs}),
            "good_pdus_seen_down": sorted({n for _, n in downs}),
            "good_pdu_failures": fails,
            "max_read_age_s_at_end": max(ages, default=math.nan),
            "fresh_every_cycle": not any(times.values()) and not downs and not fails,
        }
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    kinds = {p.name: p.kind for p in pdus}
    base, until = marks.get("attack", {}), marks.get("recovery", final)
    for (pdu, reason), v in until.items():
        if pdu in kinds:
            by_kind[kinds[pdu]][reason] += int(v - base.get((pdu, reason), 0.0))
    out["attack_failures_by_kind"] = {k: dict(c) for k, c in sorted(by_kind.items())}
    if "recovery" in phases:
        out["hostile_recovery"] = recovery(fresh, pdus, phases["recovery"][0], reads)
    return out


def recovery(
    fresh: Freshness, pdus: list[PduSpec], start: float, reads: dict[str, list[float]]
) -> dict[str, Any]:
    """Whether the hostile PDUs came back once healthy, how soon, and their polls' durations."""
    with fresh.lock:
        up, durations = dict(fresh.up), dict(fresh.durations)
    back: dict[str, float] = {}
    for p in pdus:
        if p.kind != "good":
            first = next((t for t in reads[p.name] if t >= start), None)
            if first is not None:
                back[p.name] = first - start
    hostile = [p.name for p in pdus if p.kind != "good"]
    good = [p.name for p in pdus if p.kind == "good"]
    by_kind: dict[str, list[float]] = defaultdict(list)
    for p in pdus:
        if p.name in durations:
            by_kind[p.kind].append(durations[p.name])
    return {
        "hostile_pdus": len(hostile),
        "back": len(back),
        "not_back": sorted(set(hostile) - set(back)),
        "up_at_end": sum(up.get(n) == 1.0 for n in hostile),
        "good_up_at_end": sum(up.get(n) == 1.0 for n in good),
        "seconds_to_first_read": summary(list(back.values())),
        "last_poll_s_median_by_kind": {k: quantile(v, 0.5) for k, v in sorted(by_kind.items())},
    }


def _next_phase(phase: str) -> str:
    return {"idle": "attack", "attack": "recovery"}.get(phase, "")


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="idle + attack (warm-up extra)")
    ap.add_argument("--idle-minutes", type=float, help="default 10 %% of --minutes, at least 1")
    ap.add_argument(
        "--recovery-minutes", type=float, help="after the attack (extra); default as idle, 0: none"
    )
    ap.add_argument("--pdus", type=int, default=100, help="simulated PDUs, a fifth hostile")
    ap.add_argument("--slow-clients", type=int, default=200, help="slowloris, half per server")
    ap.add_argument("--idle-clients", type=int, default=40, help="silent, half per server")
    ap.add_argument(
        "--body-clients", type=int, default=0, help="announce a body, never send it; half each"
    )
    ap.add_argument("--flood-pps", type=float, default=2000.0, help="SNMP datagrams a second")
    ap.add_argument("--interval", type=float, default=15.0, help="the collector's poll interval")
    ap.add_argument("--concurrency", type=int, default=32, help="the collector's, PDUs at once")
    ap.add_argument("--scrape-every", type=float, default=2.0, help="seconds between scrapes")
    ap.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--trickle", type=float, default=1.0, help="seconds between slow bytes")
    ap.add_argument(
        "--agent-blockio",
        choices=["auto", "core", "bcc", "diskstats"],
        default="auto",
        help="backend",
    )
    ap.add_argument(
        "--stalled-tls", type=int, default=1000,
        help="the agent serves HTTPS; this many clients at a time send it 6 bytes of a "
        "ClientHello and stall (0: plain HTTP, no such clients)",
    )  # fmt: skip
    ap.add_argument("--stalled-tls-hold", type=float, default=3.0, help="seconds they stall")
    ap.add_argument(
        "--churn", action="store_true",
        help="loop devices and veth pairs created and destroyed during the attack (root)",
    )  # fmt: skip
    ap.add_argument("--churn-loops", type=int, default=8, help="loop devices a cycle")
    ap.add_argument("--churn-veths", type=int, default=4, help="veth pairs a cycle")
    ap.add_argument("--churn-every", type=float, default=6.0, help="seconds a cycle")
    ap.add_argument("--out", type=Path, help="write the results (and every sample) as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and its logs")
    a = ap.parse_args(argv)
    total = a.minutes * 60
    a.idle_s = a.idle_minutes * 60 if a.idle_minutes is not None else max(60.0, 0.1 * total)
    a.attack_s = total - a.idle_s
    a.recovery_s = a.recovery_minutes * 60 if a.recovery_minutes is not None else a.idle_s
    if a.pdus < 2 or a.attack_s < 60 or a.idle_s < 20 or a.interval < 1:
        ap.error("--pdus >= 2, an idle phase >= 20 s, an attack >= 1 minute, --interval >= 1")
    return a


def main(argv: list[str] | None = None) -> int:
    """Set up, run the phases, stop everything, report."""
    args = parse_args(argv)
    if not SOURCE.exists():
        print(f"the real recording {SOURCE} is missing", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="wattbit-soak-"))
    procs = Procs(work)
    epoch = time.time() - 100  # the farm's timestamps stay positive
    py = sys.executable
    # Ctrl-C stops everything in order even when started from a shell that ignores SIGINT
    signal.signal(signal.SIGINT, signal.default_int_handler)
    res: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": harness_machine(packages=("pysnmp", "snmpsim")),
        "load_average_start": loadavg(),
    }
    scraper: Scraper | None = None
    sampler: Sampler | None = None
    stalled: StalledTls | None = None
    churn: Churn | None = None
    status = 0
    marks: dict[str, float] = {}
    pdus: list[PduSpec] = []
    fresh: Freshness | None = None
    with signals():
        try:
            # recordings: two templates (24 and 48 outlets) from the real AP8641 one
            source = read_rows(SOURCE)
            files = {}
            for n in (24, 48):
                files[n] = work / f"apc_{n}.snmprec"
                rows = synthesize(source, n, seed=n)
                files[n].write_text("".join(f"{o}|{t}|{v}\n" for o, t, v in rows), "latin-1")
            for i, kind in enumerate(fault_plan(args.pdus)):
                n = 24 if i % 2 == 0 else 48
                name = f"pdu{i:03d}"
                pdus.append(PduSpec(name, f"soak-{name}", kind, str(files[n])))
            res["pdu_kinds"] = dict(Counter(p.kind for p in pdus))

            # the farm
            farm_spec = work / "farm.json"
            farm_spec.write_text(
                json.dumps(
                    {
                        "epoch": epoch,
                        "ready": str(work / "farm-ready.json"),
                        "stats": str(work / "farm-stats.json"),
                        "pdus": [vars(p) for p in pdus],
                    }
                )
            )
            farm = start(procs, "farm", [py, __file__, "_pdus", str(farm_spec)])
            ready = wait_for(
                lambda: json.loads((work / "farm-ready.json").read_text()),
                120,
                "PDU farm",
                alive=procs.check,
                logs=[work / "farm.log"],
            )
            for p in pdus:
                p.port = ready["ports"][p.name]

            # the servers
            cfg = work / "collector.yml"
            cfg.write_text(collector_config(pdus, args.interval, args.concurrency, work / "state"))
            agent_cfg = work / "agent.yml"
            agent_cfg.write_text(f"blockio:\n  backend: {args.agent_blockio}\n")
            ports = {"collector": free_port(), "agent": free_port()}
            tls: dict[str, ssl.SSLContext] = {}
            agent_tls: list[str] = []
            if args.stalled_tls > 0:  # the agent serves HTTPS, as bench/tls_stall.py's server
                from tests.support.tlsstall import make_cert

                cert = make_cert(work)
                (work / "web.yml").write_text(
                    "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                )
                tls["agent"] = ssl.create_default_context(cafile=str(cert))
                agent_tls = ["--web-config", str(work / "web.yml")]
            wattbit = [py, "-m", "collector.cli"]
            collector = start(
                procs,
                "collector",
                [
                    *wattbit,
                    "collector",
                    "--config",
                    str(cfg),
                    "--listen",
                    f"127.0.0.1:{ports['collector']}",
                ],
            )
            agent = start(
                procs,
                "agent",
                [
                    *wattbit,
                    "agent",
                    "--config",
                    str(agent_cfg),
                    "--listen",
                    f"127.0.0.1:{ports['agent']}",
                    *agent_tls,
                ],
            )
            for name, port in ports.items():
                wait_for(
                    lambda port=port, name=name: http_ok(port, tls.get(name)),  # type: ignore[misc]
                    180,
                    f"{name} /metrics",
                    alive=procs.check,
                    logs=[work / f"{name}.log"],
                    errors=(OSError, http.client.HTTPException),
                )
            pids = {"collector": collector.pid, "agent": agent.pid}
            res["pids"] = pids

            # warm-up: the scraper runs (not measured) until every PDU has been read twice
            fresh = Freshness(epoch, [p.name for p in pdus])
            scraper = Scraper(ports, args.scrape_every, fresh, tls)
            sampler = Sampler(pids, args.sample_every)
            marks["warmup"] = time.time()
            scraper.start()
            sampler.start()
            print(
                f"soak: {args.pdus} PDUs {res['pdu_kinds']}, collector :{ports['collector']}"
                f" (pid {collector.pid}), agent :{ports['agent']} (pid {agent.pid}); warm-up...",
                flush=True,
            )
            wait_for(fresh.polled_twice, 4 * args.interval + 120, "every PDU read twice",
                     alive=procs.check, logs=[work / "collector.log"], interval=1.0)  # fmt: skip
            res["collector_udp_sockets"] = udp_sockets(collector.pid)

            # idle
            marks["idle"] = time.time()
            sampler.phase = "idle"
            fresh.mark("idle")
            print(f"idle phase: {args.idle_s:.0f} s", flush=True)
            hold(marks["idle"] + args.idle_s, procs)

            # attack
            marks["attack"] = time.time()
            sampler.phase = "attack"
            fresh.mark("attack")
            # an HTTPS agent gets the stalled TLS clients instead: slowloris speaking plain
            # HTTP to it would be closed at their first bytes (not TLS), a reconnect loop
            attacked = {"collector": ports["collector"]} if args.stalled_tls > 0 else ports
            half = {
                "slow": args.slow_clients // len(attacked),
                "idle": args.idle_clients // len(attacked),
                "body": args.body_clients // len(attacked),
            }
            attack_spec = work / "attack.json"
            attack_spec.write_text(
                json.dumps(
                    {
                        "targets": [
                            {
                                "name": n,
                                "port": port,
                                "slow": half["slow"]
                                + (args.slow_clients % len(attacked) if i == 0 else 0),
                                "idle": half["idle"]
                                + (args.idle_clients % len(attacked) if i == 0 else 0),
                                "body": half["body"]
                                + (args.body_clients % len(attacked) if i == 0 else 0),
                            }
                            for i, (n, port) in enumerate(attacked.items())
                        ],
                        "collector_pid": collector.pid,
                        "flood_pps": args.flood_pps,
                        "spoof_ports": [p.port for p in pdus if p.kind == "good"],
                        "communities": [p.community for p in pdus],
                        "trickle_s": args.trickle,
                        "stats": str(work / "attack-stats.json"),
                    }
                )
            )
            farm.send_signal(signal.SIGUSR1)
            attacker = start(procs, "attacker", [py, __file__, "_attack", str(attack_spec)])
            if args.stalled_tls > 0:
                stalled = StalledTls(ports["agent"], args.stalled_tls, args.stalled_tls_hold)
                stalled.start()
            if args.churn:
                churn = Churn(work, args.churn_loops, args.churn_veths, args.churn_every)
                churn.start()
            print(
                f"attack phase: {args.attack_s:.0f} s ({args.slow_clients} slow, "
                f"{args.idle_clients} idle, {args.body_clients} body clients, "
                f"{args.flood_pps:g} datagrams/s,"
                f" {sum(p.kind != 'good' for p in pdus)} hostile PDUs)",
                flush=True,
            )
            try:
                hold(marks["attack"] + args.attack_s, procs)
            except RuntimeError as exc:  # a child died: that is a finding, not the end of it
                res["child_died"] = str(exc)
                status = 1
                print(f"\n!! {exc}", file=sys.stderr, flush=True)
            marks["end"] = time.time()

            # a last sample under attack, the attacker stopped, a sample once its connections
            # are gone (what the attack left behind); the thread's samples in between are neither
            sampler.phase = "stopping_attack"
            sampler.sample("attack")
            res["shutdown"] = stop_children({"attacker": attacker})
            if stalled is not None:
                stalled.halt.set()
                stalled.join(60)
                res["stalled_tls"] = {"rounds": stalled.rounds, "connections": stalled.opened}
            if churn is not None:
                churn.halt.set()
                churn.join(120)
                res["churn"] = {"cycles": churn.cycles, "loop_devices": churn.disks,
                                "veth_pairs": churn.nics, "errors": dict(churn.errors)}  # fmt: skip
            time.sleep(AFTER_S)
            sampler.sample("after_attack")
            sampler.phase = "recovery"

            # recovery: no attack, every PDU healthy again
            if args.recovery_s > 0 and "child_died" not in res:
                marks["recovery"] = time.time()
                fresh.mark("recovery")
                farm.send_signal(signal.SIGUSR2)
                print(f"recovery phase: {args.recovery_s:.0f} s", flush=True)
                try:
                    hold(marks["recovery"] + args.recovery_s, procs, frozenset({"attacker"}))
                except RuntimeError as exc:
                    res["child_died"] = str(exc)
                    status = 1
                    print(f"\n!! {exc}", file=sys.stderr, flush=True)
            marks["stop"] = time.time()

            # stop: the servers, then the farm
            sampler.halt.set()
            sampler.join()
            scraper.halt.set()
            scraper.join(SCRAPE_TIMEOUT_S * 3)
            res["shutdown"] |= stop_children({"collector": collector, "agent": agent})
            res["shutdown"] |= stop_children({"farm": farm})
            res["shutdown"]["left_over"] = session_members({p.pid for _, p in procs.procs})
            for name in ("attack", "farm"):
                path = work / f"{name}-stats.json"
                if path.exists():
                    res[f"{name}_stats"] = json.loads(path.read_text())
        except KeyboardInterrupt:
            print("\ninterrupted: stopping everything", file=sys.stderr)
            status = 130
        except Exception as exc:
            print(f"\nsoak failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            for name, _ in procs.procs:
                print(f"--- {name}.log:\n{procs.log_tail(name)}", file=sys.stderr)
            status = 1
        finally:
            # cleanup must not be cut short by a second signal
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            for t in (scraper, sampler, stalled, churn):
                if t is not None:
                    t.halt.set()
            if churn is not None:
                churn.join(120)  # its loop devices and veths detached before we go
            procs.stop_all()
            res["left_over_after_cleanup"] = left = session_members({p.pid for _, p in procs.procs})
            if left:
                print(f"!! processes left over: {left}", file=sys.stderr)
            res["logs"] = {name: log_counts(work / f"{name}.log") for name, _ in procs.procs}
            with contextlib.suppress(OSError):
                backend = re.search(r"blockio backend: (\w+)", (work / "agent.log").read_text())
                res["agent_blockio_backend"] = backend[1] if backend else None
            if status != 130 and "end" in marks and fresh is not None:
                assert scraper is not None and sampler is not None
                try:
                    analyse(res, args, marks, pdus, fresh, scraper, sampler)
                    report(res, args)
                except Exception:  # the raw samples below are still worth writing
                    traceback.print_exc()
                    status = 1
            res["load_average_end"] = loadavg()
            if scraper is not None and sampler is not None:
                res["samples"] = sampler.samples
                res["scrapes"] = [vars(r) for r in scraper.records]
            res["timeline"] = {k: v - marks.get("warmup", v) for k, v in marks.items()}
            if args.out:
                args.out.write_text(json.dumps(res, indent=1, default=str) + "\n")
                print(f"results: {args.out}")
            if args.keep:
                print(f"work directory kept: {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    return status


def analyse(
    res: dict[str, Any],
    args: argparse.Namespace,
    marks: dict[str, float],
    pdus: list[PduSpec],
    fresh: Freshness,
    scraper: Scraper,
    sampler: Sampler,
) -> None:
    """Fill res with the numbers and the goals."""
    phases = {"idle": (marks["idle"], marks["attack"]), "attack": (marks["attack"], marks["end"])}
    if "recovery" in marks:
        phases["recovery"] = (marks["recovery"], marks["stop"])
    col = [r.t for r in scraper.records if r.target == "collector" and r.status == 200]
    ends = {p: max((t for t in col if a <= t < b), default=a) for p, (a, b) in phases.items()}
    res["latency"] = latency(scraper.records, phases)
    res["series"] = {
        name: {
            p: summary([float(r.series) for r in scraper.records
                        if r.target == name and r.status == 200 and a <= r.t < b])
            for p, (a, b) in phases.items()
        }
        for name in ("agent", "collector")
    }  # fmt: skip
    ramp = min(60.0, (marks["end"] - marks["attack"]) / 3)  # every attacker connected, cycled once
    res["ramp_s"] = ramp
    res["resources"] = {
        n: resources(sampler.samples, n, marks, ramp) for n in ("collector", "agent")
    }
    drops = [
        sum(u["drops"] for u in s.get("collector_udp", []))
        for s in sampler.samples
        if s.get("collector")
    ]
    res["collector_udp_drops"] = drops[-1] - drops[0] if drops else None
    res["freshness"] = freshness(fresh, pdus, phases, args.interval, ends)
    sd = res.get("shutdown", {})
    res["goals"] = {
        "resources_flat": {n: r.get("flat", False) for n, r in res["resources"].items()},
        "good_pdus_fresh_every_cycle": all(
            res["freshness"][p]["fresh_every_cycle"] for p in phases
        ),
        "p99_under_attack_at_most_2x_idle": {n: v["goal_met"] for n, v in res["latency"].items()},
        "clean_exit": all(
            sd.get(n, {}).get("exit_code") == 0 and not sd.get(n, {}).get("killed")
            for n in ("collector", "agent")
        )
        and not sd.get("left_over")
        and "child_died" not in res,
    }


def _fmt(x: float, spec: str = ".1f") -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else format(x, spec)


def report(res: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the results."""
    met = {True: "met", False: "MISSED"}
    print(
        f"\nsoak: idle {args.idle_s:.0f} s, attack {args.attack_s:.0f} s (ramp"
        f" {res['ramp_s']:.0f} s), recovery {args.recovery_s:.0f} s; load average at start"
        f" {res['load_average_start']}, now {loadavg()}"
    )
    print("\n/metrics (ms)  p50 idle  p99 idle  p50 atk  p99 atk  ratio  p99 recovery  failed")
    for name, v in res["latency"].items():
        i, a = v["idle"], v["attack"]
        r = v.get("recovery", {"p99_ms": math.nan, "failed": 0})
        print(
            f"  {name:<10} {_fmt(i['p50_ms']):>9} {_fmt(i['p99_ms']):>9} {_fmt(a['p50_ms']):>8}"
            f" {_fmt(a['p99_ms']):>8} {_fmt(v['p99_ratio'], '.2f'):>6} {_fmt(r['p99_ms']):>13}"
            f"  {i['failed']}/{a['failed']}/{r['failed']}  {met[v['goal_met']]}"
        )
    window = args.attack_s - res["ramp_s"]
    note = f" (fitted over {window:.0f} s: short, mostly noise)" if window < 600 else ""
    print(f"\nresources{note}")
    print("                   before atk-start    end  after    max  run-end  slope/10min")
    for name, rs in res["resources"].items():
        for key in FLAT:
            if key in rs:
                x = rs[key]
                print(
                    f"  {name:<9} {key:<7} {_fmt(x['before_attack']):>6}"
                    f" {_fmt(x['attack_start']):>9} {_fmt(x['end']):>6}"
                    f" {_fmt(x['after_attack']):>6} {_fmt(x['max']):>6} {_fmt(x['end_of_run']):>8}"
                    f" {_fmt(x['slope_per_10min'], '+.2f'):>12}"
                    f"  {'flat' if x['flat'] else 'GROWING'}"
                )
        if "cpu_percent" in rs:
            c = rs["cpu_percent"]
            print(f"  {name:<9} CPU %: idle {c['idle']:.1f}, attack {c['attack']:.1f}")
    f = res["freshness"]
    print(f"\ngood PDUs ({f['good_pdus']}), interval {args.interval:g} s:")
    for phase in ("idle", "attack", "recovery"):
        if phase in f:
            p = f[phase]
            print(
                f"  {phase:<8} cycles {p['cycles']}, missed polls {p['missed_polls']}"
                f" {p['pdus_with_missed_polls'][:8]}, stale cycles {p['stale_cycles']},"
                f" scrapes with one down {p['scrapes_with_a_good_pdu_down']}, failures"
                f" {p['good_pdu_failures']}, oldest reading at the phase's end"
                f" {_fmt(p['max_read_age_s_at_end'])} s"
            )
    print(f"  hostile PDUs' failures during the attack: {f['attack_failures_by_kind']}")
    if "hostile_recovery" in f:
        r = f["hostile_recovery"]
        print(
            f"  recovery: {r['back']}/{r['hostile_pdus']} hostile PDUs read again (first read"
            f" after {_fmt(r['seconds_to_first_read']['median'])} s median,"
            f" {_fmt(r['seconds_to_first_read']['max'])} s max; not back: {r['not_back']}),"
            f" up at the end {r['up_at_end']}; good up {r['good_up_at_end']}/{f['good_pdus']};"
            " last poll s by kind"
            f" { {k: round(v, 2) for k, v in r['last_poll_s_median_by_kind'].items()} }"
        )
    a = res.get("attack_stats", {})
    print(f"\nattacker: connects {a.get('connects')}, flood {a.get('flood')}")
    for key, s in a.get("lifetime_s", {}).items():
        print(
            f"  {key:<15} dropped by the server after {_fmt(s['median'])} s median,"
            f" {_fmt(s['max'])} s max ({s['n']} connections)"
        )
    print(f"stalled TLS clients (agent): {res.get('stalled_tls')}; churn: {res.get('churn')}")
    for name, by_phase in res.get("series", {}).items():
        cells = ", ".join(
            f"{p} {_fmt(v['p10'], '.0f')}/{_fmt(v['median'], '.0f')}/{_fmt(v['max'], '.0f')}"
            for p, v in by_phase.items()
        )
        print(f"  {name} series on /metrics (p10/median/max): {cells}")
    print(f"collector UDP socket drops: {res.get('collector_udp_drops')}")
    print(f"shutdown: {res.get('shutdown')}")
    print(f"logs: {res.get('logs')}; agent blockio backend: {res.get('agent_blockio_backend')}")
    g = res["goals"]
    print(
        f"\nGOALS: resources flat {g['resources_flat']}; good PDUs fresh every cycle:"
        f" {met[g['good_pdus_fresh_every_cycle']]}; p99 attack <= 2x idle"
        f" {g['p99_under_attack_at_most_2x_idle']}; clean exit: {met[g['clean_exit']]}"
    )


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "_pdus":
        asyncio.run(_farm(Path(sys.argv[2])))
    elif role == "_attack":
        asyncio.run(_attack(Path(sys.argv[2])))
    else:
        sys.exit(main())
