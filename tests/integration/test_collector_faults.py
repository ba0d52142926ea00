"""One real `wattbit collector` polling a healthy PDU next to broken ones, in the same poll.

Every agent is real: snmpsim serving recordings (healthy, slow, faulty, SNMPv3), a raw-UDP
agent answering tooBig, and a bound UDP port where nothing answers. The healthy PDU must stay
up, complete and fresh while every other one fails in its own way, lose its outlet series the
moment its agent dies and get them back when it returns on the same port.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.pdu.responder import Responder
from collector.pdu.snmprec import read_snmprec
from exporters.snmp.oid import under
from exporters.snmp.types import Value
from tests.support.env import RECORDINGS, require
from tests.support.realparts import Collector, sample, stop_process
from tests.support.snmpagents import (
    SNMP_FIXTURES,
    RawAgent,
    SnmpSim,
    V3User,
    have_netsnmp,
    have_snmpsim,
    silent_udp_port,
    snmpwalk_values,
)

APC = RECORDINGS / "apc_ap8641.snmprec"
FAULTY = SNMP_FIXTURES / "apc_rpdu2_faulty.snmprec"
SLOW = SNMP_FIXTURES / "apc_rpdu2_slow.snmprec"
OUTLET_POWER_COLUMN = "1.3.6.1.4.1.318.1.1.26.9.4.3.1.7"  # rPDU2OutletMeteredStatusPower, W
INTERVAL = 2.0
OUTLET_METRICS = (
    "wattbit_pdu_outlet_power_watts",
    "wattbit_pdu_outlet_current_amperes",
    "wattbit_pdu_outlet_voltage_volts",
    "wattbit_pdu_outlet_energy_joules_total",
)
UNIT_METRICS = (
    "wattbit_pdu_power_watts",
    "wattbit_pdu_current_amperes",
    "wattbit_pdu_voltage_volts",
    "wattbit_pdu_energy_joules_total",
)
# The agent's real user; the collector is given a wrong auth key for it.
V3 = V3User("wb-fault-v3", "SHA256", "agent-auth-Kq83zv", "AES256", "agent-priv-Pw51xr")
WRONG_AUTH_KEY = "wrong-auth-Hz27mf"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _crypto_ok() -> bool:
    try:  # pysnmp 7's AES needs cryptography >= 43 (hazmat.decrepit)
        from cryptography.hazmat.decrepit.ciphers.modes import CFB  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def _prerequisites() -> None:
    require(have_snmpsim(), "snmpsim-command-responder is not installed in this venv")
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES")


# --- reading /metrics ----------------------------------------------------------------------------


def series(s: Samples, name: str, pdu: str) -> dict[str, float]:
    """{outlet index: value} of one outlet metric of one PDU."""
    out = {}
    for (n, labels), v in s.items():
        lv = dict(labels)
        if n == name and lv.get("pdu") == pdu:
            out[lv["outlet"]] = v
    return out


def outlet_series(s: Samples, pdu: str) -> dict[tuple[str, str], float]:
    """{(metric, outlet index): value} of every outlet series of one PDU."""
    return {(n, o): v for n in OUTLET_METRICS for o, v in series(s, n, pdu).items()}


def by_reason(s: Samples, name: str, pdu: str) -> dict[str, float]:
    """{reason: count} of a counter labelled pdu and reason, for the reasons that happened.

    Every known reason is exported from 0 (test_pdu_poller); these tests look at which ones
    counted.
    """
    return {
        dict(labels)["reason"]: v
        for (n, labels), v in s.items()
        if n == name and dict(labels).get("pdu") == pdu and v > 0
    }


def new_failures(now: Samples, before: Samples, pdu: str) -> dict[str, float]:
    """{reason: failed polls} of one PDU between two scrapes."""
    was = by_reason(before, "wattbit_pdu_poll_failures_total", pdu)
    got = by_reason(now, "wattbit_pdu_poll_failures_total", pdu).items()
    return {r: n - was.get(r, 0.0) for r, n in got if n > was.get(r, 0.0)}


def ups(s: Samples) -> dict[str, float]:
    """{pdu: wattbit_pdu_up}."""
    return {dict(labels)["pdu"]: v for (n, labels), v in s.items() if n == "wattbit_pdu_up"}


def stop(collector: Collector) -> None:
    """SIGTERM, a short grace, then SIGKILL: how it shuts down is not what this file tests."""
    stop_process(collector.proc, 3)
    collector.stop()  # closes its log


def restart_on_same_port(sim: SnmpSim) -> None:
    """Start a stopped snmpsim again on its old port, with its old data and index."""
    assert sim._tmp is not None
    port = sim.port
    if not sim._launch(sim._tmp / "data", sim._tmp / "cache"):
        raise RuntimeError(f"snmpsim did not come back on port {port}: {sim.log_text()[-2000:]}")
    assert sim.port == port


def kill_hard(sim: SnmpSim) -> None:
    """SIGKILL snmpsim (a crashed agent), keeping its files for a restart."""
    assert sim._proc is not None
    sim._proc.kill()
    sim._proc.wait(5)
    sim._kill()  # closes its log; the process is already gone


# --- the mixed site ------------------------------------------------------------------------------


def pdu(name: str, port: int, auth: str, timeout: str = "0.5s") -> str:
    """One PDU target of the configuration (no retries: failures come quickly)."""
    return (
        f"  - name: {name}\n"
        f"    address: 127.0.0.1:{port}\n"
        f"    auth: {auth}\n"
        f"    timeout: {timeout}\n"
        "    retries: 0\n"
    )


@dataclass
class Site:
    """The running collector and the agents it polls."""

    collector: Collector
    healthy: SnmpSim
    v3: SnmpSim
    toobig: RawAgent


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The collector, polling six PDUs every 2 s, and the agents behind them."""
    with (
        SnmpSim([APC]) as healthy,
        SnmpSim([SLOW]) as slow,  # a delay stalls the whole responder: an snmpsim of its own
        SnmpSim([FAULTY]) as faulty,
        SnmpSim([APC], v3_users=[V3]) as v3,
        RawAgent(APC, "public", max_bulk=5, fault="tooBig") as toobig,
        silent_udp_port() as silent,
    ):
        config = (
            f"interval: {INTERVAL:g}s\n"
            "auths:\n"
            "  apc: {version: 2c, community: apc_ap8641}\n"
            "  slow: {version: 2c, community: apc_rpdu2_slow}\n"
            "  faulty: {version: 2c, community: apc_rpdu2_faulty}\n"
            "  public: {version: 2c, community: public}\n"
            "  v3wrong:\n"
            "    version: 3\n"
            f"    user: {V3.user}\n"
            "    auth_protocol: SHA256\n"
            f"    auth_key: {WRONG_AUTH_KEY}\n"
            "    priv_protocol: AES256\n"
            f"    priv_key: {V3.priv_key}\n"
            "    context_name: apc_ap8641\n"
            "pdus:\n"
            + pdu("healthy", healthy.port, "apc")
            + pdu("silent", silent, "apc")
            + pdu("slow", slow.port, "slow")
            + pdu("faulty", faulty.port, "faulty")
            + pdu("toobig", toobig.port, "public")
            + pdu("v3wrong", v3.port, "v3wrong")
        )
        collector = Collector(config, tmp_path)
        try:
            collector.wait_ready()
            yield Site(collector, healthy, v3, toobig)
        finally:
            stop(collector)


