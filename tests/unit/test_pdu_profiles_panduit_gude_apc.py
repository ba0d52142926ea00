"""The Panduit, Gude, APC Easy PDU and Rittal profiles, and the Tripp Lite ATS / Vertiv
MN03EDR1 fallbacks, against the project's own real recordings (tests/fixtures/pdu/recordings).

Expected values are the raw recorded integers times the scale the MIB documents, worked out
here by hand (PANDUIT-MIB, GUDEADS-EPC1202/8031-MIB, PowerNet-MIB ePDU, RITTAL-CMC-III-MIB,
TRIPPLITE-PRODUCTS tlpAts, VERTIV-V5-MIB), never with the decoder's scaling; LibreNMS's expected
JSON (sensor_current = raw x multiplier / divisor; A, V, W, kWh) is a second opinion.
"""

from __future__ import annotations

import pytest

from exporters.pdu.decode import decode, metered
from exporters.pdu.detect import SYS_OBJECT_ID, detect_in_walk, family_matches
from exporters.pdu.profile import Profile
from exporters.pdu.types import Reading
from exporters.snmp.oid import under
from exporters.snmp.types import Value, Walk
from tests.support.pdurecordings import librenms_sensors, librenms_value, raw, recording
from tests.unit.test_pdu_profiles import RECORDING_PROFILE

E = "1.3.6.1.4.1."  # enterprises
WH = 3600.0  # J per Wh
KWH = 3.6e6  # J per kWh

# recording -> the profile that must read it
PROFILE_OF = {
    n: RECORDING_PROFILE[n]
    for n in (
        "panduit_p42d04m.snmprec",
        "panduit_p24d40m.snmprec",
        "panduit_p32g13m.snmprec",
        "gude_epc-1202.snmprec",
        "gude_epc-8031.snmprec",
        "apc_epdu1116s.snmprec",
        "rittal_pdu-controller.snmprec",
        "tripplite_pdumh20atnet.snmprec",
        "tripplite_pdumh20atnet-librenms.snmprec",
        "vertiv_geist-mn03edr1.snmprec",
    )
}

# PANDUIT-MIB pdug5 tables
PD_INPUT = E + "19536.10.1.2.1.1."  # pdug5InputEntry, INDEX pdu
PD_GROUP = E + "19536.10.1.3.1.1."  # pdug5GroupEntry, INDEX pdu.group
PD_OUTLET = E + "19536.10.1.5.1.1."  # pdug5OutletEntry, INDEX pdu.outlet
# PowerNet-MIB ePDU
EPDU_DEVICE = E + "318.1.1.30.2.1.1."  # ePDUDeviceStatusEntry
EPDU_PHASE = E + "318.1.1.30.4.2.1."  # ePDUPhaseStatusEntry
# RITTAL-CMC-III-MIB cmcIIIVarEntry, INDEX device.variable
CMC_VAR = E + "2606.7.4.2.2.1."
# TRIPPLITE-PRODUCTS tlpAtsOutputEntry, INDEX device.output
ATS_OUT = E + "850.1.1.3.4.3.2.1.1."
# VERTIV-V5-MIB pduPhaseEntry, INDEX phase
V5_PHASE = E + "21239.5.2.3.2.1."


def librenms(name: str) -> dict[str, float]:
    """LibreNMS's value per sensor OID, redone from the recording: raw x multiplier / divisor."""
    walk = recording(name)
    return {
        s["sensor_oid"].lstrip("."): librenms_value(walk, s)
        for s in librenms_sensors(name)
        if s["sensor_class"] in ("current", "voltage", "power", "power_consumed")
    }


def read(profiles: list[Profile], name: str) -> Reading:
    """Detect as the poller does, check the profile, decode."""
    walk = recording(name)
    detection = detect_in_walk(profiles, walk)
    assert detection.profile.name == PROFILE_OF[name], (name, detection.why)
    return decode(detection.profile, walk)


