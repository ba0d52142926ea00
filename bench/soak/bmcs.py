"""The soak's BMC side (issue 34): healthy Redfish BMCs polled by the collector beside hostile
ones, what /metrics says of them, and the figures: healthy freshness, peak RSS, no failed page.

Healthy: sushy-static serving the real mockups of tests/fixtures/bmc (one process each, the
mockups in turn); without sushy-static, tests/support/hostilebmc.py's `slow` mode (not hostile:
the mockup, each answer 0.25 s late). Hostile: tests/support/hostilebmc.py, one process each,
the modes of --hostile-bmc-modes in turn (`MODE` or `session:QUIRK`). A hostile BMC exists only
during the attack: its port is closed before (a BMC down, refused) and after it (the recovery).
"""

from __future__ import annotations

import argparse
import math
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import free_port
from bench.soak.actors import start
from bench.soak.common import quantile
from collector.demo.procs import Procs, wait_for
from tests.support.bmcs import MOCKUPS, mockups, sushy_static_path

# the default cycle: the costliest first (issue 34's 4.3 GB), then the page breaker, a session
# that leaks on a 401, a body that never ends, a login answered past the request timeout
MODES = "bloat,strings,session:forbid-one,drip,session:slow-login"
MODE_MOCKUP = "dmtf-public-rackmount1"  # what the strings and session modes serve
USER = "wattbit"
BLOAT_MAX_BODY = 4 * 1024 * 1024  # the hostile BMC's max_body: bloat's documents fit, just
RSS_GOAL_MIB = {1: 200.0}  # issue 34: one bloated BMC under 200 MB at peak, three under 300
RSS_GOAL_MIB_MORE = 300.0


def add_options(ap: argparse.ArgumentParser) -> None:
    """The BMC side's command-line options."""
    ap.add_argument("--hostile-bmcs", type=int, default=1, help="hostile BMCs during the attack")
    ap.add_argument("--healthy-bmcs", type=int, default=2, help="healthy Redfish BMCs")
    ap.add_argument(
        "--hostile-bmc-modes", default=MODES,
        help="hostilebmc.py modes the hostile BMCs take in turn (MODE or session:QUIRK)",
    )  # fmt: skip


