"""Which profile reads a PDU: its sysObjectID's product family, confirmed or found by probing.

A site buys whatever PDU was cheapest that year, so detection must not depend on the exact
model. Profiles list their vendor's product-OID *families* (prefixes), and their signature
columns (``Profile.signature_columns``: by default every value column). Detection:

1. reads sysObjectID.0 (absent, malformed or generic ones are common on embedded agents:
   several PDUs report net-snmp's own 1.3.6.1.4.1.8072.3.2.10);
2. probes the profiles whose family holds it, longest prefix first: one GETBULK asking for
   the first row of each signature column; the first profile with data in any wins;
3. otherwise probes every other profile the same way, those of the sysObjectID's enterprise
   first, then by name;
4. when no probe answers and the sysObjectID names an enterprise no profile lives under,
   every profile's MIB moved under that enterprise is probed the same way: a MIB sold under
   an OEM's enterprise number (Schleifenbauer's databus MIB as Conteg's) is recognised by its
   shape, the signature columns under the OEM's prefix, not by one enterprise number;
5. else there is no profile (``no_profile``), even when the sysObjectID is in a profile's
   family: a vendor's product tree spans UPSes, cooling units and sensors as well as PDUs
   (Liebert's agents report the bare ``.476.1.42`` for all of them, Geist's sensors sit in its
   PDUs' ``.21239.42``), so a family says which profile to try first, never that the device is
   a PDU that profile reads (issue 32: such devices were "up" with nothing in them). A PDU
   metering nothing right now still has its table rows (a 0 is data); no rows is no PDU of
   this MIB. ``shapes()`` then says which known MIB shapes the PDU answers in
   part and which signature columns it lacks (``wattbit pdu detect``), so a user can file a
   useful request.

``why`` says which of these chose the profile, for the log and ``wattbit pdu detect``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporters.snmp.client import SnmpClient, SnmpError, Target
from exporters.snmp.oid import normalize_oid, oid_arcs, under
from exporters.snmp.types import EXCEPTIONS, Walk

from .profile import Profile, enterprise_of

SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"
# net-snmp's enterprise: its generic sysObjectID (.8072.3.2.10) names the agent software, not
# an OEM whose enterprise a vendor's MIB could be moved under.
_NET_SNMP = "1.3.6.1.4.1.8072"
_ENTERPRISES = (1, 3, 6, 1, 4, 1)


class NoProfile(Exception):
    """No profile's signature columns answer (whatever family the sysObjectID is in)."""


@dataclass(frozen=True)
class Detection:
    """The profile chosen for one PDU, and why."""

    profile: Profile
    sys_object_id: str  # "" when absent or malformed
    why: str


def _enterprise(oid: str) -> tuple[int, ...] | None:
    arcs = oid_arcs(oid)
    if arcs[: len(_ENTERPRISES)] == _ENTERPRISES and len(arcs) > len(_ENTERPRISES):
        return arcs[: len(_ENTERPRISES) + 1]
    return None


def family_matches(profiles: Sequence[Profile], sys_object_id: str) -> list[Profile]:
    """Profiles whose product family holds sys_object_id, longest prefix first, then by name."""
    if not sys_object_id:
        return []
    scored: list[tuple[int, str, Profile]] = []
    for p in profiles:
        best = max(
            (len(oid_arcs(pre)) for pre in p.sys_object_ids if under(sys_object_id, pre)),
            default=0,
        )
        if best:
            scored.append((-best, p.name, p))
    return [p for _, _, p in sorted(scored, key=lambda x: (x[0], x[1]))]


def probe_order(profiles: Sequence[Profile], sys_object_id: str) -> list[Profile]:
    """Every profile in the order detection probes them."""
    first = family_matches(profiles, sys_object_id)
    ent = _enterprise(sys_object_id) if sys_object_id else None

    def same_vendor(p: Profile) -> bool:
        return ent is not None and any(_enterprise(pre) == ent for pre in p.sys_object_ids)

    rest = sorted(
        (p for p in profiles if p not in first), key=lambda p: (not same_vendor(p), p.name)
    )
    return _after_newer(first + rest)