# ---- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILE_OF))
def test_detected_with_and_without_sys_object_id(profiles: list[Profile], name: str) -> None:
    walk = recording(name)
    assert detect_in_walk(profiles, walk).profile.name == PROFILE_OF[name]
    bare = {o: v for o, v in walk.items() if o != SYS_OBJECT_ID}
    assert detect_in_walk(profiles, bare).profile.name == PROFILE_OF[name]


@pytest.mark.parametrize("name", sorted(PROFILE_OF))
def test_walk_roots_and_scalars_cover_what_decode_reads(profiles: list[Profile], name: str) -> None:
    walk = recording(name)
    profile = detect_in_walk(profiles, walk).profile
    roots, scalars = profile.walk_roots(), set(profile.scalar_oids())
    polled = {o: v for o, v in walk.items() if o in scalars or any(under(o, r) for r in roots)}
    assert decode(profile, polled) == decode(profile, walk)


def test_easy_pdu_family_is_longer_than_masterswitch(profiles: list[Profile]) -> None:
    def names(oid: str) -> list[str]:
        return [p.name for p in family_matches(profiles, oid)]

    # masterSwitchePDU (.318.1.3.4.9) is probed before masterSwitch's rPDU2 profile ...
    assert names(E + "318.1.3.4.9") == ["apc_epdu", "apc_rpdu2"]
    # ... and masterSwitchrPDUB (.4.8) never reaches the Easy PDU profile
    assert names(E + "318.1.3.4.8") == ["apc_rpdu2"]


# ---- Panduit ----------------------------------------------------------------------------------


def test_panduit_p42d04m(profiles: list[Profile]) -> None:
    name = "panduit_p42d04m.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    assert r.unit_power_watts == raw(w, PD_INPUT + "5.1") == 956  # pdug5InputPowerWatts, W
    assert r.unit_power_watts == pytest.approx(lnms[PD_INPUT + "5.1"])
    # pdug5InputResettableEnergy, Wh; never reset here: it matches the lifetime kWh counter
    assert r.unit_energy_joules == pytest.approx(7405276 * WH)
    assert raw(w, PD_INPUT + "8.1") == 7405276 and raw(w, PD_INPUT + "6.1") == 7405
    # pdug5InputTotalCurrent, 0.01 A, the three phases added by the PDU
    assert r.unit_current_amperes == pytest.approx(raw(w, PD_INPUT + "11.1") / 100) == 4.48
    assert r.unit_current_amperes == pytest.approx(lnms[PD_INPUT + "11.1"])
    # no pdug5InputPhaseTable in this capture: the first breaker group's pdug5GroupVoltage
    assert not any(o.startswith(E + "19536.10.1.2.2.") for o in w)
    assert r.unit_voltage_volts == pytest.approx(raw(w, PD_GROUP + "5.1.1") / 10) == 229.7
    assert r.unit_voltage_volts == pytest.approx(lnms[PD_GROUP + "5.1.1"])
    # the groups' watts add up to the input's (sampled apart: within a few W)
    groups = [raw(w, f"{PD_GROUP}20.1.{g}") for g in range(1, 13)]
    assert abs(sum(groups) - 956) <= 5
    assert r.outlets == []  # "PDU Metered": no outlet table
    assert r.identity == {
        "vendor": "Panduit",
        "model": "P42D04M",
        "firmware": "2.3.21",
        "serial": "CN187D6053",
    }
    assert r.invalid == {}


def test_panduit_p24d40m(profiles: list[Profile]) -> None:
    name = "panduit_p24d40m.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    assert r.unit_power_watts == raw(w, PD_INPUT + "5.1") == 50
    assert r.unit_power_watts == pytest.approx(lnms[PD_INPUT + "5.1"])
    # the resettable Wh register was reset (2024/04/24): below the lifetime 801 kWh
    assert r.unit_energy_joules == pytest.approx(222198 * WH)
    assert raw(w, PD_INPUT + "6.1") * 1000 > raw(w, PD_INPUT + "8.1")
    assert r.unit_current_amperes == pytest.approx(0.48)
    assert r.unit_current_amperes == pytest.approx(lnms[PD_INPUT + "11.1"])
    # group 1 ("L1", pdug5GroupType 5) is the live one; groups 2-12 are type 0 and read 0
    assert raw(w, PD_GROUP + "3.1.1") == 5 and raw(w, PD_GROUP + "3.1.2") == 0
    assert r.unit_voltage_volts == pytest.approx(raw(w, PD_GROUP + "5.1.1") / 10) == 229.8
    assert r.unit_voltage_volts == pytest.approx(lnms[PD_GROUP + "5.1.1"])
    assert r.outlets == [] and r.invalid == {}


