"""The verdict learns TCP (issue 31): per flow key the share of its busy time limited by the
receive window or the send buffer, congestion, application-limited keys, the receiving
process's core; the transfers section's energy split; and the bandwidth-delay arithmetic on
`ss -tin` captured from real internet paths (tests/fixtures/ss/README.md: this kernel has no
netem, so delay cannot be emulated here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collector.report.document import HostScope
from collector.report.series import NIC, Grid, PerSeries, Track, VerdictData
from collector.report.transfers import active_energy, transfers
from collector.report.verdict import tcp, usage, verdict

N = 10
GRID = Grid.make(0.0, 10.0 * N, 10.0)
H = "dtn1"
KEY = {"host": H, "peer": "10.1.2.0/24", "port": "5201", "cgroup": "", "process": "",
       "experiment": "", "activity": ""}  # fmt: skip
SUBJ = "peer=10.1.2.0/24,port=5201"
SS = Path(__file__).parent.parent / "fixtures" / "ss" / "ss-tin-unix-stackexchange-542712.txt"


def _nic(rx: float, tx: float) -> list[Track]:
    return [
        Track(NIC, {"host": H, "interface": "eth0", "direction": d}, rates=[v] * N)
        for d, v in (("rx", rx), ("tx", tx))
    ]


def _flow(
    busy: float, rwnd: float, sndbuf: float, sent: float, received: float = 1e5,
    retrans: float = 0.0, segs: float = 1e5, labels: dict[str, str] | None = None,
) -> dict[str, PerSeries]:  # fmt: skip
    lab = labels or KEY
    vals = {"flow_busy": busy, "flow_rwnd": rwnd, "flow_sndbuf": sndbuf, "flow_sent": sent,
            "flow_received": received, "flow_retrans": retrans, "flow_segs": segs}  # fmt: skip
    return {k: [(dict(lab), [v] * N)] for k, v in vals.items()}


def _data(rates: dict[str, PerSeries], srtt: float = 0.048, **kw: object) -> VerdictData:
    gauges = {
        "sockets": {(H, SUBJ): [1.0] * N},
        "srtt": {(H, SUBJ): [srtt] * N},
        "send_window": {(H, SUBJ): [3e6] * N},
        "send_buffer": {(H, SUBJ): [4 * 2**20] * N},
    }
    return VerdictData(
        nic_speed={(H, "eth0"): [1.25e9] * N},
        rates=rates,
        flow_gauges=gauges,
        **kw,  # type: ignore[arg-type]
    )


def _verdict(data: VerdictData, tracks: list[Track] | None = None):  # type: ignore[no-untyped-def]
    u = usage(GRID, tracks if tracks is not None else _nic(1e5, 6e7), data)
    return u, verdict(u, H, range(N))


def test_receive_window_with_its_arithmetic() -> None:
    """Busy all the time, window-limited 93 % of it at 48 ms: tcp, receive_window, the key;
    the evidence gives the advertised window against 10 Gbit/s × 48 ms = 60 MB."""
    _u, lb = _verdict(_data(_flow(1.0, 0.93, 0.0, 6e7)))
    assert (lb.resource, lb.subject, lb.cause) == ("tcp", SUBJ, "receive_window")
    assert lb.utilisation == 1.0  # half the busy time waiting is a utilisation of 1

    assert lb.evidence.startswith(
        "TCP receive window: flows to 10.1.2.0/24 port 5201 were window-limited 93 % of their "
        "busy time at 48 ms RTT; the receiver advertised 3 MB, below bandwidth × RTT = 60 MB "
        "(10 Gbit/s × 48 ms)"
    )
    assert lb.evidence.endswith(": window-bound (TCP receive window)")
    assert lb.to_json()["cause"] == "receive_window"


def test_window_share_against_half_the_busy_time() -> None:
    """40 % of busy time window-limited is a utilisation of 0.8 (against the alert's 50 %);
    20 % is 0.4, below the line: none."""
    _u, lb = _verdict(_data(_flow(1.0, 0.4, 0.0, 6e7)))
    assert (lb.resource, lb.utilisation) == ("tcp", pytest.approx(0.8))
    assert "window-limited 40 % of their busy time" in lb.evidence
    _u, lb = _verdict(_data(_flow(1.0, 0.2, 0.0, 6e7)))
    assert lb.resource == "none" and lb.utilisation == pytest.approx(0.4)


def test_send_buffer() -> None:
    """Send-buffer-limited 85 % of busy time: its send buffer and tcp_wmem max against BDP."""
    data = _data(_flow(1.0, 0.05, 0.85, 6e7), buffers={H: {"net.ipv4.tcp_wmem": 4 * 2**20}})
    _u, lb = _verdict(data)
    assert (lb.resource, lb.subject, lb.cause) == ("tcp", SUBJ, "send_buffer")
    assert "its send buffer 4 MiB (tcp_wmem max 4 MiB) is below bandwidth × RTT = 60 MB" in (
        lb.evidence
    )


def test_congestion() -> None:
    """2 % of segments retransmitted, neither window nor buffer: congestion, cwnd-limited."""
    _u, lb = _verdict(_data(_flow(1.0, 0.0, 0.0, 6e7, retrans=2e3, segs=1e5)))
    assert (lb.resource, lb.cause, lb.utilisation) == ("tcp", "congestion", 1.0)
    assert "retransmitted 2 % of their segments" in lb.evidence
    assert "cwnd-limited 100 % of their busy time" in lb.evidence


def test_application_limited_names_no_tcp() -> None:
    """A sender busy 5 % of the time sat waiting for data: none, and the evidence says so."""
    _u, lb = _verdict(_data(_flow(0.05, 0.05, 0.0, 6e7)))
    assert lb.resource == "none" and lb.cause is None
    assert "TCP application-limited: flows to 10.1.2.0/24 port 5201 busy 5 % of the time" in (
        lb.evidence
    )
    assert "the limit is upstream" in lb.evidence


def test_a_receiving_key_is_judged_at_its_sender() -> None:
    """A key that mostly receives says nothing of TCP's limits here: not tcp."""
    _u, lb = _verdict(_data(_flow(0.0, 0.0, 0.0, 1e5, received=6e7)))
    assert lb.resource == "none"


def test_cpu_names_the_receiving_process_core() -> None:
    """CPU 1 busy 99 % taking the NIC's interrupts, the receiving iperf3 on it: cpu, CPU 1,
    and the evidence names the process and its key."""
    busy = {"1": [0.99] * N}
    rates = _flow(0.0, 0.0, 0.0, 1e5, received=6e7)
    rates["node_cpu"] = [({"host": H, "cpu": c, "mode": "idle"}, [1 - v for v in b])
                         for c, b in busy.items()]  # fmt: skip
    rates["nic_irqs"] = [({"host": H, "cpu": "1", "irq": "40"}, [1e3] * N)]
    data = _data(rates, flow_process={(H, SUBJ): ("iperf3", "1")})
    _u, lb = _verdict(data, _nic(6e7, 1e5))
    assert (lb.resource, lb.subject) == ("cpu", "1")
    assert "where iperf3 (flows to 10.1.2.0/24 port 5201, receiving) runs" in lb.evidence


def test_subject_and_words() -> None:
    """The flow key's subject puts SciTags first; the top-K's rest is "other"."""
    lab = {"peer": "2001:db8::/48", "experiment": "2", "activity": "5", "cgroup": "x.service"}
    assert tcp.subject(lab) == "experiment=2,activity=5,peer=2001:db8::/48,cgroup=x.service"
    assert tcp.words(tcp.subject(lab)) == (
        "flows experiment 2 activity 5 to 2001:db8::/48 (x.service)"
    )
    other = dict.fromkeys(("peer", "port", "cgroup", "process", "experiment", "activity"), "other")
    assert tcp.subject(other) == "other"


def _host(energy: float | None, idle: float | None) -> HostScope:
    base = dict.fromkeys(
        ("bytes_tx", "bytes_rx", "gigabits", "gbit_per_second_mean", "gbit_per_second_peak",
         "watts_mean", "watts_peak", "joules_per_gigabit", "marginal_joules_per_gigabit",
         "r_squared", "pearson_r", "lag_seconds", "pearson_r_at_lag", "coverage",
         "idle_watts_source"),
    )  # fmt: skip
    return HostScope(
        **base, duration_seconds=100.0, energy_joules=energy, energy_source="power",
        idle_watts=idle, idle_steps=0, fit_points=0, coverage_sources={}, interfaces=[],
        outlets=[], disks={}, disk_summary=None, power_source="outlets",
    )  # type: ignore[arg-type]  # fmt: skip


def test_transfers_split_active_energy_by_bytes() -> None:
    """Two keys moving 3:1 bytes share the 20 kJ active energy 15:5; idle 30 kJ kept apart."""
    other = dict(KEY, peer="192.0.2.0/24")
    rates = _flow(1.0, 0.93, 0.0, 3e7)
    for k, v in _flow(0.05, 0.0, 0.0, 1e7, received=0.0, labels=other).items():
        rates[k] += v
    u = usage(GRID, _nic(1e5, 4e7), _data(rates))
    hd = _host(50_000.0, 300.0)  # 300 W × 100 s = 30 kJ idle, 20 kJ active
    assert active_energy(hd) == (20_000.0, 30_000.0)
    got = transfers(u, {H: hd}, range(N))
    assert [t.key for t in got] == [SUBJ, "peer=192.0.2.0/24,port=5201"]
    first, second = got
    assert first.bytes_sent == pytest.approx(3e7 * 100) and first.limit == "receive_window"
    assert second.limit == "application"
    assert first.share_of_bytes == pytest.approx((3e9 + 1e7) / (3e9 + 1e7 + 1e9))
    assert first.active_joules + second.active_joules == pytest.approx(20_000.0)  # type: ignore[operator]
    assert first.host_idle_joules == 30_000.0
    assert first.joules_per_gigabit == pytest.approx(first.active_joules / ((3e9 + 1e7) * 8 / 1e9))  # type: ignore[operator]
    assert transfers(u, {H: _host(None, None)}, range(N))[0].active_joules is None


def _ss(line: str) -> dict[str, str]:
    """``key:value`` and ``key value`` fields of one ``ss -tin`` info line."""
    out = dict(re.findall(r"(\w+):(\S+)", line))
    out.update(re.findall(r"\b(send|pacing_rate|delivery_rate) (\S+)", line))
    return out


def _bps(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)([KMG]?)bps", text)
    assert m is not None, text
    return float(m[1]) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m[2]]