def test_healthy_pdu_stays_fresh_among_failing_ones(site: Site) -> None:
    """Timeouts, a slow agent, wrong v3 keys, broken values and tooBig next to a healthy PDU."""
    collector, healthy, v3, toobig = site.collector, site.healthy, site.v3, site.toobig
    all_pdus = {"healthy", "silent", "slow", "faulty", "toobig", "v3wrong"}
    failing = {"silent", "slow", "v3wrong"}

    def settled(s: Samples) -> bool:
        got = ups(s)
        if set(got) != all_pdus:
            return False
        reasons_seen = all(by_reason(s, "wattbit_pdu_poll_failures_total", p) for p in failing)
        return (
            got == {p: 0.0 if p in failing else 1.0 for p in all_pdus}
            and reasons_seen
            and len(series(s, "wattbit_pdu_outlet_power_watts", "toobig")) == 24
        )

    first = collector.scrape_until("every PDU polled once", settled)

    # healthy: up, 24 outlets, a quick poll, untouched by the broken neighbours
    power = series(first, "wattbit_pdu_outlet_power_watts", "healthy")
    assert sorted(power, key=int) == [str(i) for i in range(1, 25)]
    assert power["1"] == 163.0  # README worked example
    assert len(series(first, "wattbit_pdu_outlet_current_amperes", "healthy")) == 24
    assert len(series(first, "wattbit_pdu_outlet_energy_joules_total", "healthy")) == 24
    # (a first poll may miss its deadline on a busy machine: the SNMP engine starts in it)
    assert set(by_reason(first, "wattbit_pdu_poll_failures_total", "healthy")) <= {"deadline"}
    info = [dict(k[1]) for k in first if k[0] == "wattbit_pdu_info"]
    assert {i["pdu"]: i["profile"] for i in info}["healthy"] == "apc_rpdu2"
    if have_netsnmp():  # the independent reader agrees on every outlet's power
        theirs = snmpwalk_values(healthy.endpoint, "apc_ap8641", OUTLET_POWER_COLUMN)
        assert power == {oid.rsplit(".", 1)[1]: float(v) for oid, (_, v) in theirs.items()}

    # silent port and slow agent: down, "timeout" (or the poll's own deadline)
    for name in ("silent", "slow"):
        reasons = by_reason(first, "wattbit_pdu_poll_failures_total", name)
        assert set(reasons) <= {"timeout", "deadline"} and sum(reasons.values()) >= 1, (
            name,
            reasons,
        )
        assert outlet_series(first, name) == {}

    # wrong SNMPv3 auth key: down, "auth"; the log names agent and user, never a key
    v3_reasons = set(by_reason(first, "wattbit_pdu_poll_failures_total", "v3wrong"))
    assert "auth" in v3_reasons and v3_reasons <= {"auth", "deadline"}, v3_reasons
    assert outlet_series(first, "v3wrong") == {}
    log = collector.log.read_text()
    auth_lines = [line for line in log.splitlines() if "pdu v3wrong" in line and "auth" in line]
    assert auth_lines, log
    assert any(f"127.0.0.1:{v3.port}" in line and V3.user in line for line in auth_lines), log

    # faulty values: up, every broken value counted by reason, none exported
    assert sample(first, "wattbit_pdu_up", pdu="faulty") == 1.0
    invalid = by_reason(first, "wattbit_pdu_invalid_values_total", "faulty")
    assert all(invalid.get(r, 0) > 0 for r in ("negative", "no_such", "wrong_type")), invalid
    got = outlet_series(first, "faulty")
    assert all(v >= 0 for v in got.values()), got
    assert {o for _, o in got} == {"1", "3", "4"}  # row 2 is -1, -1, noSuchInstance: no series
    assert series(first, "wattbit_pdu_outlet_power_watts", "faulty") == {"1": 163.0}  # N/A, gap
    assert series(first, "wattbit_pdu_outlet_current_amperes", "faulty") == pytest.approx(
        {"1": 0.9, "3": 0.5, "4": 0.7}
    )

    # tooBig: up, the client shrank its GETBULKs, every outlet as the healthy PDU reads it
    assert sample(first, "wattbit_pdu_up", pdu="toobig") == 1.0
    # (detection's probe asks for one row per signature column; the walk then starts at 25)
    walk_sizes = [n for n in toobig.stats.bulk_sizes if n > 1]
    assert toobig.stats.faults >= 1 and walk_sizes[0] == 25, toobig.stats.bulk_sizes[:10]
    assert max(toobig.stats.bulk_sizes[-5:]) <= 5  # later GETBULKs start at the size that works
    assert outlet_series(first, "toobig") == outlet_series(first, "healthy")
    assert set(by_reason(first, "wattbit_pdu_poll_failures_total", "toobig")) <= {"deadline"}

    # fresh: polled again one interval later (a new duration), still complete
    def repolled(s: Samples) -> bool:
        now = sample(s, "wattbit_pdu_poll_duration_seconds", pdu="healthy")
        return now != sample(first, "wattbit_pdu_poll_duration_seconds", pdu="healthy")

    second = collector.scrape_until("healthy PDU polled again", repolled, timeout=3 * INTERVAL)
    assert sample(second, "wattbit_pdu_up", pdu="healthy") == 1.0
    assert outlet_series(second, "healthy") == outlet_series(first, "healthy")
    assert new_failures(second, first, "healthy") == {}
    assert new_failures(second, first, "toobig") == {}
    assert new_failures(second, first, "faulty") == {}

    # keep seeing the failures; the silent one keeps failing every interval
    third = collector.scrape_until(
        "silent PDU failing on every poll",
        lambda s: (
            sum(by_reason(s, "wattbit_pdu_poll_failures_total", "silent").values())
            > sum(by_reason(first, "wattbit_pdu_poll_failures_total", "silent").values())
        ),
        timeout=3 * INTERVAL,
    )
    assert sample(third, "wattbit_pdu_up", pdu="silent") == 0.0

    # the secrets of the v3 target are in no log line
    log = collector.log.read_text()
    assert WRONG_AUTH_KEY not in log
    assert str(V3.auth_key) not in log and str(V3.priv_key) not in log

    # the healthy agent dies: at its next poll it is down and its outlets are gone, not stale.
    # It dies between two polls, as soon as one has finished: a poll still waiting for its
    # answer when the agent dies would rightly end in "timeout", not "refused".
    just_polled = sample(third, "wattbit_pdu_poll_duration_seconds", pdu="healthy")
    collector.scrape_until(
        "healthy PDU polled once more",
        lambda s: sample(s, "wattbit_pdu_poll_duration_seconds", pdu="healthy") != just_polled,
        timeout=3 * INTERVAL,
    )
    kill_hard(healthy)
    down = collector.scrape_until(
        "healthy PDU down after its agent died",
        lambda s: sample(s, "wattbit_pdu_up", pdu="healthy") == 0.0,
        timeout=3 * INTERVAL,
    )
    assert outlet_series(down, "healthy") == {}
    assert all(sample(down, m, pdu="healthy") == 0.0 for m in UNIT_METRICS)
    assert ("wattbit_pdu_power_watts", (("pdu", "healthy"),)) not in down
    assert not [k for k in down if k[0] == "wattbit_pdu_info" and ("pdu", "healthy") in k[1]]
    # its port is closed now, so the kernel answers ICMP port unreachable: "refused" at once
    assert set(new_failures(down, second, "healthy")) == {"refused"}
    # the others are untouched by it
    assert sample(down, "wattbit_pdu_up", pdu="toobig") == 1.0
    assert sample(down, "wattbit_pdu_up", pdu="faulty") == 1.0
    assert outlet_series(down, "toobig") == outlet_series(first, "healthy")
    later = collector.scrape_until(
        "healthy PDU still down one interval later",
        lambda s: (
            sum(by_reason(s, "wattbit_pdu_poll_failures_total", "healthy").values())
            > sum(by_reason(down, "wattbit_pdu_poll_failures_total", "healthy").values())
        ),
        timeout=3 * INTERVAL,
    )
    assert sample(later, "wattbit_pdu_up", pdu="healthy") == 0.0
    assert outlet_series(later, "healthy") == {}

    # back on the same port: up again with all its outlets and the same values
    restart_on_same_port(healthy)
    back = collector.scrape_until(
        "healthy PDU back",
        lambda s: (
            sample(s, "wattbit_pdu_up", pdu="healthy") == 1.0
            and len(series(s, "wattbit_pdu_outlet_power_watts", "healthy")) == 24
        ),
        timeout=3 * INTERVAL + 1.0,
    )
    assert outlet_series(back, "healthy") == outlet_series(first, "healthy")
    assert "pdu healthy: answering again" in collector.log.read_text()


