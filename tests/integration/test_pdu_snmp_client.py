"""exporters.snmp.client against real agents: snmpsim over PDU recordings and raw-UDP fault agents.

net-snmp's snmpbulkwalk reading the same agent is the independent opinion every walk is
compared with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import struct
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from exporters.snmp.types import Value, Walk
from tests.support.env import RECORDINGS, require
from tests.support.snmpagents import (
    SNMP_FIXTURES,
    RawAgent,
    SnmpSim,
    V3User,
    closed_udp_port,
    have_netsnmp,
    have_snmpsim,
    silent_udp_port,
    snmpwalk_values,
)

try:  # pysnmp is a dependency of the client: without it every test fails in CI, skips here
    from exporters.snmp.client import Auth, SnmpClient, SnmpError, Target
except ImportError as exc:
    CLIENT_MISSING = f"exporters.snmp.client cannot be imported: {exc}"
else:
    CLIENT_MISSING = ""

T = TypeVar("T")
APC = RECORDINGS / "apc_ap8641.snmprec"
CYBERPOWER = RECORDINGS / "cyberpower_pdu44005.snmpwalk"
FAULTY = SNMP_FIXTURES / "apc_rpdu2_faulty.snmprec"
SLOW = SNMP_FIXTURES / "apc_rpdu2_slow.snmprec"

RPDU2 = "1.3.6.1.4.1.318.1.1.26"
RPDU2_METERED = "1.3.6.1.4.1.318.1.1.26.9.4"  # metered outlet tables: no variation rows
OUTLET_TABLE = "1.3.6.1.4.1.318.1.1.26.9.4.3"
# snmpsim-data turned the switched outlet states into a `numeric` variation that changes
# over time (README "Parsing quirks" 2): two reads may differ there.
VARYING = "1.3.6.1.4.1.318.1.1.26.9.2.3.1.5."

USERS = {
    "sha256-aes256": V3User("pdu-sha256", "SHA256", "auth-sha256-key", "AES256", "priv-aes256-key"),
    "sha-aes128": V3User("pdu-sha", "SHA", "auth-sha1-key!", "AES128", "priv-aes128-key"),
    # net-snmp's AES-256 (Blumenthal); with SHA-1 the key extension matters
    "sha-aes256": V3User("pdu-sha-aes256", "SHA", "auth-sha1-k256", "AES256BLMT", "priv-k256-blmt"),
    "md5-des": V3User("pdu-md5", "MD5", "auth-md5-key", "DES", "priv-des-key"),
}
CLIENT_PROTOCOLS = {  # the client's names for the same users
    "sha256-aes256": ("SHA256", "AES256"),
    "sha-aes128": ("SHA", "AES128"),
    "sha-aes256": ("SHA", "AES256"),
    "md5-des": ("MD5", "DES"),
}


def _crypto_ok() -> bool:
    try:  # pysnmp 7's AES and DES need cryptography >= 43 (hazmat.decrepit)
        from cryptography.hazmat.decrepit.ciphers.modes import CFB  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def _client_importable() -> None:
    require(not CLIENT_MISSING, CLIENT_MISSING)


def _require_agents() -> None:
    require(not CLIENT_MISSING, CLIENT_MISSING)
    require(have_snmpsim(), "snmpsim-command-responder is not installed in this venv")
    require(have_netsnmp(), "net-snmp tools (snmpget, snmpbulkwalk) are not installed")
    require(APC.exists() and CYBERPOWER.exists(), f"PDU recordings missing in {RECORDINGS}")


@pytest.fixture(scope="module")
def sim() -> Iterator[SnmpSim]:
    """One snmpsim serving the APC and CyberPower recordings and the fault fixture."""
    _require_agents()
    with SnmpSim([APC, CYBERPOWER, FAULTY], v3_users=list(USERS.values())) as s:
        yield s


def v2c(agent: SnmpSim | RawAgent, community: str, **kw: Any) -> Target:
    """A v2c Target for a local agent."""
    return Target("127.0.0.1", agent.port, Auth("2c", community=community), **kw)


def v3(port: int, user: V3User, auth: str, priv: str, context: str, **kw: Any) -> Target:
    """A v3 authPriv Target for a local agent."""
    a = Auth(
        "3",
        user=user.user,
        auth_protocol=auth,
        auth_key=user.auth_key,
        priv_protocol=priv,
        priv_key=user.priv_key,
        context_name=context,
    )
    return Target("127.0.0.1", port, a, **kw)


def netsnmp_view(v: Value) -> tuple[str, str]:
    """A Value as snmpwalk_values() shows it (net-snmp's type word and raw text)."""
    if v.type == "OctetString":
        assert isinstance(v.value, bytes)
        return ("Hex-STRING", " ".join(f"{b:02X}" for b in v.value))
    if v.type == "Opaque":
        assert isinstance(v.value, bytes)
        if v.value[:3] == b"\x9f\x78\x04":  # net-snmp decodes the opaque-wrapped float
            return ("Opaque", f"Float: {struct.unpack('>f', v.value[3:7])[0]:f}")
        return ("Opaque", " ".join(f"{b:02X}" for b in v.value))
    if v.type == "ObjectIdentifier":
        return ("OID", f".{v.value!s}")
    if v.type == "Null":
        return ("NULL", "")
    if v.type in ("noSuchObject", "noSuchInstance"):
        return (v.type, "")
    words = {"Integer32": "INTEGER", "TimeTicks": "Timeticks"}
    return (words.get(v.type, v.type), str(v.value))


def assert_same(ours: Walk, theirs: dict[str, tuple[str, str]], varying: str = "-") -> None:
    """Every OID and every value the same (the time-varying column: same OIDs and type)."""
    assert sorted(ours) == sorted(theirs)
    diffs = {
        oid: (netsnmp_view(v), theirs[oid])
        for oid, v in ours.items()
        if netsnmp_view(v) != theirs[oid] and not oid.startswith(varying)
    }
    assert diffs == {}
    for oid, v in ours.items():
        if oid.startswith(varying):
            assert v.type == "Integer32" and v.value in (1, 2), (oid, v)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run with a test-sized overall guard."""
    return asyncio.run(asyncio.wait_for(coro, 60))


# --- v2c against the recordings ------------------------------------------------------------------


def test_v2c_walk_matches_snmpbulkwalk(sim: SnmpSim) -> None:
    """rPDU2 and MIB-2 of the AP8641 recording: every OID and value as net-snmp reads them."""
    roots = ["1.3.6.1.2.1", RPDU2]

    async def go() -> Walk:
        async with SnmpClient() as client:
            return await client.walk_many(v2c(sim, "apc_ap8641"), roots)

    ours = run(go())
    theirs: dict[str, tuple[str, str]] = {}
    for root in roots:
        theirs.update(snmpwalk_values(sim.endpoint, "apc_ap8641", root, max_repetitions=25))
    assert len(ours) > 2000
    assert_same(ours, theirs, VARYING)
    # every SMI type the recording has came through, typed
    types = {v.type for v in ours.values()}
    assert {"Integer32", "OctetString", "ObjectIdentifier", "IpAddress", "Counter32"} <= types
    assert {"Gauge32", "TimeTicks", "Counter64"} <= types
    # README worked example: outlet 1 draws 163 W
    assert ours[f"{OUTLET_TABLE}.1.7.1"] == Value("Integer32", 163)
    assert ours["1.3.6.1.2.1.1.2.0"] == Value("ObjectIdentifier", "1.3.6.1.4.1.318.1.3.4.6")


def test_v2c_snmpwalk_text_recording_with_null_rows(sim: SnmpSim) -> None:
    """The CyberPower capture (net-snmp text, NULL and untyped rows) served and read in full."""
    root = "1.3.6.1.4.1.3808"

    async def go() -> tuple[Walk, Walk]:
        async with SnmpClient() as client:
            t = v2c(sim, "cyberpower_pdu44005")
            walk = await client.walk(t, root)
            got = await client.get(t, ["1.3.6.1.2.1.1.3.0", "1.3.6.1.2.1.1.2.0"])
            return walk, got

    ours, got = run(go())
    assert_same(ours, snmpwalk_values(sim.endpoint, "cyberpower_pdu44005", root))
    # NULL rows are values, not the end of the walk
    assert sum(v.type == "Null" for v in ours.values()) == 11
    assert ours[f"{root}.1.1.6.3.4.1.18.1"] == Value("Gauge32", 219)  # README: 219 W
    # an untyped line in the capture is served as TimeTicks
    assert got["1.3.6.1.2.1.1.3.0"] == Value("TimeTicks", 161500)
    assert got["1.3.6.1.2.1.1.2.0"] == Value("ObjectIdentifier", "1.3.6.1.4.1.3808.1.1.6")


def test_wrong_types_minus_one_and_exceptions_come_back_as_values(sim: SnmpSim) -> None:
    """-1, a string where a number belongs, a missing row and exception values stay as read."""

    async def go() -> tuple[Walk, Walk]:
        async with SnmpClient() as client:
            t = v2c(sim, "apc_rpdu2_faulty")
            walk = await client.walk(t, OUTLET_TABLE)
            got = await client.get(
                t, [f"{OUTLET_TABLE}.1.7.4", f"{OUTLET_TABLE}.1.7.2", "1.3.6.1.2.1.99.0"]
            )
            return walk, got

    ours, got = run(go())
    col = f"{OUTLET_TABLE}.1"
    expected = {
        f"{col}.3.2": Value("OctetString", b""),
        f"{col}.3.4": Value("OctetString", b"Out\xff\x00"),
        f"{col}.6.2": Value("Integer32", -1),
        f"{col}.7.1": Value("Integer32", 163),
        f"{col}.7.2": Value("Integer32", -1),
        f"{col}.7.3": Value("OctetString", b"N/A"),
        f"{col}.11.2": Value("noSuchInstance", None),
        f"{col}.11.3": Value("Gauge32", 12),
        f"{col}.11.4": Value("Counter64", 2**64 - 1),
        f"{col}.12.1": Value("IpAddress", "10.0.1.5"),
        f"{col}.12.2": Value("Null", None),
        f"{col}.12.3": Value("noSuchObject", None),
        f"{col}.12.4": Value("Opaque", bytes.fromhex("9f780442c80000")),
        f"{col}.13.1": Value("Counter32", 2**32 - 1),
        f"{col}.13.3": Value("Integer32", -(2**31)),
        f"{col}.13.4": Value("ObjectIdentifier", "0.0"),
    }
    assert {k: ours.get(k) for k in expected} == expected
    assert f"{col}.7.4" not in ours  # the missing row stays missing
    assert len(ours) == 27
    # net-snmp ends a bulk walk after a response holding an exception value: one response
    # (-Cr50) then covers the whole table, so both readers see everything
    assert_same(
        ours, snmpwalk_values(sim.endpoint, "apc_rpdu2_faulty", OUTLET_TABLE, max_repetitions=50)
    )
    assert got == {
        f"{col}.7.4": Value("noSuchInstance", None),
        f"{col}.7.2": Value("Integer32", -1),
        "1.3.6.1.2.1.99.0": Value("noSuchInstance", None),
    }


# --- SNMPv3 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(USERS))
def test_v3_authpriv_walk_matches_snmpwalk(sim: SnmpSim, kind: str) -> None:
    """authPriv end to end; the v3 context selects the recording (snmpsim: context = file stem)."""
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    user = USERS[kind]
    auth, priv = CLIENT_PROTOCOLS[kind]

    async def go() -> Walk:
        async with SnmpClient() as client:
            return await client.walk(v3(sim.port, user, auth, priv, "apc_ap8641"), RPDU2_METERED)

    ours = run(go())
    theirs = snmpwalk_values(sim.endpoint, user.netsnmp_args("apc_ap8641"), RPDU2_METERED)
    assert len(ours) > 600
    assert_same(ours, theirs)


@pytest.mark.parametrize("wrong", ["auth_key", "priv_key"])
def test_v3_wrong_key_is_auth_error_without_secrets(
    sim: SnmpSim, wrong: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong key is reason "auth", names target and user, and leaks no key anywhere."""
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    caplog.set_level(logging.DEBUG)
    user = USERS["sha256-aes256"]
    good = v3(sim.port, user, "SHA256", "AES256", "apc_ap8641", timeout=1.0, retries=0)
    bad_key = "not-the-right-key-7"
    bad = Target(
        good.host,
        good.port,
        Auth(
            "3",
            user=user.user,
            auth_protocol="SHA256",
            auth_key=bad_key if wrong == "auth_key" else user.auth_key,
            priv_protocol="AES256",
            priv_key=bad_key if wrong == "priv_key" else user.priv_key,
            context_name="apc_ap8641",
        ),
        timeout=1.0,
        retries=0,
    )

    async def go() -> tuple[SnmpError, Walk]:
        async with SnmpClient() as client:
            with pytest.raises(SnmpError) as info:
                await client.walk(bad, OUTLET_TABLE)
            # the same client and agent work again with the right keys
            return info.value, await client.walk(good, f"{OUTLET_TABLE}.1.7")

    exc, after = run(go())
    assert exc.reason == "auth"
    assert exc.target == f"127.0.0.1:{sim.port}"
    assert f"127.0.0.1:{sim.port}" in str(exc) and user.user in str(exc)
    assert after[f"{OUTLET_TABLE}.1.7.1"] == Value("Integer32", 163)
    secrets = [bad_key, str(user.auth_key), str(user.priv_key)]
    texts = [str(exc), repr(exc), exc.detail, caplog.text, repr(bad), str(bad), repr(bad.auth)]
    assert [s for s in secrets for t in texts if s in t] == []


# --- timeouts, tooBig, garbage, loops ------------------------------------------------------------


def test_timeout_on_a_silent_port() -> None:
    """Nothing answers: reason "timeout" after about timeout * (retries + 1), v2c and v3."""
    with silent_udp_port() as port:
        for auth in (
            Auth("2c", community="public"),
            Auth("3", user="u", auth_protocol="SHA", auth_key="12345678", context_name="x"),
        ):
            target = Target("127.0.0.1", port, auth, timeout=0.5, retries=1)

            async def go(t: Target = target) -> SnmpError:
                async with SnmpClient() as client:
                    with pytest.raises(SnmpError) as info:
                        await client.walk(t, OUTLET_TABLE)
                    return info.value

            start = time.monotonic()
            exc = run(go())
            elapsed = time.monotonic() - start
            assert exc.reason == "timeout" and f"127.0.0.1:{port}" in str(exc)
            assert elapsed < 0.5 * 2 + 3.0  # generous: one timeout period, not one per halving


def test_refused_on_a_closed_port_without_waiting_for_the_timeout() -> None:
    """v2c: the ICMP port unreachable fails the request as "refused", long before its timeout.

    The timeout is far longer than the test's guard (run: 60 s), so the reason can only be
    "refused" if the ICMP error was read; a request that waited would end as "timeout".
    """
    port = closed_udp_port()
    with RawAgent(APC, "public") as agent:
        dead = Target("127.0.0.1", port, Auth("2c", community="public"), timeout=50, retries=0)

        async def go() -> tuple[SnmpError, Walk]:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await asyncio.gather(
                        client.walk(dead, OUTLET_TABLE), client.walk(v2c(agent, "public"), RPDU2)
                    )
                # the other agent on the same socket was not disturbed
                return info.value, await client.walk(v2c(agent, "public"), OUTLET_TABLE)

        exc, walk = run(go())
    assert exc.reason == "refused" and f"127.0.0.1:{port}" in str(exc), exc
    assert "public" not in str(exc)  # the community never appears in an error
    assert len(walk) > 200


def test_timeout_on_a_slow_agent() -> None:
    """An agent that answers only after 1.5 s is a timeout at 0.5 s."""
    _require_agents()
    with SnmpSim([SLOW]) as slow:
        target = v2c(slow, "apc_rpdu2_slow", timeout=0.5, retries=0)

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.walk(target, f"{OUTLET_TABLE}.1.7")
                return info.value

        exc = run(go())
        assert exc.reason == "timeout"  # had it waited for the 1.5 s answer, the walk succeeded


@pytest.mark.parametrize("fault", ["tooBig", "garbage", "silent"])
def test_bulk_fallback_to_smaller_max_repetitions(fault: str) -> None:
    """GETBULK above 5 repetitions fails; the walk still completes and the size is remembered."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    with RawAgent(APC, "public", max_bulk=5, fault=fault) as agent:
        # Only the silent agent's timeouts are the fault under test; every other answer comes
        # at once, and a short timeout would let a loaded machine turn it into a timeout too.
        target = v2c(agent, "public", timeout=1.5 if fault == "silent" else 10.0, retries=0)

        async def go() -> tuple[Walk, Walk, dict[tuple[str, int], int]]:
            async with SnmpClient() as client:
                if fault == "silent":  # a timeout shrinks GETBULK only for an agent known alive
                    await client.get(target, ["1.3.6.1.2.1.1.2.0"])
                first = await client.walk(target, OUTLET_TABLE)
                second = await client.walk(target, OUTLET_TABLE)
                return first, second, dict(client.bulk_sizes)

        first, second, sizes = run(go())
        assert sizes == {("127.0.0.1", agent.port): 3}  # 25 -> 12 -> 6 -> 3
        assert agent.stats.faults == 3
        assert agent.stats.bulk_sizes[:4] == [25, 12, 6, 3]
        # the second walk starts at 3 and never asks for more; its last GETBULK asks only for
        # what the first walk showed was left
        assert agent.stats.bulk_sizes[4] == 3 and max(agent.stats.bulk_sizes[4:]) == 3
        assert first == second
        if have_netsnmp():
            assert_same(
                first, snmpwalk_values(agent.endpoint, "public", OUTLET_TABLE, max_repetitions=5)
            )
        assert first[f"{OUTLET_TABLE}.1.7.1"] == Value("Integer32", 163)


def test_an_agent_that_died_fails_and_keeps_its_bulk_size() -> None:
    """A PDU that answered and then went away (its port now closed): refused, no halving."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")

    async def go() -> tuple[SnmpError, dict[tuple[str, int], int]]:
        async with SnmpClient() as client:
            with RawAgent(APC, "public") as agent:
                # a timeout long enough that only a refusal can end the second walk in time
                target = v2c(agent, "public", timeout=10.0, retries=0)
                assert len(await client.walk(target, OUTLET_TABLE)) > 200
            with pytest.raises(SnmpError) as info:
                await client.walk(target, OUTLET_TABLE)
            return info.value, dict(client.bulk_sizes)

    exc, sizes = run(go())
    # refused, not timeout: the kernel's answer ended it, no timeout was waited out
    assert exc.reason == "refused"  # the kernel answers for the dead agent's port
    assert sizes == {}


