"""A SYNTHETIC rPDU2 recording of any number of outlets, made from a real one (the demo's APC
AP8641, ../shared/pdu-recordings): its system group and rPDU2 branch with the outlet tables
extended, each new outlet's metered values the real ones scaled by a seeded factor, the unit's
totals scaled with them. The PDU benchmarks (bench/pdu_poll/, bench/soak/) serve such
recordings to poll a fleet of large PDUs; nothing here is a recording of a real PDU.
"""

from __future__ import annotations

import random
from pathlib import Path

from collector.pdu.snmprec import snmprec_rows
from exporters.snmp.oid import oid_arcs
from tests.support.env import RECORDINGS

SOURCE = RECORDINGS / "apc_ap8641.snmprec"  # the real recording they are made from

SYSTEM_GROUP = "1.3.6.1.2.1.1."
RPDU2 = "1.3.6.1.4.1.318.1.1.26."
# rPDU2 outlet tables (switched .9.2.x, metered .9.4.x): entry.column.outlet, 16 arcs
OUTLET_TABLES = ("1.3.6.1.4.1.318.1.1.26.9.2.", "1.3.6.1.4.1.318.1.1.26.9.4.")
OUTLET_ROW_ARCS = 16
METERED_STATUS = "1.3.6.1.4.1.318.1.1.26.9.4.3.1"
METERED_COLUMNS = {6, 7, 8, 11}  # current, power, peak power, energy: scaled per new outlet
NAME_COLUMN = 3  # rPDU2Outlet*Name in every rPDU2 outlet table
OUTLET_COUNTS = (
    "1.3.6.1.4.1.318.1.1.26.9.1.0",  # rPDU2OutletSwitchedTableSize
    "1.3.6.1.4.1.318.1.1.26.9.3.0",  # rPDU2OutletMeteredTableSize
    "1.3.6.1.4.1.318.1.1.26.4.2.1.4.1",  # rPDU2DevicePropertiesNumOutlets
    "1.3.6.1.4.1.318.1.1.26.4.2.1.5.1",  # ...NumSwitchedOutlets
    "1.3.6.1.4.1.318.1.1.26.4.2.1.6.1",  # ...NumMeteredOutlets
)
# unit rows scaled with the outlets' power / energy / current
UNIT_BY_POWER = (
    "1.3.6.1.4.1.318.1.1.26.4.3.1.5.1",  # rPDU2DeviceStatusPower
    "1.3.6.1.4.1.318.1.1.26.4.3.1.6.1",  # rPDU2DeviceStatusPeakPower
    "1.3.6.1.4.1.318.1.1.26.6.3.1.7.1",  # rPDU2PhaseStatusPower
)
UNIT_BY_ENERGY = ("1.3.6.1.4.1.318.1.1.26.4.3.1.9.1",)  # rPDU2DeviceStatusEnergy
UNIT_BY_CURRENT = ("1.3.6.1.4.1.318.1.1.26.6.3.1.5.1",)  # rPDU2PhaseStatusCurrent

Row = tuple[str, str, str]  # oid, tag, value text (snmprec)


def read_snmprec(path: Path) -> list[Row]:
    """The recording's rows as written (latin-1: every byte kept, written back the same)."""
    return [(o, t, v) for _, o, t, v in snmprec_rows(path.read_text(encoding="latin-1"))]


def _outlet_row(oid: str) -> tuple[str, int, int] | None:
    """(entry, column, outlet) of an rPDU2 outlet-table row, else None."""
    if not oid.startswith(OUTLET_TABLES):
        return None
    a = oid.split(".")
    if len(a) != OUTLET_ROW_ARCS:
        return None
    return ".".join(a[:-2]), int(a[-2]), int(a[-1])


def _scaled(value: str, factor: float) -> str:
    return str(round(int(value) * factor))


def synthesize(source: list[Row], outlets: int, seed: int) -> list[Row]:
    """The source's system group and rPDU2 branch, with `outlets` outlets (>= the source's)."""
    rows = [r for r in source if r[0].startswith((SYSTEM_GROUP, RPDU2))]
    base = max((o[2] for r in rows if (o := _outlet_row(r[0]))), default=0)
    if outlets < base or base == 0:
        raise ValueError(f"cannot make {outlets} outlets from a recording with {base}")
    if outlets == base:
        return sorted(rows, key=lambda r: oid_arcs(r[0]))
    rnd = random.Random(seed)
    factor = {j: rnd.uniform(0.7, 1.3) for j in range(base + 1, outlets + 1)}
    # index-like columns (index, outlet number): every row's value is its own index
    not_index = {
        (loc[0], loc[1])
        for oid, tag, value in rows
        if (loc := _outlet_row(oid)) and (tag != "2" or value != str(loc[2]))
    }
    new: list[Row] = []
    for oid, tag, value in rows:
        loc = _outlet_row(oid)
        if loc is None:
            continue
        entry, col, idx = loc
        for j in range(idx + base, outlets + 1, base):
            if col == NAME_COLUMN:
                t, v = "4", f"Outlet {j}"
            elif entry == METERED_STATUS and col in METERED_COLUMNS and tag == "2":
                t, v = tag, _scaled(value, factor[j])
            elif (entry, col) not in not_index:
                t, v = tag, str(j)
            else:
                t, v = tag, value
            new.append((f"{entry}.{col}.{j}", t, v))
    rows += new

    def col_sum(col: int, rs: list[Row]) -> int:
        prefix = f"{METERED_STATUS}.{col}."
        return sum(int(v) for o, t, v in rs if o.startswith(prefix) and t == "2")

    ratio = {
        "power": col_sum(7, rows) / max(1, col_sum(7, source)),
        "energy": col_sum(11, rows) / max(1, col_sum(11, source)),
        "current": col_sum(6, rows) / max(1, col_sum(6, source)),
    }
    out = []
    for oid, tag, value in rows:
        if oid in OUTLET_COUNTS and value == str(base):
            value = str(outlets)
        elif oid in UNIT_BY_POWER:
            value = _scaled(value, ratio["power"])
        elif oid in UNIT_BY_ENERGY:
            value = _scaled(value, ratio["energy"])
        elif oid in UNIT_BY_CURRENT:
            value = _scaled(value, ratio["current"])
        out.append((oid, tag, value))
    return sorted(out, key=lambda r: oid_arcs(r[0]))
