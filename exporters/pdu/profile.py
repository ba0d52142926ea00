"""Vendor PDU profiles: what to read from one vendor MIB, as data (YAML), validated by pydantic.

One YAML file per vendor MIB lives in ``exporters/pdu/profiles/``; ``decode.py`` turns a walk into a
``Reading`` using nothing but the profile, so adding a vendor is adding a file, never an ``if``.

Schema (every mapping rejects unknown keys; OIDs are dotted decimal, a leading dot is allowed)::

    name: apc_rpdu2                  # unique, usually the file stem
    vendor: APC                      # reported as identity["vendor"]
    mib: PowerNet-MIB                # the MIB module every OID below comes from
    notes: "..."                     # optional free text
    sys_object_ids: [1.3.6.1.4.1.318.1.3.4]     # the vendor's product-OID families this MIB
                                     #   serves (prefixes, matched on OID arc boundaries)
    probe_after: [apc_rpdu2]         # optional: profiles probed before this one (a newer
                                     #   generation of the MIB that units answer beside it)
    signature: [<column>, ...]       # optional: columns of which one answering with data
                                     #   proves the PDU speaks this MIB (detection probes them
                                     #   in one GETBULK of one row each); default: every value
                                     #   column of the profile (unit and outlets)
    identity:                        # model / firmware / serial, each optional
      model:                         # one source, or a list tried in order (first non-empty)
        oid: 1.3.6.1.4.1.318.1.1.26.2.1.8      # a column: the value of its first row ...
        instance: "0"                # ... or, with instance, exactly OID.instance (a scalar GET)
    unit:                            # unit-level values, each optional: a UnitMetric
      power_watts | energy_joules | current_amperes | voltage_volts:
        oid: <column or scalar base>
        instance: "0"                # a scalar: read OID.instance; otherwise a table column:
        aggregate: first | sum       #   first row (the unit's own row) or the sum over rows
        suffix: "5"                  #   only rows whose index ends in .5 (e.g. Raritan sensorType)
        where: [<condition>, ...]    #   only rows where every condition holds (e.g. no neutral)
        fallback: <UnitMetric>       # read instead when this one is absent, noSuchObject or
                                     #   below invalid_below (the MIB's "unsupported", -1)
        <metric fields, below>
    tables: {<entry OID>: <columns>} # optional: a table entry's highest column number, from the
                                     #   MIB; lets walk_roots() walk the whole entry when most of
                                     #   its columns are needed (never without this hint)
    outlets:                         # optional; absent = the profile meters no outlets
      index_from: <column>           # its rows (and the value columns' rows) are the outlets;
                                     #   OutletReading.index = row index
      index: [unit, outlet]          # names of the row-index arcs (other arc counts: ignored)
      name: [<column>, ...]          # tried in order; first non-empty string wins, else the index
                                     #   (optional columns: absent ones are skipped)
      skip_if: [<condition>, ...]    # any holds: the row is padding, not an outlet (not counted)
      metered_if: [<condition>, ...] # none holds: the PDU does not meter its outlets; every
                                     #   outlet value is "unavailable" (empty: always metered)
      power_watts | current_amperes | voltage_volts | energy_joules: <Metric>
      apparent_power_voltamperes: <Metric>   # VA, where the MIB meters no watts
      fallback: <outlets>            # another generation's table, read when this one has no row
      state: {oid: <column>, on_states: [1], off_states: [2]}   # switched on/off (optional;
                                     #   its rows are outlets too, with a state only)
    banks | phases: <outlets>        # optional, same shape: what `feeds:` maps (row = number)
      number: <column>               # the bank/phase number the MIB states, used as the index
                                     #   when every row has a distinct one
    oems: [{name, vendor, mib, enterprise, sys_object_ids}]   # the MIB under an OEM's number

    Metric fields (SI value = raw / 10**digits * scale):
      oid: <column>                  # for outlets: read OID.<row index>[.<suffix>]
      suffix: "1"                    # extra index arcs after the row index (Raritan sensorType)
      scale: 0.1                     # multiplier to SI: 0.1 tenths, 0.001 milli, 3600 Wh->J,
                                     #   3.6e6 kWh->J, 360000 tenths of kWh->J
      digits_oid: <column>           # decimal digits per value at the same index (Raritan);
                                     #   optional: an absent digits value means 0
      state_oid: <column>            # a state at the same index that must be in valid_states,
      valid_states: [4]              #   else the value is "unavailable" (Raritan, Sentry4,
                                     #   Avocent); optional: an absent state means "unknown",
                                     #   and the value counts
      invalid_below: 0               # raw values below this are "negative" (-1 = unsupported)
      zero_invalid: false            # raw 0 means "not supported" (only where the MIB says so)
      max: 9998999                   # raw upper bound, inclusive; above it: "out_of_range"
      text: false                    # a DisplayString holding a decimal ("0.61"); other text:
                                     #   "unavailable"

    Condition (exactly one subject, exactly one test):
      oid: <column>                  # the value at this column and the row's index ...
      instance: "0"                  # ... or exactly OID.instance (a device-level scalar)
      index_arc: 3                   # ... or arc N (1-based; negative counts from the end) of
                                     #   the row index itself
      in: [0] | not_in: [2] | gt | ge | lt | le: <number> | empty: true
      or_absent: true                # the test also holds when the value is absent
      fallback: <condition>          # tested instead when the value is absent
      # A condition on an absent value is false, except `empty: true`, `or_absent` and what
      # its `fallback` says.

Required and optional columns: only the value columns (``oid`` of each metric) are required;
names, labels, decimal digits and states are optional (``Profile.columns_doc()`` lists both, and
``exporters/pdu/profiles/README.md`` shows them per profile).

Polling: ``Profile.walk_roots()`` lists the subtrees to walk (GETBULK) and ``Profile.scalar_oids()``
the instances to GET; together they cover every OID the decoder reads.

Files are read by the one YAML loader (``collector.site.profiles.load_profiles``, through
``collector.config.load_model``); this module holds the data contract only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from exporters.snmp.oid import normalize_oid, oid_arcs, under
from exporters.strict import Strict

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"  # the built-in profiles


def _index(value: Any) -> str:
    """An index or suffix: dotted decimal arcs (no leading dot)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return normalize_oid(value)