def _after_newer(order: list[Profile]) -> list[Profile]:
    """order with each profile moved behind the profiles its ``probe_after`` names (a newer
    generation of its MIB that reads more where a unit answers both)."""
    out = list(order)
    for p in order:
        names = set(p.probe_after)
        last = max((i for i, q in enumerate(out) if q.name in names), default=-1)
        here = out.index(p)
        if last > here:
            out.insert(last, out.pop(here))
    return out


def sys_object_id_of(value: object) -> str:
    """A well-formed sysObjectID in dotted form, else "" (absent, a string, garbage)."""
    if not isinstance(value, str):
        return ""
    try:
        oid = normalize_oid(value)
    except ValueError:
        return ""
    return oid if len(oid_arcs(oid)) >= 2 else ""


async def answers(client: SnmpClient, target: Target, columns: list[str]) -> bool:
    """Whether the agent has data under any of columns (a timeout is raised: no PDU there)."""
    try:
        return bool(await client.first_rows(target, columns))
    except SnmpError as exc:
        if exc.reason in ("timeout", "refused", "auth"):
            raise
        return False  # an error-status or an odd answer to this one request: not this MIB


def _chosen(p: Profile, family: list[Profile], shown: str) -> str:
    if p in family:
        return f"sysObjectID {shown} is in its product family; its signature columns answer"
    if (family and family[0].name in p.probe_after) or (family and p.name in family[0].probe_after):
        return (
            f"sysObjectID {shown} is in the family of {family[0].name}, an older generation "
            "of this profile's MIB probed after it; this profile's signature columns answer"
        )
    if family:
        return (
            f"sysObjectID {shown} is in the family of {family[0].name}, whose signature columns "
            "are empty; this profile's answer"
        )
    return f"sysObjectID {shown} is in no profile's family; its signature columns answer"


def _unanswered(family: list[Profile], oid: str) -> NoProfile:
    shown = oid or "(none usable)"
    if family:
        # A family is where to look first, not proof: the vendor's other products (UPSes,
        # cooling, sensors) report the same prefix and have none of the PDU tables.
        return NoProfile(
            f"sysObjectID {shown} is in the product family of {family[0].name}, but neither "
            "its signature columns nor any other profile's answer: not a PDU any profile reads"
        )
    return NoProfile(f"no profile knows sysObjectID {shown} and no profile's signature answers")


def oem_candidates(profiles: Sequence[Profile], sys_object_id: str) -> list[Profile]:
    """Every profile's MIB moved under the sysObjectID's enterprise, when no profile lives
    there (an OEM's agent): ``name@N``, vendor "<vendor> MIB (enterprise N)"."""
    ent = enterprise_of(sys_object_id) if sys_object_id else None
    if ent is None or ent == _NET_SNMP or any(p.enterprise() == ent for p in profiles):
        return []
    number = ent.rsplit(".", 1)[1]
    out = []
    for p in profiles:
        if p.enterprise() is None or p.oem_of:
            continue  # an OEM's copy of a MIB: its original is moved instead
        out.append(
            p.rebased(
                ent,
                name=f"{p.name}@{number}",
                vendor=f"{p.vendor} MIB (enterprise {number})",
                sys_object_ids=[ent],
                oem_of=p.name,
            )
        )
    return out


def _oem_why(p: Profile, shown: str) -> str:
    return (
        f"sysObjectID {shown} is in no profile's family and no profile lives under its "
        f"enterprise; {p.name.split('@')[0]}'s MIB answers there by its signature columns "
        "(an OEM's agent)"
    )


async def detect(client: SnmpClient, target: Target, profiles: Sequence[Profile]) -> Detection:
    """Choose the profile for the PDU at target (see the module docstring)."""
    got = await client.get(target, [SYS_OBJECT_ID])
    value = got.get(SYS_OBJECT_ID)
    oid = sys_object_id_of(value.value if value is not None else None)
    family = family_matches(profiles, oid)
    for p in probe_order(profiles, oid):
        if await answers(client, target, p.signature_columns()):
            return Detection(p, oid, _chosen(p, family, oid or "(none usable)"))
    if not family:
        for p in oem_candidates(profiles, oid):
            if await answers(client, target, p.signature_columns()):
                return Detection(p, oid, _oem_why(p, oid))
    raise _unanswered(family, oid)


