"""The disk alerts end to end on real parts.

Four loop disks: three over files in tmpfs, one over a file on a FUSE file system
(tests/support/fusedelay.py) that delays every read and write by 20 ms. The agent (eBPF backend), a
real Prometheus scraping it every second with the test-only rule variants
(alerts/test-overrides/wattbit-alerts-fast.yml and wattbit-recording-fast.yml, whose disk
rules the alerts read: windows and `for:` divided by 20, evaluated every second), a real
Alertmanager routing to a webhook receiver this test runs.

* Under fio load on all four, WattbitDiskSlow reaches the webhook for the delayed device (its
  reads and its writes) and for no other; no other disk alert fires (checked at the webhook
  and in Prometheus' own list of firing alerts).
* Then the FUSE file system returns EIO: WattbitDiskErrors reaches the webhook for that device.

Everything is torn down afterwards, also on failure, in this order: fio, the loop devices, the
FUSE mount, then the processes (agent, Prometheus, Alertmanager, webhook).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporters.blockio.core.backend import OBJECT as CORE_OBJECT
from tests.support.env import ROOT, require
from tests.support.realparts import (
    Agent,
    free_port,
    have,
    is_root,
    loop_disks,
    wait_for,
)

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.timeout(300)]

FAST_RULES = [
    ROOT / "alerts" / "test-overrides" / "wattbit-recording-fast.yml",
    ROOT / "alerts" / "test-overrides" / "wattbit-alerts-fast.yml",
]
HOST = "e2e-host"
DELAY_MS = 20
DISK_ALERTS = {
    "WattbitDiskSlow",
    "WattbitDiskLatencyHigh",
    "WattbitDiskErrors",
    "WattbitDiskStalled",
    "WattbitControllerSaturated",
}


def _fuse_available() -> bool:
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError):
        return False
    return Path("/dev/fuse").exists() and have("fusermount")


class Webhook:
    """An HTTP receiver on 127.0.0.1 that keeps every Alertmanager notification."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with contextlib.suppress(ValueError), hook.lock:
                    hook.alerts.extend(json.loads(body).get("alerts", []))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def firing(self, alertname: str | None = None) -> set[tuple[str, str, str]]:
        """(alertname, device, op) of every firing alert received so far."""
        with self.lock:
            return {
                (a["labels"].get("alertname", ""), a["labels"].get("device", ""),
                 a["labels"].get("op", ""))
                for a in self.alerts
                if a.get("status") == "firing"
                and (alertname is None or a["labels"].get("alertname") == alertname)
            }  # fmt: skip

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r) if "json" in r.headers.get("Content-Type", "") else r.read()


def prom_firing(port: int) -> set[tuple[str, str, str]]:
    """(alertname, device, op) of the alerts Prometheus has firing now."""
    data = _get(f"http://127.0.0.1:{port}/api/v1/alerts")
    return {
        (a["labels"]["alertname"], a["labels"].get("device", ""), a["labels"].get("op", ""))
        for a in data["data"]["alerts"]
        if a["state"] == "firing"
    }


def prom_query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return list(_get(url)["data"]["result"])


