"""The soak's attacker (a child process): slowloris, idle connections, SNMP floods."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.common import (
    BODY_HEADS,
    LOOPBACK,
    OUTLET_POWER,
    SCRAPE_TIMEOUT_S,
    SLOW_PREFIX,
    SLOW_TRICKLE,
    STAGGER_S,
    summary,
    udp_sockets,
)
from tests.support.berbuild import integer, oid_content, response, var_bind

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
        # 300 of them open ~300 connections a second (the figure), not a thousand.
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


if __name__ == "__main__":  # started by the soak: python -m bench.soak.attack SPEC.json
    asyncio.run(_attack(Path(sys.argv[1])))
