"""The Liebert, Enlogic, Schleifenbauer and older Eaton profiles against their real recordings.

Every expected value is the raw recorded integer times the scale the MIB documents, written out
here by hand (never the profile's ``scale``); LibreNMS's expected JSON (sensor_current = raw x
multiplier / divisor) is a second opinion, and where it is wrong the test says how. Recordings:
tests/fixtures/pdu/recordings/ (provenance in the README there).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from exporters.pdu.decode import decode, metered
from exporters.pdu.detect import SYS_OBJECT_ID, detect_in_walk
from exporters.pdu.profile import Profile
from exporters.snmp.oid import under
from exporters.snmp.types import Value, Walk
from tests.support.pdurecordings import decoded, librenms_by_oid, outlet, raw, recording

E = "1.3.6.1.4.1."
KWH = 3_600_000  # J per kWh
TENTH_KWH = Fraction(KWH, 10)  # J per 0.1 kWh

MPH2 = "liebert_mph2-mphr3142.snmprec"
MPH = "liebert_mph-ncv27axxd30.snmprec"
ENLOGIC = "enlogic_en1814.snmprec"
DPM27E = "schleifenbauer_dpm27e.snmprec"
DATABUS = "schleifenbauer_databus-test.snmprec"
EATON = "eaton_pdu-mib-dbq145412.snmprec"

# recording -> profile it must match
RECORDING_PROFILE = {
    MPH2: "liebert_gp_pdu",
    MPH: "liebert_gp_pdu",
    ENLOGIC: "enlogic",
    DPM27E: "schleifenbauer",
    DATABUS: "schleifenbauer",
    EATON: "eaton_pdu",
}

# LIEBERT-GP-PDU-MIB lgpPdu (.476.1.42.3.8)
LGP = E + "476.1.42.3.8."
PS = LGP + "30.20.1."  # lgpPduPsEntry: pdu.ps
PS_LINE = LGP + "30.40.1."  # lgpPduPsLineEntry: pdu.ps.line
RB = LGP + "40.20.1."  # lgpPduRbEntry: pdu.branch
RCP = LGP + "50.20.1."  # lgpPduRcpEntry: pdu.branch.receptacle
# ENLOGIC-PDU2-MIB pdu (.38446.1)
ENL = E + "38446.1."
# SCHLEIFENBAUER-DATABUS-MIB sdbDevice (.31034.12.1.1.2)
SDB = E + "31034.12.1.1.2."
SDB_IN = SDB + "6.1.1."  # sdbDevInEntry: device.input
SDB_OUT_MT = SDB + "7.2.1."  # sdbDevOutMtEntry: device.outlet
# Eaton PDU-MIB pdu (.534.6.6.6)
EPDU = E + "534.6.6.6."
EPDU_OUT = EPDU + "1.2.2.1."  # outletEntry: outlet


def lnms_value(sensor: dict, walk: Walk) -> float:
    """LibreNMS's value, after checking it is its own arithmetic on the recorded integer."""
    oid = sensor["sensor_oid"].lstrip(".")
    expected = raw(walk, oid) * sensor["sensor_multiplier"] / sensor["sensor_divisor"]
    assert sensor["sensor_current"] == pytest.approx(expected, abs=1e-9), oid
    return float(sensor["sensor_current"])


def rows(walk: Walk, column: str) -> list[str]:
    """The row indexes of one column, in numeric order."""
    idx = [o[len(column) + 1 :] for o in walk if o.startswith(column + ".")]
    return sorted(idx, key=lambda i: tuple(int(a) for a in i.split(".")))


# ---- detection ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RECORDING_PROFILE))
def test_detected_by_family_and_signature(profiles: list[Profile], name: str) -> None:
    walk = recording(name)
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == RECORDING_PROFILE[name], found.why
    if walk[SYS_OBJECT_ID].value == E + "476.1.42":
        # liebertGlobalProducts, every Liebert product's root (UPSes, cooling, floor PDUs):
        # no family, the lgpPdu signature columns decide (issue 32)
        assert "in no profile's family; its signature columns answer" in found.why
    else:
        assert "in its product family; its signature columns answer" in found.why


