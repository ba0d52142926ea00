"""Cost of detecting a PDU's profile: by its sysObjectID's family, against probing every profile
when the agent reports none (the worst case), alternating, every recording the tests know.

    .venv/bin/python bench/pdu_detect.py [--pairs 9] [--out results.json]

Each recording is served by the project's SNMPv2c responder on the loopback (one thread, no
delay: the figures are wattbit's own cost and the request count, which on a real network is
what matters: requests x round-trip time). For each recording and pair, `detect()` runs once
with the recording's sysObjectID and once with it taken out, in alternating order, each with
a fresh SnmpClient. Prints one JSON line per recording and the medians, and the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, command_line  # noqa: E402

SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"


def _recordings() -> list[Path]:
    from tests.support.env import OWN_RECORDINGS, RECORDINGS

    return [
        p
        for d in (RECORDINGS, OWN_RECORDINGS)
        for p in sorted(d.glob("*.snmp*"))
        if p.suffix in (".snmprec", ".snmpwalk")
    ]


async def _detect_once(port: int, profiles: list) -> tuple[float, int, str]:  # type: ignore[type-arg]
    from exporters.pdu.detect import NoProfile, detect
    from exporters.snmp.client import Auth, SnmpClient, Target

    target = Target("127.0.0.1", port, Auth(version="2c", community="public"), timeout=2.0)
    async with SnmpClient() as client:
        t0 = time.perf_counter()
        try:
            name = (await detect(client, target, profiles)).profile.name
        except NoProfile:
            name = "(none)"
        wall = time.perf_counter() - t0
        return wall, client.counts()["sent"], name


def main() -> int:
    """Run the benchmark."""
    from collector.pdu.responder import Responder
    from collector.pdu.snmprec import read_recording
    from collector.site.profiles import load_profiles

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    profiles = load_profiles()
    rows: list[dict[str, Any]] = []
    for path in _recordings():
        walk = read_recording(path)
        bare = {o: v for o, v in walk.items() if o != SYS_OBJECT_ID}
        with Responder(walk) as with_id, Responder(bare) as without_id:
            runs: dict[str, list[tuple[float, int, str]]] = {"family": [], "probe_all": []}
            agents = [("family", with_id), ("probe_all", without_id)]
            for _, (label, agent) in alternate(agents, args.pairs):
                runs[label].append(asyncio.run(_detect_once(agent.port, profiles)))
        row: dict[str, Any] = {"recording": path.name, "has_sys_object_id": SYS_OBJECT_ID in walk}
        for label, rs in runs.items():
            row[f"{label}_ms"] = round(statistics.median(r[0] for r in rs) * 1000, 2)
            row[f"{label}_requests"] = statistics.median(r[1] for r in rs)
            row[f"{label}_profile"] = rs[-1][2]
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = {
        "recordings": len(rows),
        "profiles": len(profiles),
        "pairs": args.pairs,
        "family_requests_median": statistics.median(r["family_requests"] for r in rows),
        "family_requests_max": max(r["family_requests"] for r in rows),
        "probe_all_requests_median": statistics.median(r["probe_all_requests"] for r in rows),
        "probe_all_requests_max": max(r["probe_all_requests"] for r in rows),
        "family_ms_median": statistics.median(r["family_ms"] for r in rows),
        "probe_all_ms_median": statistics.median(r["probe_all_ms"] for r in rows),
        "same_profile_both_ways": sum(r["family_profile"] == r["probe_all_profile"] for r in rows),
        "command": command_line(),
    }
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