def test_panduit_voltage_without_a_live_group_is_missing(profiles: list[Profile]) -> None:
    w = recording("panduit_p24d40m.snmprec")
    w[PD_GROUP + "3.1.1"] = Value("Integer32", 0)  # group 1 padding too: no group to read
    panduit = next(p for p in profiles if p.name == "panduit")
    r = decode(panduit, w)
    assert r.unit_voltage_volts is None
    assert r.invalid == {"missing": 1}


def test_panduit_p32g13m_outlets_and_padding(profiles: list[Profile]) -> None:
    name = "panduit_p32g13m.snmprec"
    w = recording(name)
    r = read(profiles, name)
    # row 1.33: empty name, pdug5OutletType 0 (no such enum), rating 0 -- padding, skipped
    assert raw(w, PD_OUTLET + "3.1.33") == 0 and raw(w, PD_OUTLET + "4.1.33") == 0
    assert [(o.index, o.name) for o in r.outlets] == [("1.1", "OUTLET 1")]
    o = r.outlets[0]
    # a real, idle outlet (iecC19, 16 A rating, PF 1.00): measured zeros are readings
    assert raw(w, PD_OUTLET + "3.1.1") == 2 and raw(w, PD_OUTLET + "4.1.1") == 1600
    assert o.current_amperes == raw(w, PD_OUTLET + "5.1.1") / 100 == 0.0
    assert o.power_watts == raw(w, PD_OUTLET + "13.1.1") == 0
    assert o.energy_joules == raw(w, PD_OUTLET + "14.1.1") * WH == 0.0
    assert o.voltage_volts is None  # pdug5OutletTable has no voltage
    assert o.power_watts == pytest.approx(librenms(name)[PD_OUTLET + "13.1.1"])
    # the capture holds no input or group table: the unit reads nothing
    assert (r.unit_power_watts, r.unit_energy_joules) == (None, None)
    assert (r.unit_current_amperes, r.unit_voltage_volts) == (None, None)
    assert r.invalid == {"missing": 4}
    assert r.identity["model"] == "P32G13M" and r.identity["firmware"] == "3.3.6"
    assert metered(r)


# ---- Gude --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "expect"),
    [
        # (W, Wh, mA, V) from epcNNNNPowerTable channel 1
        ("gude_epc-1202.snmprec", "43", (17, 2020584, 167, 227)),
        ("gude_epc-8031.snmprec", "81", (18, 1109596, 186, 230)),
    ],
)
def test_gude(profiles: list[Profile], name: str, model: str, expect: tuple) -> None:
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    chan = f"{E}28507.{model}.1.5.1.2.1."  # epcNNNNPowerEntry, INDEX channel
    watts, wh, milliamps, volts = expect
    assert raw(w, chan + "2.1") == 1  # epcNNNNChanStatus: data valid
    assert r.unit_power_watts == raw(w, chan + "4.1") == watts  # PowerActive, W
    assert r.unit_energy_joules == pytest.approx(raw(w, chan + "3.1") * WH)  # AbsEnergyActive
    assert raw(w, chan + "3.1") == wh
    assert r.unit_current_amperes == pytest.approx(raw(w, chan + "5.1") / 1000)  # mA
    assert raw(w, chan + "5.1") == milliamps
    assert r.unit_voltage_volts == raw(w, chan + "6.1") == volts  # V
    # LibreNMS reads the same four (energy in kWh)
    assert r.unit_power_watts == pytest.approx(lnms[chan + "4.1"])
    assert r.unit_energy_joules == pytest.approx(lnms[chan + "3.1"] * KWH)
    assert r.unit_current_amperes == pytest.approx(lnms[chan + "5.1"])
    assert r.unit_voltage_volts == pytest.approx(lnms[chan + "6.1"])
    assert r.outlets == []  # relay ports: no metering
    assert r.identity["model"].startswith("Expert Power Control")
    assert r.invalid == {}


