"""What the site collector's pollers of many devices share (PDUs, BMCs): schedule and slots.

Each target runs its own loop (poll, publish, sleep until its next tick), and slots bound how
many targets are polled at once. A target whose last poll failed may hold at most a quarter of
the slots (a bulkhead), and waits for a slot behind every target that is not failing: a
failing target spends up to a whole interval in its slot, so without it as many slow or
garbage-speaking devices as there are slots would keep every good one from being polled at
all, silently (found by bench/soak/).
Failing targets back off (their next poll 1, 2, 4 … MAX_BACKOFF intervals after the last) and
wait for their slots most-recently-answered first (then fewest failures), so a target that
failed once and is back is read at once rather than behind every long-dead one (issue 34:
with 200 silent BMCs, one down for 12 s needed 144 s to be read again; tests/unit/
test_polling.py). The first round, where nothing tells a dead target from a healthy one yet,
is bounded apart: each target's first attempt is cut at FIRST_SHARE of an interval (never
below FIRST_FLOOR nor its protocol's own request timeout, never above its own deadline) and
runs in a pool of its own, sized so that every target's first attempt fits in one interval
however many there are (the sum of the cuts / interval, at least the configured
concurrency). So N silent targets cost their first round one interval, not N x deadline /
slots, and every target that answers within the cut is read within two intervals of the
start (issue 34: a healthy BMC's first read came ~60 s after the start beside 200 silent
ones). The price: more first attempts at once, once, each bounded by its protocol's own
timeout and the cut (an IPMI attempt is a process: 200 IPMI BMCs at the default 5 s session
timeout and a 10 s interval start 120 at a time); a target slower than the cut fails its
first attempt and is then read as a failing one (its full deadline, within its backoff and a
round of the failing slots).

A subclass reads one device (``poll``) and publishes its outcome with ``_publish``, which
replaces the dicts whole so the HTTP threads rendering them see the old or the new one, whole.
PollFamilies and reason_counter render what every such poller has.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporters.base import clean_text


class _Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=_Named)
S = TypeVar("S")

# A failing target's polls are at most this many intervals apart: a device dead for long is
# read again within MAX_BACKOFF intervals of its return, and 200 dead ones cost an eighth.
MAX_BACKOFF = 8
# A target's first attempt is cut at this share of an interval (not below FIRST_FLOOR seconds,
# so a short interval leaves a real BMC time to log in): see the module's docstring.
FIRST_SHARE = 0.25
FIRST_FLOOR = 2.0
FIRST_MARGIN = 1.0  # after the target's own request timeout (a process to start and kill)


class PrioritySlots:
    """A semaphore whose waiters are served lowest key first (then first come)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: list[tuple[tuple[float, int], int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @contextlib.asynccontextmanager
    async def hold(self, key: tuple[float, int]) -> AsyncIterator[None]:
        """Hold one slot, waiting behind every waiter of a lower key."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
        else:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (key, next(self._seq), fut))
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._release()  # granted as it was cancelled: pass the slot on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


class PeriodicPoller(ABC, Generic[T, S]):
    """Polls every target on its own schedule, bounded; keeps each target's last poll."""

    kind: str  # "pdu", "bmc": the first word of its log lines

    def __init__(
        self,
        targets: Sequence[T],
        interval: float,
        concurrency: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.targets = list(targets)
        self.interval = interval
        self.concurrency = concurrency
        self._clock = clock
        self._log = logging.getLogger(type(self).__module__)  # the subclass's own logger
        self.states: dict[str, S] = {}
        self.last_poll: dict[str, float] = {}  # unix time each target's last poll completed
        self.failures: Counter[tuple[str, str]] = Counter()  # (target, reason)
        self.invalid: Counter[tuple[str, str]] = Counter()  # (target, reason)
        self._failing: set[str] = set()  # targets whose last poll failed
        self._streak: Counter[str] = Counter()  # failed polls in a row, per failing target
        self._answered_at: dict[str, float] = {}  # clock() of each target's last good poll
        self.failing_slots = max(1, concurrency // 4)
        # Targets that answer and targets that fail never share a slot (made in the loop).
        self._slots: PrioritySlots | None = None
        self._failing_slots: PrioritySlots | None = None
        self._untried = {t.name for t in self.targets}  # no attempt completed yet
        # A first attempt is cut, but never before the target's own request timeout has had
        # its say (FIRST_MARGIN after it), so a silent target still fails as "timeout".
        share = max(interval * FIRST_SHARE, FIRST_FLOOR)
        self.first_cut = {
            t.name: min(interval, max(share, self.request_timeout(t) + FIRST_MARGIN))
            for t in self.targets
        }
        # Every first attempt within one interval: pool x interval >= the sum of the cuts.
        need = math.ceil(math.fsum(self.first_cut.values()) / interval) if interval > 0 else 0
        self.first_slots = max(concurrency, need)
        self._first_slots: PrioritySlots | None = None

    @abstractmethod
    async def poll(self, t: T) -> S:
        """Poll one target once, within its deadline, and publish the outcome."""

    def request_timeout(self, t: T) -> float:
        """What one unanswered request of ``t`` costs (its protocol's own timeout): a first
        attempt is never cut before it. 0 where the subclass has none."""
        return 0.0

    def _deadline(self, name: str, full: float) -> float:
        """A poll's deadline: `full`, or the first-attempt cut if the target was never tried."""
        return min(full, self.first_cut[name]) if self._first(name) else full

    def _first(self, name: str) -> bool:
        """Whether a poll of `name` is its first attempt: never tried, and not known to fail
        (a target marked failing has a failure on record, whatever tried it)."""
        return name in self._untried and name not in self._failing

    @contextlib.asynccontextmanager
    async def _slot(self, name: str) -> AsyncIterator[None]:
        """Hold a polling slot. A target never tried takes one of the first-round pool (its
        attempt is cut: _deadline). A failing target first takes one of the failing quarter
        (most recently answered first, then fewest failures), then a slot after every target
        that is not failing: so at most a quarter of the slots ever go to failing targets,
        and a healthy target waits for none of the failing ones queued."""
        if self._slots is None or self._failing_slots is None or self._first_slots is None:
            self._slots = PrioritySlots(self.concurrency)
            self._failing_slots = PrioritySlots(self.failing_slots)
            self._first_slots = PrioritySlots(self.first_slots)
        if self._first(name):
            try:
                async with self._first_slots.hold((0.0, 0)):
                    yield
            finally:
                self._untried.discard(name)  # tried, whatever came of it
        elif name in self._failing:
            # Never answered: +inf, last; one that failed once is likely back: first.
            last = self._answered_at.get(name)
            key = (-last if last is not None else float("inf"), self._streak[name])
            async with self._failing_slots.hold(key), self._slots.hold((1.0, 0)):
                yield
        else:
            async with self._slots.hold((0.0, 0)):
                yield

    def _failed(self, name: str, error: str, detail: str) -> None:
        """Count a failed poll; log it once per failure streak, not every interval."""
        self.failures[(name, error)] += 1
        self._streak[name] += 1
        if name not in self._failing:
            self._failing.add(name)
            # The detail may quote a device (an exception raised over its data): one line,
            # printable, bounded, whatever it sent (issue 34).
            why = clean_text(detail, 512)
            self._log.warning("%s %s: poll failed (%s): %s", self.kind, name, error, why)

    def _answered(self, name: str) -> None:
        """Note a completed poll: a failure streak ends (logged once)."""
        self._streak.pop(name, None)
        self._answered_at[name] = self._clock()
        if name in self._failing:
            self._failing.discard(name)
            self._log.info("%s %s: answering again", self.kind, name)

    def _publish(self, name: str, state: S) -> None:
        """Publish a target's completed poll (successful or not)."""
        self.last_poll = {**self.last_poll, name: time.time()}
        # Replace the whole dict: readers (the HTTP threads) see the old or the new one, whole.
        self.states = {**self.states, name: state}

    async def poll_all(self) -> list[S]:
        """Poll every target once, concurrently (bounded)."""
        return list(await asyncio.gather(*(self.poll(t) for t in self.targets)))

    async def _loop(self, t: T, stop: asyncio.Event) -> None:
        next_start = self._clock()
        while not stop.is_set():
            await self.poll(t)
            # A failing target backs off: 1, 2, 4 … MAX_BACKOFF intervals after its last.
            streak = self._streak[t.name]
            next_start += self.interval * min(2 ** max(0, streak - 1), MAX_BACKOFF)
            now = self._clock()
            if next_start < now:  # ran over: skip the missed ticks rather than bursting
                next_start = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_start - now))

    async def run(self, stop: asyncio.Event) -> None:
        """Poll every target on its own schedule until stop is set."""
        await asyncio.gather(*(self._loop(t, stop) for t in self.targets))


class PollFamilies:
    """Each target's up, last poll duration and last poll time (successful or not)."""

    def __init__(self, label: str, what: str, up: str, duration: str, last_poll: str) -> None:
        """`label`: the target's label ("pdu"); `what`: the device in help texts; then the
        three family names, spelled out where they are used so a search for one finds it."""
        self.up = GaugeMetricFamily(up, f"1 if the {what}'s last poll succeeded.", labels=[label])
        self.duration = GaugeMetricFamily(
            duration, f"Time the {what}'s last poll took.", labels=[label]
        )
        self.last_poll = GaugeMetricFamily(
            last_poll,
            f"Unix time the {what}'s last poll completed (successful or not): staleness shows "
            "here.",
            labels=[label],
        )

    def add(self, name: str, up: bool, duration: float, polled_at: Mapping[str, float]) -> None:
        """One target's last completed poll (no timestamp before its first)."""
        self.up.add_metric([name], 1.0 if up else 0.0)
        self.duration.add_metric([name], duration)
        if name in polled_at:
            self.last_poll.add_metric([name], polled_at[name])

    def __iter__(self) -> Iterator[GaugeMetricFamily]:
        """up, duration, last poll: the order the exporters yield them in."""
        return iter((self.up, self.duration, self.last_poll))


def reason_counter(
    name: str, documentation: str, label: str, counts: Mapping[tuple[str, str], int]
) -> CounterMetricFamily:
    """A counter of (target, reason) counts, such as a poller's failures or invalid values."""
    family = CounterMetricFamily(name, documentation, labels=[label, "reason"])
    for (target, reason), n in sorted(counts.items()):
        family.add_metric([target, reason], float(n))
    return family
