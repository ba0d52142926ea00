"""Hostile and broken Redfish BMCs polled at once with good ones: each a clean per-BMC failure
with its reason, bounded memory, and the good BMCs keep being polled on time.

Good BMCs are real mockups served by sushy-static (over HTTP and over HTTPS with a CA file);
the hostile ones are tests/support/hostilebmc.py (synthetic by nature: a 100 MB body, deep
JSON, a slow drip, a redirect to another address, a wrong content type, not JSON) and
sushy-static with a self-signed or an expired certificate.
"""

from __future__ import annotations

import asyncio
import logging
import tracemalloc
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters.bmc.exporter import BmcExporter
from exporters.bmc.poller import BmcPoller, BmcState, BmcTarget
from exporters.bmc.redfish import RedfishTarget
from tests.support.bmcs import MOCKUPS, Certs, HostileBmc, SushyStatic, sushy_static_path
from tests.support.env import require
from tests.support.realparts import free_port, parse_samples

PASSWORD = "Hostile-test-S3cret-value"
DEADLINE = 6.0


def target(name: str, url: str, **kw: object) -> BmcTarget:
    """A Redfish BMC with the test's password, a 2 s request timeout and a 6 s poll deadline."""
    rf = RedfishTarget(url, "wattbit", PASSWORD, timeout=2.0, **kw)  # type: ignore[arg-type]
    return BmcTarget(name, "redfish", redfish=rf, labels=(name, ""), deadline=DEADLINE)