def test_bandwidth_delay_arithmetic_on_real_ss_output() -> None:
    """On real internet sockets (126.8 ms and 21.5 ms RTT): the window in flight, cwnd × mss,
    is bandwidth × RTT at ss's own `send` rate — the product the evidence gives."""
    lines = SS.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        f = _ss(line)
        rtt = float(f["rtt"].split("/")[0]) / 1000
        window = int(f["cwnd"]) * int(f["mss"])
        rate = _bps(f["send"]) / 8  # bytes/s
        # ss prints "875.5Kbps" with 4 figures: within their rounding
        assert tcp.bdp(rate, rtt) == pytest.approx(window, rel=1e-3)
    first = _ss(lines[0])
    j = tcp.Judged(
        utilisation=0.9, cause="receive_window", shares={}, retransmitted=0.0, sending=True,
        busy_per_socket=1.0, app_limited=False, bytes=1.0, sent=1.0, received=0.0,
        srtt=float(first["rtt"].split("/")[0]) / 1000, send_window=13880.0,
        send_buffer=None, receive_buffer=None,
    )  # fmt: skip
    # a 10 Gbit/s path at that RTT needs 159 MB in flight; the peer offered 13.9 kB
    assert tcp.bdp_note(j, 1.25e9, {}) == (
        "; the receiver advertised 13.9 kB, below bandwidth × RTT = 159 MB (10 Gbit/s × 127 ms)"
    )


