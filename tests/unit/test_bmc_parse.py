"""The BMC poller's pure parts: Redfish documents to a chassis' power, DCMI answers, ipmi-raw's
output, chassis selection and mapping. Documents here are synthetic (the real mockups are
tests/integration/test_bmc_redfish_mockups.py's)."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters.bmc.ipmi import (
    CMD_GET_POWER_READING,
    parse_device_id,
    parse_power_reading,
    parse_raw_output,
    reading_from_raw,
    reading_of,
    stderr_reason,
)
from exporters.bmc.poller import BmcTarget, ancestors, map_chassis, primary
from exporters.bmc.redfish_parse import (
    KWH,
    chassis_power,
    check_depth,
    legacy_supplies,
    odata_path,
    parse_document,
)
from exporters.bmc.types import BmcError, BmcReading, ChassisPower, SupplyPower
from tests.support.bmcs import MOCKUPS


def dcmi(watts: int, active: bool) -> bytes:
    """A DCMI Get Power Reading answer's data (group id first), DCMI 1.5 table 6-16."""
    return struct.pack("<BHHHHIIB", 0xDC, watts, 1, 2, 3, 4, 5, 0x40 if active else 0)


def test_dcmi_active_bit_is_honoured() -> None:
    """Active: the current watts; not active: no value (ipmitool would print 0 W)."""
    r = parse_power_reading(dcmi(287, True))
    assert (r.current, r.minimum, r.maximum, r.average, r.active) == (287, 1, 2, 3, True)
    assert reading_of(r).chassis[0].power_watts == 287.0
    inactive = reading_of(parse_power_reading(dcmi(0, False)))
    assert inactive.chassis[0].power_watts is None and inactive.invalid == {"inactive": 1}
    active_zero = reading_of(parse_power_reading(dcmi(0, True)))
    assert active_zero.chassis[0].power_watts == 0.0  # an active 0 W is a reading


@pytest.mark.parametrize("data", [b"", b"\xdc" * 17, b"\x00" + dcmi(5, True)[1:]])
def test_dcmi_garbage(data: bytes) -> None:
    """Short answers and a wrong group extension are garbage, never a value."""
    with pytest.raises(BmcError) as err:
        parse_power_reading(data)
    assert err.value.reason == "garbage"


def test_ipmi_raw_output_and_completion_codes() -> None:
    """ipmi-raw's `rcvd:` lines; 0xC1 unsupported, 0xD4 auth; Get Device ID's identity."""
    text = (
        "rcvd: 02 00 DC 1F 01 1F 01 1F 01 1F 01 00 F1 53 65 E8 03 00 00 40 \n"
        "rcvd: 01 00 00 00 02 48 02 00 57 01 00 00 A2 00 00 00 \n"
    )
    answers = parse_raw_output(text)
    r = reading_from_raw(answers, identity=True)
    assert r.chassis[0].power_watts == 0x11F
    assert r.identity == {"vendor": "Intel", "model": "product 0xa200", "firmware": "2.48"}
    for code, reason in (("C1", "unsupported"), ("D4", "auth"), ("C3", "error")):
        with pytest.raises(BmcError) as err:
            reading_from_raw(parse_raw_output(f"rcvd: 02 {code}\n"), identity=False)
        assert err.value.reason == reason
    with pytest.raises(BmcError):
        parse_raw_output("rcvd: 02 zz\n")
    assert parse_device_id(b"\x00" * 5) == {}


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        ("ipmi-raw: password invalid", "auth"),
        ("ipmi-raw: username invalid", "auth"),
        ("ipmi-raw: privilege level cannot be obtained for this user", "auth"),
        ("ipmi-raw: connection timeout", "timeout"),
        ("ipmi-raw: session timeout", "timeout"),
        ("ipmi-raw: something new", "error"),
    ],
)
def test_ipmi_raw_errors(stderr: str, reason: str) -> None:
    """FreeIPMI's fixed messages to failure reasons."""
    assert stderr_reason(stderr) == reason


