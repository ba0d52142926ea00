"""The tcp exporter: samples every TCP socket over sock_diag on its own interval and renders
the flow table (docs/exporters/tcp.md)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs import caps
from exporters.tcp import netlink, scitags
from exporters.tcp.egresslabels import PacketLabels
from exporters.tcp.flowlabels import FlowLabels
from exporters.tcp.flows import COUNTERS, DEFAULT_KEY, KEY_LABELS, FlowTable, Key, Snapshot, Sock
from exporters.tcp.owners import CgroupNames, Processes
from exporters.tcp.tcpinfo import parse_skmeminfo, parse_tcp_info
from exporters.tcp.tuning import read_tuning

log = logging.getLogger(__name__)

DIMENSIONS = KEY_LABELS
PTRACE = caps.CAP_NUMBERS["CAP_SYS_PTRACE"]
DESTROY_DRAIN_BYTES = 64 << 20  # per sample: beyond, the rest waits for the next sample
FIRST_SAMPLE_WAIT = 10.0  # seconds the first scrape waits for the first sample
PACKET_LABEL_FLOWS = 65_536  # default size of the packet source's LRU map (5-tuples)
MAX_OWNERS = 65_536  # (peer, port) -> owner remembered for closing sockets; oldest leave
Owner = tuple[str, str]  # (cgroup, process) labels of a key
Labels = tuple[str, str]  # (experiment, activity)


class SocketReader(Protocol):
    """Where the sockets come from: sock_diag here, recorded answers in tests."""

    tracking: bool  # destroy messages are received
    reason: str  # why (or why not)

    def dump(self) -> list[netlink.DiagSocket]:
        """Every TCP socket of the network namespace (with LISTEN ones)."""
        ...

    def drain(self) -> tuple[list[netlink.DiagSocket], bool]:
        """The destroy messages waiting, and whether some were lost."""
        ...

    def close(self) -> None:
        """Release the sockets."""
        ...


class LabelSource(Protocol):
    """Where the sockets' IPv6 flow labels come from: the BPF iterator, or a fake in tests."""

    source: str  # bpf_iter, none
    reason: str

    def read(self) -> dict[int, int]:
        """cookie -> flow label."""
        ...

    def close(self) -> None:
        """Release it."""
        ...


class PacketSource(Protocol):
    """Labels read off outgoing packets by 5-tuple: the tp_btf program, or a fake in tests."""

    source: str  # packet
    reason: str
    entries: int  # 5-tuples kept after the last read

    @property
    def attached(self) -> bool:
        """Whether the program runs."""
        ...

    def read(self, sockets: Sequence[netlink.DiagSocket]) -> dict[int, int]:
        """cookie -> flow label of the dump's sockets."""
        ...

    def close(self) -> None:
        """Release it."""
        ...


class NetlinkReader:
    """sock_diag on this network namespace, and its destroy messages unless refused."""

    def __init__(self, destroy: bool = True) -> None:
        self.malformed = 0
        self.listener: netlink.DestroyListener | None = None
        self.tracking = False
        self.reason = "disabled in the configuration"
        if destroy:
            try:
                self.listener = netlink.DestroyListener()
                self.tracking, self.reason = True, "bound the sock_diag destroy groups"
            except OSError as exc:  # needs no capability (netlink.DestroyListener): a policy
                self.reason = f"the destroy groups cannot be bound: {exc.strerror}"

    def _parse(self, payloads: Sequence[bytes]) -> list[netlink.DiagSocket]:
        out = []
        for p in payloads:
            try:
                out.append(netlink.parse_diag_msg(p))
            except netlink.Malformed:
                self.malformed += 1
        return out

    def dump(self) -> list[netlink.DiagSocket]:
        """Both address families' sockets."""
        payloads: list[bytes] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                payloads += [p for t, p in netlink.dump(family) if t == netlink.SOCK_DIAG_BY_FAMILY]
            except netlink.Malformed:
                self.malformed += 1
        return self._parse(payloads)

    def drain(self) -> tuple[list[netlink.DiagSocket], bool]:
        """Destroy messages since the last drain."""
        if self.listener is None:
            return [], False
        try:
            payloads, overrun = self.listener.drain(DESTROY_DRAIN_BYTES)
        except netlink.Malformed:
            self.malformed += 1
            return [], False
        return self._parse(payloads), overrun

    def close(self) -> None:
        """Leave the destroy groups."""
        if self.listener is not None:
            self.listener.close()


