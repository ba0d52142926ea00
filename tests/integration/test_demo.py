"""`make demo` end to end: it completes, its report shows a non-zero J/Gbit with coverage of
at least 95 %, and afterwards no loop device, namespace or demo process remains.

Runs the real `make demo` target (bootstrap included) from the working tree, shortened with
DEMO_ARGS='--duration 40'. Then a second run interrupted with SIGINT in the middle of its
stream must leave nothing behind either.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.env import require, sigint_default

ROOT = Path(__file__).resolve().parents[2]
DEMO_MARKERS = ("collector.demo", "collector.demo.pdusim", "/wattbit-demo-")


def _leftovers() -> list[str]:
    found = []
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [line for line in losetup.splitlines() if "wattbit-demo-" in line]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line}" for line in netns.splitlines() if "wattbit-demo" in line]
    if subprocess.run(["ip", "link", "show", "wbdemo0"], capture_output=True).returncode == 0:
        found.append("link wbdemo0")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in DEMO_MARKERS):
            found.append(f"process {d.name}: {cmd[:160]}")
    return found


@pytest.fixture
def demo_ready() -> None:
    require(os.geteuid() == 0, "the demo needs root")
    for tool in ("make", "losetup", "ip", "prometheus", "prometheus-alertmanager"):
        require(shutil.which(tool) is not None, f"{tool} is not installed")
    require(not _leftovers(), f"a demo is already running: {_leftovers()}")


def test_make_demo_reports_joules_per_gigabit(demo_ready: None, tmp_path: Path) -> None:
    out = tmp_path / "report"
    t0 = time.monotonic()
    r = subprocess.run(
        ["make", "-s", "demo", f"DEMO_ARGS=--duration 40 --out {out} --no-wait"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "SIMULATED" in r.stdout
    assert "Prometheus" in r.stdout and str(out / "demo-stream.html") in r.stdout.replace("\n", "")
    doc = json.loads((out / "demo-stream.json").read_text())
    site = doc["site"]
    assert site["joules_per_gigabit"] > 0, site
    assert site["coverage"] >= 0.95, (site["coverage"], doc["sources"])
    assert doc["hosts"], "no host in the report"
    for ext in ("md", "html"):
        assert (out / f"demo-stream.{ext}").stat().st_size > 0
    assert elapsed < 180, f"the demo took {elapsed:.0f} s"
    assert not _leftovers(), _leftovers()


def test_ctrl_c_leaves_nothing_behind(demo_ready: None, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/python"), "-m", "collector.demo", "--duration", "60",
         "--out", str(tmp_path), "--no-wait"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C goes to the whole process group
        preexec_fn=sigint_default,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if "run demo-stream started" in line or not line:
            break
    assert "run demo-stream started" in seen, seen
    time.sleep(8)  # into the stream
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, seen + rest
    assert not _leftovers(), _leftovers()
