"""HPE (CPQPOWER-MIB pdu2, pdu3, PDU management module) and Dell (DellrPDU-MIB) profiles
against the real LibreNMS recordings in tests/fixtures/pdu/recordings/.

Expected values are the raw recorded integers times the scale the MIB documents, written out
here by hand (never the profile's ``scale``); LibreNMS's expected JSON (sensor_current = raw x
multiplier / divisor) is a second opinion, checked where it reads the same objects. Where the
MIB and the data disagree (pdu3InputPowerWatts, the management module's breakerCurrent) the
data win, and the test says why.
"""

from __future__ import annotations

import pytest

from exporters.pdu.detect import SYS_OBJECT_ID, detect_in_walk
from exporters.pdu.profile import Profile
from exporters.pdu.types import Reading
from exporters.snmp.types import Value, Walk
from tests.support.pdurecordings import (
    decoded,
    librenms_by_oid,
    librenms_value,
    outlet,
    raw,
    recording,
)
from tests.unit.test_pdu_profiles import RECORDING_PROFILE as ALL_RECORDINGS

KWH = 3.6e6  # J per kWh
CPQ = "1.3.6.1.4.1.232.165."  # CPQPOWER-MIB cpqPower
PDU2 = CPQ + "7."
PDU3 = CPQ + "11."
PDUMM = CPQ + "2."
DELL = "1.3.6.1.4.1.674.10903.200.2.200."  # DellrPDU-MIB rPDU

MAPDU = "hpe_mapdu-pdu2-3.6kva-16a.snmprec"
P9S18A = "hpe_p9s18a-pdu3-7.4kva-32a.snmprec"
MM = "hpe_pdu-management-module.snmprec"
DELL6606 = "dell_rpdu-dell6606.snmprec"

RECORDING_PROFILE = {n: ALL_RECORDINGS[n] for n in (MAPDU, P9S18A, MM, DELL6606)}


def check_librenms_outlets(
    name: str, walk: Walk, profile: Profile, reading: Reading, columns: dict[str, str]
) -> int:
    """Compare every LibreNMS sensor on the given outlet columns ({column: field}); the count."""
    checked = 0
    for oid, sensor in librenms_by_oid(name).items():
        for column, field in columns.items():
            if oid.startswith(column + "."):
                index = oid[len(column) + 1 :]
                ours = getattr(outlet(reading, index), field)
                assert ours == pytest.approx(librenms_value(walk, sensor)), (oid, field)
                checked += 1
    assert profile.outlets is not None
    return checked


# ---- detection ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RECORDING_PROFILE))
def test_each_recording_is_detected_as_its_profile(profiles: list[Profile], name: str) -> None:
    walk = recording(name)
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == RECORDING_PROFILE[name], found.why
    # ... and without any sysObjectID (the management module's capture has none anyway)
    bare = {o: v for o, v in walk.items() if o != SYS_OBJECT_ID}
    assert detect_in_walk(profiles, bare).profile.name == RECORDING_PROFILE[name]


def test_how_each_recording_is_detected(profiles: list[Profile]) -> None:
    # pdu2 and Dell report a proper OBJECT IDENTIFIER in their product family
    for name in (MAPDU, DELL6606):
        why = detect_in_walk(profiles, recording(name)).why
        assert "in its product family; its signature columns answer" in why, name
    # the P9S18A stores sysObjectID as an OCTET STRING (CPQPOWER-MIB declares it a
    # DisplayString): not usable, so the pdu3 columns are found by probing
    walk = recording(P9S18A)
    assert walk[SYS_OBJECT_ID] == Value("OctetString", b".1.3.6.1.4.1.232.165.11")
    assert "is in no profile's family; its signature columns answer" in (
        detect_in_walk(profiles, walk).why
    )
    # the same unit reporting the OID properly is matched by its family
    walk[SYS_OBJECT_ID] = Value("ObjectIdentifier", "1.3.6.1.4.1.232.165.11")
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == "hpe_pdu3" and "in its product family" in found.why
    # the management module's capture has no sysObjectID; a module reporting its branch OID
    walk = recording(MM)
    assert SYS_OBJECT_ID not in walk
    walk[SYS_OBJECT_ID] = Value("ObjectIdentifier", "1.3.6.1.4.1.232.165.2")
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == "hpe_pdumm" and "in its product family" in found.why


