"""Every real PDU recording, served by snmpsim, read by `wattbit collector`, checked against
what net-snmp's snmpbulkwalk reads from the same agent.

The expected values are computed here from snmpbulkwalk's text and the profile's *data* (OIDs,
scale, decimal digits, the row conditions), with this file's own arithmetic: the poller's
decoding code is never called.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from collector.site.profiles import load_profiles
from exporters.pdu.profile import Condition, Metric, Profile
from tests.support.env import FIXTURES, require
from tests.support.realparts import Collector, parse_samples
from tests.support.snmpagents import SnmpSim, have_netsnmp, have_snmpsim, snmpwalk_values

RECORDINGS = Path(__file__).resolve().parents[3] / "shared" / "pdu-recordings"
AVOCENT = FIXTURES / "pdu" / "avocent_pm3000.snmprec"  # MIB-derived: no public capture exists
OUTLET_METRICS = {
    "power_watts": "wattbit_pdu_outlet_power_watts",
    "current_amperes": "wattbit_pdu_outlet_current_amperes",
    "voltage_volts": "wattbit_pdu_outlet_voltage_volts",
    "energy_joules": "wattbit_pdu_outlet_energy_joules_total",
}
UNIT_METRICS = {
    "power_watts": "wattbit_pdu_power_watts",
    "current_amperes": "wattbit_pdu_current_amperes",
    "voltage_volts": "wattbit_pdu_voltage_volts",
    "energy_joules": "wattbit_pdu_energy_joules_total",
}


def _recordings() -> dict[str, Path]:
    files = sorted(RECORDINGS.glob("*.snmprec")) + sorted(RECORDINGS.glob("*.snmpwalk"))
    return {p.stem.replace(".", "_"): p for p in [*files, AVOCENT]}


@pytest.fixture(scope="module")
def sim() -> Iterator[SnmpSim]:
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(have_netsnmp(), "net-snmp's snmpbulkwalk is not installed (Debian package snmp)")
    require(RECORDINGS.is_dir(), f"no PDU recordings at {RECORDINGS}")
    with SnmpSim(_recordings()) as s:
        yield s


@pytest.fixture(scope="module")
def scraped(sim: SnmpSim, tmp_path_factory: pytest.TempPathFactory) -> dict:
    names = list(_recordings())
    lines = ["interval: 2s", "auths:"]
    for n in names:
        lines += [f"  {n}:", "    version: 2c", f"    community: {n}"]
    lines.append("pdus:")
    for n in names:
        lines += [
            f"  - name: {n}",
            f"    address: {sim.endpoint}",
            f"    auth: {n}",
            "    timeout: 3s",
        ]
        if n == "apc_ap8641":
            lines += [
                "    outlets:",
                "      - index: [1, 2]",
                "        host: srv01",
                "        component: server",
            ]
    collector = Collector("\n".join(lines) + "\n", tmp_path_factory.mktemp("collector"))
    try:
        collector.wait_ready()
        deadline = time.monotonic() + 60
        while True:
            s = collector.scrape()
            up = {dict(k[1])["pdu"]: v for k, v in s.items() if k[0] == "wattbit_pdu_up"}
            if (len(up) == len(names) and all(up.values())) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert up == dict.fromkeys(names, 1.0), collector.log.read_text()[-3000:]

        # Two more polls of every PDU: the values checked come from polls whose GETBULKs were
        # sized (and walked side by side) from the poll before, not only from a first poll.
        # A poll is seen as a new wattbit_pdu_poll_duration_seconds (waiting for polls, not
        # for a time that a loaded machine may not keep).
        def durations(s: dict) -> dict[str, float]:
            return {
                dict(k[1])["pdu"]: v
                for k, v in s.items()
                if k[0] == "wattbit_pdu_poll_duration_seconds"
            }

        last = durations(s)
        polls = dict.fromkeys(names, 0)
        deadline = time.monotonic() + 60
        while min(polls.values()) < 2:
            assert time.monotonic() < deadline, f"polls seen: {polls}"
            time.sleep(0.2)
            s = collector.scrape()
            now = durations(s)
            for n in names:
                if now.get(n) != last.get(n):
                    polls[n] += 1
            last = now
        up = {dict(k[1])["pdu"]: v for k, v in s.items() if k[0] == "wattbit_pdu_up"}
        assert up == dict.fromkeys(names, 1.0), collector.log.read_text()[-3000:]
        return s
    finally:
        collector.stop()


# --- the independent side ---------------------------------------------------------------------


class Snmpwalk:
    """net-snmp's reading of one agent, column by column, cached."""

    def __init__(self, sim: SnmpSim, community: str) -> None:
        self.sim, self.community = sim, community
        self.cache: dict[str, dict[str, tuple[str, str]]] = {}

    def column(self, oid: str) -> dict[str, tuple[str, str]]:
        if oid not in self.cache:
            self.cache[oid] = snmpwalk_values(
                self.sim.endpoint, self.community, oid, max_repetitions=50
            )
        return self.cache[oid]

    def number(self, oid: str, column: str) -> int | None:
        typ, raw = self.column(column).get(oid, ("", ""))
        if typ in ("INTEGER", "Gauge32", "Counter32", "Counter64", "Unsigned32"):
            return int(raw.split()[0])
        return None

    def text(self, oid: str, column: str) -> str:
        typ, raw = self.column(column).get(oid, ("", ""))
        if typ == "Hex-STRING":
            return bytes.fromhex(raw.replace(" ", "")).decode("utf-8", "replace").strip("\0 ")
        return raw

    def rows(self, column: str) -> list[str]:
        idx = [o[len(column) + 1 :] for o in self.column(column)]
        return sorted(idx, key=lambda i: tuple(int(a) for a in i.split(".")))


