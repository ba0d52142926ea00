"""The nic resource: each NIC's busier direction against its link speed, and its evidence."""

from __future__ import annotations

from ..series import Bins, VerdictData
from . import steps as S
from .flows import Flows


def measured(flows: Flows, data: VerdictData) -> dict[S.Key, Bins]:
    """Per (host, interface): the busier direction against that step's link speed, uncapped
    (above 1 the stated speed cannot be true). No speed, no figure."""
    out: dict[S.Key, Bins] = {}
    for (h, iface), speed in data.nic_speed.items():
        ways = [w for d in ("rx", "tx") if (w := flows.nic.get((h, iface, d))) is not None]
        if ways:
            out[(h, iface)] = S.busier(ways, speed)
    return out


def gbit(bps: float) -> str:
    """Bytes/s as a link speed: '10 Gbit/s', '10 Tbit/s'."""
    if bps * 8 >= 1e12:
        return f"{bps * 8 / 1e12:.3g} Tbit/s"
    return f"{bps * 8 / 1e9:.3g} Gbit/s"


def phrase(speed: Bins | None, subj: str, v: float, steps: list[int]) -> str:
    """ "NIC eth2 70 % of 60 Gbit/s" (and where its speed changed, in how many steps)."""
    usual, note = S.changed(speed, steps, gbit)
    of = f" of {gbit(usual)}" if usual else ""
    return f"NIC {subj} {S.pct(v)}{of}{note}"


def stated(speed: Bins | None, steps: list[int]) -> str:
    """What the NIC states it can carry: 'its stated 10 Gbit/s' (for a capacity found wrong)."""
    usual, _note = S.changed(speed, steps, gbit)
    return f"its stated {gbit(usual)} link speed" if usual else "its stated link speed"