# ---- HPE pdu2 (maPDU): mA, mV, W, Wh; index pdu.outlet with pdu 0 ------------------------------


def test_hpe_pdu2_mapdu(profiles: list[Profile]) -> None:
    w = recording(MAPDU)
    profile, r = decoded(profiles, w)
    assert profile.name == "hpe_pdu2"
    # pdu2OutletTable is indexed pdu2IdentIndex.pdu2OutletIndex; the master unit is pdu 0
    assert [o.index for o in r.outlets] == [f"0.{n}" for n in range(1, 9)]
    assert [o.name for o in r.outlets] == [f"Outlet L1-{n}" for n in range(1, 9)]
    col = PDU2 + "5.1.1."
    for index, milliamps, watts in (("0.6", 450, 77), ("0.7", 104, 14), ("0.1", 0, 0)):
        o = outlet(r, index)
        assert raw(w, col + "5." + index) == milliamps  # pdu2OutletCurrent: mA
        assert o.current_amperes == pytest.approx(milliamps / 1000)
        assert raw(w, col + "14." + index) == watts  # pdu2OutletWatts: W
        assert o.power_watts == pytest.approx(watts)
        assert o.voltage_volts is None  # no voltage per outlet in pdu2
        assert o.energy_joules is None  # pdu2OutletWh: not in the LibreNMS capture
    # unit: pdu2InputPowerWatts (W), pdu2InputPhaseCurrent (mA), pdu2InputPhaseVoltage (mV)
    assert r.unit_power_watts == pytest.approx(raw(w, PDU2 + "2.1.1.5.0")) == 97
    assert r.unit_current_amperes == pytest.approx(raw(w, PDU2 + "2.2.1.11.0.1") / 1000)
    assert r.unit_current_amperes == pytest.approx(0.535)
    assert r.unit_voltage_volts == pytest.approx(raw(w, PDU2 + "2.2.1.3.0.1") / 1000)
    assert r.unit_voltage_volts == pytest.approx(242.44)
    assert r.unit_energy_joules is None  # pdu2InputPowerWattHour: not in the capture
    assert r.identity == {
        "vendor": "HPE",
        "model": "Assy 3.6kVA 100-240V 16A WW maPDU",
        "firmware": "02.00.0044",
        "serial": "3C87241397",
    }
    assert r.invalid == {"missing": 9}  # 8 outlet energies + the unit energy
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(91)  # input: 97 W


def test_hpe_pdu2_agrees_with_librenms(profiles: list[Profile]) -> None:
    w = recording(MAPDU)
    profile, r = decoded(profiles, w)
    col = PDU2 + "5.1.1."
    columns = {col + "5": "current_amperes", col + "14": "power_watts"}
    # LibreNMS discovers outlet sensors only for outlets that are on (pdu2OutletControlStatus
    # on(2): 6 and 7); the off ones read 0 A / 0 W, which wattbit exports as the reading it is.
    assert check_librenms_outlets(MAPDU, w, profile, r, columns) == 4
    assert [o.index for o in r.outlets if o.power_watts] == ["0.6", "0.7"]
    sensors = librenms_by_oid(MAPDU)
    assert r.unit_power_watts == pytest.approx(librenms_value(w, sensors[PDU2 + "2.1.1.5.0"]))
    assert r.unit_current_amperes == pytest.approx(
        librenms_value(w, sensors[PDU2 + "2.2.1.11.0.1"])
    )
    assert r.unit_voltage_volts == pytest.approx(librenms_value(w, sensors[PDU2 + "2.2.1.3.0.1"]))
    # LibreNMS reads pdu2OutletPowerFactor with divisor -1000 to turn the firmware's negative
    # PFs (-707, -573; the MIB: negative = not available) positive; wattbit reads no PF.
    assert sensors[col + "17.0.6"]["sensor_divisor"] == -1000


