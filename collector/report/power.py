"""Where each host's energy comes from, the BMC against the PDU, and RAPL's share: pure.

A host's power can be metered by its PDU outlets, by a whole PDU, bank or phase mapped to it,
or by its BMC (Redfish or IPMI); the report, like the rules (docs/rules.md, "Host power and its
source"), takes **one** per host, the first of :data:`ORDER` it has, and says which. RAPL (the
CPU packages and DRAM, from the agent) is never a host's energy: it is given as a share of it.
Where a host has both a PDU's meter and a BMC, both energies over the window are set side by
side (the reconciliation); docs/report.md describes the JSON.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .series import RAPL_ENERGY, Outlet, Track

ORDER = ("outlets", "pdu", "redfish", "ipmi")  # the first a host has is its energy
PDU_KINDS = ("outlets", "pdu")
BMC_KINDS = ("redfish", "ipmi")
RAPL_ZONES = ("package", "dram")  # core/uncore are inside the package, psys contains both
# WattbitPowerSourcesDisagree's thresholds (alerts/wattbit-alerts.yml): beyond both.
DISAGREE_RATIO = 0.10
DISAGREE_WATTS = 20.0

Json = dict[str, object]


def _first(kinds: Iterable[str], order: tuple[str, ...]) -> str | None:
    have = set(kinds)
    return next((k for k in order if k in have), None)


def host_meters(meters: list[Outlet], host: str) -> tuple[str | None, list[Outlet]]:
    """The kind that meters ``host`` and its meters of that kind (``(None, [])``: none)."""
    mine = [m for m in meters if m.host == host]
    kind = _first((m.kind for m in mine), ORDER)
    return kind, [m for m in mine if m.kind == kind]


def _pdus_with_outlets(meters: list[Outlet]) -> set[str]:
    return {m.labels.get("pdu", "") for m in meters if m.kind == "outlets"}


def site_meters(meters: list[Outlet]) -> list[Outlet]:
    """What the site's energy is the sum of, each watt once.

    Every outlet (mapped or not, as before); a PDU, bank or phase whose PDU has no outlet
    meters (a PDU that meters its outlets would count them twice); a BMC only for a host that
    no PDU meters, and of a host's BMCs only those of its first protocol.
    """
    with_outlets = _pdus_with_outlets(meters)
    pdu_hosts = {m.host for m in meters if m.kind in PDU_KINDS and m.host}
    out = [
        m
        for m in meters
        if m.kind == "outlets" or (m.kind == "pdu" and m.labels.get("pdu", "") not in with_outlets)
    ]
    bmc_by_host: dict[str, list[Outlet]] = defaultdict(list)
    for m in meters:
        if m.kind in BMC_KINDS and m.host and m.host not in pdu_hosts:
            bmc_by_host[m.host].append(m)
    for ms in bmc_by_host.values():
        kind = _first((m.kind for m in ms), BMC_KINDS)
        out += [m for m in ms if m.kind == kind]
    return out


def component_meters(meters: list[Outlet]) -> list[Outlet]:
    """What components are made of: outlets, and PDUs/banks/phases of PDUs without outlet
    meters (as the rules: a BMC would count a server's outlet twice)."""
    with_outlets = _pdus_with_outlets(meters)
    return [
        m
        for m in meters
        if m.kind == "outlets" or (m.kind == "pdu" and m.labels.get("pdu", "") not in with_outlets)
    ]


@dataclass(frozen=True)
class SourceEnergy:
    """One source's meters of a host and their energy over the window."""

    meters: list[str]
    energy_joules: float | None
    watts_mean: float | None

    def to_json(self) -> Json:
        """One entry of a host's ``sources``."""
        return {
            "meters": list(self.meters),
            "energy_joules": self.energy_joules,
            "watts_mean": self.watts_mean,
        }


@dataclass(frozen=True)
class Reconciliation:
    """A host's PDU and BMC energies over the window, side by side."""

    pdu_source: str  # outlets | pdu
    bmc_source: str  # redfish | ipmi
    pdu_watts_mean: float
    bmc_watts_mean: float
    difference_watts: float  # BMC minus PDU
    ratio: float | None  # BMC over PDU; None when the PDU read 0
    disagree: bool  # beyond WattbitPowerSourcesDisagree's 10 % and 20 W

    def to_json(self) -> Json:
        """A host's ``reconciliation``."""
        return {
            "pdu_source": self.pdu_source,
            "bmc_source": self.bmc_source,
            "pdu_watts_mean": self.pdu_watts_mean,
            "bmc_watts_mean": self.bmc_watts_mean,
            "difference_watts": self.difference_watts,
            "ratio": self.ratio,
            "disagree": self.disagree,
        }


@dataclass(frozen=True)
class Rapl:
    """The host's CPU packages and DRAM over the window, from RAPL."""

    zones: list[str]  # "package/0", "dram/0", ...
    energy_joules: float
    watts_mean: float
    share: float | None  # of the host's energy; None without it

    def to_json(self) -> Json:
        """A host's ``rapl``."""
        return {
            "zones": list(self.zones),
            "energy_joules": self.energy_joules,
            "watts_mean": self.watts_mean,
            "share": self.share,
        }


@dataclass(frozen=True)
class HostPower:
    """Where a host's energy came from, every source it has, and how they compare."""

    source: str | None  # the kind its energy is from (ORDER), None without any
    sources: dict[str, SourceEnergy] = field(default_factory=dict)
    reconciliation: Reconciliation | None = None
    rapl: Rapl | None = None

    def to_json(self) -> Json:
        """The host's object in ``power``."""
        return {
            "source": self.source,
            "sources": {k: v.to_json() for k, v in self.sources.items()},
            "reconciliation": self.reconciliation.to_json() if self.reconciliation else None,
            "rapl": self.rapl.to_json() if self.rapl else None,
        }


def _energy(meters: list[Outlet], joules: dict[Outlet, float | None]) -> float | None:
    values = [joules.get(m) for m in meters]
    if not values or all(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


def _reconcile(sources: dict[str, SourceEnergy]) -> Reconciliation | None:
    pdu = _first(sources, PDU_KINDS)
    bmc = _first(sources, BMC_KINDS)
    if pdu is None or bmc is None:
        return None
    p, b = sources[pdu].watts_mean, sources[bmc].watts_mean
    if p is None or b is None:
        return None
    diff = b - p
    return Reconciliation(
        pdu_source=pdu,
        bmc_source=bmc,
        pdu_watts_mean=p,
        bmc_watts_mean=b,
        difference_watts=diff,
        ratio=b / p if p > 0 else None,
        disagree=abs(diff) > DISAGREE_WATTS and abs(diff) > DISAGREE_RATIO * p,
    )


def _rapl(tracks: list[Track], duration: float, host_energy: float | None) -> Rapl | None:
    used = [t for t in tracks if t.labels.get("zone") in RAPL_ZONES and t.counter is not None]
    if not used:
        return None
    energy = math.fsum(t.total for t in used)
    return Rapl(
        zones=sorted(f"{t.labels.get('zone')}/{t.labels.get('package', '')}" for t in used),
        energy_joules=energy,
        watts_mean=energy / duration,
        share=energy / host_energy if host_energy else None,
    )


def host_power(
    hosts: list[str],
    meters: list[Outlet],
    tracks: list[Track],
    joules: dict[Outlet, float | None],
    duration: float,
) -> dict[str, HostPower]:
    """Every host's power sources over a window of ``duration`` seconds (pure)."""
    rapl_by_host: dict[str, list[Track]] = defaultdict(list)
    for t in tracks:
        if t.metric == RAPL_ENERGY and t.host:
            rapl_by_host[t.host].append(t)
    out: dict[str, HostPower] = {}
    for h in sorted(set(hosts) | set(rapl_by_host)):
        mine = [m for m in meters if m.host == h]
        sources: dict[str, SourceEnergy] = {}
        for kind in ORDER:
            ms = [m for m in mine if m.kind == kind]
            if ms:
                e = _energy(ms, joules)
                sources[kind] = SourceEnergy(
                    [m.name for m in ms], e, e / duration if e is not None else None
                )
        source = _first(sources, ORDER)
        energy = sources[source].energy_joules if source else None
        out[h] = HostPower(
            source=source,
            sources=sources,
            reconciliation=_reconcile(sources),
            rapl=_rapl(rapl_by_host.get(h, []), duration, energy),
        )
    return out


def warnings(power: dict[str, HostPower]) -> list[str]:
    """A warning per host whose BMC and PDU disagree beyond the alert's thresholds."""
    out = []
    for h, p in power.items():
        r = p.reconciliation
        if r is not None and r.disagree:
            ratio = f", BMC/PDU {r.ratio:.2f}" if r.ratio is not None else ""
            out.append(
                f"host {h}: its {r.bmc_source} BMC ({r.bmc_watts_mean:.0f} W) and its PDU's "
                f"{r.pdu_source} ({r.pdu_watts_mean:.0f} W) disagree by "
                f"{r.difference_watts:+.0f} W{ratio}; its energy is the PDU's "
                "(docs/alerts.md#wattbitpowersourcesdisagree)"
            )
    return out
