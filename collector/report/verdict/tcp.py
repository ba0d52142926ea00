"""The tcp resource: what TCP itself recorded holding each flow key back, and its evidence.

Per flow key of the agent's ``tcp`` exporter (docs/exporters/tcp.md), over the steps judged:
the share of its busy time limited by the peer's receive window (``tcpi_rwnd_limited``) and
by its own send buffer (``tcpi_sndbuf_limited``), and congestion, its retransmitted share
against 1 % — at 1 % loss one Reno/CUBIC stream is held to about 12 segments per round trip
(Mathis et al., 1997: rate <= MSS / RTT * 1.22 / sqrt(p)), whatever the links could carry.
The shares are TCP's chrono accounting (net/ipv4/tcp.c ``tcp_get_info_chrono_stats``, Linux
4.10, commit efd90174167530c67a54273fd5d8369c87f9bd32): busy time is the time the socket had
data to send, and the limited times are parts of it. A flow whose sockets were busy less than
:data:`APP_BUSY` of the time sat waiting for its application: the limit is upstream (the
disks, the CPU, pacing), never TCP. Only the sending side's figures say anything: a key
that mostly receives is judged on the host that sends to it. Hosts without the exporter keep
the host-wide retransmitted share (subject ``""``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from ..series import Bins, PerSeries, VerdictData
from . import steps as S

TCP_SATURATED = 0.01  # a 1 % retransmitted share is a TCP utilisation of 1
# Half its busy time waiting on the peer's window or on its own send buffer is a TCP
# utilisation of 1: the line of WattbitTransferWindowLimited (alerts/wattbit-alerts.yml,
# host_flow:wattbit_tcp_flow_rwnd_limited:ratio1m >= 0.5). Not 100 %: the rest of a waiting
# sender's busy time is the turnaround (the ACK processed, the next segment built), which on a
# path of microseconds is as long as the wait itself; measured on a veth with a 4-16 KiB
# receive buffer, 42-90 % of busy time under load (tests/integration/test_tcp_limits_real.py).
WAIT_SATURATED = 0.5
APP_BUSY = 0.5  # a sending key busy less than this per feeding socket waited on its application
KEY_LABELS = ("experiment", "activity", "peer", "port", "cgroup", "process")
CAUSES = ("receive_window", "send_buffer", "congestion")
# the flow counters gathering reads (gather.VERDICT_COUNTERS), by their Flow field
COUNTERS = {
    "flow_busy": "busy",
    "flow_rwnd": "rwnd",
    "flow_sndbuf": "sndbuf",
    "flow_retrans": "retrans",
    "flow_segs": "segs",
    "flow_sent": "sent",
    "flow_received": "received",
}
_CAUSE_WORDS = {
    "receive_window": "TCP receive window",
    "send_buffer": "TCP send buffer",
    "congestion": "TCP congestion",
}


def retransmitted(rates: dict[str, PerSeries], n: int) -> dict[str, Bins]:
    """Per host, the share of the segments sent that were retransmissions (None: none sent)."""
    retrans = S.by(rates, "retransmitted", ("host",), n)
    sent = S.by(rates, "segments_out", ("host",), n)
    return {
        h[0]: [None if r is None or s is None or s <= 0 else r / s
               for r, s in zip(retrans[h], sent[h], strict=True)]
        for h in retrans.keys() & sent.keys()
    }  # fmt: skip


def utilisation(share: Bins) -> Bins:
    """The retransmitted share against :data:`TCP_SATURATED`, capped at 1."""
    return [None if v is None else min(1.0, v / TCP_SATURATED) for v in share]


def subject(labels: dict[str, str]) -> str:
    """A flow key as the verdict's subject: ``"peer=10.1.2.0/24,port=5201"`` (its non-empty
    key labels, the SciTags experiment and activity first); ``"other"`` for the top-K's rest."""
    parts = [f"{k}={v}" for k in KEY_LABELS if (v := labels.get(k, ""))]
    if parts and all(p.endswith("=other") for p in parts):
        return "other"
    return ",".join(parts) or "all"


