"""`wattbit agent --check`'s tcp rows (collector/preflight/tcp.py) with fakes for each outcome:
the dump (captured 6.18 sock_diag answers, tests/fixtures/tcp), the cgroup id given or not,
the destroy groups bound or refused, the tuning readable or not, and the flow-label iterator
loaded, refused for want of capabilities (decided by the exporter's own FlowLabels), or
failing; and tcp disabled."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.agent.config import AgentConfig, TcpConfig
from collector.preflight import agent as agent_check
from collector.preflight import tcp as tcp_check
from collector.preflight.report import Report
from exporters.hostfs import caps
from exporters.tcp import netlink
from exporters.tcp.flowlabels import FlowLabels
from tests.support.env import FIXTURES
from tests.support.tcpdiag import message

PROBE_PORT = 40111


def _sock(scenario: str, side: str, **change: object) -> netlink.DiagSocket:
    return dataclasses.replace(netlink.parse_diag_msg(message(scenario, side)), **change)  # type: ignore[arg-type]


class FakeReader:
    """The exporter's NetlinkReader, answering what a test says."""

    def __init__(
        self,
        sockets: list[netlink.DiagSocket],
        tracking: bool = True,
        reason: str = "bound the sock_diag destroy groups",
        malformed: int = 0,
        error: OSError | None = None,
    ) -> None:
        self.sockets, self.tracking, self.reason = sockets, tracking, reason
        self.malformed, self.error, self.closed = malformed, error, False

    def dump(self) -> list[netlink.DiagSocket]:
        if self.error is not None:
            raise self.error
        return self.sockets

    def close(self) -> None:
        self.closed = True


class FakeLabels:
    """The exporter's FlowLabels, loaded or not as a test says."""

    def __init__(self, source: str, reason: str, labels: int = 0, failures: int = 0) -> None:
        self.source, self.reason, self.labels, self.failures = source, reason, labels, failures
        self.read_count, self.closed = 0, False

    def read(self) -> dict[int, int]:
        self.read_count += 1
        return {i: 0x12345 for i in range(self.labels)}

    def close(self) -> None:
        self.closed = True


@contextlib.contextmanager
def _probe() -> Iterator[tuple[int, int] | None]:
    yield socket.AF_INET, PROBE_PORT


@contextlib.contextmanager
def _no_probe() -> Iterator[tuple[int, int] | None]:
    yield None


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, int]:
    """(sys_root with a cgroup v2 tree, proc_root with 6.18's net sysctls, the inode of
    system.slice/wattbit-agent.service)."""
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    unit = sys_root / "fs" / "cgroup" / "system.slice" / "wattbit-agent.service"
    unit.mkdir(parents=True)
    (sys_root / "fs" / "cgroup" / "cgroup.controllers").write_text("cpu io memory\n")
    for line in (FIXTURES / "tcp" / "sysctl-net-6.18.44.tsv").read_text().splitlines():
        path, value = line.split("\t", 1)
        (proc_root / "sys" / path).parent.mkdir(parents=True, exist_ok=True)
        (proc_root / "sys" / path).write_text(value + "\n")
    return sys_root, proc_root, unit.stat().st_ino


def _dump(cgroup: int | None) -> list[netlink.DiagSocket]:
    """Captured sockets of 6.18 plus this check's probe listener (with the cgroup id given,
    or without the attribute, as a kernel before 5.7 answers)."""
    socks = [_sock("bulk", s) for s in ("listener", "sender", "receiver")]
    probe = _sock("bulk", "listener", sport=PROBE_PORT, attrs=dict(socks[0].attrs))
    socks.append(probe)
    for s in socks:
        if cgroup is None:
            s.attrs.pop(netlink.INET_DIAG_CGROUP_ID, None)
        else:
            s.attrs[netlink.INET_DIAG_CGROUP_ID] = struct.pack("=Q", cgroup)
    return socks