@pytest.mark.parametrize("name", sorted(RECORDING_PROFILE))
@pytest.mark.parametrize(
    "sys_object_id",
    [None, Value("ObjectIdentifier", "1.3.6.1.4.1.8072.3.2.10")],
    ids=["absent", "net-snmp"],
)
def test_detected_without_sys_object_id(
    profiles: list[Profile], name: str, sys_object_id: Value | None
) -> None:
    walk = {o: v for o, v in recording(name).items() if o != SYS_OBJECT_ID}
    if sys_object_id is not None:
        walk[SYS_OBJECT_ID] = sys_object_id
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == RECORDING_PROFILE[name], found.why
    assert "no profile's family" in found.why


def test_registered_product_families_are_claimed(profiles: list[Profile]) -> None:
    fams = {p.name: p.sys_object_ids for p in profiles}
    # LIEBERT-GP-REGISTRATION-MIB lgpRackPDU / lgpRackPDU2, never liebertGlobalProducts itself
    assert fams["liebert_gp_pdu"] == [E + "476.1.42.4.8.2", E + "476.1.42.4.8.4"]
    assert fams["enlogic"] == [E + "38446.1"]  # enlogic.pdu
    assert fams["schleifenbauer"] == [E + "31034.11"]  # schleifenbauerProducts
    assert fams["eaton_pdu"] == [E + "534.6.6.6"]  # PDU-MIB pdu (G3 is .534.6.6.7)
    for oid in (E + "476.1.42.4.8.2.2", E + "476.1.42.4.8.4.1"):  # lgpMPH, lgpRPC2kMPX
        walk = {**recording(MPH2), SYS_OBJECT_ID: Value("ObjectIdentifier", oid)}
        assert detect_in_walk(profiles, walk).profile.name == "liebert_gp_pdu"
    walk = {**recording(DPM27E), SYS_OBJECT_ID: Value("ObjectIdentifier", E + "31034.11.2")}
    assert detect_in_walk(profiles, walk).profile.name == "schleifenbauer"  # dpm3


@pytest.mark.parametrize("name", sorted(RECORDING_PROFILE))
def test_walk_roots_and_scalars_cover_what_decode_reads(profiles: list[Profile], name: str) -> None:
    walk = recording(name)
    profile, full = decoded(profiles, walk)
    roots, scalars = profile.walk_roots(), set(profile.scalar_oids())
    polled = {o: v for o, v in walk.items() if o in scalars or any(under(o, r) for r in roots)}
    assert decode(profile, polled) == full


# ---- Liebert MPH2 (LIEBERT-GP-PDU-MIB, 16 receptacles) ------------------------------------------


def test_liebert_mph2(profiles: list[Profile]) -> None:
    w = recording(MPH2)
    _, r = decoded(profiles, w)
    idx = [f"1.2.{n}" for n in range(1, 17)]  # pdu 1, branch 2, receptacle 1..16
    assert [o.index for o in r.outlets] == idx
    for o in r.outlets:
        # UNITS: EcHundredths 0.01 A, EpTenths 0.1 V, PwrOut W, EnergyAccum 0.1 kWh
        assert o.current_amperes == pytest.approx(raw(w, RCP + "61." + o.index) / 100)
        assert o.voltage_volts == pytest.approx(raw(w, RCP + "56." + o.index) / 10)
        assert o.power_watts == raw(w, RCP + "65." + o.index)
        assert o.energy_joules == pytest.approx(raw(w, RCP + "85." + o.index) * TENTH_KWH)
    assert outlet(r, "1.2.1").name == "Server1_p13"  # lgpPduRcpEntryUsrLabel
    assert outlet(r, "1.2.10").name == "RCP B-10 [V15E0000712]"
    p15 = outlet(r, "1.2.15")
    assert (p15.current_amperes, p15.power_watts, p15.voltage_volts) == (0.96, 239.0, 238.7)
    assert p15.energy_joules == pytest.approx(599.2 * KWH)
    assert outlet(r, "1.2.16").power_watts == 0.0  # off (PwrState 1): a real 0
    # PEM (power source) row 1.1 and its line 1.1.1
    assert r.unit_power_watts == raw(w, PS + "65.1.1") == 514
    assert r.unit_energy_joules == pytest.approx(20450 * TENTH_KWH)  # 2045.0 kWh
    assert r.unit_current_amperes == pytest.approx(raw(w, PS_LINE + "22.1.1.1") / 100) == 2.42
    assert r.unit_voltage_volts == pytest.approx(raw(w, PS_LINE + "19.1.1.1") / 10) == 238.1
    assert r.identity == {
        "vendor": "Liebert",
        "model": "MPHR3142",
        "firmware": "0.4.6.29",
        "serial": "V15E0000712",
    }
    assert r.invalid == {}
    # cross-checks: outlets 503 W of the PEM's 514 W; receptacle energy vs the branch meter
    assert sum(o.power_watts or 0 for o in r.outlets) == 503
    assert sum(raw(w, RCP + "85." + i) for i in idx) == 20346  # branch: 20452 (0.1 kWh)