@pytest.mark.parametrize(("fault", "reason"), [("tooBig", "too_big"), ("garbage", "garbage")])
def test_bulk_fallback_gives_up_at_one(fault: str, reason: str) -> None:
    """An agent that fails even GETBULK with max-repetitions 1: the walk raises its reason."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    with RawAgent(APC, "public", max_bulk=0, fault=fault) as agent:

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.walk(v2c(agent, "public", timeout=10.0, retries=0), OUTLET_TABLE)
                return info.value

        exc = run(go())
        assert exc.reason == reason
        assert agent.stats.bulk_sizes == [25, 12, 6, 3, 1]
        assert f"127.0.0.1:{agent.port}" in str(exc)


def test_looping_agent_is_garbage() -> None:
    """An agent whose OIDs stop increasing ends the walk with reason "garbage", not forever."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    with RawAgent(APC, "public", loop=True) as agent:

        async def go() -> SnmpError:
            async with SnmpClient() as client:
                with pytest.raises(SnmpError) as info:
                    await client.walk(v2c(agent, "public"), "1.3.6.1.2.1.1")
                return info.value

        exc = run(go())
        assert exc.reason == "garbage"
        assert agent.stats.requests <= 2


# --- one engine, many agents ---------------------------------------------------------------------


def test_concurrent_walks_share_one_engine(sim: SnmpSim) -> None:
    """20 concurrent walks on one client: v2c and v3, two agents with one user name, two keys."""
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    pdu_b = V3User("pdu", "SHA256", "agent-b-auth", "AES256", "agent-b-priv")
    pdu_c = V3User("pdu", "SHA256", "agent-c-auth", "AES256", "agent-c-priv")
    with SnmpSim([APC], v3_users=[pdu_b]) as b, SnmpSim([APC], v3_users=[pdu_c]) as c:
        kinds = [
            v2c(sim, "apc_ap8641"),
            v3(sim.port, USERS["sha256-aes256"], "SHA256", "AES256", "apc_ap8641"),
            v3(b.port, pdu_b, "SHA256", "AES256", "apc_ap8641"),
            v3(c.port, pdu_c, "SHA256", "AES256", "apc_ap8641"),
        ]
        targets = [kinds[i % 4] for i in range(20)]

        async def go() -> tuple[list[Walk], bool]:
            async with SnmpClient() as client:
                await client.get(kinds[0], ["1.3.6.1.2.1.1.2.0"])
                await client.get(kinds[1], ["1.3.6.1.2.1.1.2.0"])
                engines, sockets = list(client._v3._engines), dict(client._v2c._transports)
                assert len(engines) == 1 and len(sockets) == 1  # v3; v2c
                walks = await asyncio.gather(*(client.walk(t, RPDU2_METERED) for t in targets))
                return list(
                    walks
                ), client._v3._engines == engines and client._v2c._transports == sockets

        walks, same_engine = run(go())
        assert same_engine
        reference = walks[0]
        assert len(reference) > 600
        assert [i for i, w in enumerate(walks) if w != reference] == []


