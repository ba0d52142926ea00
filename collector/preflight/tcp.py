"""`wattbit agent --check`, the tcp exporter's rows (issue #31): found by doing what the
exporter does — one sock_diag dump through its own reader, the cgroup of a socket of this
process, the host-tuning read, and (when `tcp.key` asks for SciTags) the flow-label iterator
loaded, walked once and detached, and with `tcp.flow_labels: packet` or `both` the packet
program attached, its map read once, detached — never by guessing from the kernel version or
the uid."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from collector.agent.config import TcpConfig
from collector.preflight.report import Report
from exporters.tcp import netlink
from exporters.tcp.egresslabels import PacketLabels
from exporters.tcp.exporter import LabelSource, NetlinkReader, PacketSource
from exporters.tcp.flowlabels import FlowLabels
from exporters.tcp.owners import CgroupNames
from exporters.tcp.tuning import BUFFERS, NAMES, SETTINGS, read_tuning

GRANT_TRACER = (
    "give the agent CAP_BPF and CAP_PERFMON (the packaged unit's AmbientCapabilities; "
    "CAP_SYS_ADMIN before Linux 5.8), or take experiment and activity out of tcp.key: "
    "docs/privileges.md"
)
# what each FlowLabels reason (exporters/tcp/flowlabels.py) asks of the operator
_LABEL_FIXES = (
    ("missing ", GRANT_TRACER),
    ("no kernel BTF", "a kernel with CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)"),
    ("not built", "scripts/build-bpf.sh (clang, libbpf-dev) builds flowlabel.bpf.o"),
)
TUNING_VALUES = sum(len(b) for b in BUFFERS.values()) + len(SETTINGS) + len(NAMES)


class Reader(Protocol):
    """What the check needs of the exporter's socket reader (exporters.tcp.exporter)."""

    tracking: bool
    reason: str
    malformed: int

    def dump(self) -> list[netlink.DiagSocket]:
        """Every TCP socket of the network namespace."""
        ...

    def close(self) -> None:
        """Release it."""
        ...


ReaderFactory = Callable[[bool], Reader]
LabelsFactory = Callable[[int, Path], LabelSource]
PacketFactory = Callable[[int, Path, Path], PacketSource]


@contextlib.contextmanager
def probe_socket() -> Iterator[tuple[int, int] | None]:
    """A listener of this process on 127.0.0.1 (any port), so that the dump holds one socket
    whose cgroup is known: (family, port), or None where none can be opened."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    except OSError:
        yield None
        return
    with s:
        try:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
        except OSError:  # no IPv4 loopback in this namespace
            yield None
            return
        yield socket.AF_INET, s.getsockname()[1]


def check_tcp(
    report: Report,
    cfg: TcpConfig,
    sys_root: Path,
    proc_root: Path,
    reader_factory: ReaderFactory = NetlinkReader,
    labels_factory: LabelsFactory = FlowLabels,
    probe: Callable[[], contextlib.AbstractContextManager[tuple[int, int] | None]] = probe_socket,
    packet_factory: PacketFactory = PacketLabels,
) -> None:
    """The tcp exporter's rows: dump, socket cgroup, closing sockets, tuning, flow labels."""
    # Built as the exporter builds it: the destroy groups are bound here, or refused.
    reader = reader_factory(cfg.destroy_events)
    try:
        with probe() as mine:
            _dump(report, cfg, reader, mine, sys_root)
        _closing(report, cfg, reader)
    finally:
        reader.close()
    _tuning(report, proc_root)
    if {"experiment", "activity"} & set(cfg.key):
        if cfg.flow_labels in ("socket", "both"):
            _flow_labels(report, cfg, sys_root, labels_factory)
        if cfg.flow_labels in ("packet", "both"):
            _packet_labels(report, cfg, sys_root, proc_root, packet_factory)


