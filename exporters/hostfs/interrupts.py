"""/proc/interrupts: the parser, each IRQ's affinity, and the per-CPU interrupts family the
nic and pcie exporters export for their devices' vectors.

The parser is pure (text in, dataclasses out) and never raises on odd input: a row that does
not fit the layout is skipped, so one unexpected kernel row never costs the rest of a scrape.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily

from .numbers import is_uint, note_malformed, parse_u32, parse_u64
from .read import read_attr


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


def _cpu_header(line: str) -> tuple[int, ...] | None:
    """CPU numbers if line is a "CPU0 CPU1 ..." header, else None."""
    tokens = line.split()
    if not tokens:
        return None
    cpus = []
    for token in tokens:
        match = _CPU_HEADER.fullmatch(token)
        cpu = parse_u32(match.group(1)) if match is not None else None
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
        elif is_uint(first) or first in _LEVEL_WORD:
            # arm/arm64: "GICv3  27 Level     arch_timer", "ITS-MSI 524288 Edge      eth0-0"
            hwirq, end = first, rest[0].end()
            if is_uint(first) and len(rest) > 1 and rest[1].group() in _LEVEL_WORD:
                hwirq, end = f"{first} {rest[1].group()}", rest[1].end()
    return chip, hwirq, tail[end:].strip()


def cpu_table(text: str) -> tuple[tuple[int, ...], list[tuple[str, str]]]:
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
    cpus, labelled = cpu_table(text)
    rows: dict[str, IrqRow] = {}
    for label, tail in labelled:
        if only is not None and label not in only:
            continue
        row = _irq_row(label, tail, cpus)
        if row is not None:
            rows[label] = row
    return Interrupts(cpus, rows)


class InterruptsParser:
    """parse_interrupts, a row whose text is as at the last parse given as parsed then.

    Issue 35: most rows of an idle host's /proc/interrupts are the same scrape after scrape
    (29 of 35 here a second apart), and parsing one costs a token per CPU. Only the last
    parse's rows are kept (bounded by the file), and none across a change of the CPU header.
    """

    def __init__(self) -> None:
        self._cpus: tuple[int, ...] = ()
        self._rows: dict[tuple[str, str], IrqRow | None] = {}

    def parse(self, text: str, only: Container[str] | None = None) -> Interrupts:
        """As parse_interrupts(text, only)."""
        cpus, labelled = cpu_table(text)
        last = self._rows if cpus == self._cpus else {}
        kept: dict[tuple[str, str], IrqRow | None] = {}
        rows: dict[str, IrqRow] = {}
        for label, tail in labelled:
            if only is not None and label not in only:
                continue
            key = (label, tail)
            row = last[key] if key in last else _irq_row(label, tail, cpus)
            kept[key] = row
            if row is not None:
                rows[label] = row
        self._cpus, self._rows = cpus, kept
        return Interrupts(cpus, rows)


def _irq_row(label: str, tail: str, cpus: tuple[int, ...]) -> IrqRow | None:
    """One "LABEL: tail" row of /proc/interrupts, or None when it does not fit the layout."""
    if is_uint(label):
        # A device IRQ row has exactly one count per CPU, then chip, hwirq and name:
        # split them off at once (the rows are most of the file on a large host).
        parts = tail.split(None, len(cpus))
        head = parts[: len(cpus)]
        if len(head) != len(cpus) or not all(is_uint(t) for t in head):
            return None  # truncated or garbled: counts could not be attributed to CPUs
        values = [parse_u64(t) for t in head]
        if None in values:
            note_malformed("/proc/interrupts row (a count of 2^64 or more)")
            return None
        chip, hwirq, name = _split_irq_tail(parts[len(cpus)] if len(parts) > len(cpus) else "")
        return IrqRow(label, tuple(v for v in values if v is not None), chip, hwirq, name)
    # Counts are the first len(cpus) integer columns; x86 ERR/MIS print a single column
    # (arch/x86/kernel/irq.c arch_show_interrupts), so stop at the first non-number.
    tokens = list(_TOKEN.finditer(tail))
    counts: list[int] = []
    end = 0
    for token in tokens[: len(cpus)]:
        if not is_uint(token.group()):
            break
        value = parse_u64(token.group())
        if value is None:
            note_malformed("/proc/interrupts row (a count of 2^64 or more)")
            return None
        counts.append(value)
        end = token.end()
    if not counts:
        return None
    # Arch rows (NMI, LOC, IPI0, ...) carry a description instead of chip/action.
    return IrqRow(label, tuple(counts), "", "", tail[end:].strip())


def irq_affinity(proc_root: Path, irq: str) -> tuple[str, str]:
    """(allowed CPUs, effective CPUs) of an IRQ as cpu lists like "0-3,8"; "" if unknown."""
    d = f"{proc_root}/irq/{irq}"  # a string: read for each NIC and PCIe IRQ at every scrape
    return read_attr(f"{d}/smp_affinity_list"), read_attr(f"{d}/effective_affinity_list")


def cpu_interrupts(
    name: str, documentation: str, label: str, irqs: Iterable[tuple[str, Mapping[int, int]]]
) -> CounterMetricFamily:
    """Interrupts per (owner, CPU), summed over the owner's vectors; CPUs that took none are
    left out (the nic and pcie exporters' per-CPU families: one series per CPU is the budget)."""
    per_cpu: dict[tuple[str, int], int] = {}
    for owner, counts in irqs:
        for cpu, c in counts.items():
            per_cpu[(owner, cpu)] = per_cpu.get((owner, cpu), 0) + c
    family = CounterMetricFamily(name, documentation, labels=[label, "cpu"])
    for (owner, cpu), c in sorted(per_cpu.items()):
        if c:
            family.add_metric([owner, str(cpu)], float(c))
    return family
