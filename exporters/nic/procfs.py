"""Pure parsers for the /proc files behind the NIC exporter (text in, dataclasses out).

Covers /proc/interrupts, /proc/softirqs, /proc/net/softnet_stat, /proc/net/snmp and
/proc/net/netstat. No function here touches the filesystem, and none raises on odd input:
a line that does not fit the layout is skipped, so one unexpected kernel row never costs the
rest of a scrape. A number beyond what the kernel can print (a counter of 2^64 or more, or
digits past int()'s 4300-digit limit) makes its line malformed too; each kind of skipped line
is logged once (debug) per process, never turned into a 0.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass

__all__ = [
    "U64",
    "Interrupts",
    "IrqRow",
    "SoftnetRow",
    "irq_queue",
    "parse_interrupts",
    "parse_snmp",
    "parse_softirqs",
    "parse_softnet_stat",
    "parse_u64",
]

log = logging.getLogger(__name__)

U64 = 1 << 64  # every kernel counter here is at most a u64
_MAX_DIGITS = 20  # len(str(2**64 - 1)); a longer hex number is >= 2^64 anyway
_DEC_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_noted: set[str] = set()


def parse_u64(token: str, base: int = 10) -> int | None:
    """An unsigned kernel counter (ASCII digits, < 2^64), or None for anything else."""
    token = token.strip()
    if base == 10 and len(token) < _MAX_DIGITS and token.isascii() and token.isdigit():
        return int(token)  # the common case: at most 19 digits is always below 2^64
    digits = _DEC_DIGITS if base == 10 else _HEX_DIGITS
    significant = token.lstrip("0")
    if not token or len(significant) > _MAX_DIGITS or not set(token) <= digits:
        return None  # also keeps int() from its 4300-digit ValueError
    value = int(significant or "0", base)
    return value if value < U64 else None


def note_malformed(what: str) -> None:
    """Log (once per process and kind) that a malformed line or field was skipped."""
    if what not in _noted:
        _noted.add(what)
        log.debug("skipped a malformed %s (logged once)", what)


# ---------------------------------------------------------------------------------------------
# /proc/interrupts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IrqRow:
    """One /proc/interrupts row: per-CPU counts, the irq chip, hwirq/trigger and action names."""

    irq: str  # "45", or an arch row label such as "NMI", "LOC", "ERR"
    # One count per CPU, aligned with Interrupts.cpus. Arch rows that keep a single global
    # counter (x86 ERR and MIS) print one column only, so theirs is a 1-tuple.
    counts: tuple[int, ...]
    chip: str  # "IR-PCI-MSI", "PCI-MSIX-0000:00:03.0", "IO-APIC"; 3.10 style "PCI-MSI-edge"
    hwirq: str  # hwirq + trigger as printed ("524289-edge"), "" when the kernel prints none
    # Action name(s), "a, b" for a shared IRQ; for arch rows the description text
    # ("Local timer interrupts").
    name: str


@dataclass(frozen=True)
class Interrupts:
    """Parsed /proc/interrupts: the online CPUs of the header and every row by its label."""

    cpus: tuple[int, ...]  # from "CPU0 CPU1 ... CPUn": online CPUs only, so there may be holes
    rows: dict[str, IrqRow]  # by label ("45", "NMI", ...)


_CPU_HEADER = re.compile(r"CPU(\d+)")
_TOKEN = re.compile(r"\S+")
# The flow-handler name (desc->name, from irq_set_chip_and_handler_name(): "edge", "fasteoi",
# "level"; Xen uses "percpu", "ipi", "virq") is glued with "-" onto the hwirq: "1572865-edge".
# An IRQ without an irq domain prints a blank hwirq, leaving just "-edge".
_HWIRQ_FLOW = re.compile(r"^[0-9]*-[a-z_]+$")
# 3.10-era kernels have no hwirq column, so the flow name is glued onto the chip instead:
# "PCI-MSI-edge", "IO-APIC-fasteoi". Only well-known names, so "IR-PCI-MSI" is not split.
_CHIP_FLOW = re.compile(r"^.+-(?:edge|level|fasteoi|simple|percpu|ipi|virq)$")
# CONFIG_GENERIC_IRQ_SHOW_LEVEL (arm/arm64/riscv) prints the trigger as its own word.
_LEVEL_WORD = frozenset({"Level", "Edge"})
_HEX = re.compile(r"[0-9a-fA-F]+")


def _is_uint(token: str) -> bool:
    """True for a plain ASCII decimal (str.isdigit alone accepts "²", which int() rejects)."""
    return token.isascii() and token.isdigit()


def _cpu_header(line: str) -> tuple[int, ...] | None:
    """CPU numbers if line is a "CPU0 CPU1 ..." header, else None."""
    tokens = line.split()
    if not tokens:
        return None
    cpus = []
    for token in tokens:
        match = _CPU_HEADER.fullmatch(token)
        cpu = _u32(match.group(1)) if match is not None else None
        if cpu is None:
            return None
        cpus.append(cpu)
    return tuple(cpus)


def _split_irq_tail(tail: str) -> tuple[str, str, str]:
    """Split what follows the counts of a numeric IRQ row into (chip, hwirq, name).

    kernel/irq/proc.c show_interrupts() prints " %8s" chip name (or the chip's own
    irq_print_chip()), then " %*lu" hwirq when the IRQ has an irq domain (blank otherwise; 3.10
    has no such column at all), " %-8s" Level/Edge on CONFIG_GENERIC_IRQ_SHOW_LEVEL arches,
    "-%-8s" desc->name, and finally "  %s" the action names joined with ", ".
    https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/kernel/irq/proc.c
    """
    tokens = list(_TOKEN.finditer(tail))
    if not tokens:
        return "", "", ""
    chip = tokens[0].group()
    end = tokens[0].end()
    hwirq = ""
    rest = tokens[1:]
    if not _CHIP_FLOW.match(chip) and rest:
        first = rest[0].group()
        if _HWIRQ_FLOW.match(first):
            hwirq, end = first, rest[0].end()
        elif _is_uint(first) or first in _LEVEL_WORD:
            # arm/arm64: "GICv3  27 Level     arch_timer", "ITS-MSI 524288 Edge      eth0-0"
            hwirq, end = first, rest[0].end()
            if _is_uint(first) and len(rest) > 1 and rest[1].group() in _LEVEL_WORD:
                hwirq, end = f"{first} {rest[1].group()}", rest[1].end()
    return chip, hwirq, tail[end:].strip()


def _cpu_table(text: str) -> tuple[tuple[int, ...], list[tuple[str, str]]]:
    """The CPU header of a per-CPU table (/proc/interrupts, /proc/softirqs) and its
    "LABEL: rest" rows; rows without a one-word label are dropped."""
    lines = text.splitlines()
    cpus: tuple[int, ...] | None = None
    rows: list[tuple[str, str]] = []
    for line in lines:
        if cpus is None:
            cpus = _cpu_header(line)
            continue
        label, sep, tail = line.partition(":")
        label = label.strip()
        if sep and label and " " not in label:
            rows.append((label, tail))
    return cpus or (), rows


def parse_interrupts(text: str, only: Container[str] | None = None) -> Interrupts:
    """Parse /proc/interrupts text; rows that do not fit the layout are skipped.

    only: the row labels wanted (IRQ numbers); the others are not parsed at all, which is
    most of the file on a large host for a reader that wants a few devices' IRQs.
    """
    # The header lists online CPUs only (for_each_online_cpu), so an offline CPU leaves a hole:
    # "CPU0 CPU1 CPU2 CPU4". Counts below follow the same order.
    cpus, labelled = _cpu_table(text)
    rows: dict[str, IrqRow] = {}
    for label, tail in labelled:
        if only is not None and label not in only:
            continue
        if _is_uint(label):
            # A device IRQ row has exactly one count per CPU, then chip, hwirq and name:
            # split them off at once (the rows are most of the file on a large host).
            parts = tail.split(None, len(cpus))
            head = parts[: len(cpus)]
            if len(head) != len(cpus) or not all(_is_uint(t) for t in head):
                continue  # truncated or garbled: counts could not be attributed to CPUs
            values = [parse_u64(t) for t in head]
            if None in values:
                note_malformed("/proc/interrupts row (a count of 2^64 or more)")
                continue
            chip, hwirq, name = _split_irq_tail(parts[len(cpus)] if len(parts) > len(cpus) else "")
            rows[label] = IrqRow(
                label, tuple(v for v in values if v is not None), chip, hwirq, name
            )
            continue
        # Counts are the first len(cpus) integer columns; x86 ERR/MIS print a single column
        # (arch/x86/kernel/irq.c arch_show_interrupts), so stop at the first non-number.
        tokens = list(_TOKEN.finditer(tail))
        counts: list[int] = []
        end = 0
        absurd = False
        for token in tokens[: len(cpus)]:
            if not _is_uint(token.group()):
                break
            value = parse_u64(token.group())
            if value is None:
                absurd = True
                break
            counts.append(value)
            end = token.end()
        if absurd:
            note_malformed("/proc/interrupts row (a count of 2^64 or more)")
            continue
        if not counts:
            continue
        # Arch rows (NMI, LOC, IPI0, ...) carry a description instead of chip/action.
        rows[label] = IrqRow(label, tuple(counts), "", "", tail[end:].strip())
    return Interrupts(cpus, rows)


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


def _u32(digits: str) -> int | None:
    """A CPU or queue number: a u64 below 2^32 (the kernel's own types), else None."""
    value = parse_u64(digits)
    return value if value is not None and value < 1 << 32 else None


def _queue(kind: str, digits: str) -> tuple[str, int] | None:
    number = _u32(digits)
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
    cpus, labelled = _cpu_table(text)
    out: dict[str, dict[int, int]] = {}
    for label, tail in labelled:
        values: dict[int, int] = {}
        for cpu, token in zip(cpus, tail.split(), strict=False):
            if not _is_uint(token):
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


def _ints(tokens: list[str]) -> list[int] | None:
    """The tokens as ints if every one is a (possibly negative) decimal number, else None."""
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


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """Parse /proc/net/snmp or /proc/net/netstat into {"Tcp": {"RetransSegs": n, ...}, ...}."""
    # Both files print each group as a header line of names and a line of values with the same
    # "Proto:" prefix (net/ipv4/proc.c snmp_seq_show / netstat_seq_show). Values are signed in
    # places (Tcp MaxConn is -1 under dynamic limits), so they are kept as plain ints.
    # https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/tree/net/ipv4/proc.c
    out: dict[str, dict[str, int]] = {}
    pending: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, sep, tail = line.partition(":")
        proto = proto.strip()
        if not sep or not proto or " " in proto:
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
