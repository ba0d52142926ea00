"""The shared schedule of the site collector's pollers (exporters/polling.py) under many dead
targets: a healthy target is read within two intervals of the start and of its return.

Runs on an event loop whose clock is virtual (each wait advances it by exactly the time
waited, nothing sleeps), so hundreds of 10 s intervals take milliseconds and the figures do
not depend on the machine's load: the bounds asserted are exact properties of the schedule.
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
import time
from dataclasses import dataclass

import pytest

from exporters.polling import PeriodicPoller

INTERVAL = 10.0
DEADLINE = 10.0  # a silent target holds its slot this long before its poll fails


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list:  # type: ignore[type-arg]
        if timeout is not None and timeout > 0:
            self._loop.now += timeout  # the wait passes at once
        return super().select(0)


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose time advances only by what it waits for."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self.now


@dataclass(frozen=True)
class T:
    name: str


class Fake(PeriodicPoller[T, bool]):
    """Targets are down (silent: the whole deadline, then a failure) in given windows."""

    kind = "fake"
    own_timeout = 0.0  # the protocol's own request timeout (a first attempt is not cut before)

    def request_timeout(self, t: T) -> float:
        return self.own_timeout

    def __init__(self, targets: list[T], down: dict[str, tuple[float, float]], loop: VirtualLoop):
        super().__init__(targets, INTERVAL, concurrency=32, clock=loop.time)
        self.down = down
        self.loop = loop
        self.reads: dict[str, list[float]] = {t.name: [] for t in targets}

    async def poll(self, t: T) -> bool:
        async with self._slot(t.name):
            start, end = self.down.get(t.name, (0.0, 0.0))
            if start <= self.loop.now < end:
                await asyncio.sleep(self._deadline(t.name, DEADLINE))  # a first attempt's: cut
                self._failed(t.name, "timeout", "silent")
                self._publish(t.name, False)
                return False
            await asyncio.sleep(0.05)
            self._answered(t.name)
            self._publish(t.name, True)
            self.reads[t.name].append(self.loop.now)
            return True


def _run(
    dead: int,
    down: dict[str, tuple[float, float]],
    until: float,
    healthy: int = 0,
    own_timeout: float = 0.0,
) -> Fake:
    loop = VirtualLoop()
    names = [f"dead{i}" for i in range(dead)] + ["healthy", "flaky"]
    names += [f"ok{i}" for i in range(healthy)]  # after every dead one: the worst place
    forever = {f"dead{i}": (0.0, 1e9) for i in range(dead)}
    cls = type("OwnTimeout", (Fake,), {"own_timeout": own_timeout}) if own_timeout else Fake
    poller = cls([T(n) for n in names], {**forever, **down}, loop)

    async def scenario() -> None:
        stop = asyncio.Event()
        loop.call_at(until, stop.set)
        await poller.run(stop)

    started = time.monotonic()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert time.monotonic() - started < 120  # virtual time: a regression must not hang
    return poller


def test_healthy_targets_are_read_within_two_intervals_whatever_the_dead() -> None:
    """200 silent targets (issue 34: a BMC down for 12 s needed 144 s to be read again)."""
    poller = _run(200, {"flaky": (205.0, 217.0)}, until=800.0)
    healthy = poller.reads["healthy"]
    gaps = [b - a for a, b in itertools.pairwise(healthy)]
    assert max(gaps) <= 2 * INTERVAL, max(gaps)
    flaky = [t for t in poller.reads["flaky"] if t >= 217.0]
    assert flaky and flaky[0] <= 217.0 + 2 * INTERVAL, flaky[:3]
    gaps = [b - a for a, b in itertools.pairwise(flaky)]
    assert max(gaps) <= 2 * INTERVAL, max(gaps)


def test_a_target_back_after_a_long_outage_is_read_within_a_round() -> None:
    """A target that never answered, among 200 dead ones, back after 5 minutes: read within its
    longest backoff plus one round of the failing slots (the dead wait first come, first
    served among themselves: none is starved)."""
    from exporters.polling import MAX_BACKOFF

    poller = _run(200, {"flaky": (0.0, 300.0)}, until=1200.0)
    flaky = poller.reads["flaky"]
    round_ = 201 * DEADLINE / poller.failing_slots
    assert flaky and flaky[0] <= 300.0 + MAX_BACKOFF * INTERVAL + round_, flaky[:3]
    assert max(b - a for a, b in itertools.pairwise(poller.reads["healthy"])) <= 20


@pytest.mark.parametrize(("dead", "own_timeout"), [(200, 0.0), (1000, 0.0), (200, 5.0)])
def test_every_healthy_target_is_first_read_within_two_intervals_of_the_start(
    dead: int, own_timeout: float
) -> None:
    """Before its first poll nothing tells a dead target from a healthy one: silent first
    attempts held the slots for N x 10 s / 32, and a healthy target listed after 200 of them was
    first read ~60 s after the start (issue 34). Each first attempt is now cut and the first
    round sized to one interval, whatever the number of dead ones; never cut before the
    protocol's own request timeout (5 s: a Redfish request's, an IPMI session's), so a silent
    target still fails as its protocol says."""
    poller = _run(dead, {}, until=5 * INTERVAL, healthy=20, own_timeout=own_timeout)
    if own_timeout:
        assert set(poller.first_cut.values()) == {own_timeout + 1.0}
    firsts = {n: r[0] if r else None for n, r in poller.reads.items() if not n.startswith("dead")}
    late = {n: t for n, t in firsts.items() if t is None or t > 2 * INTERVAL}
    assert not late, late
    # and the dead were all tried in that round (none is starved by the healthy)
    assert all(f"dead{i}" in poller.last_poll for i in range(dead))


def test_a_failure_detail_reaches_the_log_as_one_printable_bounded_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A poll failing with an exception that quotes the device's data (a decoder bug over an
    ESC sequence, a newline forging a log line, a megabyte): one line, printable, at most 512
    characters of detail (issue 34)."""
    loop = VirtualLoop()
    poller = Fake([T("p")], {}, loop)
    try:
        poller._failed("p", "error", "ValueError: '\x1b[31m\nFORGED line\x00" + "x" * 1_000_000)
    finally:
        loop.close()
    (record,) = [r for r in caplog.records if "poll failed" in r.getMessage()]
    text = record.getMessage()
    assert text.isprintable() and "\x1b" not in text and len(text) < 700, text[:200]
