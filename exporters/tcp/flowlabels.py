"""The IPv6 flow label each TCP socket sends with, by socket cookie: the iter/tcp program
core/flowlabel.bpf.c, loaded through libbpf (exporters/hostfs/libbpf.py) when the exporter is
built, read once per sample (docs/exporters/tcp.md, "SciTags").

Why a BPF iterator: sock_diag has no flow-label attribute (inet_diag up to Linux 6.18), and
/proc/net/ip6_flowlabel lists the leases of IPV6_FLOWLABEL_MGR by label and destination only,
not by socket (two transfers to one peer with different labels cannot be told apart). The
iterator reads each socket's own `ipv6_pinfo.flow_label`, the label its packets carry.
"""

from __future__ import annotations

import struct
from pathlib import Path

from exporters.hostfs import caps, libbpf
from exporters.tcp import bpfload

OBJECT = bpfload.CORE / "flowlabel.bpf.o"
RECORD = struct.Struct("=QII")  # struct record of flowlabel.bpf.c: cookie, label, pad
FLOW_LABEL_MASK = 0xFFFFF


def parse_records(data: bytes) -> dict[int, int]:
    """cookie -> flow label from the iterator's output (a trailing partial record is dropped,
    labels beyond 20 bits are masked: the program masks them already)."""
    end = len(data) - len(data) % RECORD.size
    return {
        cookie: label & FLOW_LABEL_MASK
        for cookie, label, _pad in RECORD.iter_unpack(memoryview(data)[:end])
    }


class FlowLabels:
    """Loads and attaches the iterator where the process may (CAP_BPF + CAP_PERFMON, or
    CAP_SYS_ADMIN before 5.8: a tracing program type) and the kernel has BTF; says why not
    otherwise. Reading it later needs no capability (a new iterator of an existing link) on
    Linux 6.5+; before, bpf_read_keep says what to keep."""

    def __init__(self, max_sockets: int, sys_root: Path = Path("/sys")) -> None:
        self.max_bytes = max_sockets * RECORD.size
        self.source, self.reason = "none", ""
        self.failures = 0
        self._obj: libbpf.Object | None = None
        self._prog: libbpf.Program | None = None
        self.reason = bpfload.unavailable(OBJECT, sys_root)
        if not self.reason:
            self._load()

    def _load(self) -> None:
        got = bpfload.load(OBJECT, "flow_labels", "flow labels", iterator=True)
        if isinstance(got, str):
            self.reason = got
            return
        self._obj, self._prog = got, got.program("flow_labels")
        self.source, self.reason = "bpf_iter", "iter/tcp program attached"

    def bpf_read_keep(self) -> frozenset[int]:
        """The capability a walk needs after the drop (caps.bpf_read_keep: bpf_iter_create is
        a bpf() command too), found by one real walk without it; none when not loaded."""
        prog = self._prog
        if prog is None:
            return frozenset()
        return caps.bpf_read_keep(lambda: prog.iterate(RECORD.size))

    def read(self) -> dict[int, int]:
        """cookie -> label of every IPv6 TCP socket sending with a label; {} when not loaded."""
        if self._prog is None:
            return {}
        try:
            return parse_records(self._prog.iterate(self.max_bytes))
        except OSError:
            self.failures += 1
            return {}

    def close(self) -> None:
        """Detach and free the program."""
        if self._obj is not None:
            self._obj.close()
        self._obj = self._prog = None
