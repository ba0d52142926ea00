"""Every real PDU recording, served by snmpsim, read by `wattbit collector`, checked against
what net-snmp's snmpbulkwalk reads from the same agent.

No PDU is configured with a `profile:`: each is detected. Besides the recordings as published,
the collector reads variants derived from them as other models of the same MIBs answer: with
no sysObjectID at all, with a generic one (net-snmp's), and a PDU2-MIB unit without its outlet
label, name and sensor-state columns. Every value exported must equal net-snmp's reading
scaled by the profile, and every reading net-snmp shows must be exported.

The expected values are computed here from snmpbulkwalk's text and the profile's *data* (OIDs,
scale, decimal digits, the row conditions), with this file's own arithmetic: the poller's
decoding and detection code is never called.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from collector.site.profiles import load_profiles
from exporters.pdu.profile import Condition, Metric, Outlets, Profile
from tests.support.env import FIXTURES, OWN_RECORDINGS, RECORDINGS, require
from tests.support.realparts import Collector, parse_samples
from tests.support.snmpagents import SnmpSim, have_netsnmp, have_snmpsim, snmpwalk_values

# The module's first test carries `scraped`'s setup, whose own waits (400 s each, below) must
# end before pytest-timeout's 300 s default would, so that a failure shows its reason.
pytestmark = pytest.mark.timeout(900)

AVOCENT = FIXTURES / "pdu" / "avocent_pm3000.snmprec"  # MIB-derived: no public capture exists
OUTLET_METRICS = {
    "power_watts": "wattbit_pdu_outlet_power_watts",
    "current_amperes": "wattbit_pdu_outlet_current_amperes",
    "voltage_volts": "wattbit_pdu_outlet_voltage_volts",
    "energy_joules": "wattbit_pdu_outlet_energy_joules_total",
    "apparent_power_voltamperes": "wattbit_pdu_outlet_apparent_power_voltamperes",
}
UNIT_METRICS = {
    "power_watts": "wattbit_pdu_power_watts",
    "current_amperes": "wattbit_pdu_current_amperes",
    "voltage_volts": "wattbit_pdu_voltage_volts",
    "energy_joules": "wattbit_pdu_energy_joules_total",
}
# a phase's or bank's current: family -> (the profile's table, the label naming its row)
PART_METRICS = {
    "wattbit_pdu_phase_current_amperes": ("phases", "phase"),
    "wattbit_pdu_bank_current_amperes": ("banks", "bank"),
}
OUTLET_ON = "wattbit_pdu_outlet_on"


# A whole PDU, bank or phase mapped to one host (collector.yml `feeds:`): pdu -> (feed, host)
FEEDS = {
    "cyberpower_pdu81005": [("unit", "mover81")],
    "cyberpower_pdu44005": [("phase:1", "mover44")],
    # the outlets of this PDU feed srv01 (below): its phase may feed another host
    "apc_ap8641": [("phase:1", "mover41")],
    "riedo_updu-rn3214": [("phase:0.2", "mover32"), ("bank:3.0", "mover33")],
    "apc_isx-pdu": [("phase:1", "mover15")],
    "eaton_epdu-ma-24x5-20r": [("unit", "mover24")],
    # no unit power in this recording: no feed series, never a 0
    "servertech_sentry3-cwg-30vde455": [("unit", "mover30")],
}
NET_SNMP_LINUX = "1.3.6.1.4.1.8072.3.2.10"
SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"
PX3 = "raritan_px3-5493u-k2"
# APC Rack PDU 2G units keep the first generation's rPDU tables (banked: a phase row and one
# per bank); without their rPDU2 branch they answer as a first-generation unit does.
FIRST_GENERATION = ("apc_ap8641", "apc_ap7902b")
RPDU2 = "1.3.6.1.4.1.318.1.1.26."
MASTERSWITCH_RPDU = "1.3.6.1.4.1.318.1.3.4.5"  # PowerNet-MIB masterSwitchrPDU (first generation)
ATEN = "aten_pe-16outlet"
ATEN_INTEGERS = "1.3.6.1.4.1.21317.1.3.2.2.2.2.99."  # outletIntegerValueTable
# PDU2-MIB: outletLabel, outletName, measurementsOutletSensorState
PX3_OPTIONAL = (
    "1.3.6.1.4.1.13742.6.3.5.3.1.2.",
    "1.3.6.1.4.1.13742.6.3.5.3.1.3.",
    "1.3.6.1.4.1.13742.6.5.4.3.1.3.",
)


def _not_read() -> dict[str, Path]:
    """Real devices no profile reads: non-PDUs under PDU vendors' enterprises (a UPS, a
    cooling unit, a sensor) and a floor PDU of a MIB no profile reads. Each must be down with
    `no_profile`, never "up" with nothing in it (issue 32)."""
    files = [
        *sorted((FIXTURES / "pdu" / "not_pdus").glob("*.snmprec")),
        *sorted((FIXTURES / "pdu" / "unsupported").glob("liebert_*.snmprec")),
    ]
    return {f"notpdu_{p.stem}": p for p in files}


def _recordings() -> dict[str, Path]:
    files = [
        *sorted(RECORDINGS.glob("*.snmprec")),
        *sorted(RECORDINGS.glob("*.snmpwalk")),
        *sorted(OWN_RECORDINGS.glob("*.snmprec")),
        *sorted(OWN_RECORDINGS.glob("*.snmpwalk")),
    ]
    return {p.stem.replace(".", "_"): p for p in [*files, AVOCENT]}


Variant = tuple[Path, Callable[[str], bool], str | None]  # source, keep(oid), sysObjectID


def _variants() -> dict[str, Variant]:
    """Recordings as other models of the same MIBs answer (see the module docstring)."""
    recs = _recordings()
    out: dict[str, Variant] = {
        f"{name}__no_sysoid": (path, bool, None)
        for name, path in recs.items()
        if path.suffix == ".snmprec"
    }
    if "eaton_epdu-ma-24x5-20r" in recs:
        out["eaton_epdu-ma-24x5-20r__net_snmp_sysoid"] = (
            recs["eaton_epdu-ma-24x5-20r"], bool, NET_SNMP_LINUX
        )  # fmt: skip
    if ATEN in recs:
        # ATEN-PE-CFG-STR firmware: the outlet values as decimal strings only
        out[f"{ATEN}__string_generation"] = (
            recs[ATEN], lambda oid: not oid.startswith(ATEN_INTEGERS), "1.3.6.1.4.1.21317"
        )  # fmt: skip
    for name in FIRST_GENERATION:
        if name in recs:
            # a first-generation APC Rack PDU (AOS 3.x) answers the rPDU tables only
            out[f"{name}__rpdu_only"] = (
                recs[name], lambda oid: not oid.startswith(RPDU2), MASTERSWITCH_RPDU
            )  # fmt: skip
    if PX3 in recs:
        out[f"{PX3}__no_labels_states"] = (
            recs[PX3], lambda oid: not oid.startswith(PX3_OPTIONAL), "1.3.6.1.4.1.13742.6"
        )  # fmt: skip
    return out


def _derive(variant: Variant, dst: Path) -> Path:
    """Write the variant: the source without the lines keep() refuses, sysObjectID replaced."""
    src, keep, sys_object_id = variant
    out = []
    for line in src.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        oid = line.split("|", 1)[0].lstrip(".")
        if oid == SYS_OBJECT_ID:
            if sys_object_id is not None:
                out.append(f"{SYS_OBJECT_ID}|6|{sys_object_id}")
            continue
        if keep(oid):
            out.append(line)
    dst.write_text("\n".join(out) + "\n", encoding="utf-8", errors="surrogateescape")
    return dst


def _origin(pdu: str) -> str:
    """The recording a (possibly derived) PDU comes from."""
    return pdu.split("__", 1)[0]


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require(RECORDINGS.is_dir(), f"no PDU recordings at {RECORDINGS}")
    tmp = tmp_path_factory.mktemp("variants")
    return {name: _derive(v, tmp / f"{name}.snmprec") for name, v in _variants().items()}


@pytest.fixture(scope="module")
def sim(variants: dict[str, Path]) -> Iterator[SnmpSim]:
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(have_netsnmp(), "net-snmp's snmpbulkwalk is not installed (Debian package snmp)")
    with SnmpSim({**_recordings(), **variants, **_not_read()}) as s:
        yield s


@pytest.fixture(scope="module")
def scraped(sim: SnmpSim, tmp_path_factory: pytest.TempPathFactory) -> dict:
    names = sim.communities
    # A poll's deadline is the interval: 5 s held the biggest recording (Raritan PX4, ~12,000
    # var-binds) with ~90 PDUs polled at once on a 2-CPU machine (2 s did not, always), but not
    # with ~110 PDUs on one shared by eight test runs (Raritan and APC cPDU polls hit it):
    # 10 s did not either at a load average of 11 (~120 PDUs, one snmpsim): 30 s, so only a
    # failure, never the machine's load, can take a PDU down. And 8 polls at once, not the
    # default 32: the one snmpsim answers one request at a time, so a poll's time (what the
    # deadline bounds) grows with the polls beside it, while a round's does not; with 32 at
    # once beside a parallel suite, the biggest recordings missed 30 s too.
    lines = ["interval: 30s", "concurrency: 8", "auths:"]
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
        if n in FEEDS:
            lines.append("    feeds:")
            for feed, host in FEEDS[n]:
                lines += [f'      - feed: "{feed}"', f"        host: {host}"]
    collector = Collector("\n".join(lines) + "\n", tmp_path_factory.mktemp("collector"))
    # every recording up, every device no profile reads down (after a failed detection)
    want = {n: 0.0 if n in _not_read() else 1.0 for n in names}
    try:
        collector.wait_ready()
        deadline = time.monotonic() + 400
        while True:
            s = collector.scrape()
            up = {dict(k[1])["pdu"]: v for k, v in s.items() if k[0] == "wattbit_pdu_up"}
            failed = {
                dict(k[1])["pdu"]
                for k, v in s.items()
                if k[0] == "wattbit_pdu_poll_failures_total" and v > 0
            }
            if (up == want and set(_not_read()) <= failed) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert up == want, collector.log.read_text()[-3000:]

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
        deadline = time.monotonic() + 400
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
        assert up == want, collector.log.read_text()[-3000:]
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

    def decimal(self, oid: str, column: str) -> Fraction | None:
        """A DisplayString holding a decimal number ("0.61"), as net-snmp shows it."""
        typ, _ = self.column(column).get(oid, ("", ""))
        # net-snmp shows every OCTET STRING as hex here (-Ox): its bytes, as text
        text = self.text(oid, column).strip() if typ == "Hex-STRING" else ""
        try:
            return Fraction(text) if text and text[-1].isdigit() else None
        except ValueError:
            return None

    def text(self, oid: str, column: str) -> str:
        typ, raw = self.column(column).get(oid, ("", ""))
        if typ == "Hex-STRING":
            return bytes.fromhex(raw.replace(" ", "")).decode("utf-8", "replace").strip("\0 ")
        return raw

    def rows(self, column: str) -> list[str]:
        idx = [o[len(column) + 1 :] for o in self.column(column) if o.startswith(column + ".")]
        return sorted(idx, key=lambda i: tuple(int(a) for a in i.split(".")))


@pytest.fixture(scope="module")
def walks(sim: SnmpSim) -> dict[str, Snmpwalk]:
    """net-snmp's reading of each PDU, one per module: the recordings are static, so the two
    tests of a PDU (and the feeds test) read each column once, not once each."""
    return {c: Snmpwalk(sim, c) for c in sim.communities}


@pytest.fixture(scope="module")
def by_name() -> dict[str, Profile]:
    """Every shipped profile by name, loaded once for the module (not once per test)."""
    return {p.name: p for p in load_profiles()}


def _expected(w: Snmpwalk, spec: Metric, index: str) -> Fraction | None:
    """raw x scale / 10^digits for one row, from snmpwalk; None where it is no reading."""
    row = f"{index}.{spec.suffix}" if spec.suffix else index
    raw: int | Fraction | None
    if spec.text:
        raw = w.decimal(f"{spec.oid}.{row}", spec.oid)
    else:
        raw = w.number(f"{spec.oid}.{row}", spec.oid)
    if raw is None:
        return None
    value = Fraction(raw) * Fraction(str(spec.scale))
    if spec.digits_oid:
        oid = f"{spec.digits_oid}.{row}"
        digits = w.number(oid, spec.digits_oid)
        if digits is None and oid in w.column(spec.digits_oid):
            return None  # there but not a number: no reading
        value /= 10 ** (digits or 0)  # absent digits mean 0
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
        if oid not in w.column(cond.oid):  # absent: the fallback says, else or_absent
            if cond.fallback is not None:
                return _holds(w, cond.fallback, row)
            if cond.or_absent:
                return True
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


def _table_rows(w: Snmpwalk, spec: Outlets) -> set[str]:
    """The rows of an outlet table as net-snmp reads them: index column and value columns."""
    rows = set(w.rows(spec.index_from))
    for _, metric in spec.metrics():
        cut = f".{metric.suffix}" if metric.suffix else ""
        rows |= {r.removesuffix(cut) for r in w.rows(metric.oid) if r.endswith(cut)}
    return {r for r in rows if len(r.split(".")) == len(spec.index)}


def _outlet_table(w: Snmpwalk, profile: Profile) -> Outlets | None:
    """The profile's outlet table the MIB's rules pick: the first of the chain with rows."""
    if profile.outlets is None:
        return None
    chain = list(profile.outlets.chain())
    return next((spec for spec in chain if _table_rows(w, spec)), chain[-1])


def _part_rows(w: Snmpwalk, table: Outlets) -> dict[str, str]:
    """A phase or bank table as net-snmp reads it: label -> row. The label is the number the
    MIB states in the table's `number` column where every row has a distinct one, else the
    row index (the MIB's rule, as the profile writes it down)."""
    rows = sorted(
        r for r in _table_rows(w, table) if not any(_holds(w, c, r) for c in table.skip_if)
    )
    if table.number is not None:
        numbers = [w.number(f"{table.number}.{r}", table.number) for r in rows]
        if None not in numbers and len(set(numbers)) == len(numbers):
            return {str(n): r for n, r in zip(numbers, rows, strict=True)}
    return {r: r for r in rows}


def _simulated(pdu: str) -> set[str]:
    """OIDs the recording holds as snmpsim variations (`2:numeric|...`), not captured values:
    snmpsim makes them change from one read to the next, so nothing can be compared there."""
    path = _recordings()[_origin(pdu)]
    out = set()
    for line in path.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and ":" in parts[1]:
            out.add(parts[0].lstrip("."))
    return out


def _switched_rows(w: Snmpwalk, table: Outlets) -> set[str]:
    """The outlets net-snmp shows a state for (the state column's rows)."""
    if table.state is None:
        return set()
    return {r for r in w.rows(table.state.oid) if len(r.split(".")) == len(table.index)}


def _profile(scraped: dict, pdu: str, profiles: dict[str, Profile]) -> Profile:
    for (name, labels), _ in scraped.items():
        lab = dict(labels)
        if name == "wattbit_pdu_info" and lab["pdu"] == pdu:
            return profiles[lab["profile"]]
    raise AssertionError(f"no wattbit_pdu_info for {pdu}")


@pytest.mark.parametrize("pdu", [*_recordings(), *_variants()])
def test_every_exported_value_equals_snmpwalk(
    pdu: str, walks: dict[str, Snmpwalk], by_name: dict[str, Profile], scraped: dict
) -> None:
    profile = _profile(scraped, pdu, by_name)
    w = walks[pdu]
    checked = 0
    for (name, labels), value in scraped.items():
        lab = dict(labels)
        if lab.get("pdu") != pdu:
            continue
        if name in OUTLET_METRICS.values():
            key = next(k for k, v in OUTLET_METRICS.items() if v == name)
            table = _outlet_table(w, profile)
            assert table is not None
            spec = getattr(table, key)
            expected = _expected(w, spec, lab["outlet"])
            assert expected is not None, f"{pdu} {name} outlet {lab['outlet']}: snmpwalk has none"
            assert value == pytest.approx(float(expected), rel=1e-9, abs=1e-9), (pdu, name, lab)
            assert expected >= 0
            checked += 1
        elif name in PART_METRICS:
            kind, label = PART_METRICS[name]
            part: Outlets | None = getattr(profile, kind)
            assert part is not None and part.current_amperes is not None, (pdu, name)
            row = _part_rows(w, part)[lab[label]]
            expected = _expected(w, part.current_amperes, row)
            assert expected is not None and expected >= 0, (pdu, name, lab)
            assert value == pytest.approx(float(expected), rel=1e-9, abs=1e-9), (pdu, name, lab)
            checked += 1
        elif name == OUTLET_ON:
            table = _outlet_table(w, profile)  # the table read (CyberPower: its fallback)
            assert table is not None and table.state is not None, (pdu, name)
            oid = f"{table.state.oid}.{lab['outlet']}"
            assert value in (0.0, 1.0), (pdu, lab)
            if oid in _simulated(pdu):
                continue  # a variation: snmpsim changes it between reads
            raw = w.number(oid, table.state.oid)
            assert raw in (*table.state.on_states, *table.state.off_states), (pdu, oid, raw)
            assert value == float(raw in table.state.on_states), (pdu, lab, raw)
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
        "raritan_px2-12outlet",
        "raritan_px4-5730-e8v2",
        "raritan_pdu2-12outlet-centreon",
        "hpe_mapdu-pdu2-3_6kva-16a",
        "hpe_p9s18a-pdu3-7_4kva-32a",
        "dell_rpdu-dell6606",
        "liebert_mph2-mphr3142",
        "schleifenbauer_dpm27e",
        "eaton_pdu-mib-dbq145412",
        "panduit_p32g13m",
        "cyberpower_pdu81005",
        "conteg_databus-6x24",
        "aten_pe-16outlet",
        "wti_vmr-8hd20",
        "riedo_updu-rn3214",
        "chatsworth_econnect-2pdu",
    }
    outlet_series = [
        k for k in scraped if k[0] in OUTLET_METRICS.values() and dict(k[1]).get("pdu") == pdu
    ]
    if pdu.endswith("__rpdu_only"):
        # rPDUOutletStatusLoad reads 0 on units that meter no outlet: never exported
        assert not outlet_series
    elif _origin(pdu) in metered_outlets:
        assert outlet_series, f"{pdu} meters outlets but none were exported"
    elif _origin(pdu) == "cyberpower_pdu44005":
        assert not outlet_series, "CyberPower's unmetered outlets read 0: never export them"
    assert checked > 0 or _origin(pdu).startswith("servertech_sentry4"), f"nothing for {pdu}"
    # APC rack PDUs, both generations, say their phases' current (issue 32); the
    # Avocent's and others' tables have no such column in their profiles (yet)
    if profile.name in ("apc_rpdu", "apc_rpdu2"):
        phases = [k for k in scraped if k[0] == "wattbit_pdu_phase_current_amperes"]
        assert [k for k in phases if dict(k[1])["pdu"] == pdu], f"{pdu}: no phase current"


