"""Profile detection and tolerant tables, on real recordings and on walks derived from them.

A derived walk is a real recording with columns taken out or sysObjectID changed, as other
models of the same MIB answer (issue: "PDUs as they come"). The expected values are computed
here from the raw recorded integers and the MIB's scaling, never by the decoder.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from exporters.pdu.decode import decode
from exporters.pdu.detect import (
    SYS_OBJECT_ID,
    NoProfile,
    detect_in_walk,
    family_matches,
    probe_order,
    sys_object_id_of,
)
from exporters.pdu.profile import Profile
from exporters.snmp.oid import under
from exporters.snmp.types import Value, Walk
from tests.support.env import FIXTURES, require
from tests.support.pdurecordings import read_walk, recording_path
from tests.unit.test_pdu_profiles import AVOCENT, RECORDING_PROFILE

NET_SNMP_LINUX = "1.3.6.1.4.1.8072.3.2.10"  # what several embedded PDU agents report
PX3 = "raritan_px3-5493u-k2.snmprec"
# PDU2-MIB (Raritan): outletName, outletLabel, measurementsOutletSensorState/Value,
# outletSensorDecimalDigits
OUTLET_NAME = "1.3.6.1.4.1.13742.6.3.5.3.1.3"
OUTLET_LABEL = "1.3.6.1.4.1.13742.6.3.5.3.1.2"
OUTLET_STATE = "1.3.6.1.4.1.13742.6.5.4.3.1.3"
OUTLET_VALUE = "1.3.6.1.4.1.13742.6.5.4.3.1.4"
OUTLET_DIGITS = "1.3.6.1.4.1.13742.6.3.5.4.1.7"
RMS_CURRENT, ACTIVE_POWER = "1", "5"  # SensorTypeEnumeration


def _recording(name: str) -> Walk:
    path = AVOCENT if name == AVOCENT.name else recording_path(name)
    require(path.is_file(), f"recording {path} not present")
    return read_walk(path)


def without(walk: Walk, *columns: str) -> Walk:
    """The walk with every instance under the given columns taken out."""
    return {o: v for o, v in walk.items() if not any(under(o, c) for c in columns)}


def with_sys_object_id(walk: Walk, value: Value | None) -> Walk:
    """The walk with sysObjectID.0 replaced (None: absent)."""
    out = {o: v for o, v in walk.items() if o != SYS_OBJECT_ID}
    if value is not None:
        out[SYS_OBJECT_ID] = value
    return out


ALL = {**RECORDING_PROFILE, AVOCENT.name: "avocent_pm"}


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize(
    "sys_object_id",
    [
        None,  # the agent reports none
        Value("ObjectIdentifier", NET_SNMP_LINUX),  # a generic one
        Value("OctetString", b"1.3.6.1.4.1.318.1.3.4.6"),  # malformed: a string, not an OID
        Value("ObjectIdentifier", "1.3.6.1.4.1.99999.1"),  # an enterprise nobody knows
        Value("noSuchObject", None),
    ],
    ids=["absent", "net-snmp", "string", "unknown", "no_such"],
)
def test_every_recording_is_detected_without_its_sys_object_id(
    profiles: list[Profile], name: str, sys_object_id: Value | None
) -> None:
    walk = with_sys_object_id(_recording(name), sys_object_id)
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == ALL[name], found.why
    assert "no profile's family" in found.why


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_recording_is_detected_by_its_family_and_signature(
    profiles: list[Profile], name: str
) -> None:
    walk = _recording(name)
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == ALL[name]
    # (the anonymized Centreon capture has no system group; the HPE pdu3 one records its
    # sysObjectID as an OctetString: both are detected by probing, as the test above checks)
    # Nor does a sysObjectID that names no product: net-snmp's generic one (the iBoot-PDU), an
    # enterprise's bare root (the ATEN PE) or one outside enterprises altogether (Chatsworth's
    # ".0.10.43.6.1.4.1"); those are found by their signature columns.
    # Liebert's cards report liebertGlobalProducts (.476.1.42), every Liebert product's root.
    no_product = ("1.3.6.1.4.1.8072.3.2.10", "1.3.6.1.4.1.21317", "1.3.6.1.4.1.476.1.42")
    sys_object_id = walk.get(SYS_OBJECT_ID)
    if sys_object_id is not None and sys_object_id.type == "ObjectIdentifier":
        oid = str(sys_object_id.value).lstrip(".")
        if oid in no_product or not oid.startswith("1.3.6.1.4.1."):
            assert "in no profile's family; its signature columns answer" in found.why
        else:
            assert "in its product family; its signature columns answer" in found.why


def test_another_model_of_the_family_is_detected(profiles: list[Profile]) -> None:
    # AP8641 answers rPDU2; another Rack PDU 2G model reports another masterSwitch product
    # OID (PowerNet-MIB masterSwitch = .318.1.3.4; .4.5 is masterSwitchrPDU2, .4.6 the MSP).
    walk = _recording("apc_ap8641.snmprec")
    for product in ("1.3.6.1.4.1.318.1.3.4.5", "1.3.6.1.4.1.318.1.3.4.9", "1.3.6.1.4.1.318.1.3.4"):
        found = detect_in_walk(
            profiles, with_sys_object_id(walk, Value("ObjectIdentifier", product))
        )
        assert found.profile.name == "apc_rpdu2", product
        assert "its product family" in found.why


def test_a_family_match_whose_signature_is_empty_gives_way(profiles: list[Profile]) -> None:
    # A Raritan PX3 (PDU2-MIB data) reporting the older PX1 product OID: the PX1 profile's
    # signature column is empty there, PDU2's answers.
    walk = with_sys_object_id(_recording(PX3), Value("ObjectIdentifier", "1.3.6.1.4.1.13742.4"))
    found = detect_in_walk(profiles, walk)
    assert found.profile.name == "raritan_pdu2"
    assert "raritan_pdu" in found.why and "empty" in found.why


def test_a_family_alone_does_not_decide(profiles: list[Profile]) -> None:
    # issue 32: a vendor's product tree holds UPSes, cooling units and sensors too; a device
    # that answers none of the signature columns is no PDU any profile reads, whatever its
    # sysObjectID (it used to be "up" with nothing in it).
    walk = {SYS_OBJECT_ID: Value("ObjectIdentifier", "1.3.6.1.4.1.13742.6.99")}
    with pytest.raises(NoProfile, match="product family of raritan_pdu2, but neither"):
        detect_in_walk(profiles, walk)


NOT_PDUS = sorted(p.name for p in (FIXTURES / "pdu" / "not_pdus").glob("*.snmprec"))


@pytest.mark.parametrize("name", NOT_PDUS)
def test_real_devices_that_are_not_pdus_have_no_profile(profiles: list[Profile], name: str) -> None:
    """Real recordings of UPSes, cooling units and sensors under PDU vendors' enterprises
    (Liebert's bare .476.1.42, Geist's .21239.42, APC's .318): no profile, never "up"."""
    walk = read_walk(FIXTURES / "pdu" / "not_pdus" / name)
    oid = walk[SYS_OBJECT_ID].value
    assert isinstance(oid, str) and oid.startswith(
        ("1.3.6.1.4.1.476.", "1.3.6.1.4.1.21239.", "1.3.6.1.4.1.318.")
    )
    with pytest.raises(NoProfile):
        detect_in_walk(profiles, walk)
    for p in profiles:  # the independent side: no signature column has a row
        assert not any(under(o, c) and o != c for o in walk for c in p.signature_columns()), p.name


def test_a_liebert_floor_pdu_no_profile_reads_is_not_up(profiles: list[Profile]) -> None:
    """The 300 kVA FPC (LIEBERT-GP-POWER-MIB only, no lgpPdu table): no_profile, not an MPH."""
    walk = read_walk(FIXTURES / "pdu" / "unsupported" / "liebert_fpc-300kva-web485.snmprec")
    liebert = re.escape("no profile knows sysObjectID 1.3.6.1.4.1.476.1.42 ")
    with pytest.raises(NoProfile, match=liebert):
        detect_in_walk(profiles, walk)


def test_no_profile(profiles: list[Profile]) -> None:
    walk = {SYS_OBJECT_ID: Value("ObjectIdentifier", NET_SNMP_LINUX)}
    with pytest.raises(NoProfile, match="no profile knows sysObjectID"):
        detect_in_walk(profiles, walk)


def test_probe_order(profiles: list[Profile]) -> None:
    order = [p.name for p in probe_order(profiles, "1.3.6.1.4.1.13742.6.1")]
    assert order[0] == "raritan_pdu2"
    assert order[1] == "raritan_pdu"  # the same enterprise before the others
    assert sorted(order) == sorted(p.name for p in profiles)
    # by name, except that a profile is probed after the newer generation of its MIB
    # (probe_after: APC's rPDU after rPDU2)
    by_name = sorted(p.name for p in profiles)
    by_name.remove("apc_rpdu")
    by_name.insert(by_name.index("apc_rpdu2") + 1, "apc_rpdu")
    assert [p.name for p in probe_order(profiles, "")] == by_name
    assert family_matches(profiles, "") == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.3.6.1.4.1.318.1.3.4.6", "1.3.6.1.4.1.318.1.3.4.6"),
        (".1.3.6.1.4.1.318", "1.3.6.1.4.1.318"),
        ("1", ""),
        ("", ""),
        ("1.3.x", ""),
        (b"1.3.6", ""),
        (None, ""),
        (7, ""),
    ],
)
def test_sys_object_id_of(value: object, expected: str) -> None:
    assert sys_object_id_of(value) == expected