def test_liebert_mph2_librenms(profiles: list[Profile]) -> None:
    w = recording(MPH2)
    _, r = decoded(profiles, w)
    s = librenms_by_oid(MPH2)
    checked = 0
    for o in r.outlets:
        # power: the same column (lgpPduRcpEntryPwrOut), the same value
        assert o.power_watts == lnms_value(s[RCP + "65." + o.index], w)
        # current: LibreNMS reads lgpPduRcpEntryEc (0.1 A), this profile the 0.01 A column
        amps = lnms_value(s[RCP + "60." + o.index], w)
        assert o.current_amperes is not None and abs(o.current_amperes - amps) <= 0.05 + 1e-9
        # voltage: LibreNMS reads lgpPduRcpEntryEp (whole V, truncated), this profile EpTenths
        volts = lnms_value(s[RCP + "55." + o.index], w)
        assert o.voltage_volts is not None and 0 <= o.voltage_volts - volts < 1
        checked += 3
    assert checked == 48
    assert r.unit_power_watts == lnms_value(s[PS + "65.1.1"], w)
    assert r.unit_voltage_volts == pytest.approx(lnms_value(s[PS_LINE + "19.1.1.1"], w))
    # LibreNMS is wrong on "Total Input Line 1": divisor 100, yet its value is the raw 242
    line = s[PS_LINE + "22.1.1.1"]
    assert line["sensor_divisor"] == 100
    assert line["sensor_current"] == raw(w, PS_LINE + "22.1.1.1") == 242
    assert r.unit_current_amperes == pytest.approx(line["sensor_current"] / 100)


def test_liebert_receptacle_capabilities_gate_each_value(profiles: list[Profile]) -> None:
    w = recording(MPH2)
    w[RCP + "50.1.2.15"] = Value("Integer32", 5)  # current-measurement-only(5)
    w[RCP + "50.1.2.14"] = Value("Integer32", 4)  # control-only(4)
    del w[RCP + "50.1.2.8"]  # no capabilities at all: unknown, the values count
    _, r = decoded(profiles, w)
    p15, p14, p8 = outlet(r, "1.2.15"), outlet(r, "1.2.14"), outlet(r, "1.2.8")
    assert p15.current_amperes == 0.96
    assert (p15.power_watts, p15.voltage_volts, p15.energy_joules) == (None, None, None)
    assert (p14.current_amperes, p14.power_watts, p14.voltage_volts) == (None, None, None)
    assert (p8.current_amperes, p8.power_watts) == (0.35, 74.0)
    assert r.invalid == {"unavailable": 3 + 4}


# ---- Liebert MPH (branches only; sysDescr names a UPS) -----------------------------------------


