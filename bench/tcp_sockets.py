"""The tcp exporter under 10,000 sockets and a churn of new connections: memory, sample cost,
scrape cost and series, flat or not (issue 31).

Run (root: network namespaces): .venv/bin/python bench/tcp_sockets.py [--phase 15] [--rounds 2]
                                                                      [--rate 2000]

Two namespaces joined by a veth (tests/support/tcpnet.py). In the far one, a sink that reads
every connection to its end, answering every address of 10.231.0.0/16. In the near one, a
`wattbit agent` with only the tcp exporter (interval 5 s, defaults otherwise), a process
holding 10,000 open connections to 10,000 different peer addresses, and, in the `churn`
phases, a process opening `--rate` new connections a second (1 KB each, then closed), in
batches of 100. Phases alternate (hold, churn, churn, hold, ...) `--rounds` times, each
`--phase` seconds; in each, the agent is scraped every second: the scrape's wall time,
wattbit_tcp_sample_duration_seconds, wattbit_tcp_sockets, the number of tcp series, and
the agent's RSS and CPU seconds at the phase's end. Medians per kind of phase; the churn's
achieved rate is measured, not assumed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    alternate,
    bench_lock,
    cpu_seconds,
    interruptible,
    machine,
    median,
    print_command,
    proc_status,
    table,
)
from tests.support.tcpnet import tcp_net  # noqa: E402

CONFIG = "".join(f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power", "nic"))
CHURN = """
import socket, sys, time, json
rate, seconds, port = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
peers = [f"10.231.{100 + (i >> 8)}.{i & 255 or 1}" for i in range(4096)]
t0 = time.monotonic(); n = 0; payload = b"x" * 1000
while time.monotonic() - t0 < seconds:
    batch = []
    for _ in range(100):
        c = socket.socket(); c.setblocking(True)
        c.connect((peers[n % len(peers)], port)); batch.append(c); n += 1
    for c in batch:
        c.sendall(payload); c.shutdown(socket.SHUT_WR)
    for c in batch:
        c.recv(1); c.close()
    lag = n / rate - (time.monotonic() - t0)
    if lag > 0:
        time.sleep(lag)
print(json.dumps({"connections": n, "seconds": time.monotonic() - t0}))
"""


def agent_pid(ns: str) -> int:
    """The agent's pid (the python process inside the namespace running collector.cli)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    for pid in out.split():
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"collector.cli" in cmd and b"agent" in cmd:
            return int(pid)
    raise RuntimeError("no agent")


def scrape(net_ns: str, url: str) -> tuple[float, str]:
    """(seconds, body) of one scrape, from inside the namespace."""
    code = (
        "import sys, time, urllib.request; t = time.perf_counter(); "
        f"b = urllib.request.urlopen({url!r}, timeout=30).read(); "
        "sys.stdout.write(f'{time.perf_counter() - t}\\n' + b.decode())"
    )
    out = subprocess.run(["ip", "netns", "exec", net_ns, sys.executable, "-c", code],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    first, _, body = out.partition("\n")
    return float(first), body


def value(body: str, name: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--sockets", type=int, default=10_000)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rows: dict[str, dict[str, list[float]]] = {"hold": {}, "churn": {}}
    churned: list[tuple[int, float]] = []
    with interruptible(), bench_lock(), tcp_net() as net:
        port = 5999
        tcpnet = (sys.executable, "-m", "tests.support.tcpnet")
        sink = net.popen(net.ns_b, *tcpnet, "sink", str(port), stdout=subprocess.PIPE)
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        hold = net.popen(net.ns_a, *tcpnet, "hold", str(args.sockets), str(port), "100000",
                         stdout=subprocess.PIPE)  # fmt: skip
        assert hold.stdout is not None and hold.stdout.readline().startswith("ready")
        cfg = Path(f"/tmp/wattbit-bench-tcp-{os.getpid()}.yml")
        cfg.write_text(CONFIG)
        agent = subprocess.Popen(
            ["ip", "netns", "exec", net.ns_a, sys.executable, "-m", "collector.cli", "agent",
             "--config", str(cfg), "--listen", "127.0.0.1:9799"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = "http://127.0.0.1:9799/metrics"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    scrape(net.ns_a, url)
                    break
                except subprocess.CalledProcessError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            pid = agent_pid(net.ns_a)
            for _r, kind in alternate(["hold", "churn"], args.rounds):
                churn = None
                if kind == "churn":
                    argv = (CHURN, str(args.rate), str(args.phase), str(port))
                    churn = net.popen(net.ns_a, sys.executable, "-c", *argv, stdout=subprocess.PIPE)
                cpu0, t0 = cpu_seconds(pid), time.monotonic()
                r = rows[kind]
                while time.monotonic() - t0 < args.phase:
                    secs, body = scrape(net.ns_a, url)
                    r.setdefault("scrape_s", []).append(secs)
                    sample = value(body, "wattbit_tcp_sample_duration_seconds")
                    r.setdefault("sample_s", []).append(sample or 0.0)
                    r.setdefault("sockets", []).append(value(body, "wattbit_tcp_sockets") or 0)
                    r.setdefault("series", []).append(
                        sum(1 for ln in body.splitlines() if ln.startswith("wattbit_tcp_"))
                    )
                    time.sleep(1.0)
                if churn is not None:
                    out, _ = churn.communicate(timeout=args.phase * 4 + 60)
                    got = json.loads(out)
                    churned.append((got["connections"], got["seconds"]))
                used = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
                r.setdefault("cpu_per_s", []).append(used)
                r.setdefault("rss_mib", []).append(proc_status(pid)["VmRSS"] / 1024)  # kB
        finally:
            agent.terminate()
            agent.wait(timeout=20)
            cfg.unlink(missing_ok=True)
    print(machine())
    if churned:
        rate = sum(n for n, _ in churned) / sum(s for _, s in churned)
        print(f"churn: {sum(n for n, _ in churned)} connections, {rate:.0f}/s achieved")
    head = ["phase", "sockets", "tcp series", "scrape ms", "sample ms", "agent CPU/s",
            "RSS MiB (each phase)"]  # fmt: skip
    lines: list[list[str]] = []

    def med(r: dict[str, list[float]], key: str, scale: float = 1.0) -> float:
        return (median(r[key]) or 0.0) * scale

    for kind, r in rows.items():
        rss = " ".join(f"{v:.1f}" for v in r["rss_mib"])
        lines.append([kind, f"{med(r, 'sockets'):.0f}", f"{max(r['series']):.0f}",
                    f"{med(r, 'scrape_s', 1e3):.1f}", f"{med(r, 'sample_s', 1e3):.0f}",
                    f"{med(r, 'cpu_per_s'):.3f}", rss])  # fmt: skip
    table(head, lines)
    print_command()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
