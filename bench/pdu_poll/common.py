"""What every part of the PDU poll bench uses: settings, and what a poll must read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.synthetic_pdu import (
    Row,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent
MODULE_TEMPLATE = DATA / "snmp_exporter_module.yml"
PROFILE = "apc_rpdu2"
SNMP_EXPORTER = "prometheus-snmp-exporter"
SNMPBULKWALK = "snmpbulkwalk"
TIMEOUT, RETRIES, MAX_REPETITIONS = 2.0, 1, 25
CPU_GOAL_US = 60.0
TOOLS = ("wattbit", "snmp_exporter", "net-snmp")

# --- what a poll must read (the recordings are tests/support/synthetic_pdu.py's) ----------------


@dataclass(frozen=True)
class Expect:
    """What a complete read of one PDU yields."""

    outlets: int
    values: int  # rows of the 7 metric columns
    power_sum: int  # sum of the outlet power column (W)


@dataclass(frozen=True)
class Columns:
    """The profile's subtrees and metric columns (what every tool must read)."""

    roots: list[str]
    outlet_metrics: list[str]
    unit_metrics: list[str]
    outlet_power: str

    @property
    def metrics(self) -> list[str]:
        return [*self.outlet_metrics, *self.unit_metrics]

    def column_of(self, oid: str) -> str | None:
        """The metric column an instance OID belongs to."""
        parent = oid.rpartition(".")[0]
        return parent if parent in self._metric_set else None

    @property
    def _metric_set(self) -> frozenset[str]:
        return frozenset(self.metrics)


def expect_of(rows: list[Row], cols: Columns) -> Expect:
    counted = [(o, v) for o, t, v in rows if cols.column_of(o) is not None]
    outlets = {o for o, _ in counted if o.rpartition(".")[0] in cols.outlet_metrics}
    power = [int(v) for o, v in counted if o.rpartition(".")[0] == cols.outlet_power]
    return Expect(len(outlets) // len(cols.outlet_metrics), len(counted), sum(power))
