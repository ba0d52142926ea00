"""The tcp resource: the share of segments retransmitted, against 1 %, and its evidence.

At 1 % loss one Reno/CUBIC stream is held to about 12 segments per round trip (Mathis et
al., 1997: rate <= MSS / RTT * 1.22 / sqrt(p)), whatever the links could carry. Kept small:
the causes TCP itself records (receive window, send buffer, congestion; issue 31) belong here.
"""

from __future__ import annotations

from ..series import Bins, PerSeries
from . import steps as S

TCP_SATURATED = 0.01  # a 1 % retransmitted share is a TCP utilisation of 1


def retransmitted(rates: dict[str, PerSeries], n: int) -> dict[str, Bins]:
    """Per host, the share of the segments sent that were retransmissions (None: none sent)."""
    retrans = S.by(rates, "retransmitted", ("host",), n)
    sent = S.by(rates, "segments_out", ("host",), n)
    return {
        h[0]: [None if r is None or s is None or s <= 0 else r / s
               for r, s in zip(retrans[h], sent[h], strict=True)]
        for h in retrans.keys() & sent.keys()
    }  # fmt: skip


def utilisation(share: Bins) -> Bins:
    """The retransmitted share against :data:`TCP_SATURATED`, capped at 1."""
    return [None if v is None else min(1.0, v / TCP_SATURATED) for v in share]


def phrase(v: float) -> str:
    """TCP in a few words."""
    return f"TCP retransmits at {S.pct(v)} of the 1 % that holds a stream down"