def test_two_key_sets_of_one_user_on_one_agent_leave_each_other_alone(
    sim: SnmpSim, caplog: pytest.LogCaptureFixture
) -> None:
    """One user name on one agent, right and wrong keys in flight together: each fails alone.

    RFC 3414 holds one key set per (agent engine ID, user name) in a USM, so the second key
    set needs an engine of its own; the same keys in another v3 context do not.
    """
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    caplog.set_level(logging.DEBUG)
    user = USERS["sha256-aes256"]
    good = v3(sim.port, user, "SHA256", "AES256", "apc_ap8641", timeout=1.0, retries=0)
    bad_key = "not-the-right-key-9"
    bad = Target(good.host, good.port, dataclasses.replace(good.auth, auth_key=bad_key), 1.0, 0)
    other_context = Target(
        good.host,
        good.port,
        dataclasses.replace(good.auth, context_name="cyberpower_pdu44005"),
        1.0,
        0,
    )
    rounds = 10

    async def go() -> tuple[list[Any], int]:
        async with SnmpClient() as client:
            results = []
            for _ in range(rounds):
                # the wrong keys first: in the first round they reach the first engine first
                results += await asyncio.gather(
                    client.walk(bad, f"{OUTLET_TABLE}.1.7"),
                    client.walk(good, f"{OUTLET_TABLE}.1.7"),
                    client.get(other_context, ["1.3.6.1.2.1.1.2.0"]),
                    client.walk(bad, f"{OUTLET_TABLE}.1.7"),
                    return_exceptions=True,
                )
            return results, len(client._v3._engines)

    results, engines = run(go())
    bads = results[0::4] + results[3::4]
    goods, others = results[1::4], results[2::4]
    assert [r for r in bads if not (isinstance(r, SnmpError) and r.reason == "auth")] == []
    assert all(isinstance(g, dict) and g == goods[0] for g in goods), goods
    assert len(goods[0]) == 24 and goods[0][f"{OUTLET_TABLE}.1.7.1"] == Value("Integer32", 163)
    sys_object_ids = {str(o["1.3.6.1.2.1.1.2.0"].value) for o in others if isinstance(o, dict)}
    assert len(others) == rounds and sys_object_ids == {"1.3.6.1.4.1.3808.1.1.6"}, others
    assert engines == 2  # the right keys and the other context share one; the wrong ones
    secrets = [bad_key, str(user.auth_key), str(user.priv_key)]
    texts = [caplog.text, *(str(r) for r in bads)]
    assert [s for s in secrets for t in texts if s in t] == []


