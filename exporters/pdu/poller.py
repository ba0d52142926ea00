"""Polls every PDU on its own schedule; publishes each PDU's last completed poll.

Each target runs its own loop with a bounded number polled at once and a bulkhead for failing
PDUs (exporters/polling.py), all sharing one SnmpClient (one SNMP engine). A target's poll has
a deadline of one interval, so a dead or slow PDU cannot overlap its own next poll; its outlet
series vanish the moment a poll fails (no stale values) and return when it answers again.
Each PDU's last completed poll is exported as a timestamp, so a PDU that is polled late for
any reason shows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporters.polling import PeriodicPoller
from exporters.snmp.client import REASONS as SNMP_REASONS
from exporters.snmp.client import SnmpClient, SnmpError, Target

from .decode import MAX_OUTLETS, decode, metered
from .decode import REASONS as INVALID_REASONS
from .detect import Detection, NoProfile, detect
from .profile import Profile
from .types import Reading, feed_values

log = logging.getLogger(__name__)

# Every reason of wattbit_pdu_poll_failures_total, exported at 0 from the start for every PDU:
# a counter that appears at its first event loses that event to increase() (docs/exporters/pdu.md).
FAILURE_REASONS = (*sorted(SNMP_REASONS), "deadline", "no_profile")


@dataclass(frozen=True)
class PduTarget:
    """One PDU as the poller sees it (built from the collector's config)."""

    name: str
    target: Target
    profile: str | None = None  # None: detected (detect.py)
    # (outlet index, outlet name) -> (host, component)
    labels: Callable[[str, str], tuple[str, str]] = field(default=lambda i, n: ("", ""))
    max_outlets: int = MAX_OUTLETS  # outlets exported at most; the rest counted over_limit
    # (feed, host, component): a whole PDU ("unit"), bank ("bank:N") or phase ("phase:N")
    # feeding one host (collector.yml `feeds:`)
    feeds: tuple[tuple[str, str, str], ...] = ()

    def __repr__(self) -> str:
        return f"PduTarget({self.name!r}, {self.target.host}:{self.target.port})"


@dataclass(frozen=True)
class PduState:
    """The outcome of one PDU's last completed poll."""

    name: str
    up: bool
    duration: float
    profile: str = ""
    reading: Reading | None = None
    error: str = ""  # failure reason label, "" when up


class PduPoller(PeriodicPoller[PduTarget, PduState]):
    """The site collector's PDU polling loops and their results."""

    kind = "pdu"

    def __init__(
        self,
        targets: Sequence[PduTarget],
        profiles: Sequence[Profile],
        client: SnmpClient,
        interval: float = 10.0,
        concurrency: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(targets, interval, concurrency, clock)
        self.profiles = list(profiles)
        self.client = client
        self._by_name = {p.name: p for p in self.profiles}
        self._detected: dict[str, Profile] = {}
        self.detections: dict[str, Detection] = {}  # the last detection of each PDU, and why
        self._plans: dict[str, tuple[list[str], list[str]]] = {}
        self._announced: dict[str, str] = {}
        for t in self.targets:  # every known reason at 0 from the start
            for reason in FAILURE_REASONS:
                self.failures[(t.name, reason)] += 0
            for reason in INVALID_REASONS:
                self.invalid[(t.name, reason)] += 0
        self._unmetered_logged: set[str] = set()
        self._feed_logged: set[tuple[str, str]] = set()  # (pdu, feed) said to have no watts
        self._late_logged: set[str] = set()

    def request_timeout(self, t: PduTarget) -> float:
        """A silent PDU's request costs its timeout once per try (exporters/snmp/target.py)."""
        return t.target.timeout * (t.target.retries + 1)

    async def _profile(self, t: PduTarget) -> Profile:
        if t.profile:
            if t.name not in self.detections:
                why = "named by the profile key of its configuration"
                self.detections[t.name] = Detection(self._by_name[t.profile], "", why)
            return self._by_name[t.profile]
        if t.name not in self._detected:
            found = await detect(self.client, t.target, self.profiles)
            self.detections[t.name] = found
            profile = found.profile
            if self._announced.get(t.name) != profile.name:  # not again after every failure
                self._announced[t.name] = profile.name
                log.info("pdu %s: profile %s (%s)", t.name, profile.name, found.why)
            self._detected[t.name] = profile
        return self._detected[t.name]

    def _plan(self, profile: Profile) -> tuple[list[str], list[str]]:
        """The profile's walk roots and scalar OIDs, worked out once per profile."""
        plan = self._plans.get(profile.name)
        if plan is None:
            plan = self._plans[profile.name] = (profile.walk_roots(), profile.scalar_oids())
        return plan

    async def _read(self, t: PduTarget) -> tuple[Profile, Reading]:
        profile = await self._profile(t)
        roots, scalars = self._plan(profile)
        walk = await self.client.walk_many(t.target, roots)
        if scalars:
            walk.update(await self.client.get(t.target, scalars))
        return profile, decode(profile, walk, t.max_outlets)

    async def poll(self, t: PduTarget) -> PduState:
        """Poll one PDU once, within its deadline, and publish the outcome."""
        queued = self._clock()
        async with self._slot(t.name):
            start = self._clock()
            if start - queued > self.interval and t.name not in self._late_logged:
                self._late_logged.add(t.name)  # once: the cure is configuration, not retrying
                log.warning(
                    "pdu %s waited %.1fs for a polling slot: raise concurrency (now %d)",
                    t.name,
                    start - queued,
                    self.concurrency,
                )
            error = ""
            profile_name = ""
            reading: Reading | None = None
            deadline = self._deadline(t.name, self.interval)  # a first attempt's is shorter
            try:
                profile, reading = await asyncio.wait_for(self._read(t), deadline)
                profile_name = profile.name
            except TimeoutError:
                error, detail = "deadline", f"no complete answer within {deadline:g}s"
            except SnmpError as exc:
                error, detail = exc.reason, str(exc)
            except NoProfile as exc:
                error, detail = "no_profile", str(exc)
            except Exception as exc:  # a bug or a PDU that breaks the decoder: keep polling
                error, detail = "error", f"{type(exc).__name__}: {exc}"
                log.debug("pdu %s", t.name, exc_info=True)
            duration = self._clock() - start
        if error:
            self._failed(t.name, error, detail)
            self._detected.pop(t.name, None)  # the PDU may have been swapped: detect again
        else:
            assert reading is not None
            self._answered(t.name)
            for reason, n in reading.invalid.items():
                self.invalid[(t.name, reason)] += n
            for feed, _, _ in t.feeds:
                # A mapped feed without watts gives its host no power: say so once (a bank
                # number the PDU does not have, a profile that reads no banks, no unit power).
                said = (t.name, feed) in self._feed_logged
                if feed_values(reading, feed)[0] is None and not said:
                    self._feed_logged.add((t.name, feed))
                    log.warning(
                        "pdu %s: feed %s has no power reading (profile %s): no series for it",
                        t.name,
                        feed,
                        profile_name,
                    )
            if not metered(reading) and t.name not in self._unmetered_logged:
                self._unmetered_logged.add(t.name)
                log.warning(
                    "pdu %s: profile %s finds no metered value; exporting its health only",
                    t.name,
                    profile_name,
                )
        state = PduState(t.name, not error, duration, profile_name, reading, error)
        self._publish(t.name, state)
        return state
