"""What every part of the soak uses: its settings and goals, /proc readings, numbers."""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import statistics
from pathlib import Path
from typing import Any

from bench.harness import cpu_seconds as proc_cpu

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