def test_gude_inactive_channel_gives_no_values(profiles: list[Profile]) -> None:
    w = recording("gude_epc-1202.snmprec")
    w[E + "28507.43.1.5.1.2.1.2.1"] = Value("Integer32", 0)  # epc1202ChanStatus: not active
    gude = next(p for p in profiles if p.name == "gude_epc1202")
    r = decode(gude, w)
    assert not metered(r)
    assert r.invalid == {"unavailable": 4}


# ---- APC Easy PDU ------------------------------------------------------------------------------


def test_apc_epdu1116s(profiles: list[Profile]) -> None:
    name = "apc_epdu1116s.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    # no ePDUDeviceStatus power/energy columns in this capture: the phase rows are summed
    assert not any(o.startswith(EPDU_DEVICE + "7.") or o.startswith(EPDU_DEVICE + "11.") for o in w)
    phases = (1, 2, 3)
    energy_wh = sum(raw(w, f"{EPDU_PHASE}10.{p}") for p in phases)  # ePDUPhaseStatusEnergy, Wh
    assert energy_wh == 332241
    assert r.unit_energy_joules == pytest.approx(energy_wh * WH)
    assert r.unit_energy_joules == pytest.approx(
        sum(lnms[f"{EPDU_PHASE}10.{p}"] for p in phases) * KWH
    )
    # voltage (0.1 V), current (0.01 A) and power (W) all read 0 in this capture
    assert r.unit_power_watts == sum(raw(w, f"{EPDU_PHASE}6.{p}") for p in phases) == 0
    assert r.unit_current_amperes == sum(raw(w, f"{EPDU_PHASE}5.{p}") for p in phases) / 100 == 0
    assert r.unit_voltage_volts == raw(w, EPDU_PHASE + "4.1") / 10 == 0
    for p in phases:
        assert lnms[f"{EPDU_PHASE}4.{p}"] == lnms[f"{EPDU_PHASE}5.{p}"] == 0
    assert r.outlets == []
    assert r.identity == {
        "vendor": "APC",
        "model": "EPDU1116S",
        "firmware": "Ver11.10",
        "serial": "506255602541",
    }
    assert r.invalid == {}


def test_apc_epdu_device_row_wins_and_minus_one_falls_back(profiles: list[Profile]) -> None:
    w = recording("apc_epdu1116s.snmprec")
    epdu = next(p for p in profiles if p.name == "apc_epdu")
    w[EPDU_DEVICE + "7.1"] = Value("Integer32", 250)  # ePDUDeviceStatusActivePower, W
    w[EPDU_DEVICE + "11.1"] = Value("Integer32", 400000)  # ePDUDeviceStatusEnergy, Wh
    r = decode(epdu, w)
    assert r.unit_power_watts == 250 and r.unit_energy_joules == pytest.approx(400000 * WH)
    # notSupported (-1) in the device row: the phase rows are read instead (W, Wh)
    w[EPDU_DEVICE + "7.1"] = Value("Integer32", -1)
    w[EPDU_DEVICE + "11.1"] = Value("Integer32", -1)
    w[EPDU_PHASE + "6.1"] = Value("Integer32", 180)
    r = decode(epdu, w)
    assert r.unit_power_watts == 180
    assert r.unit_energy_joules == pytest.approx(332241 * WH)
    assert r.invalid == {}


# ---- Rittal CMC III ----------------------------------------------------------------------------


