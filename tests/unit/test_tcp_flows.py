"""The flow table: every byte counted once across socket churn, bounded keys, top-K and other."""

from __future__ import annotations

import random

from exporters.tcp.flows import CLOSE_LINGER_SAMPLES, FlowTable, Graveyard, Key, Sock

OTHER: Key = ("other", "other", "", "", "", "")


def key(peer: str, port: str = "5201") -> Key:
    return (peer, port, "", "", "", "")


def sock(cookie: int, k: Key, acked: int, received: int = 0, **more: int) -> Sock:
    info = {"bytes_acked": acked, "bytes_received": received, "data_segs_out": 0}
    info |= {"total_retrans": 0, "busy_time": 0, "rwnd_limited": 0, "sndbuf_limited": 0}
    info |= {"rtt": 1000, "snd_cwnd": 10, "snd_mss": 1448} | more
    return Sock(
        cookie=cookie, key=k, info=info, rcvbuf=1000, sndbuf=2000, cong="cubic", inode=cookie
    )


def total(t: FlowTable, i: int = 0) -> float:
    """A counter summed over every key and other, with the keys that left the top-K."""
    return sum(v[i] for v in t.totals.values()) + t.retired[i]


def test_baseline_then_growth_then_close_with_destroy() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.1")
    t.sample([sock(1, a, 1000)], [], now=0, tracking=True)
    assert total(t) == 0  # the first sample's past is not ours
    t.sample([sock(1, a, 5000)], [], now=5, tracking=True)
    assert total(t) == 4000
    # closed between samples: the destroy message's final figures count from the last seen
    t.sample([], [sock(1, a, 9000)], now=10, tracking=True)
    assert total(t) == 8000
    assert sum(t.closed.values()) == 1
    # a repeated destroy message for it counts nothing
    t.sample([], [sock(1, a, 9000)], now=15, tracking=True)
    assert total(t) == 8000


def test_born_and_closed_between_samples_counts_in_full() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    t.sample([], [], now=0, tracking=True)
    t.sample([], [sock(7, key("10.0.0.2"), 3000, 500)], now=5, tracking=True)
    assert total(t, 0) == 3000 and total(t, 1) == 500


def test_destroy_message_after_the_dump_missed_it() -> None:
    """Absent from a dump, the socket waits for its message; counted once from its last figures."""
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.3")
    t.sample([sock(1, a, 100)], [], now=0, tracking=True)
    t.sample([sock(1, a, 600)], [], now=5, tracking=True)
    t.sample([], [], now=10, tracking=True)  # gone, no message yet
    assert total(t) == 500
    t.sample([], [sock(1, a, 900)], now=15, tracking=True)
    assert total(t) == 800
    assert sum(n for (_k, f), n in t.closed.items() if f == "seen") == 1


def test_a_message_too_late_is_not_counted_again() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.4")
    t.sample([sock(1, a, 0)], [], now=0, tracking=True)
    t.sample([sock(1, a, 100)], [], now=1, tracking=True)
    for i in range(CLOSE_LINGER_SAMPLES + 1):
        t.sample([], [], now=2 + i, tracking=True)
    assert sum(n for (_k, f), n in t.closed.items() if f == "unseen") == 1
    t.sample([], [sock(1, a, 5000)], now=100, tracking=True)
    assert total(t) == 100  # given up on: its late figures are not counted (never twice)


def test_without_destroy_messages_closes_are_unseen() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.5")
    t.sample([sock(1, a, 0)], [], now=0, tracking=False)
    t.sample([sock(1, a, 100)], [], now=1, tracking=False)
    t.sample([], [], now=2, tracking=False)
    assert total(t) == 100
    assert sum(n for (_k, f), n in t.closed.items() if f == "unseen") == 1


def test_u32_counters_wrap() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.6")
    t.sample([sock(1, a, 0, total_retrans=(1 << 32) - 5)], [], now=0, tracking=True)
    t.sample([sock(1, a, 0, total_retrans=3)], [], now=1, tracking=True)
    assert total(t, 3) == 8
    # a u64 counter never goes back (a reused cookie cannot make it negative)
    t.sample([sock(1, a, 0, total_retrans=3, busy_time=10)], [], now=2, tracking=True)
    t.sample([sock(1, a, 0, total_retrans=3, busy_time=4)], [], now=3, tracking=True)
    assert total(t, 4) == 10  # µs


def test_ten_thousand_peers_give_top_k_plus_other() -> None:
    t = FlowTable(top_k=20, other=OTHER)
    socks = [sock(i, key(f"10.{i >> 8}.{i & 255}.1"), 0) for i in range(10_000)]
    t.sample(socks, [], now=0, tracking=True)
    rnd = random.Random(1)
    grown = [sock(s.cookie, s.key, rnd.randrange(1, 10**6)) for s in socks]
    t.sample(grown, [], now=5, tracking=True)
    assert len(t.totals) <= 21 and OTHER in t.totals
    snap = t.sample(grown, [], now=10, tracking=True)
    assert len(snap.gauges) <= 21 and snap.keys == 10_000 and snap.sockets == 10_000
    assert total(t) == sum(s.info["bytes_acked"] for s in grown)


