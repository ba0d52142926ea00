"""A socket born and closed between two samples is keyed as its live samples would have been.

The kernel's destroy message carries no INET_DIAG_CGROUP_ID and inode 0
(inet_diag_handler_get_info(), net/ipv4/inet_diag.c): its owner comes from its listener or
from its (peer, port)'s sockets in the sample before, never `""` beside the live key.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from exporters.tcp import netlink
from exporters.tcp.exporter import KeyConfig, TcpExporter
from exporters.tcp.flows import Key
from exporters.tcp.tcpinfo import FIELDS, KNOWN_SIZE

PEER = "10.1.2.3"


def tcp_info(acked: int) -> bytes:
    """A tcp_info attribute of this layout's length with bytes_acked set."""
    buf = bytearray(KNOWN_SIZE)
    offset, s = FIELDS["bytes_acked"]
    s.pack_into(buf, offset, acked)
    return bytes(buf)


def diag(cookie: int, sport: int, dport: int, acked: int = 0, cgroup: int | None = None,
         state: int = netlink.TCP_ESTABLISHED, dst: str = PEER) -> netlink.DiagSocket:  # fmt: skip
    attrs = {netlink.INET_DIAG_INFO: tcp_info(acked)}
    if cgroup is not None:
        attrs[netlink.INET_DIAG_CGROUP_ID] = struct.pack("=Q", cgroup)
    return netlink.DiagSocket(socket.AF_INET, state, sport, dport, "10.0.0.1", dst, cookie,
                              0, cookie if cgroup is not None else 0, attrs)  # fmt: skip


class Steps:
    """A SocketReader replaying (dump, destroy messages) per sample."""

    tracking = True
    reason = "test"
    malformed = 0

    def __init__(self, steps: list[tuple[list[netlink.DiagSocket], list[netlink.DiagSocket]]]):
        self.steps = steps
        self.i = 0

    def dump(self) -> list[netlink.DiagSocket]:
        return self.steps[self.i][0]

    def drain(self) -> tuple[list[netlink.DiagSocket], bool]:
        gone = self.steps[self.i][1]
        self.i += 1
        return gone, False

    def close(self) -> None:
        pass


def cgroups(tmp: Path) -> dict[str, int]:
    """A cgroup v2 tree under tmp/fs/cgroup; each unit's id (its directory's inode)."""
    root = tmp / "fs" / "cgroup"
    (root / "system.slice" / "nginx.service").mkdir(parents=True)
    (root / "system.slice" / "backup.service").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory\n")
    return {
        "/": root.stat().st_ino,
        "nginx.service": (root / "system.slice" / "nginx.service").stat().st_ino,
        "backup.service": (root / "system.slice" / "backup.service").stat().st_ino,
    }


def totals(tmp: Path, steps: list[tuple[list[netlink.DiagSocket], list[netlink.DiagSocket]]]
           ) -> dict[Key, int]:  # fmt: skip
    """Bytes sent per key after the steps."""
    exp = TcpExporter(reader=Steps(steps), sys_root=tmp, key=KeyConfig(("peer", "port", "cgroup")),
                      top_k=50)  # fmt: skip
    for _ in steps:
        exp.sample_once()
    assert exp.snapshot is not None
    return {k: v[0] for k, v in exp.snapshot.totals.items() if v[0]}


def test_client_socket_closed_unseen_joins_its_peers_live_key(tmp_path: Path) -> None:
    ids = cgroups(tmp_path)
    live = diag(1, 40000, 5201, 100, ids["/"])
    got = totals(tmp_path, [
        ([live], []),
        ([diag(1, 40000, 5201, 600, ids["/"])], []),
        # born after the last sample and closed before this one: no cgroup id in the message
        ([diag(1, 40000, 5201, 900, ids["/"])], [diag(2, 40002, 5201, 3000)]),
    ])  # fmt: skip
    assert got == {(PEER, "5201", "/", "", "", ""): 500 + 300 + 3000}