@pytest.mark.parametrize("pdu", list(_variants()))
def test_variants_are_detected_as_their_recording(pdu: str, scraped: dict) -> None:
    profile = {
        dict(k[1])["pdu"]: dict(k[1])["profile"] for k in scraped if k[0] == "wattbit_pdu_info"
    }
    if pdu.endswith("__rpdu_only"):
        # the rPDU tables alone: the first generation's profile, never rPDU2's with nothing
        assert profile[pdu] == "apc_rpdu"
        assert profile[_origin(pdu)] == "apc_rpdu2"  # where both answer, rPDU2 reads more
    else:
        assert profile[pdu] == profile[_origin(pdu)]


def _reading(w: Snmpwalk, spec: Metric, row: str) -> bool:
    """Whether net-snmp shows a reading for spec at the row (the MIB's rules, not decode's)."""
    index = f"{row}.{spec.suffix}" if spec.suffix else row
    raw: int | Fraction | None
    if spec.text:
        raw = w.decimal(f"{spec.oid}.{index}", spec.oid)
    else:
        raw = w.number(f"{spec.oid}.{index}", spec.oid)
    if raw is None or raw < spec.invalid_below or (spec.zero_invalid and raw == 0):
        return False
    if spec.max is not None and raw > spec.max:
        return False
    if spec.state_oid is not None and spec.valid_states is not None:
        state_oid = f"{spec.state_oid}.{index}"
        present = state_oid in w.column(spec.state_oid)  # absent: unknown, the value counts
        if present and w.number(state_oid, spec.state_oid) not in spec.valid_states:
            return False
    return _expected(w, spec, row) is not None