@contextlib.contextmanager
def _fio(devices: list[str], log: Path, seconds: int, extra: list[str]) -> Iterator[None]:
    """fio on every device at once in the background; killed on the way out."""
    cmd = ["fio", "--ioengine=libaio", "--direct=1", "--bs=4k", "--iodepth=4", "--time_based"]
    cmd += [f"--runtime={seconds}", "--rw=randrw", "--randrepeat=0", *extra]
    for dev in devices:
        cmd += [f"--name={Path(dev).name}", f"--filename={dev}"]
    proc = _start(cmd, log)
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_disk_slow_and_errors_reach_the_webhook() -> None:
    require(is_root(), "needs root for loop devices, FUSE and BPF")
    for tool in ("fio", "losetup", "prometheus", "prometheus-alertmanager"):
        require(have(tool), f"{tool} is not installed")
    require(CORE_OBJECT.exists(), f"{CORE_OBJECT} is not built (scripts/build-bpf.sh)")
    require(_fuse_available(), "fusepy + libfuse2 + /dev/fuse + fusermount needed")
    from tests.support.fusedelay import mounted

    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wattbit-alerts-e2e-", dir="/dev/shm"))
    procs: list[subprocess.Popen[bytes]] = []
    stoppers: list[Callable[[], None]] = []
    logs: list[Path] = []
    fuse_dev = ""

    def stop_processes() -> None:
        for stop in reversed(stoppers):
            with contextlib.suppress(Exception):
                stop()
        for p in procs:
            _stop(p)

    with contextlib.ExitStack() as stack:
        # Unwound last to first: this runs last (processes), after the mount, the loop
        # devices and fio below have gone.
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(stop_processes)

        src, mnt, control = tmp / "src", tmp / "mnt", tmp / "fuse-mode"
        src.mkdir()
        control.write_text(f"delay {DELAY_MS}\n")
        with open(src / "slow.img", "wb") as fh:
            fh.truncate(64 * 2**20)
        stack.enter_context(
            mounted(src, mnt, control=control, delay_ms=DELAY_MS, log=tmp / "fuse.log")
        )
        logs.append(tmp / "fuse.log")
        # Buffered loop (--direct-io=off): the loop driver reads and writes the backing file
        # through the FUSE file system (mounted direct_io), so every request waits the delay.
        fuse_dev = subprocess.run(
            ["losetup", "--find", "--show", "--direct-io=off", str(mnt / "slow.img")],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        stack.callback(subprocess.run, ["losetup", "-d", fuse_dev], check=False)
        # back to passthrough first, so that detaching does not wait on the delay
        stack.callback(control.write_text, "pass\n")
        Path(f"/sys/block/{Path(fuse_dev).name}/queue/nomerges").write_text("2")
        fast = stack.enter_context(loop_disks(3, size_mb=64))
        devices = [fuse_dev] + [d.device for d in fast]
        names = [Path(d).name for d in devices]
        slow = names[0]
        for n in names:
            assert Path(f"/sys/block/{n}/queue/rotational").read_text().strip() == "0"

        # The agent sees only these four (other tests may use loop devices at the same time).
        exclude = "^(?!(" + "|".join(names) + ")$)"
        agent = Agent(
            f"blockio:\n  backend: core\n  exclude: '{exclude}'\nnic:\n  enabled: false\n", tmp
        )
        procs.append(agent.proc)
        stoppers.append(agent.stop)
        logs.append(agent.log)

        hook = Webhook()
        stoppers.append(hook.stop)

        am_port = free_port()
        (tmp / "alertmanager.yml").write_text(
            yaml.safe_dump(
                {
                    "route": {
                        "receiver": "test",
                        "group_by": ["alertname", "host", "device", "op"],
                        "group_wait": "1s",
                        "group_interval": "1s",
                        "repeat_interval": "1h",
                    },
                    "receivers": [
                        {
                            "name": "test",
                            "webhook_configs": [
                                {"url": f"http://127.0.0.1:{hook.port}/", "send_resolved": False}
                            ],
                        }
                    ],
                }
            )
        )
        logs.append(tmp / "alertmanager.log")
        procs.append(
            _start(
                ["prometheus-alertmanager", f"--config.file={tmp / 'alertmanager.yml'}",
                 f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                 "--cluster.listen-address="],
                tmp / "alertmanager.log",
            )
        )  # fmt: skip

        prom_port = free_port()
        (tmp / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(p) for p in FAST_RULES],
                    "alerting": {
                        "alertmanagers": [
                            {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}
                        ]
                    },
                    "scrape_configs": [
                        {
                            "job_name": "wattbit-agent",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{agent.port}"], "labels": {"host": HOST}}
                            ],
                        }
                    ],
                }
            )
        )
        logs.append(tmp / "prometheus.log")
        procs.append(
            _start(
                ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp / 'prom-data'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                tmp / "prometheus.log",
            )
        )  # fmt: skip

        agent.wait_ready()
        wait_for(
            lambda: bool(_get(f"http://127.0.0.1:{am_port}/-/ready")), 30, "Alertmanager", logs=logs
        )
        wait_for(
            lambda: bool(prom_query(prom_port, 'up{job="wattbit-agent"} == 1')),
            60,
            "Prometheus scraping the agent",
            logs=logs,
        )
        t_ready = time.monotonic()

        # ---- phase 1: load on all four; only the delayed disk is slow ---------------------
        # 200 IOPS per job keeps the three tmpfs disks from eating both CPUs; the delayed disk
        # manages about 1000/20 ms = 50 (the loop driver serves one request at a time).
        stack.enter_context(_fio(devices, tmp / "fio.log", 150, ["--rate_iops=200"]))
        logs.append(tmp / "fio.log")
        t0 = time.monotonic()
        wait_for(
            lambda: {d for _, d, _ in hook.firing("WattbitDiskSlow")} == {slow},
            120,
            f"WattbitDiskSlow for {slow} at the webhook",
            logs=logs,
        )
        took = time.monotonic() - t0
        print(f"WattbitDiskSlow reached the webhook {took:.1f}s after fio started")
        # Reads and writes are both delayed: both ops fire, within a few evaluations.
        wait_for(
            lambda: hook.firing("WattbitDiskSlow") == {
                ("WattbitDiskSlow", slow, "read"), ("WattbitDiskSlow", slow, "write")
            },
            15,
            "WattbitDiskSlow for reads and writes",
            logs=logs,
        )  # fmt: skip
        time.sleep(5)  # more evaluations under load: nothing else may come up
        disk_alerts = {a for a in hook.firing() if a[0] in DISK_ALERTS}
        assert disk_alerts == {
            ("WattbitDiskSlow", slow, "read"),
            ("WattbitDiskSlow", slow, "write"),
        }, disk_alerts
        in_prom = {a for a in prom_firing(prom_port) if a[0] in DISK_ALERTS}
        assert in_prom == disk_alerts, in_prom
        # nothing else pending either (a near miss on its way to firing)
        pending = prom_query(prom_port, 'ALERTS{alertstate="pending"}')
        assert not [p["metric"] for p in pending if p["metric"]["alertname"] in DISK_ALERTS], (
            pending
        )
        # the peers really were loaded (the median came from disks doing work)
        busy = prom_query(
            prom_port, "sum by (device) (rate(wattbit_disk_io_latency_seconds_count[15s])) >= 1"
        )
        assert {r["metric"]["device"] for r in busy} == set(names), busy

        # ---- phase 2: the FUSE file system fails every I/O ----------------------------------
        control.write_text("eio\n")
        t0 = time.monotonic()
        wait_for(
            lambda: (
                subprocess.run(
                    ["dd", f"if={fuse_dev}", "of=/dev/null", "bs=4k", "count=1", "iflag=direct",
                     f"skip={int(time.monotonic()) % 1000}"],
                    capture_output=True, check=False,
                ).returncode is not None
                and any(d == slow for _, d, _ in hook.firing("WattbitDiskErrors"))
            ),
            60,
            f"WattbitDiskErrors for {slow} at the webhook",
            logs=logs,
        )  # fmt: skip
        took = time.monotonic() - t0
        print(f"WattbitDiskErrors reached the webhook {took:.1f}s after EIO mode")
        errors = {d for _, d, _ in hook.firing("WattbitDiskErrors")}
        assert errors == {slow}, errors
        print(f"timings: setup {t_ready - t_start:.1f}s, total {time.monotonic() - t_start:.1f}s")

    # torn down: no loop device over our files, nothing mounted
    assert not Path(mnt).exists() or not os.path.ismount(mnt)
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(tmp) not in losetup, losetup