def test_depth_cap_counts_only_structure() -> None:
    """Brackets inside strings (escaped quotes too) do not count; real nesting does."""
    check_depth(b'{"a": "[[[[[[[[[[", "b": "\\"[[[[[["}', 2)
    with pytest.raises(BmcError) as err:
        check_depth(b"[" * 33, 32)
    assert err.value.reason == "too_deep"
    with pytest.raises(BmcError) as err:
        parse_document(b"[1, 2]")
    assert err.value.reason == "garbage"
    with pytest.raises(BmcError):
        parse_document(b"\xff\xfe")


def test_what_a_document_expands_to_is_bounded() -> None:
    """Objects and arrays are counted before parsing (strings cut out, escapes and an
    unterminated string too); a body of mostly brackets in strings passes (issue 34)."""
    check_depth(b'{"a": "' + b"{[" * 50_000 + b'"}', 32)  # all inside a string
    with pytest.raises(BmcError) as err:
        parse_document(b'{"pad": [' + b"{}," * 10_000 + b"{}]}")
    assert err.value.reason == "too_big"
    parse_document(b'{"pad": [' + b"{}," * 9_000 + b"{}]}")
    with pytest.raises(BmcError) as err:
        check_depth(b'{"a": "\\\\", "b": ' + b"[" + b"{}," * 20_000, 32)  # escape, then structure
    assert err.value.reason == "too_big"
    for body in (b'"\\' * 100_000, b'"\\' * 100_000 + b"\\", b'"' * 100_001):
        with pytest.raises(BmcError):  # linear on unterminated strings (never quadratic)
            parse_document(body)


@pytest.mark.parametrize(
    ("link", "path"),
    [
        ("/redfish/v1/Chassis/1U", "/redfish/v1/Chassis/1U"),
        ("/redfish/v1/Chassis/1/", "/redfish/v1/Chassis/1"),  # HPE's trailing slash
        ("/redfish/v1/Chassis/1U/Power#/PowerControl/0", "/redfish/v1/Chassis/1U/Power"),
        ("http://evil.example/redfish/v1", None),
        ("//evil.example/redfish/v1", None),
        ("/redfish/v1/../../etc/passwd", None),
        ("/other/v1", None),
        ("/redfish/v1/x?y=1", None),
        (42, None),
    ],
)
def test_links_stay_on_the_bmc(link: object, path: str | None) -> None:
    """Only paths under /redfish/v1 on the BMC itself are followed."""
    assert odata_path(link) == path


CHASSIS = {"Id": "1U", "Name": "Chassis", "@odata.id": "/redfish/v1/Chassis/1U"}


def test_property_order() -> None:
    """EnvironmentMetrics first, then PowerControl (sub-domains skipped), then input supplies."""
    env = {"PowerWatts": {"Reading": 374}, "EnergykWh": {"Reading": 12.5}}
    power = {
        "PowerControl": [
            {"PhysicalContext": "CPU", "PowerConsumedWatts": 120},
            {"PowerConsumedWatts": 344},
        ],
        "PowerSupplies": [
            {"MemberId": "0", "PowerInputWatts": 180, "PowerOutputWatts": 160},
            {"MemberId": "1", "PowerInputWatts": 175, "LastPowerOutputWatts": 150},
            {"MemberId": "2", "Status": {"State": "Absent"}, "PowerInputWatts": 0},
        ],
    }
    r = BmcReading()
    c = chassis_power(CHASSIS, power, env, [], r)
    assert (c.power_watts, c.source) == (374.0, "EnvironmentMetrics.PowerWatts")
    assert c.energy_joules == 12.5 * KWH
    c = chassis_power(CHASSIS, power, None, [], r)
    assert (c.power_watts, c.source) == (344.0, "PowerControl.PowerConsumedWatts")
    assert c.supplies == [
        SupplyPower("0", "input", 180.0),
        SupplyPower("0", "output", 160.0),
        SupplyPower("1", "input", 175.0),
        SupplyPower("1", "output", 150.0),
    ]
    no_total = {"PowerSupplies": power["PowerSupplies"], "PowerControl": [{"Name": "x"}]}
    c = chassis_power(CHASSIS, no_total, None, [], r)
    assert (c.power_watts, c.source) == (355.0, "PowerSupplies.InputPower")
    only_output = {"PowerSupplies": [{"MemberId": "0", "LastPowerOutputWatts": 97}]}
    assert chassis_power(CHASSIS, only_output, None, [], r).power_watts is None
    assert r.invalid == {}