def test_liebert_mph_branch_monitored(profiles: list[Profile]) -> None:
    w = recording(MPH)
    # sysDescr says UPS, but every table answering is lgpPdu's: an MPH rack PDU on an RPC card
    assert w["1.3.6.1.2.1.1.1.0"].value == b"Liebert GXT2-3000RT120"
    _, r = decoded(profiles, w)
    assert r.outlets == []  # no lgpPduRcpTable: a branch-monitored MPH
    assert not [o for o in w if o.startswith(RCP)]
    assert r.unit_power_watts == raw(w, PS + "65.1.1") == 2411
    assert r.unit_energy_joules == pytest.approx(959375 * TENTH_KWH)  # 95 937.5 kWh
    assert r.unit_current_amperes == pytest.approx(raw(w, PS_LINE + "22.1.1.1") / 100) == 20.45
    assert r.unit_voltage_volts == pytest.approx(raw(w, PS_LINE + "19.1.1.1") / 10) == 119.6
    assert r.identity == {
        "vendor": "Liebert",
        "model": "MPH-NCV27AXXD30",
        "firmware": "0-3-2-3",
        "serial": "DM2013JUN240015",
    }
    assert r.invalid == {}
    assert metered(r)
    # cross-check: the three branches (lgpPduRbEntryEcHundredths) carry the line's current
    branches = [raw(w, RB + f"130.1.{b}") for b in (1, 2, 3)]
    assert sum(branches) / 100 == pytest.approx(r.unit_current_amperes, abs=0.05)
    s = librenms_by_oid(MPH)
    assert r.unit_power_watts == lnms_value(s[PS + "65.1.1"], w)
    assert r.unit_voltage_volts == pytest.approx(lnms_value(s[PS_LINE + "19.1.1.1"], w))
    line = s[PS_LINE + "22.1.1.1"]  # LibreNMS: 2045 "A" (raw, its divisor 100 not applied)
    assert line["sensor_current"] == 2045 and line["sensor_divisor"] == 100


def test_liebert_unit_fallbacks_to_the_coarse_columns(profiles: list[Profile]) -> None:
    w = recording(MPH)
    w = {o: v for o, v in w.items() if not o.startswith((PS_LINE + "22.", PS_LINE + "19."))}
    _, r = decoded(profiles, w)
    assert r.unit_current_amperes == pytest.approx(raw(w, PS_LINE + "21.1.1.1") / 10) == 20.4
    assert r.unit_voltage_volts == raw(w, PS_LINE + "20.1.1.1") == 119  # lgpPduPsLineEntryEpLN
    assert r.invalid == {}


# ---- Enlogic EN1814 (ENLOGIC-PDU2-MIB) ----------------------------------------------------------


def test_enlogic_en1814(profiles: list[Profile]) -> None:
    w = recording(ENLOGIC)
    _, r = decoded(profiles, w)
    assert r.outlets == []  # no pduOutletMeteredStatusTable: input and breaker metering only
    assert r.unit_power_watts == raw(w, ENL + "2.4.1.4.1") == 1120  # pduUnitStatusActivePower
    # pduUnitStatusEnergy: tenths of kWh over the PDU's lifetime (not the resettable col 10)
    assert r.unit_energy_joules == pytest.approx(raw(w, ENL + "2.4.1.9.1") * TENTH_KWH)
    assert r.unit_energy_joules == pytest.approx(52777.6 * KWH)
    # pduInputPhaseStatusCurrent: hundredths of A, rows 1.1-1.3
    phases = [raw(w, ENL + f"3.4.1.5.1.{p}") for p in (1, 2, 3)]
    assert phases == [277, 472, 318]
    assert r.unit_current_amperes == pytest.approx(sum(phases) / 100) == pytest.approx(10.67)
    assert r.unit_voltage_volts == raw(w, ENL + "3.4.1.6.1.1") == 205  # Volts
    assert r.identity == {
        "vendor": "Enlogic",
        "model": "EN1814",  # pduNamePlatePartNumber (PDU2 column 11; no ModelNumber)
        "firmware": "2.0.4.3",  # pduNamePlateFirmwareVersion (PDU2 column 14)
        "serial": "<private>",
    }
    assert r.invalid == {}
    # cross-check: the phases' active power adds up to the unit's
    assert sum(raw(w, ENL + f"3.4.1.7.1.{p}") for p in (1, 2, 3)) == r.unit_power_watts