@pytest.fixture
def farm(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Every kind of BMC at once, as BmcTargets with the reason each must fail with."""
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    certs = Certs(tmp_path)
    procs = []

    def start(p):  # type: ignore[no-untyped-def]
        procs.append(p)
        return p

    try:
        good = start(SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp_path))
        good_tls = start(SushyStatic(MOCKUPS / "dmtf-public-rackmount1", tmp_path, certs.good))
        self_signed = start(SushyStatic(MOCKUPS / "gigabyte-h262-z63", tmp_path, certs.self_signed))
        expired = start(SushyStatic(MOCKUPS / "gigabyte-h262-z63", tmp_path, certs.expired))
        hostile = {
            m: start(HostileBmc(m, tmp_path, good.port))
            for m in ("big", "deep", "drip", "redirect", "ctype", "garbage")
        }
        targets = {
            "good": (target("good", good.url), ""),
            "good-tls": (target("good-tls", good_tls.url, ca_file=str(certs.ca)), ""),
            "insecure-ok": (target("insecure-ok", self_signed.url, verify_tls=False), ""),
            "self-signed": (target("self-signed", self_signed.url), "tls"),
            "expired": (target("expired", expired.url, ca_file=str(certs.ca)), "tls"),
            "wrong-ca": (target("wrong-ca", good_tls.url), "tls"),
            "dead": (target("dead", f"http://127.0.0.1:{free_port()}"), "refused"),
            "big": (target("big", hostile["big"].url), "too_big"),
            "deep": (target("deep", hostile["deep"].url), "too_deep"),
            "drip": (target("drip", hostile["drip"].url), "timeout"),
            "redirect": (target("redirect", hostile["redirect"].url), "redirect"),
            "ctype": (target("ctype", hostile["ctype"].url), "content_type"),
            "garbage": (target("garbage", hostile["garbage"].url), "garbage"),
        }
        yield targets
    finally:
        for p in procs:
            p.stop()


def test_each_failure_is_clean_and_the_good_stay_fresh(farm, caplog) -> None:  # type: ignore[no-untyped-def]
    """One poll of all at once: reasons as expected; then the loop for a while: the good BMCs
    are polled again and again while the hostile ones keep failing."""
    caplog.set_level(logging.DEBUG)
    poller = BmcPoller([t for t, _ in farm.values()], interval=3.0, concurrency=32)
    tracemalloc.start()

    async def scenario() -> dict[str, int]:
        states = {s.name: s for s in await poller.poll_all()}
        for name, (_, reason) in farm.items():
            assert states[name].error == reason, (name, states[name].error)
            assert states[name].up == (reason == "")
        # Then on their schedules: count the good BMCs' successful polls until each has
        # three more, while every hostile one keeps failing with the same reason.
        stop = asyncio.Event()
        counts = {n: 0 for n in farm}
        task = asyncio.create_task(poller.run(stop))
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 120
        seen: dict[str, float] = dict(poller.last_poll)
        while loop.time() < give_up:
            await asyncio.sleep(0.2)
            for n, t in poller.last_poll.items():
                if t != seen.get(n):
                    seen[n] = t
                    counts[n] += 1
                    assert poller.states[n].error == farm[n][1], (n, poller.states[n].error)
            if all(counts[n] >= 3 for n, (_, r) in farm.items() if not r):
                break
        stop.set()
        await task
        return counts

    counts = asyncio.run(scenario())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert all(counts[n] >= 3 for n, (_, r) in farm.items() if not r), counts
    # A 100 MB body was offered: the poller never held more than a few caps' worth.
    assert peak < 40 * 1024 * 1024, peak

    registry = CollectorRegistry()
    registry.register(BmcExporter(poller))
    text = generate_latest(registry).decode()
    samples = parse_samples(text)
    for name, (_, reason) in farm.items():
        assert samples[("wattbit_bmc_up", (("bmc", name),))] == (0.0 if reason else 1.0)
        if reason:
            key = ("wattbit_bmc_poll_failures_total", (("bmc", name), ("reason", reason)))
            assert samples[key] >= 1.0
            assert not any(
                k[0] == "wattbit_bmc_power_watts" and ("bmc", name) in k[1] for k in samples
            )
    watts = {dict(k[1])["bmc"]: v for k, v in samples.items() if k[0] == "wattbit_bmc_power_watts"}
    assert watts == {"good": 97.0, "good-tls": 374.0, "insecure-ok": 100.0}
    assert PASSWORD not in text
    assert PASSWORD not in caplog.text
    # the explicit opt-out is said in the log, for that BMC only
    off = [r.getMessage() for r in caplog.records if "verification is OFF" in r.getMessage()]
    assert len(off) == 1 and "insecure-ok" in off[0], off
    # The Basic credentials are sent base64-encoded: not in the log either.
    import base64

    assert base64.b64encode(f"wattbit:{PASSWORD}".encode()).decode() not in caplog.text


def test_session_login_relogin_and_logout(tmp_path: Path) -> None:
    """A service that answers only a Redfish session (a real mockup behind it): the poller logs
    in, sends the token and no Basic header, logs in again when its session expires, and
    deletes its session when it stops."""
    import json
    import urllib.request

    user = "wattbit"
    # A command line is visible to this machine's users: a throwaway password for a test peer.
    secret = "Session-test-pw-3"
    srv = HostileBmc(
        "session",
        tmp_path,
        extra=[
            "--mockup",
            str(MOCKUPS / "hpe-dl325-gen10plus"),
            "--user",
            user,
            "--password",
            secret,
        ],
    )
    try:
        rf = RedfishTarget(srv.url, user, secret, auth="session", timeout=5)
        poller = BmcPoller([BmcTarget("s", "redfish", redfish=rf, deadline=20)], interval=30)

        async def polls() -> list[bool]:
            ups = [(await poller.poll_all())[0].up for _ in range(4)]
            await poller.close()
            return ups

        ups = asyncio.run(polls())
        with urllib.request.urlopen(srv.url + "/_stats", timeout=10) as r:
            stats = json.loads(r.read())
    finally:
        srv.stop()
    assert ups == [True] * 4, poller.states["s"].error
    assert [m.power.power_watts for m in poller.states["s"].mapped] == [97.0]
    assert stats["logins"] >= 2, stats  # sessions expired every 6 GETs: logged in again
    # once per expiry, however many of the requests in flight (up to 4) saw the 401
    assert stats["logins"] <= stats["gets"] // 6 + 1, stats
    assert stats["basic"] == 0, stats  # the password went only into the login's body
    assert stats["logouts"] == 1, stats


def test_a_slow_bmc_with_many_chassis_is_read_whole(tmp_path: Path) -> None:
    """HPE Cray EX4252's mockup (9 chassis, about 40 resources) served at 0.25 s per answer,
    with a 1 s request timeout: requests queue for the BMC's 4 slots without their timeout
    running, so the poll completes (about 40 x 0.25 / 4 = 2.5 s) instead of timing out."""
    srv = HostileBmc("slow", tmp_path, extra=["--mockup", str(MOCKUPS / "hpe-cray-ex4252")])
    try:
        rf = RedfishTarget(srv.url, "u", "p", auth="basic", timeout=1.0)
        poller = BmcPoller([BmcTarget("ex", "redfish", redfish=rf, deadline=60)], interval=60)

        async def poll() -> None:
            await poller.poll_all()
            await poller.close()

        asyncio.run(poll())
    finally:
        srv.stop()
    state = poller.states["ex"]
    assert state.up, state.error
    assert poller.invalid[("ex", "missing")] >= 1  # Mezz0's Power error body, as served fast


@pytest.mark.parametrize(
    ("quirk", "polls", "timeout", "deadline", "delay"),
    [
        ("none", 60, 2.0, 10.0, 0.0),
        ("forbid-one", 60, 2.0, 10.0, 0.0),  # a 401 on Power with a live token
        ("no-location", 60, 2.0, 10.0, 0.0),  # the session named by the login's body only
        ("slow-login", 60, 0.5, 10.0, 1.0),  # answered after the request timeout
        ("slow-power", 15, 2.0, 0.4, 0.8),  # every poll misses its deadline
    ],
)
def test_one_session_over_many_polls(
    tmp_path: Path, quirk: str, polls: int, timeout: float, deadline: float, delay: float
) -> None:
    """Over many polls of a BMC that never invalidates its session, whatever else it does:
    one login, never two sessions live at once, and that session logged out at close
    (issue 34: 122 logins for 61 logouts with a 401 on one resource, 61 of 61 leaked when the
    login came after the request timeout, 31 without Location, a login per timed-out poll)."""
    import json
    import urllib.request

    user, secret = "wattbit", "Session-test-pw-4"  # a throwaway password for a test peer
    extra = ["--mockup", str(MOCKUPS / "hpe-dl325-gen10plus"), "--user", user]
    extra += ["--password", secret, "--quirk", quirk, "--login-delay", str(delay)]
    srv = HostileBmc("session", tmp_path, extra=extra)

    def stats() -> dict[str, int]:
        with urllib.request.urlopen(srv.url + "/_stats", timeout=10) as r:
            return dict(json.loads(r.read()))

    try:
        rf = RedfishTarget(srv.url, user, secret, auth="session", timeout=timeout)
        target = BmcTarget("s", "redfish", redfish=rf, deadline=deadline)
        poller = BmcPoller([target], interval=30)

        async def run() -> tuple[list[BmcState], dict[str, int]]:
            states = [(await poller.poll_all())[0] for _ in range(polls)]
            during = stats()
            await poller.close()
            return states, during

        states, during = asyncio.run(run())
        after = stats()
    finally:
        srv.stop()
    if quirk == "slow-power":
        assert {s.error for s in states} == {"deadline"}
    else:
        assert all(s.up for s in states), states[-1].error
    assert during["logins"] == 1, during
    assert during["max_live"] == 1, during
    assert after["live"] == 0 and after["logouts"] == 1, after
    assert after["basic"] == 0, after