def test_ipv6_agent_over_v2c_and_v3() -> None:
    """An agent on [::1]: both paths reach it over IPv6 and read what net-snmp reads."""
    _require_agents()
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    require(socket.has_ipv6 and _ipv6_loopback(), "no IPv6 loopback on this host")
    user = USERS["sha256-aes256"]
    with SnmpSim([APC], v3_users=[user], host="::1") as sim:
        over_v2c_target = Target("::1", sim.port, Auth("2c", community="apc_ap8641"))
        over_v3_target = v3(sim.port, user, "SHA256", "AES256", "apc_ap8641")
        over_v3_target = Target("::1", sim.port, over_v3_target.auth)

        async def go() -> tuple[Walk, Walk]:
            async with SnmpClient() as client:
                return (
                    await client.walk(over_v2c_target, RPDU2_METERED),
                    await client.walk(over_v3_target, RPDU2_METERED),
                )

        over_v2c, over_v3 = run(go())
        theirs = snmpwalk_values(sim.endpoint, "apc_ap8641", RPDU2_METERED)
    assert len(over_v2c) > 600
    assert_same(over_v2c, theirs)
    assert over_v3 == over_v2c


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


# --- walk_many: subtrees side by side, sized from the last walk ---------------------------------


def _profile_roots(name: str) -> list[str]:
    from collector.site.profiles import load_profiles

    return {p.name: p for p in load_profiles()}[name].walk_roots()