Oid = Annotated[str, BeforeValidator(normalize_oid)]
Index = Annotated[str, BeforeValidator(_index)]


class Condition(Strict):
    """A test on one value: a column at the row's index, a scalar instance, or an index arc."""

    oid: Oid | None = None
    instance: Index | None = None
    index_arc: int | None = None
    in_: list[int | str] | None = Field(default=None, alias="in")
    not_in: list[int | str] | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    empty: Literal[True] | None = None
    # The test also holds when the value is absent (not in the walk, noSuchObject): for a
    # helper column that some models of the MIB do not implement (CyberPower PDU81005 has no
    # ePDULoadDevNumPhases), where "absent" must mean the common case rather than "no".
    or_absent: bool = False
    # Tested instead when this value is absent: the next helper column that says the same
    # (CyberPower's ePDU metered-outlet count, else its ePDU2 one), before `or_absent`.
    fallback: Condition | None = None

    @model_validator(mode="after")
    def _one_subject_one_test(self) -> Condition:
        if (self.oid is None) == (self.index_arc is None):
            raise ValueError("give exactly one of 'oid' or 'index_arc'")
        if self.instance is not None and self.oid is None:
            raise ValueError("'instance' needs 'oid'")
        if self.index_arc == 0:
            raise ValueError("'index_arc' counts from 1 (or from -1 at the end)")
        tests = [self.in_, self.not_in, self.gt, self.ge, self.lt, self.le, self.empty]
        if sum(t is not None for t in tests) != 1:
            raise ValueError("give exactly one test: in, not_in, gt, ge, lt, le or empty")
        if self.index_arc is not None and (self.empty is not None or self.or_absent):
            raise ValueError("'empty' and 'or_absent' test a value, not an index arc")
        return self

    def columns(self) -> list[str]:
        """The table columns this condition (and its fallback) reads at a row index."""
        own = [self.oid] if self.oid is not None and self.instance is None else []
        return own + (self.fallback.columns() if self.fallback is not None else [])

    def scalars(self) -> list[str]:
        """The scalar instances this condition (and its fallback) GETs."""
        own = []
        if self.oid is not None and self.instance is not None:
            own = [f"{self.oid}.{self.instance}"]
        return own + (self.fallback.scalars() if self.fallback is not None else [])