# --- SNMPv3 authPriv end to end ------------------------------------------------------------------


def test_v3_authpriv_reads_what_v2c_reads(tmp_path: Path) -> None:
    """SHA-256 + AES-256 through the collector: every outlet and unit value equals v2c's."""
    # snmpsim's AES256 is the Reeder key extension, the collector's AES256 Blumenthal's: with
    # SHA-256 the localized key is already 32 bytes long, so both derive the same AES key.
    user = V3User("wb-e2e-v3", "SHA256", "e2e-auth-Tn40qa", "AES256", "e2e-priv-Jd62uc")
    with SnmpSim([APC], v3_users=[user]) as sim:
        config = (
            "interval: 2s\n"
            "auths:\n"
            "  v2c: {version: 2c, community: apc_ap8641}\n"
            "  v3:\n"
            "    version: 3\n"
            f"    user: {user.user}\n"
            "    auth_protocol: SHA256\n"
            f"    auth_key: {user.auth_key}\n"
            "    priv_protocol: AES256\n"
            f"    priv_key: {user.priv_key}\n"
            "    context_name: apc_ap8641\n"  # snmpsim: the recording's file stem
            "pdus:\n"
            + pdu("over-v2c", sim.port, "v2c", "2s")
            + pdu("over-v3", sim.port, "v3", "2s")
        )
        collector = Collector(config, tmp_path)
        try:
            collector.wait_ready()
            s = collector.scrape_until(
                "both PDUs read",
                lambda s: (
                    ups(s) == {"over-v2c": 1.0, "over-v3": 1.0}
                    and len(series(s, "wattbit_pdu_outlet_power_watts", "over-v3")) == 24
                    and len(series(s, "wattbit_pdu_outlet_power_watts", "over-v2c")) == 24
                ),
            )
        finally:
            stop(collector)
        v2c_power = series(s, "wattbit_pdu_outlet_power_watts", "over-v2c")
        if have_netsnmp():  # independent: net-snmp over v2c from the same recording
            theirs = snmpwalk_values(sim.endpoint, "apc_ap8641", OUTLET_POWER_COLUMN)
            assert v2c_power == {oid.rsplit(".", 1)[1]: float(v) for oid, (_, v) in theirs.items()}
            theirs_v3 = snmpwalk_values(
                sim.endpoint, user.netsnmp_args("apc_ap8641"), OUTLET_POWER_COLUMN
            )
            assert theirs_v3 == theirs

    v3_outlets = outlet_series(s, "over-v3")
    assert len(v3_outlets) == 3 * 24  # power, current, energy (rPDU2 has no outlet voltage)
    assert v3_outlets == outlet_series(s, "over-v2c")
    for m in UNIT_METRICS:
        assert sample(s, m, pdu="over-v3") == sample(s, m, pdu="over-v2c"), m
    assert ("wattbit_pdu_power_watts", (("pdu", "over-v3"),)) in s

    def info(name: str) -> dict[str, str]:
        (labels,) = [dict(k[1]) for k in s if k[0] == "wattbit_pdu_info" and ("pdu", name) in k[1]]
        return {k: v for k, v in labels.items() if k != "pdu"}

    assert info("over-v3") == info("over-v2c")
    assert info("over-v3")["model"] == "AP8641"
    names = {
        dict(k[1])["outlet"]: dict(k[1])["outlet_name"]
        for k in s
        if k[0] == "wattbit_pdu_outlet_power_watts"
    }
    assert len(names) == 24
    assert set(by_reason(s, "wattbit_pdu_poll_failures_total", "over-v3")) <= {"deadline"}
    log = collector.log.read_text()
    assert str(user.auth_key) not in log and str(user.priv_key) not in log


