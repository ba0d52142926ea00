"""`wattbit demo`: loop disks, the agent, a load, and a live per-disk table from /metrics.

This is the host-agent part of the one-machine demo; the network, PDU and report parts join
it as they are built. Needs root (loop devices, BPF). Everything it creates is removed on
exit, also on Ctrl-C or failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .agent import build_exporters, build_registry
from .config import AgentConfig
from .exposition import metrics_app
from .httpserver import start_server

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextlib.contextmanager
def loop_disks(n: int, size_mb: int) -> Iterator[list[str]]:
    """n loop devices over files in tmpfs; detached and deleted afterwards whatever happens."""
    d = Path(tempfile.mkdtemp(prefix="wattbit-demo-", dir="/dev/shm"))
    devices: list[str] = []
    try:
        for i in range(n):
            f = d / f"disk{i}.img"
            with open(f, "wb") as fh:
                fh.truncate(size_mb * 2**20)
            out = subprocess.run(
                ["losetup", "--find", "--show", str(f)], check=True, capture_output=True, text=True
            )
            devices.append(out.stdout.strip())
        yield devices
    finally:
        for dev in devices:
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(s: Samples, name: str, **labels: str) -> float:
    return s.get((name, tuple(sorted(labels.items()))), 0.0)


def _quantile(q: float, before: Samples, after: Samples, dev: str, op: str) -> float | None:
    buckets = []
    for (name, labels), v in after.items():
        lab = dict(labels)
        if name == "wattbit_disk_io_latency_seconds_bucket" and (lab["device"], lab["op"]) == (
            dev,
            op,
        ):
            buckets.append((float(lab["le"]), v - before.get((name, labels), 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, prev_le, prev_c = q * buckets[-1][1], 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c
    return prev_le


def _fmt_lat(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1e6:.0f} µs" if v < 1e-3 else f"{v * 1e3:.1f} ms"


def table(before: Samples, after: Samples, dt: float, devices: list[str], backend: str) -> Table:
    """Per-disk rates between two scrapes of the agent's /metrics."""
    t = Table(title=f"wattbit agent /metrics — per disk, last {dt:.1f} s (backend: {backend})")
    for col in ("disk", "read IOPS", "write IOPS", "MB/s", "read p50", "write p99", "busy %"):
        t.add_column(col, justify="right")
    for dev in devices:

        def rate(name: str, dev: str = dev, **labels: str) -> float:
            lab = {"device": dev, **labels}
            return (_get(after, name, **lab) - _get(before, name, **lab)) / dt

        mb = sum(rate("wattbit_disk_io_bytes_total", op=op) for op in ("read", "write")) / 1e6
        busy = rate("wattbit_disk_busy_seconds_total") * 100
        t.add_row(
            dev,
            f"{rate('wattbit_disk_ios_total', op='read'):,.0f}",
            f"{rate('wattbit_disk_ios_total', op='write'):,.0f}",
            f"{mb:,.1f}",
            _fmt_lat(_quantile(0.5, before, after, dev, "read")),
            _fmt_lat(_quantile(0.99, before, after, dev, "write")),
            f"{min(busy, 100.0):.0f}",
        )
    return t


def main(duration: float = 30.0, disks: int = 4) -> int:
    """Run the demo; returns the exit code."""
    console = Console()
    if os.geteuid() != 0:
        console.print("[red]wattbit demo needs root (loop devices and eBPF).[/red]")
        return 1
    for tool in ("losetup", "fio"):
        if shutil.which(tool) is None:
            console.print(f"[red]wattbit demo needs {tool}: run `make demo`, which installs it.")
            return 1
    stop = threading.Event()
    with loop_disks(disks, size_mb=256) as devs:
        names = [Path(d).name for d in devs]
        console.print(f"[bold]wattbit demo[/bold]: {disks} loop disks on tmpfs: {', '.join(devs)}")
        console.print("loading the eBPF block-layer tracer (bcc compiles it: a few seconds)…")
        exporters = build_exporters(AgentConfig())
        server = start_server("127.0.0.1", 0, {"/metrics": metrics_app(build_registry(exporters))})
        url = f"{server.url}/metrics"
        fio: subprocess.Popen[bytes] | None = None
        try:
            backend = exporters[0].backend.name if exporters else "none"  # type: ignore[attr-defined]
            console.print(f"agent serving [cyan]{url}[/cyan] (blockio backend: {backend})")
            # Uneven load on purpose: each disk gets its own queue depth and mix, so the
            # table shows the differences the agent sees.
            args = [
                "fio",
                "--time_based",
                f"--runtime={int(duration)}",
                "--direct=1",
                "--ioengine=libaio",
                "--bs=16k",
                "--size=100%",
                "--output=/dev/null",
            ]
            for i, dev in enumerate(devs):
                args += [
                    f"--name={names[i]}",
                    f"--filename={dev}",
                    f"--iodepth={2 ** (i + 1)}",
                    f"--rw={'randrw' if i % 2 else 'randread'}",
                    "--rwmixread=70",
                ]
            fio = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            before, t_before = _scrape(url), time.monotonic()
            with Live(console=console, refresh_per_second=2) as live:
                while fio.poll() is None and not stop.is_set():
                    time.sleep(1.0)
                    after, t_after = _scrape(url), time.monotonic()
                    live.update(table(before, after, t_after - t_before, names, backend))
                    before, t_before = after, t_after
            if fio.returncode not in (0, None):
                err = fio.stderr.read().decode() if fio.stderr else ""
                console.print(f"[red]fio failed:[/red] {err}")
                return 1
            console.print("done: every figure above came from the agent's own /metrics.")
            return 0
        except KeyboardInterrupt:
            console.print("interrupted: cleaning up")
            return 130
        finally:
            if fio and fio.poll() is None:
                fio.terminate()
                fio.wait()
            server.shutdown()
            for e in exporters:
                close = getattr(e, "close", None)
                if close:
                    close()
