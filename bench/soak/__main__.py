"""The soak's driver: set up, run the phases, stop everything, report."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import shutil
import signal
import ssl
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import bench.soak as package
from bench.harness import free_port
from bench.harness import interruptible as signals
from bench.harness import load_average as loadavg
from bench.harness import machine as harness_machine
from bench.soak.actors import (
    Churn,
    Freshness,
    PduSpec,
    Sampler,
    Scraper,
    StalledTls,
    collector_config,
    fault_plan,
    hold,
    http_ok,
    log_counts,
    start,
    stop_children,
)
from bench.soak.analysis import analyse, report
from bench.soak.bmcs import BmcSide, BmcWatch, add_options, analyse_bmcs, vmhwm_mib
from bench.soak.common import AFTER_S, SCRAPE_TIMEOUT_S, session_members, udp_sockets
from collector.demo.procs import Procs, wait_for
from tests.support.synthetic_pdu import SOURCE, synthesize
from tests.support.synthetic_pdu import read_snmprec as read_rows

# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.soak", description=(package.__doc__ or "").split("\n")[0]
    )
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
    add_options(ap)
    ap.add_argument("--out", type=Path, help="write the results (and every sample) as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and its logs")
    a = ap.parse_args(argv)
    total = a.minutes * 60
    a.idle_s = a.idle_minutes * 60 if a.idle_minutes is not None else max(60.0, 0.1 * total)
    a.attack_s = total - a.idle_s
    a.recovery_s = a.recovery_minutes * 60 if a.recovery_minutes is not None else a.idle_s
    if a.hostile_bmcs < 0 or a.healthy_bmcs < 0:
        ap.error("--hostile-bmcs and --healthy-bmcs >= 0")
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
    bmcs: BmcSide | None = None
    bmcw: BmcWatch | None = None
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
            farm = start(procs, "farm", [py, "-m", "bench.soak.farm", str(farm_spec)])
            ready = wait_for(
                lambda: json.loads((work / "farm-ready.json").read_text()),
                120,
                "PDU farm",
                alive=procs.check,
                logs=[work / "farm.log"],
            )
            for p in pdus:
                p.port = ready["ports"][p.name]

            # the healthy BMCs (the hostile ones come with the attack)
            bmcs = BmcSide(args, work)
            bmcs.start_healthy(procs)

            # the servers
            cfg = work / "collector.yml"
            config = collector_config(pdus, args.interval, args.concurrency, work / "state")
            cfg.write_text(config + (bmcs.config() if bmcs.healthy or bmcs.hostile else ""))
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
            bmcw = BmcWatch(list(bmcs.healthy), list(bmcs.hostile))
            scraper.also.append(bmcw.update)
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
            wait_for(bmcw.ready, 4 * args.interval + 60, "every healthy BMC read",
                     alive=procs.check, logs=[work / "collector.log"], interval=1.0)  # fmt: skip
            res["collector_udp_sockets"] = udp_sockets(collector.pid)

            # idle
            marks["idle"] = time.time()
            sampler.phase = "idle"
            fresh.mark("idle")
            bmcw.mark("idle")
            print(f"idle phase: {args.idle_s:.0f} s", flush=True)
            hold(marks["idle"] + args.idle_s, procs)

            # attack
            marks["attack"] = time.time()
            sampler.phase = "attack"
            fresh.mark("attack")
            bmcw.mark("attack")
            res["collector_peak_rss_mib"] = {"attack_start": vmhwm_mib(collector.pid)}
            bmcs.start_hostile(procs)
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
            attacker = start(procs, "attacker", [py, "-m", "bench.soak.attack", str(attack_spec)])
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
                f" {sum(p.kind != 'good' for p in pdus)} hostile PDUs,"
                f" hostile BMCs {[m for m, _ in bmcs.hostile.values()]})",
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
            res["bmc_hostile_stats"] = bmcs.stats()
            res["shutdown"] = stop_children({"attacker": attacker, **bmcs.children})
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
                bmcw.mark("recovery")
                farm.send_signal(signal.SIGUSR2)
                print(f"recovery phase: {args.recovery_s:.0f} s", flush=True)
                try:
                    hold(marks["recovery"] + args.recovery_s, procs,
                         frozenset({"attacker", *bmcs.children}))  # fmt: skip
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
            res["collector_peak_rss_mib"]["end"] = vmhwm_mib(collector.pid)
            res["shutdown"] |= stop_children({"collector": collector, "agent": agent})
            res["shutdown"] |= stop_children({"farm": farm, **bmcs.healthy_children})
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
                    if bmcs is not None and bmcw is not None:
                        phases = {p: (marks[p], marks[q]) for p, q in
                                  (("idle", "attack"), ("attack", "end"), ("recovery", "stop"))
                                  if p in marks and q in marks}  # fmt: skip
                        res["bmcs"] = analyse_bmcs(res, bmcw, bmcs, phases, args.interval)
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


if __name__ == "__main__":
    sys.exit(main())