def test_accepted_socket_closed_unseen_takes_its_listeners_cgroup(tmp_path: Path) -> None:
    ids = cgroups(tmp_path)
    listener = diag(9, 80, 0, 0, ids["nginx.service"], state=netlink.TCP_LISTEN, dst="0.0.0.0")
    got = totals(tmp_path, [([listener], []), ([listener], [diag(3, 80, 51000, 7000)])])
    assert got == {(PEER, "80", "nginx.service", "", "", ""): 7000}


def test_two_owners_of_one_peer_and_port_leave_it_unknown(tmp_path: Path) -> None:
    ids = cgroups(tmp_path)
    both = [diag(1, 40000, 5201, 0, ids["nginx.service"]),
            diag(2, 40001, 5201, 0, ids["backup.service"])]  # fmt: skip
    got = totals(tmp_path, [(both, []), (both, [diag(3, 40002, 5201, 4000)])])
    assert got == {(PEER, "5201", "", "", "", ""): 4000}  # not guessed


def test_a_message_with_its_cgroup_keeps_it(tmp_path: Path) -> None:
    ids = cgroups(tmp_path)
    got = totals(tmp_path, [
        ([diag(1, 40000, 5201, 0, ids["/"])], []),
        ([diag(1, 40000, 5201, 0, ids["/"])], [diag(2, 40002, 5201, 10, ids["backup.service"])]),
    ])  # fmt: skip
    assert got == {(PEER, "5201", "backup.service", "", "", ""): 10}


class Labels:
    """A LabelSource with fixed labels."""

    source, reason = "bpf_iter", "test"

    def __init__(self, labels: dict[int, int]) -> None:
        self.labels = labels

    def read(self) -> dict[int, int]:
        return self.labels

    def close(self) -> None:
        pass


def test_scitags_from_the_flow_label_and_for_the_closed_unseen(tmp_path: Path) -> None:
    """Experiment 3 activity 2 (scitags.encode) on socket 1; socket 2 unmarked (an automatic
    label's hash: experiment bits 0); socket 3 born and closed unseen takes 1's (peer, port)."""
    from exporters.tcp import scitags

    ids = cgroups(tmp_path)
    dims = ("peer", "port", "experiment", "activity")
    labels = Labels({1: scitags.encode(3, 2, entropy=21), 2: 0x00003})
    steps = [
        ([diag(1, 40000, 5201, 0, ids["/"]), diag(2, 40001, 80, 0, ids["/"])], []),
        ([diag(1, 40000, 5201, 50, ids["/"]), diag(2, 40001, 80, 60, ids["/"])],
         [diag(3, 40002, 5201, 70)]),
    ]  # fmt: skip
    exp = TcpExporter(reader=Steps(steps), sys_root=tmp_path, key=KeyConfig(dims), top_k=50,
                      labels=labels)  # fmt: skip
    for _ in steps:
        exp.sample_once()
    assert exp.snapshot is not None
    got = {k: v[0] for k, v in exp.snapshot.totals.items() if v[0]}
    assert got == {(PEER, "5201", "", "", "3", "2"): 50 + 70, (PEER, "80", "", "", "", ""): 60}
    text = "".join(f"{m.name} {s.labels}\n" for m in exp.collect() for s in m.samples)
    assert "wattbit_tcp_flow_label_info {'source': 'bpf_iter', 'reason': 'test'}" in text


def test_the_agent_starts_sampling_before_the_first_scrape(tmp_path: Path) -> None:
    """start_exporters starts the sampler (the first scrape then finds a sample, issue 35's
    ready); a scrape after it starts no second thread; close stops it."""
    from collector.agent.main import start_exporters

    ids = cgroups(tmp_path)
    steps = [([diag(1, 40000, 5201, 100, ids["/"])], [])] * 3
    exp = TcpExporter(reader=Steps(steps), sys_root=tmp_path, key=KeyConfig(("peer", "port")),
                      top_k=50)  # fmt: skip
    exp.background = True  # as with the live reader: sampled by its own thread
    start_exporters([exp])
    thread = exp._thread
    assert thread is not None and thread.name == "tcp-sample"
    assert exp._first.wait(10.0) and exp.snapshot is not None  # before any collect
    names = {m.name for m in exp.collect()}
    assert exp._thread is thread and "wattbit_tcp_sockets" in names
    exp.close()
    assert not thread.is_alive()