def test_hpe_pdu2_negative_is_not_available(profiles: list[Profile]) -> None:
    w = recording(MAPDU)
    w[PDU2 + "5.1.1.14.0.6"] = Value("Integer32", -1)  # pdu2OutletWatts: negative = n/a
    w[PDU2 + "2.1.1.5.0"] = Value("Integer32", -1)  # pdu2InputPowerWatts
    w[PDU2 + "2.2.1.21.0.1"] = Value("Integer32", -1)  # pdu2InputPhasePowerWatts (fallback)
    _, r = decoded(profiles, w)
    assert outlet(r, "0.6").power_watts is None
    assert r.unit_power_watts is None
    assert r.invalid == {"missing": 9, "negative": 2}


# ---- HPE pdu3 (P9S18A): 0.01 A, 0.1 V, W, kWh; 24 padding rows ---------------------------------


def test_hpe_pdu3_p9s18a(profiles: list[Profile]) -> None:
    w = recording(P9S18A)
    profile, r = decoded(profiles, w)
    assert profile.name == "hpe_pdu3"
    col = PDU3 + "5.1.1."
    control = PDU3 + "5.2.1.1."  # pdu3OutletControlStatus
    # 48 rows in the table; 1.25-1.48 are padding: name 8 NUL bytes, control status 0
    assert len([o for o in w if o.startswith(col + "2.")]) == 48
    assert w[col + "2.1.25"] == Value("OctetString", b"\x00" * 8)
    assert {raw(w, f"{control}1.{n}") for n in range(25, 49)} == {0}
    assert {raw(w, f"{control}1.{n}") for n in range(1, 25)} == {2}  # on
    assert [o.index for o in r.outlets] == [f"1.{n}" for n in range(1, 25)]
    assert outlet(r, "1.1").name == "OUTLET 1" and outlet(r, "1.10").name == "OUTLET10"
    for index, centiamps, watts in (("1.21", 26, 65), ("1.22", 9, 14), ("1.23", 32, 74)):
        o = outlet(r, index)
        assert raw(w, col + "5." + index) == centiamps  # pdu3OutletCurrent: 0.01 A
        assert o.current_amperes == pytest.approx(centiamps / 100)
        assert raw(w, col + "13." + index) == watts  # pdu3OutletWatts: W
        assert o.power_watts == pytest.approx(watts)
        assert o.voltage_volts is None and o.energy_joules is None  # no pdu3OutletWh here
    assert outlet(r, "1.24").current_amperes == 0 and outlet(r, "1.24").power_watts == 0
    # pdu3InputPowerWatts: the MIB's DESCRIPTION says 0.001 W, its UNITS comment W; the data
    # are W (it equals pdu3InputPhasePowerWatts, and the outlets sum to 153)
    assert raw(w, PDU3 + "2.1.1.5.1") == raw(w, PDU3 + "2.2.1.20.1.1") == 154
    assert r.unit_power_watts == pytest.approx(154)
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(153)
    # pdu3InputPhaseCurrent (0.01 A) summed over phase rows 1.1-1.3 (2 and 3 unused: 0)
    phases = [raw(w, f"{PDU3}2.2.1.11.1.{p}") for p in (1, 2, 3)]
    assert phases == [65, 0, 0]
    assert r.unit_current_amperes == pytest.approx(sum(phases) / 100) == pytest.approx(0.65)
    # pdu3InputPhaseVoltage: 0.1 V, the first phase
    assert r.unit_voltage_volts == pytest.approx(raw(w, PDU3 + "2.2.1.3.1.1") / 10)
    assert r.unit_voltage_volts == pytest.approx(229.8)
    assert r.unit_energy_joules is None  # pdu3InputTotalEnergy: not in the capture
    assert r.identity == {
        "vendor": "HPE",
        "model": "P9S18A",
        "firmware": "2.0.0.J",
        "serial": "<private>",  # LibreNMS anonymized it
    }
    assert r.invalid == {"missing": 25}  # 24 outlet energies + the unit energy (no padding)


def test_hpe_pdu3_agrees_with_librenms(profiles: list[Profile]) -> None:
    w = recording(P9S18A)
    profile, r = decoded(profiles, w)
    col = PDU3 + "5.1.1."
    columns = {col + "5": "current_amperes", col + "13": "power_watts"}
    assert check_librenms_outlets(P9S18A, w, profile, r, columns) == 48  # 24 outlets, no padding
    sensors = librenms_by_oid(P9S18A)
    # LibreNMS reads pdu3InputPowerWatts with divisor 1 (W), as the data say
    assert sensors[PDU3 + "2.1.1.5.1"]["sensor_divisor"] == 1
    assert r.unit_power_watts == pytest.approx(librenms_value(w, sensors[PDU3 + "2.1.1.5.1"]))
    assert r.unit_current_amperes == pytest.approx(
        librenms_value(w, sensors[PDU3 + "2.2.1.11.1.1"])
    )
    assert r.unit_voltage_volts == pytest.approx(librenms_value(w, sensors[PDU3 + "2.2.1.3.1.1"]))