def _dump(
    report: Report, cfg: TcpConfig, reader: Reader, mine: tuple[int, int] | None, sys_root: Path
) -> None:
    try:
        diag = reader.dump()
    except OSError as exc:  # netlink.DumpError, or no NETLINK_SOCK_DIAG at all
        report.add(
            "tcp",
            "socket dump",
            "fail",
            f"sock_diag dump failed: {exc.strerror or exc}",
            "a kernel with CONFIG_INET_DIAG and CONFIG_INET_TCP_DIAG (docs/exporters/tcp.md)",
        )
        return

    def is_probe(d: netlink.DiagSocket) -> bool:
        return mine is not None and (d.family, d.sport) == mine and d.state == netlink.TCP_LISTEN

    probe = next((d for d in diag if is_probe(d)), None)
    others = [d for d in diag if d is not probe]
    listening = sum(d.state == netlink.TCP_LISTEN for d in others)
    info = sum(netlink.INET_DIAG_INFO in d.attrs for d in others)
    detail = (
        f"{len(others)} sockets ({listening} listening, {info} with tcp_info), "
        "not counting this check's own listener"
    )
    if reader.malformed:
        report.add(
            "tcp",
            "socket dump",
            "warn",
            f"{detail}; {reader.malformed} message(s) did not parse",
            "report it with the kernel version (docs/exporters/tcp.md)",
        )
    else:
        report.add("tcp", "socket dump", "ok", detail)
    sample = probe or (others[0] if others else None)
    _cgroup(report, cfg, sample, "this check" if probe else "the dump", sys_root)


def _cgroup(
    report: Report, cfg: TcpConfig, sample: netlink.DiagSocket | None, whose: str, sys_root: Path
) -> None:
    """Whether the kernel gives each socket's cgroup (INET_DIAG_CGROUP_ID, Linux 5.7: commit
    b1f3e43dbfac "inet_diag: Add cgroup id attribute"), and whether it names a cgroup v2."""
    keyed = "cgroup" in cfg.key
    if sample is None:
        report.add(
            "tcp",
            "socket cgroup",
            "warn" if keyed else "ok",
            "no socket to look at (none in the namespace, and no 127.0.0.1 listener could "
            "be opened)",
            "run the check where the agent runs" if keyed else "",
        )
        return
    raw = sample.attrs.get(netlink.INET_DIAG_CGROUP_ID)
    if raw is None:
        lost = (
            'tcp.key has cgroup: its label stays "" on every socket (the services\' flows '
            "to one peer and port merge)"
            if keyed
            else "tcp.key has no cgroup: nothing lost"
        )
        report.add(
            "tcp",
            "socket cgroup",
            "fail" if keyed else "ok",
            "the kernel gives no INET_DIAG_CGROUP_ID (Linux < 5.7, or no "
            f"CONFIG_SOCK_CGROUP_DATA); {lost}",
            "Linux 5.7 or later, or take cgroup out of tcp.key" if keyed else "",
        )
        return
    if not keyed:
        report.add("tcp", "socket cgroup", "ok", "given with the dump (tcp.key has no cgroup)")
        return
    # Named as the exporter names it: its own walk of the cgroup v2 tree.
    name = CgroupNames(sys_root, refresh=0.0).name(netlink.parse_cgroup_id(raw))
    if name:
        report.add(
            "tcp",
            "socket cgroup",
            "ok",
            f"given with the dump; a socket of {whose} is in {name}",
        )
    else:
        report.add(
            "tcp",
            "socket cgroup",
            "warn",
            "given with the dump, but its id is no directory of the cgroup v2 tree under "
            f'{sys_root}/fs/cgroup: the cgroup label stays ""',
            "mount cgroup2 at /sys/fs/cgroup (or /sys/fs/cgroup/unified) where the agent runs",
        )


def _closing(report: Report, cfg: TcpConfig, reader: Reader) -> None:
    if reader.tracking:
        report.add("tcp", "closing sockets", "ok", f"destroy messages ({reader.reason})")
    elif not cfg.destroy_events:
        report.add("tcp", "closing sockets", "ok", "sampling only (tcp.destroy_events: false)")
    else:
        report.add(
            "tcp",
            "closing sockets",
            "warn",
            f"sampling only: {reader.reason}; what a socket moves between its last sample "
            "and its close is not counted",
            "the bind needs no capability: look for an LSM or seccomp policy refusing it "
            "(docs/privileges.md), or tcp.destroy_events: false",
        )


