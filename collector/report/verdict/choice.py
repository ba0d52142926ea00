"""The choice among the resources: what limited a host over some steps, and the evidence.

Of the steps in which the host moved data, each subject's mean utilisation; each resource's
the largest of its subjects'; the limiter the largest resource, at least :data:`LIMIT` (a
controller or link at :data:`SATURATED` or more ahead of the disks it feeds, as the rule
ranks them), else ``none``: the workload paced itself. A subject that moved more than its
stated capacity allowed (a NIC more than its link speed, a link more than its usable
bytes/s), by more than :data:`IMPOSSIBLE` over the steps judged, has a capacity that cannot
be true: it is left out of the choice, and the evidence says so.
"""

from __future__ import annotations

import math

from ..document import RESOURCES, LimitedBy
from . import controller, cpu, disk, nic, pcie, tcp
from . import steps as S
from .resources import Usage

LIMIT = 0.7  # a resource at least this busy limits; below it the workload paced itself
SATURATED = 0.9  # a controller or link this busy is named ahead of the disks it feeds
# the ranking's bonus at SATURATED or more, as the rule's: a link ahead of a controller ahead
# of the disks they feed
RANK_BONUS = {"pcie": 0.2, "controller": 0.1}
# Bytes moved over what the stated capacity allowed in the steps judged (the sum of the rates
# over the sum of the capacities: one step's odd capacity weighs one step), above this: beyond
# what a counter's timing can add (a step's rate may count part of the next scrape's bytes,
# but over several steps that cannot add a tenth), so the capacity is wrong (a veth's made-up
# speed).
IMPOSSIBLE = 1.1
_NOUN = {
    "disk": "disk-bound",
    "controller": "controller-bound",
    "pcie": "PCIe-bound",
    "nic": "network-bound",
    "cpu": "CPU-bound",
    "tcp": "loss-bound (TCP retransmits)",
}


def verdict(u: Usage, host: str, steps: range | list[int]) -> LimitedBy:
    """What limited ``host`` over ``steps`` (bin indices): see the module's docstring."""
    moving = u.moving.get(host, [])
    chosen = [k for k in steps if k < len(moving) and moving[k]]
    if not chosen:
        return LimitedBy("none", None, None, "no data moved in these steps", {})
    means, wrong = _means(u, host, chosen)
    per: dict[str, tuple[float, str]] = {}
    for (res, subj), v in sorted(means.items()):
        if res not in per or v > per[res][0]:
            per[res] = (v, subj)
    left_out = "".join(f" ({_wrong(u, host, r, s, m, chosen)})" for (r, s), m in wrong)
    if not per:
        evidence = "no resource was measured in these steps" + left_out
        return LimitedBy("none", None, None, evidence, {})

    def rank(res: str) -> float:
        v = per[res][0]
        return v + (RANK_BONUS.get(res, 0.0) if v >= SATURATED else 0.0)

    best = max(per, key=lambda r: (rank(r), -RESOURCES.index(r)))
    util, subject = per[best]
    ordered = sorted(per.items(), key=lambda kv: -kv[1][0])
    if util < LIMIT:
        others = {r: round(v, 4) for r, (v, _s) in per.items()}
        parts = [_phrase(u, host, r, s, v, chosen) for r, (v, s) in ordered]
        evidence = "; ".join(parts) + ": nothing reached 70 %, the workload paced itself"
        return LimitedBy("none", None, util, evidence + left_out, others)
    others = {r: round(v, 4) for r, (v, _s) in per.items() if r != best}
    parts = [_phrase(u, host, best, subject, util, chosen)]
    parts += [_phrase(u, host, r, s, v, chosen) for r, (v, s) in ordered if r != best]
    evidence = "; ".join(parts) + f": {_NOUN[best]}" + left_out
    return LimitedBy(best, subject or None, util, evidence, others)


def left_out(u: Usage, host: str, steps: range | list[int]) -> dict[S.Key, str]:
    """The subjects the verdict over ``steps`` leaves out (measured above their stated
    capacity), each with the evidence's words for it: the report's chart leaves them out too."""
    moving = u.moving.get(host, [])
    chosen = [k for k in steps if k < len(moving) and moving[k]]
    if not chosen:
        return {}
    _, wrong = _means(u, host, chosen)
    return {(r, s): _wrong(u, host, r, s, m, chosen) for (r, s), m in wrong}


def _means(
    u: Usage, host: str, chosen: list[int]
) -> tuple[dict[S.Key, float], list[tuple[S.Key, float]]]:
    """Each subject's mean utilisation over ``chosen`` (the CPU resource's from
    :func:`cpu.busiest`), and the subjects left out: measured above their capacity."""
    series = u.util.get(host, {})
    measured = u.measured.get(host, {})
    means: dict[S.Key, float] = {}
    wrong: list[tuple[S.Key, float]] = []
    for key, b in sorted(series.items()):
        if key[0] == "cpu":
            continue
        capacity = (u.speed if key[0] == "nic" else u.usable).get((host, key[1]))
        m = S.weighted_mean(measured.get(key), capacity, chosen)
        if m is not None and m > IMPOSSIBLE:
            wrong.append((key, m))
            continue
        vals = [v for k in chosen if (v := b[k]) is not None]
        if vals:
            means[key] = math.fsum(vals) / len(vals)
    cpus = {key[1]: b for key, b in series.items() if key[0] == "cpu"}
    if (top := cpu.busiest(cpus, chosen)) is not None:
        means[("cpu", top[0])] = top[1]
    return means, wrong


def _phrase(u: Usage, host: str, res: str, subj: str, v: float, steps: list[int]) -> str:
    """One resource in a few words: "disk sda 96 % busy", "NIC eth2 70 % of 60 Gbit/s"."""
    key = (host, subj)
    if res == "disk":
        return disk.phrase(u.disk_bytes.get(key), u.disk_ios.get(key), subj, v, steps)
    if res == "controller":
        link = pcie.link_note(u.usable.get(key), steps)
        return controller.phrase(u.yields.get(key), subj, v, steps, link)
    if res == "pcie":
        link = pcie.link_note(u.usable.get(key), steps)
        return pcie.phrase(u.yields.get(key), subj, v, steps, link)
    if res == "nic":
        return nic.phrase(u.speed.get(key), subj, v, steps)
    if res == "cpu":
        return cpu.phrase(u.softirq.get(key), subj, v, steps)
    return tcp.phrase(v)


def _wrong(u: Usage, host: str, res: str, subj: str, m: float, steps: list[int]) -> str:
    """A subject measured above its capacity, in a few words, and why it is left out."""
    if res == "nic":
        stated = nic.stated(u.speed.get((host, subj)), steps)
        what = f"NIC {subj} left out: it moved {S.pct(m)} of {stated}"
    else:
        name = "controller" if res == "controller" else "PCIe link"
        usable, _n = S.changed(u.usable.get((host, subj)), steps, S.rate)
        of = f"its stated {S.rate(usable)} usable" if usable else "its stated usable bytes/s"
        what = f"{name} {subj} left out: it moved {S.pct(m)} of {of}"
    return what + ", which cannot be: that capacity is wrong"