def test_wrong_keys_on_one_pdu_leave_another_on_the_same_agent_alone(tmp_path: Path) -> None:
    """Two PDUs on one agent and one v3 user, one with a wrong auth key: only that one fails.

    One USM holds one key set per (agent engine ID, user name) (RFC 3414 section 5), so the
    client keeps the second key set in an engine of its own; before, the two replaced each
    other in one row and the right keys failed on some polls.
    """
    user = V3User("wb-shared-v3", "SHA256", "shared-auth-Lm29pe", "AES256", "shared-priv-Rc84tw")

    def v3(auth_key: str) -> str:
        return (
            f"    version: 3\n    user: {user.user}\n"
            f"    auth_protocol: SHA256\n    auth_key: {auth_key}\n"
            f"    priv_protocol: AES256\n    priv_key: {user.priv_key}\n"
            "    context_name: apc_ap8641\n"
        )

    def wrong_failures(s: Samples) -> float:
        return sum(by_reason(s, "wattbit_pdu_poll_failures_total", "wrong").values())

    with SnmpSim([APC], v3_users=[user]) as sim:
        config = (
            f"interval: {INTERVAL:g}s\nauths:\n"
            f"  right:\n{v3(str(user.auth_key))}"
            f"  wrong:\n{v3(WRONG_AUTH_KEY)}"
            "pdus:\n" + pdu("right", sim.port, "right") + pdu("wrong", sim.port, "wrong")
        )
        collector = Collector(config, tmp_path)
        seen: list[Samples] = []  # every scrape once both PDUs were polled

        def three_wrong_polls(s: Samples) -> bool:
            if set(ups(s)) == {"right", "wrong"}:
                seen.append(s)
            return wrong_failures(s) >= 3

        try:
            collector.wait_ready()
            # a scrape every 0.2 s sees each 2 s poll's outcome; 3 polls of each PDU
            s = collector.scrape_until(
                "three polls of the PDU with the wrong keys", three_wrong_polls
            )
            log = collector.log.read_text()
        finally:
            stop(collector)

    # the right keys: up on every poll (its failure counter covers polls between scrapes)
    assert seen and all(sample(x, "wattbit_pdu_up", pdu="right") == 1.0 for x in seen)
    assert by_reason(s, "wattbit_pdu_poll_failures_total", "right") == {}
    assert all(len(series(x, "wattbit_pdu_outlet_power_watts", "right")) == 24 for x in seen)
    assert series(s, "wattbit_pdu_outlet_power_watts", "right")["1"] == 163.0
    assert "pdu right: poll failed" not in log
    # the wrong keys: down on every poll, for "auth" only, with no outlet series
    assert all(sample(x, "wattbit_pdu_up", pdu="wrong") == 0.0 for x in seen)
    assert set(by_reason(s, "wattbit_pdu_poll_failures_total", "wrong")) == {"auth"}
    assert outlet_series(s, "wrong") == {}
    auth_lines = [line for line in log.splitlines() if "pdu wrong: poll failed (auth)" in line]
    assert any(f"127.0.0.1:{sim.port}" in line and user.user in line for line in auth_lines), log
    # no secret of either in the log
    assert WRONG_AUTH_KEY not in log
    assert str(user.auth_key) not in log and str(user.priv_key) not in log


