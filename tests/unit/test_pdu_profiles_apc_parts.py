"""APC phases, banks and outlet states (issue 32), both generations of PowerNet-MIB, on real
recordings: rPDU's one load table (phase rows and bank rows told apart by
rPDULoadStatusBankNumber, numbered by PhaseNumber / BankNumber), rPDU2's phase and bank
tables, and the outlet state each generation numbers its own way (rPDU on(1) off(2), rPDU2
off(1) on(2)).

Expected values are the recorded integers times the MIB's unit (tenths of A), worked out
here; the second opinion is another table of the same agent: a 2G unit's rPDU and rPDU2
tables, and the legacy sPDUOutletCtl column (outletOn(1), outletOff(2)) beside rPDU's outlet
state. Where the input is not a recording (a daisy chain, a state neither on nor off) the
walk is a real one with single values changed, and says so.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from exporters.pdu.decode import decode
from exporters.pdu.profile import Profile
from exporters.snmp.types import Value, Walk
from tests.support.pdurecordings import raw, recording

E = "1.3.6.1.4.1.318.1.1."
LOAD = E + "12.2.3.1.1."  # rPDULoadStatusEntry: Load .2, PhaseNumber .4, BankNumber .5
RPDU_STATE = E + "12.3.5.1.1.4."  # rPDUOutletStatusOutletState
SPDU_CTL = E + "4.4.2.1.3."  # sPDUOutletCtl: outletOn(1), outletOff(2) (legacy, same agent)
PHASE2 = E + "26.6.3.1."  # rPDU2PhaseStatusEntry: Number .3, Current .5
BANK2 = E + "26.8.3.1."  # rPDU2BankStatusEntry: Number .3, Current .5
SWITCHED2 = E + "26.9.2.3.1."  # rPDU2OutletSwitchedStatusEntry: Name .3, State .5
RPDU2 = E + "26."


def named(profiles: list[Profile], name: str) -> Profile:
    return next(p for p in profiles if p.name == name)


def rows(walk: Walk, column: str) -> list[str]:
    return sorted(
        (o[len(column) :] for o in walk if o.startswith(column)), key=lambda i: int(i.split(".")[0])
    )


def tenths(walk: Walk, oid: str) -> float:
    return float(Fraction(raw(walk, oid), 10))


@pytest.mark.parametrize(
    "name", ["apc_ap8641.snmprec", "apc_ap7902b.snmprec", "apc_ap8932.snmprec"]
)
def test_rpdu_phases_and_banks_from_one_table(profiles: list[Profile], name: str) -> None:
    """Three rows each: phase 1 (BankNumber 0) and banks 1 and 2 (PhaseNumber 0)."""
    w = recording(name)
    assert [raw(w, LOAD + f"5.{i}") for i in (1, 2, 3)] == [0, 1, 2]
    assert [raw(w, LOAD + f"4.{i}") for i in (1, 2, 3)] == [1, 0, 0]
    r = decode(named(profiles, "apc_rpdu"), w)
    assert [(p.index, p.current_amperes) for p in r.phases] == [("1", tenths(w, LOAD + "2.1"))]
    assert [(b.index, b.current_amperes) for b in r.banks] == [
        ("1", tenths(w, LOAD + "2.2")),
        ("2", tenths(w, LOAD + "2.3")),
    ]
    # the banks are parts of the phase: never more than it (0.1 A per reading); not always
    # all of it either (the AP7902B: banks 0.0 + 1.1 A on a 1.6 A phase)
    assert sum(b.current_amperes or 0 for b in r.banks) <= (r.phases[0].current_amperes or 0) + 0.2
    assert r.invalid.get("missing", 0) <= 1  # only the AP7902B's estimated watts


def test_rpdu_the_ap8641_in_numbers(profiles: list[Profile]) -> None:
    r = decode(named(profiles, "apc_rpdu"), recording("apc_ap8641.snmprec"))
    assert {p.index: p.current_amperes for p in r.phases} == {"1": 6.6}
    assert {b.index: b.current_amperes for b in r.banks} == {"1": 4.0, "2": 2.5}
    assert r.unit_current_amperes == 6.6  # the phase, never phase + banks


@pytest.mark.parametrize("name", ["apc_ap8959eu3.snmprec", "apc_apdu9959eu3.snmprec"])
def test_rpdu_a_capture_without_bank_numbers_has_its_phase(
    profiles: list[Profile], name: str
) -> None:
    """LibreNMS's subsets hold rPDULoadStatusLoad.1 alone: one phase (its row), no bank."""
    w = recording(name)
    assert rows(w, LOAD + "5.") == [] and rows(w, LOAD + "2.") == ["1"]
    r = decode(named(profiles, "apc_rpdu"), w)
    assert [(p.index, p.current_amperes) for p in r.phases] == [("1", tenths(w, LOAD + "2.1"))]
    assert r.banks == []


@pytest.mark.parametrize(
    "name", ["apc_ap8641.snmprec", "apc_ap7902b.snmprec", "apc_ap8932.snmprec"]
)
def test_rpdu_outlet_state_agrees_with_the_legacy_control_column(
    profiles: list[Profile], name: str
) -> None:
    w = recording(name)
    r = decode(named(profiles, "apc_rpdu"), w)
    assert r.outlets and len(r.outlets) == len(rows(w, RPDU_STATE))
    for o in r.outlets:
        assert raw(w, RPDU_STATE + o.index) in (1, 2)
        assert o.on == (raw(w, RPDU_STATE + o.index) == 1)
        assert o.on == (raw(w, SPDU_CTL + o.index) == 1), (name, o.index)
    assert {o.on for o in r.outlets} == {True, False}  # these three have outlets of each


