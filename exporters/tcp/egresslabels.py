"""The IPv6 flow label outgoing TCP packets leave with, by 5-tuple: the tp_btf program
core/egresslabel.bpf.c, which sees each packet after tc egress, so after scitags flowd's eBPF
marking (docs/exporters/tcp.md, "SciTags": `tcp.flow_labels: packet`).

The program keeps (saddr, daddr, sport, dport) -> label in a bounded LRU hash; each sample
reads the map after sock_diag's dump in a few syscalls (BPF_MAP_LOOKUP_BATCH), joins it to the
dump's IPv6 sockets on the same 5-tuple, and deletes the entries no socket had in two samples
running (a closed flow's entry leaves then, not only when the LRU needs its room; one sample is
not enough: a socket born between the dump and the map read is in the next dump only).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from exporters.hostfs import caps, libbpf
from exporters.tcp import bpfload, hostread, netlink

OBJECT = bpfload.CORE / "egresslabel.bpf.o"
KEY_SIZE = 40  # struct flow_key of egresslabel.bpf.c: saddr, daddr, sport, dport (network), pad
VALUE = struct.Struct("=I")
FLOW_LABEL_MASK = 0xFFFFF
MAX_DELETES = 65_536  # per sample; the LRU bounds the rest anyway


def flow_key(src: str, dst: str, sport: int, dport: int) -> bytes | None:
    """The map key of an IPv6 socket's outgoing packets; None for an address that is not one."""
    try:
        addrs = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
    except (OSError, ValueError):
        return None
    return addrs + struct.pack("!HH", sport, dport) + bytes(4)


def join(entries: dict[bytes, int], sockets: Iterable[netlink.DiagSocket]) -> dict[int, int]:
    """cookie -> label of the IPv6 sockets whose 5-tuple has a map entry (a pure function)."""
    out: dict[int, int] = {}
    for d in sockets:
        if d.family != socket.AF_INET6:
            continue
        k = flow_key(d.src, d.dst, d.sport, d.dport)
        label = entries.get(k) if k is not None else None
        if label:
            out[d.cookie] = label & FLOW_LABEL_MASK
    return out


def stale(entries: dict[bytes, int], sockets: Iterable[netlink.DiagSocket]) -> list[bytes]:
    """The keys no socket of the dump has (their flows closed, or never this namespace's)."""
    live = {flow_key(d.src, d.dst, d.sport, d.dport) for d in sockets}
    return [k for k in entries if k not in live]


class PacketLabels:
    """Loads and attaches the program where the process may (CAP_BPF + CAP_PERFMON: a tracing
    program, as the iterator) and the kernel has BTF; says why not otherwise. Reading and
    deleting map entries later go through the map's fd, opened while the capabilities were
    held (Linux 6.5+ checks none on an fd it already gave; before, bpf_read_keep says what to
    keep)."""

    source = "packet"

    def __init__(
        self, max_flows: int, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")
    ) -> None:
        self.max_flows = max_flows
        self.reason = ""
        self.entries = 0
        self.failures = 0
        self._obj: libbpf.Object | None = None
        self._map: libbpf.Map | None = None
        self._unmatched: set[bytes] = set()  # keys no socket had in the last sample
        netns = hostread.inode(proc_root, "self/ns/net")
        self.reason = bpfload.unavailable(OBJECT, sys_root) or (
            "no network namespace in proc" if netns is None else ""
        )
        if not self.reason and netns is not None:
            self._load(netns)

    @property
    def attached(self) -> bool:
        """Whether the program runs."""
        return self._map is not None

    def _load(self, netns: int) -> None:
        def setup(obj: libbpf.Object) -> None:
            obj.map("egress_labels").set_max_entries(self.max_flows)
            rodata = obj.map(".rodata").initial_value()
            struct.pack_into("=I", rodata, 0, netns)  # const volatile u32 netns_ino

        got = bpfload.load(OBJECT, "egress_label", "packet flow labels", setup)
        if isinstance(got, str):
            self.reason = got
            return
        self._obj, self._map = got, got.map("egress_labels")
        self.reason = "tp_btf/net_dev_start_xmit attached"

    def bpf_read_keep(self) -> frozenset[int]:
        """The capability the map reads need after the drop (caps.bpf_read_keep), found by one
        real lookup without it; none when not attached."""
        m = self._map
        if m is None:
            return frozenset()
        return caps.bpf_read_keep(lambda: m.lookup(bytes(KEY_SIZE), VALUE.size))

    def program_fd(self) -> int | None:
        """The program's fd (its run_time_ns and run_cnt in /proc/self/fdinfo), if attached."""
        return self._obj.program("egress_label").fd if self._obj and self._map else None

    def entries_now(self) -> dict[bytes, int]:
        """5-tuple key -> label of every map entry ({} when not attached or unreadable)."""
        if self._map is None:
            return {}
        try:
            return {
                k: VALUE.unpack_from(v)[0] for k, v in self._map.lookup_batch(KEY_SIZE, VALUE.size)
            }
        except OSError:
            self.failures += 1
            return {}

    def read(self, sockets: Sequence[netlink.DiagSocket]) -> dict[int, int]:
        """cookie -> label of the dump's IPv6 sockets with a marked packet (read after the
        dump); entries that matched no socket in this dump and the last one are deleted."""
        entries = self.entries_now()
        out = join(entries, sockets)
        unmatched = set(stale(entries, sockets))
        gone = list(unmatched & self._unmatched)[:MAX_DELETES]
        for k in gone:
            self._delete(k)
        self._unmatched = unmatched.difference(gone)
        self.entries = len(entries) - len(gone)
        return out

    def _delete(self, key: bytes) -> None:
        if self._map is None:
            return
        try:
            self._map.delete(key)
        except OSError:
            self.failures += 1

    def close(self) -> None:
        """Detach and free the program and its map."""
        if self._obj is not None:
            self._obj.close()
        self._obj = None
        self._map = None