def loopback(subj: str) -> bool:
    """The key's peer is this host's loopback (127.0.0.0/8, ::1): its bytes cross no NIC."""
    peer = dict(p.split("=", 1) for p in subj.split(",") if "=" in p).get("peer", "")
    return peer.startswith("127.") or peer in ("::1", "::1/128")


def words(subj: str) -> str:
    """A flow key in a few words: "flows to 10.1.2.0/24 port 5201 (iperf3)"."""
    if subj == "other":
        return "the other flows"
    kv = dict(p.split("=", 1) for p in subj.split(",") if "=" in p)
    out = []
    if kv.get("experiment"):
        out.append(f"experiment {kv['experiment']}")
    if kv.get("activity"):
        out.append(f"activity {kv['activity']}")
    if kv.get("peer"):
        out.append(f"to {kv['peer']}")
    if kv.get("port"):
        out.append(f"port {kv['port']}")
    owner = [kv[k] for k in ("cgroup", "process") if kv.get(k)]
    text = "flows " + " ".join(out) if out else "flows"
    return text + (f" ({', '.join(owner)})" if owner else "")


@dataclass
class Flow:
    """One (host, flow key)'s figures per step: counters' rates and gauges' step means."""

    n: int
    busy: Bins = field(default_factory=list)  # socket-seconds busy per second
    rwnd: Bins = field(default_factory=list)
    sndbuf: Bins = field(default_factory=list)
    retrans: Bins = field(default_factory=list)  # segments/s
    segs: Bins = field(default_factory=list)
    sent: Bins = field(default_factory=list)  # bytes/s
    received: Bins = field(default_factory=list)
    gauges: dict[str, Bins] = field(default_factory=dict)  # gather.FLOW_GAUGES' keys


def flows(data: VerdictData, n: int) -> dict[S.Key, Flow]:
    """Per (host, flow subject): its counters summed over the series of the key (an agent
    restarted, two instances), and its gauges."""
    out: dict[S.Key, Flow] = {}
    for what, attr in COUNTERS.items():
        groups: dict[S.Key, list[Bins]] = defaultdict(list)
        for lab, b in data.rates.get(what, []):
            groups[(lab.get("host", ""), subject(lab))].append(b)
        for key, bs in groups.items():
            f = out.setdefault(key, Flow(n))
            setattr(f, attr, S.total(bs, n))
    for what, by_key in data.flow_gauges.items():
        for key, b in by_key.items():
            out.setdefault(key, Flow(n)).gauges[what] = b
    for f in out.values():
        for attr in COUNTERS.values():
            if not getattr(f, attr):
                setattr(f, attr, [None] * n)
    return out


@dataclass(frozen=True)
class Judged:
    """A flow key over some steps: what TCP recorded, and the cause it points to."""

    utilisation: float | None  # the largest cause's, 0-1; None: not judged (below)
    cause: str | None
    # of busy time: receive_window, send_buffer; congestion: retransmitted share against 1 %
    shares: dict[str, float]
    retransmitted: float | None  # share of the data segments sent
    sending: bool  # this host sent more than it received: TCP's own limits are seen here
    busy_per_socket: float | None  # busy seconds per socket-second
    app_limited: bool  # sending, moving data, and its sockets mostly idle
    bytes: float  # sent + received
    sent: float
    received: float
    srtt: float | None  # seconds, mean over the steps
    send_window: float | None  # the peer's advertised window, bytes
    send_buffer: float | None  # this host's send buffers, bytes
    receive_buffer: float | None


def _sum(b: Bins, steps: Sequence[int], step_s: float = 1.0) -> float:
    """The sum of ``b`` over ``steps`` × ``step_s`` (None counts nothing). Judged keys ×
    steps is the verdict's largest loop, so the values are picked in C (a slice for a range
    or a run of steps, itemgetter for ascending steps within ``b``) and summed with sum():
    over 8,640 steps its rounding is ~1e-12 of the total, and fsum took half the time."""
    n = len(b)
    if not steps or n == 0:
        return 0.0
    first, last = steps[0], steps[-1]
    vals: Sequence[float | None]
    if last - first + 1 == len(steps) and last >= first:  # a range, or a run of steps
        vals = b[max(0, first) : min(n, last + 1)]
    elif len(steps) > 1 and first >= 0 and last < n:
        vals = itemgetter(*steps)(b)
    else:
        vals = [b[k] for k in steps if k < n]
    return sum(filter(None, vals)) * step_s