@pytest.mark.parametrize("pdu", [*_recordings(), *_variants()])
def test_every_reading_snmpwalk_shows_is_exported(
    pdu: str, walks: dict[str, Snmpwalk], by_name: dict[str, Profile], scraped: dict
) -> None:
    profile = _profile(scraped, pdu, by_name)
    w = walks[pdu]
    exported_parts = {
        (name, dict(labels)[PART_METRICS[name][1]])
        for (name, labels) in scraped
        if dict(labels).get("pdu") == pdu and name in PART_METRICS
    }
    for name, (kind, _) in PART_METRICS.items():
        part: Outlets | None = getattr(profile, kind)
        if part is None or part.current_amperes is None:
            continue
        shown = [
            label
            for label, row in _part_rows(w, part).items()
            if _reading(w, part.current_amperes, row)
        ]
        assert {(name, label) for label in shown} <= exported_parts, (pdu, name, shown)
    spec = _outlet_table(w, profile)
    if spec is None:
        return
    if spec.state is not None:
        states = {
            dict(labels)["outlet"]
            for (name, labels) in scraped
            if dict(labels).get("pdu") == pdu and name == OUTLET_ON
        }
        valid = (*spec.state.on_states, *spec.state.off_states)
        shown_states = {
            r
            for r in _switched_rows(w, spec)
            if w.number(f"{spec.state.oid}.{r}", spec.state.oid) in valid
            or f"{spec.state.oid}.{r}" in _simulated(pdu)
        }
        assert shown_states <= states, (pdu, sorted(shown_states - states)[:5])
    rows = _table_rows(w, spec)
    rows = {r for r in rows if not any(_holds(w, c, r) for c in spec.skip_if)}
    if spec.metered_if:
        rows = {r for r in rows if any(_holds(w, c, r) for c in spec.metered_if)}
    exported = {
        (name, dict(labels)["outlet"])
        for (name, labels) in scraped
        if dict(labels).get("pdu") == pdu and name in OUTLET_METRICS.values()
    }
    missing = [
        (OUTLET_METRICS[field], row)
        for field, metric in spec.metrics()
        for row in sorted(rows)
        if _reading(w, metric, row) and (OUTLET_METRICS[field], row) not in exported
    ]
    assert not missing, f"{pdu}: net-snmp reads these, wattbit did not export them: {missing[:5]}"


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
    assert {i["pdu"] for i in info} == {*_recordings(), *_variants()}
    apc = next(i for i in info if i["pdu"] == "apc_ap8641")
    assert apc["vendor"] == "APC" and apc["profile"] == "apc_rpdu2"
    assert parse_samples  # the module's parser is the one realparts uses