def test_hpe_pdu3_padding_needs_the_status_column(profiles: list[Profile]) -> None:
    # Without pdu3OutletControlStatus the padding rows cannot be told from outlets: they come
    # back as 24 outlets reading 0 (clutter, not a lost or a wrong value); a test on the empty
    # name would instead drop every outlet of a PDU that answers no name column.
    w = {o: v for o, v in recording(P9S18A).items() if not o.startswith(PDU3 + "5.2.1.1.")}
    _, r = decoded(profiles, w)
    assert len(r.outlets) == 48
    padding = [o for o in r.outlets if int(o.index.split(".")[1]) > 24]
    assert {(o.current_amperes, o.power_watts) for o in padding} == {(0, 0)}
    assert {o.name for o in padding} == {o.index for o in padding}  # empty names: the index


# ---- HPE PDU management module: no outlets; breakerCurrent in whole amps -----------------------


def test_hpe_pdu_management_module(profiles: list[Profile]) -> None:
    w = recording(MM)
    profile, r = decoded(profiles, w)
    assert profile.name == "hpe_pdumm"
    assert r.outlets == []  # this family meters no outlets
    # pduOutputPower: W, one row per PDU behind the module
    watts = [raw(w, f"{PDUMM}3.1.1.4.{p}") for p in (1, 2)]
    assert watts == [1587, 1137]
    assert r.unit_power_watts == pytest.approx(sum(watts)) == 2724
    # breakerCurrent (pdu.breaker, 6 rows per PDU; 4-6 unused) in whole amps
    amps = [raw(w, f"{PDUMM}3.2.1.3.{p}.{b}") for p in (1, 2) for b in range(1, 7)]
    assert amps == [3, 3, 2, 0, 0, 0, 3, 2, 1, 0, 0, 0]
    assert r.unit_current_amperes == pytest.approx(sum(amps)) == 14
    # inputVoltage (pduInputTable) is not in the capture: the first breaker with a voltage
    assert not any(o.startswith(PDUMM + "2.1.1.") for o in w)
    assert r.unit_voltage_volts == pytest.approx(raw(w, PDUMM + "3.2.1.2.1.1")) == 231
    assert r.unit_energy_joules is None  # no energy counter in this branch
    assert r.identity == {"vendor": "HPE", "model": "", "firmware": "", "serial": ""}
    assert r.invalid == {}


def test_hpe_breaker_current_is_whole_amps_not_hundredths(profiles: list[Profile]) -> None:
    # The MIB says breakerCurrent is in 0.01 A. Then PDU 1 (1587 W at 231 V) would draw
    # 0.08 A, an apparent power of 18 VA below its real power: impossible. As amps,
    # V x I >= P holds on both PDUs, and 20 % breaker load of 3 A fits a 16 A breaker.
    w = recording(MM)
    _, r = decoded(profiles, w)
    for p in (1, 2):
        amps = sum(raw(w, f"{PDUMM}3.2.1.3.{p}.{b}") for b in range(1, 4))
        volts = min(raw(w, f"{PDUMM}3.2.1.2.{p}.{b}") for b in range(1, 4))
        watts = raw(w, f"{PDUMM}3.1.1.4.{p}")
        assert amps * 0.01 * volts < watts <= amps * volts, p
    assert r.unit_current_amperes is not None and r.unit_voltage_volts is not None
    assert r.unit_power_watts is not None
    assert r.unit_current_amperes * r.unit_voltage_volts >= r.unit_power_watts