# --- limits on what one PDU may send --------------------------------------------------------------


def _with_outlets(n: int) -> dict[str, Value]:
    """The AP8641 recording claiming n outlets: outlet 1's metered row copied to 2..n."""
    walk = dict(read_snmprec(APC))
    entry = "1.3.6.1.4.1.318.1.1.26.9.4.3.1"
    columns = {oid.rsplit(".", 1)[0] for oid in walk if under(oid, entry)}
    first = {col: walk[f"{col}.1"] for col in columns if f"{col}.1" in walk}
    for i in range(25, n + 1):
        for col, value in first.items():
            walk[f"{col}.{i}"] = value
    return walk


def test_a_pdu_claiming_thousands_of_outlets_is_bounded(tmp_path: Path) -> None:
    """max_outlets caps one PDU's series, max_var_binds its walk; the healthy PDU never notices.

    Was: a PDU claiming 20,000 outlets gave 60,000 series, a 6.6 MB /metrics and 188 MB RSS.
    """
    with (
        Responder(read_snmprec(APC), "public") as healthy,
        Responder(_with_outlets(2_000), "public") as wide,
        Responder(_with_outlets(20_000), "public") as flood,
    ):
        config = (
            # A poll's deadline is its interval: 20 s lets the 2,000-outlet walk finish on a
            # loaded machine too (5 s missed it there); what is asserted is counts, not time.
            "interval: 20s\n"
            "auths:\n"
            "  public: {version: 2c, community: public}\n"
            "pdus:\n"
            + pdu("healthy", healthy.port, "public")
            + pdu("wide", wide.port, "public", timeout="2s")
            + "    max_outlets: 100\n"
            + "    max_repetitions: 500\n"
            + pdu("flood", flood.port, "public", timeout="2s")
            + "    max_repetitions: 500\n"
        )
        collector = Collector(config, tmp_path)
        try:
            collector.wait_ready()
            s = collector.scrape_until(
                "every PDU polled once",
                lambda s: (
                    len(ups(s)) == 3
                    and by_reason(s, "wattbit_pdu_invalid_values_total", "wide").get(
                        "over_limit", 0
                    )
                    > 0
                    and "over_limit" in by_reason(s, "wattbit_pdu_poll_failures_total", "flood")
                ),
                timeout=120,
            )
            text = collector.scrape_text()
        finally:
            stop(collector)
    assert ups(s) == {"healthy": 1.0, "wide": 1.0, "flood": 0.0}
    assert len(series(s, "wattbit_pdu_outlet_power_watts", "healthy")) == 24
    wide_power = series(s, "wattbit_pdu_outlet_power_watts", "wide")
    assert sorted(wide_power, key=int) == [str(i) for i in range(1, 101)]
    # 1,900 outlets x 3 values (current, power, energy) not read, per poll
    over = by_reason(s, "wattbit_pdu_invalid_values_total", "wide")["over_limit"]
    assert over % (1_900 * 3) == 0
    assert outlet_series(s, "flood") == {}
    assert len(text) < 200_000  # was 6.6 MB for the 20,000-outlet PDU alone
