"""Stalled HTTP requests against a real `wattbit collector` or `agent`: this checkout against a
baseline commit (read from git), alternating, one run (issue 34).

    .venv/bin/python bench/http_stall.py [--server collector|agent] [--tls]
        [--attack 'GET /metrics, body announced'] [--rate 300] [--hold 400] [--seconds 30]
        [--rounds 3] [--baseline-rev dfb9e01]
    .venv/bin/python bench/http_stall.py --header-flood [--flood-rounds 4] ...

Scrapes: a kept-alive scraper (tests/support/stalledhttp.py, as Prometheus: a closed idle
connection is retried once on a new one) gets /metrics every --interval s for --seconds while a
flood opens --rate connections a second that send a request's head (--attack: announcing a body
never sent, or headers never finished; tests/support/stalledhttp.py HEADS) and stall, keeping the
newest --hold. Per run: `up` (successful scrapes over scheduled ones, a slot missed while a scrape
hung counting 0), the scrapes' median and p99, reconnects; medians over --rounds per tree.

--header-flood: rounds of 256 connections that each send 98 header lines of 8 KB and stall;
the server's VmRSS after each round (connections still open) and after all of them closed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    alternate,
    bench_lock,
    free_port,
    git_tree,
    load_average,
    machine,
    median,
    print_command,
    proc_status,
    spawn,
    stop,
    table,
)
from tests.support.stalledhttp import HEADS, KeptAliveScraper, header_flood  # noqa: E402
from tests.support.tlsstall import make_cert  # noqa: E402

TOKEN = "bench-http-stall-token-0123"


@contextlib.contextmanager
def daemon(tree: Path, kind: str, tls: bool, work: Path) -> Iterator[tuple[int, Any, int]]:
    """`wattbit KIND` of `tree` on 127.0.0.1 (HTTPS when `tls`): (port, client TLS context, pid)."""
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / f"{kind}.yml"
    if kind == "collector":
        cfg.write_text(f"state_dir: {work / 'state'}\nruns:\n  token: {TOKEN}\n")
    else:
        cfg.write_text("blockio:\n  enabled: false\nsmart:\n  enabled: false\n")
    port = free_port()
    cmd = [sys.executable, "-m", "collector.cli", kind, "--config", str(cfg),
           "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    ctx = None
    if tls:
        cert = make_cert(work)
        (work / "web.yml").write_text(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        )
        cmd += ["--web-config", str(work / "web.yml")]
        ctx = ssl.create_default_context(cafile=str(cert))
    log = (work / f"{kind}.log").open("wb")
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = spawn(cmd, cwd=str(tree), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        give_up = time.monotonic() + 60
        while not KeptAliveScraper("127.0.0.1", port, ctx, timeout=5).scrape():
            if proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"{kind} did not start: {(work / f'{kind}.log').read_text()}")
            time.sleep(0.2)
        yield port, ctx, proc.pid
    finally:
        stop(proc)
        log.close()


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def _nice() -> None:
    os.nice(10)


def scrape_run(tree: Path, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One daemon, one scraper, one flood: the scraper's record."""
    with daemon(tree, a.server, a.tls, work) as (port, ctx, pid):
        scraper = KeptAliveScraper("127.0.0.1", port, ctx, interval=a.interval, timeout=10.0)
        scraper.scrape()
        # The attacker in a process of its own, niced (at a site it has CPUs of its own), so
        # that the scraper's timings are not those of this process's GIL.
        cmd = [sys.executable, "-m", "tests.support.stalledhttp", str(port), a.attack,
               "--rate", str(a.rate), "--hold", str(a.hold)]  # fmt: skip
        if ctx is not None:
            cmd += ["--cafile", str(work / "server.crt")]
        flood = spawn(cmd, setup=_nice, cwd=str(ROOT), stdout=subprocess.PIPE)
        try:
            time.sleep(a.hold / a.rate + 2.0)  # the ramp: until it holds its connections
            log = scraper.run(a.seconds)
            rss = proc_status(pid).get("VmRSS", 0) / 1000
        finally:
            stop(flood)
            scraper.close()
        counts = json.loads((flood.stdout.read() if flood.stdout else b"") or b"{}")
    return {
        "up": round(log.up_ratio(), 3),
        "slots": log.slots,
        "median_ms": round(log.median() * 1e3, 1),
        "p99_ms": round(log.p99() * 1e3, 1),
        "reconnects": log.reconnects,
        "flood_opened": counts.get("opened"),
        "flood_failed": counts.get("failed"),
        "rss_mb": round(rss, 1),
        "errors": sorted(set(log.errors))[:3],
    }


