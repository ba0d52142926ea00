"""PDU profiles against real recordings, the MIB-derived Avocent file, and synthetic walks.

Expected values are computed here from the raw recorded integers and the scaling documented in
../shared/pdu-recordings/README.md (and the MIBs), never by calling the decoder's scaling;
LibreNMS's expected JSON (sensor_current = raw x multiplier / divisor, units A, V, W, kWh) and
Centreon's .robot output are a second, independent opinion.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collector.config import ConfigError
from collector.pdu.snmprec import parse_snmprec
from collector.pdu.snmpwalk import parse_snmpwalk
from collector.site.profiles import load_profile, load_profiles
from exporters.pdu.decode import decode, label_of, metered, text_of
from exporters.pdu.detect import NoProfile, detect_in_walk, family_matches
from exporters.pdu.profile import Condition, Metric, Profile
from exporters.pdu.types import Reading
from exporters.snmp.oid import under
from exporters.snmp.types import Value, Walk
from tests.support.env import FIXTURES, RECORDINGS, require
from tests.support.pdurecordings import (
    decoded,
    librenms_sensors,
    outlet,
    raw,
    read_walk,
    recording,
    recording_path,
)

AVOCENT = FIXTURES / "pdu" / "avocent_pm3000.snmprec"
SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"
E = "1.3.6.1.4.1."  # enterprises

KWH = 3.6e6  # J per kWh
WH = 3600.0  # J per Wh

# recording -> profile it must match
RECORDING_PROFILE = {
    # ../shared/pdu-recordings
    "apc_ap8641.snmprec": "apc_rpdu2",
    "apc_apdu10150sm-cpdu.snmprec": "apc_cpdu",
    "raritan_px3-5493u-k2.snmprec": "raritan_pdu2",
    "raritan_px1-dominion-px.snmprec": "raritan_pdu",
    "servertech_sentry3-cwg-30vde455.snmprec": "servertech_sentry3",
    "servertech_sentry4-c2s42ce.snmprec": "servertech_sentry4",
    "eaton_epdu-ma-24x5-20r.snmprec": "eaton_epdu",
    "vertiv_geist-mg02e4w1.snmprec": "vertiv_geist",
    "tripplite_pdumv30hvnetlx.snmprec": "tripplite",
    "cyberpower_pdu44005.snmpwalk": "cyberpower",
    # tests/fixtures/pdu/recordings: other models of the same MIBs
    "apc_ap7900b.snmprec": "apc_rpdu2",
    "apc_ap7902b.snmprec": "apc_rpdu2",
    "apc_ap8853.snmprec": "apc_rpdu2",
    "apc_ap8932.snmprec": "apc_rpdu2",
    "apc_ap8959eu3.snmprec": "apc_rpdu2",
    "apc_apdu9959eu3.snmprec": "apc_rpdu2",
    "apc_ap7931.snmpwalk": "apc_rpdu",  # a first-generation card as it answers (AOS 3.9.2)
    "raritan_px2-12outlet.snmprec": "raritan_pdu2",
    "raritan_px4-5730-e8v2.snmprec": "raritan_pdu2",
    "raritan_pdu2-12outlet-centreon.snmpwalk": "raritan_pdu2",
    "servertech_sentry3-cs-24v4-p32ma.snmprec": "servertech_sentry3",
    "servertech_sentry4-switched8i.snmprec": "servertech_sentry4",
    "tripplite_pdumh20atnet.snmprec": "tripplite",
    "tripplite_pdumh20atnet-librenms.snmprec": "tripplite",
    "vertiv_geist-mn03edr1.snmprec": "vertiv_geist",
    # tests/fixtures/pdu/recordings: vendors added with them
    "hpe_mapdu-pdu2-3.6kva-16a.snmprec": "hpe_pdu2",
    "hpe_p9s18a-pdu3-7.4kva-32a.snmprec": "hpe_pdu3",
    "hpe_pdu-management-module.snmprec": "hpe_pdumm",
    "dell_rpdu-dell6606.snmprec": "dell_rpdu",
    "liebert_mph2-mphr3142.snmprec": "liebert_gp_pdu",
    "liebert_mph-ncv27axxd30.snmprec": "liebert_gp_pdu",
    "enlogic_en1814.snmprec": "enlogic",
    "schleifenbauer_dpm27e.snmprec": "schleifenbauer",
    "schleifenbauer_databus-test.snmprec": "schleifenbauer",
    "eaton_pdu-mib-dbq145412.snmprec": "eaton_pdu",
    "panduit_p42d04m.snmprec": "panduit",
    "panduit_p24d40m.snmprec": "panduit",
    "panduit_p32g13m.snmprec": "panduit",
    "gude_epc-1202.snmprec": "gude_epc1202",
    "gude_epc-8031.snmprec": "gude_epc8031",
    "apc_epdu1116s.snmprec": "apc_epdu",
    "rittal_pdu-controller.snmprec": "rittal_cmc3",
    # tests/fixtures/pdu/recordings: newer generations and vendors (issue 25)
    "cyberpower_pdu81005.snmprec": "cyberpower",
    "conteg_databus-6x24.snmprec": "conteg",
    "aten_pe-16outlet.snmprec": "aten_pe",
    "wti_vmr-8hd20.snmprec": "wti_power",
    "riedo_updu-rn3214.snmprec": "riedo_updu",
    "chatsworth_econnect-2pdu.snmprec": "chatsworth_econnect",
    "dataprobe_iboot-pdu8-2n15.snmprec": "dataprobe_iboot_pdu",
    "apc_isx-pdu.snmprec": "apc_xpdu",
}
# the profiles added with issue 25 (their own tests: test_pdu_profiles_more_vendors.py)
NEW_PROFILES = {
    "conteg",
    "aten_pe",
    "wti_power",
    "riedo_updu",
    "chatsworth_econnect",
    "dataprobe_iboot_pdu",
    "apc_xpdu",
}


def profile_named(profiles: list[Profile], name: str) -> Profile:
    """The shipped profile called name."""
    return next(p for p in profiles if p.name == name)


def our_outlet_values(profile: Profile, reading: Reading) -> dict[str, float | None]:
    """Instance OID -> our SI value, for every per-outlet value (maps LibreNMS sensor OIDs)."""
    assert profile.outlets is not None
    out: dict[str, float | None] = {}
    for o in reading.outlets:
        for field, spec in profile.outlets.metrics():
            suffix = f".{spec.suffix}" if spec.suffix else ""
            out[f"{spec.oid}.{o.index}{suffix}"] = getattr(o, field)
    return out


LIBRENMS_UNIT = {"current": 1.0, "voltage": 1.0, "power": 1.0, "power_consumed": KWH}


def check_librenms_outlets(
    name: str, walk: Walk, profile: Profile, reading: Reading, classes: set[str]
) -> int:
    """Compare every LibreNMS outlet sensor of the given classes with our value; the count."""
    ours = our_outlet_values(profile, reading)
    checked = 0
    for s in librenms_sensors(name):
        if s["sensor_class"] not in classes:
            continue
        oid = s["sensor_oid"].lstrip(".")
        if oid not in ours:
            continue
        # LibreNMS's own arithmetic, redone from the recording:
        expected = raw(walk, oid) * s["sensor_multiplier"] / s["sensor_divisor"]
        assert expected == pytest.approx(s["sensor_current"], abs=1e-9), oid
        assert ours[oid] == pytest.approx(expected * LIBRENMS_UNIT[s["sensor_class"]]), oid
        checked += 1
    return checked


# ---- profiles load, match, poll ---------------------------------------------------------------


def test_all_profiles_load(profiles: list[Profile]) -> None:
    names = {p.name for p in profiles}
    assert names == {
        "apc_rpdu2",
        "apc_rpdu",
        "apc_cpdu",
        "raritan_pdu2",
        "raritan_pdu",
        "servertech_sentry4",
        "servertech_sentry3",
        "eaton_epdu",
        "vertiv_geist",
        "tripplite",
        "cyberpower",
        "avocent_pm",
        "hpe_pdu2",
        "hpe_pdu3",
        "hpe_pdumm",
        "dell_rpdu",
        "liebert_gp_pdu",
        "enlogic",
        "schleifenbauer",
        "eaton_pdu",
        "panduit",
        "gude_epc1202",
        "gude_epc8031",
        "apc_epdu",
        "rittal_cmc3",
        *NEW_PROFILES,
    }
    for p in profiles:
        roots = p.walk_roots()
        assert roots, p.name
        assert not [r for r in roots for q in roots if r != q and under(r, q)], p.name
        for s in p.scalar_oids():
            assert not any(under(s, r) for r in p.walk_roots()), (p.name, s)


def test_every_recording_matches_its_profile(profiles: list[Profile]) -> None:
    for name, expected in RECORDING_PROFILE.items():
        walk = recording(name)
        profile, _ = decoded(profiles, walk)
        assert profile.name == expected, name
    walk = read_walk(AVOCENT)
    assert decoded(profiles, walk)[0].name == "avocent_pm"


def test_match_is_longest_prefix_on_arc_boundaries(tmp_path: Path) -> None:
    base = "name: {n}\nvendor: V\nmib: M\nsys_object_ids: [{p}]\n"
    (tmp_path / "a.yaml").write_text(base.format(n="short", p="1.3.6.1.4.1.318.1.3.4"))
    (tmp_path / "b.yaml").write_text(base.format(n="long", p=".1.3.6.1.4.1.318.1.3.4.6"))
    ps = load_profiles(tmp_path)
    names = lambda oid: [p.name for p in family_matches(ps, oid)]  # noqa: E731
    assert names("1.3.6.1.4.1.318.1.3.4.6") == ["long", "short"]
    assert names("1.3.6.1.4.1.318.1.3.4.6.2") == ["long", "short"]
    assert names("1.3.6.1.4.1.318.1.3.4.5") == ["short"]
    assert names("1.3.6.1.4.1.318.1.3.40") == []
    assert names("1.3.6.1.4.1.318.1.3") == []


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("nam: x\n", "nam", "unknown key"),
        ("sys_object_ids: [1.3.x]\n", "sys_object_ids[0]", "not a dotted-decimal OID"),
        (
            "unit: {power_watts: {oid: 1.3.6, scale: 1}}\n",
            "unit.power_watts",
            "'instance' (a scalar) or 'aggregate'",
        ),
        (
            "unit: {power_watts: {oid: 1.3.6, aggregate: sum, state_oid: 1.3.7}}\n",
            "unit.power_watts",
            "'state_oid' and 'valid_states' go together",
        ),
        (
            "outlets: {index_from: 1.3.6, index: [o], power_watts: {oid: 1.3.7, instance: '0'}}\n",
            "outlets.power_watts.instance",
            "unknown key",
        ),
        (
            "outlets: {index_from: 1.3.6, index: [o], skip_if: [{oid: 1.3.8}]}\n",
            "outlets.skip_if[0]",
            "exactly one test",
        ),
        (
            "tables: {1.3.6: 2}\noutlets: {index_from: 1.3.6.5, index: [o]}\n",
            "",
            "has 2 columns but 1.3.6.5 is used",
        ),
    ],
)
def test_bad_profiles_name_file_and_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    head = "name: x\nvendor: V\nmib: M\n"
    if "sys_object_ids" not in text:
        head += "sys_object_ids: [1.3.6.1.4.1.1]\n"
    f = tmp_path / "bad.yaml"
    f.write_text(head + text)
    with pytest.raises(ConfigError) as err:
        load_profile(f)
    assert err.value.file == str(f)
    assert err.value.key == key
    assert reason in err.value.reason
    assert str(f) in str(err.value)


def test_duplicate_prefix_or_name_is_refused(tmp_path: Path) -> None:
    base = "name: {n}\nvendor: V\nmib: M\nsys_object_ids: [1.3.6.1.4.1.9]\n"
    (tmp_path / "a.yaml").write_text(base.format(n="a"))
    (tmp_path / "b.yaml").write_text(base.format(n="b"))
    with pytest.raises(ConfigError, match=r"b\.yaml: key 'sys_object_ids\[0\]'.*a\.yaml"):
        load_profiles(tmp_path)
    (tmp_path / "b.yaml").write_text(base.format(n="a").replace(".9]", ".8]"))
    with pytest.raises(ConfigError, match=r"key 'name'"):
        load_profiles(tmp_path)
    (tmp_path / "c.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c\.yaml.*not valid YAML"):
        load_profile(tmp_path / "c.yaml")


@pytest.mark.parametrize("name", [*RECORDING_PROFILE, "avocent"])
def test_walk_roots_and_scalars_cover_what_decode_reads(profiles: list[Profile], name: str) -> None:
    walk = read_walk(AVOCENT) if name == "avocent" else recording(name)
    profile, full = decoded(profiles, walk)
    roots, scalars = profile.walk_roots(), set(profile.scalar_oids())
    polled = {o: v for o, v in walk.items() if o in scalars or any(under(o, r) for r in roots)}
    assert decode(profile, polled) == full


def test_dense_tables_walk_as_one_entry(profiles: list[Profile]) -> None:
    cpdu = profile_named(profiles, "apc_cpdu").walk_roots()
    assert E + "318.1.1.32.5.9.1" in cpdu  # 6 of pduOutletMeteredStatusEntry's 11 columns
    rpdu2 = profile_named(profiles, "apc_rpdu2").walk_roots()
    assert E + "318.1.1.26.9.4.3.1.6" in rpdu2  # no width hint: one column at a time
    assert E + "318.1.1.26.9.4.3.1" not in rpdu2


# ---- recordings: README worked examples and LibreNMS / Centreon values ------------------------


def test_apc_ap8641(profiles: list[Profile]) -> None:
    w = recording("apc_ap8641.snmprec")
    _, r = decoded(profiles, w)
    base = E + "318.1.1.26."
    assert len(r.outlets) == 24
    o1 = outlet(r, "1")
    assert o1.name == "CP-CM-SAN-01"
    assert raw(w, base + "9.4.3.1.6.1") == 9 and o1.current_amperes == pytest.approx(0.9)
    assert raw(w, base + "9.4.3.1.7.1") == 163 and o1.power_watts == pytest.approx(163)
    assert raw(w, base + "9.4.3.1.11.1") == 3046
    assert o1.energy_joules == pytest.approx(304.6 * KWH)
    assert o1.voltage_volts is None  # rPDU2 has no per-outlet voltage
    assert r.unit_power_watts == pytest.approx(raw(w, base + "4.3.1.5.1") * 10) == 1210
    assert r.unit_voltage_volts == pytest.approx(201)
    assert r.unit_current_amperes == pytest.approx(6.5)
    assert r.unit_energy_joules == pytest.approx(1951.6 * KWH)
    assert r.identity == {
        "vendor": "APC",
        "model": "AP8641",
        "firmware": "6.7.2",
        "serial": "3F3452A52295",
    }
    assert r.invalid == {}
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(1117)  # README quirk


def test_apc_minus_one_is_negative_not_zero(profiles: list[Profile]) -> None:
    w = recording("apc_ap8641.snmprec")
    base = E + "318.1.1.26."
    w[base + "9.4.3.1.7.3"] = Value("Integer32", -1)  # rPDU2OutletMeteredStatusPower
    w[base + "6.3.1.6.1"] = Value("Integer32", -1)  # rPDU2PhaseStatusVoltage
    w[base + "4.3.1.5.1"] = Value("Integer32", -1)  # rPDU2DeviceStatusPower
    _, r = decoded(profiles, w)
    assert outlet(r, "3").power_watts is None
    assert r.unit_voltage_volts is None and r.unit_power_watts is None
    assert r.invalid == {"negative": 3}


def test_exceptions_wrong_types_and_absent_values_are_counted(profiles: list[Profile]) -> None:
    w = recording("apc_ap8641.snmprec")
    col = E + "318.1.1.26.9.4.3.1."
    w[col + "6.1"] = Value("noSuchInstance", None)
    w[col + "7.2"] = Value("OctetString", b"163")
    w[col + "6.5"] = Value("Null", None)
    del w[col + "11.4"]
    _, r = decoded(profiles, w)
    assert outlet(r, "1").current_amperes is None
    assert outlet(r, "2").power_watts is None
    assert outlet(r, "5").current_amperes is None
    assert outlet(r, "4").energy_joules is None
    assert r.invalid == {"no_such": 1, "wrong_type": 2, "missing": 1}


def test_apc_cpdu_padding_rows(profiles: list[Profile]) -> None:
    name = "apc_apdu10150sm-cpdu.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    col = E + "318.1.1.32.5.9.1."
    assert len([o for o in w if o.startswith(col + "2.")]) == 64  # rows 41-64 are padding
    assert len(r.outlets) == 40
    assert [o.index for o in r.outlets] == [f"1.{n}" for n in range(1, 41)]
    o2 = outlet(r, "1.2")
    assert o2.name == "OUTLET 2"
    assert o2.current_amperes == pytest.approx(raw(w, col + "5.1.2") * 0.01) == pytest.approx(0.28)
    assert o2.power_watts == pytest.approx(57)
    assert o2.energy_joules == pytest.approx(109.9 * KWH)
    assert outlet(r, "1.1").name == "Test Name"
    assert outlet(r, "1.10").name == "1.10"  # empty name: the index
    assert r.unit_power_watts == pytest.approx(258)
    assert r.unit_energy_joules == pytest.approx(791.8 * KWH)
    assert r.identity["model"] == "APDU10150SM" and r.identity["serial"] == "5A1234Y56789"
    assert r.identity["firmware"] == "2.0.8.2"
    # the LibreNMS subset has no pduInputPhaseStatusTable: unit current and voltage missing
    assert r.unit_current_amperes is None and r.unit_voltage_volts is None
    assert r.invalid == {"missing": 2}
    assert check_librenms_outlets(name, w, profile, r, {"current", "power"}) == 80
    unit_power = [s for s in librenms_sensors(name) if s["sensor_oid"].endswith("32.2.4.1.4.1")]
    assert r.unit_power_watts == pytest.approx(unit_power[0]["sensor_current"])


def test_raritan_px3(profiles: list[Profile]) -> None:
    name = "raritan_px3-5493u-k2.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    value, digits = E + "13742.6.5.4.3.1.4.", E + "13742.6.3.5.4.1.7."
    assert len(r.outlets) == 24
    o24 = outlet(r, "1.24")
    assert o24.name == "DEVICE 1:PS1:Installed"
    assert raw(w, value + "1.24.1") == 2440 and raw(w, digits + "1.1.1") == 3
    assert o24.current_amperes == pytest.approx(2.440)
    assert o24.power_watts == pytest.approx(550)
    assert o24.voltage_volts == pytest.approx(229)
    assert o24.energy_joules == pytest.approx(18327024 * WH)
    assert outlet(r, "1.1").name == "1"  # outletName empty: outletLabel
    inlet = E + "13742.6.5.2.3.1.4.1.1."
    assert r.unit_power_watts == pytest.approx(raw(w, inlet + "5")) == 1665
    assert r.unit_energy_joules == pytest.approx(74057676 * WH)
    assert r.unit_voltage_volts == pytest.approx(raw(w, inlet + "4"))
    assert r.unit_current_amperes == pytest.approx(raw(w, inlet + "1") / 1000)
    assert r.identity["model"] == "PX3-5493U-K2" and r.identity["firmware"] == "4.2.0.5-50274"
    assert r.invalid == {}
    n = check_librenms_outlets(
        name, w, profile, r, {"current", "power", "voltage", "power_consumed"}
    )
    assert n == 24 * 4
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(1671)  # README


def test_raritan_unavailable_state_is_not_a_zero(profiles: list[Profile]) -> None:
    w = recording("raritan_px3-5493u-k2.snmprec")
    w[E + "13742.6.5.4.3.1.4.1.5.1"] = Value("Gauge32", 0)  # measurementsOutletSensorValue
    w[E + "13742.6.5.4.3.1.3.1.5.1"] = Value("Integer32", -1)  # ...SensorState unavailable(-1)
    _, r = decoded(profiles, w)
    assert outlet(r, "1.5").current_amperes is None
    assert r.invalid == {"unavailable": 1}


def test_raritan_px1_never_exports_va_as_watts(profiles: list[Profile]) -> None:
    name = "raritan_px1-dominion-px.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    assert len(r.outlets) == 12
    o3 = outlet(r, "3")
    assert raw(w, E + "13742.4.1.2.2.1.4.3") == 2192 and o3.current_amperes == pytest.approx(2.192)
    assert raw(w, E + "13742.4.1.2.2.1.8.3") == 507  # outletApparentPower, VA
    assert o3.power_watts is None  # outletActivePower is not in this trimmed capture
    assert profile.outlets is not None
    assert all(not spec.oid.endswith("13742.4.1.2.2.1.8") for _, spec in profile.outlets.metrics())
    assert r.unit_power_watts == pytest.approx(580)
    assert r.unit_voltage_volts == pytest.approx(230.5)
    assert r.unit_current_amperes == pytest.approx(2.971)
    assert raw(w, E + "13742.4.1.20.2.1.12.1") == 0 and r.unit_energy_joules is None
    # 12 outlets x (voltage, active power, Wh) absent; inletActiveEnergy 0 = unsupported
    assert r.invalid == {"missing": 36, "unavailable": 1}
    assert check_librenms_outlets(name, w, profile, r, {"current"}) == 12
    # LibreNMS's outlet "power" sensors are outletApparentPower (VA): none of them is ours
    ours = our_outlet_values(profile, r)
    assert not [
        s
        for s in librenms_sensors(name)
        if s["sensor_class"] == "power" and s["sensor_oid"].lstrip(".") in ours
    ]


def test_sentry3(profiles: list[Profile]) -> None:
    name = "servertech_sentry3-cwg-30vde455.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    assert len(r.outlets) == 30
    aa8 = outlet(r, "1.1.8")
    assert aa8.name == "Outlet AA8"
    assert raw(w, E + "1718.3.2.3.1.7.1.1.8") == 64 and aa8.current_amperes == pytest.approx(0.64)
    assert aa8.power_watts is None and aa8.energy_joules is None  # current only
    infeeds = [raw(w, E + f"1718.3.2.2.1.7.1.{i}") for i in (1, 2, 3)]
    assert r.unit_current_amperes == pytest.approx(sum(infeeds) * 0.01) == pytest.approx(11.35)
    assert r.unit_voltage_volts == pytest.approx(207.0)
    assert r.unit_power_watts is None and r.unit_energy_joules is None
    assert r.invalid == {"missing": 2}  # systemTotalPower (and infeedPower), infeedEnergy
    assert r.identity == {
        "vendor": "Server Technology",
        "model": "CWG-30VDE455/CB",
        "firmware": "Sentry Switched CDU Version 7.1f",
        "serial": "ADFC0001714",
    }
    assert check_librenms_outlets(name, w, profile, r, {"current"}) == 30
    infeed = [
        s["sensor_current"]
        for s in librenms_sensors(name)
        if s["sensor_oid"].startswith(".1.3.6.1.4.1.1718.3.2.2.1.7.")
    ]
    assert r.unit_current_amperes == pytest.approx(sum(infeed))


def test_sentry4(profiles: list[Profile]) -> None:
    name = "servertech_sentry4-c2s42ce.snmprec"
    w = recording(name)
    _, r = decoded(profiles, w)
    assert r.outlets == []  # the capture has no outlet rows
    assert r.unit_power_watts == pytest.approx(1701 + 1265)
    assert raw(w, E + "1718.4.1.3.3.1.10.1.1") == 8937
    assert r.unit_energy_joules == pytest.approx((893.7 + 2565.9) * KWH)
    assert r.unit_voltage_volts == pytest.approx(207.9)
    sensors = librenms_sensors(name)
    lines = [s["sensor_current"] for s in sensors if "4.1.4.3.1.3." in s["sensor_oid"]]
    assert len(lines) == 6 and r.unit_current_amperes == pytest.approx(sum(lines))
    cords = [s["sensor_current"] for s in sensors if "4.1.3.3.1.3." in s["sensor_oid"]]
    assert r.unit_power_watts == pytest.approx(sum(cords))
    assert r.identity["model"] == "C2S42CE-YCMFAM00" and r.identity["firmware"] == "Version 8.0n"
    assert r.invalid == {}


def test_sentry4_status_gates_values(profiles: list[Profile]) -> None:
    w = recording("servertech_sentry4-c2s42ce.snmprec")
    w[E + "1718.4.1.3.3.1.3.2.1"] = Value("Integer32", -1)  # st4InputCordActivePower
    w[E + "1718.4.1.3.3.1.4.2.1"] = Value("Integer32", 7)  # ...Status notFound(7)
    _, r = decoded(profiles, w)
    assert r.unit_power_watts is None  # never a partial sum of one cord
    assert r.invalid == {"unavailable": 1}


def test_neutral_currents_are_not_added_to_the_unit_current(profiles: list[Profile]) -> None:
    w = recording("servertech_sentry4-c2s42ce.snmprec")
    before = decoded(profiles, w)[1].unit_current_amperes
    w[E + "1718.4.1.4.3.1.3.1.1.4"] = Value("Integer32", 500)  # st4LineCurrent, line N (4)
    w[E + "1718.4.1.4.3.1.2.1.1.4"] = Value("Integer32", 0)  # st4LineStatus normal
    assert decoded(profiles, w)[1].unit_current_amperes == pytest.approx(before)
    w = recording("eaton_epdu-ma-24x5-20r.snmprec")
    w[E + "534.6.6.7.3.3.1.2.0.1.2"] = Value("Integer32", 2)  # inputCurrentMeasType neutral
    w[E + "534.6.6.7.3.3.1.4.0.1.2"] = Value("Integer32", 9000)  # inputCurrent, mA
    assert decoded(profiles, w)[1].unit_current_amperes == pytest.approx(14.108)
    w[E + "534.6.6.7.3.3.1.2.0.1.2"] = Value("Integer32", 4)  # ... now phase2(4): counted
    assert decoded(profiles, w)[1].unit_current_amperes == pytest.approx(14.108 + 9.0)


def test_eaton(profiles: list[Profile]) -> None:
    name = "eaton_epdu-ma-24x5-20r.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    assert len(r.outlets) == 24
    a1 = outlet(r, "0.1")  # strappingIndex 0
    assert a1.name == "Power strip + s-rw-lab-rack"
    assert raw(w, E + "534.6.6.7.6.4.1.3.0.1") == 790 and a1.current_amperes == pytest.approx(0.79)
    assert a1.power_watts == pytest.approx(80)
    assert a1.energy_joules == pytest.approx(785.621 * KWH)
    assert a1.voltage_volts is None  # outletVoltage not in this trimmed capture
    assert r.unit_voltage_volts == pytest.approx(118.45)
    assert r.unit_current_amperes == pytest.approx(14.108)
    assert r.unit_power_watts == pytest.approx(1584)
    assert r.unit_energy_joules == pytest.approx(8185493 * WH)
    assert r.identity == {
        "vendor": "Eaton",
        "model": "EMA114-10",
        "firmware": "05.01.0002",
        "serial": "H619P44058",
    }
    assert r.invalid == {"missing": 24}
    assert check_librenms_outlets(name, w, profile, r, {"current", "power"}) == 48
    assert sum(o.power_watts or 0 for o in r.outlets) == pytest.approx(1568)  # README


def test_vertiv_geist(profiles: list[Profile]) -> None:
    name = "vertiv_geist-mg02e4w1.snmprec"
    w = recording(name)
    _, r = decoded(profiles, w)
    assert r.outlets == []
    sensors = {s["sensor_oid"].lstrip("."): s["sensor_current"] for s in librenms_sensors(name)}
    assert r.unit_power_watts == pytest.approx(sensors[E + "21239.5.2.3.1.1.9.1"]) == 1017
    assert r.unit_energy_joules == pytest.approx(sensors[E + "21239.5.2.3.1.1.12.1"] * KWH)
    assert r.unit_energy_joules == pytest.approx(8483.906 * KWH)
    assert r.unit_voltage_volts == pytest.approx(sensors[E + "21239.5.2.3.2.1.4.1"]) == 235.0
    phases = [raw(w, E + f"21239.5.2.3.2.1.8.{i}") for i in (1, 2, 3)]
    assert r.unit_current_amperes == pytest.approx(sum(phases) / 100) == pytest.approx(4.52)
    assert r.identity["serial"] == "ZY18120520" and r.identity["firmware"] == "3.4.0"
    assert r.invalid == {}


def test_vertiv_energy_at_its_cap_is_out_of_range(profiles: list[Profile]) -> None:
    w = recording("vertiv_geist-mg02e4w1.snmprec")
    w[E + "21239.5.2.3.1.1.12.1"] = Value("Gauge32", 9999000)  # pduTotalEnergy SYNTAX maximum
    _, r = decoded(profiles, w)
    assert r.unit_energy_joules is None
    assert r.invalid == {"out_of_range": 1}


def test_tripplite(profiles: list[Profile]) -> None:
    name = "tripplite_pdumv30hvnetlx.snmprec"
    w = recording(name)
    profile, r = decoded(profiles, w)
    assert len(r.outlets) == 24
    renamed = {10: "test-device-01", 12: "test-device-02", 15: "test-device-03"}
    assert [o.name for o in r.outlets] == [renamed.get(n, f"Load {n}") for n in range(1, 25)]
    assert [o.index for o in r.outlets] == [f"1.{n}" for n in range(1, 25)]
    assert not metered(Reading(outlets=r.outlets))  # outlets carry no values
    sensors = {s["sensor_oid"].lstrip("."): s["sensor_current"] for s in librenms_sensors(name)}
    out = E + "850.1.1.3.2.3.2.1.1."
    assert r.unit_power_watts == pytest.approx(sensors[out + "8.1.1"]) == 207
    assert r.unit_current_amperes == pytest.approx(raw(w, out + "5.1.1") / 100) == 1.0
    assert r.unit_voltage_volts == pytest.approx(sensors[out + "4.1.1"]) == 207.0
    # tlpPduOutput24hrEnergy is an estimate, not a counter: never exported as energy
    assert raw(w, out + "14.1.1") == 470 and r.unit_energy_joules is None
    assert profile.unit.energy_joules is None
    assert r.identity["model"] == "PDUMV30HVNETLX"
    assert r.invalid == {}


def test_cyberpower_unmetered_outlets_export_nothing(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu44005.snmpwalk")
    _, r = decoded(profiles, w)
    assert len(r.outlets) == 10
    col = E + "3808.1.1.3.3.5.1.1."
    assert all(raw(w, f"{col}{c}.{n}") == 0 for c in (7, 8) for n in range(1, 11))
    for o in r.outlets:
        assert (o.power_watts, o.current_amperes, o.energy_joules) == (None, None, None)
    assert r.invalid == {"unavailable": 30}
    robot = (RECORDINGS / "expected" / "cyberpower_pdu44005.load.robot").read_text()
    m = re.search(
        r"phase '1' state: \w+, current : ([\d.]+) A, power : ([\d.]+) W, "
        r"voltage : ([\d.]+) V",
        robot,
    )
    assert m is not None
    assert r.unit_current_amperes == pytest.approx(float(m.group(1)))
    assert r.unit_power_watts == pytest.approx(float(m.group(2)))
    assert r.unit_voltage_volts == pytest.approx(float(m.group(3)))
    assert r.identity["model"] == "PDU44005" and r.identity["firmware"] == "1.3.2"
    assert metered(r)  # the unit is metered even though the outlets are not


def test_cyberpower_outlet_states_agree_with_centreon(profiles: list[Profile]) -> None:
    """ePDUOutletStatusOutletState on(1) off(2): Centreon's plugin reads the same recording's
    ten outlets as "on" (its outlets.robot), the raw column answers 1 for each."""
    w = recording("cyberpower_pdu44005.snmpwalk")
    _, r = decoded(profiles, w)
    col = E + "3808.1.1.3.3.5.1.1.4."
    robot = (RECORDINGS / "expected" / "cyberpower_pdu44005.outlets.robot").read_text()
    line = next(x for x in robot.splitlines() if "outlet 'Outlet1 bank 1' state:" in x)
    said = dict(re.findall(r"outlet 'Outlet(\d+) bank \d+' state: '(\w+)'", line))
    assert len(said) == 10 and len(r.outlets) == 10
    for o in r.outlets:
        assert raw(w, col + o.index) == 1
        assert o.on is (said[o.index] == "on") is True


def test_cyberpower_metering_follows_the_device_statement(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu44005.snmpwalk")
    w[E + "3808.1.1.3.3.1.5.0"] = Value("Integer32", 10)  # ePDUOutletDevMonitoredOutlets
    _, r = decoded(profiles, w)
    assert all(o.power_watts == 0.0 and o.current_amperes == 0.0 for o in r.outlets)
    assert r.invalid == {}


def test_cyberpower_falls_back_to_the_epdu_tree(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu44005.snmpwalk")
    w = {o: v for o, v in w.items() if not o.startswith(E + "3808.1.1.6.")}
    _, r = decoded(profiles, w)
    load = E + "3808.1.1.3.2.3.1.1."  # ePDULoadStatusTable, phase row 1 (BankNumber 0)
    assert r.unit_power_watts == pytest.approx(raw(w, load + "7.1")) == 219
    assert r.unit_voltage_volts == pytest.approx(raw(w, load + "6.1") / 10) == 217.9
    assert r.unit_current_amperes == pytest.approx(raw(w, load + "2.1") / 10) == 1.0
    assert r.identity["model"] == "PDU44005"


def test_avocent_pm3000_mib_derived(profiles: list[Profile]) -> None:
    w = read_walk(AVOCENT)
    _, r = decoded(profiles, w)
    assert len(r.outlets) == 20
    assert [o.index for o in r.outlets] == [f"1.1.{n}" for n in range(1, 21)]
    col = E + "10418.17.2.5.5.1."
    for o in r.outlets:
        assert o.current_amperes == pytest.approx(raw(w, f"{col}50.{o.index}") / 10)
        assert o.power_watts == pytest.approx(raw(w, f"{col}60.{o.index}") / 10)
        assert o.voltage_volts == pytest.approx(raw(w, f"{col}70.{o.index}"))
    web = outlet(r, "1.1.1")
    assert (web.name, web.current_amperes, web.power_watts) == ("web01-psu1", 0.9, 196.6)
    assert web.energy_joules == pytest.approx(1523456 * WH)
    off = outlet(r, "1.1.7")
    assert (off.current_amperes, off.power_watts) == (0.0, 0.0)  # measured zeros are readings
    assert outlet(r, "1.1.12").energy_joules is None  # EnergyValue 0: not supported
    assert outlet(r, "1.1.20").name == "1.1.20"
    pdu = E + "10418.17.2.5.3.1."
    assert r.unit_current_amperes == pytest.approx(raw(w, pdu + "50.1.1") / 10) == 13.0
    assert r.unit_power_watts == pytest.approx(raw(w, pdu + "60.1.1") / 10) == 2852.1
    assert r.unit_voltage_volts == 230.0
    assert r.unit_energy_joules == pytest.approx(raw(w, pdu + "105.1.1") * WH)
    assert r.identity == {
        "vendor": "Avocent",
        "model": "PM3000",
        "firmware": "1.10.0",
        "serial": "SYNTH0000001",
    }
    assert r.invalid == {"unavailable": 2}


def test_avocent_zero_is_invalid_only_where_the_mib_says(profiles: list[Profile]) -> None:
    w = read_walk(AVOCENT)
    col = E + "10418.17.2.5.5.1."
    w[col + "65.1.1.3"] = Value("Integer32", 0)  # PowerType none-sensor(0)
    w[col + "75.1.1.4"] = Value("Integer32", 1)  # VoltageType estimated(1): a nominal value
    w[col + "70.1.1.5"] = Value("Integer32", 0)  # VoltageValue 0: not supported
    _, r = decoded(profiles, w)
    o3 = outlet(r, "1.1.3")
    assert (o3.current_amperes, o3.power_watts, o3.energy_joules) == (None, None, None)
    assert o3.voltage_volts == 230.0
    assert outlet(r, "1.1.4").voltage_volts is None
    assert outlet(r, "1.1.5").voltage_volts is None
    assert r.invalid == {"unavailable": 2 + 3 + 2}


# ---- "meters nothing" --------------------------------------------------------------------------


def test_a_pdu_that_answers_nothing_meters_nothing(profiles: list[Profile]) -> None:
    for p in profiles:
        walk: Walk = {SYS_OBJECT_ID: Value("ObjectIdentifier", p.sys_object_ids[0])}
        r = decode(p, walk)
        assert not metered(r), p.name
        assert r.outlets == []
        assert r.identity["vendor"] == p.vendor
        assert set(r.invalid) <= {"missing"}, p.name


def test_a_tripplite_ups_on_the_shared_sysobjectid_is_no_pdu(profiles: list[Profile]) -> None:
    # PowerAlert's generic sysObjectID is shared with Tripp Lite UPSes: one without the PDU
    # (and ATS) output tables is no PDU the profile reads (issue 32), not a PDU metering nothing.
    w = recording("tripplite_pdumv30hvnetlx.snmprec")
    ups = {o: v for o, v in w.items() if not o.startswith(E + "850.1.1.3.2")}
    with pytest.raises(NoProfile, match="product family of tripplite"):
        detect_in_walk(profiles, ups)
    tripplite = next(p for p in profiles if p.name == "tripplite")
    r = decode(tripplite, ups)  # pinned by `profile:`, it reads nothing and says so
    assert not metered(r)
    assert r.invalid == {"missing": 3}


def test_cyberpower_without_unit_tables_meters_nothing(profiles: list[Profile]) -> None:
    w = recording("cyberpower_pdu44005.snmpwalk")
    keep = E + "3808.1.1.3.3."  # only the outlet branch (and its device-level counts)
    w = {o: v for o, v in w.items() if o == SYS_OBJECT_ID or o.startswith(keep)}
    _, r = decoded(profiles, w)
    assert len(r.outlets) == 10
    assert not metered(r)


# ---- general, not fitted: synthetic walks from each profile's own declarations ----------------

# The documented raw-to-SI factor of every value, per profile: written from the MIBs here, so a
# profile whose scale drifts from its MIB fails below.
DOCUMENTED = {
    "apc_rpdu2": {
        "O.current_amperes": 0.1,
        "O.power_watts": 1,
        "O.energy_joules": 0.1 * KWH,
        "U.power_watts": 10,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.1,
        "U.voltage_volts": 1,
    },
    "apc_cpdu": {
        "O.current_amperes": 0.01,
        "O.power_watts": 1,
        "O.energy_joules": 0.1 * KWH,
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 1,
    },
    "raritan_pdu2": {
        "O.current_amperes": 1,
        "O.power_watts": 1,
        "O.voltage_volts": 1,
        "O.energy_joules": WH,
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 1,
        "U.voltage_volts": 1,
    },
    "raritan_pdu": {
        "O.current_amperes": 0.001,
        "O.voltage_volts": 0.001,
        "O.power_watts": 1,
        "O.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 0.001,
        "U.power_watts": 1,
        "U.energy_joules": WH,
    },
    "servertech_sentry3": {
        "O.current_amperes": 0.01,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
    },
    "servertech_sentry4": {
        "O.current_amperes": 0.01,
        "O.voltage_volts": 0.1,
        "O.power_watts": 1,
        "O.energy_joules": WH,
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "eaton_epdu": {
        "O.current_amperes": 0.001,
        "O.voltage_volts": 0.001,
        "O.power_watts": 1,
        "O.energy_joules": WH,
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 0.001,
    },
    "vertiv_geist": {
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "tripplite": {"U.power_watts": 1, "U.current_amperes": 0.01, "U.voltage_volts": 0.1},
    "cyberpower": {
        "O.current_amperes": 0.1,
        "O.power_watts": 1,
        "O.energy_joules": 0.1 * KWH,
        "U.power_watts": 1,
        "U.current_amperes": 0.1,
        "U.voltage_volts": 0.1,
        "U.energy_joules": 0.1 * KWH,
    },
    "avocent_pm": {
        "O.current_amperes": 0.1,
        "O.power_watts": 0.1,
        "O.voltage_volts": 1,
        "O.energy_joules": WH,
        "U.current_amperes": 0.1,
        "U.power_watts": 0.1,
        "U.voltage_volts": 1,
        "U.energy_joules": WH,
    },
    "hpe_pdu2": {
        "O.current_amperes": 0.001,
        "O.power_watts": 1,
        "O.energy_joules": WH,
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 0.001,
    },
    "hpe_pdu3": {
        "O.current_amperes": 0.01,
        "O.power_watts": 1,
        "O.energy_joules": KWH,
        "U.power_watts": 1,
        "U.energy_joules": KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "hpe_pdumm": {"U.power_watts": 1, "U.current_amperes": 1, "U.voltage_volts": 1},
    "dell_rpdu": {
        "O.current_amperes": 1,
        "O.power_watts": 1,
        "O.energy_joules": KWH,
        "U.power_watts": 10,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.1,
        "U.voltage_volts": 1,
    },
    "liebert_gp_pdu": {
        "O.current_amperes": 0.01,
        "O.voltage_volts": 0.1,
        "O.power_watts": 1,
        "O.energy_joules": 0.1 * KWH,
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "enlogic": {
        "O.current_amperes": 0.01,
        "O.power_watts": 1,
        "O.energy_joules": 0.1 * KWH,
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 1,
    },
    "schleifenbauer": {
        "O.current_amperes": 0.01,
        "O.voltage_volts": 0.01,
        "O.power_watts": 1,
        "O.energy_joules": KWH,
        "U.power_watts": 1,
        "U.energy_joules": KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.01,
    },
    "eaton_pdu": {
        "O.current_amperes": 0.001,
        "O.voltage_volts": 1,
        "O.power_watts": 1,
        "U.power_watts": 1,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 1,
    },
    "panduit": {
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
        "O.current_amperes": 0.01,
        "O.power_watts": 1,
        "O.energy_joules": WH,
    },
    "gude_epc1202": {
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 1,
    },
    "gude_epc8031": {
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 1,
    },
    "apc_rpdu": {
        "U.current_amperes": 0.1,  # rPDULoadStatusLoad: tenths of A
        "U.power_watts": 1,  # rPDUIdentDevicePowerWatts: W
    },
    "apc_epdu": {
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "rittal_cmc3": {
        "U.power_watts": 1,
        "U.energy_joules": 0.1 * KWH,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
}
DOCUMENTED["conteg"] = DOCUMENTED["schleifenbauer"]  # CONTEG-DATABUS-MIB is the same MIB
DOCUMENTED |= {
    "aten_pe": {  # x1000 integers (mA, mV, mW)
        "O.current_amperes": 0.001,
        "O.voltage_volts": 0.001,
        "O.power_watts": 0.001,
        "U.power_watts": 0.001,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 0.001,
    },
    "wti_power": {
        "O.current_amperes": 0.1,
        "O.power_watts": 1,
        "U.power_watts": 1,
        "U.current_amperes": 0.1,
    },
    "riedo_updu": {  # Wh, W, mA, mV
        "O.power_watts": 1,
        "O.energy_joules": WH,
        "O.current_amperes": 0.001,
        "O.voltage_volts": 0.001,
        "U.power_watts": 1,
        "U.energy_joules": WH,
        "U.current_amperes": 0.001,
        "U.voltage_volts": 0.001,
    },
    "chatsworth_econnect": {  # 1/100 A, 1/10 V, VA, decawatt-seconds
        "O.current_amperes": 0.01,
        "O.voltage_volts": 0.1,
        "O.apparent_power_voltamperes": 1,
        "O.energy_joules": 10,
        "U.current_amperes": 0.01,
        "U.voltage_volts": 0.1,
    },
    "dataprobe_iboot_pdu": {"U.current_amperes": 0.01, "U.voltage_volts": 0.01},
    "apc_xpdu": {  # tenths of kW, tenths of A, tenths of V
        "U.power_watts": 100,
        "U.current_amperes": 0.1,
        "U.voltage_volts": 0.1,
    },
}


def test_profiles_scale_as_their_mibs_document(profiles: list[Profile]) -> None:
    for p in profiles:
        declared = {f"U.{f}": s.scale for f, s in p.unit.metrics()}
        if p.outlets is not None:
            declared |= {f"O.{f}": s.scale for f, s in p.outlets.metrics()}
        assert declared == pytest.approx(DOCUMENTED[p.name]), p.name


def _satisfying(cond: Condition, want: bool) -> int | str:
    """A value for which cond holds (want) or does not."""
    if cond.empty:
        return "" if want else "x"
    if cond.in_ is not None:
        if any(isinstance(m, str) and not m.lstrip("-").isdigit() for m in cond.in_):
            return str(cond.in_[0]) if want else "no such name"  # a name (Rittal's variables)
        members = [int(m) for m in cond.in_]
        return members[0] if want else max(members) + 1
    if cond.not_in is not None:
        if any(isinstance(m, str) and not m.lstrip("-").isdigit() for m in cond.not_in):
            return "no such name" if want else str(cond.not_in[0])
        members = [int(m) for m in cond.not_in]
        return max(members) + 1 if want else members[0]
    bound = next(b for b in (cond.gt, cond.ge, cond.lt, cond.le) if b is not None)
    bigger = int(bound) + 1
    smaller = int(bound) - 1
    if cond.gt is not None or cond.ge is not None:
        return bigger if want else smaller
    return smaller if want else bigger


def _put(walk: Walk, oid: str, value: int | str) -> None:
    if isinstance(value, int):
        walk[oid] = Value("Integer32", value)
    else:
        walk[oid] = Value("OctetString", value.encode())


def _put_metric(walk: Walk, spec: Metric, index: str, raw_value: int) -> float:
    """Write raw_value (and a valid state, 2 decimal digits) for spec; the documented SI value."""
    walk[f"{spec.oid}.{index}"] = Value("Gauge32", raw_value)
    if spec.state_oid is not None and spec.valid_states is not None:
        walk[f"{spec.state_oid}.{index}"] = Value("Integer32", spec.valid_states[-1])
    if spec.digits_oid is not None:
        walk[f"{spec.digits_oid}.{index}"] = Value("Gauge32", 2)
        return raw_value / 100
    return float(raw_value)


# One table for every kind of meter, told apart by a type column (Riedo's upduMeterTable): the
# synthetic layout below cannot hold it; its own general test is in test_pdu_profiles_more_vendors.
TYPED_ROWS = {"riedo_updu"}


@pytest.mark.parametrize("name", sorted(set(DOCUMENTED) - TYPED_ROWS))
def test_general_not_fitted(profiles: list[Profile], name: str) -> None:
    """Other units, other outlet counts and indexes: 2 units (towers, ports, PDUs) x 4 outlets."""
    p = profile_named(profiles, name)
    doc = DOCUMENTED[name]
    walk: Walk = {SYS_OBJECT_ID: Value("ObjectIdentifier", p.sys_object_ids[0])}
    expected: dict[str, float] = {}

    # unit rows 2.1.1 and 3.1.2 (never the recordings' 1 / 1.1), arc 3 never a neutral (4)
    unit_rows = ["2.1.1", "3.1.2"]
    for n, (field, u) in enumerate(p.unit.metrics()):
        rows = [u.instance] if u.instance is not None else unit_rows
        if u.aggregate == "first":
            rows = unit_rows
        arc = next((c for c in u.where if c.index_arc == 1 and c.in_ is not None), None)
        if arc is not None and arc.in_ is not None:
            # rows told apart by their first index arc (Dataprobe's sensors group): rows of
            # those arcs, the others' rows of their own
            members = [int(m) for m in arc.in_]
            rows = [f"{members[0]}.1.1", f"{members[-1]}.1.2"]
        elif u.suffix is None and sum(x.oid == u.oid for _, x in p.unit.metrics()) > 1:
            # one value column for several metrics, told apart by `where` (Rittal's variable
            # table): each metric's rows of its own
            rows = [f"{2 + 2 * n}.1.1", f"{3 + 2 * n}.1.2"]
        total = 0.0
        for k, row in enumerate(rows):
            assert row is not None
            index = row if u.suffix is None else f"{row}.{u.suffix}"
            for cond in u.where:
                if cond.oid is not None:
                    _put(walk, f"{cond.oid}.{cond.instance or row}", _satisfying(cond, True))
            si = _put_metric(walk, u, index, 1000 + 100 * n + k)
            if u.aggregate != "first" or k == 0:
                total += si
        expected[f"U.{field}"] = total * doc[f"U.{field}"]

    outlets_expected: dict[str, dict[str, float]] = {}
    on_expected: dict[str, bool] = {}
    if p.outlets is not None:
        o = p.outlets
        arcs = len(o.index)
        rows = (
            [str(j) for j in range(3, 11)]
            if arcs == 1
            else [
                ".".join([str(t), *["2"] * (arcs - 2), str(j)]) for t in (2, 5) for j in range(1, 5)
            ]
        )
        for cond in o.metered_if:
            if cond.instance is not None:
                _put(walk, f"{cond.oid}.{cond.instance}", _satisfying(cond, True))
        conditioned = {c.oid for c in o.skip_if if c.oid is not None}
        for k, row in enumerate(rows):
            ident: int | str = k + 1 if o.index_from in conditioned else f"id-{row}"
            _put(walk, f"{o.index_from}.{row}", ident)
            if o.state is not None:
                # the switched state, on and off in turn (it may be the index column)
                states = (o.state.on_states[0], o.state.off_states[0])
                walk[f"{o.state.oid}.{row}"] = Value("Integer32", states[k % 2])
                on_expected[row] = k % 2 == 0
            if o.name and o.name[0] != o.index_from:
                _put(walk, f"{o.name[0]}.{row}", f"syn {row}")
            for cond in o.skip_if:
                if cond.oid is not None and cond.oid != o.index_from:
                    _put(walk, f"{cond.oid}.{cond.instance or row}", _satisfying(cond, False))
            for cond in o.metered_if:
                if cond.oid is not None and cond.instance is None:
                    _put(walk, f"{cond.oid}.{row}", _satisfying(cond, True))
            values = {}
            for n, (field, ospec) in enumerate(o.metrics()):
                index = row if ospec.suffix is None else f"{row}.{ospec.suffix}"
                si = _put_metric(walk, ospec, index, 10 + 10 * n + k)
                values[field] = si * doc[f"O.{field}"]
            outlets_expected[row] = values
        # a padding row the profile must skip, where it declares how to recognise one
        for cond in o.skip_if:
            pad = rows[-1].rsplit(".", 1)[0] + ".99" if arcs > 1 else "99"
            _put(
                walk,
                f"{o.index_from}.{pad}",
                _satisfying(cond, True) if cond.oid == o.index_from else "pad",
            )
            if cond.oid is not None and cond.oid != o.index_from:
                _put(walk, f"{cond.oid}.{pad}", _satisfying(cond, True))

    r = decode(p, walk)
    assert r.invalid == {}, name
    for key, value in expected.items():
        assert getattr(r, "unit_" + key[2:]) == pytest.approx(value), (name, key)
    assert [x.index for x in r.outlets] == list(outlets_expected), name
    for x in r.outlets:
        for field, value in outlets_expected[x.index].items():
            assert getattr(x, field) == pytest.approx(value), (name, x.index, field)
        assert x.on == on_expected.get(x.index), (name, x.index)
        if p.outlets is not None and p.outlets.name and p.outlets.name[0] != p.outlets.index_from:
            assert x.name == f"syn {x.index}"
    assert metered(r) == bool(expected or any(v for v in outlets_expected.values()))


# ---- parsers ------------------------------------------------------------------------------------


def test_parse_snmprec_types_hex_and_variations() -> None:
    text = "\n".join(
        [
            "# a comment",
            "",
            ".1.3.6.1.2.1.1.1.0|4x|61706370647500",
            "1.3.6.1.2.1.1.2.0|6|1.3.6.1.4.1.318.1.1.32.1",
            "1.3.6.1.2.1.1.3.0|67|165528150",
            "1.3.6.1.2.1.2.2.1.10.1|65|42",
            "1.3.6.1.2.1.31.1.1.1.6.1|70|18446744073709551615",
            "1.3.6.1.2.1.4.20.1.1.127.0.0.1|64x|7f000001",
            "1.3.6.1.2.1.4.20.1.1.10.0.0.1|64|10.0.0.1",
            "1.3.6.1.4.1.1.1|2|-1",
            "1.3.6.1.4.1.1.2|66|4294967295",
            "1.3.6.1.4.1.1.3|5|",
            "1.3.6.1.4.1.1.4|2:numeric|min=1,max=2,wrap=1,initial=2",
            "1.3.6.1.4.1.1.5|4:writecache|value=ESX Server 1, PS 2",
            "1.3.6.1.4.1.1.6|4|plain | with bar",
            "1.3.6.1.4.1.1.7|129|",
            "1.3.6.1.4.1.1.8|68x|9f780442f60000",
        ]
    )
    w = parse_snmprec(text)
    assert w["1.3.6.1.2.1.1.1.0"] == Value("OctetString", b"apcpdu\x00")
    assert text_of(w["1.3.6.1.2.1.1.1.0"]) == "apcpdu"
    assert w["1.3.6.1.2.1.1.2.0"] == Value("ObjectIdentifier", "1.3.6.1.4.1.318.1.1.32.1")
    assert w["1.3.6.1.2.1.1.3.0"] == Value("TimeTicks", 165528150)
    assert w["1.3.6.1.2.1.2.2.1.10.1"] == Value("Counter32", 42)
    assert w["1.3.6.1.2.1.31.1.1.1.6.1"] == Value("Counter64", 2**64 - 1)
    assert w["1.3.6.1.2.1.4.20.1.1.127.0.0.1"] == Value("IpAddress", "127.0.0.1")
    assert w["1.3.6.1.2.1.4.20.1.1.10.0.0.1"] == Value("IpAddress", "10.0.0.1")
    assert w["1.3.6.1.4.1.1.1"] == Value("Integer32", -1)
    assert w["1.3.6.1.4.1.1.2"] == Value("Gauge32", 4294967295)
    assert w["1.3.6.1.4.1.1.3"] == Value("Null", None)
    assert w["1.3.6.1.4.1.1.4"] == Value("Integer32", 2)
    assert w["1.3.6.1.4.1.1.5"] == Value("OctetString", b"ESX Server 1, PS 2")
    assert w["1.3.6.1.4.1.1.6"] == Value("OctetString", b"plain | with bar")
    assert w["1.3.6.1.4.1.1.7"] == Value("noSuchInstance", None)
    assert w["1.3.6.1.4.1.1.8"] == Value("Opaque", bytes.fromhex("9f780442f60000"))
    with pytest.raises(ValueError, match="line 1"):
        parse_snmprec("1.3.6|99|x")
    with pytest.raises(ValueError, match="line 2"):
        parse_snmprec("1.3.6|2|1\nnot a line")


def test_parse_snmpwalk_notations() -> None:
    text = "\n".join(
        [
            '.1.3.6.1.2.1.1.1.0 = STRING: "CPS Power Distributed Unit"',
            ".1.3.6.1.2.1.1.2.0 = OID: .1.3.6.1.4.1.3808.1.1.6",
            ".1.3.6.1.2.1.1.3.0 = 161500",
            ".1.3.6.1.2.1.1.4.0 = Timeticks: (2254567) 6:15:45.67",
            '.1.3.6.1.2.1.1.5.0 = STRING: "two',
            'lines with a \\"quote\\""',
            ".1.3.6.1.2.1.2.2.1.6.1 = Hex-STRING: 00 0C 15 41 7C 5D",
            ".1.3.6.1.2.1.2.2.1.6.2 = Hex-STRING: 00 01 02 03 04 05 06 07 08 09 0A 0B 0C 0D 0E 0F",
            "10 11 ",
            ".1.3.6.1.2.1.2.2.1.7.1 = INTEGER: up(1)",
            ".1.3.6.1.2.1.2.2.1.8.1 = INTEGER: -1",
            ".1.3.6.1.2.1.2.2.1.5.1 = Gauge32: 10000000",
            ".1.3.6.1.2.1.2.2.1.10.1 = Counter32: 0 End of MIB",
            ".1.3.6.1.2.1.31.1.1.1.6.1 = Counter64: 12345678901234",
            ".1.3.6.1.2.1.3.1.1.3.1.10.3.2.1 = IpAddress: 10.3.2.1",
            ".1.3.6.1.4.1.1.1 = NULL",
            '.1.3.6.1.4.1.1.2 = ""',
            ".1.3.6.1.4.1.1.3 = No Such Instance currently exists at this OID",
            ".1.3.6.1.4.1.1.4 = Wrong Type (should be Gauge32): INTEGER: 7",
            ".1.3.6.1.4.1.1.5 = STRING: unquoted words",
        ]
    )
    w = parse_snmpwalk(text)
    assert w["1.3.6.1.2.1.1.1.0"] == Value("OctetString", b"CPS Power Distributed Unit")
    assert w["1.3.6.1.2.1.1.2.0"] == Value("ObjectIdentifier", "1.3.6.1.4.1.3808.1.1.6")
    assert w["1.3.6.1.2.1.1.3.0"] == Value("Integer32", 161500)
    assert w["1.3.6.1.2.1.1.4.0"] == Value("TimeTicks", 2254567)
    assert w["1.3.6.1.2.1.1.5.0"] == Value("OctetString", b'two\nlines with a "quote"')
    assert w["1.3.6.1.2.1.2.2.1.6.1"] == Value("OctetString", bytes.fromhex("000c15417c5d"))
    assert w["1.3.6.1.2.1.2.2.1.6.2"] == Value("OctetString", bytes(range(18)))
    assert w["1.3.6.1.2.1.2.2.1.7.1"] == Value("Integer32", 1)
    assert w["1.3.6.1.2.1.2.2.1.8.1"] == Value("Integer32", -1)
    assert w["1.3.6.1.2.1.2.2.1.5.1"] == Value("Gauge32", 10000000)
    assert w["1.3.6.1.2.1.2.2.1.10.1"] == Value("Counter32", 0)
    assert w["1.3.6.1.2.1.31.1.1.1.6.1"] == Value("Counter64", 12345678901234)
    assert w["1.3.6.1.2.1.3.1.1.3.1.10.3.2.1"] == Value("IpAddress", "10.3.2.1")
    assert w["1.3.6.1.4.1.1.1"] == Value("Null", None)
    assert w["1.3.6.1.4.1.1.2"] == Value("OctetString", b"")
    assert w["1.3.6.1.4.1.1.3"] == Value("noSuchInstance", None)
    assert w["1.3.6.1.4.1.1.4"] == Value("Integer32", 7)
    assert w["1.3.6.1.4.1.1.5"] == Value("OctetString", b"unquoted words")


def test_recordings_parse_completely() -> None:
    for name in RECORDING_PROFILE:
        path = recording_path(name)
        require(path.is_file(), f"recording {path} not present")
        lines = [
            ln
            for ln in path.read_text(errors="replace").splitlines()
            if re.match(r"^\.?\d+(\.\d+)+(\|| = )", ln)
        ]
        assert len(read_walk(path)) == len(lines), name
    assert len(read_walk(AVOCENT)) == len(AVOCENT.read_text().splitlines())


def test_names_decode_utf8_then_latin1_and_strip() -> None:
    assert text_of(Value("OctetString", "Büro".encode())) == "Büro"
    assert text_of(Value("OctetString", "Büro".encode("latin-1"))) == "Büro"
    assert text_of(Value("OctetString", b"  rack 1 \x00\x00")) == "rack 1"
    assert text_of(Value("OctetString", b"\x00")) == ""
    assert text_of(Value("noSuchInstance", None)) == ""
    assert text_of(None) == ""
    assert text_of(Value("Integer32", 5)) == "5"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"web-1\x1b[31m\nFORGED", "web-1\ufffd[31m\ufffdFORGED"),  # ESC, a forged line
        (b"db\xc2\x9b31m", "db\ufffd31m"),  # C1 CSI (UTF-8)
        (b"db\x9b31m", "db\ufffd31m"),  # C1 CSI (Latin-1, the fall-back)
        (b"\xe2\x80\xaeevil", "\ufffdevil"),  # a bidi override
        (b"\xed\xa0\x80x", "\xed\ufffd\ufffdx"),  # CESU-8 surrogate: Latin-1, U+00A0 U+0080
        (b"N" * 70_000, "N" * 128),  # longer than an OCTET STRING may be, and cut
        (b"  Outlet 7 \x00pad", "Outlet 7"),
    ],
    ids=["esc-newline", "c1-utf8", "c1-latin1", "bidi", "cesu-surrogate", "70kB", "nul"],
)
def test_label_text_is_printable_and_bounded(raw: bytes, want: str) -> None:
    """What becomes a model, serial, firmware or outlet_name label (issue 34)."""
    got = label_of(Value("OctetString", raw))
    assert got == want
    assert got.isprintable() and len(got) <= 128