class Metric(Strict):
    """How to turn one raw SNMP integer into an SI value, and when it is not a reading."""

    oid: Oid
    suffix: Index | None = None
    scale: float = 1.0
    digits_oid: Oid | None = None
    state_oid: Oid | None = None
    valid_states: list[int] | None = None
    invalid_below: float = 0
    zero_invalid: bool = False
    max: float | None = None
    # The MIB gives the value as a DisplayString holding a decimal number ("0.61"; ATEN's
    # ATEN-PE-CFG-STR); any other text ("N/A", "not-support") is no reading.
    text: bool = False

    @model_validator(mode="after")
    def _state_pairs(self) -> Metric:
        if (self.state_oid is None) != (self.valid_states is None):
            raise ValueError("'state_oid' and 'valid_states' go together")
        if self.valid_states is not None and not self.valid_states:
            raise ValueError("'valid_states' must not be empty")
        if self.scale <= 0:
            raise ValueError("'scale' must be positive")
        return self

    def columns(self) -> list[str]:
        """Every column this metric reads (value, digits, state)."""
        return [c for c in (self.oid, self.digits_oid, self.state_oid) if c is not None]


class UnitMetric(Metric):
    """A unit-level value: a scalar instance, or the first row / sum of a table column."""

    instance: Index | None = None
    aggregate: Literal["first", "sum"] | None = None
    where: list[Condition] = Field(default_factory=list)
    fallback: UnitMetric | None = None

    @model_validator(mode="after")
    def _scalar_or_table(self) -> UnitMetric:
        if self.instance is not None:
            if self.aggregate is not None or self.where or self.suffix is not None:
                raise ValueError("'instance' (a scalar) excludes 'aggregate', 'where', 'suffix'")
        elif self.aggregate is None:
            raise ValueError("give 'instance' (a scalar) or 'aggregate' (first or sum)")
        return self

    def columns(self) -> list[str]:
        """Every column this metric (and its fallback) walks."""
        cols = [] if self.instance is not None else super().columns()
        for cond in self.where:
            cols += cond.columns()
        if self.fallback is not None:
            cols += self.fallback.columns()
        return cols

    def scalars(self) -> list[str]:
        """Every instance this metric (and its fallback) GETs."""
        out = []
        if self.instance is not None:
            out = [f"{c}.{self.instance}" for c in super().columns()]
        for cond in self.where:
            out += cond.scalars()
        if self.fallback is not None:
            out += self.fallback.scalars()
        return out


class Source(Strict):
    """Where an identity string comes from: OID.instance, or the first row of a column."""

    oid: Oid
    instance: Index | None = None