@pytest.mark.parametrize(
    "name", ["apc_ap8641.snmprec", "apc_ap7902b.snmprec", "apc_ap8932.snmprec"]
)
def test_rpdu2_phases_and_banks(profiles: list[Profile], name: str) -> None:
    w = recording(name)
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert [(p.index, p.current_amperes) for p in r.phases] == [("1", tenths(w, PHASE2 + "5.1"))]
    assert [(b.index, b.current_amperes) for b in r.banks] == [
        (str(raw(w, BANK2 + f"3.{i}")), tenths(w, BANK2 + f"5.{i}")) for i in (1, 2)
    ]
    # the same agent's first-generation table, read at another moment: within 0.1 A a value
    rpdu = decode(named(profiles, "apc_rpdu"), w)
    for mine, theirs in ((r.phases, rpdu.phases), (r.banks, rpdu.banks)):
        for a, b in zip(mine, theirs, strict=True):
            assert a.index == b.index
            assert abs((a.current_amperes or 0) - (b.current_amperes or 0)) <= 0.2 + 1e-9
    assert r.unit_current_amperes == r.phases[0].current_amperes


def test_rpdu2_switched_units_that_meter_no_outlet_have_their_outlets(
    profiles: list[Profile],
) -> None:
    """The AP8932 (NumMeteredOutlets 0): its 24 outlets from the switched table, with their
    names and states and no value (none counted missing)."""
    w = recording("apc_ap8932.snmprec")
    assert not rows(w, E + "26.9.4.3.1.3.")
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert [o.index for o in r.outlets] == [str(i) for i in range(1, 25)]
    assert r.outlets[0].name == "SW-DC01-WEST-01-B"
    assert all(o.power_watts is None and o.current_amperes is None for o in r.outlets)
    assert r.invalid == {}
    # rPDU2's numbers are rPDU's swapped: off(1), on(2). The recording's rPDU2 states are
    # snmpsim variations (their static value is read), its rPDU states captured values.
    for o in r.outlets:
        assert o.on == (raw(w, SWITCHED2 + "5." + o.index) == 2)


def test_the_two_generations_number_states_the_opposite_way(profiles: list[Profile]) -> None:
    w = dict(recording("apc_ap8641.snmprec"))
    w[SWITCHED2 + "5.1"] = Value("Integer", 1)
    w[RPDU_STATE + "1"] = Value("Integer", 1)
    assert decode(named(profiles, "apc_rpdu2"), w).outlets[0].on is False
    assert decode(named(profiles, "apc_rpdu"), w).outlets[0].on is True


def test_a_state_neither_on_nor_off_is_no_series_and_counted(profiles: list[Profile]) -> None:
    """A changed value in a real walk: outlet 3 answers 3 (no such state in either MIB)."""
    w = dict(recording("apc_ap8641.snmprec"))
    w[SWITCHED2 + "5.3"] = Value("Integer", 3)
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert r.outlets[2].on is None and r.invalid == {"unavailable": 1}
    # absent: a PDU that switches nothing says nothing; not counted
    gone = {o: v for o, v in w.items() if not o.startswith(SWITCHED2 + "5.")}
    r = decode(named(profiles, "apc_rpdu2"), gone)
    assert all(o.on is None for o in r.outlets) and r.invalid == {}


def test_one_invalid_value_is_counted_once(profiles: list[Profile]) -> None:
    """rPDU2PhaseStatusCurrent -1 (unsupported) is read for the unit's sum and for the phase:
    one value, one count."""
    w = dict(recording("apc_ap8641.snmprec"))
    w[PHASE2 + "5.1"] = Value("Integer", -1)
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert r.unit_current_amperes is None and r.phases[0].current_amperes is None
    assert r.invalid == {"negative": 1}


def test_a_daisy_chain_keeps_its_row_indices(profiles: list[Profile]) -> None:
    """rPDU2's Number repeats per chained unit: rows 1 and 2 both phase 1 (module 1 and 2; a
    second unit added to a real walk) are labelled by their row indices, never twice "1"."""
    w = dict(recording("apc_ap8641.snmprec"))
    for col, value in ((1, 2), (2, 2), (3, 1), (4, 2), (5, 30), (7, 33)):
        w[PHASE2 + f"{col}.2"] = Value("Integer", value)
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert [(p.index, p.current_amperes) for p in r.phases] == [("1", 6.5), ("2", 3.0)]
    w[PHASE2 + "3.2"] = Value("Integer", 2)  # distinct numbers again: used
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert [p.index for p in r.phases] == ["1", "2"]
    w[PHASE2 + "3.1"] = Value("Integer", 3)
    w[PHASE2 + "3.2"] = Value("Integer", 1)
    r = decode(named(profiles, "apc_rpdu2"), w)
    assert {p.index: p.current_amperes for p in r.phases} == {"3": 6.5, "1": 3.0}


def test_a_first_generation_unit_has_phases_banks_and_states(profiles: list[Profile]) -> None:
    """The AP7902B without its rPDU2 branch, as an AOS 3.x card answers."""
    w = {o: v for o, v in recording("apc_ap7902b.snmprec").items() if not o.startswith(RPDU2)}
    r = decode(named(profiles, "apc_rpdu"), w)
    assert {p.index: p.current_amperes for p in r.phases} == {"1": 1.6}
    assert {b.index: b.current_amperes for b in r.banks} == {"1": 0.0, "2": 1.1}
    assert [o.on for o in r.outlets[:4]] == [True, True, False, False]