def test_invalid_values_are_counted_never_exported() -> None:
    """null, a string, a negative or absurd figure: no value, counted by reason."""
    r = BmcReading()
    for value in (None, "100", -5, 5e9, float("nan"), True, 10**400):  # 400 digits: issue 34
        c = chassis_power(CHASSIS, {"PowerControl": [{"PowerConsumedWatts": value}]}, None, [], r)
        assert c.power_watts is None
    assert r.invalid == {"null": 1, "out_of_range": 6}
    env = {"PowerWatts": {"Reading": 10**400}, "EnergykWh": {"Reading": -(10**400)}}
    assert chassis_power(CHASSIS, None, env, [], r).power_watts is None
    assert r.invalid == {"null": 1, "out_of_range": 8}
    assert legacy_supplies({"PowerSupplies": "nope"}, r) == []


def test_primary_and_mapping() -> None:
    """Unmapped: the top-level chassis with a figure; mapped: one series per (host, component)."""
    board = ChassisPower("Baseboard", power_watts=148.0, contained=True)
    rack = ChassisPower("RackMount")
    enclosure = ChassisPower("Enclosure", power_watts=2000.0)
    assert primary([rack, board]) is board
    assert primary([board, enclosure]) is enclosure
    assert primary([rack]) is rack and primary([rack, ChassisPower("x")]) is None
    reading = BmcReading(chassis=[enclosure, board, ChassisPower("Blade2", power_watts=5.0)])

    def mapper(cid: str, name: str) -> tuple[str, str] | None:
        return {"Baseboard": ("n1", ""), "Blade2": ("n1", "")}.get(cid)

    decided = map_chassis(BmcTarget("b", "redfish", mapper=mapper), reading)
    assert [(m.host, m.power.chassis) for m in decided.mapped] == [("n1", "Baseboard")]
    assert decided.twice == ["Blade2"] and decided.nested == []


def mapped_to(
    chassis: list[ChassisPower], rules: dict[str, tuple[str, str]]
) -> tuple[dict[str, float | None], list[tuple[str, str]]]:
    """{chassis exported: its watts}, and the chassis left out as nested, under `rules`."""
    decided = map_chassis(BmcTarget("b", "redfish", mapper=lambda c, n: rules.get(c)),
                          BmcReading(chassis=chassis))  # fmt: skip
    return {m.power.chassis: m.power.power_watts for m in decided.mapped}, decided.nested


def test_nested_chassis_on_one_host_counted_once() -> None:
    """An enclosure and its blade (or a chassis and its board) mapped to one host: only the
    outermost with a figure is exported, whichever side the BMC links from; on other hosts
    both stand; a contained chassis without a figure never hides its container."""
    enclosure = ChassisPower("Enclosure", power_watts=2000.0, contains=("Blade1", "Blade2"))
    blade1 = ChassisPower("Blade1", power_watts=300.0)  # linked only from the enclosure
    blade2 = ChassisPower("Blade2", power_watts=280.0, contained_by="Enclosure")
    node = ChassisPower("Node", power_watts=150.0, contained_by="Blade2")  # two levels down
    same = {"Enclosure": ("h", "enclosure"), "Blade1": ("h", "server"), "Node": ("h", "node")}
    assert mapped_to([blade1, enclosure, blade2, node], same) == (
        {"Enclosure": 2000.0},
        [("Blade1", "Enclosure"), ("Node", "Enclosure")],
    )
    apart = {"Enclosure": ("enc", ""), "Blade1": ("h1", ""), "Blade2": ("h2", "")}
    assert mapped_to([enclosure, blade1, blade2], apart) == (
        {"Enclosure": 2000.0, "Blade1": 300.0, "Blade2": 280.0},
        [],
    )
    # the container has no figure (HPE XL675d's EnclosureChassis): the server's stands
    empty = ChassisPower("EnclosureChassis")
    server = ChassisPower("1", power_watts=894.0, contained=True, contained_by="EnclosureChassis")
    both = {"EnclosureChassis": ("h", "enclosure"), "1": ("h", "server")}
    assert mapped_to([empty, server], both) == ({"EnclosureChassis": None, "1": 894.0}, [])
    # a BMC whose links loop is cut, not followed forever
    a = ChassisPower("A", power_watts=1.0, contained_by="B")
    b = ChassisPower("B", power_watts=2.0, contained_by="A")
    assert ancestors([a, b]) == {"A": ["B"], "B": ["A"]}
    # ... and a loop on one host exports one of them, not none (issue 34)
    assert mapped_to([a, b], {"A": ("h", ""), "B": ("h", "")}) == ({"A": 1.0}, [])