def _expected(w: Snmpwalk, spec: Metric, index: str) -> Fraction | None:
    """raw x scale / 10^digits for one row, from snmpwalk; None where it is no reading."""
    row = f"{index}.{spec.suffix}" if spec.suffix else index
    raw = w.number(f"{spec.oid}.{row}", spec.oid)
    if raw is None:
        return None
    value = Fraction(raw) * Fraction(str(spec.scale))
    if spec.digits_oid:
        digits = w.number(f"{spec.digits_oid}.{row}", spec.digits_oid)
        if digits is None:
            return None
        value /= 10**digits
    return value


def _holds(w: Snmpwalk, cond: Condition, row: str) -> bool:
    if cond.index_arc is not None:
        arcs = row.split(".")
        subject: int | str | None = arcs[
            cond.index_arc - 1 if cond.index_arc > 0 else cond.index_arc
        ]
        subject = int(subject)
    else:
        assert cond.oid is not None
        oid = f"{cond.oid}.{cond.instance if cond.instance is not None else row}"
        subject = w.number(oid, cond.oid)
        if subject is None:
            subject = w.text(oid, cond.oid) or None
    if cond.empty:
        return subject in (None, "")
    if subject is None:
        return False
    checks = [
        cond.in_ is None or subject in cond.in_ or str(subject) in map(str, cond.in_),
        cond.not_in is None
        or (subject not in cond.not_in and str(subject) not in map(str, cond.not_in)),
    ]
    for bound, ok in (
        (cond.gt, lambda a, b: a > b),
        (cond.ge, lambda a, b: a >= b),
        (cond.lt, lambda a, b: a < b),
        (cond.le, lambda a, b: a <= b),
    ):
        if bound is not None:
            checks.append(isinstance(subject, int) and ok(subject, bound))
    return all(checks)


def _unit_candidates(w: Snmpwalk, spec: object) -> list[Fraction]:
    """Every value the unit metric may legitimately be: the spec's rows, or its fallback's."""
    out: list[Fraction] = []
    while spec is not None:
        if spec.instance is not None:  # type: ignore[attr-defined]
            v = _expected(w, spec, spec.instance)  # type: ignore[arg-type, attr-defined]
            out += [v] if v is not None else []
        else:
            rows = [
                r
                for r in w.rows(spec.oid)  # type: ignore[attr-defined]
                if not spec.suffix or r.endswith("." + spec.suffix)
            ]  # type: ignore[attr-defined]
            rows = [
                r.removesuffix("." + spec.suffix) if spec.suffix else r  # type: ignore[attr-defined]
                for r in rows
            ]
            rows = [r for r in rows if all(_holds(w, c, r) for c in spec.where)]  # type: ignore[attr-defined]
            vals = [_expected(w, spec, r) for r in rows]  # type: ignore[arg-type]
            good = [v for v in vals if v is not None]
            if good:
                out += [good[0], sum(good, Fraction(0))]
        spec = spec.fallback  # type: ignore[attr-defined]
    return out


