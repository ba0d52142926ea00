"""The packet flow-label source's userspace half: map keys, the join to sock_diag's sockets,
the two-sample deletion of closed flows' entries, and which label wins beside the socket's."""

from __future__ import annotations

import socket
from pathlib import Path

from exporters.tcp import netlink, scitags
from exporters.tcp.egresslabels import KEY_SIZE, PacketLabels, flow_key, join, stale
from exporters.tcp.exporter import KeyConfig, TcpExporter
from tests.unit.test_tcp_closed_owner import Labels, Steps, tcp_info

A, B = "fd00:31::1", "fd00:31::2"
MARKED = scitags.encode(3, 2, entropy=29)


def v6(cookie: int, sport: int, dport: int, acked: int = 0, dst: str = B) -> netlink.DiagSocket:
    return netlink.DiagSocket(socket.AF_INET6, netlink.TCP_ESTABLISHED, sport, dport, A, dst,
                              cookie, 0, 0, {netlink.INET_DIAG_INFO: tcp_info(acked)})  # fmt: skip


def key(sport: int, dport: int, dst: str = B) -> bytes:
    k = flow_key(A, dst, sport, dport)
    assert k is not None
    return k


def test_the_key_is_the_headers_addresses_and_ports_in_network_order() -> None:
    k = key(40000, 5201)
    assert len(k) == KEY_SIZE
    assert k[:16] == socket.inet_pton(socket.AF_INET6, A)
    assert k[16:32] == socket.inet_pton(socket.AF_INET6, B)
    assert k[32:36] == bytes([0x9C, 0x40, 0x14, 0x51]) and k[36:] == bytes(4)
    assert flow_key("10.0.0.1", B, 1, 2) is None  # an IPv4 socket has no IPv6 packets


def test_join_gives_the_labels_of_ipv6_sockets_by_cookie() -> None:
    entries = {key(40000, 5201): MARKED, key(40001, 5201): 0x3 | 0xFFF00000}
    v4 = netlink.DiagSocket(socket.AF_INET, 1, 40000, 5201, "10.0.0.1", "10.0.0.2", 9, 0, 0)
    got = join(entries, [v6(1, 40000, 5201), v6(2, 40001, 5201), v6(3, 40002, 5201), v4])
    assert got == {1: MARKED, 2: 0x3}  # 20 bits; 3 has no entry; the IPv4 socket none
    assert stale(entries, [v6(1, 40000, 5201)]) == [key(40001, 5201)]


class FakeMap(PacketLabels):
    """The userspace half over a dict instead of the kernel's map (no BTF under tmp: the
    program is not loaded)."""

    def __init__(self, tmp: Path, entries: dict[bytes, int]) -> None:
        super().__init__(256, sys_root=tmp, proc_root=tmp)
        self.map = entries

    def entries_now(self) -> dict[bytes, int]:
        return dict(self.map)

    def _delete(self, key: bytes) -> None:
        del self.map[key]


def test_an_entry_leaves_after_two_samples_without_its_socket(tmp_path: Path) -> None:
    m = FakeMap(tmp_path, {key(40000, 5201): MARKED, key(40001, 5201): MARKED})
    assert m.reason == "no kernel BTF" and not m.attached
    live = [v6(1, 40000, 5201)]
    # 40001's socket: born after the dump, or closed; once is not enough to tell
    assert m.read(live) == {1: MARKED} and m.entries == 2
    assert len(m.map) == 2
    assert m.read(live) == {1: MARKED} and m.entries == 1
    assert list(m.map) == [key(40000, 5201)]
    # one seen again in between starts over
    m.map[key(40001, 5201)] = MARKED
    m.read(live)
    m.read([*live, v6(2, 40001, 5201)])
    m.read(live)
    assert len(m.map) == 2
    assert m.read([]) == {} and m.read([]) == {} and m.map == {} and m.entries == 0


class Packets:
    """A PacketSource with fixed labels by 5-tuple."""

    source, reason, entries, attached = "packet", "test", 0, True

    def __init__(self, by_key: dict[bytes, int]) -> None:
        self.by_key = by_key

    def read(self, sockets: object) -> dict[int, int]:
        got = join(self.by_key, sockets)  # type: ignore[arg-type]
        self.entries = len(self.by_key)
        return got

    def close(self) -> None:
        pass


def test_the_packets_label_wins_over_the_sockets(tmp_path: Path) -> None:
    """Socket 1 sends with (5, 1) and its packets leave marked (3, 2): (3, 2), the wire's.
    Socket 2 has its own label only (no packet entry): (5, 1). Socket 3: neither."""
    dims = ("peer", "port", "experiment", "activity")
    own = scitags.encode(5, 1, entropy=6)
    socks = [v6(1, 40000, 5201), v6(2, 40001, 5201), v6(3, 40002, 80)]
    later = [v6(1, 40000, 5201, 10), v6(2, 40001, 5201, 20), v6(3, 40002, 80, 30)]
    exp = TcpExporter(
        reader=Steps([(socks, []), (later, [])]),
        sys_root=tmp_path,
        key=KeyConfig(dims),
        labels=Labels({1: own, 2: own}),
        packet=Packets({key(40000, 5201): MARKED}),
    )
    exp.sample_once()
    exp.sample_once()
    assert exp.snapshot is not None
    got = {k: v[0] for k, v in exp.snapshot.totals.items() if v[0]}
    assert got == {(B, "5201", "", "", "3", "2"): 10, (B, "5201", "", "", "5", "1"): 20,
                   (B, "80", "", "", "", ""): 30}  # fmt: skip
    text = "".join(f"{m.name} {s.labels} {s.value}\n" for m in exp.collect() for s in m.samples)
    assert "wattbit_tcp_flow_label_info {'source': 'bpf_iter', 'reason': 'test'} 1" in text
    assert "wattbit_tcp_flow_label_info {'source': 'packet', 'reason': 'test'} 1" in text
    assert "wattbit_tcp_flow_label_entries {'source': 'socket'} 2" in text
    assert "wattbit_tcp_flow_label_entries {'source': 'packet'} 1" in text
