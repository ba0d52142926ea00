"""Scrape latency of /metrics through the HTTP server: today's aiohttp server against the
threaded wsgiref server it replaced (read from git at --baseline-rev), alternating, one run.

    .venv/bin/python bench/http_scrape.py [--disks 48] [--repeat 300] [--baseline-rev fc8d9ec]

Both serve the same synthetic 48-disk host (tests/support/synthetic.py's content) through the same
TextRenderer; each scrape is a new connection (as after a Prometheus restart) or, with
--keep-alive, one connection reused (as Prometheus scrapes). Prints medians and p90 per server
and the ratio; the render alone is timed beside them, so the servers' own share shows.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry  # noqa: E402

from bench.harness import in_turn, print_command, ratio  # noqa: E402
from collector.web.exposition import TextRenderer, metrics_app  # noqa: E402
from collector.web.server import start_server  # noqa: E402
from exporters.base import ExportersCollector  # noqa: E402
from tests.support.synthetic import SyntheticBlockio, SyntheticNic  # noqa: E402


def _old_server(rev: str) -> types.ModuleType:
    """The hand-written threaded server of `rev` (collector/httpserver.py), importable here."""
    text = subprocess.run(
        ["git", "show", f"{rev}:collector/httpserver.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    stub = types.ModuleType("collector.webconfig")  # it imports WebConfig for types only
    stub.WebConfig = object  # type: ignore[attr-defined]
    sys.modules["collector.webconfig"] = stub
    path = Path(tempfile.mkdtemp()) / "old_httpserver.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_httpserver", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    """Alternate scrapes of the two servers and print medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--baseline-rev", default="fc8d9ec")
    ap.add_argument("--keep-alive", action="store_true")
    a = ap.parse_args()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportersCollector([SyntheticBlockio(a.disks), SyntheticNic(8, 16, 64)]))
    renderer = TextRenderer(registry)
    servers = {
        "aiohttp (now)": start_server("127.0.0.1", 0, {"/metrics": metrics_app(registry)}),
        f"wsgiref ({a.baseline_rev})": _old_server(a.baseline_rev).start_server(
            "127.0.0.1", 0, {"/metrics": metrics_app(registry)}
        ),
    }
    conns: dict[str, http.client.HTTPConnection] = {}

    def scrape(name: str) -> int:
        server = servers[name]
        conn = conns.get(name) if a.keep_alive else None
        if conn is None:
            conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
            if a.keep_alive:
                conns[name] = conn
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, resp.status
        if not a.keep_alive:
            conn.close()
        return len(body)

    times: dict[str, list[float]] = {name: [] for name in [*servers, "render only"]}
    size = 0
    for name in servers:
        size = scrape(name)  # warm the renderer's cache and each server
    for r in range(a.repeat):
        for name in in_turn(list(servers), r):  # AB BA AB ...
            t0 = time.perf_counter()
            scrape(name)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        renderer.render()
        times["render only"].append(time.perf_counter() - t0)
    for s in servers.values():
        s.shutdown()
    mode = "one kept-alive connection" if a.keep_alive else "a new connection per scrape"
    print(f"/metrics of {size} bytes, {a.repeat} scrapes each, {mode}")
    for name, ts in times.items():
        med, p90 = statistics.median(ts) * 1e3, statistics.quantiles(ts, n=10)[-1] * 1e3
        print(f"{name:24s} median {med:6.2f} ms  p90 {p90:6.2f} ms")
    now, old = (statistics.median(times[n]) for n in servers)
    print(f"ratio now/old {ratio(now, old) or float('nan'):.2f}")
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
