"""Polls every BMC on its own schedule; publishes each BMC's last completed poll.

As the PDU poller (exporters/pdu/poller.py), with the same schedule and slots
(exporters/polling.py): one loop per BMC, a semaphore bounding how many are polled at once, a
bulkhead so failing BMCs hold at most a quarter of the slots, and a deadline per poll (the
BMC's timeout budget, never more than the interval) so a slow or dead BMC cannot delay another
or overlap its own next poll. A BMC's power series vanish the moment a poll fails and return
when it answers again. An IPMI poll is one FreeIPMI process, killed if the deadline passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporters.polling import PeriodicPoller

from .ipmi import IpmiClient, IpmiTarget
from .redfish import RedfishClient, RedfishTarget
from .types import BmcError, BmcReading, ChassisPower

log = logging.getLogger(__name__)

# Every failure reason, exported at 0 from the start (docs/exporters/bmc.md "Metrics").
REDFISH_REASONS = (
    "timeout",
    "deadline",
    "refused",
    "tls",
    "auth",
    "http",
    "redirect",
    "content_type",
    "too_big",
    "too_deep",
    "garbage",
    "error",
)
IPMI_REASONS = ("timeout", "deadline", "auth", "unsupported", "garbage", "error")
INVALID_REASONS = (
    "missing",
    "null",
    "out_of_range",
    "inactive",
    "ambiguous",
    "no_meter",
    "implausible",
    "capped",
)

# (chassis Id, chassis Name) -> (host, component), or None: the chassis is not exported
Mapper = Callable[[str, str], tuple[str, str] | None]


@dataclass(frozen=True)
class BmcTarget:
    """One BMC as the poller sees it."""

    name: str
    protocol: str  # "redfish" | "ipmi"
    redfish: RedfishTarget | None = None
    ipmi: IpmiTarget | None = None
    # mapped chassis -> labels; None: the BMC's primary chassis (primary()) gets `labels`
    mapper: Mapper | None = None
    labels: tuple[str, str] = ("", "")
    deadline: float = 10.0  # the whole poll, every request of it

    def __repr__(self) -> str:
        return f"BmcTarget({self.name!r}, {self.protocol})"


@dataclass(frozen=True)
class Mapped:
    """A chassis' power with the host and component it feeds."""

    host: str
    component: str
    power: ChassisPower


@dataclass(frozen=True)
class BmcState:
    """The outcome of one BMC's last completed poll."""

    name: str
    protocol: str
    up: bool
    duration: float
    mapped: tuple[Mapped, ...] = ()
    identity: tuple[tuple[str, str], ...] = ()
    error: str = ""


def primary(chassis: Sequence[ChassisPower]) -> ChassisPower | None:
    """The chassis that stands for the server when no chassis is mapped.

    The first with a power figure that no other chassis contains (the rack-mount chassis
    rather than its board), else the first with a figure at all (a board nested in a chassis
    with no power of its own, as Intel's S2600BPB mockup has).
    """
    with_power = [c for c in chassis if c.power_watts is not None]
    for c in with_power:
        if not c.contained:
            return c
    return with_power[0] if with_power else (chassis[0] if len(chassis) == 1 else None)


@dataclass
class ChassisMap:
    """What map_chassis decided for one poll."""

    mapped: list[Mapped]
    twice: list[str]  # chassis on a host/component already taken
    nested: list[tuple[str, str]]  # (chassis, the chassis it is inside): its watts counted there


def ancestors(chassis: Sequence[ChassisPower]) -> dict[str, list[str]]:
    """Every chassis' containers, innermost first, from Links.ContainedBy and Links.Contains.

    The Chassis schema links both ways (ContainedBy on the inner chassis, Contains on the
    outer: https://redfish.dmtf.org/schemas/v1/Chassis.json); a BMC may fill only one side.
    A BMC that loops (A in B, B in A) gets each chain cut where it comes back.
    """
    parent: dict[str, str] = {}
    for c in chassis:
        if c.contained_by and c.contained_by != c.chassis:
            parent[c.chassis] = c.contained_by
    for c in chassis:
        for inner in c.contains:
            if inner != c.chassis:
                parent.setdefault(inner, c.chassis)
    out: dict[str, list[str]] = {}
    for c in chassis:
        chain: list[str] = []
        node = c.chassis
        while node in parent and parent[node] not in chain and parent[node] != c.chassis:
            node = parent[node]
            chain.append(node)
        out[c.chassis] = chain
    return out