# --- tolerant tables ---------------------------------------------------------------------------


def _px3_outlets(walk: Walk, sensor: str) -> dict[str, Fraction]:
    """Outlet row -> raw / 10^digits for one sensor type, where the recording has a valid one."""
    out: dict[str, Fraction] = {}
    for oid, v in walk.items():
        if not under(oid, OUTLET_VALUE) or not oid.endswith("." + sensor):
            continue
        row = oid[len(OUTLET_VALUE) + 1 : -len(sensor) - 1]
        state = walk.get(f"{OUTLET_STATE}.{row}.{sensor}")
        if state is not None and state.value not in (2, 3, 4, 5, 6):
            continue
        digits = walk.get(f"{OUTLET_DIGITS}.{row}.{sensor}")
        assert isinstance(v.value, int)
        d = digits.value if digits is not None and isinstance(digits.value, int) else 0
        out[row] = Fraction(v.value, 10**d)
    return out


def test_absent_label_and_state_columns_keep_every_reading(profiles: list[Profile]) -> None:
    full = _recording(PX3)
    walk = without(full, OUTLET_NAME, OUTLET_LABEL, OUTLET_STATE)
    profile = detect_in_walk(profiles, walk).profile
    assert profile.name == "raritan_pdu2"
    r = decode(profile, walk)
    expected = _px3_outlets(full, ACTIVE_POWER)  # rows valid in the full recording
    got = {o.index: o.power_watts for o in r.outlets}
    assert len(r.outlets) == 24
    for row, watts in expected.items():
        assert got[row] == pytest.approx(float(watts), rel=1e-12), row
    assert {o.name for o in r.outlets} == {o.index for o in r.outlets}  # named by the index
    amps = {o.index: o.current_amperes for o in r.outlets}
    for row, a in _px3_outlets(full, RMS_CURRENT).items():
        assert amps[row] == pytest.approx(float(a), rel=1e-12)  # mA: the digits still apply
    assert "unavailable" not in r.invalid