def judge(f: Flow, steps: Sequence[int], step_s: float = 1.0) -> Judged:
    """The flow key over ``steps`` (``step_s`` seconds each): see the module's docstring."""
    busy, rwnd, sndbuf = (_sum(b, steps) for b in (f.busy, f.rwnd, f.sndbuf))
    retrans, segs = _sum(f.retrans, steps), _sum(f.segs, steps)
    sent, received = _sum(f.sent, steps, step_s), _sum(f.received, steps, step_s)
    sending = sent > 0 and sent >= received
    # per socket that had data to send: a key's idle sockets (iperf3's control connection, a
    # pool's spare ones) report app-limited and would halve a bulk stream's busy share
    sockets = _sum(f.gauges.get("sockets", []), steps)
    idle = _sum(f.gauges.get("app_limited", []), steps)
    feeding = max(float(len(steps)), sockets - idle) if sockets > 0 else float(len(steps))
    per_socket = busy / feeding if feeding > 0 else None
    shares: dict[str, float] = {}
    if busy > 0:
        shares["receive_window"] = min(1.0, rwnd / busy)
        shares["send_buffer"] = min(1.0, sndbuf / busy)
    if segs > 0:
        shares["congestion"] = min(1.0, retrans / segs / TCP_SATURATED)
    app = sending and per_socket is not None and per_socket < APP_BUSY
    util, cause = None, None
    if sending and shares and not app:
        scaled = {c: min(1.0, v / WAIT_SATURATED) if c != "congestion" else v
                  for c, v in shares.items()}  # fmt: skip
        cause = max(scaled, key=lambda c: (scaled[c], -CAUSES.index(c)))
        util = scaled[cause]
    return Judged(
        utilisation=util,
        cause=cause,
        shares=shares,
        retransmitted=retrans / segs if segs > 0 else None,
        sending=sending,
        busy_per_socket=per_socket,
        app_limited=app,
        bytes=sent + received,
        sent=sent,
        received=received,
        srtt=S.mean(f.gauges.get("srtt"), steps),
        send_window=S.mean(f.gauges.get("send_window"), steps),
        send_buffer=S.mean(f.gauges.get("send_buffer"), steps),
        receive_buffer=S.mean(f.gauges.get("receive_buffer"), steps),
    )


def step_utilisation(f: Flow) -> Bins:
    """Per step the key's utilisation, as :func:`judge` gives it over one step (the per-step
    view: the chart, the rules' equivalent). Plain arithmetic over the steps at once: a
    24-hour window has 8,640 steps and a host 21 keys (bench/report_tcp_verdict.py)."""
    none: Bins = [None] * f.n
    socks, idle = f.gauges.get("sockets", none), f.gauges.get("app_limited", none)
    return [
        _one(*vals)
        for vals in zip(f.busy, f.rwnd, f.sndbuf, f.retrans, f.segs, f.sent, f.received,
                        socks, idle, strict=True)
    ]  # fmt: skip


def _one(
    busy: float | None,
    rwnd: float | None,
    sndbuf: float | None,
    retrans: float | None,
    segs: float | None,
    sent: float | None,
    received: float | None,
    sockets: float | None,
    idle: float | None,
) -> float | None:
    """One step's utilisation (None: not sending, application-limited, nothing measured)."""
    if not sent or sent < (received or 0.0):
        return None
    b = busy or 0.0
    feeding = max(1.0, (sockets or 0.0) - (idle or 0.0)) if sockets else 1.0
    if b / feeding < APP_BUSY:
        return None
    vals = []
    if b > 0:
        vals += [min(1.0, (rwnd or 0.0) / b / WAIT_SATURATED),
                 min(1.0, (sndbuf or 0.0) / b / WAIT_SATURATED)]  # fmt: skip
    if segs:
        vals.append(min(1.0, (retrans or 0.0) / segs / TCP_SATURATED))
    return max(vals) if vals else None