def _run(
    roots: tuple[Path, Path, int],
    reader: FakeReader,
    labels: FakeLabels | None = None,
    probe: object = _probe,
    **cfg: object,
) -> dict[str, tuple[str, str, str]]:
    sys_root, proc_root, _ = roots
    report = Report("agent")
    made: list[tuple[int, Path]] = []

    def labels_factory(max_sockets: int, root: Path) -> FakeLabels:
        made.append((max_sockets, root))
        assert labels is not None, "the iterator was loaded though the key has no SciTags"
        return labels

    tcp_check.check_tcp(
        report,
        TcpConfig(**cfg),  # type: ignore[arg-type]
        sys_root,
        proc_root,
        reader_factory=lambda destroy: reader,
        labels_factory=labels_factory,
        probe=probe,  # type: ignore[arg-type]
    )
    assert reader.closed
    assert all(f.exporter == "tcp" for f in report.findings)
    if labels is not None and made:
        assert made == [(TcpConfig(**cfg).max_sockets, sys_root)]  # type: ignore[arg-type]
    return {f.check: (f.status, f.detail, f.fix) for f in report.findings}


def test_everything_works(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader(_dump(roots[2])))
    assert rows["socket dump"] == (
        "ok",
        "3 sockets (1 listening, 3 with tcp_info), not counting this check's own listener",
        "",
    )
    assert rows["socket cgroup"][:2] == (
        "ok",
        "given with the dump; a socket of this check is in wattbit-agent.service",
    )
    assert rows["closing sockets"][0] == "ok"
    assert rows["host tuning"] == (
        "ok",
        "all 14 values; congestion control bbr, qdisc pfifo_fast",
        "",
    )
    assert "flow labels (SciTags)" not in rows  # the default key has no experiment/activity


def test_dump_fails(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader([], error=netlink.DumpError(2, "No such file or directory")))
    status, detail, fix = rows["socket dump"]
    assert status == "fail" and "No such file or directory" in detail and "INET_DIAG" in fix
    assert "socket cgroup" not in rows and rows["host tuning"][0] == "ok"


def test_malformed_messages_warn(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader(_dump(roots[2]), malformed=2))
    assert (
        rows["socket dump"][0] == "warn" and "2 message(s) did not parse" in rows["socket dump"][1]
    )


def test_no_cgroup_id_fails_when_the_key_has_cgroup(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader(_dump(None)))
    status, detail, fix = rows["socket cgroup"]
    assert status == "fail"
    assert "no INET_DIAG_CGROUP_ID" in detail and "Linux < 5.7" in detail
    assert 'label stays ""' in detail and "5.7" in fix and "tcp.key" in fix


def test_no_cgroup_id_loses_nothing_without_cgroup_in_the_key(
    roots: tuple[Path, Path, int],
) -> None:
    rows = _run(roots, FakeReader(_dump(None)), key=["peer", "port"])
    status, detail, _ = rows["socket cgroup"]
    assert status == "ok" and "nothing lost" in detail


def test_cgroup_id_of_no_v2_directory_warns(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader(_dump(roots[2] + 10_000_000)))
    status, detail, fix = rows["socket cgroup"]
    assert status == "warn" and "no directory of the cgroup v2 tree" in detail and "cgroup2" in fix


def test_without_the_probe_any_socket_tells(roots: tuple[Path, Path, int]) -> None:
    socks = [s for s in _dump(None) if s.sport != PROBE_PORT]
    rows = _run(roots, FakeReader(socks), probe=_no_probe)
    assert rows["socket dump"][1].startswith("3 sockets")
    assert rows["socket cgroup"][0] == "fail"
    socks = [s for s in _dump(roots[2]) if s.sport != PROBE_PORT]
    rows = _run(roots, FakeReader(socks), probe=_no_probe)
    assert rows["socket cgroup"][:2] == (
        "ok",
        "given with the dump; a socket of the dump is in wattbit-agent.service",
    )


def test_nothing_to_look_at(roots: tuple[Path, Path, int]) -> None:
    rows = _run(roots, FakeReader([]), probe=_no_probe)
    assert rows["socket dump"][1].startswith("0 sockets (0 listening")
    assert rows["socket cgroup"][0] == "warn" and "no socket to look at" in rows["socket cgroup"][1]


