"""Profiles of issue 25: CyberPower's ePDU2 generation and the vendors added with it.

Each value against the recording's raw integer (or decimal string) scaled by hand from the
vendor's MIB, and against LibreNMS's expected values where LibreNMS reads the same object.
"""

from __future__ import annotations

import pytest

from collector.site.profiles import load_profiles
from exporters.pdu.decode import decode
from exporters.pdu.profile import Profile
from exporters.snmp.types import Value
from tests.support.pdurecordings import decoded, librenms_sensors, outlet, raw, recording

E = "1.3.6.1.4.1."
KWH = 3.6e6


@pytest.fixture(scope="module")
def profiles() -> list[Profile]:
    return load_profiles()


def _named(profiles: list[Profile], name: str) -> Profile:
    return next(p for p in profiles if p.name == name)


# ---- CyberPower ePDU2 (PDU81005, firmware 1.3.4) ---------------------------------------------

EPDU2_METERED = E + "3808.1.1.6.6.2.4.1."  # ePDU2OutletMeteredStatusEntry
LOAD = E + "3808.1.1.3.2.3.1.1."  # ePDULoadStatusEntry


def test_cyberpower_pdu81005_outlets_from_the_epdu2_table(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu81005.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "cyberpower"
    assert r.outlet_table == EPDU2_METERED + "7"
    assert [o.index for o in r.outlets] == [str(n) for n in range(1, 9)]
    for n in range(1, 9):
        o = outlet(r, str(n))
        assert o.power_watts == raw(w, f"{EPDU2_METERED}7.{n}")  # W
        assert o.current_amperes == pytest.approx(raw(w, f"{EPDU2_METERED}6.{n}") / 10)
        assert o.energy_joules == pytest.approx(raw(w, f"{EPDU2_METERED}11.{n}") / 10 * KWH)
    assert [outlet(r, str(n)).power_watts for n in range(5, 9)] == [82, 37, 73, 28]
    assert (r.identity["model"], r.identity["firmware"]) == ("PDU81005", "1.3.4")


def test_cyberpower_pdu81005_unit_is_the_first_row_not_the_sum(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu81005.snmprec")
    _, r = decoded(profiles, w)
    # Row 1 is phase 1, row 2 bank 1 of the same single-phase unit: 216 W, never 432.
    assert raw(w, LOAD + "7.1") == raw(w, LOAD + "7.2") == 216
    assert r.unit_power_watts == 216
    assert r.unit_current_amperes == pytest.approx(1.1)
    assert r.unit_voltage_volts == pytest.approx(229.0)
    lnms = {s["sensor_oid"].lstrip("."): s for s in librenms_sensors("cyberpower_pdu81005.snmprec")}
    assert lnms[LOAD + "7.1"]["sensor_current"] == r.unit_power_watts
    assert lnms[LOAD + "6.1"]["sensor_current"] == r.unit_voltage_volts
    # The outlets add up to no more than the unit (the loaded ones: 220 W of 216 W, rounding).
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(216, abs=8)


def test_cyberpower_a_multiphase_unit_without_bank_numbers_gives_no_unit_power(
    profiles: list[Profile],
) -> None:
    """Without BankNumber a 3-phase unit's rows cannot be told apart: no value, not a guess."""
    w = recording("cyberpower_pdu81005.snmprec")
    w[E + "3808.1.1.3.2.1.2.0"] = Value("Integer32", 3)  # ePDULoadDevNumPhases
    r = decode(_named(profiles, "cyberpower"), w)
    assert r.unit_power_watts is None and r.unit_current_amperes is None
    assert r.invalid.get("missing", 0) >= 2
    w[E + "3808.1.1.3.2.1.2.0"] = Value("Integer32", 1)
    assert decode(_named(profiles, "cyberpower"), w).unit_power_watts == 216


def test_cyberpower_epdu2_rows_win_over_the_older_table(profiles: list[Profile]) -> None:
    """A unit answering both generations is read from ePDU2, whatever the older one says."""
    w = recording("cyberpower_pdu44005.snmpwalk")
    p = _named(profiles, "cyberpower")
    assert decode(p, w).outlet_table == E + "3808.1.1.3.3.5.1.1.2"  # no ePDU2 rows: ePDU
    for n in (1, 2):
        w[f"{EPDU2_METERED}7.{n}"] = Value("Gauge32", 40 + n)
    r = decode(p, w)
    assert r.outlet_table == EPDU2_METERED + "7"
    assert [(o.index, o.power_watts) for o in r.outlets] == [("1", 41.0), ("2", 42.0)]


# ---- Conteg: SCHLEIFENBAUER-DATABUS-MIB under Conteg's enterprise -----------------------------

CONTEG = E + "28402.12.1.1.2."


def test_conteg_is_schleifenbauers_mib_under_its_own_enterprise(profiles: list[Profile]) -> None:
    conteg, schleifenbauer = _named(profiles, "conteg"), _named(profiles, "schleifenbauer")
    assert conteg.oem_of == "schleifenbauer" and conteg.vendor == "Conteg"
    assert conteg.sys_object_ids == [E + "28402.11"]
    moved = [c.replace(E + "31034.", E + "28402.") for c in schleifenbauer.signature_columns()]
    assert conteg.signature_columns() == moved
    w = recording("conteg_databus-6x24.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "conteg"
    # 6 daisy-chained devices x 24 metered outlets, indexed device.outlet
    assert len(r.outlets) == 144 and r.outlets[0].index == "1.1" and r.outlets[-1].index == "6.24"
    for o in r.outlets:
        assert o.power_watts == raw(w, f"{CONTEG}7.2.1.11.{o.index}")  # W
        assert o.current_amperes == pytest.approx(raw(w, f"{CONTEG}7.2.1.5.{o.index}") / 100)
        assert o.voltage_volts == pytest.approx(raw(w, f"{CONTEG}7.2.1.7.{o.index}") / 100)
        assert o.energy_joules == pytest.approx(raw(w, f"{CONTEG}7.2.1.2.{o.index}") * KWH)
    lnms = [s for s in librenms_sensors("conteg_databus-6x24.snmprec") if ".6.1.1.10." in s["sensor_oid"]]
    assert len(lnms) == 6
    assert r.unit_power_watts == sum(s["sensor_current"] for s in lnms) == 470