def test_conservation_under_random_churn() -> None:
    """Whatever opens, grows and closes, the sum over keys equals what the sockets moved."""
    rnd = random.Random(31)
    t = FlowTable(top_k=3, other=OTHER)
    live: dict[int, Sock] = {}
    moved = 0
    next_cookie = 1
    pending: list[Sock] = []  # destroy messages not yet drained
    for step in range(300):
        for _ in range(rnd.randint(0, 4)):  # open
            k = key(f"10.0.0.{rnd.randrange(12)}", str(rnd.choice((22, 443, 5201))))
            born = 0 if step == 0 else rnd.randrange(0, 1000)
            live[next_cookie] = sock(next_cookie, k, born)
            moved += born if step else 0
            next_cookie += 1
        for s in live.values():  # grow
            d = rnd.randrange(0, 5000)
            s.info["bytes_acked"] += d
            moved += d if step else 0
        closing = [c for c in live if rnd.random() < 0.1]
        for c in closing:  # close: a final growth seen only by the destroy message
            s = live.pop(c)
            d = rnd.randrange(0, 3000)
            final = sock(c, s.key, s.info["bytes_acked"] + d)
            moved += d if step else 0
            pending.append(final)
        # a message arrives now or a sample later (after the dump that missed its socket); at
        # the first sample, now (the listener is bound before it: a close queues its message)
        now_msgs = [m for m in pending if step == 0 or rnd.random() < 0.5]
        pending = [m for m in pending if m not in now_msgs]
        t.sample([sock(s.cookie, s.key, s.info["bytes_acked"]) for s in live.values()],
                 now_msgs, now=step * 5.0, tracking=True)  # fmt: skip
        assert len(t.totals) <= 4
    t.sample([sock(s.cookie, s.key, s.info["bytes_acked"]) for s in live.values()], pending,
             now=2000.0, tracking=True)  # fmt: skip
    assert total(t) == moved


def test_hysteresis_keeps_similar_keys_from_swapping() -> None:
    t = FlowTable(top_k=1, other=OTHER)
    a, b = key("10.0.0.1"), key("10.0.0.2")
    t.sample([sock(1, a, 0), sock(2, b, 0)], [], now=0, tracking=True)
    t.sample([sock(1, a, 1000), sock(2, b, 900)], [], now=1, tracking=True)
    assert t.exported == {a}
    t.sample([sock(1, a, 2000), sock(2, b, 2050)], [], now=2, tracking=True)
    assert t.exported == {a}  # b is ahead, not by half again
    t.sample([sock(1, a, 2000), sock(2, b, 9000)], [], now=3, tracking=True)
    assert t.exported == {b} and a not in t.totals


def test_a_key_enters_with_its_sample() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.1")
    t.sample([sock(1, a, 0)], [], now=0, tracking=True)
    t.sample([sock(1, a, 700)], [], now=1, tracking=True)
    assert t.totals[a][0] == 700 and t.totals[OTHER][0] == 0
    t.sample([sock(1, a, 1000)], [], now=2, tracking=True)
    assert t.totals[a][0] == 1000


def test_gauges() -> None:
    t = FlowTable(top_k=5, other=OTHER)
    a = key("10.0.0.1")
    idle = sock(2, a, 0, rtt=9000)
    t.sample([sock(1, a, 0), idle], [], now=0, tracking=True)
    t.sample([sock(1, a, 10), idle], [], now=1, tracking=True)
    snap = t.sample(
        [sock(1, a, 20, rtt=2000, min_rtt=1500, delivery_rate=10**6, snd_wnd=4096), idle],
        [], now=2, tracking=True,
    )  # fmt: skip
    g = snap.gauges[a]
    assert g.sockets == 2 and g.srtt() == 0.002  # the active socket's only
    assert g.min_rtt == 0.0015 and g.delivery_rate == 10**6
    assert g.cwnd == 2 * 10 * 1448 and g.snd_wnd == 4096 and g.rcv_wnd is None
    assert g.busiest_inode == 1 and g.algorithms == {"cubic"} and g.rcvbuf == 2000


def test_graveyard_remembers_the_last_size_cookies_and_at_most_twice_that() -> None:
    g = Graveyard(size=100)
    for cookie in range(1, 1001):
        g.add(cookie)
        assert len(g) <= 200
        # every one of the last 100 buried is remembered, whatever the moment
        assert all(c in g for c in range(max(1, cookie - 99), cookie + 1))
    assert 1 not in g and 700 not in g


def test_microsecond_counters_render_at_their_shortest_digits() -> None:
    """Every whole number of µs renders as the decimal it is (116000 µs is 0.116, not
    0.11599999999999999 as a factor of 1e-6 gives): a long-term store keeping ~12 digits then
    holds the value Prometheus holds (docs/longterm-store.md, quirk 7)."""
    from exporters.tcp.exporter import render_flows
    from exporters.tcp.flows import COUNTERS, KeyGauges, Snapshot

    key: Key = ("10.0.0.2", "5201", "", "", "", "")
    busy = next(n for n, (f, _, _) in enumerate(COUNTERS) if f == "busy_time")
    for us in (116000, 4352000, 1, 999_999_999_999, *random.Random(7).sample(range(10**9), 500)):
        totals = [0] * len(COUNTERS)
        totals[busy] = us
        snap = Snapshot({key: totals}, {key: KeyGauges()}, {}, 1, 1)
        fam = next(f for f in render_flows(snap, {}) if f.name == "wattbit_tcp_flow_busy_seconds")
        (sample,) = fam.samples
        assert repr(sample.value) == repr(float(f"{us // 10**6}.{us % 10**6:06d}")), us