def test_containment_links_of_a_real_chassis() -> None:
    """HPE iLO 5 ends its links with "/": the XL675d mockup's server chassis names its
    enclosure by Id all the same (tests/fixtures/bmc, a verbatim capture)."""
    import json

    from tests.support.bmcs import MOCKUPS

    doc = json.loads((MOCKUPS / "hpe-xl675d-gen10plus/Chassis/1/index.json").read_text())
    c = chassis_power(doc, None, None, [], BmcReading())
    assert (c.contained, c.contained_by, c.contains) == (True, "EnclosureChassis", ())
    intel = {"Id": "Baseboard", "Links": {"ContainedBy": [{"@odata.id": "/redfish/v1/Chassis/R"}]}}
    assert chassis_power(intel, None, None, [], BmcReading()).contained_by == "R"
    garbage = {"Id": "x", "Links": {"ContainedBy": "nope", "Contains": [{"@odata.id": 5}, 7]}}
    c = chassis_power(garbage, None, None, [], BmcReading())
    assert (c.contained_by, c.contains) == ("", ())


JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(["PowerControl", "PowerSupplies", "PowerWatts", "EnergykWh", "Links", "Id"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, JSON, max_size=5), st.dictionaries(KEYS, JSON, max_size=5))
def test_hostile_documents_never_crash(power: dict[str, Any], env: dict[str, Any]) -> None:
    """Any JSON where a Power or EnvironmentMetrics resource should be: a value or none."""
    r = BmcReading()
    c = chassis_power({**CHASSIS, **power}, power, env, [], r)
    assert c.power_watts is None or 0 <= c.power_watts <= 1e6 * 64


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_bodies_raise_only_bmc_errors(body: bytes) -> None:
    """Any body: a document or a BmcError, nothing else."""
    try:
        assert isinstance(parse_document(body), dict)
    except BmcError as exc:
        assert exc.reason in ("garbage", "too_deep", "too_big")


PARTIAL = json.loads((MOCKUPS / "synthetic-partial-answers.json").read_text())


@pytest.mark.parametrize("shape", sorted(k for k in PARTIAL if not k.startswith("_")))
def test_a_part_of_a_server_is_never_the_server(shape: str) -> None:
    """Issue 32's shapes (synthetic: tests/fixtures/bmc/synthetic-partial-answers.json): the
    server's figure, or none with the reason counted when it cannot be known."""
    case = PARTIAL[shape]
    r = BmcReading()
    c = chassis_power(case["chassis"], case["power"], None, [], r)
    assert c.power_watts == case["watts"], (c.power_watts, c.source)
    assert {k: v for k, v in r.invalid.items() if v} == case["invalid"]
    if "supply_inputs" in case:
        got = {s.supply: s.watts for s in c.supplies if s.kind == "input"}
        assert got == case["supply_inputs"]


