"""Per-interface 64-bit counters from one rtnetlink dump (RTM_GETLINK, IFLA_STATS64).

One dump gives every interface's rtnl_link_stats64 (include/uapi/linux/if_link.h) with its
name, MTU and operstate, consistent per interface. /sys/class/net has the same counters one
file each (8+ reads per interface); /proc/net/dev folds rx_missed_errors into drops and has no
MTU or state. docs/exporters/nic.md has the measured costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

IFF_LOOPBACK = 0x8  # include/uapi/linux/if.h

# IFLA_OPERSTATE values, RFC 2863 (include/uapi/linux/if.h, IF_OPER_*)
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")


@dataclass(frozen=True)
class LinkStats:
    """One interface's counters and state."""

    name: str
    index: int
    mtu: int
    operstate: str
    kind: str  # rtnetlink IFLA_INFO_KIND ("veth", "bond", "vlan", ...), "" for plain devices
    loopback: bool = False  # IFF_LOOPBACK in ifi_flags
    stats: dict[str, int] = field(default_factory=dict)  # rtnl_link_stats64 by field name

    def get(self, key: str) -> int:
        """A counter, 0 if the kernel did not report it."""
        return self.stats.get(key, 0)


def _attr(msg: Any, name: str, default: Any = None) -> Any:
    for key, value in msg.get("attrs", ()):
        if key == name:
            return value
    return default


def _kind(msg: Any) -> str:
    info = _attr(msg, "IFLA_LINKINFO")
    if not info:
        return ""
    return str(_attr(info, "IFLA_INFO_KIND", "") or "")


def _operstate(value: Any) -> str:
    if isinstance(value, int):
        return OPERSTATES[value] if 0 <= value < len(OPERSTATES) else "unknown"
    return str(value or "unknown").lower()


def link_stats(msgs: Iterable[Any]) -> list[LinkStats]:
    """LinkStats from RTM_NEWLINK messages as pyroute2 decodes them (pure: testable on dicts)."""
    out = []
    for msg in msgs:
        name = _attr(msg, "IFLA_IFNAME")
        if not name:
            continue
        stats = _attr(msg, "IFLA_STATS64") or _attr(msg, "IFLA_STATS") or {}
        out.append(
            LinkStats(
                name=str(name),
                index=int(msg.get("index", 0)),
                mtu=int(_attr(msg, "IFLA_MTU", 0) or 0),
                operstate=_operstate(_attr(msg, "IFLA_OPERSTATE")),
                kind=_kind(msg),
                loopback=bool(int(msg.get("flags", 0)) & IFF_LOOPBACK),
                stats={k: int(v) for k, v in dict(stats).items() if isinstance(v, int)},
            )
        )
    return out


class NetlinkLinks:
    """Dumps every link of the agent's network namespace over one rtnetlink socket."""

    def __init__(self) -> None:
        from pyroute2 import IPRoute

        self._ipr = IPRoute()

    def read(self) -> list[LinkStats]:
        """The current counters of every interface."""
        return link_stats(self._ipr.get_links())

    def close(self) -> None:
        """Close the netlink socket."""
        self._ipr.close()
