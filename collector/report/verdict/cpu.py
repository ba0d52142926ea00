"""The cpu resource: the busiest CPU moving data, and its evidence.

A CPU moves data in a step when it takes NIC or storage-controller interrupts, or spends
:data:`INTERRUPT_SHARE` of its time in interrupt work (a virtual NIC's softirq has no
interrupt to follow). A CPU busy with an unrelated job is not one of them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from ..series import Bins, PerSeries
from . import steps as S

INTERRUPT_SHARE = 0.1  # a CPU this much in irq + softirq moves data (a virtual NIC's softirq)


def moving(rates: dict[str, PerSeries], n: int) -> tuple[dict[S.Key, Bins], dict[S.Key, Bins]]:
    """Per (host, CPU) moving data and step, its busy share and its softirq share (None: not
    moving data, or no figure). node_exporter's CPU time where the host has it, else the
    agent's own (cpu.enabled)."""
    modes = S.by(rates, "node_cpu", ("host", "cpu", "mode"), n)
    with_node = {k[0] for k in modes}
    modes |= {k: b for k, b in S.by(rates, "agent_cpu", ("host", "cpu", "mode"), n).items()
              if k[0] not in with_node}  # fmt: skip
    nic_irq = S.by(rates, "nic_irqs", ("host", "cpu"), n)
    ctl_irq = S.by(rates, "controller_irqs", ("host", "cpu"), n)
    irqs: dict[S.Key, Bins] = {}
    for k in nic_irq.keys() | ctl_irq.keys():
        none: Bins = [None] * n
        a, c = nic_irq.get(k, none), ctl_irq.get(k, none)
        irqs[(k[0], k[1])] = [
            x if x is not None and x > 0 else y if y is not None and y > 0 else None
            for x, y in zip(a, c, strict=True)
        ]
    return _shares({(k[0], k[1], k[2]): b for k, b in modes.items()}, irqs)


def _shares(
    modes: dict[tuple[str, str, str], Bins], irqs: dict[S.Key, Bins]
) -> tuple[dict[S.Key, Bins], dict[S.Key, Bins]]:
    """Busy is everything but idle and iowait: 1 - their seconds per second (a CPU's modes
    add up to one second per second). ``modes``: seconds per second by (host, cpu, mode);
    ``irqs``: interrupts per second by (host, cpu), None where none."""
    by_mode: dict[S.Key, dict[str, Bins]] = defaultdict(dict)
    for (h, c, mode), b in modes.items():
        by_mode[(h, c)][mode] = b
    busy: dict[S.Key, Bins] = {}
    soft: dict[S.Key, Bins] = {}
    for key, mb in by_mode.items():
        idle = mb.get("idle")
        if idle is None:
            continue  # without idle time there is no busy share
        n = len(idle)
        zero: Bins = [None] * n
        iowait, hard, softirq = (mb.get(m, zero) for m in ("iowait", "irq", "softirq"))
        taking = irqs.get(key, zero)
        b_out: Bins = [None] * n
        s_out: Bins = [None] * n
        for k in range(n):
            i = idle[k]
            if i is None:
                continue
            si = softirq[k] or 0.0
            if taking[k] is None and (hard[k] or 0.0) + si < INTERRUPT_SHARE:
                continue  # not moving data in this step
            b_out[k] = min(1.0, max(0.0, 1.0 - i - (iowait[k] or 0.0)))
            s_out[k] = min(1.0, si)
        if any(v is not None for v in b_out):
            busy[key], soft[key] = b_out, s_out
    return busy, soft


def busiest(cpus: dict[str, Bins], steps: Sequence[int]) -> tuple[str, float] | None:
    """The CPU resource over ``steps``: per step the busiest CPU moving data (0 in a step in
    which none did), their mean, named after the CPU that was busiest most often."""
    top: list[float] = []
    count: dict[str, int] = defaultdict(int)
    for k in steps:
        here = [(v, c) for c, b in cpus.items() if (v := b[k]) is not None]
        if here:
            v, c = max(here)
            top.append(v)
            count[c] += 1
        elif cpus:
            top.append(0.0)  # no CPU moved data in this step: none was busy doing so
    if not count:
        return None  # no CPU moved data in these steps
    return max(sorted(count), key=lambda c: count[c]), math.fsum(top) / len(top)


def phrase(softirq: Bins | None, subj: str, v: float, steps: list[int]) -> str:
    """ "CPU 2 41 % busy (20 % softirq)"."""
    si = S.mean(softirq, steps)
    soft = f" ({S.pct(si)} softirq)" if si is not None else ""
    return f"CPU {subj} {S.pct(v)} busy{soft}"