def test_enlogic_librenms(profiles: list[Profile]) -> None:
    w = recording(ENLOGIC)
    _, r = decoded(profiles, w)
    s = librenms_by_oid(ENLOGIC)
    currents = [lnms_value(s[ENL + f"3.4.1.5.1.{p}"], w) for p in (1, 2, 3)]
    assert r.unit_current_amperes == pytest.approx(sum(currents))
    assert r.unit_voltage_volts == lnms_value(s[ENL + "3.4.1.6.1.1"], w)
    # LibreNMS names every power sensor with one arc too many (unit .2.4.1.4.1.1 for
    # .2.4.1.4.1, phases .3.4.1.7.1.1.p for .3.4.1.7.1.p): OIDs not in the recording. Their
    # values are those of the real OIDs.
    wrong = {ENL + "2.4.1.4.1.1": ENL + "2.4.1.4.1"}
    wrong |= {ENL + f"3.4.1.7.1.1.{p}": ENL + f"3.4.1.7.1.{p}" for p in (1, 2, 3)}
    for bad, real in wrong.items():
        assert bad in s and bad not in w
        assert s[bad]["sensor_current"] == raw(w, real)
    assert r.unit_power_watts == s[ENL + "2.4.1.4.1.1"]["sensor_current"] == 1120


def test_enlogic_delta_phase_rows_are_not_added(profiles: list[Profile]) -> None:
    w = recording(ENLOGIC)
    before = decoded(profiles, w)[1].unit_current_amperes
    for p in (4, 5, 6):  # ENLOGIC-PDU-MIB: rows 4-6 are the delta phase values
        w[ENL + f"3.4.1.5.1.{p}"] = Value("Integer32", 500)
    assert decoded(profiles, w)[1].unit_current_amperes == pytest.approx(before)


def test_enlogic_outlet_metered_table(profiles: list[Profile]) -> None:
    # The MIB's per-outlet table (no recording has one): unit.outlet rows of hundredths of A,
    # W and tenths of kWh (resettable).
    w = recording(ENLOGIC)
    col = ENL + "5.9.1."
    for n in (1, 2):
        w[f"{col}2.1.{n}"] = Value("Integer32", n)  # pduOutletMeteredStatusNumber
        w[f"{col}3.1.{n}"] = Value("OctetString", f"srv{n}".encode())
        w[f"{col}5.1.{n}"] = Value("Integer32", 123 * n)
        w[f"{col}6.1.{n}"] = Value("Integer32", 250 * n)
        w[f"{col}11.1.{n}"] = Value("Integer32", 4567 * n)
    _, r = decoded(profiles, w)
    assert [(o.index, o.name) for o in r.outlets] == [("1.1", "srv1"), ("1.2", "srv2")]
    o2 = outlet(r, "1.2")
    assert (o2.current_amperes, o2.power_watts) == (2.46, 500.0)
    assert o2.energy_joules == pytest.approx(913.4 * KWH)
    assert o2.voltage_volts is None  # the MIB has no outlet voltage


# ---- Schleifenbauer (SCHLEIFENBAUER-DATABUS-MIB) ------------------------------------------------


