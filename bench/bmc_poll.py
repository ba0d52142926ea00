"""One full poll of 200 Redfish BMCs from one collector: CPU and wall per BMC.

Run: .venv/bin/python bench/bmc_poll.py [--bmcs 200] [--rounds 7] [--concurrency 32]
     [--json FILE]

The BMCs are SIMULATED: one aiohttp server process (a child, on its own CPU time) listening on
`--bmcs` ports of 127.0.0.1, each port serving one real mockup of tests/fixtures/bmc verbatim
(the files as sushy-static serves them, keep-alive on): half DMTF's public-rackmount1
(PowerSubsystem form: service root, Chassis collection, chassis, Power, EnvironmentMetrics,
PowerSubsystem, PowerSupplies, 2 supplies, 1 supply's Metrics = 9 GETs a poll) and half HPE's
DL325 Gen10 Plus (Power form: 4 GETs). sushy-static is single-threaded HTTP/1.0 (a new TCP
connection per GET), which would measure it rather than the poller.

Compared, alternating every round (order rotated), on the same server:

* reuse: the collector's steady state, one BmcPoller whose clients keep their connections
  (and, on a real BMC, their Redfish session) from poll to poll;
* fresh: every BMC's client thrown away before each poll, as after a failed poll: new TCP
  connections (and, on a real BMC, a new session login).

CPU = this process's time.process_time() during the poll (the server's CPU is not counted);
wall = the poll's elapsed time with `--concurrency` BMCs in flight. Every poll is checked (all
BMCs up, each with the mockup's figure: 374 W and 97 W) before its time counts. Medians of the
rounds; the first, untimed round warms both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, free_ports, print_command, ratio, table  # noqa: E402
from exporters.bmc.poller import BmcPoller, BmcTarget  # noqa: E402
from exporters.bmc.redfish import RedfishTarget  # noqa: E402

MOCKUPS = ROOT / "tests" / "fixtures" / "bmc"
SERVED = [("dmtf-public-rackmount1", 374.0), ("hpe-dl325-gen10plus", 97.0)]

SERVER = r"""
import asyncio, json, sys
from pathlib import Path
from aiohttp import web
root, ports = Path(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")]
names = sys.argv[3].split(",")
async def main():
    for i, port in enumerate(ports):
        tree = root / names[i % len(names)]
        async def handle(request, tree=tree):
            rel = request.path.rstrip("/").removeprefix("/redfish/v1").strip("/")
            f = tree / rel / "index.json"
            if not f.is_file():
                raise web.HTTPNotFound()
            return web.Response(body=f.read_bytes(), content_type="application/json")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def check(poller: BmcPoller, expected: dict[str, float]) -> None:
    """Every BMC up with its mockup's figure; else abort the run."""
    for name, watts in expected.items():
        st = poller.states[name]
        got = [m.power.power_watts for m in st.mapped]
        if not st.up or got != [watts]:
            raise SystemExit(f"check failed: {name} up={st.up} error={st.error} watts={got}")


async def one_poll(poller: BmcPoller, fresh: bool) -> tuple[float, float]:
    """(wall, cpu) seconds of one poll of every BMC."""
    if fresh:
        await poller.close()
    cpu0, t0 = time.process_time(), time.perf_counter()
    await poller.poll_all()
    return time.perf_counter() - t0, time.process_time() - cpu0


async def run(args: argparse.Namespace) -> dict:
    """The rounds; medians per mode."""
    ports = free_ports(args.bmcs)
    names = [n for n, _ in SERVED]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(MOCKUPS), ",".join(map(str, ports)), ",".join(names)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise SystemExit("the BMC server did not start")
        expected = {f"bmc{i}": SERVED[i % len(SERVED)][1] for i in range(args.bmcs)}
        targets = [
            BmcTarget(
                f"bmc{i}",
                "redfish",
                redfish=RedfishTarget(f"http://127.0.0.1:{p}", "u", "p", auth="basic"),
                deadline=30,
            )
            for i, p in enumerate(ports)
        ]
        pollers = {
            "reuse": BmcPoller(targets, interval=60, concurrency=args.concurrency),
            "fresh": BmcPoller(targets, interval=60, concurrency=args.concurrency),
        }
        for mode, poller in pollers.items():  # warm-up, untimed
            await one_poll(poller, mode == "fresh")
            check(poller, expected)
        results: dict[str, list[tuple[float, float]]] = {m: [] for m in pollers}
        for _, mode in alternate(list(pollers), args.rounds):
            wall, cpu = await one_poll(pollers[mode], mode == "fresh")
            check(pollers[mode], expected)
            results[mode].append((wall, cpu))
        for poller in pollers.values():
            await poller.close()
    finally:
        server.terminate()
        server.wait()
    out: dict = {
        "bmcs": args.bmcs,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "modes": {},
    }
    for mode, rows in results.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        out["modes"][mode] = {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_ms_per_bmc": round(cpu / args.bmcs * 1000, 2),
            "wall_ms_per_bmc": round(wall / args.bmcs * 1000, 2),
        }
    cpu_ratio = ratio(out["modes"]["fresh"]["cpu_s"], out["modes"]["reuse"]["cpu_s"])
    out["fresh_over_reuse_cpu"] = None if cpu_ratio is None else round(cpu_ratio, 2)
    return out


def main() -> int:
    """Run and print the table (and JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bmcs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out = asyncio.run(run(args))
    print(f"{args.bmcs} Redfish BMCs, concurrency {args.concurrency}, medians of {args.rounds}")
    table(
        ["mode", "wall s", "CPU s", "CPU ms/BMC", "wall ms/BMC"],
        [
            [
                mode,
                f"{m['wall_s']:.3f}",
                f"{m['cpu_s']:.3f}",
                f"{m['cpu_ms_per_bmc']:.2f}",
                f"{m['wall_ms_per_bmc']:.2f}",
            ]
            for mode, m in out["modes"].items()
        ],
    )
    print(f"fresh / reuse CPU: {out['fresh_over_reuse_cpu']}")
    print_command()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
