"""Cost of SNMPv3 engines: N targets with N users (one engine) against N targets with one user
name and N key sets (1 right, N-1 wrong: one engine per key set), alternating, one snmpsim.

    .venv/bin/python bench/pdu_v3_engines.py [--targets 10] [--rounds 6] [--pairs 3]

Each measurement is a fresh process (RSS is per process) that walks APC's rPDU2 outlet status
table (24 outlets x 8 columns) on every target at once, `--rounds` times. Prints one JSON line
per measurement and the medians per scenario: first round (engines start then) and steady
rounds, wall and CPU, RSS at the end, and the outcome of the last round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, print_command, proc_status  # noqa: E402

TABLE = "1.3.6.1.4.1.318.1.1.26.9.4.3"


def _rss_mib() -> float:
    return proc_status(os.getpid(), ("VmRSS",)).get("VmRSS", 0) / 1024


async def _measure(scenario: str, port: int, n: int, rounds: int) -> dict[str, object]:
    from exporters.snmp.client import Auth, SnmpClient, SnmpError, Target

    targets = []
    for i in range(n):
        if scenario == "users":
            user, key, priv = f"bench-u{i}", f"bench-auth-{i:04d}", f"bench-priv-{i:04d}"
        else:
            user, priv = "bench-u0", "bench-priv-0000"
            key = "bench-auth-0000" if i == 0 else f"wrong-auth-{i:04d}"
        auth = Auth(
            "3",
            user=user,
            auth_protocol="SHA256",
            auth_key=key,
            priv_protocol="AES256",
            priv_key=priv,
            context_name="apc_ap8641",
        )
        targets.append(Target("127.0.0.1", port, auth, timeout=2.0, retries=0))
    walls, cpus = [], []
    last: list[object] = []
    async with SnmpClient() as client:
        for _ in range(rounds):
            w0, c0 = time.perf_counter(), time.process_time()
            last = await asyncio.gather(
                *(client.walk(t, TABLE) for t in targets), return_exceptions=True
            )
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        engines = client.v3_engines
    ok = sum(isinstance(r, dict) and len(r) > 100 for r in last)
    auth_err = sum(isinstance(r, SnmpError) and r.reason == "auth" for r in last)
    return {
        "scenario": scenario,
        "targets": n,
        "engines": engines,
        "first_wall_s": walls[0],
        "first_cpu_s": cpus[0],
        "steady_wall_s": statistics.median(walls[1:]),
        "steady_cpu_s": statistics.median(cpus[1:]),
        "rss_mib": _rss_mib(),
        "ok": ok,
        "auth": auth_err,
        "other": n - ok - auth_err,
    }


def main() -> int:
    """Run the alternating measurements and print medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("SCENARIO", "PORT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        row = asyncio.run(_measure(a.child[0], int(a.child[1]), a.targets, a.rounds))
        print(json.dumps(row))
        return 0
    from tests.support.env import RECORDINGS
    from tests.support.snmpagents import SnmpSim, V3User

    users = [
        V3User(f"bench-u{i}", "SHA256", f"bench-auth-{i:04d}", "AES256", f"bench-priv-{i:04d}")
        for i in range(a.targets)
    ]
    rows: dict[str, list[dict[str, float]]] = {"users": [], "clash": []}
    with SnmpSim([RECORDINGS / "apc_ap8641.snmprec"], v3_users=users) as sim:
        for _, scenario in alternate(list(rows), a.pairs):  # AB BA ... in one run
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--targets",
                    str(a.targets),
                    "--rounds",
                    str(a.rounds),
                    "--child",
                    scenario,
                    str(sim.port),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows[scenario].append(row)
    for scenario, rs in rows.items():
        med = {
            k: statistics.median(r[k] for r in rs)
            for k in ("first_wall_s", "first_cpu_s", "steady_wall_s", "steady_cpu_s", "rss_mib")
        }
        print(
            f"{scenario}: engines {rs[-1]['engines']}, last round ok {rs[-1]['ok']} auth "
            f"{rs[-1]['auth']} other {rs[-1]['other']}; medians "
            + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
        )
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
