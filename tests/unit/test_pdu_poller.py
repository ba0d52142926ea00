"""The PDU poller's scheduling and failure handling, with a fake SNMP client over recordings.

The real client against real agents is tested in tests/integration; here the point is the
poller's own logic: detection, isolation of failures, no stale values, invalid counters.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from collector.pdu.snmprec import parse_snmprec
from collector.site.profiles import load_profiles
from exporters.base import ExportersCollector
from exporters.pdu.exporter import PduExporter, snmp_counters
from exporters.pdu.poller import PduPoller, PduTarget
from exporters.snmp.client import Auth, SnmpError, Target
from exporters.snmp.oid import oid_arcs, under
from exporters.snmp.types import EXCEPTIONS, Value, Walk
from tests.support.env import RECORDINGS
from tests.support.realparts import parse_samples, sample


class FakeClient:
    """Answers from parsed recordings by port; some ports fail or hang."""

    def __init__(self, walks: dict[int, Walk]) -> None:
        self.walks = walks
        self.fail: dict[int, str] = {}
        self.hang: set[int] = set()

    async def _check(self, target: Target) -> Walk:
        if target.port in self.hang:
            await asyncio.sleep(3600)
        if target.port in self.fail:
            raise SnmpError(self.fail[target.port], target.endpoint, "simulated")
        return self.walks[target.port]

    async def get(self, target: Target, oids: list[str]) -> Walk:
        walk = await self._check(target)
        return {o: walk[o] for o in oids if o in walk}

    async def walk_many(self, target: Target, roots: list[str]) -> Walk:
        walk = await self._check(target)
        return {o: v for o, v in walk.items() if any(under(o, r) for r in roots)}

    async def first_rows(self, target: Target, columns: list[str]) -> dict[str, tuple[str, Value]]:
        walk = await self._check(target)
        found = {}
        for c in columns:
            below = sorted((o for o in walk if under(o, c) and o != c), key=oid_arcs)
            if below and walk[below[0]].type not in EXCEPTIONS:
                found[c] = (below[0], walk[below[0]])
        return found

    def counts(self) -> dict[str, int]:
        return {}  # a fake counts nothing: the exporter shows no sample for it

    def close(self) -> None:
        pass


def _target(name: str, port: int) -> PduTarget:
    return PduTarget(name, Target("127.0.0.1", port, Auth(version="2c", community="x")))


def _poller(interval: float = 1.0) -> tuple[PduPoller, FakeClient]:
    walks = {
        1: parse_snmprec((RECORDINGS / "apc_ap8641.snmprec").read_text()),
        2: parse_snmprec((RECORDINGS / "eaton_epdu-ma-24x5-20r.snmprec").read_text()),
        3: parse_snmprec((RECORDINGS / "vertiv_geist-mg02e4w1.snmprec").read_text()),
    }
    client = FakeClient(walks)
    targets = [_target("apc", 1), _target("eaton", 2), _target("geist", 3)]
    return PduPoller(targets, load_profiles(), client, interval=interval), client  # type: ignore[arg-type]


def _scrape(poller: PduPoller) -> dict:
    r = CollectorRegistry(auto_describe=False)
    r.register(ExportersCollector([PduExporter(poller)]))
    return parse_samples(generate_latest(r).decode())


def _outlets(s: dict, pdu: str) -> int:
    return sum(
        1 for k in s if k[0] == "wattbit_pdu_outlet_current_amperes" and ("pdu", pdu) in k[1]
    )


def test_detects_profiles_and_exports_every_pdu() -> None:
    poller, _ = _poller()
    asyncio.run(poller.poll_all())
    s = _scrape(poller)
    for pdu in ("apc", "eaton", "geist"):
        assert sample(s, "wattbit_pdu_up", pdu=pdu) == 1.0
    assert {st.profile for st in poller.states.values()} == {
        "apc_rpdu2",
        "eaton_epdu",
        "vertiv_geist",
    }
    assert _outlets(s, "apc") == 24 and _outlets(s, "eaton") == 24
    assert _outlets(s, "geist") == 0  # meters only the unit
    assert sample(s, "wattbit_pdu_power_watts", pdu="geist") == 1017.0


def test_one_failure_spoils_nothing_else_and_leaves_no_stale_values() -> None:
    poller, client = _poller()
    asyncio.run(poller.poll_all())
    assert _outlets(_scrape(poller), "eaton") == 24
    client.fail[2] = "timeout"
    asyncio.run(poller.poll_all())
    s = _scrape(poller)
    assert sample(s, "wattbit_pdu_up", pdu="eaton") == 0.0
    assert _outlets(s, "eaton") == 0  # gone at once, not the last good values
    assert not any(("pdu", "eaton") in k[1] for k in s if k[0] == "wattbit_pdu_info")
    assert _outlets(s, "apc") == 24 and sample(s, "wattbit_pdu_up", pdu="apc") == 1.0
    assert sample(s, "wattbit_pdu_poll_failures_total", pdu="eaton", reason="timeout") == 1
    del client.fail[2]
    asyncio.run(poller.poll_all())
    assert _outlets(_scrape(poller), "eaton") == 24  # back when it answers again


def test_a_hanging_pdu_hits_its_deadline_while_others_finish() -> None:
    poller, client = _poller(interval=1.0)
    client.hang.add(3)

    async def go() -> None:
        task = asyncio.create_task(poller.poll_all())
        # The others are published while the hanging one still waits for its deadline: wait
        # for them (not a fixed time), then the poll must still be going.
        while not all(n in poller.states and poller.states[n].up for n in ("apc", "eaton")):
            assert not task.done(), "the poll ended before the others were published"
            await asyncio.sleep(0.005)
        assert not task.done()
        assert "geist" not in poller.states
        await task

    asyncio.run(go())
    assert poller.states["geist"].error == "deadline"
    assert not poller.states["geist"].up


def test_invalid_values_are_counted_never_zero() -> None:
    poller, _ = _poller()
    asyncio.run(poller.poll_all())
    asyncio.run(poller.poll_all())
    s = _scrape(poller)
    apc_invalid = sum(
        v
        for k, v in s.items()
        if k[0] == "wattbit_pdu_invalid_values_total" and ("pdu", "apc") in k[1]
    )
    per_poll = sum(poller.states["apc"].reading.invalid.values())  # type: ignore[union-attr]
    assert apc_invalid == 2 * per_poll  # counted on every poll, cumulatively
    # No exported outlet value is negative (APC answers -1 for what it does not meter).
    assert all(v >= 0 for k, v in s.items() if k[0].startswith("wattbit_pdu_outlet_"))


def test_snmp_client_counters_render_by_reason_and_only_what_is_counted() -> None:
    counts = {"sent": 10, "received": 14, "var_binds": 250, "dropped": 3, "stray": 1, "garbage": 0}
    r = CollectorRegistry(auto_describe=False)

    class One:
        def __init__(self, counts: dict[str, int]) -> None:
            self.counts = counts

        def collect(self):  # type: ignore[no-untyped-def]
            return list(snmp_counters(self.counts))

    r.register(One(counts))
    s = parse_samples(generate_latest(r).decode())
    assert sample(s, "wattbit_snmp_messages_sent_total") == 10
    assert sample(s, "wattbit_snmp_messages_received_total") == 14
    assert sample(s, "wattbit_snmp_var_binds_received_total") == 250
    discarded = "wattbit_snmp_datagrams_discarded_total"
    assert sample(s, discarded, reason="not_polled") == 3
    assert sample(s, discarded, reason="stray") == 1
    assert sample(s, discarded, reason="garbage") == 0  # counted, and none: a real 0
    # A client that counts none of it (here: the fake) has no samples, never made-up zeros.
    poller, _ = _poller()
    names = {k[0] for k in _scrape(poller)}
    assert not {n for n in names if n.startswith("wattbit_snmp_")}
    assert "wattbit_exporter_up" in names


def test_failing_pdus_cannot_take_every_polling_slot() -> None:
    """As many hanging PDUs as slots (soak finding): a good PDU is still polled at once."""
    walks = {1: parse_snmprec((RECORDINGS / "apc_ap8641.snmprec").read_text())}
    client = FakeClient(walks)
    hanging = [_target(f"hang{i}", 100 + i) for i in range(4)]
    good = _target("good", 1)
    client.hang.update(100 + i for i in range(4))
    poller = PduPoller([*hanging, good], load_profiles(), client, interval=3600, concurrency=4)  # type: ignore[arg-type]

    async def scenario() -> tuple[bool, int]:
        poller._failing.update(t.name for t in hanging)  # their last polls failed
        stuck = [asyncio.create_task(poller.poll(t)) for t in hanging]
        await asyncio.sleep(0)  # every hanging poll queued for, or holding, a slot
        # the hanging polls never end: the good one completing at all is the property (a
        # generous bound only keeps a regression from hanging the suite)
        state = await asyncio.wait_for(poller.poll(good), 60)
        holding = sum(not t.done() for t in stuck)
        for t in stuck:
            t.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        return state.up, holding

    up, holding = asyncio.run(scenario())
    assert up and holding == 4
    assert poller.failing_slots == 1
    assert "good" in poller.last_poll
    s = _scrape(poller)
    assert (
        sample(s, "wattbit_pdu_last_poll_timestamp_seconds", pdu="good") == poller.last_poll["good"]
    )


def test_every_known_reason_is_exported_at_0_from_the_start() -> None:
    """Issue 26, 9: a counter that appears at its first event loses it to increase()."""
    from exporters.pdu.decode import REASONS as INVALID
    from exporters.pdu.poller import FAILURE_REASONS

    poller, client = _poller()
    assert {"timeout", "auth", "deadline", "no_profile", "error"} <= set(FAILURE_REASONS)

    def by_reason(s: dict, name: str, pdu: str) -> dict[str, float]:
        return {
            dict(k[1])["reason"]: v for k, v in s.items() if k[0] == name and ("pdu", pdu) in k[1]
        }

    s = _scrape(poller)  # before any poll
    for pdu in ("apc", "eaton", "geist"):
        failures = by_reason(s, "wattbit_pdu_poll_failures_total", pdu)
        assert failures == dict.fromkeys(FAILURE_REASONS, 0.0), pdu
        assert by_reason(s, "wattbit_pdu_invalid_values_total", pdu) == dict.fromkeys(INVALID, 0.0)
    client.fail[2] = "auth"
    asyncio.run(poller.poll_all())
    s = _scrape(poller)
    failures = by_reason(s, "wattbit_pdu_poll_failures_total", "eaton")
    assert failures == {**dict.fromkeys(FAILURE_REASONS, 0.0), "auth": 1.0}
    assert set(by_reason(s, "wattbit_pdu_invalid_values_total", "apc")) == set(INVALID)


def test_a_mapped_feed_without_watts_is_said_once_and_exports_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    walks = {1: parse_snmprec((RECORDINGS / "apc_ap8641.snmprec").read_text())}
    target = PduTarget(
        "apc",
        Target("127.0.0.1", 1, Auth(version="2c", community="x")),
        feeds=(("phase:1", "mover01", ""), ("bank:1", "mover02", ""), ("phase:7", "m3", "")),
    )
    poller = PduPoller([target], load_profiles(), FakeClient(walks), interval=1.0)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="exporters.pdu.poller"):
        asyncio.run(poller.poll_all())
        asyncio.run(poller.poll_all())
    s = _scrape(poller)
    watts = {dict(k[1])["feed"]: v for k, v in s.items() if k[0] == "wattbit_pdu_feed_power_watts"}
    assert watts == {"phase:1": 1220.0}  # rPDU2PhaseStatusPower 122 hundredths of kW
    said = [r.getMessage() for r in caplog.records if "has no power reading" in r.getMessage()]
    # the profile reads no rPDU2 bank power; the unit has no phase 7: each said once
    assert sorted(m.split()[3] for m in said) == ["bank:1", "phase:7"]
