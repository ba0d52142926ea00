"""The PDU poll bench's command line and rounds."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench.pdu_poll as package
from bench.harness import (
    interruptible,
    load_average,
    print_command,
)
from bench.pdu_poll.common import (
    MODULE_TEMPLATE,
    PROFILE,
    SNMP_EXPORTER,
    TOOLS,
    Columns,
    Expect,
    expect_of,
)
from bench.pdu_poll.poll import Bench, Pdu, Poll
from bench.pdu_poll.procs import Exporter
from bench.pdu_poll.report import measured_on, profile_wattbit, report
from tests.support.synthetic_pdu import (
    SOURCE,
    read_snmprec,
    synthesize,
)

# --- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.pdu_poll", description=(package.__doc__ or "").split("\n", 1)[0]
    )
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

    info = measured_on()
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
            print_command()
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