def test_destroy_groups_refused_is_a_fallback(roots: tuple[Path, Path, int]) -> None:
    reason = "the destroy groups cannot be bound: Permission denied"
    rows = _run(roots, FakeReader(_dump(roots[2]), tracking=False, reason=reason))
    status, detail, fix = rows["closing sockets"]
    assert status == "warn" and detail.startswith("sampling only: " + reason)
    assert "tcp.destroy_events: false" in fix


def test_destroy_events_off(roots: tuple[Path, Path, int]) -> None:
    reader = FakeReader(_dump(roots[2]), tracking=False, reason="disabled in the configuration")
    rows = _run(roots, reader, destroy_events=False)
    assert rows["closing sockets"] == ("ok", "sampling only (tcp.destroy_events: false)", "")


def test_tuning_partly_and_not_readable(roots: tuple[Path, Path, int]) -> None:
    _, proc_root, _ = roots
    (proc_root / "sys/net/ipv4/tcp_rmem").write_text("4096 131072\n")  # not 3 values
    (proc_root / "sys/net/core/default_qdisc").unlink()
    status, detail, _ = _run(roots, FakeReader(_dump(roots[2])))["host tuning"]
    assert status == "warn"
    assert detail == ("10 of 14 values; unreadable: net.ipv4.tcp_rmem, net.core.default_qdisc")
    for p in sorted((proc_root / "sys").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    status, detail, fix = _run(roots, FakeReader(_dump(roots[2])))["host tuning"]
    assert status == "fail" and detail.startswith("0 of 14 values") and "sys/net" in fix


SCITAGS = ["peer", "port", "cgroup", "experiment", "activity"]


def test_flow_labels_load_walk_and_detach(roots: tuple[Path, Path, int]) -> None:
    labels = FakeLabels("bpf_iter", "iter/tcp program attached", labels=3)
    rows = _run(roots, FakeReader(_dump(roots[2])), labels, key=SCITAGS)
    assert rows["flow labels (SciTags)"] == (
        "ok",
        "bpf_iter: loaded, attached, walked once (3 IPv6 socket(s) with a flow label), detached",
        "",
    )
    assert labels.read_count == 1 and labels.closed


def test_flow_labels_walk_fails(roots: tuple[Path, Path, int]) -> None:
    labels = FakeLabels("bpf_iter", "iter/tcp program attached", failures=1)
    rows = _run(roots, FakeReader(_dump(roots[2])), labels, key=["peer", "activity"])
    assert rows["flow labels (SciTags)"][0] == "fail" and labels.closed


@pytest.mark.parametrize(
    ("reason", "fix"),
    [
        ("no kernel BTF", "CONFIG_DEBUG_INFO_BTF"),
        ("not built (scripts/build-bpf.sh)", "scripts/build-bpf.sh"),
        ("load failed: Operation not permitted", "docs/exporters/tcp.md"),
    ],
)
def test_flow_labels_cannot_load(roots: tuple[Path, Path, int], reason: str, fix: str) -> None:
    labels = FakeLabels("none", reason)
    rows = _run(roots, FakeReader(_dump(roots[2])), labels, key=["experiment"])
    status, detail, got_fix = rows["flow labels (SciTags)"]
    assert status == "fail" and reason in detail and 'experiment would stay ""' in detail
    assert fix in got_fix and labels.read_count == 0 and labels.closed


def test_flow_labels_missing_capabilities_decided_by_the_exporter(
    roots: tuple[Path, Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No capability in the effective set: the exporter's own FlowLabels says what is
    missing (the check does not decide it again), and the row fails naming them."""
    monkeypatch.setattr(caps, "current", lambda *a, **k: caps.CapSets())
    sys_root, proc_root, _ = roots
    report = Report("agent")
    cfg = TcpConfig(key=SCITAGS)  # type: ignore[arg-type]
    tcp_check.check_tcp(
        report,
        cfg,
        sys_root,
        proc_root,
        reader_factory=lambda destroy: FakeReader(_dump(roots[2])),
        labels_factory=FlowLabels,
        probe=_probe,
    )
    row = next(f for f in report.findings if f.check == "flow labels (SciTags)")
    assert row.status == "fail" and "missing CAP_BPF+CAP_PERFMON" in row.detail
    assert "experiment and activity would stay" in row.detail
    assert "CAP_BPF and CAP_PERFMON" in row.fix
    assert report.exit_code() == 1


class FakePackets:
    """The exporter's PacketLabels, attached or not as a test says."""

    source = "packet"

    def __init__(self, reason: str, entries: int = 0) -> None:
        self.reason, self.entries = reason, entries
        self.attached = reason.startswith("tp_btf")
        self.read_count, self.closed = 0, False

    def read(self, sockets: object) -> dict[int, int]:
        self.read_count += 1
        return {}

    def close(self) -> None:
        self.closed = True


def _run_packet(
    roots: tuple[Path, Path, int], packets: FakePackets, flow_labels: str
) -> dict[str, tuple[str, str, str]]:
    sys_root, proc_root, _ = roots
    report = Report("agent")
    made: list[tuple[int, Path, Path]] = []

    def factory(flows: int, sys: Path, proc: Path) -> FakePackets:
        made.append((flows, sys, proc))
        return packets

    tcp_check.check_tcp(
        report,
        TcpConfig(key=SCITAGS, flow_labels=flow_labels, packet_label_flows=4096),  # type: ignore[arg-type]
        sys_root,
        proc_root,
        reader_factory=lambda destroy: FakeReader(_dump(roots[2])),
        labels_factory=lambda n, root: FakeLabels("bpf_iter", "iter/tcp program attached"),
        probe=_probe,
        packet_factory=factory,
    )
    assert made == [(4096, sys_root, proc_root)]
    return {f.check: (f.status, f.detail, f.fix) for f in report.findings}


def test_packet_flow_labels_attach_read_and_detach(roots: tuple[Path, Path, int]) -> None:
    packets = FakePackets("tp_btf/net_dev_start_xmit attached", entries=2)
    rows = _run_packet(roots, packets, "packet")
    status, detail, _ = rows["packet flow labels (SciTags)"]
    assert status == "ok" and "map of 4096 read once (2 5-tuple(s)" in detail
    assert "flow labels (SciTags)" not in rows  # packet only: the iterator is not loaded
    assert packets.read_count == 1 and packets.closed


def test_packet_flow_labels_cannot_load(roots: tuple[Path, Path, int]) -> None:
    packets = FakePackets("missing CAP_BPF+CAP_PERFMON")
    rows = _run_packet(roots, packets, "both")
    status, detail, fix = rows["packet flow labels (SciTags)"]
    assert status == "fail" and "missing CAP_BPF+CAP_PERFMON" in detail
    assert "CAP_BPF and CAP_PERFMON" in fix and packets.read_count == 0 and packets.closed
    assert rows["flow labels (SciTags)"][0] == "ok"  # both: the iterator's row too


def test_tcp_disabled_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """tcp.enabled: false: one `off` row, and nothing of the exporter is built."""

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("tcp was checked though disabled")

    monkeypatch.setattr(agent_check, "check_tcp", boom)
    off = {e: {"enabled": False} for e in ("blockio", "nic", "pcie", "power", "smart", "tcp")}
    report = agent_check.check_agent(AgentConfig.model_validate(off))
    rows = [(f.check, f.status, f.detail) for f in report.findings if f.exporter == "tcp"]
    assert rows == [("enabled", "off", "tcp.enabled: false")]


def test_tcp_enabled_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[TcpConfig] = []
    monkeypatch.setattr(agent_check, "check_tcp", lambda r, cfg, s, p: seen.append(cfg))
    off = {e: {"enabled": False} for e in ("blockio", "nic", "pcie", "power", "smart")}
    cfg = AgentConfig.model_validate({**off, "tcp": {"key": ["peer", "experiment"]}})
    agent_check.check_agent(cfg)
    assert [c.key for c in seen] == [["peer", "experiment"]]
