"""The real agent process with every exporter on: ready time, memory, CPU per scrape.

Run (root): PYTHONPATH=. .venv/bin/python bench/agent_process.py [--against main]
     [--disks 48] [--rounds 5] [--scrapes 40]
Compares this checkout with another revision (``--against``, extracted with git archive into
a temporary directory, the BPF object copied from here) started alternately (A B, B A, ...) on
the same loop disks (``--disks`` of them, each given reads and writes first so the core
backend has them in its maps): per start, seconds from spawn to the first /metrics answer
naming the core backend, VmRSS after it, and the CPU seconds the process spends per scrape
(utime + stime over ``--scrapes`` sequential scrapes). Medians, and this/against ratios.
Both trees' bytecode is compiled first (an installed package's is).
Issue 35's goals for a 48-disk host: scrape <= 5 ms CPU, ready <= 0.25 s, VmRSS <= 45 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    alternate,
    bench_lock,
    cpu_seconds,
    free_port,
    load_average,
    median,
    print_command,
    proc_status,
    spawn,
    stop,
    table,
)
from collector.demo.loopdisks import loop_disks

CONFIG = """\
blockio:
  backend: core
cpu:
  enabled: true
"""
MARK = 'wattbit_blockio_backend_info{backend="core"'
OBJECT = Path("exporters/blockio/core/blockio.bpf.o")


@contextlib.contextmanager
def revision(rev: str) -> Iterator[Path]:
    """A temporary tree of the revision, with this checkout's built BPF object."""
    d = Path(tempfile.mkdtemp(prefix="wattbit-bench-rev-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(d)], input=archive, check=True)
        shutil.copy2(ROOT / OBJECT, d / OBJECT)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def one_start(tree: Path, workdir: Path, scrapes: int, devices: list[str]) -> dict[str, float]:
    """Start the agent of `tree`, wait for it, scrape it; its figures."""
    cfg = workdir / "agent.yaml"
    cfg.write_text(CONFIG)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [sys.executable, "-m", "collector.cli", "agent", "--config", str(cfg)]
    cmd += ["--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    with (workdir / "agent.log").open("ab") as log:
        t0 = time.monotonic()
        proc = spawn(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited {proc.returncode}: see {workdir}/agent.log")
            with contextlib.suppress(OSError):
                if MARK.encode() in _get(url):
                    break
            if time.monotonic() - t0 > 60:
                raise RuntimeError("agent not ready in 60 s")
            time.sleep(0.01)
        ready = time.monotonic() - t0
        _load_disks(devices)  # after the start: the program counts only what completes then
        body = _get(url)
        c0 = cpu_seconds(proc.pid)
        for _ in range(scrapes):
            body = _get(url)
        per_scrape = (cpu_seconds(proc.pid) - c0) / scrapes
        rss = proc_status(proc.pid).get("VmRSS", 0) / 1000  # MB
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return {
            "ready_s": ready,
            "scrape_cpu_ms": per_scrape * 1e3,
            "rss_mb": rss,
            "series": series,
        }
    finally:
        stop(proc)


def _compile(tree: Path) -> None:
    """Both trees' bytecode written before the first start, as a package install does (pip,
    dpkg): with PYTHONDONTWRITEBYTECODE set, every start would compile the sources again."""
    for pkg in ("collector", "exporters"):
        cmd = [sys.executable, "-m", "compileall", "-q", str(tree / pkg)]
        subprocess.run(cmd, check=True, capture_output=True)


def _load_disks(devices: list[str]) -> None:
    """Reads and writes on every disk, so the core backend counts each (and renders them)."""
    for rw in ("randread", "randwrite"):
        args = ["fio", f"--rw={rw}", "--bs=4k", "--ioengine=psync", "--direct=1", "--io_size=64k"]
        for dev in devices:
            args += [f"--name={Path(dev).name}", f"--filename={dev}"]
        subprocess.run(args, check=True, capture_output=True)


def main() -> None:
    """Alternate the two revisions' agents; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--against", default="main", help="git revision to compare with")
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scrapes", type=int, default=40)
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"this": [], args.against: []}
    with (
        revision(args.against) as other,
        loop_disks(args.disks, size_mb=4, prefix="wattbit-bench-scrape-") as disks,
        tempfile.TemporaryDirectory(prefix="wattbit-bench-agent-") as work,
        bench_lock(),
    ):
        trees = {"this": ROOT, args.against: other}
        for tree in trees.values():
            _compile(tree)
        print(f"load average before: {load_average()}")
        for r, name in alternate(list(trees), args.rounds):
            res = one_start(trees[name], Path(work), args.scrapes, [d.device for d in disks])
            results[name].append(res)
            print(f"round {r} {name}: {res}", flush=True)
        print(f"load average after: {load_average()}")
    keys = ("ready_s", "scrape_cpu_ms", "rss_mb", "series")
    med = {n: {k: median([x[k] for x in res]) or 0.0 for k in keys} for n, res in results.items()}
    table(
        ["agent", *(f"median {k}" for k in keys)],
        [[n, *(f"{m[k]:.3f}" for k in keys)] for n, m in med.items()],
    )
    a, b = med["this"], med[args.against]
    ratios = {k: a[k] / b[k] if b[k] else float("nan") for k in keys[:3]}
    print(
        f"this / {args.against}: ready {ratios['ready_s']:.2f}, scrape CPU "
        f"{ratios['scrape_cpu_ms']:.2f}, VmRSS {ratios['rss_mb']:.2f}"
    )
    print_command()


if __name__ == "__main__":
    main()