def test_an_enclosure_listed_after_its_blades_beyond_max_chassis_is_found() -> None:
    """Synthetic: an enclosure listed after three blades, max_chassis 2. The blades name it in
    ContainedBy: it is read all the same and stands for the server (before, blade 1 was
    exported as the server); the chassis the cap left unread are counted and logged."""
    import asyncio

    from exporters.bmc.poller import BmcPoller
    from exporters.bmc.redfish import RedfishClient, RedfishTarget

    def chassis(cid: str, watts: float, inside: str | None) -> dict[str, Any]:
        links = {"ContainedBy": {"@odata.id": f"/redfish/v1/Chassis/{inside}"}} if inside else {}
        return {"Id": cid, "Links": links, "Power": {"@odata.id": f"/redfish/v1/Chassis/{cid}/P"}}

    docs: dict[str, dict[str, Any]] = {
        "/redfish/v1": {"Chassis": {"@odata.id": "/redfish/v1/Chassis"}},
        "/redfish/v1/Chassis": {
            "Members": [
                {"@odata.id": f"/redfish/v1/Chassis/{c}"}
                for c in ("Blade1", "Blade2", "Blade3", "Enclosure")
            ]
        },
    }
    for cid, watts, inside in (
        ("Blade1", 310.0, "Enclosure"),
        ("Blade2", 290.0, "Enclosure"),
        ("Blade3", 305.0, "Enclosure"),
        ("Enclosure", 1400.0, None),
    ):
        docs[f"/redfish/v1/Chassis/{cid}"] = chassis(cid, watts, inside)
        docs[f"/redfish/v1/Chassis/{cid}/P"] = {
            "PowerControl": [{"Name": "System Power Control", "PowerConsumedWatts": watts}]
        }

    class Served(RedfishClient):
        async def get(self, path: str, optional: bool = False) -> dict[str, Any] | None:
            return docs.get(path)

    rf = RedfishTarget("http://bmc.invalid", max_chassis=2)
    poller = BmcPoller([BmcTarget("b", "redfish", redfish=rf, labels=("h", ""))], interval=60)
    poller._redfish["b"] = Served(rf)
    state = asyncio.run(poller.poll_all())[0]
    assert state.up, state.error
    assert [m.power.chassis for m in state.mapped] == ["Enclosure"]
    assert poller.invalid[("b", "capped")] == 1  # Blade3: left unread


def test_bmc_strings_reach_the_log_escaped(caplog: pytest.LogCaptureFixture) -> None:
    """Chassis Ids with an ESC sequence, a newline forging a log line and a lone surrogate:
    the warning naming them holds none of them raw (issue 34)."""
    import asyncio

    from exporters.bmc.poller import BmcPoller
    from exporters.bmc.redfish import RedfishClient, RedfishTarget

    evil = ["A\x1b[2J\ud800", "B\nFORGED wattbit line"]
    docs: dict[str, dict[str, Any]] = {
        "/redfish/v1": {"Chassis": {"@odata.id": "/redfish/v1/Chassis"}},
        "/redfish/v1/Chassis": {
            "Members": [{"@odata.id": f"/redfish/v1/Chassis/{i}"} for i in range(2)]
        },
    }
    for i, cid in enumerate(evil):
        docs[f"/redfish/v1/Chassis/{i}"] = {
            "Id": cid,
            "Name": cid,
            "Power": {"@odata.id": f"/redfish/v1/Chassis/{i}/P"},
        }
        docs[f"/redfish/v1/Chassis/{i}/P"] = {
            "PowerControl": [{"Name": "System Power Control", "PowerConsumedWatts": 100 + i}]
        }

    class Served(RedfishClient):
        async def get(self, path: str, optional: bool = False) -> dict[str, Any] | None:
            return docs.get(path)

    rf = RedfishTarget("http://bmc.invalid")
    poller = BmcPoller([BmcTarget("b", "redfish", redfish=rf, labels=("h", ""))], interval=60)
    poller._redfish["b"] = Served(rf)
    with caplog.at_level("WARNING"):
        state = asyncio.run(poller.poll_all())[0]
    assert state.up, state.error
    assert "2 chassis report power" in caplog.text  # the line naming them was logged
    for bad in ("\x1b", "\ud800", "\nFORGED"):
        assert bad not in caplog.text


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64), st.binary(min_size=0, max_size=64))
def test_ipmi_identity_is_made_of_numbers_whatever_the_bytes(power: bytes, device: bytes) -> None:
    """IPMI's strings (issue 34): wattbit reads no FRU text; vendor, model and firmware are
    formatted from Get Device ID's numbers, so any bytes give printable, short labels or a
    BmcError, never an exception of another kind."""
    answers = [bytes([CMD_GET_POWER_READING, 0]) + power, b"\x01\x00" + device]
    try:
        reading = reading_from_raw(answers, identity=True)
    except BmcError:
        return
    for value in reading.identity.values():
        assert value.isprintable() and len(value) <= 32, value


def test_ipmi_raw_output_with_control_characters_is_garbage() -> None:
    """ipmi-raw's output is parsed as hex bytes only: anything else is a clean "garbage"."""
    with pytest.raises(BmcError) as err:
        parse_raw_output("rcvd: 02 00 DC\x1b[31m\nFORGED\n")
    assert err.value.reason == "garbage"