def _cmc(w: Walk, var: str) -> tuple[str, int, int]:
    """(cmcIIIVarName, cmcIIIVarScale, cmcIIIVarValueInt) of device 2's variable var."""
    name = w[f"{CMC_VAR}3.2.{var}"].value
    assert isinstance(name, bytes)
    return name.decode(), raw(w, f"{CMC_VAR}7.2.{var}"), raw(w, f"{CMC_VAR}11.2.{var}")


def test_rittal_pdu_controller(profiles: list[Profile]) -> None:
    name = "rittal_pdu-controller.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    assert _cmc(w, "12") == ("Total.Power.Active.Value", 1, 2742)  # scale *1: W
    assert r.unit_power_watts == 2742 == lnms[CMC_VAR + "11.2.12"]
    assert _cmc(w, "20") == ("Total.Energy.Active.Value", -10, 26418)  # /10: 0.1 kWh
    assert r.unit_energy_joules == pytest.approx(26418 / 10 * KWH)
    assert r.unit_energy_joules == pytest.approx(lnms[CMC_VAR + "11.2.20"] * KWH)
    currents = [_cmc(w, v) for v in ("36", "79", "122")]  # /100: 0.01 A
    assert [c[0] for c in currents] == [f"Phase L{n}.Current.Value" for n in (1, 2, 3)]
    assert {c[1] for c in currents} == {-100}
    assert r.unit_current_amperes == pytest.approx(sum(c[2] for c in currents) / 100) == 12.65
    lnms_phases = sum(lnms[f"{CMC_VAR}11.2.{v}"] for v in ("36", "79", "122"))
    assert r.unit_current_amperes == pytest.approx(lnms_phases)  # neutral (var 3) not added
    assert _cmc(w, "26") == ("Phase L1.Voltage.Value", -10, 2292)
    assert r.unit_voltage_volts == pytest.approx(229.2) == lnms[CMC_VAR + "11.2.26"]
    # the string column is sampled apart from the integer: "2747 W" beside 2742
    assert w[CMC_VAR + "10.2.12"].value == b"2747 W"
    assert r.outlets == []  # 30 sockets: relay, status, name only
    assert r.identity == {
        "vendor": "Rittal",
        "model": "PDU-Controller",
        "firmware": "V7.17.30_1",
        "serial": "34260505",
    }
    assert r.invalid == {}


def test_rittal_other_scale_or_no_value_is_not_read(profiles: list[Profile]) -> None:
    rittal = next(p for p in profiles if p.name == "rittal_cmc3")
    w = recording("rittal_pdu-controller.snmprec")
    w[CMC_VAR + "7.2.12"] = Value("Integer32", -10)  # power declared in tenths: not ours
    w[CMC_VAR + "14.2.26"] = Value("Integer32", 22)  # cmcIIIVarQuality okNoValue
    r = decode(rittal, w)
    assert r.unit_power_watts is None and r.unit_voltage_volts is None
    assert r.invalid == {"missing": 1, "unavailable": 1}
    assert r.unit_current_amperes == pytest.approx(12.65)


# ---- Tripp Lite ATS (tlpAts branch) ------------------------------------------------------------


def test_tripplite_pdumh20atnet_librenms(profiles: list[Profile]) -> None:
    name = "tripplite_pdumh20atnet-librenms.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    assert not any(o.startswith(E + "850.1.1.3.2.") for o in w)  # no tlpPdu rows at all
    assert r.unit_power_watts == raw(w, ATS_OUT + "8.1.1") == 1523  # tlpAtsOutputActivePower
    assert r.unit_current_amperes == pytest.approx(raw(w, ATS_OUT + "5.1.1") / 100) == 13.0
    assert r.unit_voltage_volts == pytest.approx(raw(w, ATS_OUT + "4.1.1") / 10) == 117.1
    for field, col in (("unit_power_watts", "8"), ("unit_current_amperes", "5")):
        assert getattr(r, field) == pytest.approx(lnms[f"{ATS_OUT}{col}.1.1"])
    assert r.unit_voltage_volts == pytest.approx(lnms[ATS_OUT + "4.1.1"])
    assert r.unit_energy_joules is None and r.outlets == []
    assert r.invalid == {}