@dataclass(frozen=True)
class KeyConfig:
    """How a socket's flow key is made."""

    dims: tuple[str, ...] = DEFAULT_KEY
    peer_prefix_v4: int = 32
    peer_prefix_v6: int = 128


def peer_label(address: str, v4: int, v6: int) -> str:
    """The address (as inet_ntop wrote it), or its network at the configured prefix length."""
    v6addr = ":" in address
    bits = v6 if v6addr else v4
    if bits >= (128 if v6addr else 32):
        return address
    try:
        return str(ipaddress.ip_network(f"{address}/{bits}", strict=False))
    except ValueError:
        return ""


class TcpExporter(Exporter):
    """Samples sockets every `interval` in a thread; collect() renders the last sample."""

    name = "tcp"

    def __init__(
        self,
        interval: float = 5.0,
        key: KeyConfig = KeyConfig(),
        top_k: int = 20,
        process_refresh: float = 30.0,
        max_sockets: int = 262_144,
        proc_root: Path = Path("/proc"),
        sys_root: Path = Path("/sys"),
        reader: SocketReader | None = None,
        destroy: bool = True,
        processes: bool = False,
        clock: Callable[[], float] = time.monotonic,
        labels: LabelSource | None = None,
        flow_labels: str = "socket",
        packet_label_flows: int = PACKET_LABEL_FLOWS,
        packet: PacketSource | None = None,
    ) -> None:
        self.interval = interval
        self.key = key
        self.find_processes = processes or "process" in key.dims
        self.max_sockets = max_sockets
        self.proc_root = proc_root
        self.clock = clock
        self.background = reader is None
        self.reader: SocketReader = reader if reader is not None else NetlinkReader(destroy)
        other = tuple("other" if d in key.dims else "" for d in DIMENSIONS)
        self.table = FlowTable(top_k, other)  # type: ignore[arg-type]
        # the SciTags dimensions need each socket's flow label: the BPF iterator (socket) and
        # the tp_btf program (packet) as tcp.flow_labels says, loaded here (before the agent
        # drops CAP_BPF and CAP_PERFMON) only when the key asks for them
        self.labels: LabelSource | None = labels
        self.packet: PacketSource | None = packet
        scitags_key = reader is None and {"experiment", "activity"} & set(key.dims)
        if labels is None and scitags_key and flow_labels in ("socket", "both"):
            self.labels = FlowLabels(max_sockets, sys_root)
        if packet is None and scitags_key and flow_labels in ("packet", "both"):
            self.packet = PacketLabels(packet_label_flows, sys_root, proc_root)
        self._labels: dict[int, int] = {}
        self._read_keep: frozenset[int] | None = None  # probed once, by kept_effective
        self._socket_labels = 0
        self.cgroups = CgroupNames(sys_root, process_refresh, clock)
        self.processes = Processes(proc_root, process_refresh, clock)
        self.snapshot: Snapshot | None = None
        self.owners: dict[Key, tuple[str, str]] = {}
        self._peers: dict[str, str] = {}
        # the owner of each (peer, port)'s sockets in the last sample that had any (None: more
        # than one), for destroy messages, which carry no cgroup id and no inode (below)
        self._recent_owners: OrderedDict[tuple[str, str], Key | None] = OrderedDict()
        self.samples = 0
        self.skipped = 0
        self.overruns = 0
        self.duration = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None

    def startup_note(self) -> str:
        """How closing sockets are followed."""
        mode = "destroy messages" if self.reader.tracking else "sampling only"
        note = f"every {self.interval:g}s, closes by {mode} ({self.reader.reason})"
        if self.labels is not None:
            note += f", flow labels by {self.labels.source} ({self.labels.reason})"
        if self.packet is not None:
            note += f", packet flow labels: {self.packet.reason}"
        if self._read_keep:
            kept = "+".join(caps.names(caps.mask(self._read_keep)))
            note += f"; keeps {kept} effective: {caps.bpf_read_reason()}"
        return note

    def kept_capabilities(self) -> frozenset[int]:
        """CAP_SYS_PTRACE while owners are looked up: reading another process's /proc/PID/fd
        is a ptrace read access check (fs/proc/fd.c, proc_fd_access_allowed), which fails
        against a process holding capabilities this one lacks (security/commoncap.c
        cap_ptrace_access_check) unless CAP_SYS_PTRACE is held."""
        ptrace = frozenset({PTRACE}) if self.find_processes else frozenset()
        return ptrace | frozenset(self.kept_effective())

    def kept_effective(self) -> dict[int, str]:
        """The capability the flow-label sources' bpf() reads need after the drop, where this
        kernel refuses them without it (caps.bpf_read_keep: probed once, before the drop)."""
        if self._read_keep is None:
            self._read_keep = frozenset()
            for source in (self.labels, self.packet):
                # the BPF sources have a probe; tests' fakes read no BPF map
                probe = getattr(source, "bpf_read_keep", None)
                if probe is not None:
                    self._read_keep |= probe()
        return {c: caps.bpf_read_reason() for c in self._read_keep}

    def _peer(self, address: str) -> str:
        """peer_label, cached (bounded: cleared when full) for prefixes."""
        got = self._peers.get(address)
        if got is None:
            if len(self._peers) >= 65536:
                self._peers.clear()
            got = self._peers[address] = peer_label(
                address, self.key.peer_prefix_v4, self.key.peer_prefix_v6
            )
        return got

    def _sock(self, d: netlink.DiagSocket, listening: set[int]) -> Sock | None:
        raw = d.attrs.get(netlink.INET_DIAG_INFO)
        if raw is None:
            return None
        info = parse_tcp_info(raw)
        mem = parse_skmeminfo(d.attrs.get(netlink.INET_DIAG_SKMEMINFO, b""))
        dims = self.key.dims
        key: Key = (
            self._peer(d.dst) if "peer" in dims else "",
            str(d.sport if d.sport in listening else d.dport) if "port" in dims else "",
            self._cgroup(d),
            self._process(d),
            *self._scitags(d.cookie),
        )
        return Sock(
            cookie=d.cookie,
            key=key,
            info=info,
            rcvbuf=mem.get("rcvbuf"),
            sndbuf=mem.get("sndbuf"),
            cong=netlink.parse_cong(d.attrs.get(netlink.INET_DIAG_CONG, b"")),
            inode=d.inode,
        )

    def _scitags(self, cookie: int) -> Labels:
        """The SciTags (experiment, activity) of the socket's flow label, as far as the key
        has those dimensions; "" where unknown or unmarked."""
        label = self._labels.get(cookie)
        got = scitags.decode(label) if label else None
        if got is None:
            return "", ""
        dims = self.key.dims
        return (str(got[0]) if "experiment" in dims else "",
                str(got[1]) if "activity" in dims else "")  # fmt: skip

    def sample_once(self) -> None:
        """One sample: dump, destroy messages, count, owners of the exported keys."""
        start = time.perf_counter()
        diag = self.reader.dump()
        # after the dump: every socket in it has its cookie (sock_gen_cookie()), and one born
        # since has no key yet anyway
        self._labels = self.labels.read() if self.labels is not None else {}
        self._socket_labels = len(self._labels)
        if self.packet is not None:
            # the packet's label wins over the socket's: it is the one on the wire, written
            # after the socket's by whatever rewrote it at tc egress (scitags flowd)
            self._labels.update(self.packet.read(diag))
        listeners = [d for d in diag if d.state == netlink.TCP_LISTEN]
        listening = {d.sport for d in listeners}
        if "process" in self.key.dims and self.processes.due():
            self.processes.scan()
        socks: list[Sock] = []
        for d in diag:
            if d.state == netlink.TCP_LISTEN:
                continue
            if len(socks) >= self.max_sockets:
                self.skipped += 1
                continue
            s = self._sock(d, listening)
            if s is not None:
                socks.append(s)
        self._remember_owners(socks)
        gone, overrun = self.reader.drain()
        self.overruns += overrun
        by_port = self._listener_owners(listeners)
        destroyed = [self._closed(d, listening, by_port) for d in gone]
        snap = self.table.sample(
            socks, [s for s in destroyed if s is not None], self.clock(), self.reader.tracking
        )
        owners = self._owners_of(snap)
        with self._lock:
            self.snapshot, self.owners = snap, owners
            self.samples += 1
            self.duration = time.perf_counter() - start

    def _remember_owners(self, socks: list[Sock]) -> None:
        """Per (peer, port) of this sample: its sockets' one key, or None when they differ."""
        seen: dict[tuple[str, str], Key | None] = {}
        for s in socks:
            pp = (s.key[0], s.key[1])
            seen[pp] = s.key if seen.get(pp, s.key) == s.key else None
        for pp, one in seen.items():
            self._recent_owners.pop(pp, None)
            self._recent_owners[pp] = one
        while len(self._recent_owners) > MAX_OWNERS:
            self._recent_owners.popitem(last=False)

    def _listener_owners(self, listeners: list[netlink.DiagSocket]) -> dict[int, Owner | None]:
        """Per listening port, its listener's owner (None: listeners of different owners)."""
        out: dict[int, Owner | None] = {}
        for d in listeners:
            owner = (self._cgroup(d), self._process(d))
            out[d.sport] = owner if out.get(d.sport, owner) == owner else None
        return out

    def _closed(
        self, d: netlink.DiagSocket, listening: set[int], by_port: dict[int, Owner | None]
    ) -> Sock | None:
        """A destroy message's socket, keyed as its live samples would have been.

        The kernel's destroy message (inet_diag_handler_get_info(), net/ipv4/inet_diag.c)
        carries the socket's identity and tcp_info only: no INET_DIAG_CGROUP_ID, and inode 0.
        A socket seen alive keeps the key it was seen with (flows.FlowTable); one born and
        closed between two samples takes, on its listener's port, the listener's owner (an
        accepted socket inherits its listener's cgroup: sk_clone_lock() copies sk_cgrp_data,
        cgroup_sk_clone()), else the owner of its (peer, port)'s sockets in the last sample
        that had any, when they had one; else it stays unknown (""). Its SciTags experiment
        and activity (the iterator no longer sees it) likewise from its (peer, port)."""
        s = self._sock(d, listening)
        if s is None or netlink.INET_DIAG_CGROUP_ID in d.attrs:
            return s
        recent = self._recent_owners.get((s.key[0], s.key[1]))
        owner = by_port.get(d.sport) if d.sport in listening else None
        if owner is None and recent is not None:
            owner = (recent[2], recent[3])
        cgroup, process = owner if owner is not None else (s.key[2], s.key[3])
        exp, act = (recent[4], recent[5]) if recent is not None else (s.key[4], s.key[5])
        s.key = (s.key[0], s.key[1], cgroup, process, exp, act)
        return s

    def _cgroup(self, d: netlink.DiagSocket) -> str:
        cg = d.attrs.get(netlink.INET_DIAG_CGROUP_ID)
        if "cgroup" not in self.key.dims or not cg:
            return ""
        return self.cgroups.name(netlink.parse_cgroup_id(cg))

    def _process(self, d: netlink.DiagSocket) -> str:
        if "process" not in self.key.dims:
            return ""
        owner = self.processes.owner(d.inode)
        return owner[1] if owner else ""

    def _owners_of(self, snap: Snapshot) -> dict[Key, tuple[str, str]]:
        """(comm, cpu) of the busiest socket's process of every exported key."""
        if not self.find_processes:
            return {}
        wanted = {k: g.busiest_inode for k, g in snap.gauges.items() if k in self.table.exported}
        if any(self.processes.owner(i) is None for i in wanted.values()) and self.processes.due():
            self.processes.scan()
        out: dict[Key, tuple[str, str]] = {}
        for key, inode in wanted.items():
            owner = self.processes.owner(inode)
            if owner is None:
                continue
            cpu = self.processes.cpu(owner[0])
            if cpu is not None:
                out[key] = (owner[1], str(cpu))
        return out

    def _loop(self) -> None:
        if self.find_processes:
            # the agent keeps CAP_SYS_PTRACE permitted, not effective (collector/agent/
            # privileges.py): effective in this thread only, the one that reads /proc/PID/fd
            caps.raise_effective(PTRACE)
        while True:
            try:
                self.sample_once()
            except Exception:
                log.exception("tcp: a sample failed")
            self._first.set()
            if self._stop.wait(self.interval):
                return

    def start(self) -> None:
        """Start sampling in the background (the agent: once its capabilities are dropped,
        as threads inherit the starting thread's sets); a no-op on recorded answers."""
        if self.background and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tcp-sample", daemon=True)
            self._thread.start()

    def collect(self) -> Iterator[Metric]:
        """The last sample's flow table and the host's tuning."""
        if not self.background:
            if self.snapshot is None:
                self.sample_once()  # recorded answers: sampled when asked
        else:
            # Started by the agent before it listens (its first sample runs while the server
            # starts and waits for the first scrape), else here; the first scrape waits for
            # the first sample a while.
            self.start()
            self._first.wait(FIRST_SAMPLE_WAIT)
        with self._lock:
            snap, owners = self.snapshot, dict(self.owners)
            samples, duration = self.samples, self.duration
        if snap is not None:
            yield from render_flows(snap, owners)
            yield from self._health(snap, samples, duration)
        yield from render_tuning(self.proc_root)

    def _health(self, snap: Snapshot, samples: int, duration: float) -> Iterator[Metric]:
        g, c = GaugeMetricFamily, CounterMetricFamily
        yield g("wattbit_tcp_sockets", _H["sockets"], value=snap.sockets)
        yield g("wattbit_tcp_flow_keys", _H["keys"], value=snap.keys)
        yield c("wattbit_tcp_samples", _H["samples"], value=samples)
        yield g("wattbit_tcp_sample_duration_seconds", _H["duration"], value=duration)
        malformed = getattr(self.reader, "malformed", 0)
        yield c("wattbit_tcp_malformed_messages", _H["malformed"], value=malformed)
        yield c("wattbit_tcp_destroy_overruns", _H["overruns"], value=self.overruns)
        yield c("wattbit_tcp_skipped_sockets", _H["skipped"], value=self.skipped)
        mode = g("wattbit_tcp_close_tracking_info", _H["tracking"], labels=["mode", "reason"])
        mode.add_metric(
            ["destroy_messages" if self.reader.tracking else "sampling", self.reader.reason], 1
        )
        yield mode
        if self.labels is None and self.packet is None:
            return
        # the key has experiment or activity
        src = g("wattbit_tcp_flow_label_info", _H["labels"], labels=["source", "reason"])
        kept = g("wattbit_tcp_flow_label_entries", _H["entries"], labels=["source"])
        if self.labels is not None:
            src.add_metric([self.labels.source, self.labels.reason], 1)
            kept.add_metric(["socket"], self._socket_labels)
        if self.packet is not None:
            src.add_metric([self.packet.source, self.packet.reason], 1)
            kept.add_metric(["packet"], self.packet.entries)
        yield src
        yield kept

    def close(self) -> None:
        """Stop sampling, leave the destroy groups, free the flow-label iterator."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.reader.close()
        if self.labels is not None:
            self.labels.close()
        if self.packet is not None:
            self.packet.close()


_H = {
    "sockets": "TCP sockets in the last sample (listeners not counted).",
    "keys": "Distinct flow keys in the last sample, before the top-K.",
    "samples": "Samples taken.",
    "duration": "How long the last sample took.",
    "malformed": "Netlink messages or attributes that did not parse.",
    "overruns": "Times the destroy-message socket overflowed (closes missed).",
    "skipped": "Sockets over tcp.max_sockets in a sample, not followed.",
    "tracking": "How closing sockets are followed, and why.",
    "labels": "Where the sockets' IPv6 flow labels (SciTags) come from, and why.",
    "entries": "Flow labels known at the last sample: labelled sockets, or kept 5-tuples.",
    "closed": "Sockets of the key that closed; final: seen (destroy message) or unseen.",
    "cc": "Congestion control algorithms the key's sockets use.",
    "process": "The process owning the key's busiest socket and the CPU it last ran on.",
    "buffers": "Socket buffer limits of the host (sysctl), bytes.",
    "setting": "TCP options of the host (sysctl), as the kernel gives them.",
    "tuning": "The host's default congestion control and queueing discipline.",
}
_HELP = {
    "sent_bytes": "Bytes the peers acknowledged (tcpi_bytes_acked).",
    "received_bytes": "Bytes received (tcpi_bytes_received).",
    "sent_segments": "Data segments sent (tcpi_data_segs_out).",
    "retransmitted_segments": "Segments retransmitted (tcpi_total_retrans).",
    "busy_seconds": "Socket-seconds with data to send (tcpi_busy_time).",
    "rwnd_limited_seconds": "Busy socket-seconds limited by the peer's receive window.",
    "sndbuf_limited_seconds": "Busy socket-seconds limited by the send buffer.",
}
_GAUGES: tuple[tuple[str, str], ...] = (
    ("sockets", "The key's sockets in the last sample."),
    ("app_limited_sockets", "Sockets whose last delivery-rate sample was application-limited."),
    ("srtt_seconds", "Smoothed RTT, mean over the key's active sockets (else all)."),
    ("min_rtt_seconds", "The lowest min_rtt of the key's active sockets."),
    ("delivery_rate_bytes_per_second", "Sum of the active sockets' delivery rates."),
    ("cwnd_bytes", "Sum of snd_cwnd x snd_mss."),
    ("mss_bytes", "The largest snd_mss."),
    ("send_window_bytes", "Sum of the peers' advertised windows (tcpi_snd_wnd)."),
    ("receive_window_bytes", "Sum of the windows this host advertises (tcpi_rcv_wnd)."),
    ("receive_space_bytes", "Sum of tcpi_rcv_space."),
    ("receive_buffer_bytes", "Sum of the sockets' receive buffers (SK_MEMINFO_RCVBUF)."),
    ("send_buffer_bytes", "Sum of the sockets' send buffers (SK_MEMINFO_SNDBUF)."),
)


def render_flows(snap: Snapshot, owners: dict[Key, tuple[str, str]]) -> Iterator[Metric]:
    """The per-key families of one snapshot."""
    labels = list(KEY_LABELS)
    for i, (_field, name, per_unit) in enumerate(COUNTERS):
        fam = CounterMetricFamily(f"wattbit_tcp_flow_{name}", _HELP[name], labels=labels)
        for key in sorted(snap.totals):
            fam.add_metric(list(key), snap.totals[key][i] / per_unit)
        yield fam
    closed = CounterMetricFamily(
        "wattbit_tcp_flow_closed_sockets", _H["closed"], labels=[*labels, "final"]
    )
    for (key, final), n in sorted(snap.closed.items()):
        if key in snap.totals:
            closed.add_metric([*key, final], n)
    yield closed
    gauges = {n: GaugeMetricFamily(f"wattbit_tcp_flow_{n}", h, labels=labels) for n, h in _GAUGES}
    cc = GaugeMetricFamily(
        "wattbit_tcp_flow_congestion_control_info", _H["cc"], labels=[*labels, "algorithm"]
    )
    for key in sorted(snap.gauges):
        if key not in snap.totals:
            continue
        g = snap.gauges[key]
        values: dict[str, float | None] = {
            "sockets": g.sockets,
            "app_limited_sockets": g.app_limited,
            "srtt_seconds": g.srtt(),
            "min_rtt_seconds": g.min_rtt,
            "delivery_rate_bytes_per_second": g.delivery_rate,
            "cwnd_bytes": g.cwnd,
            "mss_bytes": g.mss,
            "send_window_bytes": g.snd_wnd,
            "receive_window_bytes": g.rcv_wnd,
            "receive_space_bytes": g.rcv_space,
            "receive_buffer_bytes": g.rcvbuf,
            "send_buffer_bytes": g.sndbuf,
        }
        for gname, v in values.items():
            if v is not None:
                gauges[gname].add_metric(list(key), v)
        for algo in sorted(g.algorithms):
            cc.add_metric([*key, algo], 1)
    yield from gauges.values()
    yield cc
    proc = GaugeMetricFamily(
        "wattbit_tcp_flow_process_info", _H["process"], labels=[*labels, "comm", "cpu"]
    )
    for key, (comm, cpu) in sorted(owners.items()):
        proc.add_metric([*key, comm, cpu], 1)
    yield proc


def render_tuning(proc_root: Path) -> Iterator[Metric]:
    """The host's TCP tuning."""
    buffers, settings, names = read_tuning(proc_root)
    b = GaugeMetricFamily(
        "wattbit_tcp_buffer_limit_bytes", _H["buffers"], labels=["sysctl", "bound"]
    )
    for (sysctl, bound), v in sorted(buffers.items()):
        b.add_metric([sysctl, bound], v)
    yield b
    s = GaugeMetricFamily("wattbit_tcp_setting", _H["setting"], labels=["sysctl"])
    for sysctl, v in sorted(settings.items()):
        s.add_metric([sysctl], v)
    yield s
    t = GaugeMetricFamily(
        "wattbit_tcp_tuning_info", _H["tuning"], labels=["congestion_control", "default_qdisc"]
    )
    t.add_metric([names["net.ipv4.tcp_congestion_control"], names["net.core.default_qdisc"]], 1)
    yield t