def test_hpe_pdu_management_module_agrees_with_librenms(profiles: list[Profile]) -> None:
    w = recording(MM)
    _, r = decoded(profiles, w)
    sensors = librenms_by_oid(MM)
    breakers = [s for o, s in sensors.items() if o.startswith(PDUMM + "3.2.1.3.")]
    assert len(breakers) == 12 and {s["sensor_divisor"] for s in breakers} == {1}  # whole A
    assert r.unit_current_amperes == pytest.approx(sum(librenms_value(w, s) for s in breakers))
    powers = [s for o, s in sensors.items() if o.startswith(PDUMM + "3.1.1.4.")]
    assert r.unit_power_watts == pytest.approx(sum(librenms_value(w, s) for s in powers))
    assert r.unit_voltage_volts == pytest.approx(librenms_value(w, sensors[PDUMM + "3.2.1.2.1.1"]))


# ---- Dell rPDU (DELL6606): outlets in whole A and W; device 0.01 kW / 0.1 kWh -----------------


def test_dell_rpdu(profiles: list[Profile]) -> None:
    w = recording(DELL6606)
    profile, r = decoded(profiles, w)
    assert profile.name == "dell_rpdu"
    col = DELL + "130.2.2.1."  # rPDUOutletMeteredStatusEntry
    assert [o.index for o in r.outlets] == [str(n) for n in range(1, 25)]
    assert [o.name for o in r.outlets] == [f"Outlet {n}" for n in range(1, 25)]
    for index, amps, watts in (("1", 1, 250), ("3", 2, 352), ("9", 0, 57), ("16", 0, 0)):
        o = outlet(r, index)
        assert raw(w, col + "6." + index) == amps  # rPDUOutletMeteredStatusCurrent: A
        assert o.current_amperes == pytest.approx(amps)
        assert raw(w, col + "8." + index) == watts  # rPDUOutletMeteredStatusPower: W
        assert o.power_watts == pytest.approx(watts)
        assert o.voltage_volts is None
        assert o.energy_joules is None  # rPDUOutletMeteredStatusEnergy: not in the capture
    # rPDUDeviceStatusPower: 0.01 kW; rPDUDeviceStatusEnergy: 0.1 kWh
    assert r.unit_power_watts == pytest.approx(raw(w, DELL + "110.2.1.3.1") * 10) == 3790
    assert r.unit_energy_joules == pytest.approx(raw(w, DELL + "110.2.1.4.1") * 0.1 * KWH)
    assert r.unit_energy_joules == pytest.approx(63013.9 * KWH)
    # rPDUPhaseStatusCurrent: 0.1 A (one phase); rPDUPhaseStatusVoltage: V
    assert r.unit_current_amperes == pytest.approx(raw(w, DELL + "120.2.1.4.1") / 10)
    assert r.unit_current_amperes == pytest.approx(19.3)
    assert r.unit_voltage_volts == pytest.approx(raw(w, DELL + "120.2.1.5.1")) == 205
    assert r.identity == {
        "vendor": "Dell",
        "model": "DELL6606",
        "firmware": "v5.1.2",
        "serial": "IN1A234B5678912CD345E67",
    }
    assert r.invalid == {"missing": 24}  # the outlet energies
    # the outlet power is W (the MIB gives no unit): the outlets sum to the device's power
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(3754)
    assert 3754 / 3790 > 0.98


def test_dell_rpdu_agrees_with_librenms(profiles: list[Profile]) -> None:
    w = recording(DELL6606)
    profile, r = decoded(profiles, w)
    col = DELL + "130.2.2.1."
    columns = {col + "6": "current_amperes", col + "8": "power_watts"}
    assert check_librenms_outlets(DELL6606, w, profile, r, columns) == 48
    sensors = librenms_by_oid(DELL6606)
    assert r.unit_current_amperes == pytest.approx(librenms_value(w, sensors[DELL + "120.2.1.4.1"]))
    assert r.unit_voltage_volts == pytest.approx(librenms_value(w, sensors[DELL + "120.2.1.5.1"]))
    # LibreNMS's power is the phase's (rPDUPhaseStatusPower, 0.01 kW: 3810 W), another object
    # than wattbit's device power (rPDUDeviceStatusPower: 3790 W); both are right, and agree
    # to the meters' 10 W resolution over a sampling moment.
    phase = librenms_value(w, sensors[DELL + "120.2.1.6.1"])
    assert phase == pytest.approx(raw(w, DELL + "120.2.1.6.1") * 10) == 3810
    assert r.unit_power_watts == pytest.approx(phase, abs=30)
