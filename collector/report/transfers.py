"""Whose energy: each flow key's bytes, rate, limit and share of its host's active energy (pure).

The policy (docs/report.md#transfers): a host's **active** energy — its energy over the window
less its idle watts × the window — is split among its flow keys by the bytes each moved (sent
plus received, from the tcp exporter's counters); the idle energy is kept apart, attributed to
no key. Kepler splits a node's active power by CPU time and leaves idle unattributed; bytes are
used here because a data mover's energy follows the bytes it moves (the report's marginal
J/Gbit is that slope), and the tcp exporter keeps bytes per flow key, not CPU time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .document import HostScope, Transfer
from .verdict import tcp
from .verdict.choice import LIMIT
from .verdict.resources import Usage


def transfers(
    usage: Usage | None, hosts: dict[str, HostScope], steps: Sequence[int]
) -> list[Transfer]:
    """Per host and flow key that moved bytes, the largest first within each host."""
    if usage is None:
        return []
    by_host: dict[str, list[tuple[str, tcp.Judged]]] = {}
    for (h, subj), f in sorted(usage.tcp_flows.items()):
        j = tcp.judge(f, steps, usage.step_seconds)
        if j.bytes > 0:
            by_host.setdefault(h, []).append((subj, j))
    out: list[Transfer] = []
    for h, keys in sorted(by_host.items()):
        hd = hosts.get(h)
        duration = hd.duration_seconds if hd is not None else len(steps) * usage.step_seconds
        active, idle = active_energy(hd)
        total = math.fsum(j.bytes for _s, j in keys)
        for subj, j in sorted(keys, key=lambda kj: (-kj[1].bytes, kj[0])):
            share = j.bytes / total if total > 0 else None
            joules = active * share if active is not None and share is not None else None
            gigabits = j.bytes * 8 / 1e9
            per_gbit = joules / gigabits if joules is not None and gigabits > 0 else None
            out.append(
                Transfer(
                    host=h,
                    key=subj,
                    name=tcp.words(subj),
                    bytes_sent=j.sent,
                    bytes_received=j.received,
                    gbit_per_second=gigabits / duration if duration > 0 else None,
                    limit=limit(j),
                    share_of_bytes=share,
                    active_joules=joules,
                    host_idle_joules=idle,
                    joules_per_gigabit=per_gbit,
                )
            )
    return out


def active_energy(hd: HostScope | None) -> tuple[float | None, float | None]:
    """(active, idle) joules of a host over the window: idle = idle watts × the window (at
    most the energy), active = the rest; None where the host has no energy or idle watts."""
    if hd is None or hd.energy_joules is None or hd.idle_watts is None:
        return None, None
    idle = min(hd.energy_joules, max(0.0, hd.idle_watts) * hd.duration_seconds)
    return hd.energy_joules - idle, idle


def limit(j: tcp.Judged) -> str:
    """A flow key's limit in one word: a TCP cause at 70 % or more, ``application`` (TCP
    sat waiting), ``receiving`` (judged where it is sent from) or ``none``."""
    if j.app_limited:
        return "application"
    if not j.sending:
        return "receiving"
    if j.cause is not None and j.utilisation is not None and j.utilisation >= LIMIT:
        return j.cause
    return "none"
