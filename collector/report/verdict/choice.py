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
_CAUSE_NOUN = {
    "receive_window": "window-bound (TCP receive window)",
    "send_buffer": "send-buffer-bound (TCP send buffer)",
    "congestion": "loss-bound (TCP congestion)",
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
    if best == "cpu" and _waiting(u, host, per, chosen):
        best = "tcp"
    util, subject = per[best]
    ordered = sorted(per.items(), key=lambda kv: -kv[1][0])
    app = _app_limited(u, host, chosen)
    if util < LIMIT:
        others = {r: round(v, 4) for r, (v, _s) in per.items()}
        parts = [_phrase(u, host, r, s, v, chosen) for r, (v, s) in ordered] + app
        evidence = "; ".join(parts) + ": nothing reached 70 %, the workload paced itself"
        return LimitedBy("none", None, util, evidence + left_out, others)
    others = {r: round(v, 4) for r, (v, _s) in per.items() if r != best}
    parts = [_phrase(u, host, best, subject, util, chosen)]
    parts += [_phrase(u, host, r, s, v, chosen) for r, (v, s) in ordered if r != best]
    cause = _cause(u, host, subject, chosen) if best == "tcp" else None
    noun = _CAUSE_NOUN.get(cause or "", _NOUN[best])
    evidence = "; ".join(parts + (app if best != "tcp" else [])) + f": {noun}" + left_out
    return LimitedBy(best, subject or None, util, evidence, others, cause)


def _judge(u: Usage, host: str, subj: str, steps: list[int]) -> tcp.Judged | None:
    """A flow key judged over ``steps``, once per verdict (memoised in ``u.judged``: the
    choice, the evidence and the application note ask for the same keys)."""
    memo = u.judged.setdefault((host, tuple(steps)), {})
    if subj not in memo:
        f = u.tcp_flows.get((host, subj))
        if f is None:
            return None
        memo[subj] = tcp.judge(f, steps, u.step_seconds)
    return memo[subj]


def _cause(u: Usage, host: str, subject: str, chosen: list[int]) -> str:
    """The tcp limiter's cause: its flow key's, else (host-wide retransmits) congestion."""
    j = _judge(u, host, subject, chosen)
    return (j.cause if j is not None else None) or "congestion"


def _waiting(u: Usage, host: str, per: dict[str, tuple[float, str]], chosen: list[int]) -> bool:
    """A sending key waited on the receiver's window or on its own send buffer at least
    LIMIT of its busy time, and the busiest CPU is no receiving key's process's core: TCP,
    not the CPU. A sender that waits is not held back by its own CPU (on a short path a
    window-limited sender spins through tiny writes, its CPU busy because of the window);
    a receiver too busy to read closes its window, and is named when it runs here."""
    v, subj = per.get("tcp", (0.0, ""))
    if v < LIMIT or _cause(u, host, subj, chosen) not in ("receive_window", "send_buffer"):
        return False
    core = per["cpu"][1]
    for (h, key), (_comm, cpus) in u.flow_process.items():
        j = _judge(u, h, key, chosen) if h == host and core in cpus.split(",") else None
        if j is not None and not j.sending:
            return False
    return True


def _app_limited(u: Usage, host: str, chosen: list[int]) -> list[str]:
    """The host's largest flow key by bytes, in words, when it was application-limited (TCP
    sat waiting for data); a small key idling beside it says nothing, nor does a loopback
    key (a scrape, a local proxy: it crosses no NIC)."""
    judged = [(j.bytes, subj, j) for (h, subj) in sorted(u.tcp_flows)
              if h == host and not tcp.loopback(subj)
              and (j := _judge(u, h, subj, chosen)) is not None]  # fmt: skip
    if not judged:
        return []
    _b, subj, j = max(judged, key=lambda t: (t[0], t[1]))
    return [tcp.app_note(subj, j)] if j.app_limited else []


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
        if key == ("tcp", "") and any(h == host for h, _k in u.tcp_flows):
            continue  # the host's flow keys say it per key, and why
        if key[0] == "tcp" and (j := _judge(u, host, key[1], chosen)) is not None:
            if j.utilisation is not None:  # a receiving or application-limited key is not
                means[key] = j.utilisation
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
        return cpu.phrase(u.softirq.get(key), subj, v, steps) + _runs_on(u, host, subj, steps)
    j = _judge(u, host, subj, steps)
    return tcp.phrase(subj, j, v, _link(u, host, steps), u.buffers.get(host, {}))


def _runs_on(u: Usage, host: str, subj: str, steps: list[int]) -> str:
    """The processes of the host's flow keys that ran on CPU ``subj``: ", where iperf3
    (flows port 5201, receiving) runs" (the largest key by bytes)."""
    on = []
    for (h, key), (comm, cpus) in sorted(u.flow_process.items()):
        if h == host and subj in cpus.split(","):
            j = _judge(u, h, key, steps)
            moved = j.bytes if j is not None else 0.0
            role = "" if j is None else ", sending" if j.sending else ", receiving"
            on.append((moved, f", where {comm or 'its process'} ({tcp.words(key)}{role}) runs"))
    return max(on)[1] if on else ""


def _link(u: Usage, host: str, steps: list[int]) -> float | None:
    """The host's fastest NIC's speed over ``steps`` (bytes/s): the path's bandwidth for
    the bandwidth-delay product."""
    speeds = [m for (h, _i), b in u.speed.items() if h == host
              if (m := S.mean(b, steps)) is not None]  # fmt: skip
    return max(speeds) if speeds else None


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