def test_schleifenbauer_dpm27e(profiles: list[Profile]) -> None:
    w = recording(DPM27E)
    _, r = decoded(profiles, w)
    assert len(rows(w, SDB + "7.1.1.2")) == 27  # 27 outlet names (sdbDevOutName) ...
    idx = [f"1.{n}" for n in range(1, 13)]  # ... 12 metered (sdbDevOutMtTable)
    assert [o.index for o in r.outlets] == idx
    assert [o.name for o in r.outlets] == [f"channel{n}" for n in range(1, 13)]
    for o in r.outlets:
        # CentiAmpere, CentiVolt, KiloWattHour (whole kWh)
        assert o.current_amperes == pytest.approx(raw(w, SDB_OUT_MT + "5." + o.index) / 100)
        assert o.voltage_volts == pytest.approx(raw(w, SDB_OUT_MT + "7." + o.index) / 100)
        assert o.energy_joules == raw(w, SDB_OUT_MT + "2." + o.index) * KWH
        assert o.power_watts is None  # sdbDevOutMtPowerWatt (.11) is not in the capture
    ch11 = outlet(r, "1.11")
    assert (ch11.current_amperes, ch11.voltage_volts) == (1.94, 233.39)
    assert outlet(r, "1.4").energy_joules == 532 * KWH
    # the DPM27e's three inputs read 0 throughout (its metering is on the channels)
    assert (r.unit_current_amperes, r.unit_voltage_volts, r.unit_energy_joules) == (0, 0, 0)
    assert r.unit_power_watts is None  # sdbDevInPowerWatt (.10) is not in the capture
    assert r.identity == {
        "vendor": "Schleifenbauer",
        "model": "",  # sdbDevIdProductId is empty
        "firmware": "250",
        "serial": "SVNL00655429",
    }
    assert r.invalid == {"missing": 12 + 1}


def test_schleifenbauer_dpm27e_librenms(profiles: list[Profile]) -> None:
    w = recording(DPM27E)
    _, r = decoded(profiles, w)
    s = librenms_by_oid(DPM27E)
    for o in r.outlets:
        assert o.current_amperes == pytest.approx(lnms_value(s[SDB_OUT_MT + "5." + o.index], w))
        assert o.voltage_volts == pytest.approx(lnms_value(s[SDB_OUT_MT + "7." + o.index], w))
        kwh = lnms_value(s[SDB_OUT_MT + "2." + o.index], w)  # power_consumed, kWh
        assert o.energy_joules == pytest.approx(kwh * KWH)
        # LibreNMS's outlet "power" is sdbDevOutMtPowerVoltAmpere: VA, never exported as W
        va = s[SDB_OUT_MT + "10." + o.index]
        assert va["sensor_class"] == "power" and o.power_watts is None
    assert s[SDB_OUT_MT + "10.1.10"]["sensor_current"] == 290  # VA at 0.00 A (README)
    inputs = [lnms_value(s[SDB_IN + f"5.1.{i}"], w) for i in (1, 2, 3)]
    assert r.unit_current_amperes == pytest.approx(sum(inputs))


def test_schleifenbauer_databus_test(profiles: list[Profile]) -> None:
    w = recording(DATABUS)
    _, r = decoded(profiles, w)
    assert len(rows(w, SDB + "7.1.1.2")) == 6  # "blaat" .. "mooh": names, no metering
    assert r.outlets == []
    ins = [f"210.{i}" for i in (1, 2, 3)]  # device (unit address) 210, inputs 1-3
    assert r.unit_current_amperes == pytest.approx(
        sum(raw(w, SDB_IN + "5." + i) for i in ins) / 100
    )
    assert r.unit_current_amperes == pytest.approx(0.64)
    assert r.unit_voltage_volts == pytest.approx(raw(w, SDB_IN + "7.210.1") / 100) == 229.0
    assert r.unit_energy_joules == sum(raw(w, SDB_IN + "2." + i) for i in ins) * KWH
    assert r.unit_energy_joules == 132 * KWH
    assert r.unit_power_watts is None  # sdbDevInPowerWatt (.10) is not in the capture
    assert r.identity == {
        "vendor": "Schleifenbauer",
        "model": "SSDCHIN1307-002",
        "firmware": "250",
        "serial": "SVNL00056319",
    }
    assert r.invalid == {"missing": 1}
    s = librenms_by_oid(DATABUS)
    assert r.unit_current_amperes == pytest.approx(
        sum(lnms_value(s[SDB_IN + "5." + i], w) for i in ins)
    )
    assert r.unit_voltage_volts == pytest.approx(lnms_value(s[SDB_IN + "7.210.1"], w))
    kwh = sum(lnms_value(s[SDB_IN + "2." + i], w) for i in ins)
    assert r.unit_energy_joules == pytest.approx(kwh * KWH)
    # LibreNMS's input "power" is sdbDevInPowerVoltAmpere (VA): no W to compare with
    assert s[SDB_IN + "9.210.1"]["sensor_class"] == "power"


