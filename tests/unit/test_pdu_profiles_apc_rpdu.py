"""The APC first-generation Rack PDU profile (PowerNet-MIB rPDU, .318.1.1.12): on a real
first-generation card (apc_ap7931.snmpwalk, an AP7931 on AOS 3.9.2), and on the rPDU tables
that real Rack PDU 2G units keep beside rPDU2.

Expected values are the raw recorded integers times the MIB's unit (rPDULoadStatusLoad: tenths
of A; rPDUIdentDevicePowerWatts: W), worked out here; the same unit's rPDU2 tables, another
table of the same agent, are the second opinion. A unit without rPDU2 (a first-generation card
as it answers) is derived here from a real recording by taking its rPDU2 branch out.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from exporters.pdu.decode import decode
from exporters.pdu.detect import SYS_OBJECT_ID, NoProfile, detect_in_walk, probe_order
from exporters.pdu.profile import Profile
from exporters.snmp.types import Value, Walk
from tests.support.pdurecordings import raw, recording

E = "1.3.6.1.4.1."
RPDU = E + "318.1.1.12."
LOAD = RPDU + "2.3.1.1."  # rPDULoadStatusEntry: Load .2, PhaseNumber .4, BankNumber .5
RPDU2 = E + "318.1.1.26."
MASTERSWITCH_RPDU = E + "318.1.3.4.5"  # masterSwitchrPDU: the first generation
# Rack PDU 2G recordings that answer rPDULoadStatusTable (whole walks and LibreNMS subsets)
WITH_RPDU = [
    "apc_ap8641.snmprec",
    "apc_ap8932.snmprec",
    "apc_ap7902b.snmprec",
    "apc_ap7900b.snmprec",
    "apc_ap8853.snmprec",
    "apc_ap8959eu3.snmprec",
    "apc_apdu9959eu3.snmprec",
]


def rpdu(profiles: list[Profile]) -> Profile:
    return next(p for p in profiles if p.name == "apc_rpdu")


def rows(walk: Walk, column: str) -> list[str]:
    return [o[len(column) + 1 :] for o in walk if o.startswith(column + ".")]


def first_generation(walk: Walk) -> Walk:
    """The walk as a first-generation card answers: no rPDU2 branch, masterSwitchrPDU."""
    out = {o: v for o, v in walk.items() if not o.startswith(RPDU2)}
    out[SYS_OBJECT_ID] = Value("ObjectIdentifier", MASTERSWITCH_RPDU)
    return out


@pytest.mark.parametrize("name", WITH_RPDU)
def test_phase_rows_only_each_ampere_once(profiles: list[Profile], name: str) -> None:
    w = recording(name)
    r = decode(rpdu(profiles), w)
    # phase rows: rPDULoadStatusBankNumber 0 ("phase related"); a capture without the column
    # has its one (phase) row only
    banks = {i: raw(w, LOAD + "5." + i) for i in rows(w, LOAD + "5")}
    phase_rows = [i for i in rows(w, LOAD + "2") if banks.get(i, 0) == 0]
    assert phase_rows
    expected = sum(Fraction(raw(w, LOAD + "2." + i), 10) for i in phase_rows)
    assert r.unit_current_amperes == pytest.approx(float(expected))
    # the same agent's rPDU2PhaseStatusCurrent (tenths of A) says the same, within the 0.1 A
    # the two tables drift apart between reads of a live unit
    rpdu2 = sum(Fraction(raw(w, RPDU2 + "6.3.1.5." + i), 10) for i in rows(w, RPDU2 + "6.3.1.5"))
    assert abs(r.unit_current_amperes - float(rpdu2)) <= 0.1 + 1e-9


def test_a_banked_unit_is_not_counted_twice(profiles: list[Profile]) -> None:
    """The AP8641: phase 1 at 6.6 A, banks 1 and 2 at 4.0 and 2.5 A (parts of that phase)."""
    w = recording("apc_ap8641.snmprec")
    assert [raw(w, LOAD + f"5.{i}") for i in (1, 2, 3)] == [0, 1, 2]
    assert [raw(w, LOAD + f"2.{i}") for i in (1, 2, 3)] == [66, 40, 25]
    r = decode(rpdu(profiles), w)
    assert r.unit_current_amperes == pytest.approx(6.6)  # not 13.1


@pytest.mark.parametrize(
    ("name", "watts"),
    [("apc_ap8641.snmprec", 1230.0), ("apc_ap8932.snmprec", 160.0), ("apc_ap7902b.snmprec", None)],
)
def test_watts_only_where_the_card_measures_them(
    profiles: list[Profile], name: str, watts: float | None
) -> None:
    """rPDUIdentDevicePowerWatts counts where rPDUIdentDeviceLinetoLineVoltage is -1 (not an
    AP7xxx SKU); on the AP7902B it is 120 V (configured) x 1.6 A x 1000/1000 = 192: no reading."""
    w = recording(name)
    r = decode(rpdu(profiles), w)
    assert r.unit_power_watts == watts
    if watts is not None:
        assert raw(w, RPDU + "1.15.0") == -1 and raw(w, RPDU + "1.16.0") == watts
    else:
        assert raw(w, RPDU + "1.15.0") == 120 and r.invalid == {"missing": 1}


def test_identity_and_outlet_names(profiles: list[Profile]) -> None:
    r = decode(rpdu(profiles), recording("apc_ap7902b.snmprec"))
    assert r.identity == {
        "vendor": "APC",
        "model": "AP7902B",
        "firmware": "v6.7.2",
        "serial": "5A1551F39430",
    }
    assert len(r.outlets) == 16
    assert r.outlets[0].name == "SW-CO-NY-3850-01"
    # names only: rPDUOutletStatusLoad reads 0 on a unit that meters no outlet
    assert all(o.current_amperes is None and o.power_watts is None for o in r.outlets)


@pytest.mark.parametrize("name", WITH_RPDU)
def test_rpdu2_still_wins_where_both_answer(profiles: list[Profile], name: str) -> None:
    w = recording(name)
    assert detect_in_walk(profiles, w).profile.name == "apc_rpdu2"
    for sys_object_id in (None, Value("ObjectIdentifier", MASTERSWITCH_RPDU)):
        v = {o: x for o, x in w.items() if o != SYS_OBJECT_ID}
        if sys_object_id is not None:
            v[SYS_OBJECT_ID] = sys_object_id
        assert detect_in_walk(profiles, v).profile.name == "apc_rpdu2", sys_object_id


@pytest.mark.parametrize("name", ["apc_ap8641.snmprec", "apc_ap7902b.snmprec"])
def test_a_first_generation_unit_is_read(profiles: list[Profile], name: str) -> None:
    """Without rPDU2 (a first-generation card), the rPDU profile reads it: before, the rPDU2
    profile took it by its family and it was "up" with no values."""
    w = first_generation(recording(name))
    found = detect_in_walk(profiles, w)
    assert found.profile.name == "apc_rpdu"
    assert "in its product family; its signature columns answer" in found.why
    r = decode(found.profile, w)
    assert r.unit_current_amperes == pytest.approx(raw(w, LOAD + "2.1") / 10)
    assert r.identity["model"] == name.split("_")[1].split(".")[0].upper()


def test_probe_order_puts_the_older_generation_after(profiles: list[Profile]) -> None:
    for sys_object_id in ("", MASTERSWITCH_RPDU, E + "318.1.3.4.6", E + "318.1.3.2.17"):
        order = [p.name for p in probe_order(profiles, sys_object_id)]
        assert order.index("apc_rpdu2") < order.index("apc_rpdu"), sys_object_id
    assert {q for p in profiles for q in p.probe_after} <= {p.name for p in profiles}


def test_an_apc_ups_is_no_rack_pdu(profiles: list[Profile]) -> None:
    w = recording("apc_ap7902b.snmprec")
    ups = {o: v for o, v in w.items() if not o.startswith((RPDU, RPDU2, E + "318.1.1.4."))}
    ups[SYS_OBJECT_ID] = Value("ObjectIdentifier", E + "318.1.3.4.5")
    with pytest.raises(NoProfile, match="product family of apc_rpdu"):
        detect_in_walk(profiles, ups)


def test_a_real_first_generation_card(profiles: list[Profile]) -> None:
    """The AP7931 (AOS 3.9.2, rpdu 3.9.2; TechBlueprints/disunified's capture): detected by its
    own sysObjectID and signature columns, no rPDU2 branch to fall back on. One phase row
    (rPDULoadStatusBankNumber 0, PhaseNumber 1) reading 0 tenths of A; 16 switched outlets, all
    on (rPDUOutletStatusOutletState 1); rPDUIdentDevicePowerWatts 0 beside a configured 120 V
    (an AP7xxx estimate, not a meter): no unit power."""
    w = recording("apc_ap7931.snmpwalk")
    assert not [o for o in w if o.startswith(RPDU2)]
    assert w[SYS_OBJECT_ID].value == MASTERSWITCH_RPDU
    found = detect_in_walk(profiles, w)
    assert found.profile.name == "apc_rpdu"
    assert [raw(w, LOAD + f"{c}.1") for c in (2, 4, 5)] == [0, 1, 0]
    assert raw(w, RPDU + "1.15.0") == 120 and raw(w, RPDU + "1.16.0") == 0
    r = decode(found.profile, w)
    assert r.identity == {
        "vendor": "APC",
        "model": "AP7931",
        "firmware": "v3.9.2",
        "serial": "SSJ00000000",  # scrubbed upstream
    }
    assert r.unit_current_amperes == 0.0  # an idle unit: a reading, not an absence
    assert r.unit_power_watts is None and r.invalid == {"missing": 1}
    assert [(p.name, p.current_amperes) for p in r.phases] == [("1", 0.0)]  # phase 1
    assert r.banks == []
    assert [(o.name, o.on) for o in r.outlets] == [(f"Outlet {n}", True) for n in range(1, 17)]
    assert all(o.current_amperes is None and o.power_watts is None for o in r.outlets)