def test_feeds_carry_the_unit_bank_or_phase_values_to_their_host(
    walks: dict[str, Snmpwalk], by_name: dict[str, Profile], scraped: dict
) -> None:
    """A mapped feed's watts and joules: the unit's own samples, or net-snmp's reading of the
    bank's or phase's row scaled by the profile."""
    unit = {
        (name, dict(labels)["pdu"]): v
        for (name, labels), v in scraped.items()
        if name in ("wattbit_pdu_power_watts", "wattbit_pdu_energy_joules_total")
    }
    feeds = {
        (name, dict(labels)["pdu"], dict(labels)["feed"], dict(labels)["host"]): v
        for (name, labels), v in scraped.items()
        if name.startswith("wattbit_pdu_feed_")
    }
    checked = 0
    for pdu, mapped in FEEDS.items():
        profile = _profile(scraped, pdu, by_name)
        w = walks[pdu]
        for feed, host in mapped:
            watts = ("wattbit_pdu_feed_power_watts", pdu, feed, host)
            joules = ("wattbit_pdu_feed_energy_joules_total", pdu, feed, host)
            if feed == "unit":
                assert (watts in feeds) == (("wattbit_pdu_power_watts", pdu) in unit), watts
                if watts in feeds:
                    assert feeds[watts] == unit[("wattbit_pdu_power_watts", pdu)]
                assert (joules in feeds) == (("wattbit_pdu_energy_joules_total", pdu) in unit)
                if joules in feeds:
                    assert feeds[joules] == unit[("wattbit_pdu_energy_joules_total", pdu)]
            else:
                kind, _, label = feed.partition(":")
                table = profile.banks if kind == "bank" else profile.phases
                assert table is not None and table.power_watts is not None, (pdu, feed)
                row = _part_rows(w, table)[label]
                expected = _expected(w, table.power_watts, row)
                assert expected is not None and feeds[watts] == pytest.approx(float(expected))
                if table.energy_joules is not None:
                    energy = _expected(w, table.energy_joules, row)
                    assert energy is not None
                    assert feeds[joules] == pytest.approx(float(energy))
                else:
                    assert joules not in feeds
            checked += 1
    assert checked == 8
    # only mapped feeds with a reading are exported (the Sentry3 capture has no unit power)
    assert {k[1] for k in feeds} == set(FEEDS) - {"servertech_sentry3-cwg-30vde455"}
    assert (
        "wattbit_pdu_feed_energy_joules_total",
        "eaton_epdu-ma-24x5-20r",
        "unit",
        "mover24",
    ) in feeds


