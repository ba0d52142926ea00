"""What one poll of one BMC yields: power per chassis, per supply, identity."""

from __future__ import annotations

from dataclasses import dataclass, field


class BmcError(Exception):
    """A poll failed; `reason` is the failure counter's label, the message never a secret."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class SupplyPower:
    """One power supply's figure: `kind` says whether it is input or output power."""

    supply: str
    kind: str  # "input" | "output"
    watts: float


@dataclass
class ChassisPower:
    """One chassis' power as its BMC reports it; None where it gives no valid value."""

    chassis: str  # the chassis' Id (Redfish) or "" (IPMI: the one system)
    name: str = ""
    power_watts: float | None = None
    source: str = ""  # the property power_watts came from (docs/exporters/bmc.md)
    energy_joules: float | None = None
    supplies: list[SupplyPower] = field(default_factory=list)
    contained: bool = False  # Links.ContainedBy names another chassis (a board, a blade)
    # The Ids of the chassis this one sits in (Links.ContainedBy) and of those it holds
    # (Links.Contains): a chassis' power includes the power of the chassis inside it.
    contained_by: str = ""
    contains: tuple[str, ...] = ()


@dataclass
class BmcReading:
    """What one poll of one BMC yields."""

    chassis: list[ChassisPower] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)  # vendor, model, firmware
    invalid: dict[str, int] = field(default_factory=dict)  # reason -> values dropped

    def drop(self, reason: str, n: int = 1) -> None:
        """Count a value the BMC answered that is not a reading."""
        self.invalid[reason] = self.invalid.get(reason, 0) + n
