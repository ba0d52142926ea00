"""The soak's analysis and report: latency, resources, freshness, recovery, goals."""

from __future__ import annotations

import argparse
import math
from collections import Counter, defaultdict
from typing import Any

from bench.harness import load_average as loadavg
from bench.harness import print_command
from bench.soak.actors import Freshness, PduSpec, Sampler, Scrape, Scraper
from bench.soak.bmcs import report_bmcs
from bench.soak.common import (
    FLAT,
    LATENCY_RATIO_GOAL,
    STALE_GAP,
    quantile,
    slope_per_10min,
    summary,
)

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
    report_bmcs(res, args.interval)
    g = res["goals"]
    print(
        f"\nGOALS: resources flat {g['resources_flat']}; good PDUs fresh every cycle:"
        f" {met[g['good_pdus_fresh_every_cycle']]}; p99 attack <= 2x idle"
        f" {g['p99_under_attack_at_most_2x_idle']}; clean exit: {met[g['clean_exit']]}"
    )
    print_command()
