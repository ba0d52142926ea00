"""The PDU poll bench's report: medians, ratios, decode costs, wattbit's profile."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness import machine as harness_machine
from bench.harness import (
    ratio,
    table,
)
from bench.pdu_poll.common import CPU_GOAL_US, ROOT, SNMP_EXPORTER, SNMPBULKWALK
from bench.pdu_poll.poll import Bench, Poll
from tests.support.synthetic_pdu import (
    METERED_STATUS,
)

# --- report ------------------------------------------------------------------------------------


def measured_on() -> dict[str, Any]:
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
    # None when the denominator is 0 (a tiny --pdus run can use less CPU than one clock tick)
    wall_ratio = ratio(w["wall_s_median"], e["wall_s_median"])
    cpu_ratio = ratio(w["cpu_us_per_value_median"], e["cpu_us_per_value_median"])
    cpu_ok = w["cpu_us_per_value_median"] <= CPU_GOAL_US
    wall_ok = w["wall_s_median"] <= e["wall_s_median"]
    print()
    print(
        f"wattbit / snmp_exporter:  wall {wall_ratio or float('nan'):.2f}x"
        f"   CPU per value {cpu_ratio or float('nan'):.2f}x"
    )
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