@pytest.mark.parametrize("pdu", sorted(_not_read()))
def test_devices_no_profile_reads_are_down_with_no_profile(
    pdu: str, sim: SnmpSim, by_name: dict[str, Profile], scraped: dict
) -> None:
    """A UPS, a cooling unit or a sensor under a PDU vendor's enterprise (and a floor PDU of a
    MIB no profile reads) is down with `no_profile` and exports no reading at all; net-snmp
    confirms that none of any profile's signature columns has a row on it."""
    failures = {
        dict(k[1])["reason"]: v
        for k, v in scraped.items()
        if k[0] == "wattbit_pdu_poll_failures_total" and dict(k[1])["pdu"] == pdu
    }
    assert failures["no_profile"] >= 1
    # Only its first attempt may have been cut short instead (exporters/polling.py: a first
    # attempt's deadline is a share of the interval, which this many PDUs polled at once on a
    # loaded machine can pass: seen on a CI run at load 15); every later poll says why.
    assert failures.get("deadline", 0) <= 1, failures
    assert {r for r, v in failures.items() if v} - {"deadline"} == {"no_profile"}, failures
    series = {k[0] for k, _ in scraped.items() if dict(k[1]).get("pdu") == pdu}
    assert not {s for s in series if s.startswith(("wattbit_pdu_outlet_", "wattbit_pdu_feed_"))}
    for family in (*UNIT_METRICS.values(), "wattbit_pdu_info"):
        assert family not in series, family
    # the independent side: net-snmp's walk of the whole enterprise subtree
    walked = snmpwalk_values(sim.endpoint, pdu, "1.3.6.1.4.1", max_repetitions=50)
    assert walked, "the agent answers (a down PDU here is no timeout)"
    for p in by_name.values():
        cols = tuple(c + "." for c in p.signature_columns())
        assert not [o for o in walked if o.startswith(cols)], p.name