def header_run(tree: Path, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Rounds of header floods: the daemon's VmRSS per round and after."""
    flood = header_flood(98, 8000)
    with daemon(tree, a.server, a.tls, work) as (port, ctx, pid):
        start = proc_status(pid)["VmRSS"] / 1000
        rounds, ok = [], []
        for _ in range(a.flood_rounds):
            socks = []
            for _ in range(256):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                if ctx is not None:
                    s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
                s.setblocking(False)
                with contextlib.suppress(OSError):
                    s.send(flood)  # what the buffers take; a server that refuses reads no more
                socks.append(s)
            time.sleep(a.flood_hold)
            rounds.append(round(proc_status(pid)["VmRSS"] / 1000, 1))
            for s in socks:
                s.close()
            ok.append(KeptAliveScraper("127.0.0.1", port, ctx, timeout=10).scrape())
        time.sleep(a.flood_rest)
        after = proc_status(pid)["VmRSS"] / 1000
    return {
        "rss_mb_start": round(start, 1),
        "rss_mb_per_round": rounds,
        "rss_mb_after_rest": round(after, 1),
        "every_scrape_ok": all(ok),
    }


def main() -> int:
    """Alternate the two trees' runs; print per-run records, medians and the machine."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["collector", "agent"], default="collector")
    ap.add_argument("--tls", action="store_true", help="HTTPS (a self-signed certificate)")
    ap.add_argument("--attack", choices=sorted(HEADS), default="GET /metrics, body announced")
    ap.add_argument("--rate", type=float, default=300.0, help="stalled connections a second")
    ap.add_argument("--hold", type=int, default=400, help="stalled connections kept open")
    ap.add_argument("--seconds", type=float, default=30.0, help="scraping under the flood")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--rounds", type=int, default=3, help="runs per tree, alternating")
    ap.add_argument("--baseline-rev", default="dfb9e01", help="the tree compared against")
    ap.add_argument("--header-flood", action="store_true", help="measure header floods' RSS")
    ap.add_argument("--flood-rounds", type=int, default=4)
    ap.add_argument("--flood-hold", type=float, default=3.0, help="seconds a round stalls")
    ap.add_argument("--flood-rest", type=float, default=5.0, help="seconds after the rounds")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    a = ap.parse_args()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="wattbit-http-stall-") as tmp, bench_lock():
        trees = {"now": ROOT, a.baseline_rev: git_tree(a.baseline_rev, Path(tmp) / "base")}
        for r, name in alternate(list(trees), a.rounds):
            work = Path(tmp) / f"{name}-{r}"
            run = header_run if a.header_flood else scrape_run
            res = run(trees[name], a, work)
            results.setdefault(name, []).append(res)
            print(name, json.dumps(res), flush=True)
    if a.header_flood:
        head = ["tree", "RSS start MB", "max per round MB", "after rest MB", "scrapes ok"]
        rows = [
            [n, _r(median([x["rss_mb_start"] for x in rs])),
             _r(median([max(x["rss_mb_per_round"]) for x in rs])),
             _r(median([x["rss_mb_after_rest"] for x in rs])),
             all(x["every_scrape_ok"] for x in rs)]
            for n, rs in results.items()
        ]  # fmt: skip
    else:
        head = ["tree", "up (median)", "up (min)", "median ms", "p99 ms", "reconnects"]
        rows = [
            [n, _r(median([x["up"] for x in rs]), 3), min(x["up"] for x in rs),
             _r(median([x["median_ms"] for x in rs])), _r(median([x["p99_ms"] for x in rs])),
             median([x["reconnects"] for x in rs])]
            for n, rs in results.items()
        ]  # fmt: skip
    what = "98 header lines of 8 KB x 256" if a.header_flood else repr(a.attack)
    print(f"{a.server}{' HTTPS' if a.tls else ''}, {what}, load {load_average()}")
    table(head, rows)
    print_command()
    if a.out:
        out = {"args": {k: str(v) for k, v in vars(a).items()}, "machine": machine()}
        a.out.write_text(json.dumps({**out, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