def _netsnmp_union(endpoint: str, community: str, roots: list[str]) -> dict[str, tuple[str, str]]:
    theirs: dict[str, tuple[str, str]] = {}
    for root in roots:
        theirs.update(snmpwalk_values(endpoint, community, root, max_repetitions=25))
    return theirs


def test_walk_many_second_poll_asks_for_little_more_than_it_uses() -> None:
    """The apc_rpdu2 profile's 11 subtrees: the second poll walks them side by side, sized."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    roots = _profile_roots("apc_rpdu2")
    with RawAgent(APC, "public") as agent:
        target = v2c(agent, "public")

        async def go() -> tuple[Walk, Walk, int, int, int]:
            async with SnmpClient() as client:
                first = await client.walk_many(target, roots)
                n_first = agent.stats.requests
                before = client.counts()["var_binds"]
                second = await client.walk_many(target, roots)
                received = client.counts()["var_binds"] - before
                return first, second, n_first, agent.stats.requests - n_first, received

        first, second, n_first, n_second, received = run(go())
        widths = agent.stats.bulk_widths[n_first:]
        sizes = agent.stats.bulk_sizes[n_first:]
    assert first == second
    assert len(first) >= 24 * 4 + 7
    if have_netsnmp():
        with RawAgent(APC, "public") as agent:
            assert_same(first, _netsnmp_union(agent.endpoint, "public", roots))
    # no request asks for more than max-repetitions (25) var-binds in all; several subtrees
    # shared a request; and what came back is what was used plus the one var-bind past the end
    # of each subtree
    assert all(w * r <= 25 for w, r in zip(widths, sizes, strict=True))
    assert max(widths) > 1
    assert n_second < n_first
    assert received == len(second) + len(roots)


def _outlets_up_to(rows: list[tuple[tuple[int, ...], Any]], n: int) -> list[Any]:
    """The recording's rows with the rPDU2 outlet tables cut to outlets 1..n."""
    tables = (1, 3, 6, 1, 4, 1, 318, 1, 1, 26, 9)
    return [
        r for r in rows if not (r[0][: len(tables)] == tables and len(r[0]) == 16 and r[0][-1] > n)
    ]