def test_a_first_generation_rack_pdu_as_it_answers(scraped: dict, walks: dict) -> None:
    """apc_ap7931.snmpwalk: a real first-generation Switched Rack PDU (AP7931, AOS 3.9.2,
    rpdu 3.9.2, sysObjectID masterSwitchrPDU; no rPDU2 branch at all). It is detected as
    apc_rpdu by itself, names its 16 outlets and their state, and reads its one phase row
    (rPDULoadStatusLoad 0: an idle unit, 0 A, a reading not an absence). Its
    rPDUIdentDevicePowerWatts (0) is no meter on an AP7xxx (rPDUIdentDeviceLinetoLineVoltage
    120, a setting): no power series."""
    pdu = "apc_ap7931"
    w = walks[pdu]
    # net-snmp's side: the first-generation tables answer, the rPDU2 branch does not exist
    load = "1.3.6.1.4.1.318.1.1.12.2.3.1.1.2"  # rPDULoadStatusLoad
    assert w.column(RPDU2.rstrip(".")) == {}
    assert w.number(f"{load}.1", load) == 0
    mine = {k: v for k, v in scraped.items() if dict(k[1]).get("pdu") == pdu}
    info = [dict(k[1]) for k in mine if k[0] == "wattbit_pdu_info"]
    assert len(info) == 1
    assert {k: info[0][k] for k in ("profile", "vendor", "model", "firmware", "serial")} == {
        "profile": "apc_rpdu",
        "vendor": "APC",
        "model": "AP7931",
        "firmware": "v3.9.2",
        "serial": "SSJ00000000",  # scrubbed upstream (scripts/sanitize-apc.py)
    }
    on = {dict(k[1])["outlet"]: v for k, v in mine.items() if k[0] == OUTLET_ON}
    assert on == {str(n): 1.0 for n in range(1, 17)}
    names = {dict(k[1])["outlet"]: dict(k[1])["outlet_name"] for k in mine if k[0] == OUTLET_ON}
    assert names == {str(n): f"Outlet {n}" for n in range(1, 17)}
    values = {k[0]: v for k, v in mine.items() if k[0] in UNIT_METRICS.values()}
    assert values == {"wattbit_pdu_current_amperes": 0.0}
    phases = {
        dict(k[1])["phase"]: v
        for k, v in mine.items()
        if k[0] == "wattbit_pdu_phase_current_amperes"
    }
    assert phases == {"1": 0.0}
    assert not [k for k in mine if k[0] == "wattbit_pdu_bank_current_amperes"]
    assert not [k for k in mine if k[0].startswith("wattbit_pdu_outlet_") and k[0] != OUTLET_ON]
