"""Pure parsers for the /proc files behind the NIC exporter (text in, dataclasses out).

Covers /proc/softirqs, /proc/net/softnet_stat, /proc/net/snmp and /proc/net/netstat, and the
queue of a NIC IRQ from its name (/proc/interrupts itself is parsed in exporters/hostfs, which
the pcie exporter reads it with too). No function here touches the filesystem, and none raises
on odd input: a line that does not fit the layout is skipped, so one unexpected kernel row never
costs the rest of a scrape. A number beyond what the kernel can print (a counter of 2^64 or
more, or digits past int()'s 4300-digit limit) makes its line malformed too; each kind of
skipped line is logged once (debug) per process, never turned into a 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from exporters.hostfs.interrupts import cpu_table
from exporters.hostfs.numbers import is_uint, note_malformed, parse_u32, parse_u64

__all__ = [
    "SoftnetRow",
    "irq_queue",
    "parse_snmp",
    "parse_softirqs",
    "parse_softnet_stat",
]

_HEX = re.compile(r"[0-9a-fA-F]+")


# ---------------------------------------------------------------------------------------------
# NIC queue IRQ names
# ---------------------------------------------------------------------------------------------

# Names are built by each driver's request_irq() call; the ones matched here:
#   mlx5 (>= 5.x)  "mlx5_comp%d@pci:%s", control "mlx5_async%d@pci:%s"
#                  drivers/net/ethernet/mellanox/mlx5/core/pci_irq.c
#   mlx5 (4.x)     "mlx5_comp%d@pci:%s"; control EQs "mlx5_{cmd,async,pages}_eq@pci:%s"
#   mlx4           "mlx4-%d@<pci>"; control "mlx4-async@pci:<pci>" (drivers/net/ethernet/
#                  mellanox/mlx4/eq.c). NB the number is the EQ vector, shared by both ports and
#                  handed out by least use, not a netdev queue index.
#   virtio-net     "virtio%d-input.%u" / "virtio%d-output.%u" (vq names "input.%u"/"output.%u",
#                  drivers/net/virtio_net.c; "%s-%s" in drivers/virtio/virtio_pci_common.c).
#                  virtio-rng's bare "virtio4-input" and virtio-vsock's "virtio3-rx" have no
#                  ".N", which is what keeps them out.
#   ixgbe/igb/bnxt "%s-TxRx-%u", "%s-rx-%u", "%s-tx-%u"; the netdev name alone is the
#                  link/"other" vector  drivers/net/ethernet/intel/ixgbe/ixgbe_main.c
#   i40e/ice       "i40e-%s-TxRx-%d" ("%s-%s-%d" with basename "i40e-<netdev>"); misc vector
#                  "i40e-<pci>:misc"
#   ena            "%s-Tx-Rx-%d"; management "ena-mgmnt@pci:%s"
#   hns3           "%s-TxRx-%u" with the PCI name as prefix; nfp "%s-rxtx-%d"
#   bnx2x/qede     "%s-fp-%d"; be2net "%s-q%d"; cxgb4 "%s-Rx%d"-like
#   sfc            "%s-%d" (one vector per channel)
_MLX5_COMP = re.compile(r"mlx5_comp(\d+)")
_VIRTIO_NET = re.compile(r"virtio\d+-(input|output)\.(\d+)")
_COMBINED = re.compile(r".+[-_](?:tx-?rx|rx-?tx|fp|q)[-_]?(\d+)", re.IGNORECASE)
_SPLIT = re.compile(r".+[-_](rx|tx)[-_]?(\d+)", re.IGNORECASE)
# sfc-style "<netdev>-<n>": a single word ending in "-<digits>". mlx4's "mlx4-3" lands here too.
_DASH_NUMBER = re.compile(r"[A-Za-z][\w.:-]*-(\d+)")


def _queue(kind: str, digits: str) -> tuple[str, int] | None:
    number = parse_u32(digits)
    return None if number is None else (kind, number)


def irq_queue(name: str) -> tuple[str, int] | None:
    """(kind, queue) for a NIC queue IRQ action name, kind "rx"/"tx"/"combined"; else None."""
    # A device suffix after "@" ("@pci:0000:3b:00.0", mlx4's "@0000:3b:00.0") never carries
    # the queue number, and its dots/colons would only confuse the patterns below.
    base = name.strip().split("@", 1)[0]
    if not base or " " in base:
        return None  # shared IRQs ("a, b") and descriptions are not a single queue
    match = _MLX5_COMP.fullmatch(base)
    if match:
        return _queue("combined", match.group(1))
    if base.startswith("mlx5_"):
        return None  # mlx5_async*, mlx5_pages_eq, mlx5_cmd_eq, mlx5_combined*, mlx5_sf_*
    match = _VIRTIO_NET.fullmatch(base)
    if match:
        return _queue("rx" if match.group(1) == "input" else "tx", match.group(2))
    if base.startswith("virtio"):
        return None  # config, control, other virtio devices' queues (blk "req.0", vsock "rx")
    match = _COMBINED.fullmatch(base)
    if match:
        return _queue("combined", match.group(1))
    match = _SPLIT.fullmatch(base)
    if match:
        return _queue(match.group(1).lower(), match.group(2))
    match = _DASH_NUMBER.fullmatch(base)
    if match:
        return _queue("combined", match.group(1))
    return None


# ---------------------------------------------------------------------------------------------
# /proc/softirqs
# ---------------------------------------------------------------------------------------------


def parse_softirqs(text: str) -> dict[str, dict[int, int]]:
    """Parse /proc/softirqs into {type: {cpu: count}} for every softirq type listed."""
    # fs/proc/softirqs.c show_softirqs() walks for_each_possible_cpu(), unlike /proc/interrupts:
    # offline CPUs keep a column here (their counts just stop moving).
    # https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/fs/proc/softirqs.c
    cpus, labelled = cpu_table(text)
    out: dict[str, dict[int, int]] = {}
    for label, tail in labelled:
        values: dict[int, int] = {}
        for cpu, token in zip(cpus, tail.split(), strict=False):
            if not is_uint(token):
                break
            value = parse_u64(token)
            if value is None:
                values = {}
                note_malformed("/proc/softirqs row (a count of 2^64 or more)")
                break
            values[cpu] = value
        if values:
            out[label] = values
    return out


# ---------------------------------------------------------------------------------------------
# /proc/net/softnet_stat
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SoftnetRow:
    """One /proc/net/softnet_stat row: the backlog/NAPI counters of one CPU."""

    cpu: int  # column 13 when printed (>= 5.10), else the row's position (see parse_softnet_stat)
    processed: int  # column 1: packets taken off the backlog / NAPI
    dropped: int  # column 2: backlog full (netdev_max_backlog) or flow-limit drops
    time_squeeze: int  # column 3: net_rx_action ran out of budget or time with work left
    received_rps: int  # column 10: RPS/RFS IPIs received, 0 if absent
    flow_limit_count: int  # column 11: flow-limit drops (>= 3.11), 0 if absent
    backlog_len: int = 0  # column 12: input_pkt_queue + process_queue length (>= 5.10), 0 if absent


# Column layout of net/core/net-procfs.c softnet_seq_show() (every field printed "%08x"):
#   1 processed  2 dropped  3 time_squeeze  4-8 always 0 (were fastroute)  9 cpu_collision
#   (a literal 0 in newer kernels)  10 received_rps  11 flow_limit_count (3.11, commit 99bbc7074190)
#   12 backlog length  13 CPU id (5.10, commit 7d58e6555870 "net-sysfs: add backlog len and CPU
#   id to softnet data"; RHEL 8.5 backported it to 4.18.0-348)
#   14 input_pkt_queue length  15 process_queue length (6.4, commit 59da2d7b0e99)
# https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/net/core/net-procfs.c
_SN_PROCESSED, _SN_DROPPED, _SN_SQUEEZE = 0, 1, 2
_SN_RPS, _SN_FLOW_LIMIT, _SN_BACKLOG, _SN_CPU = 9, 10, 11, 12


def parse_softnet_stat(text: str, cpus: Sequence[int] | None = None) -> list[SoftnetRow]:
    """Parse /proc/net/softnet_stat; cpus (e.g. Interrupts.cpus) maps rows on pre-5.10 kernels."""
    # softnet_get_online() skips offline CPUs, so the file has one row per *online* CPU. From
    # 5.10 column 13 names the CPU; before that the row index is only the CPU id when no CPU
    # below it is offline. Passing the online CPU list (the /proc/interrupts header, or
    # /sys/devices/system/cpu/online) fixes the mapping; without it the index is used.
    rows: list[SoftnetRow] = []
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 3 or not all(_HEX.fullmatch(token) for token in tokens):
            continue
        parsed = [parse_u64(token, 16) for token in tokens]
        if None in parsed:
            note_malformed("/proc/net/softnet_stat row (a value of 2^64 or more)")
            continue
        cols = [c for c in parsed if c is not None]
        padded = cols + [0] * (_SN_CPU + 1 - len(cols))
        index = len(rows)
        if len(cols) > _SN_CPU:
            cpu = cols[_SN_CPU]
        elif cpus is not None and index < len(cpus):
            cpu = cpus[index]
        else:
            cpu = index
        rows.append(
            SoftnetRow(
                cpu=cpu,
                processed=cols[_SN_PROCESSED],
                dropped=cols[_SN_DROPPED],
                time_squeeze=cols[_SN_SQUEEZE],
                received_rps=padded[_SN_RPS],
                flow_limit_count=padded[_SN_FLOW_LIMIT],
                backlog_len=padded[_SN_BACKLOG],
            )
        )
    return rows


# ---------------------------------------------------------------------------------------------
# /proc/net/snmp and /proc/net/netstat
# ---------------------------------------------------------------------------------------------


_INT = re.compile(r"-?[0-9]+")


# A values line whose every number has at most 18 digits: each is within -2^63..2^63, so
# int() takes the whole line at once (a scrape parses ~150 netstat values; issue 35).
_SHORT_INTS = re.compile(r"(?:-?[0-9]{1,18} )*-?[0-9]{1,18}")


def _ints(tokens: list[str]) -> list[int] | None:
    """The tokens as ints if every one is a (possibly negative) decimal number, else None."""
    if _SHORT_INTS.fullmatch(" ".join(tokens)):
        return list(map(int, tokens))
    if not all(_INT.fullmatch(token) for token in tokens):
        return None
    return [_signed(token) for token in tokens]


def _signed(token: str) -> int:
    """A value of /proc/net/snmp: a u64, or a negative s64 (Tcp MaxConn); else ValueError."""
    if token.startswith("-"):
        value = parse_u64(token[1:])
        if value is None or value > 1 << 63:
            raise ValueError("out of range")
        return -value
    value = parse_u64(token)
    if value is None:
        raise ValueError("out of range")
    return value


def parse_snmp(text: str, groups: frozenset[str] | None = None) -> dict[str, dict[str, int]]:
    """Parse /proc/net/snmp or /proc/net/netstat into {"Tcp": {"RetransSegs": n, ...}, ...};
    only these groups where given (the others' lines are not parsed: the nic exporter reads
    Tcp and TcpExt of ~10 groups at every scrape)."""
    # Both files print each group as a header line of names and a line of values with the same
    # "Proto:" prefix (net/ipv4/proc.c snmp_seq_show / netstat_seq_show). Values are signed in
    # places (Tcp MaxConn is -1 under dynamic limits), so they are kept as plain ints.
    # https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/net/ipv4/proc.c
    out: dict[str, dict[str, int]] = {}
    pending: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, sep, tail = line.partition(":")
        proto = proto.strip()
        if not sep or not proto or " " in proto or (groups is not None and proto not in groups):
            continue
        tokens = tail.split()
        if not tokens:
            continue
        try:
            values = _ints(tokens)
        except ValueError:  # numbers, but one beyond 64 bits: the line is malformed
            pending.pop(proto, None)
            note_malformed("/proc/net/snmp or netstat line (a value beyond 64 bits)")
            continue
        if values is None:
            pending[proto] = tokens  # a names line
            continue
        names = pending.pop(proto, None)
        if names is None:
            continue  # values without a header: nothing to name them by
        # zip stops at the shorter line, keeping the aligned prefix of a truncated pair.
        out.setdefault(proto, {}).update(zip(names, values, strict=False))
    return out