@pytest.mark.parametrize("order", ["grows", "shrinks"])
def test_walk_many_follows_a_table_that_changes_size(order: str) -> None:
    """Sizes learned from a 6-outlet walk do not cut short a 24-outlet one, nor the reverse."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    roots = _profile_roots("apc_rpdu2")
    with RawAgent(APC, "public") as agent:
        full = list(agent.rows)
        small = _outlets_up_to(full, 6)
        before, after = (small, full) if order == "grows" else (full, small)
        target = v2c(agent, "public")

        async def walk(client: SnmpClient) -> Walk:
            return await client.walk_many(target, roots)

        async def go() -> tuple[Walk, Walk]:
            async with SnmpClient() as client:
                agent.rows = before
                await walk(client)
                await walk(client)  # now sized for `before`
                agent.rows = after
                changed = await walk(client)
            async with SnmpClient() as fresh:  # no sizes learned
                reference = await walk(fresh)
            return changed, reference

        changed, reference = run(go())
        outlets = {o.rsplit(".", 1)[1] for o in changed if o.startswith(f"{OUTLET_TABLE}.1.7.")}
        assert changed == reference
        assert len(outlets) == (24 if order == "grows" else 6)
        if have_netsnmp():
            assert_same(changed, _netsnmp_union(agent.endpoint, "public", roots))


def test_walk_many_learns_sizes_per_community(tmp_path: Any) -> None:
    """One agent, two communities with different outlet counts: each sized on its own."""
    _require_agents()
    roots = _profile_roots("apc_rpdu2")
    small = tmp_path / "small.snmprec"
    keep = []
    for line in APC.read_text(encoding="latin-1").splitlines(keepends=True):
        arcs = tuple(int(a) for a in line.split("|", 1)[0].split(".") if a.isdigit())
        if not _outlets_up_to([(arcs, None)], 6):
            continue  # an outlet row past outlet 6
        keep.append(line)
    small.write_text("".join(keep), encoding="latin-1")
    with SnmpSim({"full": APC, "small": small}) as sim:

        async def go() -> list[tuple[str, Walk, int]]:
            out = []
            async with SnmpClient() as client:
                for _ in range(3):  # interleaved, as two PDUs behind one agent are polled
                    for community in ("full", "small"):
                        before = client.counts()["var_binds"]
                        walk = await client.walk_many(v2c(sim, community), roots)
                        out.append((community, walk, client.counts()["var_binds"] - before))
            return out

        polls = run(go())
    full = [w for c, w, _ in polls if c == "full"]
    small_walks = [w for c, w, _ in polls if c == "small"]
    assert full[0] == full[1] == full[2] and small_walks[0] == small_walks[1] == small_walks[2]
    outlets = {o for o in small_walks[0] if o.startswith(f"{OUTLET_TABLE}.1.7.")}
    assert len(outlets) == 6 and len(full[0]) > len(small_walks[0])
    # from the second round on each reads only one var-bind past the end of every subtree
    for _, walk, received in polls[2:]:
        assert received == len(walk) + len(roots)


@pytest.mark.parametrize("fault", ["tooBig", "garbage"])
def test_walk_many_shrinks_side_by_side_requests_to_what_the_agent_takes(fault: str) -> None:
    """An agent failing responses of more than 10 var-binds: every poll completes, same values."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    roots = _profile_roots("apc_rpdu2")
    with RawAgent(APC, "public") as healthy:

        async def reference() -> Walk:
            async with SnmpClient() as client:
                return await client.walk_many(v2c(healthy, "public"), roots)

        expected = run(reference())
    with RawAgent(APC, "public", max_response=10, fault=fault) as agent:
        target = v2c(agent, "public", timeout=10.0, retries=0)  # every answer comes at once

        async def go() -> tuple[list[Walk], dict[tuple[str, int], int]]:
            async with SnmpClient() as client:
                walks = [await client.walk_many(target, roots) for _ in range(3)]
                return walks, dict(client.bulk_sizes)

        walks, sizes = run(go())
        faults = agent.stats.faults
    assert walks == [expected] * 3
    assert sizes == {("127.0.0.1", agent.port): 6}  # 25 -> 12 -> 6
    assert faults == 2  # the size is learned once, never failed again