def map_chassis(t: BmcTarget, reading: BmcReading) -> ChassisMap:
    """The exported chassis with their labels, and those left out (twice, or nested).

    A chassis inside another chassis mapped to the same host, with a power figure, is left
    out: the outer chassis' input power already includes it (an enclosure and its blades, a
    rack-mount chassis and its board), and the rules sum a host's BMC series, so exporting
    both would count its watts twice. The outermost mapped chassis with a figure stands.
    """
    if t.mapper is None:
        chosen = primary(reading.chassis)
        return ChassisMap([Mapped(t.labels[0], t.labels[1], chosen)] if chosen else [], [], [])
    labelled = [(c, t.mapper(c.chassis, c.name)) for c in reading.chassis]
    hosts_with_power = {
        (c.chassis, labels[0])
        for c, labels in labelled
        if labels is not None and c.power_watts is not None
    }
    up = ancestors(reading.chassis)
    out: list[Mapped] = []
    seen: set[tuple[str, str]] = set()
    twice: list[str] = []
    nested: list[tuple[str, str]] = []
    for c, labels in labelled:
        if labels is None:
            continue
        # An outer chassis that is also inside this one is a loop in the BMC's links: no
        # chassis of a loop hides another (each would hide the other: none exported).
        outer = next(
            (
                a
                for a in up[c.chassis]
                if (a, labels[0]) in hosts_with_power and c.chassis not in up.get(a, ())
            ),
            None,
        )
        if outer is not None and c.power_watts is not None:
            nested.append((c.chassis, outer))
            continue
        if labels in seen:  # two chassis on one host/component: the first wins, once logged
            twice.append(c.chassis)
            continue
        seen.add(labels)
        out.append(Mapped(labels[0], labels[1], c))
    return ChassisMap(out, twice, nested)


