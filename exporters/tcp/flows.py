"""The flow table: per-socket deltas of tcp_info's counters summed under a bounded flow key.

Pure: it is given each sample's sockets (already parsed and keyed) and the closing sockets'
final figures, and keeps what it needs to count every byte once (docs/exporters/tcp.md,
"Counters that survive socket churn"). No I/O, no clock of its own.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

# Key labels, in order. A key is a tuple of these six strings.
KEY_LABELS = ("peer", "port", "cgroup", "process", "experiment", "activity")
# tcp.key's default; here rather than in exporter.py so that the agent's config reads it
# without importing the exporter (issue 35: an agent with tcp off does not load it)
DEFAULT_KEY = ("peer", "port", "cgroup")
Key = tuple[str, str, str, str, str, str]

# tcp_info counters followed per socket -> (its exported counter, units per base unit).
# A divisor, not a factor: 116000 / 1e6 is 0.116 (IEEE division is correctly rounded), where
# 116000 * 1e-6 is 0.11599999999999999, digits a long-term store drops (VictoriaMetrics keeps
# about 12): the same counter then reads alike from Prometheus and the store.
COUNTERS: tuple[tuple[str, str, int], ...] = (
    ("bytes_acked", "sent_bytes", 1),
    ("bytes_received", "received_bytes", 1),
    ("data_segs_out", "sent_segments", 1),
    ("total_retrans", "retransmitted_segments", 1),
    ("busy_time", "busy_seconds", 1_000_000),
    ("rwnd_limited", "rwnd_limited_seconds", 1_000_000),
    ("sndbuf_limited", "sndbuf_limited_seconds", 1_000_000),
)
_FIELDS = tuple(c[0] for c in COUNTERS)
_U32 = frozenset({"data_segs_out", "total_retrans"})  # 32-bit in tcp_info: they wrap
_N = len(COUNTERS)
Values = tuple[int | None, ...]
HYSTERESIS = 1.5  # a newcomer must outrank the lowest exported key by half again
CLOSE_LINGER_SAMPLES = 24  # an absent socket waits this many samples for its destroy message
GRAVEYARD = 1 << 15  # cookies remembered at least (at most twice as many): see Graveyard


class Graveyard:
    """Cookies of closed sockets, so a late or repeated destroy message never counts again.

    Two generations of sets, the older dropped whole when the newer is full: at least the
    last `size` cookies are remembered, at most 2 × `size`. An OrderedDict evicting one by
    one cost 144 bytes per cookie (11 MB at 65,536, measured under the soak's socket churn);
    a set costs about 60 with its int.
    """

    def __init__(self, size: int = GRAVEYARD) -> None:
        self.size = size
        self._new: set[int] = set()
        self._old: set[int] = set()

    def __contains__(self, cookie: object) -> bool:
        return cookie in self._new or cookie in self._old

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def add(self, cookie: int) -> None:
        """Remember one cookie; the oldest generation leaves when the newest is full."""
        if len(self._new) >= self.size:
            self._old, self._new = self._new, set()
        self._new.add(cookie)


@dataclass(slots=True)
class Sock:
    """One socket of a sample, as the flow table needs it."""

    cookie: int
    key: Key
    info: dict[str, int]
    rcvbuf: int | None = None
    sndbuf: int | None = None
    cong: str = ""
    inode: int = 0

    def values(self) -> Values:
        """The followed counters, None where the kernel did not send them."""
        return tuple(self.info.get(f) for f in _FIELDS)


@dataclass(slots=True)
class KeyGauges:
    """What the last sample showed of one exported key's sockets."""

    sockets: int = 0
    app_limited: int = 0
    srtt_sum: float = 0.0  # over the active sockets
    srtt_n: int = 0
    idle_srtt_sum: float = 0.0  # over the others: used when none was active
    idle_srtt_n: int = 0
    min_rtt: float | None = None
    delivery_rate: float = 0.0
    cwnd: float = 0.0
    mss: int = 0
    snd_wnd: float | None = None
    rcv_wnd: float | None = None
    rcv_space: float = 0.0
    rcvbuf: float = 0.0
    sndbuf: float = 0.0
    algorithms: set[str] = field(default_factory=set)
    busiest_inode: int = 0
    busiest_bytes: int = -1

    def srtt(self) -> float | None:
        """Mean srtt of the active sockets, else of all."""
        if self.srtt_n:
            return self.srtt_sum / self.srtt_n
        return self.idle_srtt_sum / self.idle_srtt_n if self.idle_srtt_n else None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the exporter renders: counters and gauges of the exported keys and `other`."""

    totals: dict[Key, list[int]]  # in tcp_info's units (COUNTERS' divisor gives base units)
    gauges: dict[Key, KeyGauges]
    closed: dict[tuple[Key, str], int]
    sockets: int
    keys: int


def _delta(name: str, new: int | None, old: int | None) -> int:
    if new is None or old is None:
        return 0
    if name in _U32:
        return (new - old) % (1 << 32)
    return max(new - old, 0)


class FlowTable:
    """Per-socket last figures, per-key totals, and the top-K selection."""

    def __init__(self, top_k: int, other: Key, half_life: float = 60.0) -> None:
        self.top_k = top_k
        self.other = other
        self.half_life = half_life
        self.sockets: dict[int, tuple[Key, Values]] = {}
        # absent sockets waiting for their destroy message: cookie -> (key, values, samples)
        self.closing: OrderedDict[int, tuple[Key, Values, int]] = OrderedDict()
        self.graveyard = Graveyard()
        self.scores: dict[Key, float] = {}
        self.exported: set[Key] = set()
        self.totals: dict[Key, list[int]] = {other: [0] * _N}  # in tcp_info's units
        self.closed: Counter[tuple[Key, str]] = Counter()
        self.samples = 0
        self.last_time: float | None = None
        self.retired = [0] * _N  # the last totals of keys that left the top-K (for checks)

    def _add(self, acc: dict[Key, list[int]], key: Key, new: Values, old: Values) -> int:
        d = acc.setdefault(key, [0] * _N)
        moved = 0
        for i, name in enumerate(_FIELDS):
            v = _delta(name, new[i], old[i])
            d[i] += v
            if i < 2:
                moved += v
        return moved

    def sample(
        self, socks: Iterable[Sock], destroyed: Iterable[Sock], now: float, tracking: bool
    ) -> Snapshot:
        """Count one sample: the dump's sockets, then the destroy messages drained after it.

        tracking: destroy messages are being received (else an absent socket is closed,
        unseen, at once).
        """
        first = self.samples == 0
        self.samples += 1
        zero: Values = (0,) * _N
        acc: dict[Key, list[int]] = {}
        current: dict[int, tuple[Key, Values]] = {}
        moved_by_cookie: dict[int, int] = {}
        listed: list[Sock] = []
        for s in socks:
            vals = s.values()
            current[s.cookie] = (s.key, vals)
            listed.append(s)
            if first:
                continue
            prev = self.sockets.get(s.cookie)
            if prev is None and s.cookie in self.closing:
                prev_key, prev_vals, _ = self.closing.pop(s.cookie)
                prev = (prev_key, prev_vals)
            old = prev[1] if prev is not None else zero
            moved_by_cookie[s.cookie] = self._add(acc, s.key, vals, old)
        for cookie, (key, vals) in self.sockets.items():
            if cookie in current:
                continue
            if tracking:
                self.closing[cookie] = (key, vals, 0)
            else:
                self.closed[(key, "unseen")] += 1
        self.sockets = current
        for s in destroyed:
            self._destroyed(s, acc, first)
        self._age_closing()
        self._rank(acc, now)
        self._count(acc)
        return self._snapshot(listed, moved_by_cookie)

    def _destroyed(self, s: Sock, acc: dict[Key, list[int]], first: bool) -> None:
        if s.cookie in self.graveyard:
            return  # given up on it already: what it moved was never counted, and stays so
        entry = self.sockets.pop(s.cookie, None)
        if entry is None and s.cookie in self.closing:
            k, v, _ = self.closing.pop(s.cookie)
            entry = (k, v)
        if entry is None:
            if first:
                return  # before the baseline: its past is not ours
            old: Values = (0,) * _N  # born and closed between two samples
            key = s.key
        else:
            key, old = entry
        self._add(acc, key, s.values(), old)
        self.closed[(key, "seen")] += 1
        self._bury(s.cookie)

    def _bury(self, cookie: int) -> None:
        """Remember a closed socket's cookie, so a message for it never counts again."""
        self.graveyard.add(cookie)

    def _age_closing(self) -> None:
        for cookie in list(self.closing):
            key, vals, age = self.closing[cookie]
            if age + 1 >= CLOSE_LINGER_SAMPLES:
                del self.closing[cookie]
                self.closed[(key, "unseen")] += 1
                self._bury(cookie)
            else:
                self.closing[cookie] = (key, vals, age + 1)

    def _rank(self, acc: dict[Key, list[int]], now: float) -> None:
        dt = 0.0 if self.last_time is None else max(now - self.last_time, 0.0)
        self.last_time = now
        decay = 0.5 ** (dt / self.half_life)
        live = {k for k, _ in self.sockets.values()}
        for key in list(self.scores):
            self.scores[key] *= decay
            if self.scores[key] < 1.0 and key not in live and key not in acc:
                del self.scores[key]
        for key, d in acc.items():
            self.scores[key] = self.scores.get(key, 0.0) + d[0] + d[1]
        for key in live:
            self.scores.setdefault(key, 0.0)
        exported = {k for k in self.exported if k in self.scores}
        ranked = sorted(self.scores.items(), key=lambda kv: kv[1], reverse=True)
        for key, score in ranked[: self.top_k]:
            if key in exported or score <= 0:
                continue
            if len(exported) < self.top_k:
                exported.add(key)
                continue
            lowest = min(exported, key=lambda k: self.scores[k])
            if score <= HYSTERESIS * self.scores[lowest]:
                break
            exported.discard(lowest)
            exported.add(key)
        for key in self.exported - exported:
            gone = self.totals.pop(key, None)  # its series ends; what it counted stays counted
            for i, v in enumerate(gone or ()):
                self.retired[i] += v
        for key in exported - self.exported:
            self.totals[key] = [0] * _N  # a new series: from this sample's figures on
        self.exported = exported

    def _count(self, acc: dict[Key, list[int]]) -> None:
        for key, d in acc.items():
            target = key if key in self.exported else self.other
            t = self.totals[target]
            for i in range(_N):
                t[i] += d[i]
        closed: Counter[tuple[Key, str]] = Counter()
        for (key, final), n in self.closed.items():
            closed[(key if key in self.exported else self.other, final)] += n
        self.closed = closed

    def _snapshot(self, listed: list[Sock], moved: dict[int, int]) -> Snapshot:
        gauges: dict[Key, KeyGauges] = {}
        keys: set[Key] = set()
        for s in listed:
            keys.add(s.key)
            key = s.key if s.key in self.exported else self.other
            g = gauges.setdefault(key, KeyGauges())
            _gauge(g, s, moved.get(s.cookie, 0))
        return Snapshot(
            totals={k: list(v) for k, v in self.totals.items()},
            gauges=gauges,
            closed=dict(self.closed),
            sockets=len(listed),
            keys=len(keys),
        )


def _gauge(g: KeyGauges, s: Sock, moved: int) -> None:
    """Add one socket to its key's gauges."""
    i = s.info
    g.sockets += 1
    g.app_limited += i.get("delivery_rate_app_limited", 0)
    active = moved > 0
    if "rtt" in i and active:
        g.srtt_sum += i["rtt"] * 1e-6
        g.srtt_n += 1
    elif "rtt" in i:
        g.idle_srtt_sum += i["rtt"] * 1e-6
        g.idle_srtt_n += 1
    if active and i.get("min_rtt"):
        v = i["min_rtt"] * 1e-6
        g.min_rtt = v if g.min_rtt is None else min(g.min_rtt, v)
    if active:
        g.delivery_rate += i.get("delivery_rate", 0)
    g.cwnd += i.get("snd_cwnd", 0) * i.get("snd_mss", 0)
    g.mss = max(g.mss, i.get("snd_mss", 0))
    if "snd_wnd" in i:
        g.snd_wnd = (g.snd_wnd or 0.0) + i["snd_wnd"]
    if "rcv_wnd" in i:
        g.rcv_wnd = (g.rcv_wnd or 0.0) + i["rcv_wnd"]
    g.rcv_space += i.get("rcv_space", 0)
    g.rcvbuf += s.rcvbuf or 0
    g.sndbuf += s.sndbuf or 0
    if s.cong:
        g.algorithms.add(s.cong)
    if moved > g.busiest_bytes:
        g.busiest_bytes, g.busiest_inode = moved, s.inode