def test_walk_many_survives_an_agent_that_misorders_side_by_side_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Answers laid out subtree by subtree: noticed, one subtree per request, nothing lost."""
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    roots = _profile_roots("apc_rpdu2")
    with RawAgent(APC, "public") as healthy:

        async def reference() -> Walk:
            async with SnmpClient() as client:
                return await client.walk_many(v2c(healthy, "public"), roots)

        expected = run(reference())
    with RawAgent(APC, "public", column_major=True) as agent:

        async def go() -> list[Walk]:
            async with SnmpClient() as client:
                return [await client.walk_many(v2c(agent, "public"), roots) for _ in range(3)]

        walks = run(go())
        widths = agent.stats.bulk_widths
    assert walks == [expected] * 3
    assert "not in RFC 3416 order" in caplog.text
    assert widths.count(1) < len(widths) and max(widths[-len(roots) :]) == 1


# --- every recording: the v2c path, the v3 (pysnmp) path and net-snmp agree ---------------------


def _all_recordings() -> dict[str, Any]:
    files = sorted(RECORDINGS.glob("*.snmprec")) + sorted(RECORDINGS.glob("*.snmpwalk"))
    avocent = SNMP_FIXTURES.parent / "pdu" / "avocent_pm3000.snmprec"
    return {p.stem.replace(".", "_").replace("-", "_"): p for p in [*files, avocent]}


@pytest.fixture(scope="module")
def every_recording() -> Iterator[SnmpSim]:
    """snmpsim serving every recording, over v2c (community) and v3 (context = community)."""
    _require_agents()
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES/DES")
    with SnmpSim(_all_recordings(), v3_users=[USERS["sha256-aes256"]]) as s:
        yield s


@pytest.mark.parametrize("name", list(_all_recordings()))
def test_recording_reads_alike_over_v2c_v3_and_net_snmp(
    name: str, every_recording: SnmpSim
) -> None:
    """The whole recording: wattbit's v2c codec == net-snmp == wattbit's v3 path (pysnmp)."""
    sim = every_recording
    user = USERS["sha256-aes256"]

    async def go() -> tuple[Walk, Walk]:
        async with SnmpClient() as client:
            over_v2c = await client.walk(v2c(sim, name), "1.3.6.1")
            over_v3 = await client.walk(v3(sim.port, user, "SHA256", "AES256", name), "1.3.6.1")
            return over_v2c, over_v3

    over_v2c, over_v3 = run(go())
    assert len(over_v2c) > 50
    assert_same(
        over_v2c, snmpwalk_values(sim.endpoint, name, "1.3.6.1", max_repetitions=25), VARYING
    )
    varying = {o for o in over_v2c if o.startswith(VARYING)}
    assert {o: v for o, v in over_v3.items() if o not in varying} == {
        o: v for o, v in over_v2c.items() if o not in varying
    }
    assert over_v3.keys() == over_v2c.keys()