def test_an_explicit_unavailable_state_stays_invalid(profiles: list[Profile]) -> None:
    walk = dict(_recording(PX3))
    row = "1.1"
    walk[f"{OUTLET_STATE}.{row}.{ACTIVE_POWER}"] = Value("Integer32", -1)  # unavailable
    walk[f"{OUTLET_STATE}.{row}.{RMS_CURRENT}"] = Value("OctetString", b"x")  # garbage
    profile = detect_in_walk(profiles, walk).profile
    r = decode(profile, walk)
    o = next(o for o in r.outlets if o.index == row)
    assert o.power_watts is None and o.current_amperes is None  # never a 0
    assert r.invalid.get("unavailable", 0) >= 2


def test_absent_decimal_digits_mean_zero(profiles: list[Profile]) -> None:
    full = _recording(PX3)
    walk = without(full, OUTLET_DIGITS)
    profile = detect_in_walk(profiles, walk).profile
    r = decode(profile, walk)
    for o in r.outlets:
        raw = full[f"{OUTLET_VALUE}.{o.index}.{RMS_CURRENT}"].value
        state = full[f"{OUTLET_STATE}.{o.index}.{RMS_CURRENT}"].value
        if state in (2, 3, 4, 5, 6):
            assert o.current_amperes == raw  # digits 0: the raw integer is the value


