"""`wattbit report` against a real Prometheus holding data loaded with promtool.

The data set is generated here from a model with known numbers: two hosts and a switch, 10 s
scrapes, one hour. Host ``a`` sits on PDU ``p1`` (two outlets with energy counters; its watts
are exactly 200 W + 25 J/Gbit × its Gbit/s), host ``b`` on PDU ``p2`` (watts only, following
its traffic two steps late, with noise), and a switch outlet on ``p2`` feeding no host. Run
``before`` is clean; run ``gap`` has a 2-minute scrape gap of host ``a``'s agent and a
2-minute outage of ``p1`` after which its energy counters restart from zero (a PDU reboot).
Run ``phased`` is marked in three phase runs (``part_of=phased``): idle, full, idle, with no
traffic in the idle ones; host ``b``'s watts, two steps late, carry the load into the first
steps of the second idle phase.

Every expected figure is computed in this file from the model (rates, watts, byte increments)
with its own arithmetic or numpy, never by the report's code. Tolerances: the data travel
exactly (OpenMetrics → TSDB float64 → JSON with Go's shortest round-trip formatting), so sums
agree to float64 rounding (relative 1e-9); fitted figures go through a different algorithm
(numpy's lstsq vs closed-form sums) and agree to 1e-6 relative.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.support.env import ROOT, require
from tests.support.realparts import have, prometheus_on_blocks

STEP = 10
HOUR = 3600
# Runs and faults, in seconds after T0 (the start of the data).
RUNS = {"before": (300, 1500), "gap": (1800, 3000), "phased": (3060, 3540)}
# Phase runs of "phased": name -> (phase, start, end); no traffic in the idle ones.
PHASES = {
    "phased-idle-1": ("idle", 3060, 3180),
    "phased-load": ("full", 3180, 3420),
    "phased-idle-2": ("idle", 3420, 3540),
}
AGENT_GAP = (2410, 2520)  # agent "a" samples missing at these times (inclusive): 12 scrapes
PDU_GAP = (2110, 2220)  # p1 samples missing (12 polls); its counters restart from 0 at 2220
IDLE_A, MARGINAL_A = 200.0, 25.0  # host a: watts = 200 + 25 × Gbit/s exactly
LAG_B = 2  # host b's watts follow its traffic by 2 steps
COARSE_STEP = 36_000.0  # p3's energy register: 0.01 kWh

AGENT = 'instance="{h}:9731",job="wattbit-agent"'
PDU = 'instance="collector:9732",job="wattbit-collector"'


@dataclass
class Truth:
    """The model behind the data: everything the expected numbers are computed from."""

    t0: int
    times: list[int]  # sample times T0 + 10 j
    rate: dict[str, list[float]]  # host -> Gbit/s over (t[j-1], t[j]] (index j)
    nic_bytes: dict[tuple[str, str, str], list[int]]  # (host, iface, dir) -> bytes in interval j
    watts: dict[str, list[float]]  # outlet "pdu/outlet" -> watts at t[j]
    busy_inc: dict[tuple[str, str], float]  # (host, device) -> busy seconds per interval
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # OM line -> samples

    def present(self, source: str, t: int) -> bool:
        """Was a sample scraped from this source at t?"""
        rel = t - self.t0
        if source == "agent:a":
            return not AGENT_GAP[0] <= rel <= AGENT_GAP[1]
        if source == "pdu:p1":
            return not PDU_GAP[0] <= rel <= PDU_GAP[1]
        return True


def make_truth(t0: int) -> Truth:
    """The model: piecewise-constant traffic, watts derived from it."""
    rnd = random.Random(20240501)
    n = HOUR // STEP + 1
    times = [t0 + STEP * j for j in range(n)]
    rate: dict[str, list[float]] = {}
    for h in ("a", "b"):
        r: list[float] = []
        while len(r) < n:
            level = 0.0 if rnd.random() < 0.2 else round(rnd.uniform(0.5, 9.5), 3)
            r += [level] * rnd.randint(3, 12)
        rate[h] = r[:n]
        for phase, s, e in PHASES.values():
            for j in range(n):
                if phase == "idle" and s < STEP * j <= e:
                    rate[h][j] = 0.0
    nic: dict[tuple[str, str, str], list[int]] = {}
    for h, share in (("a", (0.6, 0.4)), ("b", (0.55, 0.45))):
        for d, s in zip(("tx", "rx"), share, strict=True):
            nic[(h, "eth0", d)] = [round(rate[h][j] * 1e9 / 8 * STEP * s) for j in range(n)]
    # b's management interface: 1000 B/s out, 500 B/s in, whatever the traffic
    nic[("b", "eth1", "tx")] = [1000 * STEP] * n
    nic[("b", "eth1", "rx")] = [500 * STEP] * n
    watts: dict[str, list[float]] = {}
    watts["p1/1"] = [120.0 + 15.0 * rate["a"][j] for j in range(n)]
    watts["p1/2"] = [80.0 + 10.0 * rate["a"][j] for j in range(n)]
    noise = [round(rnd.uniform(-3, 3), 1) for _ in range(n)]
    watts["p2/1"] = [150.0 + 30.0 * rate["b"][max(0, j - LAG_B)] + noise[j] for j in range(n)]
    watts["p2/2"] = [60.0 + 0.5 * (rate["a"][j] + rate["b"][j]) for j in range(n)]
    watts["p3/1"] = [250.0 + 0.2 * (j % 50) for j in range(n)]  # a display wall, no traffic
    busy = {("a", "sda"): 9.6, ("a", "nvme0n1"): 5.0, ("b", "sdb"): 3.0}
    return Truth(t0, times, rate, nic, watts, busy)


def openmetrics(tr: Truth) -> str:
    """The OpenMetrics text promtool loads: every series, with the gaps and the reset."""
    out: list[str] = []
    times = tr.times

    def emit(name: str, labels: str, source: str, values: list[float]) -> None:
        for t, v in zip(times, values, strict=True):
            if tr.present(source, t):
                out.append(f"{name}{{{labels}}} {v!r} {t}")

    def cumulative(start: float, incs: list[float]) -> list[float]:
        acc, vals = start, []
        for j, inc in enumerate(incs):
            acc = acc + inc if j else acc
            vals.append(acc)
        return vals

    out.append("# TYPE wattbit_nic_bytes counter")
    for (h, iface, d), incs in tr.nic_bytes.items():
        labels = f'host="{h}",interface="{iface}",direction="{d}",{AGENT.format(h=h)}'
        emit("wattbit_nic_bytes_total", labels, f"agent:{h}", cumulative(7e11, incs))
    out.append("# TYPE wattbit_disk_busy_seconds counter")
    for (h, dev), inc in tr.busy_inc.items():
        labels = f'host="{h}",device="{dev}",{AGENT.format(h=h)}'
        emit("wattbit_disk_busy_seconds_total", labels, f"agent:{h}",
             cumulative(5000.0, [inc] * len(times)))  # fmt: skip
    out.append("# TYPE wattbit_disk_io_bytes counter")
    for h, dev, op, bps in (("a", "sda", "read", 4e8), ("a", "sda", "write", 1e8),
                            ("a", "nvme0n1", "write", 2e9), ("b", "sdb", "read", 2e8)):  # fmt: skip
        labels = f'host="{h}",device="{dev}",op="{op}",{AGENT.format(h=h)}'
        emit("wattbit_disk_io_bytes_total", labels, f"agent:{h}",
             cumulative(1e12, [bps * STEP] * len(times)))  # fmt: skip

    outlets = {
        "p1/1": 'pdu="p1",outlet="1",outlet_name="mover-a-psu1",host="a",component="server"',
        "p1/2": 'pdu="p1",outlet="2",outlet_name="mover-a-psu2",host="a",component="server"',
        "p2/1": 'pdu="p2",outlet="1",outlet_name="mover-b",host="b",component="server"',
        "p2/2": 'pdu="p2",outlet="2",outlet_name="sw-core",host="",component="switch"',
        "p3/1": 'pdu="p3",outlet="1",outlet_name="wall",host="",component="display"',
    }
    out.append("# TYPE wattbit_pdu_outlet_power_watts gauge")
    for o, labels in outlets.items():
        emit("wattbit_pdu_outlet_power_watts", f"{labels},{PDU}", "pdu:" + o[:2], tr.watts[o])
    out.append("# TYPE wattbit_pdu_outlet_energy_joules counter")
    for o in ("p1/1", "p1/2"):  # p2 has no energy counters
        energy, acc = [], 3.6e9
        for j, t in enumerate(tr.times):
            if t - tr.t0 == PDU_GAP[1]:
                acc = 0.0  # the PDU rebooted: its register starts again from zero
            elif j:
                acc += STEP * tr.watts[o][j]
            energy.append(acc)
        emit("wattbit_pdu_outlet_energy_joules_total", f"{outlets[o]},{PDU}", "pdu:p1", energy)
    # p3 keeps energy in a 0.01 kWh register: it moves in 36 kJ steps, every ~14 polls
    true, energy = 3.6e8, []
    for j in range(len(tr.times)):
        true += STEP * tr.watts["p3/1"][j] if j else 0.0
        energy.append(true // COARSE_STEP * COARSE_STEP)
    emit("wattbit_pdu_outlet_energy_joules_total", f"{outlets['p3/1']},{PDU}", "pdu:p3", energy)

    runs = {run: (s, e, "") for run, (s, e) in RUNS.items()}
    runs |= {run: (s, e, f"part_of=phased,phase={ph}") for run, (ph, s, e) in PHASES.items()}
    for fam in ("start_time_seconds", "end_time_seconds", "active", "info"):
        out.append(f"# TYPE wattbit_run_{fam} gauge")
        for run, (s, e, labels) in runs.items():
            for t in tr.times:
                rel = t - tr.t0
                if fam == "start_time_seconds" and rel >= s:
                    out.append(f'wattbit_run_start_time_seconds{{run="{run}"}} {tr.t0 + s} {t}')
                elif fam == "end_time_seconds" and rel >= e:
                    out.append(f'wattbit_run_end_time_seconds{{run="{run}"}} {tr.t0 + e} {t}')
                elif fam == "active" and rel >= s:
                    out.append(f'wattbit_run_active{{run="{run}"}} {int(rel <= e)} {t}')
                elif fam == "info" and rel >= s:
                    out.append(f'wattbit_run_info{{run="{run}",labels="{labels}"}} 1 {t}')
    out.append("# EOF")
    return "\n".join(out) + "\n"


# --- a real Prometheus --------------------------------------------------------------------


@contextlib.contextmanager
def prometheus_with(om_text: str, directory: Path) -> Iterator[str]:
    """promtool loads the text into blocks; Prometheus serves them on 127.0.0.1 (always stopped)."""
    om = directory / "data.om"
    om.write_text(om_text)
    data = directory / "tsdb"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    with prometheus_on_blocks(data, directory, "10s", timeout=60) as url:
        yield url


def wattbit_report(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real command line."""
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@dataclass
class Env:
    """The loaded Prometheus, the model, and the reports made from it."""

    url: str
    truth: Truth
    out: Path
    before: dict
    gap: dict
    explicit: dict
    gap_stdout: str
    phased: dict


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One Prometheus for the module; the reports every test reads."""
    require(have("promtool") and have("prometheus"), "needs prometheus and promtool (Debian)")
    d = tmp_path_factory.mktemp("report")
    t0 = (int(time.time()) // HOUR - 3) * HOUR  # three hours ago, well inside retention
    truth = make_truth(t0)
    with prometheus_with(openmetrics(truth), d) as url:
        out = d / "out"
        r1 = wattbit_report("before", "--prometheus", url, "--out", str(out))
        assert r1.returncode == 0, r1.stderr
        r2 = wattbit_report("gap", "--prometheus", url, "--out", str(out), "--compare", "before")
        assert r2.returncode == 0, r2.stderr
        s, e = RUNS["before"]
        r3 = wattbit_report(
            "--prometheus", url, "--out", str(out), "--name", "explicit",
            "--start", str(t0 + s), "--end", time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + e)),
        )  # fmt: skip
        assert r3.returncode == 0, r3.stderr
        r4 = wattbit_report("phased", "--prometheus", url, "--out", str(out))
        assert r4.returncode == 0, r4.stderr
        yield Env(
            url, truth, out,
            json.loads((out / "before.json").read_text()),
            json.loads((out / "gap.json").read_text()),
            json.loads((out / "explicit.json").read_text()),
            r2.stdout,
            json.loads((out / "phased.json").read_text()),
        )  # fmt: skip


# --- the expected numbers, by hand --------------------------------------------------------


def window_idx(tr: Truth, run: str) -> list[int]:
    """Indices j of the intervals (t[j-1], t[j]] inside the run."""
    s, e = RUNS[run]
    return [j for j, t in enumerate(tr.times) if s < t - tr.t0 <= e]


def bits(tr: Truth, run: str, hosts: list[str]) -> float:
    """(tx + rx) bytes × 8 moved in the window: the counters keep counting through a gap."""
    js = window_idx(tr, run)
    return 8.0 * sum(v[j] for (h, _i, _d), v in tr.nic_bytes.items() if h in hosts for j in js)


def counter_joules(tr: Truth, run: str, outlet: str) -> float:
    """An energy counter's increase: each interval's 10 s × watts, except what the reset lost.

    p1's registers restarted from zero at PDU_GAP[1]: the increase over the outage is the new
    value only (10 s × the watts of the first interval after the restart); what was counted
    between the last sample before the outage and the reboot is gone.
    """
    lost = range(PDU_GAP[0], PDU_GAP[1] + 1) if outlet.startswith("p1") else range(0)
    return sum(
        STEP * tr.watts[outlet][j] for j in window_idx(tr, run) if tr.times[j] - tr.t0 not in lost
    )


def trapezoid_joules(tr: Truth, run: str, outlet: str) -> float:
    """Watts integrated by the trapezoid rule between the samples (all present on p2)."""
    return sum(
        STEP * (tr.watts[outlet][j - 1] + tr.watts[outlet][j]) / 2 for j in window_idx(tr, run)
    )


def step_series(tr: Truth, run: str, hosts: list[str], outlets: list[str]):
    """Per step of the window: (Gbit/s or None, watts or None), as the report must align them.

    Gbit/s of step j needs every NIC counter of the hosts sampled at t[j-1] and t[j]; watts
    need every outlet sampled at t[j] (one sample per 10 s step).
    """
    gb, w = [], []
    for j in window_idx(tr, run):
        t, tp = tr.times[j], tr.times[j - 1]
        ok = all(tr.present(f"agent:{h}", t) and tr.present(f"agent:{h}", tp) for h in hosts)
        moved = sum(v[j] for (h, _i, _d), v in tr.nic_bytes.items() if h in hosts)
        gb.append(moved * 8 / STEP / 1e9 if ok and hosts else None)
        wok = all(tr.present("pdu:" + o[:2], t) for o in outlets)
        w.append(sum(tr.watts[o][j] for o in outlets) if wok else None)
    return gb, w


def pairs(x, y, lag=0):
    """(x[k-lag], y[k]) where both are present."""
    px, py = [], []
    for k in range(len(y)):
        if 0 <= k - lag < len(x) and x[k - lag] is not None and y[k] is not None:
            px.append(x[k - lag])
            py.append(y[k])
    return np.array(px), np.array(py)


def expected_relation(x, y, max_lag=12) -> dict:
    """Least squares, r², Pearson and the best lag, with numpy."""
    px, py = pairs(x, y)
    slope, intercept = np.polyfit(px, py, 1)
    resid = py - (intercept + slope * px)
    r2 = 1 - float(np.sum(resid**2)) / float(np.sum((py - py.mean()) ** 2))
    rs = {}
    for lag in range(-max_lag, max_lag + 1):
        lx, ly = pairs(x, y, lag)
        rs[lag] = float(np.corrcoef(lx, ly)[0, 1])
    best = max(rs, key=lambda k: (round(rs[k], 12), -abs(k), k))
    return {
        "idle_watts": float(intercept),
        "marginal_joules_per_gigabit": float(slope),
        "r_squared": r2,
        "pearson_r": rs[0],
        "lag_seconds": best * STEP,
        "pearson_r_at_lag": rs[best],
        "fit_points": len(px),
    }


KEYS = ("energy_joules", "bytes_tx", "bytes_rx", "gbit_per_second_mean", "watts_mean",
        "joules_per_gigabit", "idle_watts", "marginal_joules_per_gigabit", "r_squared",
        "pearson_r", "lag_seconds", "coverage")  # fmt: skip


def close(a: float | None, b: float, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
    """a within tolerance of b."""
    return a is not None and abs(a - b) <= max(abs_, rel * abs(b))


def check_scope(doc: dict, tr: Truth, run: str, hosts: list[str], outlets: list[str],
                joules: float, bits_hosts: list[str]) -> None:  # fmt: skip
    """Every figure of one scope against the hand numbers."""
    for k in KEYS:
        assert k in doc, k
    dur = RUNS[run][1] - RUNS[run][0]
    assert doc["duration_seconds"] == dur
    b = bits(tr, run, bits_hosts)
    tx = sum(v[j] for (h, _i, d), v in tr.nic_bytes.items() if h in bits_hosts and d == "tx"
             for j in window_idx(tr, run))  # fmt: skip
    assert close(doc["bytes_tx"], tx), (doc["bytes_tx"], tx)
    assert close(doc["bytes_tx"] + doc["bytes_rx"], b / 8)
    assert close(doc["energy_joules"], joules), (doc["energy_joules"], joules)
    assert close(doc["watts_mean"], joules / dur)
    assert close(doc["gbit_per_second_mean"], b / 1e9 / dur)
    assert close(doc["joules_per_gigabit"], joules / (b / 1e9)), doc["joules_per_gigabit"]
    gb, w = step_series(tr, run, hosts, outlets)
    exp = expected_relation(gb, w)
    for k in ("idle_watts", "marginal_joules_per_gigabit", "r_squared", "pearson_r",
              "pearson_r_at_lag"):  # fmt: skip
        assert close(doc[k], exp[k], rel=1e-6, abs_=1e-6), (k, doc[k], exp[k])
    assert doc["lag_seconds"] == exp["lag_seconds"]
    assert doc["fit_points"] == exp["fit_points"]


# --- the tests ----------------------------------------------------------------------------


def test_clean_run_figures_match_hand_numbers(env: Env) -> None:
    tr, doc = env.truth, env.before
    assert doc["step_seconds"] == STEP
    # the only warning: p3's 36 kJ register is too coarse for 20 minutes at ~255 W (306 kJ)
    assert len(doc["warnings"]) == 1, doc["warnings"]
    assert "outlet p3/1 moves in steps of 36000 J" in doc["warnings"][0]
    wall = next(o for o in doc["outlets"] if o["pdu"] == "p3")
    assert wall["energy_source"] == "power" and wall["energy_counter_step_joules"] == COARSE_STEP
    assert close(wall["energy_joules"], trapezoid_joules(tr, "before", "p3/1"))
    disp = doc["components"]["display"]
    check_scope(disp, tr, "before", ["a", "b"], ["p3/1"], wall["energy_joules"], ["a", "b"])
    a = doc["hosts"]["a"]
    ja = counter_joules(tr, "before", "p1/1") + counter_joules(tr, "before", "p1/2")
    check_scope(a, tr, "before", ["a"], ["p1/1", "p1/2"], ja, ["a"])
    assert a["energy_source"] == "counter"
    # host a's watts are exactly 200 W + 25 J/Gbit × Gbit/s: the fit must find the model
    assert close(a["idle_watts"], IDLE_A, abs_=1e-6)
    assert close(a["marginal_joules_per_gigabit"], MARGINAL_A, rel=1e-6)
    assert close(a["r_squared"], 1.0, abs_=1e-9) and a["lag_seconds"] == 0
    b = doc["hosts"]["b"]
    jb = trapezoid_joules(tr, "before", "p2/1")
    check_scope(b, tr, "before", ["b"], ["p2/1"], jb, ["b"])
    assert b["energy_source"] == "power"
    assert b["lag_seconds"] == LAG_B * STEP  # power follows traffic by two steps
    assert b["pearson_r_at_lag"] > b["pearson_r"]
    site_outlets = ["p1/1", "p1/2", "p2/1", "p2/2", "p3/1"]
    js = ja + jb + trapezoid_joules(tr, "before", "p2/2") + trapezoid_joules(tr, "before", "p3/1")
    check_scope(doc["site"], tr, "before", ["a", "b"], site_outlets, js, ["a", "b"])
    assert doc["site"]["energy_source"] == "mixed"
    assert doc["site"]["coverage"] == 1.0
    # components: servers are the outlets of a and b; the switch feeds no host, so its
    # gigabits are the site's
    srv = doc["components"]["server"]
    check_scope(srv, tr, "before", ["a", "b"], ["p1/1", "p1/2", "p2/1"], ja + jb, ["a", "b"])
    sw = doc["components"]["switch"]
    jsw = trapezoid_joules(tr, "before", "p2/2")
    assert sw["bits_from"] == "site"
    check_scope(sw, tr, "before", ["a", "b"], ["p2/2"], jsw, ["a", "b"])


def test_clean_run_disks(env: Env) -> None:
    doc = env.before
    disks = doc["hosts"]["a"]["disks"]
    assert close(disks["sda"]["busy_ratio"], 0.96)
    assert close(disks["nvme0n1"]["busy_ratio"], 0.5)
    assert close(disks["sda"]["bytes_per_second_mean"]["read"], 4e8)
    assert close(disks["nvme0n1"]["bytes"]["write"], 2e9 * 1200)
    s = doc["hosts"]["a"]["disk_summary"]
    assert s["devices"] == 2 and s["busiest"] == "sda" and close(s["busy_ratio_max"], 0.96)
    assert close(doc["hosts"]["b"]["disks"]["sdb"]["busy_ratio"], 0.3)


def test_gap_and_counter_reset(env: Env) -> None:
    tr, doc = env.truth, env.gap
    a = doc["hosts"]["a"]
    ja = counter_joules(tr, "gap", "p1/1") + counter_joules(tr, "gap", "p1/2")
    check_scope(a, tr, "gap", ["a"], ["p1/1", "p1/2"], ja, ["a"])
    # the report counted from zero after the reset, not a negative jump and not the register
    model_joules = sum(
        STEP * (tr.watts["p1/1"][j] + tr.watts["p1/2"][j]) for j in window_idx(tr, "gap")
    )
    assert 0.85 * model_joules < a["energy_joules"] < model_joules
    assert {o["outlet"]: o["energy_counter_resets"] for o in doc["outlets"] if o["pdu"] == "p1"} \
        == {"1": 1, "2": 1}  # fmt: skip
    # 12 of 120 scrapes missing: 90 % coverage for a's agent and p1; b and p2 are whole
    assert close(doc["sources"]["agent:a"]["coverage"], 0.9)
    assert close(doc["sources"]["pdu:p1"]["coverage"], 0.9)
    assert doc["sources"]["agent:b"]["coverage"] == 1.0
    assert doc["sources"]["pdu:p2"]["coverage"] == 1.0
    assert doc["sources"]["pdu:p3"]["coverage"] == 1.0
    assert doc["sources"]["agent:a"]["longest_gap_seconds"] == 120
    assert close(a["coverage"], 0.9) and close(doc["site"]["coverage"], 0.9)
    assert doc["hosts"]["b"]["coverage"] == 1.0
    warn = " ".join(doc["warnings"])
    assert "coverage of agent:a is 90.0 %" in warn and "coverage of pdu:p1 is 90.0 %" in warn
    assert "reset 1 time" in warn
    # what the reset lost shows as a disagreement between p1's counters and its watts
    assert "outlet p1/1: its energy counter" in warn and "outlet p1/2: its energy counter" in warn
    assert "WARNING: coverage of agent:a is 90.0 %" in env.gap_stdout
    b = doc["hosts"]["b"]
    check_scope(b, tr, "gap", ["b"], ["p2/1"], trapezoid_joules(tr, "gap", "p2/1"), ["b"])
    js = ja + sum(trapezoid_joules(tr, "gap", o) for o in ("p2/1", "p2/2", "p3/1"))
    every = ["p1/1", "p1/2", "p2/1", "p2/2", "p3/1"]
    check_scope(doc["site"], tr, "gap", ["a", "b"], every, js, ["a", "b"])
    # busy time keeps counting through the agent's gap
    assert close(a["disks"]["sda"]["busy_ratio"], 0.96)


def test_explicit_window_equals_run(env: Env) -> None:
    a, b = env.before, env.explicit
    assert b["run"] == "explicit" and b["window"]["source"] == "explicit"
    for scope in ("site",):
        for k in KEYS:
            assert a[scope][k] == b[scope][k], k
    for h in ("a", "b"):
        for k in KEYS:
            assert a["hosts"][h][k] == b["hosts"][h][k], (h, k)


def test_compare_side_by_side(env: Env) -> None:
    cmp = env.gap["compare"]
    assert cmp["run"] == "before"
    row = cmp["site"]["joules_per_gigabit"]
    assert row["this"] == env.gap["site"]["joules_per_gigabit"]
    assert row["other"] == env.before["site"]["joules_per_gigabit"]
    assert close(row["change"], (row["this"] - row["other"]) / row["other"])
    assert set(cmp["hosts"]) == {"a", "b"}
    md = (env.out / "gap.md").read_text()
    assert "## Compared with before" in md
    assert "Compared with before" in (env.out / "gap.html").read_text()


def test_outputs_and_schema_keys(env: Env) -> None:
    for name in ("before", "gap", "explicit"):
        for ext in ("json", "md", "html"):
            assert (env.out / f"{name}.{ext}").stat().st_size > 0
    doc = env.gap
    for scope in [doc["site"], *doc["hosts"].values(), *doc["components"].values()]:
        assert set(KEYS) <= set(scope)
    assert {o["energy_source"] for o in doc["outlets"]} == {"counter", "power"}
    # the keys in the schema's order (tests/unit/test_report_math.py pins every object's list)
    top = ["schema", "run", "window", "phases", "prometheus", "generated_at", "step_seconds",
           "max_lag_seconds", "coverage_threshold", "interfaces_regex", "match", "site",
           "energy_view", "hosts", "components", "power", "transfers", "outlets", "sources",
           "warnings", "timings_seconds", "prometheus_requests"]  # fmt: skip
    assert list(env.before) == list(env.explicit) == top
    assert list(doc) == [*top, "compare"] and list(doc["compare"]["report"]) == top
    site = list(doc["site"])
    for host in doc["hosts"].values():
        assert list(host) == [
            *site, "interfaces", "power_source", "outlets", "disks", "disk_summary", "limited_by"
        ]  # fmt: skip
        assert set(host["limited_by"]) == {"resource", "subject", "cause", "utilisation",
                                           "evidence", "others"}  # fmt: skip
    for comp in doc["components"].values():
        assert list(comp) == [*site, "bits_from", "bits_hosts", "outlets"]


def test_idle_watts_from_the_idle_phases(env: Env) -> None:
    tr, doc = env.truth, env.phased
    assert [(p["run"], p["phase"], p["start"] - tr.t0, p["end"] - tr.t0, p["steps"])
            for p in doc["phases"]] == [
        ("phased-idle-1", "idle", 3060, 3180, 12),
        ("phased-load", "full", 3180, 3420, 24),
        ("phased-idle-2", "idle", 3420, 3540, 12),
    ]  # fmt: skip
    assert doc["phases"][0]["labels"] == {"part_of": "phased", "phase": "idle"}
    assert not env.before["phases"] and not env.explicit["phases"]  # nothing marks those
    every = ["p1/1", "p1/2", "p2/1", "p2/2", "p3/1"]
    # the steps wholly inside an idle phase: samples at 3070..3180 and 3430..3540
    idle = [j for j in window_idx(tr, "phased")
            if any(ph == "idle" and s < tr.times[j] - tr.t0 <= e
                   for ph, s, e in PHASES.values())]  # fmt: skip
    assert len(idle) == 24

    def watts_at(j: int, outlets: list[str]) -> float:
        return sum(tr.watts[o][j] for o in outlets)

    for scope, outlets, hosts in ((doc["hosts"]["a"], ["p1/1", "p1/2"], ["a"]),
                                  (doc["hosts"]["b"], ["p2/1"], ["b"]),
                                  (doc["site"], every, ["a", "b"])):  # fmt: skip
        assert scope["idle_watts_source"] == "idle_phases" and scope["idle_steps"] == 24
        want = float(np.median([watts_at(j, outlets) for j in idle]))
        assert close(scope["idle_watts"], want), (scope["idle_watts"], want)
        # the marginal cost: the least-squares slope of the line through those idle watts
        px, py = pairs(*step_series(tr, "phased", hosts, outlets))
        slope = float(np.sum(px * (py - want)) / np.sum(px * px))
        assert close(scope["marginal_joules_per_gigabit"], slope, rel=1e-6), slope
    # host a draws exactly 200 W + 25 J/Gbit: both found exactly
    a = doc["hosts"]["a"]
    assert close(a["idle_watts"], IDLE_A) and close(a["marginal_joules_per_gigabit"], MARGINAL_A)
    assert close(a["r_squared"], 1.0)
    # b's watts follow its traffic two steps late: the first two steps of the second idle
    # phase still draw for the load before it, and the median is not pulled by them
    b_idle = [tr.watts["p2/1"][j] for j in idle]
    assert max(b_idle) > 160 and doc["hosts"]["b"]["idle_watts"] < 155
    # the site's figures per phase: means of its per-step Gbit/s and watts
    load = [j for j in window_idx(tr, "phased") if 3180 < tr.times[j] - tr.t0 <= 3420]
    gb, _w = step_series(tr, "phased", ["a", "b"], every)
    steps = window_idx(tr, "phased")
    full = doc["phases"][1]
    assert close(full["watts_mean"], float(np.mean([watts_at(j, every) for j in load])))
    assert close(full["gbit_per_second_mean"],
                 float(np.mean([gb[steps.index(j)] for j in load])))  # fmt: skip
    # no traffic in the idle phases but b's management interface: 1500 B/s
    assert close(doc["phases"][0]["gbit_per_second_mean"], 1500 * 8 / 1e9)
    md = (env.out / "phased.md").read_text()
    assert "## Phases" in md and "| phased-load | full |" in md


def test_unknown_run_fails_cleanly(env: Env) -> None:
    r = wattbit_report("no-such-run", "--prometheus", env.url, "--out", str(env.out))
    assert r.returncode == 1
    assert "no run called 'no-such-run'" in r.stderr


CHECK_IMAGES = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.setAttribute('data-images', ok + '/' + imgs.length);
});
</script></body>"""


def test_html_renders_in_headless_chromium(env: Env, tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    require(browser is not None, "needs Debian's chromium")
    assert browser is not None
    page = env.out / "gap.html"
    n_img = page.read_text().count("<img ")
    assert n_img >= 6  # site timeline + fit + components, each host's timeline, fit, disks
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.exists(), r.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))[:, :, :3]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    assert float(img.std()) > 0.05, "the screenshot is blank"
    non_white = float((img.min(axis=2) < 0.9).mean())
    assert non_white > 0.02, f"only {non_white:.3%} of the page is drawn"
    # every <img> decoded: the same page with a script that counts decoded images
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", CHECK_IMAGES))
    r = subprocess.run(
        [*flags, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert f'data-images="{n_img}/{n_img}"' in r.stdout, r.stdout[-500:] + r.stderr[-2000:]