def test_schleifenbauer_watts_are_read_where_the_device_has_them(profiles: list[Profile]) -> None:
    w = recording(DPM27E)
    w[SDB_OUT_MT + "11.1.11"] = Value("Integer32", 421)  # sdbDevOutMtPowerWatt: W
    w[SDB_IN + "10.1.1"] = Value("Integer32", 430)  # sdbDevInPowerWatt: W
    for i in (2, 3):
        w[SDB_IN + f"10.1.{i}"] = Value("Integer32", 0)
    _, r = decoded(profiles, w)
    assert outlet(r, "1.11").power_watts == 421
    assert r.unit_power_watts == 430
    assert r.invalid == {"missing": 11}


# ---- Eaton PDU-MIB (older ePDU, .534.6.6.6) ------------------------------------------------------


def test_eaton_pdu_mib(profiles: list[Profile]) -> None:
    w = recording(EATON)
    _, r = decoded(profiles, w)
    idx = [str(n) for n in range(20)]  # outletIndex 0..19 (DESCRIPTION: 1..outletCount)
    assert rows(w, EPDU_OUT + "1") == idx
    assert [o.index for o in r.outlets] == idx
    for o in r.outlets:
        assert o.current_amperes == raw(w, EPDU_OUT + "4." + o.index) / 1000  # MilliAmps
        assert o.power_watts == raw(w, EPDU_OUT + "7." + o.index)  # Watts
        # outletVoltage is typed MilliVolts, but the unit reports volts (241 mV is no mains)
        assert o.voltage_volts == raw(w, EPDU_OUT + "6." + o.index)
    # all currents and watts read 0 (idle), while outletMaxCurrent shows the sensors work
    assert all(o.current_amperes == 0 and o.power_watts == 0 for o in r.outlets)
    assert all(raw(w, EPDU_OUT + "5." + i) > 100 for i in idx)  # 0.11 .. 1.16 A peaks
    # five groups of four outlets, each with its own voltage: outletIndex counts from 0
    volts = [outlet(r, i).voltage_volts for i in idx]
    assert volts == [244.0] * 4 + [241.0] * 4 + [249.0] * 4 + [246.0] * 4 + [0.0] * 4
    assert outlet(r, "10").name == "sw2-g11-il1par"  # outletLabel
    assert outlet(r, "3").name == "3"  # empty label: the index
    # unitReadings scalars are not in the capture
    assert (r.unit_power_watts, r.unit_current_amperes, r.unit_voltage_volts) == (None,) * 3
    assert r.invalid == {"missing": 3}
    assert r.identity == {
        "vendor": "Eaton",
        "model": "DBQ145412",  # objectName: "The model type of the device"
        "firmware": "01.01.01",
        "serial": "ADO3051266",
    }
    assert librenms_by_oid(EATON) == {}  # LibreNMS discovers no sensor from it


def test_eaton_pdu_millivolts_are_refused_not_exported_as_volts(profiles: list[Profile]) -> None:
    w = recording(EATON)
    w[EPDU_OUT + "6.1"] = Value("Gauge32", 244000)  # a firmware that does send millivolts
    w[EPDU + "1.3.1.2.0"] = Value("Gauge32", 244000)  # unitVoltage
    w[EPDU + "1.3.1.1.0"] = Value("Gauge32", 5230)  # unitCurrent: MilliAmps
    w[EPDU + "1.3.1.3.0"] = Value("Gauge32", 1180)  # unitActivePower: Watts
    _, r = decoded(profiles, w)
    assert outlet(r, "1").voltage_volts is None and r.unit_voltage_volts is None
    assert r.unit_current_amperes == 5.23 and r.unit_power_watts == 1180
    assert r.invalid == {"out_of_range": 2}