class BmcPoller(PeriodicPoller[BmcTarget, BmcState]):
    """The site collector's BMC polling loops and their results."""

    kind = "bmc"

    def __init__(
        self,
        targets: Sequence[BmcTarget],
        interval: float = 10.0,
        concurrency: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(targets, interval, concurrency, clock)
        for t in self.targets:  # every reason at 0 from the start
            for reason in REDFISH_REASONS if t.protocol == "redfish" else IPMI_REASONS:
                self.failures[(t.name, reason)] += 0
            for reason in INVALID_REASONS:
                self.invalid[(t.name, reason)] += 0
        for t in self.targets:
            if t.redfish is not None and not t.redfish.verify_tls:
                log.warning(
                    "bmc %s: TLS certificate verification is OFF (verify_tls: false): "
                    "anyone on the path can read its credentials",
                    t.name,
                )
        self._identity: dict[str, tuple[tuple[str, str], ...]] = {}
        self._logged: set[tuple[str, str]] = set()
        self._redfish: dict[str, RedfishClient] = {}
        self._ipmi: dict[str, IpmiClient] = {}

    def request_timeout(self, t: BmcTarget) -> float:
        """A silent BMC's request costs its Redfish request timeout or IPMI session timeout."""
        own = t.redfish if t.redfish is not None else t.ipmi
        return own.timeout if own is not None else 0.0

    def _once(self, name: str, what: str, msg: str, *args: object) -> None:
        if (name, what) not in self._logged:
            self._logged.add((name, what))
            log.warning(msg, *args)

    async def _read(self, t: BmcTarget, identity: bool) -> BmcReading:
        if t.protocol == "redfish":
            assert t.redfish is not None
            client = self._redfish.get(t.name)
            if client is None:
                client = self._redfish[t.name] = RedfishClient(t.redfish)
            return await client.read(identity)
        assert t.ipmi is not None
        ipmi = self._ipmi.get(t.name)
        if ipmi is None:
            ipmi = self._ipmi[t.name] = IpmiClient(t.ipmi)
        return await ipmi.read(identity)

    async def poll(self, t: BmcTarget) -> BmcState:
        """Poll one BMC once, within its deadline, and publish the outcome."""
        async with self._slot(t.name):
            start = self._clock()
            error = detail = ""
            reading: BmcReading | None = None
            # (a first attempt's is shorter: exporters/polling.py)
            deadline = self._deadline(t.name, min(t.deadline, self.interval))
            try:
                want_identity = t.name not in self._identity
                reading = await asyncio.wait_for(self._read(t, want_identity), deadline)
            except TimeoutError:
                error, detail = "deadline", f"no complete poll within {deadline:g}s"
            except BmcError as exc:
                error, detail = exc.reason, str(exc)
            except Exception as exc:  # a bug or a BMC that breaks the parser: keep polling
                error, detail = "error", type(exc).__name__
                log.debug("bmc %s", t.name, exc_info=True)
            duration = self._clock() - start
        # A failed poll keeps its client: its session stays (a new login per failed poll
        # leaked sessions, issue 34), and a half-read answer's connection is closed by
        # aiohttp when the request is cancelled, never reused.
        mapped: list[Mapped] = []
        if error:
            self._failed(t.name, error, detail)
            self._identity.pop(t.name, None)  # the BMC may have been swapped
        else:
            assert reading is not None
            self._answered(t.name)
            if reading.identity or t.name not in self._identity:
                self._identity[t.name] = tuple(sorted(reading.identity.items()))
            for reason, n in reading.invalid.items():
                self.invalid[(t.name, reason)] += n
            if reading.invalid.get("capped"):
                self._once(
                    t.name,
                    "capped",
                    "bmc %s: %d chassis beyond max_chassis not read (those containing a chassis "
                    "read were): raise max_chassis or map the chassis (docs/exporters/bmc.md)",
                    t.name,
                    reading.invalid["capped"],
                )
            decided = map_chassis(t, reading)
            mapped, twice = decided.mapped, decided.twice
            if decided.nested:
                self._once(
                    t.name,
                    "nested",
                    "bmc %s: %s mapped to the host of the chassis it is inside; its watts are "
                    "in that chassis' and are not exported twice (docs/exporters/bmc.md)",
                    t.name,
                    ", ".join(f"{inner} (inside {outer})" for inner, outer in decided.nested),
                )
            if twice:
                self._once(
                    t.name,
                    "twice",
                    "bmc %s: chassis %s map to a host/component already taken; not exported",
                    t.name,
                    ", ".join(twice),
                )
            others = [c.chassis for c in reading.chassis if c.power_watts is not None]
            if t.mapper is None and mapped and len(others) > 1:
                self._once(
                    t.name,
                    "several",
                    "bmc %s: %d chassis report power (%s); exporting %s as the server's: map "
                    "the others with chassis: rules (docs/exporters/bmc.md)",
                    t.name,
                    len(others),
                    ", ".join(others),
                    mapped[0].power.chassis,
                )
            if not any(m.power.power_watts is not None for m in mapped):
                # An enclosure whose supplies report only output still has series exported
                # (wattbit_bmc_supply_power_watts): say so, lest the line read as "nothing".
                kinds = sorted({s.kind for m in mapped for s in m.power.supplies})
                self._once(
                    t.name,
                    "nopower",
                    "bmc %s: no chassis with a power reading is mapped (chassis: %s); %s",
                    t.name,
                    ", ".join(c.chassis or "(the system)" for c in reading.chassis) or "none",
                    f"its supplies' {' and '.join(kinds)} watts are exported, not as the "
                    "server's power (docs/exporters/bmc.md)"
                    if kinds
                    else "nothing is exported as its power",
                )
        state = BmcState(
            t.name,
            t.protocol,
            not error,
            duration,
            tuple(mapped),
            self._identity.get(t.name, ()),
            error,
        )
        self._publish(t.name, state)
        return state

    async def run(self, stop: asyncio.Event) -> None:
        """Poll every BMC on its own schedule until stop is set, then close the sessions."""
        try:
            await super().run(stop)
        finally:
            await self.close()

    async def close(self) -> None:
        """Log out of every session and close every connection."""
        clients, self._redfish = self._redfish, {}
        # Side by side: each logout waits at most 2 s for its BMC, and a stop must not take
        # 2 s per BMC that went silent since its last poll.
        await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)
        ipmis, self._ipmi = self._ipmi, {}
        for ipmi in ipmis.values():
            ipmi.close()
