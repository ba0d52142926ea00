"""Turn one PDU's walk into a Reading, driven only by its profile (no vendor code).

Every configured value that is not a reading is left None and counted in ``Reading.invalid``
under one reason:

* ``missing``      the OID is not in the walk (or a table yields no row);
* ``no_such``      the agent answered noSuchObject / noSuchInstance / endOfMibView;
* ``wrong_type``   not an integer type (an OctetString or Null where a number belongs);
* ``negative``     below the profile's ``invalid_below`` (vendors answer -1 for unsupported);
* ``out_of_range`` above the profile's ``max`` (or absurd decimal digits), or outside its SMI
                   type's range (Integer32 -2^31..2^31-1; Unsigned32, Gauge32, Counter32,
                   TimeTicks 0..2^32-1; Counter64 0..2^64-1), or too long to read at all;
* ``unavailable``  the sensor's state says so, the MIB says 0 means unsupported, or the PDU says
                   it does not meter its outlets (``metered_if``). An *absent* state column
                   is "state unknown" and its value counts; absent decimal digits mean 0.
* ``over_limit``   every configured value of the outlets past the PDU's ``max_outlets`` (in
                   index order): those outlets are not read at all, so a PDU claiming 20,000
                   outlets costs at most ``max_outlets`` outlets' series.

A unit ``sum`` is None as soon as one of its rows is invalid (a partial sum would look like a
real, lower load); only the invalid rows are counted. Skipped outlet rows (padding) are not
outlets and are not counted. Each value (instance OID) is counted once however many readings
use it: a unit's current summed over the phase rows and the phases' own currents read the same
column.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from functools import lru_cache

from exporters.base import clean_text
from exporters.snmp.oid import oid_arcs
from exporters.snmp.types import EXCEPTIONS, Value, Walk

from .profile import Condition, Metric, Outlets, Profile, SwitchState, UnitMetric
from .types import OutletReading, Reading

REASONS = (
    "missing",
    "no_such",
    "wrong_type",
    "negative",
    "out_of_range",
    "unavailable",
    "over_limit",
)
_I32 = (-(2**31), 2**31 - 1)
_U32 = (0, 2**32 - 1)
# The range of each SMI integer type (RFC 2578 section 7.1); "Integer" is pysnmp's INTEGER.
_RANGES = {
    "Integer32": _I32,
    "Integer": _I32,
    "Unsigned32": _U32,
    "Gauge32": _U32,
    "Counter32": _U32,
    "TimeTicks": _U32,
    "Counter64": (0, 2**64 - 1),
}
MAX_OUTLETS = 512  # the default of max_outlets
# The longest model, serial, firmware or outlet name kept for a label: an OCTET STRING may be
# 65,535 bytes (RFC 2578 7.1.2), and an APC outlet name is at most 20.
MAX_LABEL_TEXT = 128
# What an optional column (state, digits) may be without spoiling its value: not there.
_ABSENT = frozenset({"missing", "no_such"})


class _Invalid:
    """Values that were no reading, by reason, each instance OID counted once (a unit's sum
    over the phase rows and the phases' own values read the same instances)."""

    def __init__(self) -> None:
        self.by_oid: dict[str, str] = {}

    def add(self, reason: str, oid: str) -> None:
        self.by_oid.setdefault(oid, reason)

    def update(self, other: _Invalid) -> None:
        for oid, reason in other.by_oid.items():
            self.add(reason, oid)

    def counts(self) -> Counter[str]:
        return Counter(self.by_oid.values())


class _Table:
    """The walk with column scans cached: column OID -> {row index: value}."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self._cols: dict[str, dict[str, Value]] = {}

    def get(self, oid: str) -> Value | None:
        return self.walk.get(oid)

    def rows(self, column: str) -> dict[str, Value]:
        if column not in self._cols:
            prefix = column + "."
            self._cols[column] = {
                oid[len(prefix) :]: v for oid, v in self.walk.items() if oid.startswith(prefix)
            }
        return self._cols[column]


def text_of(value: Value | None) -> str:
    """A display string from an SNMP value: bytes as UTF-8 (else latin-1), NULs and blanks cut."""
    if value is None or value.type in EXCEPTIONS or value.value is None:
        return ""
    raw = value.value
    if isinstance(raw, bytes):
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            s = raw.decode("latin-1")
    else:
        s = str(raw)
    # C strings: a NUL ends the text (the APC cPDU pads sysDescr with one).
    s = s.strip("\x00").split("\x00", 1)[0]
    return s.strip()


def label_of(value: Value | None) -> str:
    """text_of made fit for a label and a log line: printable, one line, at most
    MAX_LABEL_TEXT characters (an ESC sequence, a newline or a 60 KB name from a PDU costs
    that label's text, never the page nor a forged log line: issue 34)."""
    return clean_text(text_of(value), MAX_LABEL_TEXT)


def _int_of(value: Value | None) -> tuple[int | None, str | None]:
    """The integer in value, or (None, reason)."""
    if value is None:
        return None, "missing"
    if value.type in EXCEPTIONS:
        return None, "no_such"
    bounds = _RANGES.get(value.type)
    if bounds is None or isinstance(value.value, bool):
        return None, "wrong_type"
    if value.value is None:  # ber.py: an integer too long to read
        return None, "out_of_range"
    if not isinstance(value.value, int):
        return None, "wrong_type"
    if not bounds[0] <= value.value <= bounds[1]:
        return None, "out_of_range"
    return value.value, None


@lru_cache(maxsize=256)
def _exact_scale(scale: float) -> Fraction:
    # The profile's decimal scale taken exactly (0.1 is 1/10), so 3 x 0.1 is 0.3, not
    # 0.30000000000000004, and sums are exact until the final float.
    return Fraction(repr(scale))


_DECIMAL = re.compile(r"[+-]?(\d{1,15}(\.\d{0,9})?|\.\d{1,9})")


def _text_number(value: Value | None) -> tuple[Fraction | None, str | None]:
    """The decimal number a DisplayString holds ("0.61"), exactly; other text: unavailable."""
    if value is None:
        return None, "missing"
    if value.type in EXCEPTIONS:
        return None, "no_such"
    if not isinstance(value.value, bytes | str) or value.type in _RANGES:
        return None, "wrong_type"
    raw = value.value.decode("latin-1") if isinstance(value.value, bytes) else value.value
    text = raw.strip()
    if len(text) > 32 or not _DECIMAL.fullmatch(text):
        return None, "unavailable"  # "N/A", "not-support" (ATEN-PE-CFG-STR), garbage
    return Fraction(text), None


def _value(t: _Table, spec: Metric, index: str) -> tuple[Fraction | None, str | None]:
    """The exact SI value of spec at the full instance index (row plus suffix), or a reason."""
    raw: int | Fraction | None
    if spec.text:
        raw, why = _text_number(t.get(f"{spec.oid}.{index}"))
    else:
        raw, why = _int_of(t.get(f"{spec.oid}.{index}"))
    if raw is None:
        return None, why
    if spec.state_oid is not None and spec.valid_states is not None:
        # An absent state column (or row) means "state unknown": the value counts. A state
        # that is there but not a valid one (unavailable, or garbage) makes it no reading.
        state, why = _int_of(t.get(f"{spec.state_oid}.{index}"))
        if why not in _ABSENT and (state is None or state not in spec.valid_states):
            return None, "unavailable"
    if spec.zero_invalid and raw == 0:
        return None, "unavailable"
    if raw < spec.invalid_below:
        return None, "negative"
    if spec.max is not None and raw > spec.max:
        return None, "out_of_range"
    si = Fraction(raw)
    if spec.digits_oid is not None:
        # Absent decimal digits mean 0 (the PDU2-MIB default); present but unreadable ones
        # make the value unreadable, as a scale of 10^-digits cannot be guessed.
        digits, why = _int_of(t.get(f"{spec.digits_oid}.{index}"))
        if digits is None and why not in _ABSENT:
            return None, why
        if digits is not None and not 0 <= digits <= 9:
            return None, "out_of_range"
        si /= 10 ** (digits or 0)
    return si * _exact_scale(spec.scale), None


def _holds(t: _Table, cond: Condition, row: str) -> bool:
    """Whether cond holds for the row index (device-level conditions ignore the row)."""
    value: int | str | None
    if cond.index_arc is not None:
        arcs = row.split(".")
        pos = cond.index_arc - 1 if cond.index_arc > 0 else len(arcs) + cond.index_arc
        if not 0 <= pos < len(arcs):
            return False
        value = int(arcs[pos])
    else:
        oid = f"{cond.oid}.{cond.instance if cond.instance is not None else row}"
        v = t.get(oid)
        if cond.empty:
            return text_of(v) == ""
        number, _ = _int_of(v)
        if number is not None:
            value = number
        elif v is not None and v.type in _RANGES:
            return False  # an integer out of its range satisfies no test
        elif v is not None and v.type not in EXCEPTIONS and v.type != "Null":
            value = text_of(v)
        else:
            # An absent value satisfies no test but `empty`; another column may say the same
            # (`fallback`), or absent may be the common case (`or_absent`).
            absent = v is None or v.type in EXCEPTIONS
            if absent and cond.fallback is not None:
                return _holds(t, cond.fallback, row)
            return cond.or_absent and absent
    if cond.in_ is not None:
        return value in cond.in_ or str(value) in [str(x) for x in cond.in_]
    if cond.not_in is not None:
        return value not in cond.not_in and str(value) not in [str(x) for x in cond.not_in]
    if not isinstance(value, int):
        return False
    if cond.gt is not None:
        return value > cond.gt
    if cond.ge is not None:
        return value >= cond.ge
    if cond.lt is not None:
        return value < cond.lt
    if cond.le is not None:
        return value <= cond.le
    return False


def _sorted(indices: list[str]) -> list[str]:
    return sorted(indices, key=oid_arcs)


def _unit(t: _Table, spec: UnitMetric, bad: _Invalid) -> float | None:
    """A unit-level value (scalar, first row or sum), counting what was dropped."""
    local = _Invalid()
    result = _unit_once(t, spec, local)
    # Absent, or the MIB's "not supported here" (-1 and the like): the device answers this
    # object in name only, so the fallback's object is the reading (APC rPDUB units answer -1
    # to rPDU2DeviceStatusPower). An unavailable *state* is a sensor's passing condition: no.
    reasons = set(local.by_oid.values())
    unsupported = bool(reasons) and reasons <= {"missing", "no_such", "negative"}
    if result is None and unsupported and spec.fallback is not None:
        return _unit(t, spec.fallback, bad)
    bad.update(local)
    return result


def _unit_once(t: _Table, spec: UnitMetric, bad: _Invalid) -> float | None:
    if spec.instance is not None:
        value, why = _value(t, spec, spec.instance)
        if why:
            bad.add(why, f"{spec.oid}.{spec.instance}")
        return None if value is None else float(value)
    rows = []
    for idx in _sorted(list(t.rows(spec.oid))):
        if spec.suffix is not None:
            if not idx.endswith("." + spec.suffix):
                continue
            row = idx[: -len(spec.suffix) - 1]
        else:
            row = idx
        if all(_holds(t, c, row) for c in spec.where):
            rows.append((row, idx))
    if not rows:
        bad.add("missing", spec.oid)
        return None
    if spec.aggregate == "first":
        rows = rows[:1]
    total = Fraction(0)
    ok = True
    for _, idx in rows:
        value, why = _value(t, spec, idx)
        if value is None:
            bad.add(why or "missing", f"{spec.oid}.{idx}")
            ok = False
        else:
            total += value
    return float(total) if ok else None


def _identity(t: _Table, profile: Profile) -> dict[str, str]:
    out = {"vendor": profile.vendor}
    for field in ("model", "firmware", "serial"):
        text = ""
        for src in getattr(profile.identity, field):
            if src.instance is not None:
                text = label_of(t.get(f"{src.oid}.{src.instance}"))
            else:
                rows = t.rows(src.oid)
                first = _sorted(list(rows))[:1]
                text = label_of(rows[first[0]]) if first else ""
            if text:
                break
        out[field] = text
    return out


def _outlet_rows(t: _Table, spec: Outlets) -> list[str]:
    """The outlet rows: those of index_from and of every value column (suffix cut off).

    Only the value columns are required: a PDU whose label column is absent still has its
    outlets, named by their index.
    """
    rows = set(t.rows(spec.index_from))
    for _, metric in spec.metrics():
        cut = "." + metric.suffix if metric.suffix is not None else ""
        for idx in t.rows(metric.oid):
            if not cut:
                rows.add(idx)
            elif idx.endswith(cut):
                rows.add(idx[: -len(cut)])
    return _sorted(list(rows))


def _chosen(t: _Table, table: Outlets) -> Outlets:
    """The first table of the chain with a row of its index shape (else the last one)."""
    spec = table
    for spec in table.chain():
        if any(len(r.split(".")) == len(spec.index) for r in _outlet_rows(t, spec)):
            return spec
    return spec


def _outlets(
    t: _Table, table: Outlets | None, bad: _Invalid, max_outlets: int
) -> tuple[list[OutletReading], str]:
    """The rows of the table (or of its first fallback with rows), and that table's index_from."""
    if table is None:
        return [], ""
    spec = _chosen(t, table)
    out: list[OutletReading] = []
    valued = _outlet_rows(t, spec)
    # A switched PDU that meters no outlet has its outlets in the state column alone: those
    # rows have no values to read (nor to count as missing), only a state.
    switched = set(t.rows(spec.state.oid)) - set(valued) if spec.state is not None else set()
    for row in _sorted([*valued, *switched]):
        if len(row.split(".")) != len(spec.index):
            continue  # not a row of this table's index shape
        if any(_holds(t, c, row) for c in spec.skip_if):
            continue
        if len(out) >= max_outlets:
            for _, metric in spec.metrics():
                bad.add("over_limit", _instance(metric, row))
            continue
        out.append(_outlet(t, spec, row, bad, values=row not in switched))
    if spec.number is not None:
        _number(t, spec.number, out)
    return out, spec.index_from


def _instance(metric: Metric, row: str) -> str:
    """The instance OID a metric reads for a row."""
    return f"{metric.oid}.{row}" if metric.suffix is None else f"{metric.oid}.{row}.{metric.suffix}"


def _outlet(t: _Table, spec: Outlets, row: str, bad: _Invalid, values: bool) -> OutletReading:
    """One row's name, values (unless it is a row of the state column alone) and state."""
    name = ""
    for col in spec.name:
        name = label_of(t.get(f"{col}.{row}"))
        if name:
            break
    outlet = OutletReading(index=row, name=name or row)
    metered = not spec.metered_if or any(_holds(t, c, row) for c in spec.metered_if)
    for field, metric in spec.metrics() if values else ():
        oid = _instance(metric, row)
        if not metered:
            bad.add("unavailable", oid)
            continue
        index = row if metric.suffix is None else f"{row}.{metric.suffix}"
        value, why = _value(t, metric, index)
        if value is None:
            bad.add(why or "missing", oid)
        setattr(outlet, field, None if value is None else float(value))
    if spec.state is not None:
        outlet.on = _switched(t, spec.state, row, bad)
    return outlet


def _switched(t: _Table, spec: SwitchState, row: str, bad: _Invalid) -> bool | None:
    """On, off, or None: absent (not counted) or neither (counted as unavailable)."""
    oid = f"{spec.oid}.{row}"
    raw, why = _int_of(t.get(oid))
    if raw is None:
        if why not in _ABSENT:
            bad.add(why or "missing", oid)
        return None
    if raw in spec.on_states:
        return True
    if raw in spec.off_states:
        return False
    bad.add("unavailable", oid)  # unknown, rebooting, pending: a passing condition
    return None


def _number(t: _Table, column: str, rows: list[OutletReading]) -> None:
    """Index each row by the number the MIB states for it (its bank or phase), where every
    row has one and no two share it; else they keep their row indices."""
    numbers = [_int_of(t.get(f"{column}.{r.index}"))[0] for r in rows]
    if None in numbers or len(set(numbers)) != len(numbers):
        return
    for r, n in zip(rows, numbers, strict=True):
        r.index = str(n)


def decode(profile: Profile, walk: Walk, max_outlets: int = MAX_OUTLETS) -> Reading:
    """The Reading for one PDU: SI values, or None with the reason counted in ``invalid``.

    At most max_outlets outlets (the first in index order); the others' values are counted
    as ``over_limit``.
    """
    t = _Table(walk)
    bad = _Invalid()
    reading = Reading(identity=_identity(t, profile))
    for field, spec in profile.unit.metrics():
        setattr(reading, f"unit_{field}", _unit(t, spec, bad))
    reading.outlets, reading.outlet_table = _outlets(t, profile.outlets, bad, max_outlets)
    # Banks and phases are few (a handful of rows) and bounded by the same limit.
    reading.banks, _ = _outlets(t, profile.banks, bad, max_outlets)
    reading.phases, _ = _outlets(t, profile.phases, bad, max_outlets)
    counts = bad.counts()
    reading.invalid = {r: counts[r] for r in REASONS if counts[r]}
    return reading


def metered(reading: Reading) -> bool:
    """True if the PDU yielded any value at all (False: log once that it meters nothing)."""
    unit = (
        reading.unit_power_watts,
        reading.unit_energy_joules,
        reading.unit_current_amperes,
        reading.unit_voltage_volts,
    )
    if any(v is not None for v in unit):
        return True
    return any(
        v is not None
        for o in (*reading.outlets, *reading.banks, *reading.phases)
        for v in (
            o.power_watts,
            o.current_amperes,
            o.voltage_volts,
            o.energy_joules,
            o.apparent_power_voltamperes,
        )
    )