def test_an_idle_control_connection_does_not_make_a_bulk_key_application_limited() -> None:
    """iperf3's control connection shares the data stream's key, idle (app-limited): the key's
    busy share is per socket with data to send, so the window-limited stream stays tcp."""
    data = _data(_flow(1.0, 0.9, 0.0, 6e7))
    data.flow_gauges["sockets"] = {(H, SUBJ): [2.0] * N}
    data.flow_gauges["app_limited"] = {(H, SUBJ): [1.0] * N}
    _u, lb = _verdict(data)
    assert (lb.resource, lb.cause) == ("tcp", "receive_window")
    data = _data(_flow(0.6, 0.5, 0.0, 6e7))  # two sockets with data, 0.3 s busy a second each
    data.flow_gauges["sockets"] = {(H, SUBJ): [2.0] * N}
    data.flow_gauges["app_limited"] = {(H, SUBJ): [0.0] * N}
    _u, lb = _verdict(data)
    assert lb.resource == "none" and "application-limited" in lb.evidence


def test_a_waiting_sender_is_tcp_not_its_busy_cpu() -> None:
    """CPU 0 100 % busy while the sending key waited on the window 80 % of its busy time (a
    window-limited sender on a short path spins through tiny writes): tcp. When a receiving
    key's process runs on that CPU, the receiver could not keep up: cpu."""
    rates = _flow(1.0, 0.8, 0.0, 6e7)
    rates["node_cpu"] = [({"host": H, "cpu": "0", "mode": "idle"}, [0.0] * N)]
    rates["nic_irqs"] = [({"host": H, "cpu": "0", "irq": "40"}, [1e3] * N)]
    _u, lb = _verdict(_data(rates))
    assert (lb.resource, lb.cause, lb.subject) == ("tcp", "receive_window", SUBJ)
    recv = dict(KEY, peer="10.9.9.9")
    for k, v in _flow(0.0, 0.0, 0.0, 1e4, received=6e7, labels=recv).items():
        rates[k] += v
    data = _data(rates, flow_process={(H, "peer=10.9.9.9,port=5201"): ("nuttcp", "0")})
    _u, lb = _verdict(data)
    assert (lb.resource, lb.subject) == ("cpu", "0")
    assert "where nuttcp (flows to 10.9.9.9 port 5201, receiving) runs" in lb.evidence
