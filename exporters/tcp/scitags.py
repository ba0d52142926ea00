"""The SciTags packet marking of the IPv6 flow label: experiment and activity ids.

draft-cc-v6ops-wlcg-flow-label-marking-03 and scitags flowd (scitags/backends/ebpf.py,
`bitpattern()`): of the 20-bit flow label, from its most significant bit, 2 entropy bits, the
9-bit experiment id with its bit order reversed (its least significant bit first), 1 entropy
bit, the 6-bit activity id, 2 entropy bits.
"""

from __future__ import annotations

FLOW_LABEL_BITS = 20
_EXP_SHIFT = 9  # 6 activity + 1 entropy + 2 entropy bits below the experiment
_ACT_SHIFT = 2


def _reverse9(v: int) -> int:
    return int(f"{v:09b}"[::-1], 2)


def decode(flow_label: int) -> tuple[int, int] | None:
    """(experiment, activity) of a flow label; None when it is no 20-bit label or unmarked."""
    if not 0 <= flow_label < 1 << FLOW_LABEL_BITS:
        return None
    experiment = _reverse9((flow_label >> _EXP_SHIFT) & 0x1FF)
    activity = (flow_label >> _ACT_SHIFT) & 0x3F
    if experiment == 0:  # no experiment: the label is not a SciTags marking
        return None
    return experiment, activity


def encode(experiment: int, activity: int, entropy: int = 0) -> int:
    """The flow label of (experiment, activity) with the 5 entropy bits given (for tests)."""
    if not (0 < experiment < 512 and 0 <= activity < 64 and 0 <= entropy < 32):
        raise ValueError("experiment 1-511, activity 0-63, entropy 0-31")
    e_hi, e_mid, e_lo = entropy >> 3, (entropy >> 2) & 1, entropy & 3
    return (
        (e_hi << 18)
        | (_reverse9(experiment) << _EXP_SHIFT)
        | (e_mid << 8)
        | (activity << _ACT_SHIFT)
        | e_lo
    )