@dataclass(frozen=True)
class Shape:
    """How much of one known MIB shape a PDU answers: what a request for it would need."""

    profile: Profile
    answered: tuple[str, ...]  # columns of the profile with data on this PDU
    lacking: tuple[str, ...]  # its signature columns without data (all of them: undetected)
    same_enterprise: bool  # the sysObjectID's enterprise is the profile's own


def _shapes(
    profiles: Sequence[Profile], sys_object_id: str, found: dict[str, set[str]]
) -> list[Shape]:
    ent = enterprise_of(sys_object_id) if sys_object_id else None
    out = []
    for p in profiles:
        answered = found.get(p.name, set())
        # An OEM candidate (name@N) lives under the PDU's enterprise by construction: only
        # what it answers counts.
        same = ent is not None and p.enterprise() == ent and "@" not in p.name
        if not answered and not same:
            continue
        required, optional = p.columns_doc()
        cols = [c for c in (*required, *optional) if c in answered]
        lacking = [c for c in p.signature_columns() if c not in answered]
        out.append(Shape(p, tuple(cols), tuple(lacking), same))
    return sorted(out, key=lambda s: (-len(s.answered), not s.same_enterprise, s.profile.name))


def _all_columns(p: Profile) -> list[str]:
    required, optional = p.columns_doc()
    return [*required, *optional]


async def shapes(
    client: SnmpClient, target: Target, profiles: Sequence[Profile], sys_object_id: str
) -> list[Shape]:
    """The known MIB shapes (profiles, and theirs under the PDU's own enterprise) the PDU
    answers in part, most answered columns first, or whose enterprise it shares: one GETBULK
    of one row per column, per profile (only when no profile reads the PDU)."""
    candidates = [*profiles, *oem_candidates(profiles, sys_object_id)]
    found: dict[str, set[str]] = {}
    for p in candidates:
        cols = _all_columns(p)
        got: set[str] = set()
        for i in range(0, len(cols), 32):  # a few dozen var-binds per request at most
            try:
                got |= set(await client.first_rows(target, cols[i : i + 32]))
            except SnmpError as exc:
                if exc.reason in ("timeout", "refused", "auth"):
                    raise
        found[p.name] = got
    return _shapes(candidates, sys_object_id, found)


def shapes_in_walk(profiles: Sequence[Profile], walk: Walk) -> list[Shape]:
    """``shapes()`` over a whole walk (a recording) instead of a live agent."""
    value = walk.get(SYS_OBJECT_ID)
    oid = sys_object_id_of(value.value if value is not None else None)
    candidates = [*profiles, *oem_candidates(profiles, oid)]
    present = [o for o, v in walk.items() if v.type not in EXCEPTIONS]
    found = {
        p.name: {c for c in _all_columns(p) if any(under(o, c) and o != c for o in present)}
        for p in candidates
    }
    return _shapes(candidates, oid, found)


def detect_in_walk(profiles: Sequence[Profile], walk: Walk) -> Detection:
    """The same choice made over a whole walk (a recording) instead of a live agent."""
    value = walk.get(SYS_OBJECT_ID)
    oid = sys_object_id_of(value.value if value is not None else None)
    family = family_matches(profiles, oid)

    def answered(p: Profile) -> bool:
        columns = p.signature_columns()
        return any(
            v.type not in EXCEPTIONS and any(under(o, c) and o != c for c in columns)
            for o, v in walk.items()
        )

    for p in probe_order(profiles, oid):
        if answered(p):
            return Detection(p, oid, _chosen(p, family, oid or "(none usable)"))
    if not family:
        for p in oem_candidates(profiles, oid):
            if answered(p):
                return Detection(p, oid, _oem_why(p, oid))
    raise _unanswered(family, oid)