def test_tripplite_pdumh20atnet_full_walk(profiles: list[Profile]) -> None:
    w = recording("tripplite_pdumh20atnet.snmprec")
    r = read(profiles, "tripplite_pdumh20atnet.snmprec")
    # PowerAlert 15.5: no tlpAtsOutputActivePower; tlpAtsOutputCalculatedPowerKW (0.01 kW) is
    assert ATS_OUT + "8.1.1" not in w
    assert r.unit_power_watts == raw(w, ATS_OUT + "13.1.1") * 10 == 0
    assert r.unit_current_amperes == raw(w, ATS_OUT + "5.1.1") / 100 == 0  # idle
    assert r.unit_voltage_volts == pytest.approx(raw(w, ATS_OUT + "4.1.1") / 10) == 115.2
    assert r.identity["model"] == "PDUMH20ATNET"
    assert r.invalid == {}


# ---- Vertiv MN03EDR1: no pduTable ------------------------------------------------------------


def test_vertiv_mn03edr1_power_and_energy_from_phases(profiles: list[Profile]) -> None:
    name = "vertiv_geist-mn03edr1.snmprec"
    w = recording(name)
    r = read(profiles, name)
    lnms = librenms(name)
    assert not any(o.startswith(E + "21239.5.2.3.1.") for o in w)  # no pduTable
    phases = (1, 2, 3)
    watts = [raw(w, f"{V5_PHASE}12.{p}") for p in phases]  # pduPhaseRealPower, W
    assert r.unit_power_watts == sum(watts) == 4399
    wh = [raw(w, f"{V5_PHASE}15.{p}") for p in phases]  # pduPhaseEnergy, Wh
    assert r.unit_energy_joules == pytest.approx(sum(wh) * WH)
    # each phase's W is its V x A x PF (pduPhaseVoltage 0.1 V, Current 0.01 A, PowerFactor %)
    for p, watt in zip(phases, watts, strict=True):
        v = raw(w, f"{V5_PHASE}4.{p}") / 10
        a = raw(w, f"{V5_PHASE}8.{p}") / 100
        pf = raw(w, f"{V5_PHASE}14.{p}") / 100
        assert watt == pytest.approx(v * a * pf, rel=0.02)
    amps = sum(lnms[f"{V5_PHASE}8.{p}"] for p in phases)
    assert r.unit_current_amperes == pytest.approx(amps) == pytest.approx(21.76)
    assert r.unit_voltage_volts == pytest.approx(lnms[V5_PHASE + "4.1"]) == 206.8
    assert r.invalid == {}


# ---- APC AP79xxB: why no fallback to the legacy watts ------------------------------------------


def test_ap7902b_legacy_watts_are_a_nominal_estimate() -> None:
    w = recording("apc_ap7902b.snmprec")
    ident = E + "318.1.1.12.1."  # rPDUIdent
    # rPDUIdentDevicePowerWatts = rPDUIdentDeviceLinetoLineVoltage (a configured nominal 120 V)
    # x rPDU2PhaseStatusCurrent (1.6 A) x rPDUIdentDevicePowerFactor (configured 1000/1000)
    current = raw(w, E + "318.1.1.26.6.3.1.5.1") / 10
    estimate = raw(w, ident + "15.0") * current * raw(w, ident + "17.0") / 1000
    assert raw(w, ident + "16.0") == pytest.approx(estimate) == 192
    assert raw(w, ident + "18.0") == 192  # rPDUIdentDevicePowerVA: the same number
    # rPDU2DeviceStatusPower and rPDU2PhaseStatusPower answer notSupported (-1): the unit has
    # no measured watts anywhere, so apc_rpdu2 exports none rather than this estimate
    assert raw(w, E + "318.1.1.26.4.3.1.5.1") == raw(w, E + "318.1.1.26.6.3.1.7.1") == -1
