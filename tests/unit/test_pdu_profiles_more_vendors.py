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
    lnms = [
        s
        for s in librenms_sensors("conteg_databus-6x24.snmprec")
        if ".6.1.1.10." in s["sensor_oid"]
    ]
    assert len(lnms) == 6
    assert r.unit_power_watts == sum(s["sensor_current"] for s in lnms) == 470


# ---- ATEN PE: both generations of the outlet table -------------------------------------------

ATEN_INT = E + "21317.1.3.2.2.2.2.99.1."  # outletIntegerValueEntry: x1000
ATEN_STR = E + "21317.1.3.2.2.2.2.1.1."  # outletValueEntry: decimal strings


def test_aten_reads_the_integer_table_and_skips_unsupported_rows(profiles: list[Profile]) -> None:
    w = recording("aten_pe-16outlet.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "aten_pe" and r.outlet_table == ATEN_INT + "4"
    # 42 rows, 16 outlets: -2000000 is "not supported", no outlet, not counted
    assert [o.index for o in r.outlets] == [str(n) for n in range(1, 17)]
    assert r.invalid == {"missing": 3}  # the unit tables are not in this capture
    lnms = {s["sensor_oid"].lstrip("."): s for s in librenms_sensors("aten_pe-16outlet.snmprec")}
    for o in r.outlets:
        for col, value in ((2, o.current_amperes), (3, o.voltage_volts), (4, o.power_watts)):
            oid = f"{ATEN_INT}{col}.{o.index}"
            assert value == pytest.approx(raw(w, oid) / 1000)
            assert value == pytest.approx(lnms[oid]["sensor_current"])
    assert outlet(r, "2").power_watts == pytest.approx(118.332)
    assert outlet(r, "2").name == "02"  # outletName


def test_aten_string_generation_is_read_as_exact_decimals(profiles: list[Profile]) -> None:
    w = recording("aten_pe-16outlet.snmprec")
    older = {o: v for o, v in w.items() if not o.startswith(ATEN_INT)}
    r = decode(_named(profiles, "aten_pe"), older)
    assert r.outlet_table == ATEN_STR + "4"
    assert len(r.outlets) == 16  # "not-support" rows are no outlets
    assert outlet(r, "2").current_amperes == 0.61  # "0.61", exactly
    assert outlet(r, "2").power_watts == 115.626  # "115.6260"
    assert outlet(r, "13").voltage_volts == 239.0  # "239.00"
    for text in ("N/A", "1e3", "0x10", "", "12.5 W", "-"):
        older[ATEN_STR + "4.2"] = Value("OctetString", text.encode())
        r = decode(_named(profiles, "aten_pe"), older)
        assert outlet(r, "2").power_watts is None, text  # never a guess, never a 0
        assert outlet(r, "2").current_amperes == 0.61
    older[ATEN_STR + "4.2"] = Value("OctetString", b"not-support")  # no such outlet
    assert "2" not in [o.index for o in decode(_named(profiles, "aten_pe"), older).outlets]
    older[ATEN_STR + "4.2"] = Value("Integer32", 5)  # not a DisplayString
    assert outlet(decode(_named(profiles, "aten_pe"), older), "2").power_watts is None


# ---- WTI, Riedo, Chatsworth, Dataprobe, APC xPDU -------------------------------------------------


def test_wti_vmr(profiles: list[Profile]) -> None:
    w = recording("wti_vmr-8hd20.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "wti_power"
    plug = E + "2634.3.100.200.1."
    assert (
        [(o.name, o.power_watts) for o in r.outlets][-2:]
        == [
            ("Outlet-B3", raw(w, plug + "8.7")),
            ("Outlet-B4", raw(w, plug + "8.8")),
        ]
        == [("Outlet-B3", 163), ("Outlet-B4", 93)]
    )
    assert outlet(r, "7").current_amperes == pytest.approx(raw(w, plug + "7.7") / 10)
    assert r.unit_power_watts == raw(w, E + "2634.3.200.70.0") == 256
    assert r.unit_current_amperes == pytest.approx(1.1)
    assert r.identity["model"] == "VMR-8HD20"


def test_riedo_updu_typed_meter_rows(profiles: list[Profile]) -> None:
    w = recording("riedo_updu-rn3214.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "riedo_updu"
    meter = E + "55108.1.3.1.1."
    assert len(r.outlets) == 48  # 6 modules x 8 outlet meters (type 6)
    assert all(raw(w, f"{meter}3.{o.index}") == 6 for o in r.outlets)
    o = outlet(r, "1.1")
    assert o.power_watts == raw(w, meter + "7.1.1")  # W
    assert o.energy_joules == raw(w, meter + "4.1.1") * 3600  # Wh
    assert o.current_amperes == pytest.approx(raw(w, meter + "11.1.1") / 1000)  # mA
    assert o.voltage_volts == pytest.approx(raw(w, meter + "10.1.1") / 1000)  # mV
    assert r.unit_power_watts == raw(w, meter + "7.0.0") == 868  # the PDU total row
    # phases and modules add up to the total: each row counted once
    assert [x.index for x in r.phases] == ["0.1", "0.2", "0.3"]
    assert sum(x.power_watts or 0 for x in r.phases) == 868
    assert [x.index for x in r.banks] == [f"{m}.0" for m in range(1, 7)]
    assert sum(x.power_watts or 0 for x in r.banks) == 868
    lnms = {s["sensor_oid"].lstrip("."): s for s in librenms_sensors("riedo_updu-rn3214.snmprec")}
    assert lnms[meter + "7.1.1"]["sensor_current"] == o.power_watts


def test_riedo_data_quality_gates_every_value(profiles: list[Profile]) -> None:
    """expired (1) and noData (2) are no readings; the rows of another layout are found by type."""
    w = recording("riedo_updu-rn3214.snmprec")
    meter = E + "55108.1.3.1.1."
    w[meter + "15.1.1"] = Value("Integer32", 2)  # noData: "0 is returned for all values"
    w[meter + "15.0.0"] = Value("Integer32", 1)  # expired
    r = decode(_named(profiles, "riedo_updu"), w)
    assert outlet(r, "1.1").power_watts is None and outlet(r, "1.2").power_watts is not None
    assert r.unit_power_watts is None and r.invalid["unavailable"] == 8


def test_riedo_general_not_fitted(profiles: list[Profile]) -> None:
    """Another UPDU: 2 modules of 3 outlets, calculated totals, rows in another order."""
    p = _named(profiles, "riedo_updu")
    meter = E + "55108.1.3.1.1."
    w = {}
    rows = {"0.0": 1, "0.1": 3, "4.0": 5, "4.7": 6, "4.8": 6, "4.9": 6, "9.0": 5, "9.1": 6}
    for n, (row, kind) in enumerate(rows.items()):
        w[f"{meter}3.{row}"] = Value("Integer32", kind)
        w[f"{meter}7.{row}"] = Value("Integer32", 100 + n)
        w[f"{meter}4.{row}"] = Value("Counter64", 2000 + n)
        w[f"{meter}15.{row}"] = Value("Integer32", 0)
    r = decode(p, w)
    assert [o.index for o in r.outlets] == ["4.7", "4.8", "4.9", "9.1"]
    assert [o.power_watts for o in r.outlets] == [103, 104, 105, 107]
    assert r.unit_power_watts == 100 and r.unit_energy_joules == 2000 * 3600
    assert [(x.index, x.power_watts) for x in r.phases] == [("0.1", 101)]
    assert [(x.index, x.power_watts) for x in r.banks] == [("4.0", 102), ("9.0", 106)]


def test_chatsworth_exports_va_never_watts(profiles: list[Profile]) -> None:
    w = recording("chatsworth_econnect-2pdu.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "chatsworth_econnect"
    assert r.unit_power_watts is None  # cpiPduTotalPower is VA
    assert all(o.power_watts is None for o in r.outlets)
    assert p.outlets is not None and p.outlets.power_watts is None
    out = E + "30932.1.10.1.4.10.1."
    assert len(r.outlets) == 24
    for o in r.outlets:
        assert o.apparent_power_voltamperes == raw(w, f"{out}8.{o.index}")
        assert o.energy_joules == raw(w, f"{out}10.{o.index}") * 10  # decawatt-seconds
        assert o.current_amperes == pytest.approx(raw(w, f"{out}6.{o.index}") / 100)
        assert o.voltage_volts == pytest.approx(raw(w, f"{out}7.{o.index}") / 10)
    assert outlet(r, "1.12.48.48.48.69.68.51.48.48.65.68.50.49").name == "OutletName1"
    branch = E + "30932.1.10.1.3.110.1."
    mac = "12.48.48.48.69.68.51.48.49.51.67.52.68"
    total = sum(raw(w, f"{branch}3.{b}.{mac}") for b in (1, 2, 3)) / 100
    assert r.unit_current_amperes == pytest.approx(total) == pytest.approx(18.96)
    # detected by its signature: the recording's sysObjectID is malformed
    assert w["1.3.6.1.2.1.1.2.0"].value == "0.10.43.6.1.4.1"


def test_dataprobe_iboot_meters_its_circuits_only(profiles: list[Profile]) -> None:
    w = recording("dataprobe_iboot-pdu8-2n15.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "dataprobe_iboot_pdu"
    sensors = E + "1418.6.6."
    lc1, lc2 = raw(w, sensors + "2.0"), raw(w, sensors + "4.0")
    assert r.unit_current_amperes == pytest.approx((lc1 + lc2) / 100) == pytest.approx(10.23)
    assert r.unit_voltage_volts == pytest.approx(raw(w, sensors + "1.0") / 100)
    lnms = librenms_sensors("dataprobe_iboot-pdu8-2n15.snmprec")
    currents = [s["sensor_current"] for s in lnms if s["sensor_class"] == "current"]
    assert sum(currents) == pytest.approx(r.unit_current_amperes)
    assert r.unit_power_watts is None and not r.outlets  # no watts anywhere in this MIB
    assert raw(w, sensors + "5.0") == 99999  # the other sensors are never read as a circuit


def test_apc_xpdu_is_not_a_rack_pdu(profiles: list[Profile]) -> None:
    w = recording("apc_isx-pdu.snmprec")
    p, r = decoded(profiles, w)
    assert p.name == "apc_xpdu"
    out = E + "318.1.1.15.3.4."
    assert r.unit_power_watts == raw(w, out + "3.0") * 100 == 19200  # tenths of kW
    phases = [(x.index, x.power_watts) for x in r.phases]
    assert phases == [(str(n), raw(w, f"{out}14.1.5.{n}") * 100) for n in (1, 2, 3)]
    assert sum(x.power_watts or 0 for x in r.phases) == r.unit_power_watts
    assert r.unit_current_amperes == pytest.approx((449 + 617 + 479) / 10)
    assert r.unit_voltage_volts == pytest.approx(121.2)  # line to neutral
    lnms = {s["sensor_oid"].lstrip("."): s for s in librenms_sensors("apc_isx-pdu.snmprec")}
    assert lnms[out + "3.0"]["sensor_current"] == r.unit_power_watts
    # the rack PDU profile's family does not hold the ISX PDU's sysObjectID, nor the reverse
    rack = _named(profiles, "apc_rpdu2")
    assert not any(w["1.3.6.1.2.1.1.2.0"].value.startswith(f + ".") for f in rack.sys_object_ids)
    assert decode(rack, w).unit_power_watts is None


def test_cyberpower_older_table_needs_no_metered_outlet_count(profiles: list[Profile]) -> None:
    """ePDU's own count decides; where absent ePDU2's; with neither the values are read."""
    w = recording("cyberpower_pdu44005.snmpwalk")
    p = _named(profiles, "cyberpower")
    monitored, metered = E + "3808.1.1.3.3.1.5.0", E + "3808.1.1.6.6.2.1.0"
    assert raw(w, monitored) == raw(w, metered) == 0
    assert all(o.power_watts is None for o in decode(p, w).outlets)  # the unit says: none
    del w[monitored]  # ePDU2's count (0) still says none
    assert all(o.power_watts is None for o in decode(p, w).outlets)
    w[metered] = Value("Integer32", 10)
    assert all(o.power_watts == 0 for o in decode(p, w).outlets)
    del w[metered]  # no count at all: the columns are read
    r = decode(p, w)
    assert len(r.outlets) == 10 and all(o.power_watts == 0 for o in r.outlets)
    w[monitored] = Value("Integer32", 0)  # ePDU's own 0 wins over an absent ePDU2 count
    assert all(o.power_watts is None for o in decode(p, w).outlets)