def _tuning(report: Report, proc_root: Path) -> None:
    buffers, settings, names = read_tuning(proc_root)
    named = {k: v for k, v in names.items() if v}
    got = len(buffers) + len(settings) + len(named)
    missing = [s for s in BUFFERS if not any(k[0] == s for k in buffers)]
    missing += [s for s in (*SETTINGS, *NAMES) if s not in settings and s not in named]
    if not missing:
        report.add(
            "tcp",
            "host tuning",
            "ok",
            f"all {got} values; congestion control {names['net.ipv4.tcp_congestion_control']}"
            f", qdisc {names['net.core.default_qdisc']}",
        )
        return
    report.add(
        "tcp",
        "host tuning",
        "fail" if not got else "warn",
        f"{got} of {TUNING_VALUES} values; unreadable: {', '.join(missing[:6])}",
        f"the agent reads them under {proc_root}/sys/net; net.core.default_qdisc is only in "
        "the host's network namespace (net_core_table): run the agent there",
    )


def _flow_labels(
    report: Report, cfg: TcpConfig, sys_root: Path, labels_factory: LabelsFactory
) -> None:
    """The iter/tcp program as the exporter loads it (which decides from the effective
    capability set itself: exporters/tcp/flowlabels.py), walked once, then detached."""
    asked = " and ".join(d for d in cfg.key if d in ("experiment", "activity"))
    labels = labels_factory(cfg.max_sockets, sys_root)
    try:
        if labels.source == "none":
            fix = next((f for p, f in _LABEL_FIXES if labels.reason.startswith(p)), "")
            report.add(
                "tcp",
                "flow labels (SciTags)",
                "fail",
                f"tcp.key has {asked}, but the iter/tcp program cannot run: {labels.reason}; "
                f'{asked} would stay ""',
                fix or "docs/exporters/tcp.md (SciTags)",
            )
            return
        got = labels.read()
        failures = getattr(labels, "failures", 0)
    finally:
        labels.close()
    if failures:
        report.add(
            "tcp",
            "flow labels (SciTags)",
            "fail",
            f"{labels.source}: loaded and attached, but its walk failed",
            "docs/exporters/tcp.md (SciTags)",
        )
        return
    report.add(
        "tcp",
        "flow labels (SciTags)",
        "ok",
        f"{labels.source}: loaded, attached, walked once ({len(got)} IPv6 socket(s) with a "
        "flow label), detached",
    )


def _packet_labels(
    report: Report, cfg: TcpConfig, sys_root: Path, proc_root: Path, factory: PacketFactory
) -> None:
    """The tp_btf program as the exporter loads it (deciding from the effective capability
    set itself: exporters/tcp/egresslabels.py), its map read once, then detached."""
    asked = " and ".join(d for d in cfg.key if d in ("experiment", "activity"))
    packet = factory(cfg.packet_label_flows, sys_root, proc_root)
    try:
        if not packet.attached:
            fix = next((f for p, f in _LABEL_FIXES if packet.reason.startswith(p)), "")
            report.add(
                "tcp",
                "packet flow labels (SciTags)",
                "fail",
                f"tcp.flow_labels is {cfg.flow_labels}, but the tp_btf program cannot run: "
                f"{packet.reason}; labels written below the socket would not count in {asked}",
                (fix or "docs/exporters/tcp.md (SciTags)").replace("flowlabel", "egresslabel"),
            )
            return
        packet.read([])
        kept = packet.entries
    finally:
        packet.close()
    report.add(
        "tcp",
        "packet flow labels (SciTags)",
        "ok",
        f"{packet.reason}, map of {cfg.packet_label_flows} read once ({kept} 5-tuple(s) with a "
        "marked label), detached",
    )