def _profile(scraped: dict, pdu: str, profiles: dict[str, Profile]) -> Profile:
    for (name, labels), _ in scraped.items():
        lab = dict(labels)
        if name == "wattbit_pdu_info" and lab["pdu"] == pdu:
            return profiles[lab["profile"]]
    raise AssertionError(f"no wattbit_pdu_info for {pdu}")


@pytest.mark.parametrize("pdu", list(_recordings()))
def test_every_exported_value_equals_snmpwalk(pdu: str, sim: SnmpSim, scraped: dict) -> None:
    profiles = {p.name: p for p in load_profiles()}
    profile = _profile(scraped, pdu, profiles)
    w = Snmpwalk(sim, pdu)
    checked = 0
    for (name, labels), value in scraped.items():
        lab = dict(labels)
        if lab.get("pdu") != pdu:
            continue
        if name in OUTLET_METRICS.values():
            key = next(k for k, v in OUTLET_METRICS.items() if v == name)
            assert profile.outlets is not None
            spec = getattr(profile.outlets, key)
            expected = _expected(w, spec, lab["outlet"])
            assert expected is not None, f"{pdu} {name} outlet {lab['outlet']}: snmpwalk has none"
            assert value == pytest.approx(float(expected), rel=1e-9, abs=1e-9), (pdu, name, lab)
            assert expected >= 0
            checked += 1
        elif name in UNIT_METRICS.values():
            key = next(k for k, v in UNIT_METRICS.items() if v == name)
            candidates = _unit_candidates(w, getattr(profile.unit, key))
            assert any(value == pytest.approx(float(c), rel=1e-9) for c in candidates), (
                pdu,
                name,
                value,
                candidates,
            )
            checked += 1
    # The README's metering column: who meters what (general, not fitted: counts, not values).
    metered_outlets = {
        "apc_ap8641",
        "apc_apdu10150sm-cpdu",
        "raritan_px3-5493u-k2",
        "raritan_px1-dominion-px",
        "servertech_sentry3-cwg-30vde455",
        "eaton_epdu-ma-24x5-20r",
        "avocent_pm3000",
    }
    outlet_series = [
        k for k in scraped if k[0] in OUTLET_METRICS.values() and dict(k[1]).get("pdu") == pdu
    ]
    if pdu in metered_outlets:
        assert outlet_series, f"{pdu} meters outlets but none were exported"
    elif pdu.startswith("cyberpower"):
        assert not outlet_series, "CyberPower's unmetered outlets read 0: never export them"
    assert checked > 0 or pdu.startswith("servertech_sentry4"), f"nothing exported for {pdu}"


def test_outlet_mapping_labels(scraped: dict) -> None:
    apc = {
        dict(k[1])["outlet"]: dict(k[1])
        for k in scraped
        if k[0] == "wattbit_pdu_outlet_current_amperes" and dict(k[1]).get("pdu") == "apc_ap8641"
    }
    assert apc["1"]["host"] == "srv01" and apc["1"]["component"] == "server"
    assert apc["3"]["host"] == "" and apc["3"]["component"] == ""
    assert apc["1"]["outlet_name"]


def test_identity_and_health(scraped: dict) -> None:
    info = [dict(k[1]) for k in scraped if k[0] == "wattbit_pdu_info"]
    assert {i["pdu"] for i in info} == set(_recordings())
    apc = next(i for i in info if i["pdu"] == "apc_ap8641")
    assert apc["vendor"] == "APC" and apc["profile"] == "apc_rpdu2"
    assert all(v < 3.0 for k, v in scraped.items() if k[0] == "wattbit_pdu_poll_duration_seconds")
    assert parse_samples  # the module's parser is the one realparts uses