def bdp(bandwidth_bytes_per_s: float, rtt_s: float) -> float:
    """Bandwidth × RTT in bytes: what must be in flight to fill the path."""
    return bandwidth_bytes_per_s * rtt_s


def bits(bps: float) -> str:
    """Bits/s as a link speed: '10 Gbit/s', '1 Tbit/s', '100 Mbit/s'."""
    for div, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s")):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps / 1e3:.3g} kbit/s"


def mib(b: float) -> str:
    """Bytes as binary megabytes, as buffer sysctls are set: '6 MiB', '208 KiB'."""
    if b >= 2**20:
        return f"{b / 2**20:.3g} MiB"
    return f"{b / 2**10:.3g} KiB"


def mb(b: float) -> str:
    """Bytes in decimal units: '60 MB', '512 kB'."""
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if b >= div:
            return f"{b / div:.3g} {unit}"
    return f"{b:.3g} B"


def bdp_note(j: Judged, link_bytes_per_s: float | None, buffers: dict[str, float]) -> str:
    """The cause's arithmetic: the window or buffer against bandwidth × RTT (link speed ×
    srtt), '' when a figure is missing. ``buffers``: this host's ``{sysctl: max}``."""
    if j.cause not in ("receive_window", "send_buffer") or not j.srtt or not link_bytes_per_s:
        return ""
    need = bdp(link_bytes_per_s, j.srtt)
    gbit = bits(link_bytes_per_s * 8)
    product = f"bandwidth × RTT = {mb(need)} ({gbit} × {1000 * j.srtt:.3g} ms)"
    if j.cause == "receive_window":
        if j.send_window:
            return f"; the receiver advertised {mb(j.send_window)}, below {product}"
        return f"; bandwidth × RTT = {mb(need)} ({gbit} × {1000 * j.srtt:.3g} ms)"
    have = j.send_buffer
    wmem = buffers.get("net.ipv4.tcp_wmem")
    cap = f" (tcp_wmem max {mib(wmem)})" if wmem else ""
    if have:
        return f"; its send buffer {mib(have)}{cap} is below {product}"
    return f"; {product}{cap}"


def phrase(
    subj: str, j: Judged | None, v: float, link: float | None, buffers: dict[str, float]
) -> str:
    """TCP in a few words, the cause and its arithmetic first."""
    if j is None or not subj:
        return f"TCP retransmits at {S.pct(v)} of the 1 % that holds a stream down"
    rtt = f" at {1000 * j.srtt:.3g} ms RTT" if j.srtt else ""
    who = words(subj)
    if j.cause == "receive_window":
        share = S.pct(j.shares.get("receive_window", 0.0))
        text = f"TCP receive window: {who} were window-limited {share} of their busy time{rtt}"
    elif j.cause == "send_buffer":
        share = S.pct(j.shares.get("send_buffer", 0.0))
        text = f"TCP send buffer: {who} were send-buffer-limited {share} of their busy time{rtt}"
    else:
        lost = j.retransmitted or 0.0
        cwnd = 1.0 - j.shares.get("receive_window", 0.0) - j.shares.get("send_buffer", 0.0)
        text = (
            f"TCP congestion: {who} retransmitted {100 * lost:.2g} % of their segments "
            f"({S.pct(v)} of the 1 % that holds a stream down), cwnd-limited "
            f"{S.pct(max(0.0, cwnd))} of their busy time{rtt}"
        )
    return text + bdp_note(j, link, buffers)


def app_note(subj: str, j: Judged) -> str:
    """An application-limited key: TCP sat waiting for data, the limit is upstream."""
    busy = f" busy {S.pct(j.busy_per_socket)} of the time" if j.busy_per_socket is not None else ""
    return (
        f"TCP application-limited: {words(subj)}{busy}, waiting for data (the limit is "
        "upstream: the disks, the CPU or pacing)"
    )


def cause_words(cause: str | None) -> str:
    """The verdict's noun for a tcp cause."""
    return _CAUSE_WORDS.get(cause or "", "TCP")