def _open(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


class BmcSide:
    """The BMC processes, their collector configuration, and their stats at the attack's end."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.work = work
        self.password = f"soak-{free_port()}-bmc"  # what the session mode checks
        self.pw_file = work / "bmc.pw"
        self.pw_file.write_text(self.password + "\n")
        self.pw_file.chmod(0o600)
        names = mockups()
        self.healthy = {
            f"bmc-ok-{i}": (names[i % len(names)], free_port()) for i in range(args.healthy_bmcs)
        }
        modes = [m for m in args.hostile_bmc_modes.split(",") if m]
        self.hostile = {
            f"bmc-bad-{i}": (modes[i % len(modes)], free_port()) for i in range(args.hostile_bmcs)
        }
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # the hostile ones
        self.healthy_children: dict[str, subprocess.Popen[bytes]] = {}

    def start_healthy(self, procs: Procs) -> None:
        """The healthy BMCs, each serving as soon as its port is open."""
        exe = sushy_static_path()
        for name, (mockup, port) in self.healthy.items():
            if exe:
                cmd = [exe, "-i", "127.0.0.1", "-p", str(port), "-m", str(MOCKUPS / mockup)]
            else:  # not hostile: the mockup, each answer 0.25 s late
                cmd = [*self._hostile_cmd("slow", port), "--mockup", str(MOCKUPS / mockup)]
            self.healthy_children[name] = start(procs, name, cmd)
        for name, (_, port) in self.healthy.items():
            wait_for(lambda port=port: _open(port), 60, name, alive=procs.check,  # type: ignore[misc]
                     logs=[self.work / f"{name}.log"], errors=(OSError,))  # fmt: skip

    def _hostile_cmd(self, mode: str, port: int) -> list[str]:
        return [sys.executable, "-m", "tests.support.hostilebmc", "--port", str(port),
                "--mode", mode]  # fmt: skip

    def start_hostile(self, procs: Procs) -> None:
        """The hostile BMCs, on the ports the collector has polled (refused) since its start."""
        for name, (spec, port) in self.hostile.items():
            mode, _, quirk = spec.partition(":")
            cmd = self._hostile_cmd(mode, port)
            if mode in ("strings", "session", "slow"):
                cmd += ["--mockup", str(MOCKUPS / MODE_MOCKUP)]
            if mode == "session":
                cmd += ["--user", USER, "--password", self.password]
                cmd += ["--quirk", quirk or "expire", "--login-delay", "8"]
            self.children[name] = start(procs, name, cmd)

    def stats(self) -> dict[str, Any]:
        """The session-mode BMCs' own counts (logins, logouts, sessions live at most)."""
        import http.client
        import json

        out: dict[str, Any] = {}
        for name, (spec, port) in self.hostile.items():
            if not spec.startswith("session"):
                continue
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/_stats")
                out[name] = json.loads(conn.getresponse().read())
            except (OSError, ValueError, http.client.HTTPException) as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
            finally:
                conn.close()
        return out

    def config(self) -> str:
        """The `bmcs:` entries of the collector's YAML."""
        lines = ["bmcs:"]
        both = {**{n: (m, p, False) for n, (m, p) in self.healthy.items()},
                **{n: (m, p, True) for n, (m, p) in self.hostile.items()}}  # fmt: skip
        for name, (spec, port, hostile) in both.items():
            session = spec.startswith("session")
            lines += [
                f"  - name: {name}",
                "    protocol: redfish",
                f"    address: http://127.0.0.1:{port}",
                "    allow_plain_http: true",
                f"    auth: {'session' if session else 'basic'}",
                f"    username: {USER}",
                f"    password_file: {self.pw_file}",
                f"    host: {name}-host",
            ]
            if hostile and spec == "bloat":
                lines.append(f"    max_body: {BLOAT_MAX_BODY}")
        return "\n".join(lines) + "\n"


_SAMPLE = re.compile(
    rb"^(wattbit_bmc_up|wattbit_bmc_last_poll_timestamp_seconds|wattbit_bmc_poll_failures_total)"
    rb'\{bmc="([^"]*)"(?:,reason="([^"]*)")?\} (\S+)',
    re.M,
)


class BmcWatch:
    """What each collector scrape says of the BMCs: healthy ones' last successful poll age."""

    def __init__(self, healthy: list[str], hostile: list[str]) -> None:
        self.healthy, self.hostile = healthy, hostile
        self.lock = threading.Lock()
        self.last_ok: dict[str, float] = {}  # the last poll seen to succeed, its end (Unix s)
        self.ages: list[tuple[float, str, float]] = []  # (scrape time, healthy BMC, age s)
        self.down: list[tuple[float, str]] = []  # healthy BMC with up != 1 (or no series)
        self.missing: list[tuple[float, str]] = []  # hostile BMC's up series not on the page
        self.hostile_up: list[tuple[float, str]] = []  # hostile BMC with up 1 (read, parsed)
        self.failures: dict[tuple[str, str], float] = {}
        self.marks: dict[str, dict[tuple[str, str], float]] = {}

    def update(self, now: float, body: bytes) -> None:
        """Read one 200 scrape of the collector."""
        up: dict[str, float] = {}
        ts: dict[str, float] = {}
        failures: dict[tuple[str, str], float] = {}
        for m in _SAMPLE.finditer(body):
            bmc, value = m[2].decode(), float(m[4])
            if m[1] == b"wattbit_bmc_up":
                up[bmc] = value
            elif m[1] == b"wattbit_bmc_last_poll_timestamp_seconds":
                ts[bmc] = value
            elif m[3] is not None:
                failures[(bmc, m[3].decode())] = value
        with self.lock:
            self.failures = failures
            for name in self.healthy:
                if up.get(name) == 1.0 and name in ts:
                    self.last_ok[name] = ts[name]  # up: the last poll, ended at ts, succeeded
                else:
                    self.down.append((now, name))
                if name in self.last_ok:
                    self.ages.append((now, name, now - self.last_ok[name]))
            self.missing += [(now, n) for n in self.hostile if n not in up]
            self.hostile_up += [(now, n) for n in self.hostile if up.get(n) == 1.0]

    def ready(self) -> bool:
        """Every healthy BMC read successfully once."""
        with self.lock:
            return all(n in self.last_ok for n in self.healthy)

    def mark(self, phase: str) -> None:
        """Remember the failure counters as they are at the start of a phase."""
        with self.lock:
            self.marks[phase] = dict(self.failures)


def vmhwm_mib(pid: int) -> float:
    """A live process' peak resident set size (VmHWM), MiB; nan once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return math.nan
    m = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(m[1]) / 1024 if m else math.nan


def analyse_bmcs(
    res: dict[str, Any],
    watch: BmcWatch,
    side: BmcSide,
    phases: dict[str, tuple[float, float]],
    interval: float,
) -> dict[str, Any]:
    """The BMC side's figures per phase and its goals."""
    with watch.lock:
        ages, down, missing = list(watch.ages), list(watch.down), list(watch.missing)
        hostile_up = list(watch.hostile_up)
        marks, final = {k: dict(v) for k, v in watch.marks.items()}, dict(watch.failures)
    nxt = {"idle": "attack", "attack": "recovery"}
    out: dict[str, Any] = {
        "healthy": {n: m for n, (m, _) in side.healthy.items()},
        "hostile": {n: m for n, (m, _) in side.hostile.items()},
        "healthy_server": "sushy-static" if sushy_static_path() else "hostilebmc slow",
    }
    for phase, (a, b) in phases.items():
        xs = [age for t, _, age in ages if a <= t < b]
        base, until = marks.get(phase, {}), marks.get(nxt.get(phase, ""), final)
        delta = {f"{bmc}/{r}": int(v - base.get((bmc, r), 0.0))
                 for (bmc, r), v in until.items() if v > base.get((bmc, r), 0.0)}  # fmt: skip
        healthy_fails = {k: v for k, v in delta.items() if k.split("/")[0] in side.healthy}
        out[phase] = {
            "healthy_age_s": {
                "median": quantile(xs, 0.5),
                "p99": quantile(xs, 0.99),
                "max": max(xs, default=math.nan),
            },
            "healthy_down_scrapes": len({t for t, _ in down if a <= t < b}),
            "healthy_failures": healthy_fails,
            "hostile_failures": {k: v for k, v in delta.items() if k not in healthy_fails},
            "hostile_series_missing_scrapes": len({t for t, _ in missing if a <= t < b}),
            "hostile_up_scrapes": dict(Counter(n for t, n in hostile_up if a <= t < b)),
        }
        out[phase]["healthy_fresh"] = (
            not out[phase]["healthy_age_s"]["max"] > 2 * interval
            and not out[phase]["healthy_down_scrapes"]
            and not healthy_fails
        )
    peak = res.get("collector_peak_rss_mib", {})
    goal = RSS_GOAL_MIB.get(len(side.hostile), RSS_GOAL_MIB_MORE)
    coll = res.get("latency", {}).get("collector", {}).get("attack", {})
    out["rss_goal_mib"] = goal
    out["goals"] = {
        "healthy_bmcs_fresh": all(out[p]["healthy_fresh"] for p in phases),
        "peak_rss_under_goal": not peak.get("end", math.inf) >= goal,
        "no_failed_scrape_with_hostile_bmcs": coll.get("failed", 1) == 0
        and out["attack"]["hostile_series_missing_scrapes"] == 0,
    }
    return out


def report_bmcs(res: dict[str, Any], interval: float) -> None:
    """Print the BMC side."""
    b = res.get("bmcs")
    if not b:
        return
    met = {True: "met", False: "MISSED"}
    peak = res.get("collector_peak_rss_mib", {})
    print(f"\nBMCs: healthy {b['healthy']} ({b['healthy_server']}), hostile {b['hostile']}"
          " (during the attack only)")  # fmt: skip
    for phase in ("idle", "attack", "recovery"):
        if phase in b:
            p = b[phase]
            a = p["healthy_age_s"]
            print(
                f"  {phase:<8} healthy last good poll age s median {a['median']:.1f}, p99"
                f" {a['p99']:.1f}, max {a['max']:.1f} (goal <= {2 * interval:g}); scrapes with"
                f" one down {p['healthy_down_scrapes']}, failures {p['healthy_failures']};"
                f" hostile failures {p['hostile_failures']}, up in scrapes"
                f" {p['hostile_up_scrapes']}, scrapes without a hostile"
                f" one's series {p['hostile_series_missing_scrapes']}"
            )
    print(
        f"  collector peak RSS (VmHWM) {peak.get('attack_start', math.nan):.1f} MiB before the"
        f" hostile BMCs, {peak.get('end', math.nan):.1f} MiB at the end (goal <"
        f" {b['rss_goal_mib']:g}); session BMCs' counts {res.get('bmc_hostile_stats')}"
    )
    g = b["goals"]
    print(
        f"  BMC GOALS: healthy fresh {met[g['healthy_bmcs_fresh']]}; peak RSS"
        f" {met[g['peak_rss_under_goal']]}; no failed scrape with hostile BMCs"
        f" {met[g['no_failed_scrape_with_hostile_bmcs']]}"
    )