def _sources(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


Sources = Annotated[list[Source], BeforeValidator(_sources)]


class Identity(Strict):
    """The model / firmware / serial sources; each a source or a list tried in order."""

    model: Sources = Field(default_factory=list)
    firmware: Sources = Field(default_factory=list)
    serial: Sources = Field(default_factory=list)

    def sources(self) -> Iterator[Source]:
        """Every source of every field."""
        yield from (*self.model, *self.firmware, *self.serial)


UNIT_FIELDS = ("power_watts", "energy_joules", "current_amperes", "voltage_volts")
# apparent_power_voltamperes: what a MIB meters in VA (Chatsworth eConnect), exported under
# its own name, never as watts.
OUTLET_FIELDS = (
    "power_watts",
    "current_amperes",
    "voltage_volts",
    "energy_joules",
    "apparent_power_voltamperes",
)


class Unit(Strict):
    """Unit-level values; a missing key means the MIB (or this profile) offers no such value."""

    power_watts: UnitMetric | None = None
    energy_joules: UnitMetric | None = None
    current_amperes: UnitMetric | None = None
    voltage_volts: UnitMetric | None = None

    def metrics(self) -> Iterator[tuple[str, UnitMetric]]:
        """(field, spec) for every configured value."""
        for f in UNIT_FIELDS:
            spec = getattr(self, f)
            if spec is not None:
                yield f, spec


class SwitchState(Strict):
    """An outlet's switched state: a column whose values say on or off (each MIB numbers them
    its own way: PowerNet-MIB's rPDU has on(1) off(2), its rPDU2 off(1) on(2))."""

    oid: Oid
    # not `on`/`off`: YAML 1.1 reads those keys as booleans
    on_states: list[int] = Field(min_length=1)
    off_states: list[int] = Field(min_length=1)

    @model_validator(mode="after")
    def _apart(self) -> SwitchState:
        if set(self.on_states) & set(self.off_states):
            raise ValueError("a state cannot be in both 'on_states' and 'off_states'")
        return self


class Outlets(Strict):
    """The outlet table: which rows are outlets, their names, and the per-outlet values."""

    index_from: Oid
    index: list[str] = Field(min_length=1)
    name: list[Oid] = Field(default_factory=list)
    # The row's bank or phase number as the MIB states it (rPDULoadStatusPhaseNumber): the
    # label and feed index instead of the row index, where the MIB's rows are not numbered
    # by it (rPDU's one table holds phase rows and bank rows). Used only when every row
    # has a distinct number (a daisy chain repeats them per unit: then the row indices).
    number: Oid | None = None
    # The outlet's switched state (on/off), optional: an absent column or row is no series
    # and is not counted (a PDU that switches nothing has no state); a state that is
    # neither on nor off (unknown, rebooting) is no series, counted as unavailable.
    state: SwitchState | None = None
    skip_if: list[Condition] = Field(default_factory=list)
    metered_if: list[Condition] = Field(default_factory=list)
    power_watts: Metric | None = None
    current_amperes: Metric | None = None
    voltage_volts: Metric | None = None
    energy_joules: Metric | None = None
    apparent_power_voltamperes: Metric | None = None
    # Another generation of the vendor's MIB (an older or newer outlet table), read instead
    # when this table has no row: CPS-MIB's ePDU2 metered-outlet table, else its ePDU one.
    fallback: Outlets | None = None

    def metrics(self) -> Iterator[tuple[str, Metric]]:
        """(field, spec) for every configured per-outlet value."""
        for f in OUTLET_FIELDS:
            spec = getattr(self, f)
            if spec is not None:
                yield f, spec

    def chain(self) -> Iterator[Outlets]:
        """This table and its fallbacks, in the order they are tried."""
        spec: Outlets | None = self
        while spec is not None:
            yield spec
            spec = spec.fallback

    def columns(self) -> list[str]:
        """Every column the outlet decoding walks (fallback tables included)."""
        cols: list[str] = []
        for spec in self.chain():
            cols += [spec.index_from, *spec.name]
            if spec.number is not None:
                cols.append(spec.number)
            if spec.state is not None:
                cols.append(spec.state.oid)
            for cond in (*spec.skip_if, *spec.metered_if):
                cols += cond.columns()
            for _, metric in spec.metrics():
                cols += metric.columns()
        return cols

    def scalars(self) -> list[str]:
        """Every instance the outlet decoding GETs (device-level conditions)."""
        return [
            s
            for spec in self.chain()
            for cond in (*spec.skip_if, *spec.metered_if)
            for s in cond.scalars()
        ]


_ENTERPRISES = "1.3.6.1.4.1."


def enterprise_of(oid: str) -> str | None:
    """The enterprise arc of an OID under enterprises (1.3.6.1.4.1.N), else None."""
    if not oid.startswith(_ENTERPRISES):
        return None
    rest = oid[len(_ENTERPRISES) :].split(".", 1)[0]
    return _ENTERPRISES + rest if rest.isdigit() else None


def _rebase(data: Any, old: str, new: str) -> Any:
    """data with every OID under old (an enterprise) moved under new, keys included."""
    if isinstance(data, str):
        return new + data[len(old) :] if data == old or data.startswith(old + ".") else data
    if isinstance(data, list):
        return [_rebase(x, old, new) for x in data]
    if isinstance(data, dict):
        return {_rebase(k, old, new): _rebase(v, old, new) for k, v in data.items()}
    return data


class Oem(Strict):
    """The same MIB sold under another vendor's enterprise number (Schleifenbauer's databus
    MIB as Conteg's CONTEG-DATABUS-MIB): the same columns under the OEM's prefix."""

    name: str = Field(min_length=1)
    vendor: str = Field(min_length=1)
    mib: str = Field(min_length=1)
    enterprise: Oid
    sys_object_ids: list[Oid] = Field(min_length=1)

    @model_validator(mode="after")
    def _an_enterprise(self) -> Oem:
        if enterprise_of(self.enterprise) != self.enterprise:
            raise ValueError("'enterprise' must be 1.3.6.1.4.1.N")
        return self


class Profile(Strict):
    """One vendor MIB's profile: matching, identity, unit and outlet values."""

    name: str = Field(min_length=1)
    vendor: str = Field(min_length=1)
    mib: str = Field(min_length=1)
    notes: str = ""
    sys_object_ids: list[Oid] = Field(min_length=1)
    signature: list[Oid] = Field(default_factory=list)
    # Profiles of a newer generation of the same MIB that a unit may answer beside this one's
    # tables (APC Rack PDU 2G units keep the first generation's rPDU tables): where both
    # answer, they read more, so detection probes this profile after them, whatever the
    # sysObjectID says.
    probe_after: list[str] = Field(default_factory=list)
    identity: Identity = Identity()
    unit: Unit = Unit()
    outlets: Outlets | None = None
    # Banks and phases (each a table read as outlets are), for a whole bank or phase mapped
    # to one host (collector.yml `feeds:`); the row index is the bank or phase number.
    banks: Outlets | None = None
    phases: Outlets | None = None
    tables: dict[Oid, int] = Field(default_factory=dict)
    oems: list[Oem] = Field(default_factory=list)
    oem_of: str = ""  # set on an OEM's profile (oem_profiles): the profile whose MIB it is

    def enterprise(self) -> str | None:
        """The enterprise (1.3.6.1.4.1.N) the profile's MIB lives under: its first family's."""
        return enterprise_of(self.sys_object_ids[0])

    def rebased(self, enterprise: str, **fields: Any) -> Profile:
        """This MIB under another enterprise number (an OEM's), every OID moved; ``fields``
        (name, vendor, mib, sys_object_ids, notes) replace this profile's."""
        own = self.enterprise()
        if own is None:
            raise ValueError(f"profile {self.name} has no enterprise to move")
        data = _rebase(self.model_dump(by_alias=True, exclude={"oems"}), own, enterprise)
        data.update(fields)
        return Profile.model_validate(data)

    def oem_profiles(self) -> list[Profile]:
        """A profile for each OEM that sells this MIB under its own enterprise number."""
        return [
            self.rebased(
                o.enterprise,
                name=o.name,
                vendor=o.vendor,
                mib=o.mib,
                sys_object_ids=o.sys_object_ids,
                notes=f"{self.mib} ({self.vendor}) under {o.vendor}'s enterprise number",
                oem_of=self.name,
            )
            for o in self.oems
        ]

    @model_validator(mode="after")
    def _tables_cover_columns(self) -> Profile:
        cols, _ = self._needs()
        for entry, width in self.tables.items():
            if width < 1:
                raise ValueError(f"tables: {entry} must have at least one column")
            for col in cols:
                parent, _, last = col.rpartition(".")
                if parent == entry and int(last) > width:
                    raise ValueError(f"tables: {entry} has {width} columns but {col} is used")
        return self

    def _needs(self) -> tuple[set[str], set[str]]:
        cols: set[str] = set()
        scalars: set[str] = set()
        for src in self.identity.sources():
            if src.instance is None:
                cols.add(src.oid)
            else:
                scalars.add(f"{src.oid}.{src.instance}")
        for _, spec in self.unit.metrics():
            cols.update(spec.columns())
            scalars.update(spec.scalars())
        for table in (self.outlets, self.banks, self.phases):
            if table is not None:
                cols.update(table.columns())
                scalars.update(table.scalars())
        return cols, scalars

    def signature_columns(self) -> list[str]:
        """The columns detection probes (one request): ``signature``, else every value column."""
        if self.signature:
            return list(self.signature)
        required, _ = self.columns_doc()
        if required:
            return required
        return [src.oid for src in self.identity.sources()][:1] or self.sys_object_ids[:1]

    def columns_doc(self) -> tuple[list[str], list[str]]:
        """(required, optional) columns: the value columns; names, digits, states, conditions."""
        required: list[str] = []
        for _, unit_spec in self.unit.metrics():
            spec: Metric | None = unit_spec
            while spec is not None:
                required.append(spec.oid)
                spec = spec.fallback if isinstance(spec, UnitMetric) else None
        for table in (self.outlets, self.banks, self.phases):
            if table is not None:
                required += [m.oid for spec in table.chain() for _, m in spec.metrics()]
        cols, _ = self._needs()
        everything = [*cols, *(s.oid for s in self.identity.sources())]
        req = sorted(set(required), key=oid_arcs)
        opt = sorted(set(everything) - set(req), key=oid_arcs)
        return req, opt

    def walk_roots(self) -> list[str]:
        """The subtrees to walk: each needed column, or its table entry where that is cheap.

        A table's columns collapse into its entry only when ``tables`` gives the entry's width
        and at least half of its columns are needed, so the walk reads at most twice what the
        decoder uses; without that hint each column is walked on its own, never pulling in
        unrelated columns.
        """
        cols, _ = self._needs()
        by_entry: dict[str, list[int]] = {}
        for col in cols:
            entry, _, last = col.rpartition(".")
            by_entry.setdefault(entry, []).append(int(last))
        roots: set[str] = set()
        for entry, nums in by_entry.items():
            width = self.tables.get(entry)
            if width is not None and len(nums) >= 2 and 2 * len(nums) >= width:
                roots.add(entry)
            else:
                roots.update(f"{entry}.{n}" for n in nums)
        return _minimal(roots)

    def scalar_oids(self) -> list[str]:
        """The instances to GET: scalars the walk roots do not already cover."""
        _, scalars = self._needs()
        roots = self.walk_roots()
        keep = {s for s in scalars if not any(under(s, r) for r in roots)}
        return sorted(keep, key=oid_arcs)


def _minimal(roots: Iterable[str]) -> list[str]:
    """Drop roots lying under another root; numeric order."""
    ordered = sorted(set(roots), key=oid_arcs)
    out: list[str] = []
    for r in ordered:
        if not any(under(r, kept) for kept in out):
            out.append(r)
    return out