def test_bad_decimal_digits_still_spoil_the_value(profiles: list[Profile]) -> None:
    walk = dict(_recording(PX3))
    walk[f"{OUTLET_DIGITS}.1.1.{RMS_CURRENT}"] = Value("Gauge32", 40)
    walk[f"{OUTLET_DIGITS}.1.2.{RMS_CURRENT}"] = Value("OctetString", b"3")
    r = decode(detect_in_walk(profiles, walk).profile, walk)
    by = {o.index: o for o in r.outlets}
    assert by["1.1"].current_amperes is None and by["1.2"].current_amperes is None
    assert r.invalid["out_of_range"] >= 1 and r.invalid["wrong_type"] >= 1


def test_outlets_without_their_index_column_are_found(profiles: list[Profile]) -> None:
    # APC: the index column is the outlet name column; without it the values still name rows.
    full = _recording("apc_ap8641.snmprec")
    name_col = "1.3.6.1.4.1.318.1.1.26.9.4.3.1.3"
    switched_name_col = "1.3.6.1.4.1.318.1.1.26.9.2.3.1.3"  # the name's second source
    walk = without(full, name_col, switched_name_col)
    profile = detect_in_walk(profiles, walk).profile
    before = decode(profile, full)
    after = decode(profile, walk)
    assert [o.index for o in after.outlets] == [o.index for o in before.outlets]
    for a, b in zip(after.outlets, before.outlets, strict=True):
        assert (a.power_watts, a.current_amperes, a.energy_joules) == (
            b.power_watts,
            b.current_amperes,
            b.energy_joules,
        )
        assert a.name == a.index


def test_every_profile_has_required_columns(profiles: list[Profile]) -> None:
    for p in profiles:
        required, optional = p.columns_doc()
        assert required, p.name  # a profile reads at least one value
        assert not set(required) & set(optional)
        assert set(p.signature_columns()) <= set(required) | set(optional), p.name


def _fallback_profile() -> Profile:
    return Profile.model_validate(
        {
            "name": "t",
            "vendor": "T",
            "mib": "T-MIB",
            "sys_object_ids": ["1.3.6.1.4.1.99999"],
            "unit": {
                "power_watts": {
                    "oid": "1.3.6.1.4.1.99999.1",
                    "instance": "0",
                    "state_oid": "1.3.6.1.4.1.99999.3",
                    "valid_states": [1],
                    "fallback": {"oid": "1.3.6.1.4.1.99999.2", "instance": "0", "scale": 10},
                }
            },
        }
    )


@pytest.mark.parametrize(
    ("primary", "state", "expected", "reasons"),
    [
        (Value("Integer32", 150), None, 150.0, {}),  # a reading: the fallback is not read
        (None, None, 70.0, {}),  # absent: the fallback
        (Value("noSuchObject", None), None, 70.0, {}),
        (Value("Integer32", -1), None, 70.0, {}),  # the MIB's "unsupported": the fallback
        (Value("Integer32", 150), Value("Integer32", 2), None, {"unavailable": 1}),  # sensor off
        (Value("OctetString", b"x"), None, None, {"wrong_type": 1}),  # garbage is no excuse
    ],
)
def test_unit_fallback_when_the_primary_is_absent_or_unsupported(
    primary: Value | None, state: Value | None, expected: float | None, reasons: dict
) -> None:
    walk: Walk = {"1.3.6.1.4.1.99999.2.0": Value("Integer32", 7)}
    if primary is not None:
        walk["1.3.6.1.4.1.99999.1.0"] = primary
    if state is not None:
        walk["1.3.6.1.4.1.99999.3.0"] = state
    r = decode(_fallback_profile(), walk)
    assert r.unit_power_watts == expected
    assert r.invalid == reasons
