"""Arithmetic over per-step figures that every resource of the verdict shares (pure)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

from ..series import Bins, PerSeries

Key = tuple[str, str]  # (host, device / interface / PCI address / CPU)


def at(b: Bins | None, k: int) -> float | None:
    """The value of step ``k`` (None: no series or no value)."""
    return b[k] if b is not None and k < len(b) else None


def clamp(b: Bins) -> Bins:
    """Each value held to 0-1."""
    return [None if v is None else min(1.0, max(0.0, v)) for v in b]


def cap(b: Bins) -> Bins:
    """Each value held to at most 1 (a utilisation)."""
    return [None if v is None else min(1.0, v) for v in b]


def add(into: Bins, b: Bins) -> None:
    """Add ``b`` into ``into`` step by step (a None of ``b`` adds nothing)."""
    for k, v in enumerate(b):
        if v is not None and k < len(into):
            into[k] = (into[k] or 0.0) + v


def total(bs: list[Bins], n: int) -> Bins:
    """The steps' sums over ``bs`` (None where none has a value)."""
    out: Bins = [None] * n
    for b in bs:
        add(out, b)
    return out


def busier(ways: list[Bins], capacity: Bins) -> Bins:
    """Per step the busier direction against that step's ``capacity``, uncapped (None: no
    value or no capacity)."""
    out: Bins = []
    for k, vals in enumerate(zip(*ways, strict=True)):
        known = [v for v in vals if v is not None]
        c = capacity[k] if k < len(capacity) else None
        out.append(max(known) / c if known and c else None)
    return out


def max_into(d: dict[Key, Bins], key: Key, b: Bins) -> None:
    """``d[key]`` becomes the step-wise larger of itself and ``b``."""
    if key not in d:
        d[key] = list(b)
        return
    d[key] = [
        None if x is None and y is None else max(v for v in (x, y) if v is not None)
        for x, y in zip(d[key], b, strict=True)
    ]


def mean(b: Bins | None, steps: Sequence[int]) -> float | None:
    """The mean of ``b`` over ``steps`` where it has a value."""
    if b is None:
        return None
    vals = [v for k in steps if k < len(b) and (v := b[k]) is not None]
    return math.fsum(vals) / len(vals) if vals else None


def weighted_mean(b: Bins | None, w: Bins | None, steps: Sequence[int]) -> float | None:
    """The mean of ``b`` over ``steps`` weighted by ``w`` (steps where both have a value): of
    rates over capacities, the bytes moved over the bytes the capacities allowed, so that one
    step's odd capacity weighs as little as the step."""
    if b is None or w is None:
        return None
    pairs = [(v, c) for k in steps if k < len(b) and k < len(w)
             if (v := b[k]) is not None and (c := w[k]) is not None]  # fmt: skip
    den = math.fsum(c for _v, c in pairs)
    return math.fsum(v * c for v, c in pairs) / den if den > 0 else None


def by(
    rates: dict[str, PerSeries], what: str, labels: tuple[str, ...], n: int
) -> dict[tuple[str, ...], Bins]:
    """PromQL's ``sum by (labels)`` over the per-series rates of ``what``: a step's sum over
    the series with a value in it."""
    groups: dict[tuple[str, ...], list[Bins]] = defaultdict(list)
    for lab, b in rates.get(what, []):
        groups[tuple(lab.get(k, "") for k in labels)].append(b)
    return {k: total(bs, n) for k, bs in groups.items()}


def changed(
    capacity: Bins | None, steps: Sequence[int], fmt: Callable[[float], str]
) -> tuple[float | None, str]:
    """The capacity in force most of ``steps`` and, where the link changed among them, the
    evidence of it: ``", its link at 1 Gbit/s in 1 of 145 steps"`` (the commonest other
    value; every step at another value counted). A link that changes is shown, never made
    the whole window's capacity."""
    if capacity is None:
        return None, ""
    seen = [v for k in steps if k < len(capacity) and (v := capacity[k]) is not None]
    if not seen:
        return None, ""
    count: dict[float, int] = defaultdict(int)
    for v in seen:
        count[v] += 1
    ranked = sorted(count, key=lambda v: (-count[v], -v))
    if len(ranked) == 1:
        return ranked[0], ""
    other = sum(count[v] for v in ranked[1:])
    return ranked[0], f", its link at {fmt(ranked[1])} in {other} of {len(seen)} steps"


def rate(bps: float) -> str:
    """Bytes/s in three figures: '2.05 MB/s', '1.31 GB/s'."""
    for div, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps:.3g} B/s"


def pct(v: float) -> str:
    """A share as whole percent: '96 %'."""
    return f"{100 * v:.0f} %"
